/**
 * What the services answer, as typed values. The JSON shapes are the services' OpenAPI documents
 * (src/generated, from `sessionlog openapi --service ingest|recovery`); these read them into
 * camelCase values, as clients/python/src/sessionlog/models.py does into dataclasses.
 */
import type { components as Ingest } from "./generated/ingest.js";
import type { components as Recovery } from "./generated/recovery.js";
import { SessionlogError } from "./errors.js";

/** What running a tool call again would do; recovery settles a call in doubt by it. */
export type EffectClass = Recovery["schemas"]["EffectClass"];
/** How a tool call ended. */
export type CallOutcome = Recovery["schemas"]["CallOutcome"];
/** How a session ended. */
export type TerminalOutcome = Ingest["schemas"]["TerminalOutcome"];

/** A JSON object as a service answers it. */
export type Json = Record<string, unknown>;

/** One event's durable position in the log. */
export interface EventAck {
  seq: number;
  eventId: string;
  partition: number;
  offset: number;
  /** True when the event had been written before (a retry): the position is the first write's. */
  duplicate: boolean;
  /** Secrets the service's scan found in the event's texts (`[privacy] secret_scan`); empty when none. */
  secrets: SecretNotice[];
}

/** A secret the service's scan found in a text of an appended event. It never holds the text. */
export interface SecretNotice {
  /** The field (`output`, `arguments`, `content`, ...). */
  field: string;
  /** The id of the rule that matched (`aws-access-token`, `private-key`, ...). */
  rule: string;
  /** `redacted`: written without its text and redacted at once (it reads as redacted, with `reason`, everywhere); `warned`: written sealed as usual. */
  action: "redacted" | "warned";
  /** The redaction's reason: `secret detected: RULE`. */
  reason: string;
}

/** A writer's lease on a session, as ingest wrote it: liveness, not permission to write. */
export interface Lease {
  sessionId: string;
  writer: string;
  epoch: number;
  /** Microseconds since the Unix epoch. */
  renewedAt: number;
  expiresAt: number;
  /** The service's `[lease] ttl_ms`: renew every third of it. */
  ttlMs: number;
}

/** A created or claimed session: the epoch to write with and the next seq. */
export interface Opened {
  sessionId: string;
  epoch: number;
  nextSeq: number;
  event: EventAck;
  /** What proves this writer on its appends, checkpoints and close (undefined from a service that issues none). A secret: never log it. */
  writerToken: string | undefined;
  /** The session's name within its tenant, when it was created with one. */
  name: string | undefined;
}

/** The session a name points to within the caller's tenant, and whether this call made it. */
export interface NamedSession {
  sessionId: string;
  name: string;
  /** The create's answer when this call started the session; undefined when the name pointed to one already (take it over with claim or resume). */
  opened: Opened | undefined;
}

/** An append's answer: each event's position, in request order. */
export interface Appended {
  sessionId: string;
  nextSeq: number;
  events: EventAck[];
}

/** A tool call with no recorded result that the resumed harness may settle itself. */
export interface InDoubtCall {
  seq: number;
  eventId: string;
  tool: string;
  effect: EffectClass;
  idempotencyKey: string | undefined;
  /** `RunAgain` (a pure call) or `ReissueWithSameKey` (an idempotent call its service never received). */
  action: string;
}

/** What a new harness gets when it takes a session over. */
export interface ResumeBundle {
  sessionId: string;
  epoch: number;
  nextSeq: number;
  /** Calls to settle before going on. */
  inDoubt: InDoubtCall[];
  /** The session's state as the log had it (`last_seq`, `pending_calls`, `status`...). */
  state: Json;
  /** The working set for the next model call, within the token budget asked for. */
  context: Json;
  /** Results recovery learned from the tools' services and recorded, as log events. */
  resolved: Json[];
  /** What proves the resumed writer (see `Opened.writerToken`). */
  writerToken: string | undefined;
  /** The MCP server the agent's model can read the session's history from, with a reader token
   * for the session; undefined unless recovery is configured with one (`[recovery.mcp]`). */
  mcp: McpAccess | undefined;
}

