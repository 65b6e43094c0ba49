/**
 * Runs around each vendored test: before it, a new tenant for its sessions and the deselection
 * list applied; after it, a mark in its meta when it made a session (the summary counts them).
 */
import { afterEach, beforeEach } from "vitest";

import { deselectionOf, deselections } from "./deselection.js";
import { nextTest, testMadeSession } from "./sdk/tenant.js";

const entries = deselections();
const control = (process.env["AGENTS_SDK_SESSION"] ?? "sessionlog") !== "sessionlog"; // no deselection

beforeEach((context) => {
  nextTest();
  const entry = control ? undefined : deselectionOf(entries, context.task.file.filepath, context.task.fullTestName ?? context.task.name);
  if (entry !== undefined) context.skip(`deselected: ${entry.reason}`);
});

afterEach((context) => {
  if (testMadeSession()) context.task.meta.sessionlog = true;
});

declare module "vitest" {
  interface TaskMeta {
    /** The test made a MemorySession, which is a SessionlogSession. */
    sessionlog?: boolean;
  }
}
