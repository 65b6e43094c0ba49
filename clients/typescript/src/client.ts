/**
 * `Client`: the ingest and recovery services over HTTP, no dependency: on Node through HTTP/1.1
 * sockets of its own kept alive (./http1.ts; `transport: "node"` for `node:http` instead),
 * elsewhere (or with `transport: "fetch"`) through global `fetch`.
 *
 * Every operation retries what may succeed on a second try (the service unreachable, a 503) with
 * the same request, until `retryFor` seconds have passed, backing off exponentially with jitter
 * and waiting at least what a `Retry-After` asks: a retried append carries the same seqs and event
 * ids, so the service answers it as a duplicate with the first write's position, never as a second
 * event. The routes and their answers mirror clients/python/src/sessionlog/_api.py.
 */
import * as errors from "./errors.js";
import type { components as Ingest } from "./generated/ingest.js";
import type { components as Recovery } from "./generated/recovery.js";
import { newSessionId } from "./ledger.js";
import * as models from "./models.js";
import { SocketTransport } from "./http1.js";
import { AttemptFailed, NodeTransport, fetchTransport, onNode, origin, type Origin, type Transport, type TransportKind } from "./transport.js";
import type {
  Appended, EventAck, EventPage, Forked, HistoryEvent, Json, Lease, Lineage, NamedSession, Opened, ResumeBundle, SessionView, Work,
  TerminalOutcome,
} from "./models.js";

/** A bearer credential (a JWT or an `slk_` API key), or a function answering the current one (called for every request, so a token can be refreshed). */
export type Credential = string | (() => string | Promise<string>);

/** Where the services are and how to reach them. */
export interface ClientOptions {
  /** The ingest service's base URL (default `http://127.0.0.1:8090`). */
  ingestUrl?: string;
  /** The recovery service's base URL (default `http://127.0.0.1:8095`). */
  recoveryUrl?: string;
  /** Sent as `Authorization: Bearer`. */
  token?: Credential;
  /** Seconds to retry transport errors and 503s with the same request (default 30). */
  retryFor?: number;
  /** Seconds one attempt may take (default 30). */
  timeout?: number;
  /**
   * How requests are sent: `"socket"` (HTTP/1.1 over `node:net`/`node:tls` with keep-alive
   * connections, the default on Node), `"node"` (`node:http`/`node:https` with a keep-alive
   * agent) or `"fetch"` (global `fetch`, the default elsewhere). Per request, `node:http` costs
   * about twice the CPU of `"socket"` and Node's `fetch` about five times `node:http`'s.
   */
  transport?: TransportKind;
  /** With the `"socket"` and `"node"` transports: the most connections kept to each service (default 1024); concurrent requests beyond it wait for one. */
  maxSockets?: number;
}

/** An event as an append sends it (the ingest document's `IncomingEvent`). */
export type IncomingEvent = Omit<Ingest["schemas"]["IncomingEvent"], "data"> & { data: Json };

/** A range read's bounds (`GET /v1/sessions/{id}/events`). */
export interface EventRange {
  fromSeq?: number;
  toSeq?: number;
  kinds?: readonly string[];
  limit?: number;
  cursor?: string;
  /** With a fork's ancestors' events up to each fork point, each naming its session. */
  inherited?: boolean;
}

type Service = "ingest" | "recovery";

/** One request and how to read its answer. */
interface Operation<T> {
  service: Service;
  method: "GET" | "POST" | "DELETE";
  path: string;
  decode: (doc: unknown) => T;
  body?: object;
  params?: Record<string, string>;
  /** Headers of this request only (the writer token): never logged. */
  headers?: Record<string, string>;
  /** Problems this operation answers with a value instead of throwing, by code. */
  answers?: Record<string, (problem: errors.Problem) => T>;
}

/** The header a session's writer proves itself with on appends, checkpoints, close and leases. */
export const WRITER_TOKEN_HEADER = "Sessionlog-Writer-Token";

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** `sessionId` as the canonical (lowercase) UUID; `InvalidArgument` before any round trip when it is not one (nor, with `../` in it, a request to another route). */
export function checkSessionId(sessionId: string): string {
  if (typeof sessionId !== "string" || !UUID.test(sessionId)) {
    const text = String(sessionId);
    const shown = text.length <= 80 ? JSON.stringify(text) : `${JSON.stringify(text.slice(0, 80))}... (${text.length} characters)`;
    throw new errors.InvalidArgument(`a session id is a UUID, not ${shown}`);
  }
  return sessionId.toLowerCase();
}

