/**
 * A LangGraph.js harness the crash tests run as a process and kill (as
 * clients/python/tests/graph_harness.py): a one-node graph on SessionlogSaver whose node calls a
 * durable tool that counts in the counting service. It hangs where it is told to; run again with
 * --resume, LangGraph resumes the thread from its last checkpoint in the log.
 *
 *   node --import tsx graph-harness.ts --ingest URL --recovery URL --token T --service URL --tool NAME
 *       --effect EFFECT --session THREAD_ID [--hang after-intent|after-effect] [--resume]
 *
 * Prints JSON lines: {"at": POINT}, then {"result": STATE} or {"error": CLASS}.
 */
import { Annotation, END, START, StateGraph } from "@langchain/langgraph";

import { SessionlogError, currentCall } from "../../src/index.js";
import { SessionlogSaver } from "../../src/integrations/langgraph.js";
import { perform } from "../support/counter.js";
import { hangIf as hangAt, harnessClient, parseHarnessArgs, say } from "../support/harness-args.js";

const a = parseHarnessArgs();
const hangIf = (point: string) => hangAt(a, point);

const client = harnessClient(a);
const threadId = a.session!;
const name = a.tool;
const saver = new SessionlogSaver(client, { writer: "graph-harness" });
const count = saver.durableTool(
  name,
  { effect: a.effect, key: ({ n }: { n: number }) => `${threadId}-${n}` },
  async (_args: { n: number }) => {
    await hangIf("after-intent");
    const output = await perform(a.service, name, currentCall().idempotencyKey);
    await hangIf("after-effect");
    return output;
  },
);
const State = Annotation.Root({ n: Annotation<number>, output: Annotation<string> });
const graph = new StateGraph(State)
  // No config passed: the saver finds the thread in LangGraph's current config.
  .addNode("count", async (state) => ({ output: await count({ n: state.n }) }))
  .addEdge(START, "count")
  .addEdge("count", END)
  .compile({ checkpointer: saver });
const config = { configurable: { thread_id: threadId } };
try {
  const result = await graph.invoke(a.resume ? null : { n: 1 }, config);
  say({ result });
} catch (e) {
  if (!(e instanceof SessionlogError)) throw e;
  say({ error: e.name, detail: e.message });
  process.exit(3);
}
