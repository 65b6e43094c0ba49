"""Errors: one class per problem code the services answer, under a class per kind of failure.

Every error a service answers is an RFC 9457 problem document with a stable ``code``; the client
raises the class registered for that code (``WrongSeq`` for ``wrong_seq``), or, for a code this
release does not know, the class for its HTTP status. Each keeps the whole document in
``problem`` (members such as ``expected_seq`` or ``current_epoch`` help a caller act on it).
"""

from __future__ import annotations

from typing import Any, ClassVar


class SessionlogError(Exception):
    """Anything the client raises."""


class InvalidArgument(SessionlogError, ValueError):
    """An argument the client refuses before sending anything (a session id that is not a
    UUID, an empty approval id): a ``ValueError`` too."""


class TransportError(SessionlogError):
    """The service could not be reached or did not answer, after every retry. ``sent`` says
    whether a request may have reached it (an answer lost, a timeout after sending); ``False``
    when no attempt got as far as a connection (refused, unresolved), so nothing was done."""

    def __init__(self, message: str, *, sent: bool = True) -> None:
        super().__init__(message)
        self.sent = sent


class ProblemError(SessionlogError):
    """A service answered an error (a problem document)."""

    #: The problem code the class stands for (empty for the per-status classes).
    code_name: ClassVar[str] = ""
    #: Whether sending the same request again may succeed (the client already did, until its
    #: retry deadline).
    retryable: ClassVar[bool] = False

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        self.status = status
        self.problem = problem
        self.code: str = str(problem.get("code", "")) or self.code_name
        self.detail: str = str(problem.get("detail", problem.get("title", "")))
        super().__init__(f"{status} {self.code}: {self.detail}")


class BadRequest(ProblemError):
    """400: the request is malformed; fix it before sending it again."""


class Unauthenticated(ProblemError):
    """401: no credential, or one the service does not accept (expired, wrong audience, unknown key)."""

    code_name = "unauthenticated"


class Forbidden(ProblemError):
    """403: the credential lacks the role this operation needs."""

    code_name = "forbidden"


class NotFound(ProblemError):
    """404: no such session (or not one the credential may see), or no such route."""


class Conflict(ProblemError):
    """409: the session's log disagrees with the request (another writer, an ended session, ...)."""


class TooLarge(ProblemError):
    """413: the request is bigger than the service accepts."""


class Unprocessable(ProblemError):
    """422: well-formed, but not a valid request or event."""


class Unavailable(ProblemError):
    """503: a server behind the service (Kafka, the registry, CQL) is down; retried until the deadline."""

    retryable = True


class InternalError(ProblemError):
    """500: a bug or a misconfiguration in the service; not worth retrying."""

    code_name = "internal"


# One class per code, so that `except WrongSeq` and `isinstance(e, Fenced)` read as what they mean.


class MalformedJson(BadRequest):
    """The body is not JSON."""

    code_name = "malformed_json"


class BadSessionId(BadRequest):
    """The path's session id is not a UUID."""

    code_name = "bad_session_id"


class BadPath(BadRequest):
    """A path parameter is malformed."""

    code_name = "bad_path"


class BadQuery(BadRequest):
    """A query parameter is malformed."""

    code_name = "bad_query"


class BadRequestBody(BadRequest):
    """The body names both or neither of two exclusive fields."""

    code_name = "bad_request_body"


class BadRange(BadRequest):
    """A range read's seqs or times are out of order or too far apart."""

    code_name = "bad_range"


class BadLimit(BadRequest):
    """A page size is outside 1-1000."""

    code_name = "bad_limit"


class BadCursor(BadRequest):
    """A page cursor is malformed or names another read."""

    code_name = "bad_cursor"


class UnknownKind(BadRequest):
    """An event kind this service does not know."""

    code_name = "unknown_kind"


class UnknownSession(NotFound):
    """No such session (or not one the credential may see)."""

    code_name = "unknown_session"


class UnknownName(NotFound):
    """No session of this name in the caller's tenant."""

    code_name = "unknown_name"


class NoSuchRoute(NotFound):
    """No such route: check the service's base URL."""

    code_name = "no_such_route"


