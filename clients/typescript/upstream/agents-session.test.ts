/**
 * Our contract suite for SessionlogSession, the OpenAI Agents SDK's `Session` on the real services.
 *
 * The SDK's own session tests run against SessionlogSession in agents-sdk/ (vendored from its
 * repository, README.md there). This suite checks what they do not: the `Session` interface's
 * documented contract (ids, order, `limit` as the latest items oldest first, pop, clear, detached
 * copies) across session objects, as separate processes would use them; the events it writes to
 * the log, such as a function call waiting for its result (an approval) and finished by another
 * process; two tenants with the same id; and the runner keeping a conversation across turns and
 * across session objects.
 */

import { randomUUID } from "node:crypto";

import { Agent, run, tool, type AgentInputItem } from "@openai/agents-core";
import { ScriptedModel, assistantMessage, functionCall } from "@openai/agents-core/testing";
import { z } from "zod";

import type { Client } from "../src/client.js";
import { textOf } from "../src/models.js";
import { SessionlogSession } from "../src/integrations/openai-agents.js";
import { startCorner, type UpstreamCorner } from "./corner.js";

let corner: UpstreamCorner;
let client: Client;

beforeAll(async () => {
  corner = await startCorner();
}, 180_000);
afterAll(() => corner?.stop());
// Each test in a tenant of its own: the ids the tests choose name fresh sessions.
beforeEach(() => {
  client = corner.client(["harness", "reader"]);
});

const user = (text: string): AgentInputItem => ({ role: "user", content: [{ type: "input_text", text }] });
const session = (id = "session-1") => new SessionlogSession(id, client, { writer: "contract-tests" });

describe("SessionlogSession (the SDK's Session contract)", () => {
  it("stores and retrieves items", async () => {
    const s = session();
    expect(await s.getSessionId()).toBe("session-1");
    expect(await s.getItems()).toEqual([]);
    await s.addItems([user("hello")]);
    const more = [user("one"), user("two")];
    await s.addItems(more);
    expect(await s.getItems()).toEqual([user("hello"), ...more]);
    expect(await s.getItems(2)).toEqual(more);
    expect(await s.popItem()).toEqual(more[1]);
    expect(await s.getItems()).toEqual([user("hello"), more[0]]);
    await s.clearSession();
    expect(await s.getItems()).toEqual([]);
    expect(await s.getItems(3)).toEqual([]);
    expect(await s.popItem()).toBeUndefined();
  });

  it("returns copies, so mutating them changes nothing stored", async () => {
    const s = session();
    const first = user("start");
    await s.addItems([first]);
    (first as { content: unknown }).content = "mutated";
    const items = await s.getItems();
    (items[0] as { content: unknown }).content = "mutated";
    expect(await s.getItems()).toEqual([user("start")]);
  });

  it("keeps every kind of item whole, in order", async () => {
    const s = session();
    const items: AgentInputItem[] = [
      user("look it up"),
      { type: "reasoning", id: "rs_1", content: [{ type: "input_text", text: "thinking" }] } as AgentInputItem,
      { type: "function_call", id: "fc_1", callId: "call-1", name: "lookup", status: "completed", arguments: '{"q":"x"}' },
      { type: "function_call_result", callId: "call-1", name: "lookup", status: "completed", output: { type: "text", text: "found" } },
      { role: "assistant", id: "msg_1", status: "completed", content: [{ type: "output_text", text: "here" }] },
    ];
    await s.addItems(items);
    expect(await s.getItems()).toEqual(items);
    // A new object (another process) reads the same conversation.
    expect(await session().getItems()).toEqual(items);
  });

  it("keeps a call waiting for its result, then writes it with its result", async () => {
    const s = session();
    const call: AgentInputItem = { type: "function_call", callId: "call-9", name: "approve_me", status: "completed", arguments: "{}" };
    const result: AgentInputItem = { type: "function_call_result", callId: "call-9", name: "approve_me", status: "completed", output: { type: "text", text: "ok" } };
    await s.addItems([call]);
    // Taken over by another process before the result comes.
    const other = session();
    expect(await other.getItems()).toEqual([call]);
    await other.addItems([result]);
    expect(await session().getItems()).toEqual([call, result]);
  });

  it("writes a waiting call's request, with its arguments, when another object that read nothing adds its result", async () => {
    const call: AgentInputItem = { type: "function_call", callId: "call-7", name: "approve_me", status: "completed", arguments: '{"n":7}' };
    const result: AgentInputItem = { type: "function_call_result", callId: "call-7", name: "approve_me", status: "completed", output: { type: "text", text: "done" } };
    await session().addItems([user("approve"), call]);
    // Another process resumes a run from its RunState: it adds the result without reading the session.
    await session().addItems([result]);
    const s = session();
    expect(await s.getItems()).toEqual([user("approve"), call, result]);
    const events = [];
    for await (const e of client.events((await s.open()).sessionId, { kinds: ["ToolCallRequested", "ToolCallResult"] })) events.push(e);
    expect(events.map((e) => e.kind)).toEqual(["ToolCallRequested", "ToolCallResult"]);
    expect(events[0]?.idempotencyKey).toBe("call-7");
    expect(textOf(events[0]?.data?.["arguments"])).toBe('{"n":7}');
    expect(events[1]?.data?.["call_seq"]).toBe(events[0]?.seq);
  });

  it("pops the latest item across objects, and an item popped and added back is there once", async () => {
    const s = session();
    await s.addItems([user("a"), user("b")]);
    const popped = await session().popItem();
    expect(popped).toEqual(user("b"));
    const again = session();
    await again.addItems([popped!]);
    expect(await again.getItems()).toEqual([user("a"), user("b")]);
  });

  it("keeps two ids apart, and the same id of another tenant apart", async () => {
    await session("a").addItems([user("for a")]);
    await session("b").addItems([user("for b")]);
    expect(await session("a").getItems()).toEqual([user("for a")]);
    const otherTenant = new SessionlogSession("a", corner.client(["harness", "reader"]), { writer: "contract-tests" });
    expect(await otherTenant.getItems()).toEqual([]);
  });

  it("keeps the runner's conversation across turns and across session objects", async () => {
    const id = `runner-${randomUUID().slice(0, 8)}`;
    const echo = tool({ name: "echo", description: "Echoes.", parameters: z.object({ text: z.string() }), execute: async ({ text }) => `echo:${text}` });
    const model = new ScriptedModel([
      [functionCall("echo", { text: "hi" }, { callId: "call-echo" })],
      [assistantMessage("said hi")],
      [assistantMessage("second turn")],
    ]);
    const agent = new Agent({ name: "echoer", instructions: "Echo.", model, tools: [echo] });
    const first = await run(agent, "say hi", { session: session(id) });
    expect(first.finalOutput).toBe("said hi");
    const second = await run(agent, "again", { session: session(id) });
    expect(second.finalOutput).toBe("second turn");
    // The second turn's model call saw the first turn's whole conversation.
    const seen = JSON.stringify(model.calls[2]?.request.input);
    expect(seen).toContain("say hi");
    expect(seen).toContain("echo:hi");
    const items = await session(id).getItems();
    expect(items.map((i) => ("role" in i ? i.role : i.type))).toEqual([
      "user", "function_call", "function_call_result", "assistant", "user", "assistant",
    ]);
  });
});
