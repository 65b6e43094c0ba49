/**
 * The worker loop on the real stack (issue 43, as clients/python/tests/test_worker.py for the
 * Python `Worker`): a harness killed with kill -9 holding its session's lease leaves the session
 * to the corner's wake component, which hands it to a `Worker` of its agent; the worker's handler
 * finishes the run with one side effect in all. Two workers of one agent: one runs the session.
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { test } from "node:test";
import { after } from "node:test";
import { Client, InvalidArgument, Session, Worker, currentCall, durableTool, type AsyncHandler, type Wake } from "../src/index.js";
import { perform } from "./support/counter.js";
import { Harness } from "./support/harness.js";
import { faultyProxy } from "./support/proxy.js";
import { corner, token, waitFor } from "./support/stackcorner.js";
import { transport } from "./support/transport.js";

const c = corner();
const harnessToken = token(c, ["harness", "reader"]);
const client = new Client({ transport: transport(), ingestUrl: c.ingestUrl, recoveryUrl: c.recoveryUrl, token: harnessToken });
// The corner's lease TTL (SESSIONLOG_LEASE__TTL_MS): a killed harness's lease lapses after it.
const LEASE_TTL_S = Number(c.env["SESSIONLOG_LEASE__TTL_MS"]) / 1000;
// Where to look when no wake comes: the corner's wake component (it exits on some broker failures).
const WAKE_LOG = `no wake? see ${c.workdir}/wake.log`;
const closers: (() => void)[] = [];
after(() => closers.forEach((close) => close()));

/** How many side effects the counting service saw of `tool` under `key` (0 when none arrived). */
async function effects(tool: string, key: string): Promise<number> {
  const answer = await fetch(`${c.counterUrl}/${tool}/calls/${encodeURIComponent(key)}`);
  if (answer.status === 404) return 0;
  const output = String(((await answer.json()) as { output: unknown }).output);
  return Number(/#(\d+)$/.exec(output)?.[1] ?? NaN);
}

/** Starts the crash harness as `agent` holding its lease, lets it count once, and kills it before the result is recorded; the session and when it died. */
async function killedAfterEffect(agent: string, tool: string): Promise<{ sessionId: string; killedAt: number }> {
  const harness = new Harness("crash-harness.ts", c, harnessToken, tool, "Idempotent", "--agent", agent, "--lease", "--hang", "after-effect");
  const started = await harness.next(120);
  const sessionId = String(started["session"]);
  assert.deepEqual(await harness.next(120), { at: "after-effect" });
  await harness.kill();
  const killedAt = Date.now();
  assert.equal(await effects(tool, `${sessionId}-1`), 1, "the killed harness's effect happened");
  return { sessionId, killedAt };
}

/** The handler both tests run: the killed harness's call again (the same key), then done. */
function finishing(tool: string, ran: { sessionId: string; epoch: number; wake: Wake; output: string; at: number }[]): AsyncHandler {
  return async (session: Session, wake: Wake) => {
    const count = durableTool(session, { effect: "Idempotent", name: tool, key: (n: number) => `${session.sessionId}-${n}` }, (_n: number) =>
      perform(c.counterUrl, tool, currentCall().idempotencyKey),
    );
    ran.push({ sessionId: session.sessionId, epoch: session.ledger.epoch, wake, output: await count(1), at: Date.now() });
    return "Completed"; // an outcome as a plain literal: the handler types read it as one
  };
}

test("a session whose harness was killed is handed to a worker, which finishes it with one side effect", async () => {
  const agent = `ts-worker-${randomUUID().slice(0, 8)}`;
  const tool = "counter"; // idempotent, with a resolver: taking the session settles the call in doubt
  const { sessionId, killedAt } = await killedAfterEffect(agent, tool);

  const ran: Parameters<typeof finishing>[1] = [];
  const stop = new AbortController();
  const handler = finishing(tool, ran);
  const worker = new Worker(client, { agent, writer: "ts-worker", wait: 2 });
  const running = worker.run(async (s, w) => {
    try {
      return await handler(s, w);
    } finally {
      stop.abort();
    }
  }, { signal: stop.signal });
  try {
    await waitFor(`the worker to run the session (${WAKE_LOG})`, 60, async () => (ran.length ? true : undefined));
  } finally {
    stop.abort(); // a failure stops the worker too, or its polls would keep the test process alive
    await running;
  }

  assert.equal(ran.length, 1);
  const [{ sessionId: sid, epoch, wake, output, at }] = ran as [(typeof ran)[0]];
  assert.equal(sid, sessionId);
  assert.ok(epoch >= 2, `taken at a later epoch than the killed harness's: ${epoch}`);
  assert.equal(wake.sessionId, sessionId);
  assert.equal(wake.agent, agent);
  assert.equal(wake.reason, "lease_expired");
  assert.equal(output, `${tool} effect #1`, "the call answered its one effect, settled from the counting service");
  assert.equal(await effects(tool, `${sessionId}-1`), 1, "exactly one side effect");
  // Issue 43: picked up within the lease's time + 5 s of the kill.
  const tookS = (at - killedAt) / 1000;
  assert.ok(tookS <= LEASE_TTL_S + 5, `picked up ${tookS.toFixed(1)} s after the kill (lease ${LEASE_TTL_S} s)`);
  const view = await client.session(sessionId);
  assert.equal(view.status, "completed");
  assert.equal(view.lease, undefined, "closing released the lease");
});

test("two workers of one agent woken for one session: one runs it", async () => {
  const agent = `ts-workers-${randomUUID().slice(0, 8)}`;
  const tool = "counter";
  const { sessionId } = await killedAfterEffect(agent, tool);

  const ran: Parameters<typeof finishing>[1] = [];
  const byWorker: string[] = [];
  const stop = new AbortController();
  const runs = ["a", "b"].map((name) => {
    const handler = finishing(tool, ran);
    return new Worker(client, { agent, writer: `ts-worker-${name}`, wait: 1 }).run(async (s, w) => {
      byWorker.push(name);
      return handler(s, w);
    }, { signal: stop.signal });
  });
  try {
    await waitFor(`a worker to finish the session (${WAKE_LOG})`, 60, async () => ((await client.session(sessionId)).status === "completed" ? true : undefined));
    // A second take of the same session would come from a wake written again: give both workers
    // polls past the lease's time before stopping them.
    const until = Date.now() + (LEASE_TTL_S + 2) * 1000;
    await waitFor("both workers to poll past the lease's time", 30, async () => (Date.now() >= until ? true : undefined));
  } finally {
    stop.abort();
    await Promise.all(runs);
  }

  assert.equal(ran.length, 1, `one handler ran the session: ${JSON.stringify(byWorker)}`);
  assert.equal(ran[0]!.sessionId, sessionId);
  assert.equal(await effects(tool, `${sessionId}-1`), 1, "exactly one side effect");
});

test("a worker refuses a client timeout too short for its long poll rather than spin", () => {
  const hasty = new Client({ transport: transport(), ingestUrl: c.ingestUrl, recoveryUrl: c.recoveryUrl, token: harnessToken, timeout: 5 });
  assert.throws(() => new Worker(hasty, { agent: "ts-hasty" }), InvalidArgument);
});

test("a take whose answer came after the client's timeout is recovered: the worker gets that session, and takes no other", async () => {
  const agent = `ts-slow-take-${randomUUID().slice(0, 8)}`;
  // Two sessions whose harnesses stopped renewing their leases (as a killed process does): both are woken.
  const lapsing: string[] = [];
  for (const title of ["first", "second"]) {
    const session = await Session.start(client, agent, { title });
    await session.holdLease("ts-lapsing");
    session.stopLease();
    lapsing.push(session.sessionId);
  }
  // The first take's answer reaches the worker's client too late (after its 6 s timeout); polls
  // that found no work pass.
  const proxy: Awaited<ReturnType<typeof faultyProxy>> = await faultyProxy(c.recoveryUrl, (req) =>
    req.url?.startsWith("/v1/work") && proxy.held.length === 0 ? "hold-answer" : "pass",
  );
  closers.push(() => proxy.server.close());
  const slow = new Client({ transport: transport(), ingestUrl: c.ingestUrl, recoveryUrl: proxy.url, token: harnessToken, timeout: 6 });
  const worker = new Worker(slow, { agent, writer: "ts-slow", wait: 1 });
  const taken = await waitFor(`a take (${WAKE_LOG})`, 90, () => worker.take());
  try {
    assert.equal(proxy.held.length, 1, "the first take's answer was held past the client's timeout");
    const lost = JSON.parse(proxy.held[0]!.body) as { epoch: number; wake: { session_id: string } };
    assert.equal(taken.session.sessionId, lost.wake.session_id, "the worker got the session its timed-out take took");
    assert.equal(taken.session.ledger.epoch, lost.epoch, "at the epoch that take claimed, not taken again");
    const other = lapsing.find((id) => id !== lost.wake.session_id)!;
    assert.equal((await client.session(other)).state["epoch"], 1, "the retry took no other session");
  } finally {
    await taken.session.close("Completed");
  }
});
