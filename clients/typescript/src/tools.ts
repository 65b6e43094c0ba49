/**
 * Durable tools: a tool call that runs at most as often as its effect class allows, across crashes
 * (the semantics of clients/python/src/sessionlog/tools.py).
 *
 * A function wrapped by `durableTool` records the call's intent in the session's log before it
 * runs and its result after. When the same call comes again:
 * - its result is recorded: the recorded result is returned, and the function does not run;
 * - it was requested and its outcome never recorded (the harness died in between, or the function
 *   threw without saying it failed definitively): it is settled by its effect class as recovery
 *   settles it: a pure call runs again; an idempotent call runs again with the same key (after a
 *   crash, when its service's resolver says it never arrived; recovery records the result itself
 *   when it did); any other call throws `CallInDoubt` until an operator records what it did.
 *
 * Which invocation is "the same call": with `key`, the call with that key (sent to the service as
 * given); by default the n-th invocation of the tool with equal arguments in the session, its key
 * `{sessionId}.{digest}.{n}` (the Python client's scheme), unique per session and call.
 * Arguments are named as the log records them: a single plain-object argument is the arguments
 * (`fn({city})` records `{"city": ...}`, like a Python call by keyword); anything else is
 * `{"args": [...]}`.
 *
 * Failures: throwing `ToolFailedDefinitively` (or an error of a class in `definitive`) records the
 * call as `Failed`, and the same call answers `ToolFailed` from then on; a `Pure` call's error is
 * recorded the same way; any other error of an `Idempotent` or `NonIdempotent` call leaves the
 * outcome unknown and records nothing (in doubt). A result that cannot be recorded (the service
 * unreachable past the client's retries) is kept and recorded before the session's next call.
 *
 * Concurrent invocations of one session share its ledger: a call is planned by one caller at a
 * time, and a caller of a call another runs now waits for it, then answers its recorded result (or
 * finds it in doubt); appends take turns. Inside the function, `currentCall()` gives the call's key.
 */
import { AsyncLocalStorage } from "node:async_hooks";
import { createHash } from "node:crypto";
import { ToolFailed, ToolFailedDefinitively } from "./errors.js";
import type { CallName, Occurrences, SessionLedger, ToolCall } from "./ledger.js";
import type { EffectClass, EventAck } from "./models.js";
import { canonicalJson, encodeJson } from "./session.js";

/** What a durable tool needs of its session's writer: `Session` has it, and so does a framework adapter that writes its own way. */
export interface Writer {
  readonly ledger: SessionLedger;
  readonly occurrences: Occurrences;
  sendUnacknowledged(): Promise<void>;
  toolCall(tool: string, args: string, o: { effect: EffectClass; idempotencyKey?: string | undefined }): Promise<ToolCall>;
  toolResult(call: ToolCall, output: string, o?: { succeeded?: boolean }): Promise<EventAck>;
}

/** The durable call running now. */
export interface CallInfo {
  tool: string;
  /** What an idempotent service dedupes by: send it with the request. */
  idempotencyKey: string;
  /** The seq of the call's request in the session. */
  seq: number;
  /** True when this run settles a call an earlier run left without a result. */
  repeat: boolean;
}

const CURRENT = new AsyncLocalStorage<CallInfo>();

/** The durable call running now (its key is what an idempotent service dedupes by). */
export function currentCall(): CallInfo {
  const info = CURRENT.getStore();
  if (!info) throw new Error("currentCall() is only defined inside a durable tool");
  return info;
}

/** How a durable tool is recorded and named. */
export interface DurableToolOptions<A extends unknown[]> {
  /** What running the call again would do. */
  effect: EffectClass;
  /** Names a call by its arguments (its key is sent as given); by default, the n-th call with equal arguments. */
  key?: (...args: A) => string;
  /** The tool's name in the log (the function's name by default). */
  name?: string;
  /** Reads a recorded output back (JSON when this library wrote it, else the text a resolver or operator recorded). */
  decode?: (output: string) => unknown;
  /** Error classes that mean the call failed and did nothing, like `ToolFailedDefinitively`. */
  definitive?: readonly (abstract new (...args: never[]) => unknown)[];
}

/**
 * A durable tool's name: the one given first, or `options.name`, or the function's own name
 * (all that agree); a `TypeError` when there is none, or two disagree.
 */
export function toolName(given: string | undefined, options: { name?: string | undefined }, fn: { name: string }): string {
  const names = [given, options.name].filter((n): n is string => n !== undefined);
  if (names.some((n) => !n)) throw new TypeError("durableTool: a tool's name is not empty");
  if (names.length === 2 && names[0] !== names[1]) {
    throw new TypeError(`durableTool: two names for one tool: ${JSON.stringify(names[0])} and options.name ${JSON.stringify(names[1])}`);
  }
  const tool = names[0] ?? fn.name;
  if (!tool) {
    throw new TypeError(
      'durableTool: the tool has no name: give it first (durableTool("refund", session, options, fn)), or as options.name, or pass a named function',
    );
  }
  return tool;
}

