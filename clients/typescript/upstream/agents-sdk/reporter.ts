/**
 * The run's summary line: how many of the vendored tests passed, were deselected (deselected.tsv)
 * or failed. An entry of the list that names no test of the files run, or names a test that then
 * ran, fails the run. A control run (AGENTS_SDK_SESSION=sdk or plain, README.md) deselects nothing
 * and counts instead how many of the tests that failed the list names.
 */
import { relative } from "node:path";

import type { Reporter, TestModule } from "vitest/node";

import { TESTS, deselectionOf, deselections, type Deselection } from "./deselection.js";
import { SOURCE } from "./source.js";

const LABELS: Record<string, string> = {
  sessionlog: "SessionlogSession",
  sdk: "the SDK's own MemorySession (control run, no deselection)",
  plain: "the SDK's MemorySession less history rewrites and transactions (control run, no deselection)",
};

export default class Summary implements Reporter {
  onTestRunEnd(modules: ReadonlyArray<TestModule>): void {
    const entries = deselections();
    const used = new Set<Deselection>();
    const session = process.env["AGENTS_SDK_SESSION"] ?? "sessionlog";
    const control = session !== "sessionlog";
    const count = { passed: 0, withSession: 0, deselected: 0, skipped: 0, failed: 0, listed: 0 };
    const problems: string[] = [];
    const files = new Set<string>();
    for (const module of modules) {
      files.add(relative(TESTS, module.moduleId));
      if (module.state() === "failed" && module.errors().length > 0) {
        count.failed += 1;
        problems.push(`${module.relativeModuleId} did not load: ${module.errors()[0]?.message ?? ""}`);
      }
      for (const test of module.children.allTests()) {
        const entry = deselectionOf(entries, module.moduleId, test.fullName);
        const state = test.result().state;
        if (entry !== undefined && !control) {
          used.add(entry);
          if (state !== "skipped") problems.push(`deselected.tsv:${entry.line} names "${test.fullName}", which ran (${state})`);
        }
        if (state === "passed") {
          count.passed += 1;
          if (test.meta().sessionlog === true) count.withSession += 1;
        } else if (state === "failed") {
          count.failed += 1;
          if (entry !== undefined) count.listed += 1;
        } else if (state === "skipped" && entry !== undefined) {
          count.deselected += 1;
        } else if (state === "skipped") {
          count.skipped += 1;
        }
      }
    }
    const objects = !control && process.env["AGENTS_SDK_OBJECTS"] === "fresh" ? ", a new object for every call" : "";
    if (!control) for (const e of entries) if (files.has(e.file) && !used.has(e)) problems.push(`deselected.tsv:${e.line} names no test: ${e.file} ${e.test}`);
    for (const p of problems) console.error(`[agents-sdk] ${p}`);
    const skipped = count.skipped > 0 ? `, ${count.skipped} skipped upstream` : "";
    console.error(
      `[agents-sdk] the SDK's session tests (${SOURCE}) against ${LABELS[session] ?? session}${objects}: ` +
        `${count.passed} passed${!control ? ` (${count.withSession} of them with a SessionlogSession)` : ""}, ${count.deselected} deselected, ${count.failed} failed${control ? ` (${count.listed} of them in deselected.tsv)` : ""}${skipped}`,
    );
    if (problems.length > 0 && count.failed === 0) process.exitCode = 1;
  }
}
