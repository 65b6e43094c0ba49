/** Durable tools against the real stack and the counting service: a recorded result is never run again. */
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  CallInDoubt, Client, Session, ToolFailed, ToolFailedDefinitively, currentCall, durableTool, type CallInfo,
} from "../src/index.js";
import { perform, total } from "./support/counter.js";
import { Harness } from "./support/harness.js";
import { corner, token } from "./support/stackcorner.js";
import { transport } from "./support/transport.js";

const c = corner();
const harnessToken = token(c, ["harness", "reader"]);
const client = new Client({ transport: transport(), ingestUrl: c.ingestUrl, recoveryUrl: c.recoveryUrl, token: harnessToken });
const operator = new Client({ transport: transport(), ingestUrl: c.ingestUrl, recoveryUrl: c.recoveryUrl, token: token(c, ["operator", "reader"]) });

test("a recorded result is answered without running the tool again, in this process and after a resume", async () => {
  const session = await Session.start(client, "ts-durable");
  const calls: CallInfo[] = [];
  const weather = (s: Session) =>
    durableTool(s, { effect: "NonIdempotent", name: "weather" }, async ({ city }: { city: string }) => {
      calls.push(currentCall());
      return { city, forecast: (await perform(c.counterUrl, "weather", currentCall().idempotencyKey)).toUpperCase() };
    });
  const first = await weather(session)({ city: "Oslo" });
  assert.deepEqual(first, { city: "Oslo", forecast: "WEATHER EFFECT #1" });
  assert.equal(calls.length, 1);
  assert.match(calls[0]!.idempotencyKey, new RegExp(`^${session.sessionId}\\.[0-9a-f]{32}\\.1$`), "the default key scheme");
  // The same call of a new run (a resume counts occurrences again from the start): recorded.
  const resumed = await Session.resume(client, session.sessionId, "ts-durable-2");
  assert.deepEqual(await weather(resumed)({ city: "Oslo" }), first);
  assert.equal(calls.length, 1, "the tool did not run again");
  // Another occurrence with equal arguments is a new call; other arguments too.
  await weather(resumed)({ city: "Oslo" });
  await weather(resumed)({ city: "Rome" });
  assert.equal(calls.length, 3);
  assert.equal(await total(c.counterUrl, "weather"), 3);
  assert.notEqual(calls[1]!.idempotencyKey, calls[0]!.idempotencyKey);
});

test("concurrent invocations of one call wait for the one running it, then answer its result", async () => {
  const session = await Session.start(client, "ts-durable");
  let runs = 0;
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  const send = durableTool(session, { effect: "Idempotent", name: "dedupe", key: (order: number) => `order-${order}` }, async (_order: number) => {
    runs++;
    await gate;
    return perform(c.counterUrl, "dedupe", currentCall().idempotencyKey);
  });
  const both = Promise.all([send(1), send(1), send(2)]);
  while (session.ledger.waiters("dedupe", "order-1") < 1) await new Promise((r) => setImmediate(r));
  release();
  const [a, b, other] = await both;
  assert.equal(a, b);
  assert.equal(runs, 2, "order-1 ran once, order-2 once");
  assert.equal(other, "dedupe effect #1");
  assert.ok(session.ledger.callWithKey("order-1") && session.ledger.callWithKey("order-2"));
  // Read once the projection has the last event (before it has any, the session is unknown there).
  await session.waitProjected(session.ledger.nextSeq - 1);
  const intents = [];
  for await (const e of client.events(session.sessionId, { kinds: ["ToolCallRequested"] })) intents.push(e);
  assert.equal(intents.length, 2, "one intent for each order");
});

test("failures: definitive ones are recorded and answered again; others leave the call in doubt", async () => {
  const session = await Session.start(client, "ts-durable");
  let runs = 0;
  const refund = durableTool(session, { effect: "NonIdempotent", name: "refund", key: (n: number) => `refund-${n}` }, async (n: number) => {
    runs++;
    if (n === 1) throw new ToolFailedDefinitively("no such order");
    throw new Error("timed out after sending");
  });
  await assert.rejects(refund(1), ToolFailedDefinitively);
  await assert.rejects(refund(1), (e: unknown) => e instanceof ToolFailed && e.output === "no such order");
  await assert.rejects(refund(2), /timed out/);
  await assert.rejects(refund(2), CallInDoubt, "a non-idempotent call in doubt never runs again on a guess");
  assert.equal(runs, 2);
});

