/**
 * The OpenAI Agents SDK for JavaScript on sessionlog: `SessionlogSession` implements the SDK's
 * `Session` interface over a sessionlog session, so an agent's conversation is the session's log,
 * as the Python `SessionlogSession` does (the same names, events and records).
 *
 * The SDK session id `id` finds its sessionlog session by the name `openai-agents:{id}` within the
 * caller's tenant: two tenants using the same id have two sessions, neither learning of the other.
 *
 * Items map to event kinds, for what the log needs (recovery, the context view, analytics): a user
 * message is a `UserRequest` (its text parts), an assistant message a `ModelResponse`, a function
 * call a `ToolCallRequested` (its call id is the idempotency key) and its result a
 * `ToolCallResult`. Beside each such event a `FrameworkStateSaved` (framework `openai-agents`, key
 * `item`, its causation id the event's id, chosen before sending) keeps the item whole, so
 * `getItems` answers exactly what `addItems` was given. Any other item (reasoning, hosted tool
 * calls) is kept whole, as JSON, in a `ModelResponse` whose model names the item's type
 * (`openai-agents:item:reasoning`). One `addItems` is one append, so a call and its result given
 * together land together. A function call given without its result (it waits for an approval,
 * perhaps in another process) is kept whole on its own, and its `ToolCallRequested` is written
 * with its result: a request with no result is a call recovery must not guess about, and nothing
 * ran yet. `popItem` appends an `EventRetracted` naming the item's event; `clearSession` retracts
 * every item; the log is never rewritten.
 *
 * A function tool wrapped by `durableTool` records its own request and result (see the package's
 * `durableTool`), so a harness killed mid-call that runs the turn again gets the recorded result
 * instead of a second side effect. The SDK's items of such a call are kept whole on their own (the
 * wrapper's records are the log's account of the call), and the wrapper's records are no items.
 *
 * The SDK writes a run's input only with its results, at the end of a run that is not streamed:
 * a process killed mid-run would lose what the user said. `addInput` records it first; then the
 * run is given no new input, and a new process after a crash runs the very same call:
 *
 *     const session = new SessionlogSession("user-42", new Client({ token }), { writer: "support-bot" });
 *     const refund = tool({ name: "refund", parameters, execute: session.durableTool(
 *       "refund", { effect: "Idempotent", key: ({ order }) => `refund-${order}` }, doRefund) });
 *     await session.addInput("Refund order 4711");
 *     await run(agent, [], { session });
 */

import { randomUUID } from "node:crypto";

import type { AgentInputItem, Session as AgentsSession } from "@openai/agents-core";

import type { Client } from "../client.js";
import { SessionlogError } from "../errors.js";
import type { Event, ToolCall } from "../ledger.js";
import { textOf, type EffectClass, type HistoryEvent } from "../models.js";
import { Session, awaitProjected, frameworkState, modelResponse, retraction, toolCall, toolResult, userRequest } from "../session.js";
import { durableTool, toolName, type DurableToolOptions } from "../tools.js";

/** Who the retractions name. */
export const RETRACTED_BY = "openai-agents:pop_item";
/** The model name prefix of items with no event of their own, kept whole in a `ModelResponse`. */
export const ITEM_MODEL = "openai-agents:item:";
/** The framework and key of the record keeping an item whole. */
export const FRAMEWORK = "openai-agents";
export const ITEM_KEY = "item";
const ITEM_KINDS = ["UserRequest", "ModelResponse", "ToolCallRequested", "ToolCallResult", "EventRetracted", "FrameworkStateSaved"];
const PAGE = 1000;

/** The name of an SDK session's sessionlog session, unique within the caller's tenant. */
export function sessionName(sessionId: string): string {
  return `openai-agents:${sessionId}`;
}

