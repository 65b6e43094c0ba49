/**
 * The tenant the vendored tests' sessions live in: one per test (setup.ts starts each test's), so
 * the session ids a test chooses ("session-1") name fresh sessions, as fresh MemorySessions do.
 */
import { inject } from "vitest";

import type { Client } from "../../../src/client.js";
import type { Corner } from "../../../test/support/stackcorner.js";
import { tenantClient } from "../../corner.js";

declare module "vitest" {
  export interface ProvidedContext {
    /** The corner of the stack globalSetup.ts started for the run. */
    corner: Corner;
  }
}

let test = 0;
let minted: { test: number; client: Client } | undefined;

/** A new test begins: the next session is in a new tenant. */
export function nextTest(): void {
  test += 1;
}

/** Whether the current test made a session (sdk/memorySession.ts). */
export function testMadeSession(): boolean {
  return minted?.test === test;
}

/** The current test's client (minted when its first session is made). */
export function testClient(): Client {
  if (minted?.test !== test) minted = { test, client: tenantClient(inject("corner"), ["harness", "reader"]) };
  return minted.client;
}
