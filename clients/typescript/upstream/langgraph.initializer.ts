/**
 * The `CheckpointerTestInitializer` that `@langchain/langgraph-checkpoint-validation` runs against
 * `SessionlogSaver` (upstream/run): one private corner of the stack for the run, and each
 * checkpointer in a tenant of its own, so no instance reads another's threads (the suite requires it).
 */

import type { CheckpointerTestInitializer } from "@langchain/langgraph-checkpoint-validation";

import { SessionlogSaver } from "../src/integrations/langgraph.js";
import { startCorner, type UpstreamCorner } from "./corner.js";

let corner: UpstreamCorner | undefined;

const initializer: CheckpointerTestInitializer<SessionlogSaver> = {
  checkpointerName: "sessionlog",
  // Starting the corner's services (topic, keyspace, three processes) takes a while on 2 cores.
  beforeAllTimeout: 180_000,
  async beforeAll() {
    corner = await startCorner();
  },
  afterAll() {
    corner?.stop();
  },
  createCheckpointer() {
    if (corner === undefined) throw new Error("no stack corner: beforeAll did not run");
    return new SessionlogSaver(corner.client(["harness", "reader"]));
  },
};

export default initializer;
