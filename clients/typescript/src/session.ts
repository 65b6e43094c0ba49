/**
 * `Session`: one writer of one session, like the Rust `SessionWriter` and Python's `AsyncSession`
 * (clients/python/src/sessionlog/session.py, whose semantics this follows).
 *
 * A session numbers its events, resends what an outage left unanswered with the same seqs and
 * ids, and knows the session's tool calls, so that `durableTool` can tell a call that already ran
 * from one that never did. `resume` takes a session over after a crash: recovery settles what it
 * can (a recorded result is never run again; an idempotent call is looked up by its key) and hands
 * over the calls the new harness settles itself. A resumed fork also knows the calls it inherits.
 *
 * A writer keeps the token its create, claim or resume answered (`Opened.writerToken`) and sends
 * it with each append, checkpoint, close and lease (header `Sessionlog-Writer-Token`).
 */
import type { Client } from "./client.js";
import * as errors from "./errors.js";
import { type Event, type ToolCall, Occurrences, SessionLedger, newSessionId, nowMicros } from "./ledger.js";
import type { EffectClass, EventAck, Json, Lease, Opened, ResumeBundle, TerminalOutcome } from "./models.js";

export type { Event } from "./ledger.js";

/** Events planned from the seq the first of them will have (see `Session.appendPlanned`). */
export type Plan = (firstSeq: number) => readonly Event[];

const plain = (text: string) => ({ Plain: text });

/** A user's request. */
export function userRequest(text: string): Event {
  return { kind: "UserRequest", data: { content: plain(text) } };
}

/** What a model call cost and when it started (`startedAt` in microseconds, now by default). */
export interface Usage {
  tokensIn?: number;
  tokensOut?: number;
  costMicros?: number;
  startedAt?: number;
  provider?: string;
}

/** A model's answer, with what it cost. */
export function modelResponse(model: string, text: string, usage: Usage = {}): Event {
  const data: Json = {
    model, tokens_in: usage.tokensIn ?? 0, tokens_out: usage.tokensOut ?? 0, cost_micros: usage.costMicros ?? 0,
    started_at: usage.startedAt ?? nowMicros(), content: plain(text),
  };
  if (usage.provider !== undefined) data["provider"] = usage.provider;
  return { kind: "ModelResponse", data };
}

/** A tool call's request, before it runs: what recovery settles it by if its result is lost. */
export function toolCall(tool: string, args: string, o: { effect: EffectClass; idempotencyKey?: string | undefined }): Event {
  return { kind: "ToolCallRequested", data: { tool, arguments: plain(args), effect: o.effect }, idempotencyKey: o.idempotencyKey };
}

/** The result of `call`. */
export function toolResult(call: ToolCall, output: string, o: { succeeded?: boolean } = {}): Event {
  return {
    kind: "ToolCallResult",
    data: {
      call_seq: call.seq, outcome: o.succeeded === false ? "Failed" : "Succeeded", output: plain(output), source: "Executed",
      recorded_by: null, note: null,
    },
    causationId: call.eventId,
    idempotencyKey: call.idempotencyKey,
  };
}

/** Withdraws the session's event `seq` from the conversation; the log keeps both. */
export function retraction(seq: number, retractedBy: string): Event {
  return { kind: "EventRetracted", data: { retracted_seq: seq, retracted_by: retractedBy } };
}