test("a call whose answer was lost is settled by resume: kill -9 between the call and its recorded result", async (t) => {
  const crashAt = async (tool: string, effect: string, point: string) => {
    const harness = new Harness("crash-harness.ts", c, harnessToken, tool, effect, "--hang", point);
    const { session } = await harness.next();
    assert.deepEqual(await harness.next(), { at: point });
    await harness.kill();
    return String(session);
  };
  const resume = async (tool: string, effect: string, session: string) => {
    const harness = new Harness("crash-harness.ts", c, harnessToken, tool, effect, "--session", session);
    let line = await harness.next();
    if ("session" in line) line = await harness.next();
    await harness.exit();
    return line;
  };
  const cases: [string, string, string, string][] = [
    // Recorded before the kill: the resumed harness gets it from the log and calls nothing.
    ["plain", "NonIdempotent", "after-record", "plain effect #1"],
    // Done, not recorded: recovery asks the service's resolver and records its answer.
    ["counter", "Idempotent", "after-effect", "counter effect #1"],
    // Requested, never sent: the resolver says so, and the call is reissued with its key.
    ["reissued", "Idempotent", "after-intent", "reissued effect #1"],
  ];
  for (const [tool, effect, point, expected] of cases) {
    await t.test(`${effect} ${point}`, async () => {
      const session = await crashAt(tool, effect, point);
      assert.equal(await total(c.counterUrl, tool), point === "after-intent" ? 0 : 1);
      assert.deepEqual(await resume(tool, effect, session), { result: expected });
      assert.equal(await total(c.counterUrl, tool), 1, "the side effect happened exactly once");
    });
  }
  await t.test("a pure call in doubt runs again", async () => {
    const session = await crashAt("pure", "Pure", "after-effect");
    assert.deepEqual(await resume("pure", "Pure", session), { result: "pure effect #2" });
  });
  await t.test("a non-idempotent call in doubt waits for an operator", async () => {
    const session = await crashAt("charge", "NonIdempotent", "after-effect");
    assert.equal((await resume("charge", "NonIdempotent", session))["error"], "NeedsResolution");
    const pending = (await operator.session(session)).state["pending_calls"] as Record<string, unknown>;
    const [callSeq] = Object.keys(pending).map(Number);
    await operator.resolve(session, callSeq!, { succeeded: true, output: "charge effect #1", reason: "the ledger shows one charge" });
    assert.deepEqual(await resume("charge", "NonIdempotent", session), { result: "charge effect #1" });
    assert.equal(await total(c.counterUrl, "charge"), 1, "the operator's record stood in for a second run");
  });
});

test("a tool's name comes first, or from options.name, or from the function; an anonymous tool is refused when it is defined", async () => {
  const session = await Session.start(client, "ts-durable", { title: "names" });
  const tools: string[] = [];
  const recordTool = async () => {
    tools.push(currentCall().tool);
    return "ok";
  };
  await durableTool("first_given", session, { effect: "Pure" }, async (_n: number) => recordTool())(1);
  await durableTool(session, { effect: "Pure", name: "in_options" }, async (_n: number) => recordTool())(1);
  async function ownName(_n: number) {
    return recordTool();
  }
  await durableTool(session, { effect: "Pure" }, ownName)(1);
  assert.deepEqual(tools, ["first_given", "in_options", "ownName"]);
  // Refused at definition, before anything is sent: no name, or two that disagree.
  const before = session.ledger.nextSeq;
  assert.throws(() => durableTool(session, { effect: "Pure" }, async (_n: number) => "anonymous"), /has no name/);
  assert.throws(() => durableTool("a", session, { effect: "Pure", name: "b" }, async (_n: number) => "two names"), /two names/);
  assert.equal(session.ledger.nextSeq, before, "nothing was written for the refused tools");
  await session.close("Completed");
});
