// SessionlogSaver.copyThread on the real services: LangGraph's validation suite has no test of a
// copy, so this one holds it to what the saver promises: the copy reads the source's checkpoints
// and history as its own, runs on without touching the source, and the log keeps the lineage (a
// fork of the source's session at its last event). Run by test/run.ts's corner:
// `node --import tsx test/run.ts test/integrations/langgraph.test.ts`.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { test } from "node:test";

import { Annotation, END, START, StateGraph } from "@langchain/langgraph";
import type { CheckpointTuple } from "@langchain/langgraph-checkpoint";

import { Client } from "../../src/index.js";
import { SessionlogSaver, copySessionId, threadName } from "../../src/integrations/langgraph.js";
import { corner, token, waitFor } from "../support/stackcorner.js";
import { transport } from "../support/transport.js";

const c = corner();
// copyThread forks, which takes the operator role.
const client = new Client({ transport: transport(), ingestUrl: c.ingestUrl, recoveryUrl: c.recoveryUrl, token: token(c, ["harness", "reader", "operator"]) });

const State = Annotation.Root({ steps: Annotation<string[]>({ reducer: (a, b) => a.concat(b), default: () => [] }) });

function graphOn(saver: SessionlogSaver) {
  return new StateGraph(State)
    .addNode("step", async (state) => ({ steps: [`step ${state.steps.length + 1}`] }))
    .addEdge(START, "step")
    .addEdge("step", END)
    .compile({ checkpointer: saver });
}

const config = (thread: string) => ({ configurable: { thread_id: thread } });

/** A thread's checkpoints, newest first, as [id, parent id, channel values, step]. */
async function checkpoints(saver: SessionlogSaver, thread: string): Promise<unknown[]> {
  const seen: CheckpointTuple[] = [];
  for await (const t of saver.list(config(thread))) seen.push(t);
  return seen.map((t) => [t.checkpoint.id, t.parentConfig?.configurable?.["checkpoint_id"], t.checkpoint.channel_values, t.metadata?.step]);
}

test("copyThread copies a thread's checkpoints and history, the copy runs on alone, and the log keeps its lineage", async () => {
  const saver = new SessionlogSaver(client, { catalogue: `copy-${randomUUID()}` });
  const graph = graphOn(saver);
  const source = `order-${randomUUID().slice(0, 8)}`;
  const copy = `order-copy-${randomUUID().slice(0, 8)}`;
  await graph.invoke({ steps: ["asked"] }, config(source));
  await graph.invoke({ steps: ["asked again"] }, config(source));
  const before = await checkpoints(saver, source);
  assert.ok(before.length >= 6, `two runs leave several checkpoints: ${before.length}`);
  const history = async (thread: string) => {
    const states = [];
    for await (const s of graph.getStateHistory(config(thread))) states.push([s.values, s.next, s.config.configurable?.["checkpoint_id"]]);
    return states;
  };
  const sourceHistory = await history(source);

  const sourceSession = (await client.find(threadName(source)))!;
  // The source's last event, from the log (range reads serve the projection, which may not hold it yet).
  const lastSeq = Number((await client.session(sourceSession)).state["last_seq"]);
  await saver.copyThread(source, copy);

  // The copy reads as the source did, in this saver and in a new one (another process).
  assert.deepEqual(await checkpoints(saver, copy), before);
  assert.deepEqual(await history(copy), sourceHistory);
  const fresh = new SessionlogSaver(client, { catalogue: `copy-fresh-${randomUUID()}` });
  assert.deepEqual(await checkpoints(fresh, copy), before);
  assert.deepEqual((await graph.getState(config(copy))).values, { steps: ["asked", "step 2", "asked again", "step 4"] });

  // The copy runs on; the source does not change.
  const ran = await graph.invoke({ steps: ["copy only"] }, config(copy));
  assert.deepEqual(ran.steps, ["asked", "step 2", "asked again", "step 4", "copy only", "step 6"]);
  assert.deepEqual(await checkpoints(fresh, source), before, "a write to the copy left the source as it was");
  assert.deepEqual(await checkpoints(saver, source), before);
  assert.equal((await checkpoints(fresh, copy)).length, before.length + 3);

  // The lineage: the copy's events are in a fork of the source's session at its last event.
  const named = (await client.find(threadName(copy)))!;
  const forked = copySessionId(named);
  const lineage = await client.lineage(forked);
  assert.deepEqual(lineage.ancestors, [{ parentSessionId: sourceSession, parentSeq: lastSeq }]);
  // The parent learns of its child through the projection: wait for it to get there.
  const children = await waitFor("the source's lineage to list the copy", 30, async () => {
    const found = (await client.lineage(sourceSession)).children;
    return found.length ? found : undefined;
  });
  assert.deepEqual(children, [{ sessionId: forked, atSeq: lastSeq }]);

  // A second copy into the same thread is refused: copyThread copies into a new thread.
  await assert.rejects(saver.copyThread(source, copy), /exists/);
});
