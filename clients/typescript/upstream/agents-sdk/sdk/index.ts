/** Stands in for the SDK's `src` (its index) in the vendored tests: the npm package, with sdk/memorySession.ts's MemorySession. */
export * from "@openai/agents-core";
export { MemorySession } from "./memorySession.js";
