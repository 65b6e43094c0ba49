/**
 * LangGraph.js on sessionlog: `SessionlogSaver` is a `BaseCheckpointSaver` that keeps a thread's
 * checkpoints and pending writes in a sessionlog session's log, as the Python `SessionlogSaver`
 * does (the same thread names, catalogue, markers and forks; the values are LangGraph.js's
 * serializer's, and a checkpoint keeps only the channel values it changed).
 *
 * A thread is a session found by its name `thread:{thread_id}` within the caller's tenant (two
 * tenants' threads of the same id are two sessions; neither learns of the other's). Each
 * checkpoint and each pending write is a `FrameworkStateSaved` event (framework `langgraph`),
 * its state sealed under the session's key, read back by range reads. Nothing is rewritten:
 * `deleteThread` appends a marker readers honour, and `copyThread` is a fork, so the copy keeps
 * its lineage. Keys in the log are plain, so they hold only what LangGraph generates (checkpoint
 * and task ids, namespaces); the thread id is only in sealed state.
 *
 * Every thread a saver starts is also recorded in its catalogue session (`catalogue:{name}`), so
 * `list` without a thread id reaches threads other processes wrote.
 *
 *     const saver = new SessionlogSaver(new Client({ token }));   // roles harness, reader (operator to copy)
 *     const graph = builder.compile({ checkpointer: saver });
 *     await graph.invoke(inputs, { configurable: { thread_id: "ticket-4711" } });
 */

import { createHash } from "node:crypto";

import type { RunnableConfig } from "@langchain/core/runnables";
import {
  BaseCheckpointSaver,
  type ChannelVersions,
  type Checkpoint,
  type CheckpointListOptions,
  type CheckpointMetadata,
  type CheckpointPendingWrite,
  type CheckpointTuple,
  type PendingWrite,
  type SerializerProtocol,
  TASKS,
  WRITES_IDX_MAP,
  compareWritesSortKeys,
  copyCheckpoint,
  getCheckpointId,
  maxChannelVersion,
  writesSortKey,
} from "@langchain/langgraph-checkpoint";

import type { Client } from "../client.js";
import { AlreadyStarted, Fenced, SessionlogError, UnknownSession } from "../errors.js";
import { textOf, type HistoryEvent } from "../models.js";
import { Session, awaitProjected, frameworkState } from "../session.js";
import { AsyncLocalStorageProviderSingleton } from "@langchain/core/singletons";

import { durableTool, toolName, type DurableToolOptions } from "../tools.js";

/** The framework name of the saver's `FrameworkStateSaved` events. */
export const FRAMEWORK = "langgraph";
/** The key of a catalogue's record of a thread (a constant: keys are plain in the log). */
export const THREAD_KEY = "thread";
/**
 * The agent of a copied thread's named session. A fork takes no name, so `copyThread` starts a
 * session under the target thread's name that only holds the name, and forks the source into
 * the session `copySessionId` derives from it: the thread's events are there.
 */
export const COPY_AGENT = "sessionlog-langgraph:copy";
// The namespace of copySessionId's uuid5 (the Python saver's `_COPIES`, so both find a copy).
const COPIES = "0f6b1d2e-4f53-4a39-8d7e-6c1f3b2a9e11";
const THREAD = "thread:";
// A range read's page size (the services' maximum).
const PAGE = 1000;

/** The name of a LangGraph thread's session, unique within the caller's tenant. */
export function threadName(threadId: string): string {
  return THREAD + threadId;
}

/**
 * The session a copied thread's events are in, given the id its name points to: a uuid5 of it,
 * fresh in the caller's tenant (another tenant can neither guess nor hold it).
 */