/** The MCP server over a session's history (`sessionlog mcp`), as a resume bundle names it. */
export interface McpAccess {
  /** The Streamable HTTP endpoint. */
  url: string;
  /** `Authorization: Bearer <token>`: the `reader` role on this session only; undefined when
   * recovery holds no token key (bring a credential of your own). */
  token: string | undefined;
  /** When the token stops being valid. */
  expiresAt: Date | undefined;
}

/** A session rebuilt from the log to its end. */
export interface SessionView {
  /** The folded state (`last_seq`, `epoch`, `pending_calls`, `terminal`, ...), texts opened. */
  state: Json;
  /** `running`, `completed`, `needs_resolution`, ... */
  status: string;
  digest: string;
  /** The writer lease (`writer`, `epoch`, `renewed_at`, `expires_at`, `live`), or undefined. */
  lease: Json | undefined;
  /** When the session's pause lapses, or undefined. */
  pausedUntil: Date | undefined;
}

/** A fork's answer: the new session and where its first event is. */
export interface Forked {
  sessionId: string;
  partition: number;
  offset: number;
  /** The new session's first event (`SessionForked`), as the log has it. */
  event: Json;
}

/** Reads a `Forked`. */
export function forked(doc: unknown): Forked {
  const d = object(doc, "fork answer");
  return { sessionId: str(d, "session_id"), partition: int(d, "partition"), offset: int(d, "offset"), event: object(d["event"], "fork's event") };
}

/** Why a session was woken (`Wake.reason`). */
export type WakeReason = "lease_expired" | "approval_decided" | "operator_result" | "pause_elapsed" | "steering" | "unpaused";

/** Why a session was handed to a worker, as its wake record says. */
export interface Wake {
  sessionId: string;
  agent: string;
  /** Why it needed a harness (a reason of a newer service is passed on as it is). */
  reason: WakeReason | (string & {});
  /** The session's epoch when the cause happened (the worker took the next one or later). */
  epoch: number;
  /** When the cause happened (the lease's expiry, the event's time, the pause's end), in microseconds since the Unix epoch. */
  causedAt: number;
  /** When the wake was written, in microseconds since the Unix epoch. */
  wokenAt: number;
  /** The offset of the causing event in its partition of the events topic, for reasons an event causes. */
  causeOffset: number | undefined;
}

/** A session the recovery service took for a worker (`GET /v1/work`): the resume bundle and the wake. */
export interface Work {
  bundle: ResumeBundle;
  wake: Wake;
}

/** Reads the answer of `GET /v1/work`: undefined for an empty one (204, no work within the wait). */
export function work(doc: unknown): Work | undefined {
  const d = object(doc, "work");
  if (Object.keys(d).length === 0) return undefined;
  const w = object(d["wake"], "wake");
  const offset = w["cause_offset"];
  return {
    bundle: resumeBundle(d),
    wake: {
      sessionId: str(w, "session_id"), agent: str(w, "agent"), reason: str(w, "reason"), epoch: int(w, "epoch"),
      causedAt: int(w, "caused_at"), wokenAt: int(w, "woken_at"), causeOffset: typeof offset === "number" ? offset : undefined,
    },
  };
}

/** Where a forked session branched off its parent. */
export interface ForkPoint {
  parentSessionId: string;
  /** The last parent event the child inherits. */
  parentSeq: number;
}

/** A session's ancestors (parent first, each with its fork point) and the sessions forked from it. */
export interface Lineage {
  sessionId: string;
  ancestors: ForkPoint[];
  /** Direct forks with the seq they forked at, as the projection knows them. */
  children: { sessionId: string; atSeq: number }[];
  /** True for a credential narrowed to the session: its parent as an id, nothing further. */
  withheld: boolean;
}

