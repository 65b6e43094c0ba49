// vitest for the frameworks' suites (upstream/run): LangGraph's validation suite is written for
// vitest's globals (describe, it, expect without imports). Tests run one file at a time; every
// test has a deadline, so a hang fails the run instead of stalling it.
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    globals: true,
    include: ["upstream/*.test.ts"],
    fileParallelism: false,
    testTimeout: 60_000,
    hookTimeout: 180_000,
    reporters: ["default"],
  },
});
