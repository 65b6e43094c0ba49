/** Where the vendored tests come from (README.md says more). */
export const SOURCE = "openai/openai-agents-js 6d0c61a5, agents-core 0.17.0";
