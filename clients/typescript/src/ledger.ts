/**
 * What a writer knows about its session: its epoch, the next seq, the events it sent and not yet
 * had acknowledged, and the tool calls the log records (its own, and those it inherits from the
 * sessions it was forked from). No I/O, as clients/python/src/sessionlog/ledger.py: `Session`
 * and durable tools share it. JavaScript runs one task at a time, so planning a call and taking
 * off are one step without a lock; a call one caller runs now is waited for by the others.
 */
import { randomBytes, randomUUID } from "node:crypto";
import { CallInDoubt } from "./errors.js";
import type { IncomingEvent } from "./client.js";
import type { Appended, CallOutcome, EffectClass, HistoryEvent, Json, ResumeBundle } from "./models.js";
import { textOf } from "./models.js";

/** A fresh UUIDv7 (time-ordered, like the services' own ids). */
export function newSessionId(): string {
  const bytes = randomBytes(16);
  const millis = BigInt(Date.now());
  for (let i = 0; i < 6; i++) bytes[i] = Number((millis >> BigInt(8 * (5 - i))) & 0xffn);
  bytes[6] = (bytes[6]! & 0x0f) | 0x70; // version 7
  bytes[8] = (bytes[8]! & 0x3f) | 0x80; // RFC 4122 variant
  const hex = bytes.toString("hex");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** Now, in microseconds since the Unix epoch (the log's clock unit). */
export function nowMicros(): number {
  return Math.floor((performance.timeOrigin + performance.now()) * 1000);
}

/** A tool call's result as the log has it. */
export interface RecordedResult {
  outcome: CallOutcome;
  /** Its output text; undefined when it did not open (an erased session). */
  output: string | undefined;
  /** Who established it: `Executed` (the harness), `Resolver` or `Operator`. */
  source: string;
}

/** A tool call the log records, with its result once there is one. */
export interface ToolCall {
  seq: number;
  eventId: string;
  tool: string;
  effect: EffectClass;
  idempotencyKey: string | undefined;
  result?: RecordedResult | undefined;
  /** For a call in doubt at a resume: `RunAgain` or `ReissueWithSameKey` (from the bundle). */
  action?: string | undefined;
  /** The ancestor session that recorded the call, when the session inherits it (a fork); `seq` is then a seq of that session. */
  inheritedFrom?: string | undefined;
}

/** An event to append: its kind, its data, and its envelope fields (`eventId` when the caller chooses it, to name it in others of its batch). */
export interface Event {
  kind: string;
  data: Json;
  causationId?: string | undefined;
  idempotencyKey?: string | undefined;
  eventId?: string | undefined;
}

/**
 * What a durable tool does with a call: run it and record intent and result (`fresh`), answer the
 * recorded result (`recorded`), run it again under its first request and record the result
 * (`settle`), or wait for the caller running it now and plan again (`wait`).
 */
export type PlanKind = "fresh" | "recorded" | "settle" | "wait";

const SETTLE_ACTIONS = ["RunAgain", "ReissueWithSameKey"];
// A default key: the session's id, the call's digest and its occurrence, all characters a URL
// path segment takes as they are (recovery's resolvers send the key in one).
const DEFAULT_KEY = /^[0-9a-fA-F-]{36}\.([0-9a-f]{32})\.([1-9][0-9]*)$/;
// The key the Python library derived before keys named their session (`tool:digest`).
const OLD_DEFAULT_KEY = /^(.*):([0-9a-f]{32})$/s;

/** The key of the `occurrence`-th call with `digest` in `sessionId` (as Python's `default_key`). */
export function defaultKey(sessionId: string, digest: string, occurrence: number): string {
  return `${sessionId}.${digest}.${occurrence}`;
}

/** The digest and occurrence a default key names (undefined for a key the caller chose). */
export function identityOf(tool: string, key: string | undefined): [string, number] | undefined {
  if (key === undefined) return undefined;
  const found = DEFAULT_KEY.exec(key);
  if (found) return [found[1]!, Number(found[2])];
  const old = OLD_DEFAULT_KEY.exec(key);
  return old && old[1] === tool ? [old[2]!, 1] : undefined;
}

/** Which call an invocation of a durable tool is: the call with the caller's `key`, or the `occurrence`-th call of its tool with arguments of `digest`. */
export interface CallName {
  tool: string;
  key?: string | undefined;
  digest: string;
  occurrence: number;
}

/** How the ledger files a call (by key or by identity). */
function refOf(name: CallName): string {
  return JSON.stringify(name.key !== undefined ? [name.tool, "key", name.key] : [name.tool, name.digest, name.occurrence]);
}

/**
 * How many calls of each tool and argument digest one run of a harness made: a run after a crash
 * counts again from the start, so its n-th call finds the n-th call the log records. `scope` names
 * the part of the session one run covers and is folded into the digests. An invocation that threw
 * without a definitive outcome leaves its occurrence open: the next invocation of the same call is
 * its retry, and takes it over rather than counting a new call.
 */
export class Occurrences {
  private readonly counts = new Map<string, number>();
  private readonly open = new Map<string, Set<number>>();
  constructor(readonly scope?: string) {}

  /** The occurrence the next invocation of `tool` with `digest` is. */
  next(tool: string, digest: string): number {
    const id = JSON.stringify([tool, digest]);
    const left = this.open.get(id);
    if (left && left.size) {
      const n = Math.min(...left);
      left.delete(n);
      return n;
    }
    const n = (this.counts.get(id) ?? 0) + 1;
    this.counts.set(id, n);
    return n;
  }

  /** `name`'s invocation ended without an outcome its caller can rely on. */
  leaveOpen(name: CallName): void {
    if (name.key !== undefined) return;
    const id = JSON.stringify([name.tool, name.digest]);
    let left = this.open.get(id);
    if (!left) this.open.set(id, (left = new Set()));
    left.add(name.occurrence);
  }
}

/** A call one caller runs now; others of the same call wait for it to land, then plan again. */
export class Flight {
  /** How many callers wait for it (for diagnostics and tests). */
  waiting = 0;
  private readonly done: Promise<void>;
  private release!: () => void;
  constructor(readonly key: string, private readonly onLand: () => void) {
    this.done = new Promise((resolve) => (this.release = resolve));
  }
  /** The caller running it is done (whatever the outcome). */
  land(): void {
    this.onLand();
    this.release();
  }
  /** Resolves when the flight lands. */
  async wait(): Promise<void> {
    this.waiting++;
    try {
      await this.done;
    } finally {
      this.waiting--;
    }
  }
}

/** What a durable tool does with one call. */
export interface Plan {
  kind: PlanKind;
  /** The key the call runs under: what its service dedupes by. */
  key: string;
  /** The call the log records (`recorded`, `settle`). */
  call?: ToolCall | undefined;
  /** `fresh`, `settle`: the flight this caller holds (land it when done); `wait`: the flight of the caller running the call. */
  flight?: Flight | undefined;
}

/** Tool calls by seq, by caller's key and by identity (digest and occurrence). */
class Calls {
  readonly bySeq = new Map<string, ToolCall>();
  readonly byRef = new Map<string, ToolCall>();
  add(call: ToolCall): void {
    this.bySeq.set(seqRef(call.inheritedFrom, call.seq), call);
    if (call.idempotencyKey !== undefined) {
      this.byRef.set(JSON.stringify([call.tool, "key", call.idempotencyKey]), call);
      const identity = identityOf(call.tool, call.idempotencyKey);
      if (identity) this.byRef.set(JSON.stringify([call.tool, identity[0], identity[1]]), call);
    }
  }
}

const seqRef = (ancestor: string | undefined, seq: number) => `${ancestor ?? ""}#${seq}`;

/** One writer's view of its session. */
export class SessionLedger {
  /** The most events one append request takes (the ingest service's limit). */
  static readonly MAX_BATCH = 128;
  /** Events sent without an answer (an outage outlasted the retries): sent again, with the same seqs and ids, before anything new. */
  readonly unacknowledged: IncomingEvent[] = [];
  /** The calls of this run of the session's harness (see `Occurrences`). */
  readonly occurrences = new Occurrences();
  private readonly own = new Calls();
  private readonly inherited = new Calls();
  private readonly flights = new Map<string, Flight>();

  constructor(
    readonly sessionId: string,
    public epoch: number,
    public nextSeq: number,
    /** What proves this writer to the ingest service (undefined when the service issued none). */
    public writerToken?: string,
  ) {}

  /** The ledger of a resumed writer, with the calls recovery left in doubt. */
  static fromBundle(bundle: ResumeBundle): SessionLedger {
    const ledger = new SessionLedger(bundle.sessionId, bundle.epoch, bundle.nextSeq, bundle.writerToken);
    for (const d of bundle.inDoubt) {
      ledger.remember({ seq: d.seq, eventId: d.eventId, tool: d.tool, effect: d.effect, idempotencyKey: d.idempotencyKey, action: d.action });
    }
    return ledger;
  }

  /** Numbers `events` after everything sent so far (counted as sent). */
  queue(events: Iterable<Event>): void {
    for (const e of events) {
      const event: IncomingEvent = {
        seq: this.nextSeq + this.unacknowledged.length,
        event_id: e.eventId ?? randomUUID(),
        kind: e.kind,
        data: e.data,
        occurred_at: nowMicros(),
      };
      if (e.causationId !== undefined) event.causation_id = e.causationId;
      if (e.idempotencyKey !== undefined) event.idempotency_key = e.idempotencyKey;
      this.unacknowledged.push(event);
    }
  }

  /** The seq the next queued event gets. */
  get nextQueuedSeq(): number {
    return this.nextSeq + this.unacknowledged.length;
  }

  /** The next events to send: the oldest unacknowledged, at most `MAX_BATCH`. */
  batch(): IncomingEvent[] {
    return this.unacknowledged.slice(0, SessionLedger.MAX_BATCH);
  }

  /** The service accepted the first `appended.events.length` events sent. */
  acknowledged(appended: Appended): void {
    const done = appended.events.length;
    appended.events.forEach((ack, i) => this.learnSent(this.unacknowledged[i]!, ack.seq));
    this.unacknowledged.splice(0, done);
    this.nextSeq = appended.nextSeq;
  }

  /** Sending failed with `error`. A refusal (a 4xx) means the events sent are not in the log and never will be: dropped. Anything else keeps them, to be sent again. */
  failed(error: unknown): void {
    const retryable = (error as { retryable?: unknown } | undefined)?.retryable;
    if (retryable === false) this.unacknowledged.length = 0;
  }

  /** Sending the `planned` events queued last failed with `error`: when no request of them reached the service, they are dropped; else kept. */
  neverSent(error: unknown, planned: number): void {
    if ((error as { sent?: unknown } | undefined)?.sent === false && this.unacknowledged.length === planned) {
      this.unacknowledged.length = 0;
    }
  }

  /** The service appended an event at `seq` itself (a checkpoint, a close). */
  movedTo(seq: number): void {
    this.nextSeq = seq + 1;
  }

  /** Takes in tool calls and results from a range read (with `inherited`, the ancestors' too). */
  learn(events: Iterable<HistoryEvent>): void {
    for (const event of events) {
      const data = event.data ?? {};
      const ancestor = event.sessionId === this.sessionId ? undefined : event.sessionId;
      if (event.kind === "ToolCallRequested") {
        this.remember({
          seq: event.seq, eventId: event.eventId, tool: String(data["tool"]),
          effect: (data["effect"] as EffectClass | undefined) ?? "NonIdempotent", idempotencyKey: event.idempotencyKey,
          inheritedFrom: ancestor,
        });
      } else if (event.kind === "ToolCallResult") {
        this.record(ancestor, Number(data["call_seq"] ?? 0), {
          outcome: (data["outcome"] as CallOutcome | undefined) ?? "Failed", output: textOf(data["output"]), source: String(data["source"]),
        });
      }
    }
  }

  /** The call an invocation is: the one with the caller's `key`, else the next occurrence of `tool` with arguments of `digest`. */
  nameCall(tool: string, o: { key?: string; digest?: string; occurrences?: Occurrences } = {}): CallName {
    if (o.key !== undefined) return { tool, key: o.key, digest: "", occurrence: 0 };
    const digest = o.digest ?? "";
    return { tool, digest, occurrence: (o.occurrences ?? this.occurrences).next(tool, digest) };
  }

  /**
   * What a durable tool does with the call `name`; for `fresh` and `settle` the caller takes off
   * (`Plan.flight`) in the same step, so no other caller plans it too. The session's own record of
   * a call comes first; an inherited call answers its recorded result, and one inherited without a
   * result runs as a fresh call of this session (an idempotent one under its first key). Throws
   * `CallInDoubt` for a call whose outcome is unknown and whose effect forbids running it again.
   */
  planCall(name: CallName): Plan {
    const ref = refOf(name);
    const flight = this.flights.get(ref);
    if (flight) return { kind: "wait", key: flight.key, flight };
    let key = name.key ?? defaultKey(this.sessionId, name.digest, name.occurrence);
    const call = this.own.byRef.get(ref);
    const inherited = call === undefined ? this.inherited.byRef.get(ref) : undefined;
    if (inherited?.result) return { kind: "recorded", key: inherited.idempotencyKey ?? key, call: inherited };
    // Recovery refuses such a fork; should one exist, never guess.
    if (inherited?.effect === "NonIdempotent") throw new CallInDoubt(name.tool, inherited.seq);
    if (inherited?.effect === "Idempotent" && inherited.idempotencyKey) key = inherited.idempotencyKey;
    if (call === undefined) return this.takeOff(ref, { kind: "fresh", key });
    key = call.idempotencyKey ?? key;
    if (call.result) return { kind: "recorded", key, call };
    // In doubt: requested, no result. A pure call runs again; an idempotent one its service never
    // received is reissued with its key (recovery said which, or this process saw it fail);
    // anything else stops.
    if (call.effect === "Pure" || (call.action !== undefined && SETTLE_ACTIONS.includes(call.action))) {
      return this.takeOff(ref, { kind: "settle", key, call });
    }
    throw new CallInDoubt(name.tool, call.seq);
  }

  /** `call` threw before its outcome was known: an idempotent call may be reissued with its key, so the next plan of it settles it. */
  leftInDoubt(call: ToolCall): void {
    if (call.effect === "Idempotent" && !call.result) call.action = "ReissueWithSameKey";
  }

  /** The session's own tool call known by `key`, whichever its tool (the latest). */
  callWithKey(key: string): ToolCall | undefined {
    let found: ToolCall | undefined;
    for (const c of this.own.bySeq.values()) if (c.idempotencyKey === key && (!found || c.seq > found.seq)) found = c;
    return found;
  }

  /** The session's own tool call requested at `seq`. */
  callAt(seq: number): ToolCall | undefined {
    return this.own.bySeq.get(seqRef(undefined, seq));
  }

  /** How many callers wait for the call of `tool` with `key` that another runs now. */
  waiters(tool: string, key: string): number {
    let n = 0;
    for (const [ref, f] of this.flights) if ((JSON.parse(ref) as unknown[])[0] === tool && f.key === key) n += f.waiting;
    return n;
  }

  private takeOff(ref: string, plan: Plan): Plan {
    const flight = new Flight(plan.key, () => this.flights.delete(ref));
    this.flights.set(ref, flight);
    plan.flight = flight;
    return plan;
  }

  private learnSent(sent: IncomingEvent, seq: number): void {
    const data = sent.data;
    if (sent.kind === "ToolCallRequested") {
      this.remember({
        seq, eventId: String(sent.event_id), tool: String(data["tool"]), effect: data["effect"] as EffectClass,
        idempotencyKey: sent.idempotency_key ?? undefined,
      });
    } else if (sent.kind === "ToolCallResult") {
      this.record(undefined, Number(data["call_seq"]), {
        outcome: data["outcome"] as CallOutcome, output: textOf(data["output"]), source: String(data["source"]),
      });
    }
  }

  private record(ancestor: string | undefined, callSeq: number, result: RecordedResult): void {
    const call = (ancestor === undefined ? this.own : this.inherited).bySeq.get(seqRef(ancestor, callSeq));
    if (call) {
      call.result = result;
      call.action = undefined;
    }
  }

  private remember(call: ToolCall): void {
    const calls = call.inheritedFrom === undefined ? this.own : this.inherited;
    const known = calls.bySeq.get(seqRef(call.inheritedFrom, call.seq));
    if (known) {
      // What this writer learned (the bundle's action, a result) stands: a re-read adds to it.
      call.action = call.action ?? known.action;
      call.result = call.result ?? known.result;
    }
    calls.add(call);
  }
}
