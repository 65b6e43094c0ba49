/**
 * Bench (issue 40): the client's own CPU per `Session.append`, without the stack. A stub ingest in
 * another process (this file with `--serve`: it answers creates and appends from the request, and
 * writes nothing) takes the appends; this process runs `--sessions` sessions in a closed loop,
 * one 512-byte `UserRequest` per request, and prints, round after round (the first warms up), the
 * appends per second and this process's CPU (user + system) per append. What the ingest bench
 * (bench/ingest.ts) cannot separate from the service: how much of a core the client takes.
 *
 *   node --import tsx bench/append.ts [--sessions 1000] [--seconds 5] [--rounds 3] [--transport socket|node|fetch]
 *
 * Node's young generation is small for a thousand requests in flight: `node --max-semi-space-size=64`
 * (or in NODE_OPTIONS) takes about a third off the CPU per append at 1,000 sessions.
 */
import { randomUUID } from "node:crypto";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { createServer } from "node:http";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { Client, Session, userRequest, type TransportKind } from "../src/index.js";

const { values } = parseArgs({
  options: {
    serve: { type: "boolean", default: false },
    sessions: { type: "string", default: "1000" },
    seconds: { type: "string", default: "5" },
    rounds: { type: "string", default: "3" },
    transport: { type: "string" },
    "text-bytes": { type: "string", default: "512" },
  },
});

/** The stub: creates answer a session at seq 1, appends answer their events' positions. Prints its port. */
function serve(): void {
  let offset = 0;
  const at = (seq: number, eventId: string) => ({ seq, event_id: eventId, partition: 0, offset: offset++, duplicate: false });
  const server = createServer((req, res) => {
    let body = "";
    req.setEncoding("utf8");
    req.on("data", (chunk: string) => (body += chunk));
    req.on("end", () => {
      const doc = body ? (JSON.parse(body) as { session_id?: string; events?: { seq: number; event_id: string }[] }) : {};
      let answer: object;
      if (req.url === "/v1/sessions") {
        const sid = doc.session_id ?? randomUUID();
        answer = { session_id: sid, epoch: 1, next_seq: 2, writer_token: `wt-${sid}`, event: at(1, randomUUID()) };
        res.statusCode = 201;
      } else {
        const events = (doc.events ?? []).map((e) => at(e.seq, e.event_id));
        answer = { session_id: req.url?.split("/")[3], next_seq: (events[events.length - 1]?.seq ?? 0) + 1, events };
      }
      // With its length, as the ingest answers (not chunked).
      const text = JSON.stringify(answer);
      res.writeHead(res.statusCode, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
      res.end(text);
    });
  });
  server.keepAliveTimeout = 120_000;
  server.listen(0, "127.0.0.1", () => console.log((server.address() as { port: number }).port));
}

async function measure(): Promise<void> {
  const sessions = Number(values.sessions);
  const seconds = Number(values.seconds);
  const rounds = Number(values.rounds);
  const stub = spawn(process.execPath, [...process.execArgv, fileURLToPath(import.meta.url), "--serve"], { stdio: ["ignore", "pipe", "inherit"] });
  try {
    const [port] = (await once(stub.stdout!, "data")) as [Buffer];
    const client = new Client({
      ingestUrl: `http://127.0.0.1:${String(port).trim()}`, token: "bench", transport: values.transport as TransportKind | undefined, maxSockets: sessions,
    });
    const started = await Promise.all(Array.from({ length: sessions }, () => Session.start(client, "bench")));
    const text = "x".repeat(Number(values["text-bytes"]));
    console.log(`${sessions} sessions, transport ${client.transport}, node ${process.version} ${process.execArgv.join(" ").replace(/--import[= ]tsx/, "")}`.trim());
    for (let round = 0; round <= rounds; round++) {
      let appends = 0;
      const cpu = process.cpuUsage();
      const start = performance.now();
      const until = start + seconds * 1000;
      await Promise.all(started.map(async (session) => {
        while (performance.now() < until) {
          await session.append(userRequest(text));
          appends++;
        }
      }));
      const used = process.cpuUsage(cpu);
      const wall = (performance.now() - start) / 1000;
      console.log(
        `${round === 0 ? "warm-up" : `round ${round}`}: ${(appends / wall).toFixed(0)} appends/s, ` +
          `CPU ${((used.user + used.system) / appends).toFixed(1)} µs per append (user ${(used.user / appends).toFixed(1)}, system ${(used.system / appends).toFixed(1)})`,
      );
    }
    client.disconnect();
  } finally {
    stub.kill();
  }
}

if (values.serve) serve();
else await measure();
