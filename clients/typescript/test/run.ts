/**
 * Runs the package's tests against one private corner of the real stack: starts the counting
 * service and the corner, then `node --test` on test/*.test.ts (one file at a time: the machine
 * is shared) with the corner in $SESSIONLOG_TS_CORNER, once for each of the client's transports
 * (`socket`, `node`, then `fetch`, in $SESSIONLOG_TS_TRANSPORT; set it to run one only), and stops both
 * after. Exits with the tests' status. `npm test` runs this. Arguments: test files (all of test/*.test.ts
 * by default), and options for `node --test` (`--test-name-pattern=fork`).
 */
import { spawn } from "node:child_process";
import { mkdtempSync, readdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { IDEMPOTENT_TOOLS, serveCounter } from "./support/counter.js";
import { createCorner } from "./support/stackcorner.js";
import { TRANSPORTS, transport } from "./support/transport.js";

const here = dirname(fileURLToPath(import.meta.url));
const workdir = mkdtempSync(join(tmpdir(), "sessionlog-ts-"));
const counter = await serveCounter();
let status = 1;
const { corner, processes } = await createCorner(workdir, counter.url, IDEMPOTENT_TOOLS);
try {
  const args = process.argv.slice(2);
  const options = args.filter((a) => a.startsWith("--"));
  const only = args.filter((a) => !a.startsWith("--"));
  const files = only.length ? only : readdirSync(here).filter((f) => f.endsWith(".test.ts")).sort().map((f) => join(here, f));
  const chosen = transport();
  const failed: string[] = [];
  for (const t of chosen ? [chosen] : TRANSPORTS) {
    console.error(`[ts tests] transport ${t}`);
    counter.reset(); // the tests count each tool's effects from zero
    const child = spawn(process.execPath, ["--import", "tsx", "--test", "--test-concurrency=1", ...options, ...files], {
      stdio: "inherit",
      env: { ...process.env, SESSIONLOG_TS_CORNER: JSON.stringify(corner), SESSIONLOG_TS_TRANSPORT: t },
    });
    if ((await new Promise<number>((resolve) => child.on("exit", (code) => resolve(code ?? 1)))) !== 0) failed.push(t);
  }
  if (failed.length) console.error(`[ts tests] failed on transport ${failed.join(", ")}`);
  status = failed.length ? 1 : 0;
} finally {
  for (const p of processes) p.kill("SIGKILL");
  counter.server.close();
  if (status !== 0) console.error(`[ts tests] the corner's service logs are in ${workdir}`);
}
process.exit(status);