/** Reads a `Lineage` (`children` are `[id, seq]` pairs in the answer). */
export function lineage(doc: unknown): Lineage {
  const d = object(doc, "lineage");
  const list = (member: string) => (Array.isArray(d[member]) ? (d[member] as unknown[]) : []);
  return {
    sessionId: str(d, "session_id"),
    ancestors: list("ancestors").map((a) => {
      const f = object(a, "fork point");
      return { parentSessionId: str(f, "parent_session_id"), parentSeq: int(f, "parent_seq") };
    }),
    children: list("children").map((c) => {
      if (!Array.isArray(c) || typeof c[0] !== "string" || typeof c[1] !== "number") throw new SessionlogError("lineage: a child is not [id, seq]");
      return { sessionId: c[0], atSeq: c[1] };
    }),
    withheld: d["withheld"] === true,
  };
}

/** One event of a range read, its texts opened. */
export interface HistoryEvent {
  sessionId: string;
  seq: number;
  kind: string;
  occurredAt: number;
  writerEpoch: number;
  eventId: string;
  causationId: string | undefined;
  idempotencyKey: string | undefined;
  /** The kind's fields (`{content: {Plain: "..."}}`); undefined when the log no longer holds the record. */
  data: Json | undefined;
  /** Text fields that did not open, and why (`erased`, `sealed`, `unreadable`). */
  unopened: Record<string, string>;
}

/** One page of a range read; pass `nextCursor` back for the next. */
export interface EventPage {
  events: HistoryEvent[];
  nextCursor: string | undefined;
}

function object(doc: unknown, what: string): Json {
  if (typeof doc !== "object" || doc === null || Array.isArray(doc)) {
    throw new SessionlogError(`${what}: expected a JSON object, got ${doc === null ? "null" : typeof doc}`);
  }
  return doc as Json;
}

function int(doc: Json, member: string): number {
  const value = doc[member];
  if (typeof value !== "number" || !Number.isFinite(value)) {
    throw new SessionlogError(`the answer's \`${member}\` is not a number`);
  }
  return value;
}

function str(doc: Json, member: string): string {
  const value = doc[member];
  if (typeof value !== "string") throw new SessionlogError(`the answer's \`${member}\` is not a string`);
  return value;
}

function optStr(doc: Json, member: string): string | undefined {
  const value = doc[member];
  return typeof value === "string" && value !== "" ? value : undefined;
}

/** Reads an `EventAck`. */
export function eventAck(doc: unknown): EventAck {
  const d = object(doc, "event ack");
  const secrets = Array.isArray(d["secrets"]) ? d["secrets"].map(secretNotice) : [];
  return { seq: int(d, "seq"), eventId: str(d, "event_id"), partition: int(d, "partition"), offset: int(d, "offset"), duplicate: d["duplicate"] === true, secrets };
}

/** Reads a `SecretNotice`. */
export function secretNotice(doc: unknown): SecretNotice {
  const d = object(doc, "secret notice");
  const action = str(d, "action");
  if (action !== "redacted" && action !== "warned") throw new SessionlogError(`unknown secret action ${JSON.stringify(action)}`);
  return { field: str(d, "field"), rule: str(d, "rule"), action, reason: optStr(d, "reason") ?? "" };
}

/** Reads a `Lease`. */
export function lease(doc: unknown): Lease {
  const d = object(doc, "lease");
  return {
    sessionId: str(d, "session_id"), writer: str(d, "writer"), epoch: int(d, "epoch"),
    renewedAt: int(d, "renewed_at"), expiresAt: int(d, "expires_at"), ttlMs: int(d, "ttl_ms"),
  };
}

/** Reads an `Opened`. */
export function opened(doc: unknown): Opened {
  const d = object(doc, "opened session");
  return {
    sessionId: str(d, "session_id"), epoch: int(d, "epoch"), nextSeq: int(d, "next_seq"), event: eventAck(d["event"]),
    writerToken: optStr(d, "writer_token"), name: optStr(d, "name"),
  };
}

/** Reads an `Appended`. */
export function appended(doc: unknown): Appended {
  const d = object(doc, "append answer");
  const events = d["events"];
  if (!Array.isArray(events)) throw new SessionlogError("the append answer's `events` is not a list");
  return { sessionId: str(d, "session_id"), nextSeq: int(d, "next_seq"), events: events.map(eventAck) };
}

