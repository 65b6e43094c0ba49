/**
 * Errors: one class per problem `code` the services answer, under a class per kind of failure,
 * as clients/python/src/sessionlog/errors.py has them.
 *
 * Every error a service answers is an RFC 9457 problem document with a stable `code`; the client
 * throws the class registered for that code (`WrongSeq` for `wrong_seq`), or, for a code this
 * release does not know, the class for its HTTP status. Each keeps the whole document in
 * `problem` (members such as `expected_seq` or `current_epoch` help a caller act on it).
 */

/** A problem document (RFC 9457) as a service answers it. */
export interface Problem {
  type?: string;
  title?: string;
  status?: number;
  detail?: string;
  code?: string;
  [member: string]: unknown;
}

/** Anything the client throws. */
export class SessionlogError extends Error {
  override name = "SessionlogError";
}

/** An argument the client refuses before sending anything (a session id that is not a UUID, an empty path segment). */
export class InvalidArgument extends SessionlogError {
  override name = "InvalidArgument";
}

/**
 * The service could not be reached or did not answer, after every retry. `sent` says whether a
 * request may have reached it (an answer lost, a timeout after sending); `false` when no attempt
 * got as far as a connection (refused, unresolved), so nothing was done.
 */
export class TransportError extends SessionlogError {
  override name = "TransportError";
  constructor(message: string, readonly sent: boolean = true, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/** A service answered an error (a problem document). */
export class ProblemError extends SessionlogError {
  /** The problem code the class stands for (empty for the per-status classes). */
  static readonly code: string = "";
  /** Whether sending the same request again may succeed (the client already did, until its retry deadline). */
  static readonly retryable: boolean = false;
  readonly code: string;
  readonly detail: string;
  constructor(readonly status: number, readonly problem: Problem) {
    const ctor = new.target as unknown as typeof ProblemError;
    const code = String(problem.code ?? "") || ctor.code;
    const detail = String(problem.detail ?? problem.title ?? "");
    super(`${status} ${code}: ${detail}`);
    this.name = new.target.name;
    this.code = code;
    this.detail = detail;
  }
  /** Whether sending the same request again may succeed. */
  get retryable(): boolean {
    return (this.constructor as typeof ProblemError).retryable;
  }
}

/** 400: the request is malformed; fix it before sending it again. */
export class BadRequest extends ProblemError {}
/** 401: no credential, or one the service does not accept (expired, wrong audience, unknown key). */
export class Unauthenticated extends ProblemError { static override readonly code: string = "unauthenticated"; }
/** 401 for a credential the service does not accept (expired, wrong audience, bad signature, unknown key). */
export class InvalidToken extends Unauthenticated { static override readonly code = "invalid_token"; }
/** 403: the credential lacks the role this operation needs. */
export class Forbidden extends ProblemError { static override readonly code = "forbidden"; }
/** 404: no such session (or not one the credential may see), or no such route. */
export class NotFound extends ProblemError {}
/** 409: the session's log disagrees with the request (another writer, an ended session, ...). */
export class Conflict extends ProblemError {}
/** 413: the request is bigger than the service accepts. */
export class TooLarge extends ProblemError {}
/** 422: well-formed, but not a valid request or event. */
export class Unprocessable extends ProblemError {}
/** 503: a server behind the service (Kafka, the registry, CQL) is down; retried until the deadline. */
export class Unavailable extends ProblemError { static override readonly retryable: boolean = true; }
/** 500: a bug or a misconfiguration in the service; not worth retrying. */
export class InternalError extends ProblemError { static override readonly code: string = "internal"; }
/** 415: the body is not `application/json`. */
export class UnsupportedMediaType extends ProblemError { static override readonly code = "unsupported_media_type"; }
/** 405: the route does not take this method. */
export class MethodNotAllowed extends ProblemError { static override readonly code = "method_not_allowed"; }

/** The body is not JSON. */
export class MalformedJson extends BadRequest { static override readonly code = "malformed_json"; }
/** The path's session id is not a UUID. */
export class BadSessionId extends BadRequest { static override readonly code = "bad_session_id"; }
/** A path parameter is malformed. */
export class BadPath extends BadRequest { static override readonly code = "bad_path"; }
/** A query parameter is malformed. */
export class BadQuery extends BadRequest { static override readonly code = "bad_query"; }
/** The body names both or neither of two exclusive fields. */
export class BadRequestBody extends BadRequest { static override readonly code = "bad_request_body"; }
/** A range read's seqs or times are out of order or too far apart. */
export class BadRange extends BadRequest { static override readonly code = "bad_range"; }
/** A page size is outside 1-1000. */
export class BadLimit extends BadRequest { static override readonly code = "bad_limit"; }
/** A page cursor is malformed or names another read. */
export class BadCursor extends BadRequest { static override readonly code = "bad_cursor"; }
/** An event kind this service does not know. */
export class UnknownKind extends BadRequest { static override readonly code = "unknown_kind"; }
/** The body could not be read. */
export class UnreadableBody extends BadRequest { static override readonly code = "unreadable_body"; }

/** No such session (or not one the credential may see). */
export class UnknownSession extends NotFound { static override readonly code = "unknown_session"; }
/** No session of this name in the caller's tenant. */
export class UnknownName extends NotFound { static override readonly code = "unknown_name"; }
/** No such route: check the service's base URL. */
export class NoSuchRoute extends NotFound { static override readonly code = "no_such_route"; }

/** A session with this id exists already. */
export class AlreadyStarted extends Conflict { static override readonly code = "already_started"; }
/** An event's seq is not the next one (`expected_seq` says which is). */
export class WrongSeq extends Conflict { static override readonly code = "wrong_seq"; }
/** The caller's tenant has a session of this name already; `sessionId` is that session. */
export class NameTaken extends Conflict {
  static override readonly code = "name_taken";
  /** The session the name points to (`undefined` if the service did not say). */
  get sessionId(): string | undefined {
    const found = this.problem["session_id"];
    return found ? String(found) : undefined;
  }
}
/** Another event holds this seq. */
export class SeqConflict extends Conflict { static override readonly code = "seq_conflict"; }
/** Another writer claimed the session: this one may not append any more. */
export class Fenced extends Conflict { static override readonly code = "fenced"; }
/** The epoch was never claimed. */
export class UnknownEpoch extends Conflict { static override readonly code = "unknown_epoch"; }
/** A concurrent claim won the epoch. */
export class LostClaim extends Conflict { static override readonly code = "lost_claim"; }
/** The session has ended. */
export class SessionEnded extends Conflict { static override readonly code = "session_ended"; }
/** The session's first event is gone from the log (retention). */
export class StartDeleted extends Conflict { static override readonly code = "start_deleted"; }
/** The session waits for an approval decision. */
export class AwaitingApproval extends Conflict { static override readonly code = "awaiting_approval"; }
/** A tool call's outcome is unknown and its effect forbids running it again: an operator must record it. */
export class NeedsResolution extends Conflict { static override readonly code = "needs_resolution"; }
/** A decision was not recorded by the recovery service. */
export class UnverifiedDecision extends Conflict { static override readonly code = "unverified_decision"; }
/** The session was erased. */
export class SessionErased extends Conflict { static override readonly code = "session_erased"; }
/** The session is paused (`sessionlog pause`): resume waits for `sessionlog unpause`. */
export class SessionPaused extends Conflict { static override readonly code: string = "session_paused"; }
/** A gate refusal: the session is paused, so no writer may claim it or append (`sessionlog unpause`). */
export class Paused extends SessionPaused { static override readonly code = "paused"; }
/**
 * A claim refused because a non-idempotent call's outcome is unknown: take the session over
 * through the recovery service (`Session.resume`), which settles or stops on it.
 */
export class CallInDoubtConflict extends Conflict { static override readonly code = "call_in_doubt"; }
/**
 * The session's writer proves itself with the token its create, claim or resume answered (header
 * `Sessionlog-Writer-Token`), and this request had none or another writer's.
 */
export class WriterTokenRequired extends Conflict { static override readonly code = "writer_token_required"; }
/** The session's first event is not in the log yet. */
export class NotStarted extends Conflict { static override readonly code = "not_started"; }
/** A session that waits for an approval or an operator cannot be forked. */
export class ForkOfWaitingSession extends Conflict { static override readonly code = "fork_of_waiting_session"; }

/** More events than one append takes (128). */
export class TooMany extends TooLarge { static override readonly code = "too_many_events"; }
/** An event or body is over the size limit. */
export class TooLargeBody extends TooLarge { static override readonly code = "too_large"; }

/** The body has the wrong shape. */
export class InvalidRequest extends Unprocessable { static override readonly code = "invalid_request"; }
/** An identifier (an approval id, an idempotency key, a framework key, a session name) is empty, too long, or holds characters it may not. */
export class InvalidIdentifier extends Unprocessable { static override readonly code = "invalid_identifier"; }
/** An event's data does not fit its kind. */
export class InvalidEvent extends Unprocessable { static override readonly code = "invalid_event"; }
/** This kind has its own route or is the recovery service's to write. */
export class ReservedKind extends Unprocessable { static override readonly code = "reserved_kind"; }
/** A harness may not send sealed content. */
export class SealedContent extends Unprocessable { static override readonly code = "sealed_content"; }
/** The call is not in doubt. */
export class NotInDoubt extends Unprocessable { static override readonly code = "not_in_doubt"; }
/** No such pending approval. */
export class NoSuchApproval extends Unprocessable { static override readonly code = "no_such_approval"; }
/** The fork point is not in the session. */
export class BadForkPoint extends Unprocessable { static override readonly code = "bad_fork_point"; }

/** The service is saturated; retried. */
export class Backpressure extends Unavailable { static override readonly code = "backpressure"; }
/** Kafka did not acknowledge the write; retried with the same ids. */
export class NotAcknowledged extends Unavailable { static override readonly code = "not_acknowledged"; }
/** The schema registry is down; retried. */
export class RegistryUnavailable extends Unavailable { static override readonly code = "registry_unavailable"; }
/** Kafka, the registry or CQL is down behind the service; retried. */
export class ServiceUnavailable extends Unavailable { static override readonly code = "unavailable"; }
/** The key store (the sessions' data keys) cannot be reached; retried. */
export class KeyStoreUnavailable extends Unavailable { static override readonly code = "key_store_unavailable"; }

/** The service's tail of the log has not read this far yet; retried (with `Retry-After`). */
export class TailBehind extends Unavailable { static override readonly code = "tail_behind"; }
/** A cold append or claim would read too much the projector has not applied; retried (with `Retry-After`). */
export class ProjectionBehind extends Unavailable { static override readonly code = "projection_behind"; }
/** The instance keeps wake consumers for too many agents already; retried (with `Retry-After`). */
export class TooManyAgents extends Unavailable { static override readonly code = "too_many_agents"; }
/** The service keeps no writer leases (`[lease]` is off). */
export class LeasesOff extends Conflict { static override readonly code = "leases_off"; }

/** The projection's event index disagrees with the log (a replay is due). */
export class IndexMismatch extends InternalError { static override readonly code = "index_mismatch"; }

type ProblemClass = (new (status: number, problem: Problem) => ProblemError) & { readonly code: string };

const BY_CODE: ReadonlyMap<string, ProblemClass> = new Map(
  ([
    Unauthenticated, InvalidToken, Forbidden, InternalError, MalformedJson, BadSessionId, BadPath, BadQuery, BadRequestBody,
    BadRange, BadLimit, BadCursor, UnknownKind, UnknownSession, UnknownName, NoSuchRoute, AlreadyStarted, NameTaken,
    InvalidIdentifier, WrongSeq, SeqConflict, Fenced, UnknownEpoch, LostClaim, SessionEnded, StartDeleted,
    AwaitingApproval, NeedsResolution, UnverifiedDecision, SessionErased, TooMany, TooLargeBody, InvalidRequest,
    InvalidEvent, ReservedKind, SealedContent, NotInDoubt, NoSuchApproval, BadForkPoint, Backpressure,
    NotAcknowledged, RegistryUnavailable, ServiceUnavailable, SessionPaused, KeyStoreUnavailable, NotStarted,
    ForkOfWaitingSession, IndexMismatch, UnsupportedMediaType, MethodNotAllowed, UnreadableBody, Paused,
    CallInDoubtConflict, WriterTokenRequired, TailBehind, ProjectionBehind, TooManyAgents, LeasesOff,
  ] as ProblemClass[]).map((cls) => [cls.code, cls]),
);

const BY_STATUS: ReadonlyMap<number, ProblemClass> = new Map<number, ProblemClass>([
  [400, BadRequest], [401, Unauthenticated], [403, Forbidden], [404, NotFound], [405, MethodNotAllowed],
  [409, Conflict], [413, TooLarge], [415, UnsupportedMediaType], [422, Unprocessable], [500, InternalError],
  [503, Unavailable],
]);

/** The error for a problem document answered with `status`. */
export function problemError(status: number, problem: Problem): ProblemError {
  const cls = BY_CODE.get(String(problem.code ?? "")) ?? BY_STATUS.get(status) ?? (status >= 500 ? Unavailable : ProblemError);
  return new cls(status, problem);
}

/** A durable tool's call failed, now or when it was first run (its recorded output says how). */
export class ToolFailed extends SessionlogError {
  override name = "ToolFailed";
  constructor(readonly tool: string, readonly callSeq: number, readonly output: string) {
    super(`tool ${JSON.stringify(tool)} (call seq ${callSeq}) failed: ${output}`);
  }
}

/**
 * Thrown by a durable tool's function to say that its call failed and did nothing a retry would
 * repeat: the call is recorded as `Failed` and answers `ToolFailed` when it comes again. Any other
 * error leaves the call's outcome unknown (see `durableTool`). Its message is the recorded output.
 */
export class ToolFailedDefinitively extends Error {
  override name = "ToolFailedDefinitively";
}

/**
 * A tool call was requested and its outcome never recorded, and its effect class forbids running
 * it again: an operator records what it did (`sessionlog resolve`), then the session resumes.
 */
export class CallInDoubt extends SessionlogError {
  override name = "CallInDoubt";
  constructor(readonly tool: string, readonly callSeq: number) {
    super(
      `tool ${JSON.stringify(tool)} (call seq ${callSeq}) may or may not have run; ` +
        `record its outcome with \`sessionlog resolve SESSION --call-seq ${callSeq}\` and resume`,
    );
  }
}

/** The history a read needed did not reach the projection before the deadline (is `sessionlog project` running for this topic?). */
export class NotReady extends SessionlogError {
  override name = "NotReady";
}
