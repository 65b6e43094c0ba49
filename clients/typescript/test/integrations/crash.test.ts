// Crash and resume for the framework adapters (issue 40): an OpenAI Agents SDK harness and a
// LangGraph.js graph, each killed with kill -9 between a durable tool's side effect and its
// recorded result, then resumed in a new process: the counting service shows one side effect.
// Run by test/run.ts's corner: `node --import tsx test/run.ts test/integrations/crash.test.ts`.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { test } from "node:test";

import { Harness } from "../support/harness.js";
import { corner, token } from "../support/stackcorner.js";

const c = corner();
const harnessToken = token(c, ["harness", "reader"]);

/** How many side effects `tool` had under `key` (0 when it never arrived). */
async function effects(tool: string, key: string): Promise<number> {
  const answer = await fetch(`${c.counterUrl}/${tool}/calls/${encodeURIComponent(key)}`);
  if (answer.status === 404) return 0;
  const output = String(((await answer.json()) as { output: unknown }).output);
  return Number(/#(\d+)$/.exec(output)?.[1] ?? NaN);
}

for (const [script, what] of [["agents-harness.ts", "an Agents SDK run"], ["graph-harness.ts", "a LangGraph.js graph"]] as const) {
  for (const [tool, point] of [["counter", "after-effect"], ["reissued", "after-intent"]] as const) {
    test(`${what} killed ${point} resumes in a new process with exactly one side effect`, async () => {
      const id = `crash-${randomUUID().slice(0, 8)}`;
      const args = ["--session", id] as const;
      const first = new Harness(`../integrations/${script}`, c, harnessToken, tool, "Idempotent", ...args, "--hang", point);
      assert.deepEqual(await first.next(120), { at: point });
      await first.kill();
      assert.equal(await effects(tool, `${id}-1`), point === "after-effect" ? 1 : 0);

      const second = new Harness(`../integrations/${script}`, c, harnessToken, tool, "Idempotent", ...args, "--resume");
      const line = await second.next(120);
      assert.equal(await second.exit(), 0, JSON.stringify(line));
      assert.equal(await effects(tool, `${id}-1`), 1, "exactly one side effect");
      const said = JSON.stringify(line);
      assert.ok(said.includes(`${tool} effect #1`), `the resumed run answered the one effect: ${said}`);
      if (script === "agents-harness.ts") {
        const { result, items, modelInput } = line as { result: unknown; items: { role?: string; content?: unknown }[]; modelInput: unknown };
        assert.equal(result, "counted");
        // What the user said before the crash is in the session, and the resumed run's model read it.
        assert.deepEqual(items.filter((i) => i.role === "user").map((i) => i.content), ["count once"], JSON.stringify(items));
        assert.ok(JSON.stringify(modelInput).includes("count once"), `the resumed model call's input: ${JSON.stringify(modelInput)}`);
      }
    });
  }
}
