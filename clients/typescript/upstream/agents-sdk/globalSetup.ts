/** One corner of the stack for the whole run (sdk/tenant.ts gives each test a tenant of it). */
import type { TestProject } from "vitest/node";

import { startCorner } from "../corner.js";

export default async function setup(project: TestProject): Promise<(() => void) | undefined> {
  if ((process.env["AGENTS_SDK_SESSION"] ?? "sessionlog") !== "sessionlog") return undefined; // a control run: no stack
  const corner = await startCorner();
  project.provide("corner", corner.corner);
  return () => corner.stop();
}
