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
 * and their ratio (TypeScript ÷ Rust), their latencies, the CPU each client and the ingest spent
 * per event (from /proc), then the median ratio and its range. The goal is a median of at least
 * 0.8. Node's flags (NODE_OPTIONS=--max-semi-space-size=64: see bench/append.ts) apply to this
 * process, and are printed.
 *
 *   clients/typescript/scripts/bench [--rounds 3] [--seconds 20] [--sessions 1000] [--transport socket|node|fetch]
 *       [--max-sockets N (default: --sessions)] [--no-build]
 *
 * $SESSIONLOG_BIN and $SESSIONLOG_BENCH_BIN name the binaries (scripts/bench points them at the
 * release build, or with --no-build leaves those given).
 */
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { parseArgs } from "node:util";
import { Client, Session, userRequest, type TransportKind } from "../src/index.js";
import { createCorner, token } from "../test/support/stackcorner.js";

const { values } = parseArgs({
  options: {
    rounds: { type: "string", default: "3" },
    seconds: { type: "string", default: "20" },
    sessions: { type: "string", default: "1000" },
    "text-bytes": { type: "string", default: "512" },
    transport: { type: "string" },
    "max-sockets": { type: "string" },
  },
});
const rounds = Number(values.rounds);
const seconds = Number(values.seconds);
const sessions = Number(values.sessions);
const textBytes = Number(values["text-bytes"]);
const transport = values.transport as TransportKind | undefined;
// As many connections as sessions by default, as the load generator keeps.
const maxSockets = Number(values["max-sockets"] ?? Math.max(sessions, 1));
const benchBin = process.env["SESSIONLOG_BENCH_BIN"];
if (!benchBin) throw new Error("$SESSIONLOG_BENCH_BIN is not set: run clients/typescript/scripts/bench");

/** One side's figures in one round. */
interface Figures {
  events: number;
  seconds: number;
  p50Ms?: number;
  p99Ms?: number;
  /** CPU seconds over the side (its sessions' creation too): the client's own, and the ingest's. */
  clientCpu?: number;
  ingestCpu?: number;
  /** This process's event loop delay, p50 and p99, while the TypeScript side ran (a loop that waits for a core delays every answer). */
  loopP50Ms?: number;
  loopP99Ms?: number;
}

const TICK = Number(spawnSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).stdout?.trim()) || 100;
/** CPU seconds process `pid` has used (user and system, from /proc), or undefined when it cannot be read (not Linux, gone). */
function cpuOf(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" "); // after "pid (comm) "
    return (Number(fields[11]) + Number(fields[12])) / TICK; // utime, stime
  } catch {
    return undefined;
  }
}
/** This process's CPU seconds. */
const ownCpu = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
};
let ingestPid: number | undefined;
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
  const ingest0 = cpuOf(ingestPid);
  const child = spawn(benchBin!, args, { env: { ...process.env, SESSIONLOG_TOKEN: harnessToken }, stdio: ["ignore", "pipe", "inherit"] });
  let out = "";
  child.stdout.on("data", (d: Buffer) => (out += d.toString()));
  // Its CPU as last read while it ran (it is gone once it exited): at most 100 ms of it missed.
  let clientCpu: number | undefined;
  const meter = setInterval(() => (clientCpu = cpuOf(child.pid) ?? clientCpu), 100);
  const code = await new Promise<number | null>((r) => child.on("exit", r));
  clearInterval(meter);
  const ingest1 = cpuOf(ingestPid);
  // "round 1: http 1234 ev/s (24680 events in 20.0 s, p50 .. ms, p99 .. ms, ...)"
  const m = /round 1: http \d+ ev\/s \((\d+) events in ([\d.]+) s, p50 ([\d.]+) ms, p99 ([\d.]+) ms/.exec(out);
  if (code !== 0 || !m) throw new Error(`sessionlog-bench ${args.join(" ")} exited ${code}: ${out}`);
  const ingestCpu = ingest0 === undefined || ingest1 === undefined ? undefined : ingest1 - ingest0;
  return { events: Number(m[1]), seconds: Number(m[2]), p50Ms: Number(m[3]), p99Ms: Number(m[4]), clientCpu, ingestCpu };
}

