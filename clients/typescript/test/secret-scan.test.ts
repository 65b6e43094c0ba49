/** The service's secret scan through the TypeScript client (issue 54, item 4): an AWS-shaped key and a PEM private key appended are never readable afterwards, the append's answer names each redaction, and the rest of the session still reads and resumes. */
import assert from "node:assert/strict";
import { test } from "node:test";
import { Client, awaitProjected, type HistoryEvent } from "../src/index.js";
import { corner, token } from "./support/stackcorner.js";
import { transport } from "./support/transport.js";

const c = corner();
const client = new Client({ transport: transport(), ingestUrl: c.ingestUrl, recoveryUrl: c.recoveryUrl, token: token(c, ["harness", "reader"]) });

/** An AWS access key id of the real shape (never the documentation's `...EXAMPLE`). */
const AWS_KEY = "AKIAT3MQTLW7RD4XBN2V";
/** The body of a private key: in no answer, history or context afterwards. */
const PEM_BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKjTs";
const PEM = `-----BEGIN PRIVATE KEY-----\n${PEM_BODY}\nMzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu\n-----END PRIVATE KEY-----\n`;

test("a secret appended is redacted, the answer says so, and the rest reads and resumes", async () => {
  const opened = await client.create("ts-secrets", { title: "secret scan" });
  const seq = opened.nextSeq;
  const appended = await client.append(opened.sessionId, opened.epoch, [
    { seq, kind: "ToolCallRequested", data: { tool: "shell", arguments: { Plain: "CANARY-ts-arguments" }, effect: "Pure" } },
    { seq: seq + 1, kind: "ToolCallResult", data: { call_seq: seq, outcome: "Succeeded", output: { Plain: `aws_access_key_id=${AWS_KEY}` }, source: "Executed", recorded_by: null, note: "CANARY-ts-note" } },
    { seq: seq + 2, kind: "UserRequest", data: { content: { Plain: PEM } } },
    { seq: seq + 3, kind: "PlanUpdated", data: { plan: { Plain: "CANARY-ts-plan" } } },
  ], { writerToken: opened.writerToken });
  const acks = appended.events;
  assert.deepEqual(acks[1]!.secrets, [{ field: "output", rule: "aws-access-token", action: "redacted", reason: "secret detected: aws-access-token" }]);
  assert.deepEqual(acks[2]!.secrets.map((s) => [s.field, s.rule, s.action]), [["content", "private-key", "redacted"]]);
  assert.deepEqual([acks[0]!.secrets, acks[3]!.secrets], [[], []]);
  assert.equal(appended.nextSeq, seq + 4);

  await awaitProjected(client, opened.sessionId, seq + 3);
  const events: HistoryEvent[] = [];
  for await (const e of client.events(opened.sessionId)) events.push(e);
  const printed = JSON.stringify(events.map((e) => ({ data: e.data, unopened: e.unopened })));
  assert.ok(!printed.includes(AWS_KEY) && !printed.includes(PEM_BODY), "a secret reads back");
  assert.ok(printed.includes("redacted: secret detected: aws-access-token"), printed);
  assert.ok(printed.includes("redacted: secret detected: private-key"), printed);
  for (const canary of ["CANARY-ts-arguments", "CANARY-ts-note", "CANARY-ts-plan"]) assert.ok(printed.includes(canary), canary);

  const bundle = await client.resume(opened.sessionId, "ts-secrets-2");
  const resumed = JSON.stringify(bundle.context);
  assert.ok(!resumed.includes(AWS_KEY) && !resumed.includes(PEM_BODY), "the resumed context holds a secret");
  assert.ok(bundle.nextSeq > seq + 3, "the session resumes after what it holds");
});