/** Reads an `InDoubtCall` (`{call: {...}, action}`). */
export function inDoubtCall(doc: unknown): InDoubtCall {
  const d = object(doc, "in-doubt call");
  const call = object(d["call"], "in-doubt call");
  return {
    seq: int(call, "seq"), eventId: str(call, "event_id"), tool: str(call, "tool"), effect: str(call, "effect") as EffectClass,
    idempotencyKey: optStr(call, "idempotency_key"), action: str(d, "action"),
  };
}

/** Reads a `ResumeBundle`. */
export function resumeBundle(doc: unknown): ResumeBundle {
  const d = object(doc, "resume bundle");
  const state = object(d["state"], "resume bundle's state");
  const inDoubt = Array.isArray(d["in_doubt"]) ? d["in_doubt"].map(inDoubtCall) : [];
  return {
    sessionId: str(state, "session_id"), epoch: int(d, "epoch"), nextSeq: int(d, "next_seq"), inDoubt, state,
    context: typeof d["context"] === "object" && d["context"] !== null ? (d["context"] as Json) : {},
    resolved: Array.isArray(d["resolved"]) ? (d["resolved"] as Json[]) : [],
    writerToken: optStr(d, "writer_token"),
    mcp: mcpAccess(d["mcp"]),
  };
}

function mcpAccess(doc: unknown): McpAccess | undefined {
  if (typeof doc !== "object" || doc === null) return undefined;
  const d = object(doc, "resume bundle's mcp");
  const expires = optStr(d, "expires_at");
  return { url: str(d, "url"), token: optStr(d, "token"), expiresAt: expires === undefined ? undefined : new Date(expires) };
}

/** Reads a `SessionView`. */
export function sessionView(doc: unknown): SessionView {
  const d = object(doc, "session view");
  const rebuilt = object(d["rebuilt"], "session view's rebuilt state");
  const until = d["paused_until"];
  const leaseDoc = d["lease"];
  return {
    state: object(rebuilt["state"], "session view's state"), status: str(d, "status"), digest: str(d, "digest"),
    lease: typeof leaseDoc === "object" && leaseDoc !== null ? (leaseDoc as Json) : undefined,
    pausedUntil: typeof until === "string" ? new Date(until) : undefined,
  };
}

/** Reads a `HistoryEvent`. */
export function historyEvent(doc: unknown): HistoryEvent {
  const d = object(doc, "history event");
  const kind = str(d, "kind");
  const event = d["event"];
  const data = typeof event === "object" && event !== null ? (event as Json)[kind] : undefined;
  return {
    sessionId: str(d, "session_id"), seq: int(d, "seq"), kind, occurredAt: int(d, "occurred_at"),
    writerEpoch: int(d, "writer_epoch"), eventId: str(d, "event_id"), causationId: optStr(d, "causation_id"),
    idempotencyKey: optStr(d, "idempotency_key"),
    data: typeof data === "object" && data !== null ? (data as Json) : undefined,
    unopened: typeof d["unopened"] === "object" && d["unopened"] !== null ? (d["unopened"] as Record<string, string>) : {},
  };
}

/** Reads an `EventPage`. */
export function eventPage(doc: unknown): EventPage {
  const d = object(doc, "event page");
  const events = Array.isArray(d["events"]) ? d["events"].map(historyEvent) : [];
  return { events, nextCursor: optStr(d, "next_cursor") };
}

/** The text of a `Content` value as a read gives it (`{Plain: "..."}`), or undefined when it did not open. */
export function textOf(content: unknown): string | undefined {
  if (typeof content === "string") return content;
  if (typeof content === "object" && content !== null && typeof (content as Json)["Plain"] === "string") {
    return (content as Json)["Plain"] as string;
  }
  return undefined;
}

/** Reads a JSON object answer as it is. */
export function json(doc: unknown): Json {
  return object(doc, "answer");
}
