/** The client and the session against the real stack: round trips, resume, retries, errors and the gates. */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import {
  Client, InvalidArgument, InvalidToken, NameTaken, ProblemError, Session, SessionEnded, Unauthenticated, UnknownSession, WrongSeq,
  Fenced, WriterTokenRequired, CallInDoubtConflict, NeedsResolution, Paused, SessionPaused, TransportError, Backpressure,
  Unavailable, Conflict, ServiceUnavailable, awaitProjected, problemError, newSessionId, type HistoryEvent, type Json,
} from "../src/index.js";
import { faultyProxy } from "./support/proxy.js";
import { corner, freePort, run, token, waitFor } from "./support/stackcorner.js";
import { transport } from "./support/transport.js";

const c = corner();
const harnessToken = token(c, ["harness", "reader"]);
const client = new Client({ transport: transport(), ingestUrl: c.ingestUrl, recoveryUrl: c.recoveryUrl, token: harnessToken });
const operator = new Client({ transport: transport(), ingestUrl: c.ingestUrl, recoveryUrl: c.recoveryUrl, token: token(c, ["operator", "reader"]) });
const closers: (() => void)[] = [];
after(() => closers.forEach((close) => close()));

async function history(sessionId: string, wanted: number): Promise<HistoryEvent[]> {
  // Range reads serve the projection: wait for it to hold the last event wanted (a session it
  // has not reached yet is unknown to it, which awaitProjected waits out too).
  await awaitProjected(client, sessionId, wanted);
  const events: HistoryEvent[] = [];
  for await (const e of client.events(sessionId)) events.push(e);
  return events;
}

test("append, checkpoint and close round trip, in seq order", async () => {
  const session = await Session.start(client, "ts-tests", { title: "round trip" });
  assert.ok(session.ledger.writerToken, "the service issued a writer token");
  const asked = await session.userRequest("what is 6 x 7?");
  const answered = await session.modelResponse("m-1", "42", { tokensIn: 5, tokensOut: 1 });
  const checkpoint = await session.checkpoint("rev-1");
  const closed = await session.close("Completed");
  assert.deepEqual([asked.seq, answered.seq, checkpoint.seq, closed.seq], [2, 3, 4, 5]);
  const events = await history(session.sessionId, closed.seq);
  assert.deepEqual(events.map((e) => e.kind), ["SessionStarted", "UserRequest", "ModelResponse", "Checkpoint", "SessionEnded"]);
  assert.deepEqual(events[1]!.data?.["content"], { Plain: "what is 6 x 7?" });
  const view = await client.session(session.sessionId);
  assert.equal(view.status, "completed");
  await assert.rejects(session.userRequest("after the end"), SessionEnded);
});

test("resume takes the session over: the next epoch, the old writer fenced, the new one writes on", async () => {
  const first = await Session.start(client, "ts-tests", { title: "resume" });
  await first.userRequest("hello");
  const resumed = await Session.resume(client, first.sessionId, "ts-tests-2");
  assert.equal(resumed.ledger.epoch, first.ledger.epoch + 1);
  assert.equal(resumed.bundle?.state["last_seq"], 2);
  assert.notEqual(resumed.ledger.writerToken, first.ledger.writerToken);
  await assert.rejects(first.userRequest("from the old writer"), Fenced);
  const ack = await resumed.userRequest("from the new writer");
  assert.equal(ack.seq, resumed.bundle!.nextSeq);
  const texts = (await history(first.sessionId, ack.seq)).filter((e) => e.kind === "UserRequest").map((e) => e.data?.["content"]);
  assert.deepEqual(texts, [{ Plain: "hello" }, { Plain: "from the new writer" }]);
});

test("names: create, find, createOrFind and openNamed within the tenant", async () => {
  const name = `ts-name-${newSessionId()}`;
  const started = await Session.start(client, "ts-tests", { name });
  assert.equal(await client.find(name), started.sessionId);
  assert.equal(await client.find(`${name}-absent`), undefined);
  const taken = await client.create("ts-tests", { name }).catch((e: unknown) => e);
  assert.ok(taken instanceof NameTaken && taken.sessionId === started.sessionId, "NameTaken names the session");
  const found = await client.createOrFind("ts-tests", name);
  assert.deepEqual([found.sessionId, found.opened], [started.sessionId, undefined]);
  const opened = await Session.openNamed(client, name, { agent: "ts-tests" });
  assert.equal(opened.sessionId, started.sessionId);
  assert.ok(opened.bundle, "an existing name is taken over by a resume");
  await assert.rejects(started.userRequest("fenced by openNamed"), Fenced);
});