export function copySessionId(named: string): string {
  const ns = Buffer.from(COPIES.replace(/-/g, ""), "hex");
  const hash = createHash("sha1").update(ns).update(named).digest();
  const b = Buffer.from(hash.subarray(0, 16));
  b[6] = (b[6]! & 0x0f) | 0x50;
  b[8] = (b[8]! & 0x3f) | 0x80;
  const h = b.toString("hex");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

type Typed = [string, string]; // [serde type, base64 bytes], as the Python saver writes

interface Saved {
  checkpoint: Typed;
  metadata: Typed;
  parent: string | undefined;
}

interface Write {
  taskId: string;
  channel: string;
  value: Typed;
  taskPath: string;
  idx: number;
}

/** A state document of the log (the Python saver's, field for field). */
type StateDoc =
  | {
      type: "checkpoint"; ns: string; id: string; parent?: string | null; checkpoint: Typed; metadata: Typed;
      /** The values of the channels this checkpoint changed, by channel: its version and value (null: emptied). */
      blobs?: Record<string, [string, Typed | null]>;
    }
  | { type: "write"; ns: string; checkpoint_id: string; task_id: string; task_path?: string; idx: number; channel: string; value: Typed }
  | { type: "deleted"; ns: string; id: string }
  | { type: "clear" };

/**
 * A thread folded from its `FrameworkStateSaved` events (pure). Markers withdraw what came
 * before them: `clear` the whole thread (an inherited part too), `deleted` one checkpoint and
 * its writes.
 */
export class ThreadState {
  readonly checkpoints = new Map<string, Map<string, Saved>>();
  readonly writes = new Map<string, Map<string, Write>>();
  /** Channel values by namespace, channel and version (`blobKey`): null when the channel was emptied. */
  readonly blobs = new Map<string, Typed | null>();

  /** Folds `events` (others than the framework's are skipped). */
  static fold(events: readonly HistoryEvent[]): ThreadState {
    const thread = new ThreadState();
    for (const event of events) {
      const data = event.data ?? {};
      if (event.kind !== "FrameworkStateSaved" || data["framework"] !== FRAMEWORK) continue;
      const text = textOf(data["state"]);
      if (text === undefined) {
        throw new SessionlogError(
          `LangGraph state at seq ${event.seq} of ${event.sessionId} does not open ` +
            `(${Object.values(event.unopened).join(", ") || "no text"}): was the session erased?`,
        );
      }
      thread.apply(JSON.parse(text) as StateDoc);
    }
    return thread;
  }

  /** Applies one state document. */
  apply(state: StateDoc): void {
    if (state.type === "checkpoint") {
      let saved = this.checkpoints.get(state.ns);
      if (saved === undefined) this.checkpoints.set(state.ns, (saved = new Map()));
      saved.set(state.id, { checkpoint: state.checkpoint, metadata: state.metadata, parent: state.parent ?? undefined });
      for (const [channel, [version, value]] of Object.entries(state.blobs ?? {})) {
        this.blobs.set(blobKey(state.ns, channel, version), value);
      }
    } else if (state.type === "write") {
      const outer = writesKey(state.ns, state.checkpoint_id);
      let stored = this.writes.get(outer);
      if (stored === undefined) this.writes.set(outer, (stored = new Map()));
      const inner = `${state.task_id},${state.idx}`;
      // A special channel (error, interrupt, resume, scheduled: idx < 0) is overwritten; any other
      // write is kept as first written, so a repeated putWrites changes nothing.
      if (state.idx < 0 || !stored.has(inner)) {
        stored.set(inner, {
          taskId: state.task_id,
          channel: state.channel,
          value: state.value,
          taskPath: state.task_path ?? "",
          idx: state.idx,
        });
      }
    } else if (state.type === "deleted") {
      this.checkpoints.get(state.ns)?.delete(state.id);
      this.writes.delete(writesKey(state.ns, state.id));
    } else if (state.type === "clear") {
      this.checkpoints.clear();
      this.writes.clear();
      this.blobs.clear();
    }
  }

  /** The writes on one checkpoint, in LangGraph's `writesSortKey` order. */
  pendingWrites(ns: string, checkpointId: string): Write[] {
    const stored = [...(this.writes.get(writesKey(ns, checkpointId))?.values() ?? [])];
    return stored.sort((a, b) =>
      compareWritesSortKeys(writesSortKey(a.taskPath, a.taskId, a.idx), writesSortKey(b.taskPath, b.taskId, b.idx)),
    );
  }
}

function blobKey(ns: string, channel: string, version: unknown): string {
  return JSON.stringify([ns, channel, String(version)]);
}

function writesKey(ns: string, checkpointId: string): string {
  return JSON.stringify([ns, checkpointId]);
}

function typed([type, bytes]: [string, Uint8Array]): Typed {
  return [type, Buffer.from(bytes).toString("base64")];
}

function untyped([type, b64]: Typed): [string, Uint8Array] {
  return [type, new Uint8Array(Buffer.from(b64, "base64"))];
}

/** The configurable's `thread_id`, or an error naming what is missing. */
function requiredThread(config: RunnableConfig, what: string): string {
  const threadId = config.configurable?.["thread_id"];
  if (threadId === undefined || threadId === null || threadId === "") {
    throw new SessionlogError(
      `${what}: the config has no configurable.thread_id; pass { configurable: { thread_id: "..." } }`,
    );
  }
  return String(threadId);
}

/** Options of a `SessionlogSaver`. */
export interface SessionlogSaverOptions {
  /** The writer name its appends carry (default `langgraph`). */
  writer?: string;
  /** The catalogue's name within the tenant (default `langgraph`): `catalogue:{catalogue}`. */
  catalogue?: string;
  /** LangGraph's serializer (default: LangGraph's JSON-plus). */
  serde?: SerializerProtocol;
  /** Seconds to wait for the projection to hold what was written (default 30). */
  waitFor?: number;
}

/** One thread's fold, valid while its session's last seq is `lastSeq`. */
interface Folded {
  lastSeq: number;
  state: ThreadState;
}

/**
 * A LangGraph checkpointer on sessionlog (see the module's documentation). Channel versions are
 * LangGraph's default numbers. One process may hold many threads; calls on one thread take turns.
 */
export class SessionlogSaver extends BaseCheckpointSaver {
  /** The writer name its appends carry. */
  readonly writerName: string;
  /** The catalogue session's name within the caller's tenant. */
  readonly catalogueName: string;
  private readonly waitFor: number;
  // By session name (a thread's, or the catalogue's).
  private readonly writers = new Map<string, Session>();
  private readonly turns = new Map<string, Promise<unknown>>();
  // The session holding each name's events, once known (a copy's is not the named one).
  private readonly sessions = new Map<string, string>();
  private readonly folded = new Map<string, Folded>();
  private catalogued: string[] | undefined;

  constructor(
    readonly client: Client,
    options: SessionlogSaverOptions = {},
  ) {
    super(options.serde);
    this.writerName = options.writer ?? "langgraph";
    if (this.writerName === COPY_AGENT) {
      throw new SessionlogError(`${JSON.stringify(COPY_AGENT)} marks a copied thread's name: name the writer otherwise`);
    }
    this.catalogueName = `catalogue:${options.catalogue ?? "langgraph"}`;
    this.waitFor = options.waitFor ?? 30;
  }

  override async getTuple(config: RunnableConfig): Promise<CheckpointTuple | undefined> {
    // No thread named, no checkpoint (as LangGraph's savers answer).
    if (config.configurable?.["thread_id"] === undefined) return undefined;
    const threadId = requiredThread(config, "getTuple");
    const ns = String(config.configurable?.["checkpoint_ns"] ?? "");
    const thread = await this.turn(threadName(threadId), () => this.load(threadName(threadId)));
    const saved = thread?.checkpoints.get(ns);
    if (thread === undefined || saved === undefined || saved.size === 0) return undefined;
    const checkpointId = getCheckpointId(config) || [...saved.keys()].sort().at(-1)!;
    if (!saved.has(checkpointId)) return undefined;
    return this.tuple(threadId, ns, checkpointId, thread);
  }

  override async *list(config: RunnableConfig, options: CheckpointListOptions = {}): AsyncGenerator<CheckpointTuple> {
    const { before, filter } = options;
    let limit = options.limit;
    const configurable = config?.configurable ?? {};
    const threads =
      configurable["thread_id"] !== undefined ? [String(configurable["thread_id"])] : await this.threads();
    const wantedNs = configurable["checkpoint_ns"] as string | undefined;
    const wantedId = configurable["checkpoint_id"] as string | undefined;
    const beforeId = before?.configurable?.["checkpoint_id"] as string | undefined;
    for (const threadId of threads) {
      const thread = await this.turn(threadName(threadId), () => this.load(threadName(threadId)));
      for (const [ns, saved] of thread?.checkpoints ?? []) {
        if (wantedNs !== undefined && ns !== wantedNs) continue;
        for (const checkpointId of [...saved.keys()].sort().reverse()) {
          if ((wantedId && checkpointId !== wantedId) || (beforeId && checkpointId >= beforeId)) continue;
          const metadata = (await this.serde.loadsTyped(...untyped(saved.get(checkpointId)!.metadata))) as Record<string, unknown>;
          if (filter && !Object.entries(filter).every(([k, v]) => metadata?.[k] === v)) continue;
          if (limit !== undefined) {
            if (limit <= 0) return;
            limit -= 1;
          }
          yield await this.tuple(threadId, ns, checkpointId, thread!);
        }
      }
    }
  }

  override async put(
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    newVersions: ChannelVersions,
  ): Promise<RunnableConfig> {
    const threadId = requiredThread(config, "put");
    const ns = String(config.configurable?.["checkpoint_ns"] ?? "");
    // As LangGraph's Postgres saver: a checkpoint keeps the values of the channels it changed
    // (newVersions), each under its version; a read takes every channel's value at the version the
    // checkpoint names. Unchanged values are not written again with every step.
    const stored = copyCheckpoint(checkpoint);
    const values = stored.channel_values ?? {};
    stored.channel_values = {};
    const blobs: Record<string, [string, Typed | null]> = {};
    for (const [channel, version] of Object.entries(newVersions ?? {})) {
      blobs[channel] = [String(version), channel in values ? typed(await this.serde.dumpsTyped(values[channel])) : null];
    }
    const state: StateDoc = {
      type: "checkpoint",
      ns,
      id: checkpoint.id,
      parent: (config.configurable?.["checkpoint_id"] as string | undefined) ?? null,
      checkpoint: typed(await this.serde.dumpsTyped(stored)),
      metadata: typed(await this.serde.dumpsTyped(metadata)),
      blobs,
    };
    const name = threadName(threadId);
    await this.turn(name, () => this.append(name, [[`checkpoint:${ns}:${checkpoint.id}`, state]]));
    return { configurable: { thread_id: threadId, checkpoint_ns: ns, checkpoint_id: checkpoint.id } };
  }

  override async putWrites(config: RunnableConfig, writes: PendingWrite[], taskId: string, taskPath = ""): Promise<void> {
    const threadId = requiredThread(config, "putWrites");
    const ns = String(config.configurable?.["checkpoint_ns"] ?? "");
    const checkpointId = config.configurable?.["checkpoint_id"] as string | undefined;
    if (!checkpointId) {
      throw new SessionlogError("putWrites: the config has no configurable.checkpoint_id (the checkpoint the writes belong to)");
    }
    const events: [string, StateDoc][] = [];
    for (const [idx, [channel, value]] of writes.entries()) {
      const index = WRITES_IDX_MAP[channel] ?? idx;
      events.push([
        `writes:${ns}:${checkpointId}:${taskId}:${index}`,
        {
          type: "write", ns, checkpoint_id: checkpointId, task_id: taskId, task_path: taskPath, idx: index, channel,
          value: typed(await this.serde.dumpsTyped(value)),
        },
      ]);
    }
    const name = threadName(threadId);
    await this.turn(name, () => this.append(name, events));
  }

  override async deleteThread(threadId: string): Promise<void> {
    const name = threadName(threadId);
    await this.turn(name, async () => {
      const thread = await this.load(name);
      if (thread === undefined || thread.checkpoints.size === 0) return;
      await this.append(name, [["clear::", { type: "clear" }]], false);
    });
  }

  /**
   * Copies thread `source` into the new thread `target` as a fork: `target` reads the source's
   * history through its last event as its own past, and the log keeps the lineage (`sessionlog
   * lineage`). Needs the operator role. A target that exists is refused; one an interrupted copy
   * left named but not forked is finished. Copying a thread that does not exist does nothing.
   */
  async copyThread(source: string, target: string): Promise<void> {
    const from = threadName(source);
    const to = threadName(target);
    const last = await this.turn(from, () => this.lastSeq(from));
    if (last === undefined) return;
    await this.turn(to, async () => {
      const named = await this.client.createOrFind(COPY_AGENT, to, { title: `langgraph ${to}` });
      const copy = copySessionId(named.sessionId);
      if (named.opened === undefined && !(await this.interruptedCopy(named.sessionId))) {
        throw new SessionlogError(`thread ${JSON.stringify(target)} exists: copyThread copies into a new thread`);
      }
      let forked: string;
      try {
        forked = (await this.client.fork(this.sessions.get(from)!, last, this.writerName, copy)).sessionId;
      } catch (e) {
        // The copy was free above: a retry found its own first attempt's fork.
        if (!(e instanceof AlreadyStarted)) throw e;
        forked = copy;
      }
      if (forked !== copy) {
        throw new SessionlogError(
          `the recovery service forked ${JSON.stringify(source)} into ${forked}, not ${copy}: copyThread needs a recovery service of this release`,
        );
      }
      this.sessions.set(to, copy);
      this.folded.delete(to);
    });
    await this.catalogue(target);
  }

  /**
   * `fn` as a durable tool of the running graph's thread (see the package's `durableTool`): when
   * LangGraph runs an interrupted node again (after a crash, in a new process), a call whose
   * result the log holds answers it without running `fn` again. Call it from a node: the thread
   * is the running graph's (LangGraph's current config), or the one of the `config` a node passes
   * as the second argument (`await refund({ order }, config)`). The name is given first, or as
   * `options.name`, or is the function's own. Give `key` (the call's identity): by default calls
   * are counted per writer of the thread, not per task as the Python saver counts them.
   */
  durableTool<A, R>(name: string, options: DurableToolOptions<[A]>, fn: (args: A) => R | Promise<R>): (args: A, config?: RunnableConfig) => Promise<Awaited<R>>;
  durableTool<A, R>(options: DurableToolOptions<[A]>, fn: (args: A) => R | Promise<R>): (args: A, config?: RunnableConfig) => Promise<Awaited<R>>;
  durableTool<A, R>(
    ...given: [string, DurableToolOptions<[A]>, (args: A) => R | Promise<R>] | [DurableToolOptions<[A]>, (args: A) => R | Promise<R>]
  ): (args: A, config?: RunnableConfig) => Promise<Awaited<R>> {
    type Full = [string | undefined, DurableToolOptions<[A]>, (args: A) => R | Promise<R>];
    const [named, options, fn] = (typeof given[0] === "string" ? given : [undefined, ...given]) as Full;
    const tool = toolName(named, options, fn);
    const wrapped = new Map<Session, (args: A) => Promise<Awaited<R>>>();
    return async (args: A, config?: RunnableConfig): Promise<Awaited<R>> => {
      const running = (config ?? AsyncLocalStorageProviderSingleton.getRunnableConfig()) as RunnableConfig | undefined;
      const name = threadName(requiredThread(running ?? {}, `durable tool ${tool} (called outside a graph's node: pass the node's config)`));
      // Taken under the thread's turn: LangGraph saves the thread's writes while its nodes run.
      const writer = (await this.turn(name, () => this.writer(name)))!;
      let call = wrapped.get(writer);
      if (call === undefined) wrapped.set(writer, (call = durableTool<[A], R>(tool, writer, options, fn)));
      return call(args);
    };
  }

  // -- the log ---------------------------------------------------------------------------------

  /** Runs `work` after the calls on `name` before it (calls on one thread take turns). */
  private turn<T>(name: string, work: () => Promise<T>): Promise<T> {
    const previous = this.turns.get(name) ?? Promise.resolve();
    const next = previous.then(work, work);
    const settled = next.catch(() => undefined);
    this.turns.set(name, settled);
    void settled.then(() => {
      if (this.turns.get(name) === settled) this.turns.delete(name);
    });
    return next;
  }

  /** The writer of `name`'s events: started, or taken over (resume) when another process wrote it. */
  private async writer(name: string, create = true): Promise<Session | undefined> {
    const held = this.writers.get(name);
    if (held !== undefined) return held;
    let writer: Session;
    if (create) {
      writer = await Session.openNamed(this.client, name, {
        agent: this.writerName, writer: this.writerName, title: `langgraph ${name}`, waitFor: this.waitFor,
      });
    } else {
      const sid = await this.client.find(name);
      if (sid === undefined) return undefined;
      writer = await Session.resume(this.client, sid, this.writerName, { waitFor: this.waitFor });
    }
    if (writer.bundle !== undefined && writer.bundle.state["agent"] === COPY_AGENT) {
      try {
        writer = await Session.resume(this.client, copySessionId(writer.sessionId), this.writerName, { waitFor: this.waitFor });
      } catch (e) {
        if (e instanceof UnknownSession) {
          throw new SessionlogError(`${JSON.stringify(name)} names a copy whose fork is not in the log (an interrupted copyThread?): copy it again`);
        }
        throw e;
      }
    } else if (writer.bundle === undefined && name.startsWith(THREAD)) {
      await this.catalogue(name.slice(THREAD.length));
    }
    this.sessions.set(name, writer.sessionId);
    this.writers.set(name, writer);
    return writer;
  }

  /** Appends `[key, state]` documents to `name`'s session, as one request. */
  private async append(name: string, docs: [string, StateDoc][], create = true): Promise<void> {
    const writer = await this.writer(name, create);
    if (writer === undefined) return;
    await writer.appendAll(docs.map(([key, state]) => frameworkState(FRAMEWORK, key, JSON.stringify(state))));
    // Fold what was written into a fold that was current: no read for our own writes.
    const folded = this.folded.get(name);
    const last = writer.ledger.nextSeq - 1;
    if (folded !== undefined && folded.lastSeq === last - docs.length) {
      for (const [, state] of docs) folded.state.apply(state);
      folded.lastSeq = last;
    } else {
      this.folded.delete(name);
    }
  }

  /** Records `threadId` in the catalogue, taking the catalogue over if another process did. */
  private async catalogue(threadId: string): Promise<void> {
    const event = frameworkState(FRAMEWORK, THREAD_KEY, JSON.stringify({ type: "thread", thread_id: threadId }));
    await this.turn(this.catalogueName, async () => {
      for (let attempt = 0; attempt < 3; attempt++) {
        const writer = await this.writer(this.catalogueName);
        try {
          await writer!.appendAll([event]);
          this.catalogued = undefined;
          return;
        } catch (e) {
          if (!(e instanceof Fenced)) throw e;
          this.writers.delete(this.catalogueName);
        }
      }
      throw new SessionlogError("the LangGraph catalogue is being taken over by other processes; try again");
    });
  }

  /** The last seq of the session holding `name`'s events (undefined when there is none). */
  private async lastSeq(name: string): Promise<number | undefined> {
    const writer = this.writers.get(name);
    if (writer !== undefined) return writer.ledger.nextSeq - 1;
    let sid = this.sessions.get(name) ?? (await this.client.find(name));
    if (sid === undefined) return undefined;
    let view;
    try {
      view = await this.client.session(sid);
      if (view.state["agent"] === COPY_AGENT) {
        sid = copySessionId(sid);
        view = await this.client.session(sid);
      }
    } catch (e) {
      if (e instanceof UnknownSession) return undefined;
      throw e;
    }
    this.sessions.set(name, sid);
    // A copy reads its source's history through the fork point: wait for that too.
    const parent = view.state["parent"] as Record<string, unknown> | undefined;
    if (parent && typeof parent === "object") {
      await awaitProjected(this.client, String(parent["parent_session_id"]), Number(parent["parent_seq"]), this.waitFor);
    }
    return Number(view.state["last_seq"] ?? 0);
  }

  /** `name`'s thread, folded from the log (undefined when there is none). */
  private async load(name: string): Promise<ThreadState | undefined> {
    const last = await this.lastSeq(name);
    if (last === undefined) return undefined;
    const cached = this.folded.get(name);
    if (cached !== undefined && cached.lastSeq === last) return cached.state;
    const sid = this.sessions.get(name)!;
    await awaitProjected(this.client, sid, last, this.waitFor);
    const events: HistoryEvent[] = [];
    for await (const event of this.client.events(sid, { kinds: ["FrameworkStateSaved"], inherited: true, limit: PAGE })) {
      events.push(event);
    }
    const state = ThreadState.fold(events);
    this.folded.set(name, { lastSeq: last, state });
    return state;
  }

  /** Every thread the catalogue records, in the order first recorded. */
  private async threads(): Promise<string[]> {
    return this.turn(this.catalogueName, async () => {
      const last = await this.lastSeq(this.catalogueName);
      if (last === undefined) return [];
      if (this.catalogued !== undefined) return this.catalogued;
      const sid = this.sessions.get(this.catalogueName)!;
      await awaitProjected(this.client, sid, last, this.waitFor);
      const found: string[] = [];
      for await (const event of this.client.events(sid, { kinds: ["FrameworkStateSaved"], limit: PAGE })) {
        const text = textOf(event.data?.["state"]);
        if (text === undefined) continue;
        const threadId = String((JSON.parse(text) as { thread_id: unknown }).thread_id);
        if (!found.includes(threadId)) found.push(threadId);
      }
      // Kept while this process holds the catalogue's writer (it is the one adding to it).
      if (this.writers.has(this.catalogueName)) this.catalogued = found;
      return found;
    });
  }

  /** Whether the session `named` holds a copy's name and its fork is not there (an interrupted copy). */
  private async interruptedCopy(named: string): Promise<boolean> {
    if ((await this.client.session(named)).state["agent"] !== COPY_AGENT) return false;
    try {
      await this.client.session(copySessionId(named));
    } catch (e) {
      if (e instanceof UnknownSession) return true;
      throw e;
    }
    return false;
  }

  private async tuple(threadId: string, ns: string, checkpointId: string, thread: ThreadState): Promise<CheckpointTuple> {
    const saved = thread.checkpoints.get(ns)!.get(checkpointId)!;
    const checkpoint = (await this.serde.loadsTyped(...untyped(saved.checkpoint))) as Checkpoint;
    checkpoint.channel_values ??= {};
    for (const [channel, version] of Object.entries(checkpoint.channel_versions ?? {})) {
      const value = thread.blobs.get(blobKey(ns, channel, version));
      if (value) checkpoint.channel_values[channel] = await this.serde.loadsTyped(...untyped(value));
    }
    if (checkpoint.v < 4 && saved.parent !== undefined) {
      await this.migratePendingSends(checkpoint, thread, ns, saved.parent);
    }
    const pendingWrites: CheckpointPendingWrite[] = await Promise.all(
      thread.pendingWrites(ns, checkpointId).map(
        async (w): Promise<CheckpointPendingWrite> => [w.taskId, w.channel, await this.serde.loadsTyped(...untyped(w.value))],
      ),
    );
    const tuple: CheckpointTuple = {
      config: { configurable: { thread_id: threadId, checkpoint_ns: ns, checkpoint_id: checkpointId } },
      checkpoint,
      metadata: (await this.serde.loadsTyped(...untyped(saved.metadata))) as CheckpointMetadata,
      pendingWrites,
    };
    if (saved.parent !== undefined) {
      tuple.parentConfig = { configurable: { thread_id: threadId, checkpoint_ns: ns, checkpoint_id: saved.parent } };
    }
    return tuple;
  }

  /**
   * A checkpoint of format v < 4 kept pending sends as its parent's TASKS writes; LangGraph's
   * savers move them into the checkpoint's TASKS channel on read (as `MemorySaver` does).
   */
  private async migratePendingSends(checkpoint: Checkpoint, thread: ThreadState, ns: string, parentId: string): Promise<void> {
    const sends = await Promise.all(
      thread
        .pendingWrites(ns, parentId)
        .filter((w) => w.channel === TASKS)
        .map((w) => this.serde.loadsTyped(...untyped(w.value))),
    );
    checkpoint.channel_values ??= {};
    checkpoint.channel_values[TASKS] = sends;
    checkpoint.channel_versions ??= {};
    const versions = Object.values(checkpoint.channel_versions);
    checkpoint.channel_versions[TASKS] = versions.length > 0 ? maxChannelVersion(...versions) : this.getNextVersion(undefined);
  }
}