/** Options of a `SessionlogSession`. */
export interface SessionlogSessionOptions {
  /** The writer name its appends carry (required: it names the harness in the log). */
  writer: string;
  /** The agent named when the session starts (default: the writer). */
  agent?: string;
  /** The model named in assistant messages' `ModelResponse` (default `openai-agents`). */
  model?: string;
  /** Each function tool's effect class, which recovery settles an unfinished call by (default `NonIdempotent`). */
  toolEffects?: Record<string, EffectClass>;
  /** Seconds to wait for the projection to hold what was written (default 30). */
  waitFor?: number;
}

type Item = Record<string, unknown>;

/** A function call kept whole with no request written yet: its record's event id, its arguments. */
interface Waiting {
  eventId: string;
  arguments: string;
}

/** One live item and the seq a retraction of it names. */
interface Live {
  seq: number;
  item: AgentInputItem;
}

/**
 * An OpenAI Agents SDK `Session` whose items live in a sessionlog session (see the module's
 * documentation). The first call takes the session named after `sessionId` over as the writer
 * (resume: the next epoch, so a crashed process is fenced and its tool calls settled), or starts
 * it. Calls take turns.
 */
export class SessionlogSession implements AgentsSession {
  readonly writerName: string;
  readonly agent: string;
  readonly model: string;
  readonly toolEffects: Record<string, EffectClass>;
  private readonly waitFor: number;
  private writer: Session | undefined;
  private turns: Promise<unknown> = Promise.resolve();
  // Tools whose calls a durable wrapper records.
  private readonly durable = new Set<string>();
  // Function calls kept whole with no request written yet, by call id: the record's event id and
  // the call's arguments.
  private waiting = new Map<string, Waiting>();
  // Whether `waiting` holds what the log does: learned by the first read of the log, then kept.
  private learned = false;

  constructor(
    readonly sessionId: string,
    readonly client: Client,
    options: SessionlogSessionOptions,
  ) {
    if (!options?.writer) throw new SessionlogError("SessionlogSession needs options.writer, the harness's name in the log");
    this.writerName = options.writer;
    this.agent = options.agent ?? options.writer;
    this.model = options.model ?? "openai-agents";
    this.toolEffects = { ...(options.toolEffects ?? {}) };
    this.waitFor = options.waitFor ?? 30;
  }

  /** The SDK session id. */
  async getSessionId(): Promise<string> {
    return this.sessionId;
  }

  /** Takes the session over, or starts it; idempotent. The open writer. */
  open(): Promise<Session> {
    return this.turn(() => this.opened());
  }

  /**
   * Records what the user said (a text, or input items) in the session now, before the run: the
   * SDK writes a non-streamed run's input only with its results, when the run ends, so a process
   * killed mid-run would lose it. Then run with no new input, `run(agent, [], { session })`,
   * which is also what a new process runs after a crash: the model reads the whole conversation
   * from the session.
   */
  addInput(input: string | AgentInputItem[]): Promise<void> {
    const items = typeof input === "string" ? [{ type: "message", role: "user", content: input } as AgentInputItem] : input;
    return this.addItems(items);
  }

  /**
   * `fn` as a durable tool of this session, for a function tool's `execute`: a call whose result
   * the log holds answers it without running `fn` again (see the package's `durableTool`). The
   * name is the tool's name as the model calls it (the SDK tool's `name`): given first, or as
   * `options.name`, or the function's own name.
   */
  durableTool<A, R>(name: string, options: DurableToolOptions<[A]>, fn: (args: A) => R | Promise<R>): (args: A) => Promise<Awaited<R>>;
  durableTool<A, R>(options: DurableToolOptions<[A]>, fn: (args: A) => R | Promise<R>): (args: A) => Promise<Awaited<R>>;
  durableTool<A, R>(
    ...given: [string, DurableToolOptions<[A]>, (args: A) => R | Promise<R>] | [DurableToolOptions<[A]>, (args: A) => R | Promise<R>]
  ): (args: A) => Promise<Awaited<R>> {
    type Full = [string | undefined, DurableToolOptions<[A]>, (args: A) => R | Promise<R>];
    const [named, options, fn] = (typeof given[0] === "string" ? given : [undefined, ...given]) as Full;
    const name = toolName(named, options, fn);
    this.durable.add(name);
    this.toolEffects[name] = options.effect;
    let wrapped: { writer: Session; call: (args: A) => Promise<Awaited<R>> } | undefined;
    // Only the model's arguments: the SDK passes its run context and call details after them.
    return async (args: A): Promise<Awaited<R>> => {
      const writer = await this.open();
      if (wrapped?.writer !== writer) wrapped = { writer, call: durableTool<[A], R>(name, writer, options, fn) };
      return wrapped.call(args);
    };
  }

