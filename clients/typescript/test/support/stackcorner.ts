/**
 * A private corner of the real stack for the TypeScript tests, as clients/python/tests/stackcorner.py
 * makes one: its own topic, keyspace, consumer group, signing key and KEK, with `sessionlog project`,
 * `ingest` and `serve-recovery` running as processes of the built binary ($SESSIONLOG_BIN, else
 * $CARGO_TARGET_DIR/debug/sessionlog). The stack itself comes from `scripts/stack up`.
 *
 * test/run.ts makes one corner for the whole run and hands it to the test files (each a process of
 * its own under `node --test`) in $SESSIONLOG_TS_CORNER.
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { openSync, existsSync, readFileSync } from "node:fs";
import { createServer } from "node:net";
import { dirname, join, resolve } from "node:path";
import { randomBytes } from "node:crypto";
import { fileURLToPath } from "node:url";

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "../../../..");

/** What a test file needs of the corner. */
export interface Corner {
  workdir: string;
  env: Record<string, string>;
  ingestUrl: string;
  recoveryUrl: string;
  counterUrl: string;
}

/** The corner test/run.ts made for this run. */
export function corner(): Corner {
  const given = process.env["SESSIONLOG_TS_CORNER"];
  if (!given) throw new Error("no stack corner: run the tests with `npm test` (test/run.ts starts one)");
  return JSON.parse(given) as Corner;
}

/** Polls `probe` until it answers something, or fails naming `what` after the deadline. */
export async function waitFor<T>(what: string, deadlineS: number, probe: () => Promise<T | undefined>): Promise<T> {
  const end = Date.now() + deadlineS * 1000;
  let last: unknown;
  while (Date.now() < end) {
    try {
      const value = await probe();
      if (value !== undefined) return value;
    } catch (e) {
      last = e; // a probe failing is the same as not yet
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`waited ${deadlineS}s for ${what}${last ? ` (last error: ${String(last)})` : ""}`);
}

/** The built `sessionlog` binary. */
export function sessionlogBin(): string {
  const explicit = process.env["SESSIONLOG_BIN"];
  if (explicit) return explicit;
  const path = join(process.env["CARGO_TARGET_DIR"] ?? join(REPO, "target"), "debug", "sessionlog");
  if (!existsSync(path)) throw new Error(`${path} is missing: run \`cargo build -p sessionlog-cli\` (scripts/test does)`);
  return path;
}

function stackEnv(): Record<string, string> {
  const env: Record<string, string> = Object.fromEntries(Object.entries(process.env).filter(([, v]) => v !== undefined)) as Record<string, string>;
  if (!env["SESSIONLOG_KAFKA__BOOTSTRAP"]) {
    const file = join(env["SESSIONLOG_STACK_DIR"] ?? join(REPO, ".stack"), "stack.env");
    if (!existsSync(file)) throw new Error(`${file} is missing: bring the stack up with \`scripts/stack up\``);
    for (const line of readFileSync(file, "utf8").split("\n")) {
      const at = line.indexOf("=");
      if (at > 0 && !line.startsWith("#")) env[line.slice(0, at)] = line.slice(at + 1);
    }
  }
  return env;
}

/** Runs `sessionlog ARGS` with the corner's settings to completion; its stdout. */
export function run(c: Pick<Corner, "env">, ...args: string[]): string {
  const done = spawnSync(sessionlogBin(), args, { env: c.env, encoding: "utf8", timeout: 120_000 });
  if (done.status !== 0) throw new Error(`sessionlog ${args.join(" ")} failed: ${(done.stderr ?? String(done.error)).slice(-2000)}`);
  return done.stdout;
}

/** A token for `subject` with `roles`. */
export function token(c: Pick<Corner, "env">, roles: string[], subject = "ts-tests"): string {
  return run(c, "token", "mint", "--subject", subject, "--ttl-secs", "3600", ...roles.flatMap((r) => ["--role", r])).trim();
}

/** A port nothing listens on now. */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const address = server.address();
  await new Promise((r) => server.close(r));
  if (address === null || typeof address === "string") throw new Error("no port");
  return address.port;
}

/** The corner's long-running services. */
export type Service = "project" | "ingest" | "serve-recovery" | "wake";

/**
 * Starts the corner's services (resolvers of `resolvers` tools at the counter); the corner and its
 * processes. `services` picks which run (all by default; a bench leaves out what its load does not
 * need, so the cores go to what it measures); a URL of a service not started is "".
 */
export async function createCorner(
  workdir: string, counterUrl: string, resolvers: string[], services: readonly Service[] = ["project", "ingest", "serve-recovery", "wake"],
): Promise<{ corner: Corner; processes: ChildProcess[] }> {
  const tag = `ts_${randomBytes(4).toString("hex")}`;
  const env = stackEnv();
  Object.assign(env, {
    SESSIONLOG_CONFIG: "/dev/null",
    SESSIONLOG_KAFKA__TOPIC: `session-events-t-${tag}`,
    SESSIONLOG_KAFKA__DEAD_LETTER_TOPIC: `session-events-t-${tag}-dlq`,
    SESSIONLOG_KAFKA__PARTITIONS: "3",
    SESSIONLOG_CQL__KEYSPACE: `t_${tag}`,
    SESSIONLOG_AUTH_DIR: join(workdir, "auth"),
    SESSIONLOG_AUTH__JWKS_FILE: join(workdir, "auth", "jwks.json"),
    SESSIONLOG_RECOVERY__SIGNING_KEY_FILE: join(workdir, "auth", "recovery-key.pem"),
    SESSIONLOG_PRIVACY__KEK_FILE: join(workdir, "kek.key"),
    SESSIONLOG_LEASE__TTL_MS: "1500",
  });
  for (const tool of resolvers) env[`SESSIONLOG_RECOVERY__RESOLVERS__${tool.toUpperCase()}`] = `${counterUrl}/${tool}/calls`;
  const c = { env };
  run(c, "token", "init");
  run(c, "keys", "init", "--out", join(workdir, "kek.key"));
  run(c, "init");
  const processes: ChildProcess[] = [];
  const start = (name: string, ...args: string[]) => {
    const log = openSync(join(workdir, `${name}.log`), "a");
    const child = spawn(sessionlogBin(), args, { env, stdio: ["ignore", log, log] });
    processes.push(child);
    return child;
  };
  if (services.includes("project")) start("projector", "project", "--group", `sessionlog-t-${tag}`, "--listen", "");
  // The wake component hands sessions whose lease lapsed to workers (test/worker.test.ts).
  if (services.includes("wake")) start("wake", "wake", "--listen", "");
  const serve = async (command: string) => {
    const url = `http://127.0.0.1:${await freePort()}`;
    const child = start(command, command, "--listen", url.slice("http://".length));
    await waitFor(`sessionlog ${command} to be ready (see ${join(workdir, command + ".log")})`, 90, async () => {
      if (child.exitCode !== null) throw new Error(`sessionlog ${command} exited: see ${join(workdir, command + ".log")}`);
      return (await fetch(`${url}/health/ready`, { signal: AbortSignal.timeout(2000) })).status === 200 ? true : undefined;
    });
    return url;
  };
  const ingestUrl = services.includes("ingest") ? await serve("ingest") : "";
  const recoveryUrl = services.includes("serve-recovery") ? await serve("serve-recovery") : "";
  return { corner: { workdir, env, ingestUrl, recoveryUrl, counterUrl }, processes };
}
