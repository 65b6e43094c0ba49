/**
 * Workers: run the sessions of an agent that need a harness (clients/python/src/sessionlog/worker.py's
 * `Worker`, over HTTP alone).
 *
 * A session whose harness died, or whose wait is over (an approval decided, an operator's result
 * recorded, a pause run out, steering for a session nobody runs), gets a *wake*. A worker asks
 * the recovery service for its agent's next one (`GET /v1/work`, a long poll): the service takes
 * the session for it (the next epoch, as `Session.resume` does; earlier writers are fenced) and
 * answers the resume bundle with the wake. The worker holds the session's writer lease, hands the
 * session to the handler, and lets go of it when the handler is done:
 *
 * - the handler answers an outcome (`"Completed"`, `"Failed"`, `"Cancelled"`): the worker closes
 *   the session with it (which releases the lease);
 * - it closed the session itself, or released the lease: nothing more to do;
 * - it answers nothing: the worker releases the lease (the session stays as the handler left it,
 *   for a later wake);
 * - it throws: the error is reported and the lease left to lapse, as a crashed harness's would,
 *   so the session is woken again.
 *
 * A session another writer took between the service's take and the worker's lease ("already
 * taken": the lease is refused) is skipped cleanly: the fold decides who writes, the wake is only
 * a hint.
 *
 *     const worker = new Worker(client, { agent: "refunds" });
 *     const stop = new AbortController();
 *     process.once("SIGTERM", () => stop.abort());
 *     await worker.run(async (session, wake) => { ...; return "Completed"; }, { signal: stop.signal });
 */
import type { Client } from "./client.js";
import * as errors from "./errors.js";
import { SessionLedger } from "./ledger.js";
import type { TerminalOutcome, Wake } from "./models.js";
import { Session } from "./session.js";

/** The longest wait the recovery service grants a poll, in seconds. */
export const MAX_WAIT = 60;
// How much sooner than the client's timeout a poll's wait ends: the service still takes the session after the wait.
const TIMEOUT_MARGIN = 5;
// The shortest poll a worker makes: shorter is a loop that only asks.
const MIN_WAIT = 0.1;

/** What a worker's handler does with a session, awaited: an outcome to close it with, or nothing (the lease is released). */
export type AsyncHandler = (session: Session, wake: Wake) => Promise<TerminalOutcome | undefined | void>;
/** A handler that does not wait: an outcome to close the session with, or nothing. */
export type SyncHandler = (session: Session, wake: Wake) => TerminalOutcome | undefined | void;
/**
 * What a worker's handler does with a session: an outcome to close it with, or nothing. (Two
 * kinds, not one function type answering either: TypeScript then reads `return "Completed"` in an
 * async handler as a `string`, which no outcome is.)
 */
export type Handler = AsyncHandler | SyncHandler;

/** A worker's settings. */
export interface WorkerOptions {
  /** The agent whose sessions the worker runs. */
  agent: string;
  /** The writer the service records for each session it takes (with the caller's subject); the agent's name by default. */
  writer?: string;
  /** Seconds one poll waits for a wake: at most 60, and 5 less than the client's timeout (default 20). */
  wait?: number;
  /** The token budget of the bundle's context view. */
  contextTokens?: number;
  /** Seconds to wait for the projection to hold a taken session's last event (its tool calls are learnt from it). */
  waitProjectedFor?: number;
  /** The longest pause after failed polls, in seconds (default 30). */
  maxBackoff?: number;
  /** Where failures the loop survives are reported (default `console.warn`). */
  report?: (message: string, error: unknown) => void;
}

/**
 * Whether a failed poll will fail again however long the worker waits: the request or the
 * credential is wrong. (A session's conflict, a service down, a bug the service may lose on
 * restart are waited out.)
 */
function fatal(error: unknown): boolean {
  return (
    error instanceof errors.Unauthenticated || error instanceof errors.Forbidden ||
    error instanceof errors.BadRequest || error instanceof errors.Unprocessable || error instanceof errors.InvalidArgument
  );
}

/** Waits `ms`, or less when `signal` aborts. */
function pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
  });
}

/** Runs the sessions of an agent that need a harness, one at a time. */
export class Worker {
  /** The agent whose sessions this worker runs. */
  readonly agent: string;
  /** Seconds one poll waits. */
  readonly wait: number;
  private readonly options: WorkerOptions;
  private failures = 0;