  /** The conversation, oldest first: the latest `limit` items when given. */
  getItems(limit?: number): Promise<AgentInputItem[]> {
    return this.turn(async () => {
      const items = (await this.live()).map((l) => structuredClone(l.item));
      return limit === undefined ? items : limit <= 0 ? [] : items.slice(-limit);
    });
  }

  /** Appends `items` as one append (see the module's documentation). */
  addItems(items: AgentInputItem[]): Promise<void> {
    return this.turn(async () => {
      if (items.length === 0) return;
      const writer = await this.opened();
      const given = items.map((i) => structuredClone(i) as Item);
      // A result whose call is not beside it may answer a call kept waiting by another object
      // (another process): learn the waiting calls from the log, so the request is written.
      const calls = new Set(given.filter((i) => i["type"] === "function_call").map((i) => String(i["callId"])));
      const answers = given.some((i) => isResult(i) && !calls.has(String(i["callId"])) && !this.durable.has(String(i["name"] ?? "")));
      if (answers && !this.learned) await this.live();
      await writer.appendPlanned((first) => this.events(given, first));
    });
  }

  /** Withdraws the latest item and answers it (undefined when there is none). */
  popItem(): Promise<AgentInputItem | undefined> {
    return this.turn(async () => {
      const last = (await this.live()).at(-1);
      if (last === undefined) return undefined;
      await (await this.opened()).appendAll([retract(last.seq)]);
      return last.item;
    });
  }

  /** Withdraws every item (the log keeps them, retracted). */
  clearSession(): Promise<void> {
    return this.turn(async () => {
      const live = await this.live();
      if (live.length > 0) await (await this.opened()).appendAll(live.map((l) => retract(l.seq)));
      this.waiting.clear();
    });
  }

  // -- internals -------------------------------------------------------------------------------

  private turn<T>(work: () => Promise<T>): Promise<T> {
    const next = this.turns.then(work, work);
    this.turns = next.catch(() => undefined);
    return next;
  }

  private async opened(): Promise<Session> {
    this.writer ??= await Session.openNamed(this.client, sessionName(this.sessionId), {
      agent: this.agent,
      writer: this.writerName,
      title: this.sessionId,
      waitFor: this.waitFor,
    });
    return this.writer;
  }

