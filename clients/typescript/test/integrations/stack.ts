/**
 * A private corner of the running stack for the adapters' tests (the Python tests' `StackCorner`):
 * a topic and keyspace of its own, and the built binary's projector, ingest and recovery on them,
 * with tokens minted for any tenant. Needs `scripts/stack up` and `cargo build -p sessionlog-cli`.
 */

import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { randomUUID } from "node:crypto";
import { existsSync, mkdtempSync, openSync, readFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

import { Client } from "../../src/client.js";

const REPO = resolve(import.meta.dirname, "../../../..");

/** The built `sessionlog` binary (SESSIONLOG_BIN, else CARGO_TARGET_DIR's debug build). */
export function sessionlogBin(): string {
  if (process.env["SESSIONLOG_BIN"]) return process.env["SESSIONLOG_BIN"];
  const bin = join(process.env["CARGO_TARGET_DIR"] ?? join(REPO, "target"), "debug", "sessionlog");
  if (!existsSync(bin)) throw new Error(`${bin} is missing: run \`cargo build -p sessionlog-cli\` (scripts/test does)`);
  return bin;
}

function stackEnv(): Record<string, string> {
  const env = { ...process.env } as Record<string, string>;
  if (env["SESSIONLOG_KAFKA__BOOTSTRAP"] === undefined) {
    const file = join(env["SESSIONLOG_STACK_DIR"] ?? join(REPO, ".stack"), "stack.env");
    if (!existsSync(file)) throw new Error(`${file} is missing: bring the stack up with \`scripts/stack up\``);
    for (const line of readFileSync(file, "utf8").split("\n")) {
      const at = line.indexOf("=");
      if (at > 0 && !line.startsWith("#")) env[line.slice(0, at)] = line.slice(at + 1);
    }
  }
  return env;
}

/** A port nothing listens on now. */
export function freePort(): Promise<number> {
  return new Promise((done, fail) => {
    const server = createServer();
    server.once("error", fail);
    server.listen(0, "127.0.0.1", () => {
      const port = (server.address() as { port: number }).port;
      server.close(() => done(port));
    });
  });
}

/** Polls `probe` until it answers true, failing after `seconds`. */
export async function waitFor(what: string, seconds: number, probe: () => Promise<boolean> | boolean): Promise<void> {
  const deadline = Date.now() + seconds * 1000;
  for (;;) {
    if (await probe()) return;
    if (Date.now() > deadline) throw new Error(`timed out after ${seconds}s waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** The services of one test run, and credentials for them. */
export class StackCorner {
  ingestUrl = "";
  recoveryUrl = "";
  private readonly processes: ChildProcess[] = [];

  private constructor(
    readonly workdir: string,
    readonly env: Record<string, string>,
  ) {}

  /** Initialises a topic and keyspace of its own and starts a projector, an ingest and a recovery on them. */
  static async create(options: { resolvers?: Record<string, string> } = {}): Promise<StackCorner> {
    const tag = `ts_${randomUUID().replace(/-/g, "").slice(0, 8)}`;
    const workdir = mkdtempSync(join(tmpdir(), "sessionlog-ts-"));
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
    });
    for (const [tool, url] of Object.entries(options.resolvers ?? {})) {
      env[`SESSIONLOG_RECOVERY__RESOLVERS__${tool.toUpperCase()}`] = url;
    }
    const corner = new StackCorner(workdir, env);
    corner.run("token", "init");
    corner.run("keys", "init", "--out", join(workdir, "kek.key"));
    corner.run("init");
    corner.spawn("projector", "project", "--group", `sessionlog-t-${tag}`, "--listen", "");
    corner.ingestUrl = await corner.serve("ingest");
    corner.recoveryUrl = await corner.serve("serve-recovery");
    return corner;
  }

  /** Runs `sessionlog ARGS` to completion; its stdout. */
  run(...args: string[]): string {
    return execFileSync(sessionlogBin(), args, { env: this.env, timeout: 120_000, stdio: ["ignore", "pipe", "pipe"] }).toString();
  }

  private spawn(log: string, ...args: string[]): ChildProcess {
    const out = openSync(join(this.workdir, `${log}.log`), "a");
    const child = spawn(sessionlogBin(), args, { env: this.env, stdio: ["ignore", out, out] });
    this.processes.push(child);
    return child;
  }

  private async serve(command: string): Promise<string> {
    const base = `127.0.0.1:${await freePort()}`;
    const child = this.spawn(command, command, "--listen", base);
    await waitFor(`sessionlog ${command} to be ready (log: ${this.workdir}/${command}.log)`, 60, async () => {
      if (child.exitCode !== null) throw new Error(`sessionlog ${command} exited: see ${this.workdir}/${command}.log`);
      try {
        return (await fetch(`http://${base}/health/ready`, { signal: AbortSignal.timeout(2000) })).status === 200;
      } catch {
        return false;
      }
    });
    return `http://${base}`;
  }

  /** A token for `roles` of `tenant` (the services' default unless given). */
  token(roles: string[], tenant?: string): string {
    const args = ["token", "mint", "--subject", "ts-adapter-tests", "--ttl-secs", "3600"];
    for (const role of roles) args.push("--role", role);
    if (tenant !== undefined) args.push("--tenant", tenant);
    return this.run(...args).trim();
  }

  /** A client of a fresh tenant of its own, with `roles`. */
  client(roles: string[] = ["harness", "reader", "operator"], tenant = `ts-${randomUUID().slice(0, 18)}`): Client {
    return new Client({ ingestUrl: this.ingestUrl, recoveryUrl: this.recoveryUrl, token: this.token(roles, tenant) });
  }

  /** Stops the corner's services. */
  stop(): void {
    for (const child of this.processes) child.kill("SIGKILL");
  }
}
