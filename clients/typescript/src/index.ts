/**
 * sessionlog for TypeScript harnesses: a client for the ingest and recovery services, a session
 * writer with resume, and durable tools that never repeat a recorded side effect. The semantics
 * are the Python client's (clients/python); see docs/harnesses.md.
 */
export { Client, WRITER_TOKEN_HEADER, checkSessionId } from "./client.js";
export type { ClientOptions, Credential, EventRange, IncomingEvent } from "./client.js";
export type { TransportKind } from "./transport.js";
export * from "./errors.js";
export { Occurrences, SessionLedger, defaultKey, newSessionId, nowMicros } from "./ledger.js";
export type { CallName, Event, Plan as CallPlan, RecordedResult, ToolCall } from "./ledger.js";
export { textOf } from "./models.js";
export type {
  Appended, CallOutcome, EffectClass, EventAck, EventPage, ForkPoint, Forked, HistoryEvent, InDoubtCall, Json, Lease, Lineage, McpAccess, NamedSession,
  Opened, ResumeBundle, SecretNotice, SessionView, TerminalOutcome, Wake, WakeReason, Work,
} from "./models.js";
export {
  Session, awaitProjected, encodeJson, frameworkState, modelResponse, retraction, toolCall, toolResult, userRequest,
} from "./session.js";
export type { Plan, Usage } from "./session.js";
export { argumentDigest, currentCall, decodeOutput, durableTool, namedArguments } from "./tools.js";
export type { CallInfo, DurableToolOptions, Writer } from "./tools.js";
export { MAX_WAIT, Worker } from "./worker.js";
export type { AsyncHandler, Handler, SyncHandler, WorkerOptions } from "./worker.js";