class AlreadyStarted(Conflict):
    """A session with this id exists already."""

    code_name = "already_started"


class WrongSeq(Conflict):
    """An event's seq is not the next one (`expected_seq` says which is)."""

    code_name = "wrong_seq"


class NameTaken(Conflict):
    """The caller's tenant has a session of this name already; ``session_id`` is that session."""

    code_name = "name_taken"

    @property
    def session_id(self) -> str | None:
        """The session the name points to (``None`` if the service did not say)."""
        found = self.problem.get("session_id")
        return str(found) if found else None


class SeqConflict(Conflict):
    """Another event holds this seq."""

    code_name = "seq_conflict"


class Fenced(Conflict):
    """Another writer claimed the session: this one may not append any more."""

    code_name = "fenced"


class UnknownEpoch(Conflict):
    """The epoch was never claimed."""

    code_name = "unknown_epoch"


class LostClaim(Conflict):
    """A concurrent claim won the epoch."""

    code_name = "lost_claim"


class SessionEnded(Conflict):
    """The session has ended."""

    code_name = "session_ended"


class StartDeleted(Conflict):
    """The session's first event is gone from the log (retention)."""

    code_name = "start_deleted"


class AwaitingApproval(Conflict):
    """The session waits for an approval decision."""

    code_name = "awaiting_approval"


class NeedsResolution(Conflict):
    """A tool call's outcome is unknown and its effect forbids running it again: an operator must record it."""

    code_name = "needs_resolution"


class UnverifiedDecision(Conflict):
    """A decision was not recorded by the recovery service."""

    code_name = "unverified_decision"


class SessionErased(Conflict):
    """The session was erased."""

    code_name = "session_erased"


class TooMany(TooLarge):
    """More events than one append takes (128)."""

    code_name = "too_many_events"


class TooLargeBody(TooLarge):
    """An event or body is over the size limit."""

    code_name = "too_large"


class InvalidRequest(Unprocessable):
    """The body has the wrong shape."""

    code_name = "invalid_request"


class InvalidIdentifier(Unprocessable):
    """An identifier (an approval id, an idempotency key, a framework key, a session name) is
    empty, too long, or holds characters it may not."""

    code_name = "invalid_identifier"


class InvalidEvent(Unprocessable):
    """An event's data does not fit its kind."""

    code_name = "invalid_event"


class ReservedKind(Unprocessable):
    """This kind has its own route or is the recovery service's to write."""

    code_name = "reserved_kind"


class SealedContent(Unprocessable):
    """A harness may not send sealed content."""

    code_name = "sealed_content"


class NotInDoubt(Unprocessable):
    """The call is not in doubt."""

    code_name = "not_in_doubt"


class NoSuchApproval(Unprocessable):
    """No such pending approval."""

    code_name = "no_such_approval"


class BadForkPoint(Unprocessable):
    """The fork point is not in the session."""

    code_name = "bad_fork_point"


class Backpressure(Unavailable):
    """The service is saturated; retried."""

    code_name = "backpressure"


class NotAcknowledged(Unavailable):
    """Kafka did not acknowledge the write; retried with the same ids."""

    code_name = "not_acknowledged"


class RegistryUnavailable(Unavailable):
    """The schema registry is down; retried."""

    code_name = "registry_unavailable"



class ServiceUnavailable(Unavailable):
    """Kafka, the registry or CQL is down behind the service; retried."""

    code_name = "unavailable"


class SessionPaused(Conflict):
    """The session is paused (`sessionlog pause`): resume waits for `sessionlog unpause`."""

    code_name = "session_paused"


class KeyStoreUnavailable(Unavailable):
    """The key store (the sessions' data keys) cannot be reached; retried."""

    code_name = "key_store_unavailable"


class Paused(SessionPaused):
    """A gate refusal: the session is paused, so no writer may claim it or append (`sessionlog unpause`)."""

    code_name = "paused"


class CallInDoubtConflict(Conflict):
    """A claim refused because a non-idempotent call's outcome is unknown: take the session over
    through the recovery service (``Session.resume``), which settles or stops on it."""

    code_name = "call_in_doubt"