/** A call's arguments as the log records them (see the module's doc). */
export function namedArguments(args: readonly unknown[]): Record<string, unknown> {
  const [only] = args;
  if (args.length === 1 && typeof only === "object" && only !== null && Object.getPrototypeOf(only) === Object.prototype) {
    return only as Record<string, unknown>;
  }
  return { args: [...args] };
}

/** The digest naming a call by its tool and arguments (and the part of the session its run covers), as Python's `argument_digest`. */
export function argumentDigest(tool: string, args: Record<string, unknown>, scope?: string): string {
  const named = scope === undefined ? [tool, args] : [tool, args, scope];
  return createHash("sha256").update(canonicalJson(named)).digest("hex").slice(0, 32);
}

/** A recorded output: JSON when this library wrote it, else the text a resolver or an operator recorded. */
export function decodeOutput(output: string): unknown {
  try {
    return JSON.parse(output);
  } catch {
    return output;
  }
}

function recorded(call: ToolCall, decode: (output: string) => unknown): unknown {
  const result = call.result!;
  if (result.output === undefined) throw new ToolFailed(call.tool, call.seq, "its recorded output no longer opens (the session was erased)");
  if (result.outcome !== "Succeeded") throw new ToolFailed(call.tool, call.seq, result.output);
  return decode(result.output);
}

function failure(error: unknown): string {
  if (error instanceof ToolFailedDefinitively) return error.message || error.name;
  if (error instanceof Error) return `${error.name}: ${error.message}`;
  return String(error);
}

/**
 * Makes `fn` a durable tool of `session` (or of the session a function answers, for tools defined
 * before their session exists). Arguments and results are recorded as JSON.
 *
 * The tool's name in the log comes from the first argument (`durableTool("refund", session, ...)`),
 * else from `options.name`, else from the function's own name (`async function refund(...)`); an
 * anonymous function with none of them is refused here, when the tool is defined.
 */
export function durableTool<A extends unknown[], R>(
  name: string,
  session: Writer | (() => Writer),
  options: DurableToolOptions<A>,
  fn: (...args: A) => R | Promise<R>,
): (...args: A) => Promise<Awaited<R>>;
export function durableTool<A extends unknown[], R>(
  session: Writer | (() => Writer),
  options: DurableToolOptions<A>,
  fn: (...args: A) => R | Promise<R>,
): (...args: A) => Promise<Awaited<R>>;
export function durableTool<A extends unknown[], R>(
  ...given: [string, Writer | (() => Writer), DurableToolOptions<A>, (...args: A) => R | Promise<R>] |
    [Writer | (() => Writer), DurableToolOptions<A>, (...args: A) => R | Promise<R>]
): (...args: A) => Promise<Awaited<R>> {
  type Full = [string | undefined, Writer | (() => Writer), DurableToolOptions<A>, (...args: A) => R | Promise<R>];
  const [named, session, options, fn] = (typeof given[0] === "string" ? given : [undefined, ...given]) as Full;
  const tool = toolName(named, options, fn);
  const decode = options.decode ?? decodeOutput;
  const definitive = [ToolFailedDefinitively, ...(options.definitive ?? [])];
  const endsTheCall = (error: unknown, call: ToolCall) =>
    definitive.some((cls) => error instanceof cls) || (call.effect === "Pure" && error instanceof Error);

  return async (...args: A): Promise<Awaited<R>> => {
    const target = typeof session === "function" ? session() : session;
    const { ledger } = target;
    const counts = target.occurrences;
    const args_ = namedArguments(args);
    const name: CallName = options.key
      ? ledger.nameCall(tool, { key: options.key(...args) })
      : ledger.nameCall(tool, { digest: argumentDigest(tool, args_, counts.scope), occurrences: counts });
    // Whether the caller got an outcome it can rely on; if not, the next equal invocation is this one's retry.
    let settled = false;
    try {
      let plan;
      for (;;) {
        // A result an outage kept from the log goes there first: then it is recorded.
        await target.sendUnacknowledged();
        plan = ledger.planCall(name);
        if (plan.kind === "recorded") {
          settled = true;
          return recorded(plan.call!, decode) as Awaited<R>;
        }
        if (plan.kind !== "wait") break;
        const current = CURRENT.getStore();
        if (current && current.tool === tool && current.idempotencyKey === plan.key) {
          throw new Error(`durable tool ${JSON.stringify(tool)} calls itself as the same call (${plan.key}): it would wait forever`);
        }
        await plan.flight!.wait();
      }
      const flight = plan.flight!;
      try {
        const call = plan.call ?? (await target.toolCall(tool, encodeJson(args_), { effect: options.effect, idempotencyKey: plan.key }));
        const info: CallInfo = { tool, idempotencyKey: plan.key, seq: call.seq, repeat: plan.kind === "settle" };
        let value: Awaited<R>;
        try {
          value = await CURRENT.run(info, async () => await fn(...args));
        } catch (error) {
          if (!endsTheCall(error, call)) {
            ledger.leftInDoubt(call);
            throw error;
          }
          await target.toolResult(call, failure(error), { succeeded: false });
          settled = true;
          throw error;
        }
        await target.toolResult(call, encodeJson(value));
        settled = true;
        return value;
      } finally {
        flight.land();
      }
    } finally {
      if (!settled) counts.leaveOpen(name);
    }
  };
}
