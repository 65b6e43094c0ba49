/**
 * An OpenAI Agents SDK harness the crash tests run as a process and kill (as
 * clients/python/tests/agents_harness.py): an agent with a scripted model (no network) calls one
 * durable function tool that counts in the counting service. It announces where it is on stdout and
 * hangs where it is told to; run again with --resume, it goes on from the session's log.
 *
 *   node --import tsx agents-harness.ts --ingest URL --recovery URL --token T --service URL --tool NAME
 *       --effect EFFECT --session ID [--hang after-intent|after-effect] [--resume]
 *
 * Prints JSON lines: {"at": POINT}, then {"result": FINAL_OUTPUT, "items": [...]} or {"error": CLASS}.
 */
import { randomUUID } from "node:crypto";
import { parseArgs } from "node:util";

import { Agent, run, setTracingDisabled, tool } from "@openai/agents-core";
import { ScriptedModel, assistantMessage, functionCall } from "@openai/agents-core/testing";
import { z } from "zod";

import { Client, SessionlogError, currentCall, type EffectClass } from "../../src/index.js";
import { SessionlogSession } from "../../src/integrations/openai-agents.js";
import { perform } from "../support/counter.js";

const { values: a } = parseArgs({
  options: {
    ...Object.fromEntries(["ingest", "recovery", "token", "service", "tool", "effect", "session", "hang"].map((n) => [n, { type: "string" as const }])),
    resume: { type: "boolean" },
  },
}) as unknown as { values: Record<string, string | undefined> & { resume?: boolean } };
const say = (what: object) => process.stdout.write(JSON.stringify(what) + "\n");
async function hangIf(point: string): Promise<void> {
  if (point !== a["hang"]) return;
  say({ at: point });
  await new Promise(() => setInterval(() => undefined, 60_000)); // the test kills this process here
}

// No tracing: its exporter writes to stdout, where this harness speaks JSON lines.
setTracingDisabled(true);
const client = new Client({ ingestUrl: a["ingest"]!, recoveryUrl: a["recovery"]!, token: a["token"]! });
const sessionId = a["session"]!;
const name = a["tool"]!;
const session = new SessionlogSession(sessionId, client, { writer: "agents-harness", model: "scripted" });
const count = tool({
  name,
  description: "Counts once in the counter service.",
  parameters: z.object({ n: z.number() }),
  execute: session.durableTool(
    { name, effect: a["effect"] as EffectClass, key: ({ n }: { n: number }) => `${sessionId}-${n}` },
    async (_args: { n: number }) => {
      await hangIf("after-intent");
      const output = await perform(a["service"]!, name, currentCall().idempotencyKey);
      await hangIf("after-effect");
      return output;
    },
  ),
});
// Like a real model asked again after a crash, the script calls the tool with a new call id.
const model = new ScriptedModel([[functionCall(name, { n: 1 }, { callId: `call-${randomUUID().slice(0, 8)}` })], [assistantMessage("counted")]]);
const agent = new Agent({ name: "counter", instructions: "Count once.", model, tools: [count] });
try {
  const result = await run(agent, a.resume ? [] : "count once", { session });
  say({ result: result.finalOutput, items: await session.getItems() });
} catch (e) {
  if (!(e instanceof SessionlogError)) throw e;
  say({ error: e.name, detail: e.message });
  process.exit(3);
}
