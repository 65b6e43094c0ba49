/**
 * vitest for the SDK's own session tests (upstream/run agents-sdk; README.md). The vendored files
 * import the SDK as its repository lays it out (`../src`, `../src/runner/sessionPersistence`); the
 * `sdk-source` plugin below answers those imports with the pinned npm package (0.20.0): `../src`
 * and `../src/memory/memorySession` with sdk/'s stand-ins, whose MemorySession is a
 * SessionlogSession, and any other `../src/PATH` with the package's own built module
 * dist/PATH.mjs (the same module objects the package's index uses). The control runs
 * (AGENTS_SDK_SESSION=sdk or plain, README.md) give them the SDK's own MemorySession instead, with
 * no deselection and no stack.
 */
import { existsSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { defineConfig, type Plugin } from "vitest/config";

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, "../..");
const dist = join(root, "node_modules/@openai/agents-core/dist");
// Which MemorySession the tests get: sessionlog (SessionlogSession, the default), sdk (the SDK's
// own) or plain (the SDK's own less the optional capabilities SessionlogSession lacks).
const session = process.env["AGENTS_SDK_SESSION"] ?? "sessionlog";
const STAND_INS: Record<string, Record<string, string>> = {
  sessionlog: { index: "sdk/index.ts", "memory/memorySession": "sdk/memorySession.ts" },
  plain: { index: "sdk/plain.ts", "memory/memorySession": "sdk/plain.ts" },
  sdk: {},
};
const standIns: Record<string, string> = STAND_INS[session] ?? {};
if (STAND_INS[session] === undefined) throw new Error(`AGENTS_SDK_SESSION=${session}: not sessionlog, sdk or plain`);

function sdkSource(): Plugin {
  const src = join(here, "src");
  return {
    name: "sdk-source",
    enforce: "pre",
    resolveId(source, importer) {
      if (importer === undefined || !source.startsWith(".")) return null;
      const target = resolve(dirname(importer), source);
      if (target !== src && !target.startsWith(`${src}/`)) return null;
      const path = relative(src, target) || "index";
      const stand = standIns[path];
      if (stand !== undefined) return join(here, stand);
      for (const file of [`${path}.mjs`, `${path}/index.mjs`]) if (existsSync(join(dist, file))) return join(dist, file);
      this.error(`${source} (from ${relative(here, importer)}): @openai/agents-core has no dist/${path}.mjs`);
    },
  };
}

export default defineConfig({
  root,
  plugins: [sdkSource()],
  test: {
    include: ["upstream/agents-sdk/test/**/*.test.ts"],
    globalSetup: ["upstream/agents-sdk/globalSetup.ts"],
    setupFiles: ["upstream/agents-sdk/setup.ts"],
    fileParallelism: false,
    testTimeout: 60_000,
    hookTimeout: 180_000,
    reporters: ["default", join(here, "reporter.ts")],
  },
});
