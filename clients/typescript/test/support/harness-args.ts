/**
 * What the harness scripts the tests run as processes and kill (support/crash-harness.ts,
 * integrations/agents-harness.ts, integrations/graph-harness.ts) share: their command line (as
 * support/harness.ts's `Harness` passes it), their client, and how they speak and hang.
 *
 *   --ingest URL --recovery URL --token T --service URL --tool NAME --effect EFFECT
 *   [--session ID] [--hang POINT] [--agent NAME] [--lease] [--resume]
 */
import { parseArgs } from "node:util";
import { Client, type EffectClass } from "../../src/index.js";
import { transport } from "./transport.js";

/** A harness script's arguments. */
export interface HarnessArgs {
  ingest: string;
  recovery: string;
  token: string;
  /** The counting service's base URL. */
  service: string;
  tool: string;
  effect: EffectClass;
  /** The session (or thread) to resume or run. */
  session: string | undefined;
  /** Where to hang, announcing it, for the test to kill the process there. */
  hang: string | undefined;
  agent: string | undefined;
  /** Hold the session's writer lease. */
  lease: boolean;
  /** Go on from the session's log. */
  resume: boolean;
}

const REQUIRED = ["ingest", "recovery", "token", "service", "tool", "effect"] as const;
const EFFECTS: readonly string[] = ["Pure", "Idempotent", "NonIdempotent"];

/** Parses a harness script's command line (`process.argv` by default); throws on a missing, unknown or malformed argument. */
export function parseHarnessArgs(args: string[] = process.argv.slice(2)): HarnessArgs {
  const text = { type: "string" as const };
  const { values: v } = parseArgs({
    args,
    strict: true,
    options: {
      ingest: text, recovery: text, token: text, service: text, tool: text, effect: text, session: text, hang: text, agent: text,
      lease: { type: "boolean", default: false },
      resume: { type: "boolean", default: false },
    },
  });
  for (const name of REQUIRED) if (!v[name]) throw new Error(`a harness needs --${name}`);
  if (!EFFECTS.includes(v.effect!)) throw new Error(`--effect is one of ${EFFECTS.join(", ")}, not ${v.effect}`);
  return {
    ingest: v.ingest!, recovery: v.recovery!, token: v.token!, service: v.service!, tool: v.tool!, effect: v.effect as EffectClass,
    session: v.session, hang: v.hang, agent: v.agent, lease: v.lease, resume: v.resume,
  };
}

/** The harness's client of the corner (on the transport the tests run with). */
export function harnessClient(a: HarnessArgs): Client {
  return new Client({ transport: transport(), ingestUrl: a.ingest, recoveryUrl: a.recovery, token: a.token });
}

/** Prints `what` as one JSON line on stdout, where the test reads it. */
export function say(what: object): void {
  process.stdout.write(JSON.stringify(what) + "\n");
}

/** At `point`, when it is the one `--hang` names: says so, and waits forever (the test kills the process there). */
export async function hangIf(a: HarnessArgs, point: string): Promise<void> {
  if (point !== a.hang) return;
  say({ at: point });
  await new Promise(() => setInterval(() => undefined, 60_000));
}