/**
 * `value` as one path segment, whatever it holds: `/`, `?`, `#` and `%` are escaped, so it cannot
 * end the path, start a query or name another route. A segment of only dots is refused: `fetch`
 * parses URLs by WHATWG rules, which remove `.` and `..` even escaped, and would send the request
 * to the parent's route.
 */
export function segment(value: string): string {
  if (!value) throw new errors.InvalidArgument("an empty path segment would name another route");
  if (value === "." || value === "..") {
    throw new errors.InvalidArgument(`${JSON.stringify(value)} cannot be a path segment: URLs read it as a relative path`);
  }
  return encodeURIComponent(value);
}

function sessionPath(sessionId: string, ...segments: string[]): string {
  return "/v1/sessions/" + [checkSessionId(sessionId), ...segments].map(segment).join("/");
}

function opt<T extends Record<string, unknown>>(fields: T): Partial<T> {
  return Object.fromEntries(Object.entries(fields).filter(([, v]) => v !== undefined && v !== null)) as Partial<T>;
}

function writer(token: string | undefined): Record<string, string> | undefined {
  // No header without a token: a service that issues none does not ask for one.
  return token ? { [WRITER_TOKEN_HEADER]: token } : undefined;
}

/** Whether a failed attempt certainly sent nothing: no connection was made (refused, a name that does not resolve, a connect timeout). */
function neverSent(error: unknown): boolean {
  if (error instanceof AttemptFailed) return error.unsent; // the Node transport knows whether it connected
  const cause = (error as { cause?: { code?: unknown } } | undefined)?.cause;
  const code = typeof cause?.code === "string" ? cause.code : "";
  return ["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "UND_ERR_CONNECT_TIMEOUT", "EHOSTUNREACH", "ENETUNREACH"].includes(code);
}

/** Whether `error` is the transport failing (no answer), as opposed to an answer or a bug. */
function isTransport(error: unknown): boolean {
  if (error instanceof errors.SessionlogError) return false;
  if (error instanceof AttemptFailed) return true;
  const name = (error as { name?: unknown } | undefined)?.name;
  // fetch: TypeError("fetch failed", {cause}) for the network, TimeoutError for our per-attempt
  // timeout; a body cut off mid-read surfaces as a TypeError or an AbortError too.
  return error instanceof TypeError || name === "TimeoutError" || name === "AbortError" || name === "SocketError";
}

function describe(error: unknown): string {
  const e = error as { name?: string; message?: string; cause?: { code?: string; message?: string } };
  const cause = e?.cause?.code ?? e?.cause?.message;
  return `${e?.name ?? "Error"}: ${e?.message ?? String(error)}${cause ? ` (${cause})` : ""}`;
}

/** Seconds a `Retry-After` header asks to wait (delta-seconds or an HTTP date), or undefined. */
function retryAfter(header: string | null): number | undefined {
  if (!header) return undefined;
  const seconds = Number(header);
  if (Number.isFinite(seconds) && seconds >= 0) return seconds;
  const at = Date.parse(header);
  return Number.isNaN(at) ? undefined : Math.max(0, (at - Date.now()) / 1000);
}

class Answered extends Error {
  constructor(readonly error: errors.ProblemError, readonly retryAfter: number | undefined) {
    super(error.message);
  }
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** A client of the ingest and recovery services. */
export class Client {
  private readonly urls: Record<Service, string>;
  private readonly origins: Partial<Record<Service, Origin>> = {};
  private readonly token: Credential | undefined;
  private readonly sender: Transport;
  /** Seconds to retry a request that may succeed on another try. */
  readonly retryFor: number;
  /** Seconds one attempt may take. */
  readonly timeout: number;

  constructor(options: ClientOptions = {}) {
    this.urls = {
      ingest: (options.ingestUrl ?? "http://127.0.0.1:8090").replace(/\/+$/, ""),
      recovery: (options.recoveryUrl ?? "http://127.0.0.1:8095").replace(/\/+$/, ""),
    };
    this.token = options.token;
    this.retryFor = options.retryFor ?? 30;
    this.timeout = options.timeout ?? 30;
    const kind = options.transport ?? (onNode() ? "socket" : "fetch");
    if (kind === "socket") this.sender = new SocketTransport({ maxSockets: options.maxSockets });
    else if (kind === "node") this.sender = new NodeTransport(options.maxSockets);
    else if (kind === "fetch") this.sender = fetchTransport;
    else throw new errors.InvalidArgument(`the transport is "socket", "node" or "fetch", not ${JSON.stringify(kind)}`);
  }

  /** The transport requests go by (`ClientOptions.transport`). */
  get transport(): TransportKind {
    return this.sender.kind;
  }

  /** Closes the connections the client keeps open (idle ones do not keep the process alive; this frees them now). The client can still be used: it connects again. */
  disconnect(): void {
    this.sender.close();
  }

  /** Sends `op`, retrying what may succeed on another try; its answer, or its error. */
  private async send<T>(op: Operation<T>): Promise<T> {
    const deadline = Date.now() + this.retryFor * 1000;
    let sent = false; // whether any attempt may have reached the service
    for (let attempt = 0; ; attempt++) {
      let wait: number;
      try {
        return await this.attempt(op, deadline);
      } catch (error) {
        let hint: number | undefined;
        if (error instanceof Answered) {
          if (!error.error.retryable) throw error.error;
          sent = true;
          hint = error.retryAfter;
        } else if (isTransport(error)) {
          sent = sent || !neverSent(error);
        } else {
          throw error;
        }
        // Exponential from 50 ms up to 2 s, with jitter (so a fleet does not retry in step), and
        // never sooner than the service asked.
        const backoff = Math.min(2000, 50 * 2 ** attempt);
        wait = Math.max(backoff / 2 + Math.random() * (backoff / 2), (hint ?? 0) * 1000);
        if (Date.now() + wait > deadline) {
          if (error instanceof Answered) throw error.error;
          throw new errors.TransportError(
            `${op.method} ${op.path}: the ${op.service} service at ${this.urls[op.service]} did not answer (${describe(error)}); ` +
              `is \`sessionlog ${op.service === "ingest" ? "ingest" : "serve-recovery"}\` running there?`,
            sent,
            { cause: error },
          );
        }
      }
      await sleep(wait);
    }
  }

  /** `service`'s URL parsed (once); `InvalidArgument`, not retried, when it is not an http(s) URL. */
  private parseOrigin(service: Service): Origin {
    try {
      return (this.origins[service] = origin(this.urls[service]));
    } catch (e) {
      throw new errors.InvalidArgument(`the ${service} URL ${JSON.stringify(this.urls[service])} is not an http: or https: URL`, { cause: e });
    }
  }

  /** One attempt of `op`; `deadline` (ms since the epoch) is when `send` stops retrying. */
  private async attempt<T>(op: Operation<T>, deadline: number): Promise<T> {
    const headers: Record<string, string> = { accept: "application/json", ...op.headers };
    if (this.token !== undefined) {
      const token = typeof this.token === "function" ? await this.token() : this.token;
      // Refused here, as no transport would send it: not an outage to retry.
      if (typeof token !== "string" || /[\0\r\n]/.test(token)) throw new errors.InvalidArgument("the token is not a string a header can carry");
      headers["authorization"] = `Bearer ${token}`;
    }
    if (op.body !== undefined) headers["content-type"] = "application/json";
    const query = op.params && Object.keys(op.params).length ? "?" + new URLSearchParams(op.params).toString() : "";
    const reply = await this.sender.send({
      origin: this.origins[op.service] ?? this.parseOrigin(op.service),
      method: op.method,
      path: op.path + query,
      headers,
      body: op.body === undefined ? undefined : JSON.stringify(op.body),
      timeoutMs: this.timeout * 1000,
      // A request this client would send again after a failure anyway: the transport may resend
      // it at once on a new connection when a kept-alive one closed under it. Asked when it would
      // resend (up to `timeout` later), not now: after the deadline, a resend of what the service
      // does not dedupe would be a second effect the caller is never told of.
      mayRepeat: () => Date.now() < deadline,
    });
    const text = reply.text;
    let doc: unknown;
    try {
      doc = text ? JSON.parse(text) : {};
    } catch {
      doc = undefined;
    }
    if (reply.status >= 200 && reply.status < 300) {
      if (doc === undefined) throw new errors.SessionlogError(`${op.method} ${op.path}: the answer is not JSON`);
      return op.decode(doc);
    }
    const problem: errors.Problem =
      typeof doc === "object" && doc !== null && !Array.isArray(doc) ? (doc as errors.Problem) : { detail: text.slice(0, 200) };
    const answer = op.answers?.[String(problem.code ?? "")];
    if (answer) return answer(problem);
    throw new Answered(errors.problemError(reply.status, problem), retryAfter(reply.retryAfter));
  }

  /**
   * Starts a session (epoch 1, next seq 2). `name` (1-512 bytes, no control characters) names it
   * within the caller's tenant; a name the tenant has already is refused with `NameTaken`, whose
   * `sessionId` is the session it points to.
   */
  async create(agent: string, options: { title?: string; sessionId?: string; name?: string } = {}): Promise<Opened> {
    return this.send(this.createOp(agent, options, models.opened));
  }

  private createOp<T>(agent: string, o: { title?: string; sessionId?: string; name?: string }, decode: (doc: unknown) => T): Operation<T> {
    const body: Ingest["schemas"]["CreateRequest"] = opt({
      agent, title: o.title, name: o.name, session_id: o.sessionId === undefined ? undefined : checkSessionId(o.sessionId),
    }) as Ingest["schemas"]["CreateRequest"];
    return { service: "ingest", method: "POST", path: "/v1/sessions", decode, body };
  }

  /** The id of the session `name` points to in the caller's tenant, or undefined. */
  async find(name: string): Promise<string | undefined> {
    return this.send<string | undefined>({
      service: "ingest", method: "GET", path: "/v1/sessions", params: { name },
      decode: (doc) => checkSessionId(String(models.json(doc)["session_id"])),
      answers: { unknown_name: () => undefined },
    });
  }

  /**
   * Starts the session `name` in the caller's tenant, or finds the one it points to (`opened` is
   * undefined then: take it over with `claim` or `resume`). No session id is sent unless given, so
   * a retry after a lost answer finds the name taken by the session the first attempt started.
   */
  async createOrFind(agent: string, name: string, options: { title?: string; sessionId?: string } = {}): Promise<NamedSession> {
    const op = this.createOp(agent, { ...options, name }, (doc): NamedSession => {
      const o = models.opened(doc);
      return { sessionId: o.sessionId, name, opened: o };
    });
    op.answers = {
      name_taken: (problem) => {
        const found = problem["session_id"];
        if (!found) throw errors.problemError(409, problem);
        return { sessionId: checkSessionId(String(found)), name, opened: undefined };
      },
    };
    return this.send(op);
  }

  /** Takes a session over with the next epoch; its earlier writers are fenced. */
  async claim(sessionId: string, writer: string): Promise<Opened> {
    const body: Ingest["schemas"]["ClaimRequest"] = { writer };
    return this.send({ service: "ingest", method: "POST", path: sessionPath(sessionId, "claim"), decode: models.opened, body });
  }

  /** Appends events in seq order; `writerToken` is the one the create, claim or resume answered. */
  async append(sessionId: string, epoch: number, events: readonly IncomingEvent[], options: { writerToken?: string } = {}): Promise<Appended> {
    const body = { epoch, events: [...events] };
    return this.send({
      service: "ingest", method: "POST", path: sessionPath(sessionId, "events"), decode: models.appended, body,
      headers: writer(options.writerToken),
    });
  }

  /** Records a checkpoint (the service picks its seq and digest). */
  async checkpoint(sessionId: string, epoch: number, options: { workspaceRevision?: string; writerToken?: string } = {}): Promise<EventAck> {
    const body: Ingest["schemas"]["CheckpointRequest"] = opt({ epoch, workspace_revision: options.workspaceRevision }) as { epoch: number };
    return this.send({
      service: "ingest", method: "POST", path: sessionPath(sessionId, "checkpoint"), decode: models.eventAck, body,
      headers: writer(options.writerToken),
    });
  }

  /** Ends a session. */
  async close(sessionId: string, epoch: number, outcome: TerminalOutcome, options: { reason?: string; writerToken?: string } = {}): Promise<EventAck> {
    const body = opt({ epoch, outcome, reason: options.reason }) as Ingest["schemas"]["CloseRequest"];
    return this.send({
      service: "ingest", method: "POST", path: sessionPath(sessionId, "close"), decode: models.eventAck, body,
      headers: writer(options.writerToken),
    });
  }

  /** Renews (or takes) the current epoch's writer lease: liveness, not permission to write. */
  async renewLease(sessionId: string, epoch: number, options: { writer?: string; writerToken?: string } = {}): Promise<Lease> {
    const body = opt({ epoch, writer: options.writer }) as Ingest["schemas"]["LeaseRequest"];
    return this.send({
      service: "ingest", method: "POST", path: sessionPath(sessionId, "lease"), decode: models.lease, body,
      headers: writer(options.writerToken),
    });
  }

  /** Releases the current epoch's writer lease (closing the session releases it too). */
  async releaseLease(sessionId: string, epoch: number, options: { writerToken?: string } = {}): Promise<void> {
    await this.send({
      service: "ingest", method: "DELETE", path: sessionPath(sessionId, "lease"), decode: () => undefined,
      params: { epoch: String(epoch) }, headers: writer(options.writerToken),
    });
  }

  /** Takes a session over after a crash: the next epoch, and what to settle first. */
  async resume(sessionId: string, writer: string, options: { contextTokens?: number } = {}): Promise<ResumeBundle> {
    const body = opt({ writer, context_tokens: options.contextTokens }) as Recovery["schemas"]["ResumeRequest"];
    return this.send({ service: "recovery", method: "POST", path: sessionPath(sessionId, "resume"), decode: models.resumeBundle, body });
  }

  /** The session rebuilt from the log, to its end (reader role). */
  async session(sessionId: string): Promise<SessionView> {
    return this.send({ service: "recovery", method: "GET", path: sessionPath(sessionId), decode: models.sessionView });
  }

  /** One page of a range read. */
  async eventsPage(sessionId: string, range: EventRange = {}): Promise<EventPage> {
    const params = opt({
      from_seq: range.fromSeq, to_seq: range.toSeq, kinds: range.kinds?.length ? range.kinds.join(",") : undefined,
      limit: range.limit, cursor: range.cursor, inherited: range.inherited ? "true" : undefined,
    });
    return this.send({
      service: "recovery", method: "GET", path: sessionPath(sessionId, "events"), decode: models.eventPage,
      params: Object.fromEntries(Object.entries(params).map(([k, v]) => [k, String(v)])),
    });
  }

  /** Every event of a range, following the pages (the projection's view: see `eventsPage`). */
  async *events(sessionId: string, range: EventRange = {}): AsyncGenerator<HistoryEvent> {
    let cursor: string | undefined;
    for (;;) {
      const page = await this.eventsPage(sessionId, { ...range, cursor });
      yield* page.events;
      if (page.nextCursor === undefined) return;
      cursor = page.nextCursor;
    }
  }

  /**
   * Starts a session from `sessionId`'s history through `atSeq` (operator role); `childId` names
   * the new session. Without it the client picks the child's id (a UUIDv7), so that a retry after
   * a lost answer (a timeout) finds the child the first attempt made, instead of making a second:
   * the service refuses it (`already_started`), and the client answers that child once its fork
   * point is checked, with its first event as range reads give it (without its attestation). A
   * `childId` the caller gave that is already a session is refused with `AlreadyStarted`.
   */
  async fork(sessionId: string, atSeq: number, agent: string, childId?: string): Promise<Forked> {
    const child = childId === undefined ? newSessionId() : checkSessionId(childId);
    const body = { at_seq: atSeq, agent, session_id: child };
    try {
      return await this.send({ service: "recovery", method: "POST", path: sessionPath(sessionId, "fork"), decode: models.forked, body });
    } catch (e) {
      // The id this client chose is taken only by an earlier attempt of this very fork.
      if (childId !== undefined || !(e instanceof errors.AlreadyStarted)) throw e;
      return this.madeFork(checkSessionId(sessionId), atSeq, child);
    }
  }

  /** The child an earlier attempt of a fork made (its answer lost): its first event once range reads hold it, its fork point checked. */
  private async madeFork(parent: string, atSeq: number, child: string): Promise<Forked> {
    const deadline = Date.now() + Math.max(this.retryFor, 1) * 1000;
    for (;;) {
      let first: Json | undefined;
      try {
        const page = await this.send({ service: "recovery", method: "GET", path: sessionPath(child, "events"), params: { to_seq: "1" }, decode: models.json });
        first = Array.isArray(page["events"]) ? (page["events"][0] as Json | undefined) : undefined;
      } catch (e) {
        if (!(e instanceof errors.UnknownSession)) throw e; // not projected yet
      }
      if (first !== undefined) {
        const point = ((first["event"] as Json | null)?.["SessionForked"] as Json | undefined)?.["fork_point"] as Json | undefined;
        if (String(point?.["parent_session_id"]) !== parent || point?.["parent_seq"] !== atSeq) {
          throw new errors.SessionlogError(`fork: session ${child}, which this client chose for the fork of ${parent} at seq ${atSeq}, is not that fork`);
        }
        const envelope = ["event_id", "session_id", "seq", "writer_epoch", "occurred_at", "causation_id", "idempotency_key", "event"];
        return {
          sessionId: child,
          partition: Number(first["log_partition"]),
          offset: Number(first["log_offset"]),
          event: Object.fromEntries(envelope.map((k) => [k, first![k] ?? null])),
        };
      }
      if (Date.now() > deadline) {
        throw new errors.NotReady(
          `fork: the fork of ${parent} at seq ${atSeq} was made (session ${child}: a retry found it) but range reads do not hold its first event yet ` +
            "(is `sessionlog project` running for this topic?)",
        );
      }
      await sleep(100);
    }
  }

  /**
   * Work for a worker of `agent` (harness role): waits up to `wait` seconds (at most 60) for the
   * agent's next wake, and answers the session the service took for the caller as `writer` (the
   * next epoch, as `resume` does) with the wake; undefined when the wait ran out. See `Worker`.
   * The take is named by `takeId` (a fresh UUID by default), so a retry after a lost answer (a
   * timeout) is answered the session that take took, not another.
   */
  async work(agent: string, options: { wait?: number; writer?: string; contextTokens?: number; takeId?: string } = {}): Promise<Work | undefined> {
    const params = opt({
      agent, wait: options.wait === undefined ? undefined : `${Math.max(0, Math.round(options.wait * 1000))}ms`,
      writer: options.writer, context_tokens: options.contextTokens, take_id: options.takeId ?? globalThis.crypto.randomUUID(),
    });
    return this.send({
      service: "recovery", method: "GET", path: "/v1/work", decode: models.work,
      params: Object.fromEntries(Object.entries(params).map(([k, v]) => [k, String(v)])),
    });
  }

  /** The session's ancestors with their fork points and the sessions forked from it (reader role). */
  async lineage(sessionId: string): Promise<Lineage> {
    return this.send({ service: "recovery", method: "GET", path: sessionPath(sessionId, "lineage"), decode: models.lineage });
  }

  /** Records what an in-doubt call did (operator role). */
  async resolve(sessionId: string, callSeq: number, o: { succeeded: boolean; output: string; reason: string; operator?: string }): Promise<Json> {
    const body = opt({ call_seq: callSeq, succeeded: o.succeeded, output: o.output, reason: o.reason, operator: o.operator });
    return this.send({ service: "recovery", method: "POST", path: sessionPath(sessionId, "resolutions"), decode: models.json, body });
  }

  /** Approves or denies a pending approval (approver role). */
  async decide(sessionId: string, approvalId: string, o: { approved: boolean; reason?: string; decidedBy?: string }): Promise<Json> {
    const body = opt({ approved: o.approved, reason: o.reason, decided_by: o.decidedBy });
    return this.send({ service: "recovery", method: "POST", path: sessionPath(sessionId, "approvals", approvalId), decode: models.json, body });
  }
}
