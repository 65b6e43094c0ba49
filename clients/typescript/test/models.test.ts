/**
 * What the client reads from the services' answers, without the stack: the resume bundle's MCP
 * access (`[recovery.mcp]`), present with a token, with the endpoint only, or absent.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { resumeBundle } from "../src/models.js";

const bundle = (extra: object) => ({
  state: { session_id: "01900000-0000-7000-8000-0000000000a1", last_seq: 3 },
  epoch: 2,
  next_seq: 4,
  ...extra,
});

test("a bundle's MCP access carries the endpoint, the token and its expiry", () => {
  const read = resumeBundle(bundle({ mcp: { url: "http://127.0.0.1:8097/mcp", token: "t0k", expires_at: "2026-12-05T06:00:00Z" } }));
  assert.equal(read.mcp?.url, "http://127.0.0.1:8097/mcp");
  assert.equal(read.mcp?.token, "t0k");
  assert.equal(read.mcp?.expiresAt?.toISOString(), "2026-12-05T06:00:00.000Z");
});

test("a bundle names the endpoint alone when recovery holds no token key, and no MCP server when unconfigured", () => {
  const endpointOnly = resumeBundle(bundle({ mcp: { url: "http://127.0.0.1:8097/mcp" } }));
  assert.equal(endpointOnly.mcp?.url, "http://127.0.0.1:8097/mcp");
  assert.equal(endpointOnly.mcp?.token, undefined);
  assert.equal(endpointOnly.mcp?.expiresAt, undefined);
  assert.equal(resumeBundle(bundle({})).mcp, undefined);
  assert.throws(() => resumeBundle(bundle({ mcp: { token: "no url" } })));
});
