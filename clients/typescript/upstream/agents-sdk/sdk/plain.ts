/**
 * The control run's stand-in (AGENTS_SDK_SESSION=plain): the npm package, with the SDK's own
 * MemorySession less the two optional capabilities SessionlogSession lacks (history rewrites and
 * history transactions). A test that fails with it fails for want of those capabilities, not for
 * anything SessionlogSession does.
 */
import { MemorySession as SdkMemorySession } from "@openai/agents-core";

export * from "@openai/agents-core";

export class MemorySession extends SdkMemorySession {}
for (const capability of ["applyHistoryMutations", "applyHistoryTransaction"]) {
  Object.defineProperty(MemorySession.prototype, capability, { value: undefined });
}