class WriterTokenRequired(Conflict):
    """The session's writer proves itself with the token its create, claim or resume answered
    (header ``Sessionlog-Writer-Token``), and this request had none or another writer's."""

    code_name = "writer_token_required"


class NotStarted(Conflict):
    """The session's first event is not in the log yet."""

    code_name = "not_started"


class ForkOfWaitingSession(Conflict):
    """A session that waits for an approval or an operator cannot be forked."""

    code_name = "fork_of_waiting_session"


class IndexMismatch(InternalError):
    """The projection's event index disagrees with the log (a replay is due)."""

    code_name = "index_mismatch"


class UnsupportedMediaType(ProblemError):
    """The body is not ``application/json``."""

    code_name = "unsupported_media_type"


class MethodNotAllowed(ProblemError):
    """The route does not take this method."""

    code_name = "method_not_allowed"


class UnreadableBody(BadRequest):
    """The body could not be read."""

    code_name = "unreadable_body"


_BY_CODE: dict[str, type[ProblemError]] = {
    cls.code_name: cls
    for cls in [
        Unauthenticated, Forbidden, InternalError, MalformedJson, BadSessionId, BadPath, BadQuery,
        BadRequestBody, BadRange, BadLimit, BadCursor, UnknownKind, UnknownSession, UnknownName, NoSuchRoute,
        AlreadyStarted, NameTaken, InvalidIdentifier, WrongSeq, SeqConflict, Fenced, UnknownEpoch, LostClaim, SessionEnded,
        StartDeleted, AwaitingApproval, NeedsResolution, UnverifiedDecision, SessionErased, TooMany,
        TooLargeBody, InvalidRequest, InvalidEvent, ReservedKind, SealedContent, NotInDoubt,
        NoSuchApproval, BadForkPoint, Backpressure, NotAcknowledged, RegistryUnavailable,
        ServiceUnavailable, SessionPaused, KeyStoreUnavailable, NotStarted, ForkOfWaitingSession, IndexMismatch,
        UnsupportedMediaType, MethodNotAllowed, UnreadableBody, Paused, CallInDoubtConflict, WriterTokenRequired,
    ]
}
_BY_STATUS: dict[int, type[ProblemError]] = {
    400: BadRequest, 401: Unauthenticated, 403: Forbidden, 404: NotFound, 405: MethodNotAllowed,
    409: Conflict, 413: TooLarge, 415: UnsupportedMediaType, 422: Unprocessable, 500: InternalError,
    503: Unavailable,
}


def problem_error(status: int, problem: dict[str, Any]) -> ProblemError:
    """The exception for a problem document answered with ``status``."""
    cls = _BY_CODE.get(str(problem.get("code", "")))
    if cls is None:
        cls = _BY_STATUS.get(status, Unavailable if status >= 500 else ProblemError)
    return cls(status, problem)


class ToolFailed(SessionlogError):
    """A durable tool's call failed, now or when it was first run (its recorded output says how)."""

    def __init__(self, tool: str, call_seq: int, output: str) -> None:
        self.tool, self.call_seq, self.output = tool, call_seq, output
        super().__init__(f"tool {tool!r} (call seq {call_seq}) failed: {output}")


class ToolFailedDefinitively(Exception):
    """Raised by a durable tool's function to say that its call failed and did nothing a retry
    would repeat: the call is recorded as ``Failed`` and answers ``ToolFailed`` when it comes
    again. Any other exception leaves the call's outcome unknown (see ``sessionlog.tools``).
    Raise it ``from`` the error that proves the failure; its message is the recorded output."""


class CallInDoubt(SessionlogError):
    """A tool call was requested and its outcome never recorded, and its effect class forbids
    running it again: an operator records what it did (``sessionlog resolve``), then the
    session resumes."""

    def __init__(self, tool: str, call_seq: int) -> None:
        self.tool, self.call_seq = tool, call_seq
        super().__init__(
            f"tool {tool!r} (call seq {call_seq}) may or may not have run; "
            f"record its outcome with `sessionlog resolve SESSION --call-seq {call_seq}` and resume"
        )


class NotReady(SessionlogError):
    """The history a read needed did not reach the projection before the deadline (is `sessionlog
    project` running for this topic?)."""