/** One round of this client: `sessions` sessions started, then each appends one event per request until the time is up. */
async function tsSide(client: Client): Promise<Figures> {
  const text = "x".repeat(textBytes);
  const cpu0 = ownCpu();
  const ingest0 = cpuOf(ingestPid);
  const started: Session[] = [];
  // Started 50 at a time, before the clock: the load generator creates its sessions first too.
  for (let i = 0; i < sessions; i += 50) {
    started.push(...(await Promise.all(Array.from({ length: Math.min(50, sessions - i) }, () => Session.start(client, "bench")))));
  }
  const latencies: number[] = [];
  const loop = monitorEventLoopDelay({ resolution: 10 });
  loop.enable();
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
  loop.disable();
  const clientCpu = ownCpu() - cpu0;
  const ingest1 = cpuOf(ingestPid);
  const ingestCpu = ingest0 === undefined || ingest1 === undefined ? undefined : ingest1 - ingest0;
  latencies.sort((a, b) => a - b);
  return {
    events: latencies.length, seconds: elapsed, p50Ms: percentile(latencies, 50), p99Ms: percentile(latencies, 99), clientCpu, ingestCpu,
    loopP50Ms: loop.percentile(50) / 1e6, loopP99Ms: loop.percentile(99) / 1e6,
  };
}

/** Node's own flags this process runs with (NODE_OPTIONS too), but the loader's. */
const nodeFlags = [...process.execArgv, process.env["NODE_OPTIONS"] ?? ""].join(" ").replace(/--import[= ]tsx/, "").trim();

const workdir = mkdtempSync(join(tmpdir(), "sessionlog-ts-bench-"));
const { corner, processes } = await createCorner(workdir, "", [], ["project", "ingest"]);
ingestPid = processes.find((p) => p.spawnargs.includes("ingest"))?.pid;
try {
  const harnessToken = token(corner, ["harness", "reader"], "ts-bench");
  const client = new Client({ ingestUrl: corner.ingestUrl, token: harnessToken, timeout: 60, transport, maxSockets });
  console.error(
    `${sessions} sessions, one event (${textBytes} bytes of text) per request, ${seconds} s a side, ${rounds} rounds, ` +
      `transport ${client.transport}${client.transport !== "fetch" ? ` (at most ${maxSockets} connections)` : ""}, ` +
      `node ${process.version}${nodeFlags ? ` ${nodeFlags}` : ""}, ingest at ${corner.ingestUrl}`,
  );
  const rows: string[] = [];
  const ratios: number[] = [];
  const ms = (f: Figures) => `${f.p50Ms?.toFixed(1)} / ${f.p99Ms?.toFixed(1)}`;
  const perEvent = (cpu: number | undefined, f: Figures) => (cpu === undefined ? "?" : ((cpu / f.events) * 1e6).toFixed(0));
  const cpus = (a: Figures, b: Figures, which: "clientCpu" | "ingestCpu") => `${perEvent(a[which], a)} / ${perEvent(b[which], b)}`;
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
    const row =
      `| ${round} | ${rustFirst ? "Rust, TS" : "TS, Rust"} | ${rate(rust).toFixed(0)} | ${rate(ts).toFixed(0)} | ${ratio.toFixed(3)} | ${ms(rust)} | ${ms(ts)} ` +
      `| ${cpus(rust, ts, "clientCpu")} | ${cpus(rust, ts, "ingestCpu")} | ${ts.loopP50Ms?.toFixed(1)} / ${ts.loopP99Ms?.toFixed(1)} |`;
    console.error(`round ${round}: ${row}`);
    rows.push(row);
  }
  // CPU per event: over the whole side (its sessions' creation too), per event appended in the timed part.
  console.log("| round | order | Rust ev/s | TS ev/s | TS ÷ Rust | Rust p50 / p99 ms | TS p50 / p99 ms | client CPU µs/event Rust / TS | ingest CPU µs/event Rust / TS | TS loop delay p50 / p99 ms |");
  console.log("|---|---|---|---|---|---|---|---|---|---|");
  for (const row of rows) console.log(row);
  const s = spread(ratios);
  console.log(`median TS ÷ Rust ${s.median.toFixed(3)} (range ${s.min.toFixed(3)}–${s.max.toFixed(3)}) over ${rounds} rounds`);
} finally {
  for (const p of processes) p.kill("SIGKILL");
}
