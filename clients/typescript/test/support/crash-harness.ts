/**
 * A harness the crash test runs as a process and kills, as clients/python/tests/crash_harness.py:
 * it starts (or resumes) a session and runs one durable tool call against the counting service,
 * announcing on stdout where it is, and hangs where it is told to so that the test can kill -9 it.
 *
 *   node --import tsx crash-harness.ts --ingest URL --recovery URL --token T --service URL --tool NAME
 *       --effect Pure|Idempotent|NonIdempotent [--session ID] [--hang after-intent|after-effect|after-record]
 *       [--agent NAME] [--lease]
 *
 * `--lease` holds the session's writer lease (the worker tests: a killed harness's lease lapses
 * and the session is woken for a worker of `--agent`).
 *
 * Prints one JSON object per line: {"session": ID}, {"at": POINT}, {"result": ...} or {"error": CLASS}.
 */
import { ProblemError, Session, SessionlogError, currentCall, durableTool } from "../../src/index.js";
import { perform } from "./counter.js";
import { hangIf as hangAt, harnessClient, parseHarnessArgs, say } from "./harness-args.js";

const a = parseHarnessArgs();
const hangIf = (point: string) => hangAt(a, point);

const client = harnessClient(a);
let session: Session;
try {
  if (a.session) {
    session = await Session.resume(client, a.session, "ts-crash-harness-2");
  } else {
    session = await Session.start(client, a.agent ?? "ts-crash-harness", { title: "count once" });
    await session.userRequest("count once");
  }
} catch (e) {
  if (!(e instanceof ProblemError)) throw e;
  say({ error: e.name, detail: e.detail });
  process.exit(3);
}
if (a.lease) await session.holdLease();
say({ session: session.sessionId });

const tool = a.tool;
const count = durableTool(session, { effect: a.effect, name: tool, key: (n: number) => `${session.sessionId}-${n}` }, async (_n: number) => {
  await hangIf("after-intent");
  const output = await perform(a.service, tool, currentCall().idempotencyKey);
  await hangIf("after-effect");
  return output;
});

try {
  const result = await count(1);
  await hangIf("after-record");
  say({ result });
} catch (e) {
  if (!(e instanceof SessionlogError)) throw e;
  say({ error: e.name, detail: e.message });
  process.exit(3);
}
