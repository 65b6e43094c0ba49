"""sessionlog for Python harnesses: clients for the ingest and recovery services, a session
writer with resume, and durable tools that never repeat a recorded side effect."""

from . import errors
from .client import AsyncClient, Client, Credential
from .errors import (
    AwaitingApproval,
    CallInDoubt,
    CallInDoubtConflict,
    Fenced,
    InvalidArgument,
    NameTaken,
    NeedsResolution,
    NotReady,
    Paused,
    ProblemError,
    SessionEnded,
    SessionlogError,
    ToolFailed,
    ToolFailedDefinitively,
    TransportError,
    UnknownName,
    UnknownSession,
    WriterTokenRequired,
    WrongSeq,
)
from .ledger import RecordedResult, SessionLedger, ToolCall
from .models import (
    Appended,
    CallOutcome,
    EffectClass,
    EventAck,
    EventPage,
    HistoryEvent,
    InDoubtCall,
    Lease,
    McpAccess,
    NamedSession,
    Opened,
    ResumeBundle,
    SecretNotice,
    SessionView,
    TerminalOutcome,
)
from .session import AsyncSession, Session
from .tools import CallInfo, current_call, durable_tool
from .worker import AsyncWorker, Wake, Work, Worker

__all__ = [
    "Appended", "AsyncClient", "AsyncSession", "AwaitingApproval", "CallInDoubt", "CallInDoubtConflict", "CallInfo",
    "CallOutcome", "Client", "Credential", "EffectClass", "EventAck", "EventPage", "Fenced", "HistoryEvent",
    "InDoubtCall", "InvalidArgument", "Lease", "McpAccess", "NameTaken", "NamedSession", "NeedsResolution", "NotReady", "Opened", "Paused",
    "ProblemError", "RecordedResult", "ResumeBundle", "SecretNotice", "Session", "SessionView", "SessionEnded", "SessionLedger",
    "SessionlogError", "TerminalOutcome", "ToolCall", "ToolFailed", "ToolFailedDefinitively", "TransportError",
    "UnknownName", "UnknownSession", "WriterTokenRequired", "WrongSeq", "current_call", "durable_tool", "errors",
    "AsyncWorker", "Wake", "Work", "Worker",
]