/** A framework's own state, kept sealed in the log. */
export function frameworkState(framework: string, key: string, state: string): Event {
  return { kind: "FrameworkStateSaved", data: { framework, key, state: plain(state) } };
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * Waits until range reads (the projection) hold `sessionId`'s event `seq`: a resumed writer must
 * see every call the log records before it runs one. `NotReady` after `waitFor` seconds.
 */
export async function awaitProjected(client: Client, sessionId: string, seq: number, waitFor = 30): Promise<void> {
  const started = Date.now();
  for (;;) {
    try {
      const page = await client.eventsPage(sessionId, { fromSeq: seq, toSeq: seq });
      if (page.events.length) return;
    } catch (e) {
      if (!(e instanceof errors.UnknownSession)) throw e;
    }
    if (Date.now() - started > waitFor * 1000) {
      throw new errors.NotReady(
        `the projection did not reach the session's event ${seq} within ${Math.round((Date.now() - started) / 1000)}s ` +
          "(is `sessionlog project` running for this topic?)",
      );
    }
    await sleep(50);
  }
}

/** The events range reads must hold before a resumed writer learns its calls: its last one, and for a fork its parent's at the fork point. */
function projectedFirst(sessionId: string, state: Json): [string, number][] {
  const wanted: [string, number][] = [[sessionId, Number(state["last_seq"] ?? 0)]];
  const parent = state["parent"];
  if (typeof parent === "object" && parent !== null) {
    const p = parent as Json;
    wanted.push([String(p["parent_session_id"]), Number(p["parent_seq"])]);
  }
  return wanted.filter(([, seq]) => seq > 0);
}

/** Whether a create's refusal found the session this very start made (an attempt whose answer was lost, then retried). An id the caller gave may be another's start. */
function ourStart(refusal: errors.ProblemError, sid: string, given: string | undefined): boolean {
  if (given !== undefined) return false;
  return !(refusal instanceof errors.NameTaken) || refusal.sessionId === sid;
}

const ignore = () => undefined;

/** One at a time, in arrival order: appends of one session take turns (the ledger numbers events and matches answers in sending order). */
export class Turns {
  private tail: Promise<unknown> = Promise.resolve();
  /** Runs `fn` after every earlier one finished. */
  run<T>(fn: () => Promise<T>): Promise<T> {
    const result = this.tail.then(fn);
    this.tail = result.catch(ignore);
    return result;
  }
}

/** One writer of one session. */
export class Session {
  private readonly turns = new Turns();
  private leaseTimer: NodeJS.Timeout | undefined;
  private leaseStopped = true;

  /** Use `Session.start`, `Session.resume` or `Session.openNamed`; this wraps a ledger a caller built. */
  constructor(
    readonly client: Client,
    readonly ledger: SessionLedger,
    /** The resume bundle, when this writer resumed the session. */
    readonly bundle?: ResumeBundle,
  ) {}

  /** The session's id. */
  get sessionId(): string {
    return this.ledger.sessionId;
  }

  /** How many calls of each durable tool and arguments this writer made (see `durableTool`). */
  get occurrences(): Occurrences {
    return this.ledger.occurrences;
  }

  /**
   * Starts a session run by `agent` (with a fresh id unless `sessionId` names one), named `name`
   * within the caller's tenant when given (`NameTaken` if the name is).
   */
  static async start(client: Client, agent: string, options: { title?: string; sessionId?: string; name?: string } = {}): Promise<Session> {
    const sid = options.sessionId ?? newSessionId();
    let opened: Opened;
    try {
      opened = await client.create(agent, { ...options, sessionId: sid });
    } catch (e) {
      if (!(e instanceof errors.AlreadyStarted || e instanceof errors.NameTaken) || !ourStart(e, sid, options.sessionId)) throw e;
      // A retry found the first attempt's start. Claim to write on.
      opened = await client.claim(sid, agent);
    }
    return new Session(client, openedLedger(opened));
  }

  /**
   * The writer of the session `name` in the caller's tenant: started by `agent` when the name is
   * new (`bundle` undefined then), else taken over as `writer` (`agent` unless given) like
   * `resume` does, so an earlier writer is fenced.
   */
  static async openNamed(
    client: Client, name: string, options: { agent: string; writer?: string; title?: string; waitFor?: number },
  ): Promise<Session> {
    const named = await client.createOrFind(options.agent, name, { title: options.title });
    if (named.opened) return new Session(client, openedLedger(named.opened));
    return Session.resume(client, named.sessionId, options.writer ?? options.agent, { waitFor: options.waitFor });
  }

  /**
   * Takes `sessionId` over as `writer` (the next epoch; the previous writer is fenced) and learns
   * its tool calls, a fork's inherited ones too. Throws `NeedsResolution` when a call's outcome is
   * unknown and its effect forbids running it again, `AwaitingApproval` while an approval is pending.
   */
  static async resume(
    client: Client, sessionId: string, writer: string, options: { contextTokens?: number; waitFor?: number | undefined } = {},
  ): Promise<Session> {
    const bundle = await client.resume(sessionId, writer, { contextTokens: options.contextTokens });
    const session = new Session(client, SessionLedger.fromBundle(bundle), bundle);
    await session.learnCalls(options.waitFor);
    return session;
  }

  /**
   * Learns the tool calls of the session this writer took over (`bundle`), a fork's inherited
   * ones too, once range reads hold its last event: `resume` does, and a `Worker` after taking
   * the session's lease. Does nothing for a writer that started the session.
   */
  async learnCalls(waitFor = 30): Promise<void> {
    if (this.bundle === undefined) return;
    const lastSeq = Number(this.bundle.state["last_seq"] ?? 0);
    for (const [sid, seq] of projectedFirst(this.sessionId, this.bundle.state)) await awaitProjected(this.client, sid, seq, waitFor);
    if (lastSeq > 0) {
      // Inherited: a fork's ancestors' calls up to the fork point come first, each naming its session.
      const events = [];
      for await (const e of this.client.events(this.sessionId, {
        kinds: ["ToolCallRequested", "ToolCallResult"], toSeq: lastSeq, limit: 1000, inherited: true,
      })) events.push(e);
      this.ledger.learn(events);
    }
  }

  /** Waits until range reads (the projection) hold the session's event `seq`. */
  waitProjected(seq: number, waitFor = 30): Promise<void> {
    return awaitProjected(this.client, this.sessionId, seq, waitFor);
  }

  /** Appends `event`, after any event an outage left unanswered; its position. */
  async append(event: Event): Promise<EventAck> {
    const acks = await this.appendAll([event]);
    return acks[acks.length - 1]!;
  }

  /** Appends `events` in order (in requests of at most 128), after the events an outage left unanswered; their positions. */
  appendAll(events: readonly Event[]): Promise<EventAck[]> {
    return this.turns.run(async () => {
      await this.sendBacklog();
      this.ledger.queue(events);
      return this.sendPending();
    });
  }

  /**
   * Appends the events `plan(firstSeq)` answers, `firstSeq` being the seq the first of them gets:
   * for a batch whose events name each other by seq, sent as one request. Throwing means not
   * written when no request of them reached the service (`TransportError.sent` false): they are
   * dropped, so the caller's retry is their only copy. Any other failure keeps them.
   */
  appendPlanned(plan: Plan): Promise<EventAck[]> {
    return this.turns.run(async () => {
      await this.sendBacklog(); // the backlog first: the queue holds the plan's alone
      this.ledger.queue(plan(this.ledger.nextQueuedSeq));
      const planned = this.ledger.unacknowledged.length;
      try {
        return await this.sendPending();
      } catch (e) {
        if (e instanceof errors.TransportError) this.ledger.neverSent(e, planned);
        throw e;
      }
    });
  }

  /** Sends the events an outage left unanswered (durable tools do before each call). */
  async sendUnacknowledged(): Promise<void> {
    await this.turns.run(() => this.sendPending());
  }

  /** Sends what an outage left unanswered, if anything (most often nothing: then no request and no promise). */
  private sendBacklog(): Promise<EventAck[]> | undefined {
    return this.ledger.unacknowledged.length ? this.sendPending() : undefined;
  }

  private async sendPending(): Promise<EventAck[]> {
    const acks: EventAck[] = [];
    while (this.ledger.unacknowledged.length) {
      let appended;
      try {
        appended = await this.client.append(this.sessionId, this.ledger.epoch, this.ledger.batch(), { writerToken: this.ledger.writerToken });
      } catch (e) {
        if (e instanceof errors.ProblemError) this.ledger.failed(e);
        throw e;
      }
      this.ledger.acknowledged(appended);
      acks.push(...appended.events);
    }
    return acks;
  }

  /** Appends a user's request. */
  userRequest(text: string): Promise<EventAck> {
    return this.append(userRequest(text));
  }

  /** Appends a model's answer. */
  modelResponse(model: string, text: string, usage: Usage = {}): Promise<EventAck> {
    return this.append(modelResponse(model, text, usage));
  }

  /** Records a tool call's request before it runs; the call, to record its result with. */
  async toolCall(tool: string, args: string, o: { effect: EffectClass; idempotencyKey?: string | undefined }): Promise<ToolCall> {
    const ack = await this.append(toolCall(tool, args, o));
    const call = this.ledger.callAt(ack.seq);
    if (!call) throw new errors.SessionlogError(`the ledger did not learn the tool call at seq ${ack.seq}`);
    return call;
  }

  /** Records `call`'s result. */
  toolResult(call: ToolCall, output: string, o: { succeeded?: boolean } = {}): Promise<EventAck> {
    return this.append(toolResult(call, output, o));
  }

  /** Records a checkpoint (after the events an outage left unanswered): where recovery starts reading. */
  checkpoint(workspaceRevision?: string): Promise<EventAck> {
    return this.turns.run(async () => {
      await this.sendBacklog();
      const ack = await this.client.checkpoint(this.sessionId, this.ledger.epoch, { workspaceRevision, writerToken: this.ledger.writerToken });
      this.ledger.movedTo(ack.seq);
      return ack;
    });
  }

  /** Ends the session (after the events an outage left unanswered); the service releases the writer lease with it. */
  close(outcome: TerminalOutcome = "Completed", reason?: string): Promise<EventAck> {
    return this.turns.run(async () => {
      await this.sendBacklog();
      const ack = await this.client.close(this.sessionId, this.ledger.epoch, outcome, { reason, writerToken: this.ledger.writerToken });
      this.ledger.movedTo(ack.seq);
      this.stopLease();
      return ack;
    });
  }

  /**
   * Takes the writer lease of this writer's epoch and renews it every third of its TTL (on an
   * unref'd timer: it does not keep the process alive), until `close`, `releaseLease`, or the
   * service refusing it (409: this writer was fenced, or leases are off). A lease says the harness
   * is alive; it lets no one write. A process that dies stops renewing, and its lease lapses.
   */
  async holdLease(writer?: string): Promise<Lease> {
    const renew = () => this.client.renewLease(this.sessionId, this.ledger.epoch, { writer, writerToken: this.ledger.writerToken });
    const lease = await renew();
    this.stopLease();
    this.leaseStopped = false;
    const every = lease.ttlMs / 3;
    const tick = () => {
      this.leaseTimer = setTimeout(() => {
        // In turn with appends and close: none renews after the close released it.
        void this.turns
          .run(async () => {
            if (this.leaseStopped) return false;
            try {
              await renew();
            } catch (e) {
              if (e instanceof errors.Conflict) {
                this.leaseStopped = true; // fenced, or leases turned off: nothing to renew or release
                return false;
              }
              if (!(e instanceof errors.SessionlogError)) throw e;
              // the next tick tries again; two misses leave the lease live
            }
            return true;
          })
          .then((again) => { if (again && !this.leaseStopped) tick(); }, () => undefined);
      }, every);
      this.leaseTimer.unref();
    };
    tick();
    return lease;
  }

  /** Stops renewing the writer lease and releases it: for a harness that stops running the session without ending it. */
  async releaseLease(): Promise<void> {
    this.stopLease();
    await this.client.releaseLease(this.sessionId, this.ledger.epoch, { writerToken: this.ledger.writerToken });
  }

  /** Whether this writer renews its lease (from `holdLease` until `close`, `releaseLease`, `stopLease` or a refusal). */
  get holdsLease(): boolean {
    return !this.leaseStopped;
  }

  /** Stops renewing the writer lease without releasing it: it lapses as a crashed harness's would, so the session is woken again. */
  stopLease(): void {
    this.leaseStopped = true;
    if (this.leaseTimer) clearTimeout(this.leaseTimer);
    this.leaseTimer = undefined;
  }
}

function openedLedger(opened: Opened): SessionLedger {
  return new SessionLedger(opened.sessionId, opened.epoch, opened.nextSeq, opened.writerToken);
}

/** A durable tool's default encoding of arguments and results: JSON with sorted keys, as Python's `encode_json`. */
export function encodeJson(value: unknown): string {
  return canonicalJson(value);
}

/**
 * JSON as Python's `json.dumps(value, sort_keys=True, separators=(",", ":"))` writes it (keys
 * sorted, no spaces, non-ASCII escaped as `\uXXXX`), so that a call's digest, and with it its
 * default key, is the Python client's for the same tool and arguments. What JSON cannot hold
 * (a function, a symbol) is written as its text, as Python's `default=str` does.
 */
export function canonicalJson(value: unknown): string {
  return ascii(JSON.stringify(sortKeys(value)) ?? "null");
}

function sortKeys(value: unknown): unknown {
  if (value === undefined) return null;
  if (typeof value === "function" || typeof value === "symbol") return String(value);
  if (typeof value === "bigint") return Number(value);
  if (value === null || typeof value !== "object") return value;
  const json = (value as { toJSON?: () => unknown }).toJSON;
  if (typeof json === "function") return sortKeys(json.call(value));
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value instanceof Map) return sortKeys(Object.fromEntries(value));
  if (value instanceof Set) return [...value].map(sortKeys);
  const out: Json = {};
  for (const key of Object.keys(value).sort()) {
    const member = (value as Json)[key];
    if (member !== undefined) out[key] = sortKeys(member); // as JSON.stringify and Python's dicts: no undefined members
  }
  return out;
}

function ascii(text: string): string {
  return text.replace(/[\u007f-\uffff]/g, (c) => (c === "\u007f" ? c : "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0")));
}