test("a retried append whose answer was lost is a duplicate, not a second event", async () => {
  let appends = 0;
  const proxy = await faultyProxy(c.ingestUrl, (req) => (req.url?.endsWith("/events") && appends++ === 0 ? "drop-answer" : "pass"));
  closers.push(() => proxy.server.close());
  const viaProxy = new Client({ transport: transport(), ingestUrl: proxy.url, recoveryUrl: c.recoveryUrl, token: harnessToken });
  const session = await Session.start(viaProxy, "ts-tests", { title: "lost answer" });
  const ack = await session.userRequest("once");
  assert.equal(ack.duplicate, true, "the retry was answered with the first write's position");
  assert.equal(proxy.forwarded.filter((r) => r.endsWith("/events")).length, 2, "the append reached the service twice");
  const next = await session.userRequest("after");
  assert.equal(next.seq, ack.seq + 1);
  const kinds = (await history(session.sessionId, next.seq)).map((e) => e.kind);
  assert.deepEqual(kinds, ["SessionStarted", "UserRequest", "UserRequest"], "one event for the retried append");
});

test("a 503 is retried after the Retry-After it names, with the same request", async () => {
  let refused = 0;
  const proxy = await faultyProxy(c.ingestUrl, () => (refused++ === 0 ? { status: 503, retryAfter: 1 } : "pass"));
  closers.push(() => proxy.server.close());
  const viaProxy = new Client({ transport: transport(), ingestUrl: proxy.url, recoveryUrl: c.recoveryUrl, token: harnessToken });
  const started = Date.now();
  const session = await Session.start(viaProxy, "ts-tests", { title: "retry after" });
  assert.ok(Date.now() - started >= 1000, "waited the second the service asked for");
  assert.equal(refused, 2);
  assert.equal(session.ledger.epoch, 1);
  // A 503 that outlasts the deadline is the service's error, typed.
  const always = await faultyProxy(c.ingestUrl, () => ({ status: 503, retryAfter: 0 }));
  closers.push(() => always.server.close());
  const impatient = new Client({ transport: transport(), ingestUrl: always.url, recoveryUrl: c.recoveryUrl, token: harnessToken, retryFor: 0.5 });
  await assert.rejects(impatient.create("ts-tests"), Backpressure);
});

test("a fork whose answer came after the client's timeout is made once: the retry answers the child the first attempt made", async () => {
  const parent = await Session.start(client, "ts-tests", { title: "slow fork" });
  const asked = await parent.userRequest("fork me once");
  let held = 0;
  const proxy = await faultyProxy(c.recoveryUrl, (req) => (req.url?.endsWith("/fork") && held++ === 0 ? "hold-answer" : "pass"));
  closers.push(() => proxy.server.close());
  const slow = new Client({ transport: transport(), ingestUrl: c.ingestUrl, recoveryUrl: proxy.url, token: token(c, ["operator", "reader"]), timeout: 3 });
  const forked = await slow.fork(parent.sessionId, asked.seq, "ts-fork");
  assert.equal(proxy.held.length, 1, "the first fork's answer was held past the client's timeout");
  const lost = JSON.parse(proxy.held[0]!.body) as { session_id: string };
  assert.equal(forked.sessionId, lost.session_id, "the retry answered the child the first attempt made");
  assert.equal(forked.event["seq"], 1);
  const lineage = await waitFor("the projection to list the child", 30, async () => {
    const found = await client.lineage(parent.sessionId);
    return found.children.some((child) => child.sessionId === forked.sessionId) ? found : undefined;
  });
  assert.deepEqual(lineage.children, [{ sessionId: forked.sessionId, atSeq: asked.seq }], "one child");
});

test("an unreachable service is a TransportError that says nothing was sent", async () => {
  const nowhere = new Client({ transport: transport(), ingestUrl: `http://127.0.0.1:${await freePort()}`, recoveryUrl: c.recoveryUrl, token: harnessToken, retryFor: 0.3 });
  const error = await nowhere.create("ts-tests").catch((e: unknown) => e);
  assert.ok(error instanceof TransportError, String(error));
  assert.equal(error.sent, false);
  assert.match(error.message, /sessionlog ingest/);
});