  /** The events of `items`, the first at seq `first`. */
  private events(items: Item[], first: number): Event[] {
    const events: Event[] = [];
    const push = (event: Event): string => {
      const eventId = event.eventId ?? randomUUID();
      events.push({ ...event, eventId });
      return eventId;
    };
    const record = (item: Item, beside: string | undefined): void => {
      push({ ...frameworkState(FRAMEWORK, ITEM_KEY, JSON.stringify(item)), causationId: beside });
    };
    // Requests written in this batch, by call id: their seq and event id.
    const requests = new Map<string, ToolCall>();
    const outputs = new Set(items.filter(isResult).map((i) => String(i["callId"])));
    for (const item of items) {
      const callId = String(item["callId"] ?? "");
      const tool = String(item["name"] ?? "");
      if (item["type"] === "function_call") {
        if (this.durable.has(tool) || !outputs.has(callId)) {
          // A durable call's wrapper records it; a call with no result yet is kept on its own.
          const id = randomUUID();
          push({ ...frameworkState(FRAMEWORK, ITEM_KEY, JSON.stringify(item)), eventId: id });
          if (!this.durable.has(tool)) this.waiting.set(callId, { eventId: id, arguments: String(item["arguments"] ?? "") });
          continue;
        }
        const seq = first + events.length;
        const effect = this.effect(tool);
        const eventId = push(toolCall(tool, String(item["arguments"] ?? ""), { effect, idempotencyKey: callId || undefined }));
        requests.set(callId, { seq, eventId, tool, effect, idempotencyKey: callId || undefined });
        record(item, eventId);
      } else if (isResult(item)) {
        if (this.durable.has(tool)) {
          record(item, undefined);
          continue;
        }
        let request = requests.get(callId);
        const kept = this.waiting.get(callId);
        if (request === undefined && kept !== undefined) {
          // Its call was kept whole before: its request now, naming that record.
          const seq = first + events.length;
          const effect = this.effect(tool);
          const eventId = push({ ...toolCall(tool, kept.arguments, { effect, idempotencyKey: callId || undefined }), causationId: kept.eventId });
          request = { seq, eventId, tool, effect, idempotencyKey: callId || undefined };
          this.waiting.delete(callId);
        }
        if (request === undefined) {
          // A result whose call has its result already (a popped output added back): kept whole alone.
          record(item, undefined);
          continue;
        }
        record(item, push(toolResult(request, outputText(item["output"]), { succeeded: item["status"] !== "incomplete" })));
      } else if (item["role"] === "user") {
        record(item, push(userRequest(textParts(item["content"]))));
      } else if (item["role"] === "assistant") {
        record(item, push(modelResponse(this.model, textParts(item["content"]))));
      } else {
        // Kept whole in a ModelResponse of its own (reasoning, hosted tool calls, system messages).
        push(modelResponse(`${ITEM_MODEL}${String(item["type"] ?? item["role"] ?? "item")}`, JSON.stringify(item)));
      }
    }
    return events;
  }

  private effect(tool: string): EffectClass {
    return this.toolEffects[tool] ?? "NonIdempotent";
  }

  /** Every item the log holds and no retraction withdrew, oldest first, each with its seq. */
  private async live(): Promise<Live[]> {
    const writer = await this.opened();
    const last = writer.ledger.nextSeq - 1;
    if (last <= 0) {
      this.learned = true;
      return [];
    }
    await awaitProjected(this.client, writer.sessionId, last, this.waitFor);
    const events: HistoryEvent[] = [];
    for await (const e of this.client.events(writer.sessionId, { kinds: ITEM_KINDS, toSeq: last, limit: PAGE })) events.push(e);
    const retracted = new Set(events.filter((e) => e.kind === "EventRetracted").map((e) => Number(e.data?.["retracted_seq"] ?? 0)));
    const byId = new Map(events.map((e) => [e.eventId, e]));
    const calls = new Map(events.filter((e) => e.kind === "ToolCallRequested").map((e) => [e.seq, e]));
    const beside = new Set<string>();
    const alone = new Map<string, Item>();
    for (const e of events) {
      const item = itemRecord(e);
      if (item === undefined) continue;
      if (e.causationId !== undefined && byId.has(e.causationId)) beside.add(e.causationId);
      else alone.set(e.eventId, item);
    }
    const standing = new Set(events.filter((e) => e.kind === "ToolCallRequested" && alone.has(e.causationId ?? "")).map((e) => e.causationId!));
    this.waiting = new Map(
      [...alone.entries()]
        .filter(([id, item]) => item["type"] === "function_call" && !this.durable.has(String(item["name"])) && !standing.has(id))
        .filter(([id]) => !retracted.has(byId.get(id)!.seq))
        .map(([id, item]) => [String(item["callId"]), { eventId: id, arguments: String(item["arguments"] ?? "") }]),
    );
    this.learned = true;
    const live: Live[] = [];
    for (const e of events) {
      if (e.kind === "EventRetracted" || retracted.has(e.seq)) continue;
      const record = itemRecord(e);
      if (record !== undefined) {
        const own = e.causationId !== undefined ? byId.get(e.causationId) : undefined;
        if (own !== undefined && retracted.has(own.seq)) continue;
        live.push({ seq: own?.seq ?? e.seq, item: record as AgentInputItem });
        continue;
      }
      if (beside.has(e.eventId) || (e.kind === "ToolCallRequested" && standing.has(e.causationId ?? ""))) continue;
      if (this.isDurable(e, calls)) continue; // a durable wrapper's record, not an item
      const item = plainItem(e, calls);
      if (item !== undefined) live.push({ seq: e.seq, item: item as AgentInputItem });
    }
    return live;
  }

