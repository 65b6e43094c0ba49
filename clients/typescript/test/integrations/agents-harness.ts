/**
 * An OpenAI Agents SDK harness the crash tests run as a process and kill (as
 * clients/python/tests/agents_harness.py): an agent with a scripted model (no network) calls one
 * durable function tool that counts in the counting service. It announces where it is on stdout and
 * hangs where it is told to; run again with --resume, it goes on from the session's log.
 *
 *   node --import tsx agents-harness.ts --ingest URL --recovery URL --token T --service URL --tool NAME
 *       --effect EFFECT --session ID [--hang after-intent|after-effect] [--resume]
 *
 * Prints JSON lines: {"at": POINT}, then {"result": FINAL_OUTPUT, "items": [...], "modelInput": [...]} (what this
 * process's first model call was given) or {"error": CLASS}.
 */
import { randomUUID } from "node:crypto";
import { Agent, run, setTracingDisabled, tool } from "@openai/agents-core";
import { ScriptedModel, assistantMessage, functionCall } from "@openai/agents-core/testing";
import { z } from "zod";

import { SessionlogError, currentCall } from "../../src/index.js";
import { SessionlogSession } from "../../src/integrations/openai-agents.js";
import { perform } from "../support/counter.js";
import { hangIf as hangAt, harnessClient, parseHarnessArgs, say } from "../support/harness-args.js";

const a = parseHarnessArgs();
const hangIf = (point: string) => hangAt(a, point);

// No tracing: its exporter writes to stdout, where this harness speaks JSON lines.
setTracingDisabled(true);
const client = harnessClient(a);
const sessionId = a.session!;
const name = a.tool;
const session = new SessionlogSession(sessionId, client, { writer: "agents-harness", model: "scripted" });
const count = tool({
  name,
  description: "Counts once in the counter service.",
  parameters: z.object({ n: z.number() }),
  execute: session.durableTool(
    name,
    { effect: a.effect, key: ({ n }: { n: number }) => `${sessionId}-${n}` },
    async (_args: { n: number }) => {
      await hangIf("after-intent");
      const output = await perform(a.service, name, currentCall().idempotencyKey);
      await hangIf("after-effect");
      return output;
    },
  ),
});
// Like a real model asked again after a crash, the script calls the tool with a new call id.
const model = new ScriptedModel([[functionCall(name, { n: 1 }, { callId: `call-${randomUUID().slice(0, 8)}` })], [assistantMessage("counted")]]);
const agent = new Agent({ name: "counter", instructions: "Count once.", model, tools: [count] });
try {
  // What the user said goes into the log before the run; a resumed run is the same call.
  if (!a.resume) await session.addInput("count once");
  const result = await run(agent, [], { session });
  say({ result: result.finalOutput, items: await session.getItems(), modelInput: model.firstCall?.request.input });
} catch (e) {
  if (!(e instanceof SessionlogError)) throw e;
  say({ error: e.name, detail: e.message });
  process.exit(3);
}