  constructor(readonly client: Client, options: WorkerOptions) {
    if (!options.agent) throw new errors.InvalidArgument("a worker needs the name of the agent whose sessions it runs");
    this.agent = options.agent;
    this.options = options;
    // A poll must end before the client gives up on its answer; a client whose timeout leaves no
    // time for a long poll would poll in a tight loop.
    this.wait = Math.min(options.wait ?? 20, MAX_WAIT, client.timeout - TIMEOUT_MARGIN);
    if (!(this.wait >= MIN_WAIT)) {
      throw new errors.InvalidArgument(
        `a worker long-polls for up to \`wait\` seconds, at least ${MIN_WAIT} and at least ${TIMEOUT_MARGIN} s less than ` +
          `the client's timeout (${client.timeout} s): give the client a longer timeout`,
      );
    }
  }

  /**
   * Polls once: the next session taken for this worker, with its writer lease held and its tool
   * calls learnt, and its wake; undefined when no wake came within the wait, or when the session
   * was already taken by another writer before its lease was held (skipped).
   */
  async take(): Promise<{ session: Session; wake: Wake } | undefined> {
    const found = await this.client.work(this.agent, { wait: this.wait, writer: this.options.writer, contextTokens: this.options.contextTokens });
    if (found === undefined) return undefined;
    const { bundle, wake } = found;
    const session = new Session(this.client, SessionLedger.fromBundle(bundle), bundle);
    // The lease first: the projection may take a while, and a session nobody holds a lease on looks abandoned.
    try {
      await session.holdLease(this.options.writer);
    } catch (e) {
      if (!(e instanceof errors.Conflict)) throw e;
      if (!(e instanceof errors.LeasesOff)) return undefined; // already taken: another writer won the fold
    }
    try {
      await session.learnCalls(this.options.waitProjectedFor ?? 30);
    } catch (e) {
      session.stopLease(); // left to lapse: the session is woken again
      throw e;
    }
    return { session, wake };
  }

  /**
   * Takes one session (waiting up to `wait` for it) and runs `handler` on it; whether there was
   * one. Errors of the poll are thrown; the handler's are reported.
   */
  runOne(handler: AsyncHandler): Promise<boolean>;
  runOne(handler: SyncHandler): Promise<boolean>;
  async runOne(handler: Handler): Promise<boolean> {
    const taken = await this.take();
    if (taken === undefined) return false;
    const { session, wake } = taken;
    let outcome: TerminalOutcome | undefined | void;
    try {
      outcome = await handler(session, wake);
    } catch (e) {
      this.report(`agent ${this.agent}: the handler failed on session ${wake.sessionId}; its lease is left to lapse`, e);
      session.stopLease();
      return true;
    }
    await this.letGo(session, outcome ?? undefined);
    return true;
  }

  /**
   * Runs `handler` on each session taken until `signal` aborts (checked between polls and during
   * a backoff: a poll in flight ends within `wait` seconds). A failed poll is tried again after
   * a backoff (up to `maxBackoff` seconds, with jitter); one that no retry mends (a credential
   * without the harness role, a bad agent name) is thrown.
   */
  run(handler: AsyncHandler, options?: { signal?: AbortSignal }): Promise<void>;
  run(handler: SyncHandler, options?: { signal?: AbortSignal }): Promise<void>;
  async run(handler: Handler, options: { signal?: AbortSignal } = {}): Promise<void> {
    const signal = options.signal;
    while (!signal?.aborted) {
      try {
        await this.runOne(handler as AsyncHandler);
        this.failures = 0;
      } catch (e) {
        if (fatal(e) || !(e instanceof errors.SessionlogError)) throw e;
        this.failures += 1;
        const delay = Math.min(this.options.maxBackoff ?? 30, 0.5 * 2 ** Math.min(this.failures - 1, 16)) * (0.5 + Math.random() / 2);
        this.report(`agent ${this.agent}: polling for work failed; trying again in ${delay.toFixed(1)}s`, e);
        await pause(delay * 1000, signal);
      }
    }
  }

  /** Closes the session with `outcome`, or releases its lease if the handler kept it. */
  private async letGo(session: Session, outcome: TerminalOutcome | undefined): Promise<void> {
    try {
      if (outcome !== undefined) await session.close(outcome);
      else if (session.holdsLease) await session.releaseLease();
    } catch (e) {
      session.stopLease();
      // A conflict: closed by the handler already, or taken over since: not this worker's any more.
      if (!(e instanceof errors.Conflict)) this.report(`session ${session.sessionId}: letting go failed; its lease lapses`, e);
    }
  }

  private report(message: string, error: unknown): void {
    (this.options.report ?? ((m, e) => console.warn(m, e)))(message, error);
  }
}