  private isDurable(event: HistoryEvent, calls: Map<number, HistoryEvent>): boolean {
    if (event.kind === "ToolCallRequested") return this.durable.has(String(event.data?.["tool"] ?? ""));
    if (event.kind === "ToolCallResult") {
      const call = calls.get(Number(event.data?.["call_seq"] ?? 0));
      return call !== undefined && this.durable.has(String(call.data?.["tool"] ?? ""));
    }
    return false;
  }
}

function isResult(item: Item): boolean {
  return item["type"] === "function_call_result";
}

function retract(seq: number): Event {
  return retraction(seq, RETRACTED_BY);
}

/** The text parts of a message's content (a string, or parts with `text`). */
function textParts(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content.map((p) => (p && typeof p === "object" && "text" in p ? String((p as Item)["text"]) : "")).join("");
}

/** A function call result's output as text (the SDK's output is a string, or a text/image part). */
function outputText(output: unknown): string {
  if (typeof output === "string") return output;
  if (output && typeof output === "object" && (output as Item)["type"] === "text") return String((output as Item)["text"] ?? "");
  return JSON.stringify(output ?? "");
}

/** The item a record keeps whole; undefined for another event, or one whose text no longer opens. */
function itemRecord(event: HistoryEvent): Item | undefined {
  const data = event.data ?? {};
  if (event.kind !== "FrameworkStateSaved" || data["framework"] !== FRAMEWORK || data["key"] !== ITEM_KEY) return undefined;
  const text = textOf(data["state"]);
  return text === undefined ? undefined : (JSON.parse(text) as Item);
}

/** The item an event with no record gives (a session another writer wrote, an erased record). */
function plainItem(event: HistoryEvent, calls: Map<number, HistoryEvent>): Item | undefined {
  const data = event.data ?? {};
  if (event.kind === "UserRequest") return { role: "user", content: textOf(data["content"]) ?? "" };
  if (event.kind === "ModelResponse") {
    const model = String(data["model"] ?? "");
    const text = textOf(data["content"]) ?? "";
    if (model.startsWith(ITEM_MODEL)) {
      try {
        return JSON.parse(text) as Item;
      } catch {
        return undefined; // erased or not ours: nothing to give
      }
    }
    return { role: "assistant", status: "completed", content: [{ type: "output_text", text }] };
  }
  if (event.kind === "ToolCallRequested") {
    return {
      type: "function_call",
      callId: event.idempotencyKey ?? `call-${event.seq}`,
      name: String(data["tool"] ?? ""),
      arguments: textOf(data["arguments"]) ?? "",
    };
  }
  if (event.kind === "ToolCallResult") {
    const call = calls.get(Number(data["call_seq"] ?? 0));
    if (call === undefined) return undefined;
    return {
      type: "function_call_result",
      callId: call.idempotencyKey ?? `call-${call.seq}`,
      name: String(call.data?.["tool"] ?? ""),
      status: data["outcome"] === "Failed" ? "incomplete" : "completed",
      output: { type: "text", text: textOf(data["output"]) ?? "" },
    };
  }
  return undefined;
}
