/**
 * The transport the tests' clients send with: $SESSIONLOG_TS_TRANSPORT, which test/run.ts sets
 * (it runs the suite once with each transport), else the client's default (`socket` on Node).
 */
import type { TransportKind } from "../../src/transport.js";

export const TRANSPORTS: readonly TransportKind[] = ["socket", "node", "fetch"];

/** The transport named in $SESSIONLOG_TS_TRANSPORT (undefined: the client's default). */
export function transport(): TransportKind | undefined {
  const given = process.env["SESSIONLOG_TS_TRANSPORT"];
  if (!given) return undefined;
  if (!(TRANSPORTS as readonly string[]).includes(given)) throw new Error(`$SESSIONLOG_TS_TRANSPORT is one of ${TRANSPORTS.join(", ")}, not ${given}`);
  return given as TransportKind;
}
