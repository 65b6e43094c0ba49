/**
 * Bench (issue 40): is the TypeScript client the bottleneck when a fleet appends through ingest?
 *
 * Starts ONE `sessionlog ingest` on a private corner of the real stack (the tests' corner: ingest
 * and the projector, as a deployment runs them; `Session.start` creates under an id it chose, and
 * ingest catches such a session up through the projection, refusing with 503 once the projection
 * is too far behind), then alternates, round after round,
 * the Rust HTTP load generator (`sessionlog-bench ingest --url`, the reference: a closed loop of
 * reqwest tasks) and this process appending through the package's `Client` and `Session`: the same
 * sessions (1,000 by default, started before the clock runs), one event per request (a 512-byte
 * `UserRequest`, as the load generator sends), the same closed-loop length. The order flips each
 * round so neither side always gets the warmer broker. Prints each round's events/s of both sides
 * and their ratio (TypeScript ÷ Rust), then the median ratio and its range. The goal is a median
 * of at least 0.8.
 *
 *   clients/typescript/scripts/bench [--rounds 3] [--seconds 20] [--sessions 1000]
 *
 * $SESSIONLOG_BIN and $SESSIONLOG_BENCH_BIN name the binaries (scripts/bench points them at the
 * release build).
 */
import { spawn } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { Client, Session, userRequest } from "../src/index.js";
import { createCorner, token } from "../test/support/stackcorner.js";

const { values } = parseArgs({
  options: {
    rounds: { type: "string", default: "3" },
    seconds: { type: "string", default: "20" },
    sessions: { type: "string", default: "1000" },
    "text-bytes": { type: "string", default: "512" },
  },
});
const rounds = Number(values.rounds);
const seconds = Number(values.seconds);
const sessions = Number(values.sessions);
const textBytes = Number(values["text-bytes"]);
const benchBin = process.env["SESSIONLOG_BENCH_BIN"];
if (!benchBin) throw new Error("$SESSIONLOG_BENCH_BIN is not set: run clients/typescript/scripts/bench");

/** One side's figures in one round. */
interface Figures {
  events: number;
  seconds: number;
  p50Ms?: number;
  p99Ms?: number;
}
const rate = (f: Figures) => f.events / f.seconds;

/** The `p`th percentile of `sorted` (ascending). */
function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((sorted.length * p) / 100))] ?? 0;
}

/** Median, min and max. */
function spread(values: number[]): { median: number; min: number; max: number } {
  const s = [...values].sort((a, b) => a - b);
  const mid = s.length >> 1;
  const median = s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
  return { median, min: s[0]!, max: s[s.length - 1]! };
}

/** One round of the Rust load generator against `url`; its throughput as it printed it. */
async function rustSide(url: string, harnessToken: string): Promise<Figures> {
  const args = ["ingest", "--url", url, "--sessions", String(sessions), "--seconds", String(seconds), "--rounds", "1", "--text-bytes", String(textBytes)];
  const child = spawn(benchBin!, args, { env: { ...process.env, SESSIONLOG_TOKEN: harnessToken }, stdio: ["ignore", "pipe", "inherit"] });
  let out = "";
  child.stdout.on("data", (d: Buffer) => (out += d.toString()));
  const code = await new Promise<number | null>((r) => child.on("exit", r));
  // "round 1: http 1234 ev/s (24680 events in 20.0 s, p50 .. ms, p99 .. ms, ...)"
  const m = /round 1: http \d+ ev\/s \((\d+) events in ([\d.]+) s, p50 ([\d.]+) ms, p99 ([\d.]+) ms/.exec(out);
  if (code !== 0 || !m) throw new Error(`sessionlog-bench ${args.join(" ")} exited ${code}: ${out}`);
  return { events: Number(m[1]), seconds: Number(m[2]), p50Ms: Number(m[3]), p99Ms: Number(m[4]) };
}

/** One round of this client: `sessions` sessions started, then each appends one event per request until the time is up. */
async function tsSide(client: Client): Promise<Figures> {
  const text = "x".repeat(textBytes);
  const started: Session[] = [];
  // Started 50 at a time, before the clock: the load generator creates its sessions first too.
  for (let i = 0; i < sessions; i += 50) {
    started.push(...(await Promise.all(Array.from({ length: Math.min(50, sessions - i) }, () => Session.start(client, "bench")))));
  }
  const latencies: number[] = [];
  const start = performance.now();
  const until = start + seconds * 1000;
  await Promise.all(
    started.map(async (session) => {
      while (performance.now() < until) {
        const from = performance.now();
        await session.append(userRequest(text));
        latencies.push(performance.now() - from);
      }
    }),
  );
  const elapsed = (performance.now() - start) / 1000;
  latencies.sort((a, b) => a - b);
  return { events: latencies.length, seconds: elapsed, p50Ms: percentile(latencies, 50), p99Ms: percentile(latencies, 99) };
}

const workdir = mkdtempSync(join(tmpdir(), "sessionlog-ts-bench-"));
const { corner, processes } = await createCorner(workdir, "", [], ["project", "ingest"]);
try {
  const harnessToken = token(corner, ["harness", "reader"], "ts-bench");
  // As many connections as sessions, as the load generator keeps (Node's fetch pools them per origin).
  const client = new Client({ ingestUrl: corner.ingestUrl, token: harnessToken, timeout: 60 });
  console.error(`${sessions} sessions, one event (${textBytes} bytes of text) per request, ${seconds} s a side, ${rounds} rounds, ingest at ${corner.ingestUrl}`);
  const rows: string[] = [];
  const ratios: number[] = [];
  const ms = (f: Figures) => `${f.p50Ms?.toFixed(1)} / ${f.p99Ms?.toFixed(1)}`;
  for (let round = 1; round <= rounds; round++) {
    const rustFirst = round % 2 === 1;
    let rust: Figures, ts: Figures;
    if (rustFirst) {
      rust = await rustSide(corner.ingestUrl, harnessToken);
      ts = await tsSide(client);
    } else {
      ts = await tsSide(client);
      rust = await rustSide(corner.ingestUrl, harnessToken);
    }
    const ratio = rate(ts) / rate(rust);
    ratios.push(ratio);
    const row = `| ${round} | ${rustFirst ? "Rust, TS" : "TS, Rust"} | ${rate(rust).toFixed(0)} | ${rate(ts).toFixed(0)} | ${ratio.toFixed(3)} | ${ms(rust)} | ${ms(ts)} |`;
    console.error(`round ${round}: ${row}`);
    rows.push(row);
  }
  console.log("| round | order | Rust ev/s | TS ev/s | TS ÷ Rust | Rust p50 / p99 ms | TS p50 / p99 ms |");
  console.log("|---|---|---|---|---|---|---|");
  for (const row of rows) console.log(row);
  const s = spread(ratios);
  console.log(`median TS ÷ Rust ${s.median.toFixed(3)} (range ${s.min.toFixed(3)}–${s.max.toFixed(3)}) over ${rounds} rounds`);
} finally {
  for (const p of processes) p.kill("SIGKILL");
}