test("each problem code is its own class, under its status's", async () => {
  // From the services:
  await assert.rejects(client.session(newSessionId()), UnknownSession);
  const stranger = new Client({ transport: transport(), ingestUrl: c.ingestUrl, recoveryUrl: c.recoveryUrl, token: "not-a-token" });
  await assert.rejects(stranger.create("ts-tests"), (e: unknown) => e instanceof InvalidToken && e instanceof Unauthenticated && e.status === 401);
  const session = await Session.start(client, "ts-tests");
  const wrong = await client
    .append(session.sessionId, session.ledger.epoch, [{ seq: 9, event_id: newSessionId(), kind: "UserRequest", data: { content: { Plain: "x" } } }], { writerToken: session.ledger.writerToken })
    .catch((e: unknown) => e);
  assert.ok(wrong instanceof WrongSeq && wrong instanceof Conflict && wrong.problem["expected_seq"] === 2, String(wrong));
  // Before sending: a session id that is not a UUID (nor a path).
  await assert.rejects(client.session("../sessions"), InvalidArgument);
  // The mapping itself, for codes a test cannot provoke here.
  assert.ok(problemError(503, { code: "unavailable" }) instanceof ServiceUnavailable);
  assert.ok(problemError(409, { code: "paused" }) instanceof SessionPaused, "paused is a pause");
  assert.ok(problemError(503, { code: "some_future_code" }) instanceof Unavailable);
  const unknown = problemError(418, { code: "teapot", detail: "short and stout" });
  assert.ok(unknown instanceof ProblemError && unknown.code === "teapot" && unknown.message === "418 teapot: short and stout");
});

test("the gates: no token, a fenced writer, a paused session, a call in doubt", async () => {
  const first = await client.create("ts-tests", { title: "gates" });
  const second = await client.claim(first.sessionId, "ts-tests-2");
  const event = { seq: second.nextSeq, event_id: newSessionId(), kind: "UserRequest", data: { content: { Plain: "x" } } };
  await assert.rejects(client.append(first.sessionId, second.epoch, [event]), WriterTokenRequired);
  await assert.rejects(client.append(first.sessionId, second.epoch, [event], { writerToken: first.writerToken }), Fenced);

  // Paused: no writer may claim it (`sessionlog pause`), until it is unpaused.
  const paused = await Session.start(client, "ts-tests", { title: "paused" });
  await paused.userRequest("before the pause");
  run(c, "pause", paused.sessionId, "--reason", "ts test");
  await assert.rejects(client.claim(paused.sessionId, "ts-tests-2"), Paused);
  run(c, "unpause", paused.sessionId);

  // A non-idempotent call in doubt: a claim is refused; resume stops the session for an operator.
  const charging = await Session.start(client, "ts-tests", { title: "in doubt" });
  const call = await charging.toolCall("charge", "{}", { effect: "NonIdempotent", idempotencyKey: "order-1" });
  await assert.rejects(client.claim(charging.sessionId, "ts-tests-2"), (e: unknown) => e instanceof CallInDoubtConflict && JSON.stringify(e.problem["calls"]) === JSON.stringify([call.seq]));
  await assert.rejects(Session.resume(client, charging.sessionId, "ts-tests-2"), NeedsResolution);
  await operator.resolve(charging.sessionId, call.seq, { succeeded: true, output: "charged", reason: "the bank shows one charge" });
  const resumed = await Session.resume(client, charging.sessionId, "ts-tests-3");
  assert.equal(resumed.ledger.callAt(call.seq)?.result?.output, "charged");
});

test("a held lease is renewed until close, which releases it", async () => {
  const session = await Session.start(client, "ts-tests", { title: "lease" });
  const lease = await session.holdLease("w");
  assert.deepEqual([lease.epoch, lease.ttlMs, lease.expiresAt - lease.renewedAt], [1, 1500, 1_500_000]);
  const first = (await client.session(session.sessionId)).lease;
  assert.equal(first?.["live"], true);
  const end = Date.now() + 10_000;
  let now: Json | undefined = first;
  while (now?.["renewed_at"] === first?.["renewed_at"] && Date.now() < end) {
    await new Promise((r) => setTimeout(r, 100));
    now = (await client.session(session.sessionId)).lease;
  }
  assert.notEqual(now?.["renewed_at"], first?.["renewed_at"], "renewed on its own");
  await session.close();
  assert.equal((await client.session(session.sessionId)).lease, undefined, "the close released it");
});
