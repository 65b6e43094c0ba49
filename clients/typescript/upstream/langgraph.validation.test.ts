// LangGraph.js's checkpointer validation suite against SessionlogSaver on the real services, in
// full: `validate` (every suite its CLI runs: put, putWrites, getTuple, list, deleteThread) and
// the opt-in getDeltaChannelHistory suite, which LangGraph runs for each of its own savers.
// upstream/run runs it with vitest.
import { deltaChannelHistoryTests, validate } from "@langchain/langgraph-checkpoint-validation";

import initializer from "./langgraph.initializer.js";

validate(initializer);
describe("opt-in suites", () => {
  deltaChannelHistoryTests(initializer);
});
