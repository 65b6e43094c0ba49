/**
 * The frameworks' suites' corner of the stack: the TypeScript tests' `createCorner` (its own topic,
 * keyspace and services), and for each checkpointer or test a client of a tenant of its own.
 */
import type { ChildProcess } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { Client } from "../src/client.js";
import { createCorner, run, type Corner } from "../test/support/stackcorner.js";

/** A started corner and a way to stop it. */
export interface UpstreamCorner {
  corner: Corner;
  /** A client of a fresh tenant with `roles`. */
  client(roles: string[]): Client;
  stop(): void;
}

/** A client of a fresh tenant of `corner` with `roles`. */
export function tenantClient(corner: Corner, roles: string[]): Client {
  const tenant = `upstream-${randomUUID().slice(0, 18)}`;
  const args = ["token", "mint", "--subject", "upstream-suite", "--ttl-secs", "3600", "--tenant", tenant];
  for (const role of roles) args.push("--role", role);
  const token = run(corner, ...args).trim();
  return new Client({ ingestUrl: corner.ingestUrl, recoveryUrl: corner.recoveryUrl, token });
}

/** Starts a corner (no counting service: the suites call no tools). */
export async function startCorner(): Promise<UpstreamCorner> {
  const { corner, processes } = await createCorner(mkdtempSync(join(tmpdir(), "sessionlog-upstream-")), "", []);
  return {
    corner,
    client: (roles) => tenantClient(corner, roles),
    stop() {
      processes.forEach((p: ChildProcess) => p.kill("SIGKILL"));
    },
  };
}
