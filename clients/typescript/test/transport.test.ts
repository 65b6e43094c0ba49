/**
 * The client's transports against local servers that misbehave on purpose: which one a client
 * picks, that the Node transports (`socket` and `node`) keep their connections and cap them, how
 * they classify a failed attempt (certainly unsent: nothing connected; maybe sent: a connection
 * was made), and the `socket` transport's own HTTP/1.1: its parser fed at every byte boundary,
 * chunked answers, keep-alive, `Connection: close`, limits, TLS.
 */
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { createServer as createHttpsServer } from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { once } from "node:events";
import { createServer as createHttpServer, type IncomingMessage, type ServerResponse } from "node:http";
import { connect, createServer, type Server, type Socket } from "node:net";
import { after, test as nodeTest, type TestContext } from "node:test";
import { Client, InvalidArgument, TransportError, newSessionId } from "../src/index.js";
import { ResponseParser, SocketTransport } from "../src/http1.js";
import { AttemptFailed, NodeTransport, origin, type Request, type Transport } from "../src/transport.js";
import { freePort } from "./support/stackcorner.js";
import { TRANSPORTS } from "./support/transport.js";

/** Each test fails after 30 s rather than hanging the run. */
const test = (name: string, fn: (t: TestContext) => void | Promise<void>) => nodeTest(name, { timeout: 30_000 }, fn);

const servers: Server[] = [];
after(() => servers.forEach((s) => s.close()));

async function listen<S extends Server>(server: S): Promise<{ server: S; url: string }> {
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("no port");
  return { server, url: `http://127.0.0.1:${address.port}` };
}

/**
 * A TCP server speaking just enough HTTP/1.1: `onRequest` gets each complete request (headers and
 * body read), the connection's socket, and the request's number on its connection (1, 2, ...);
 * `sockets` lists the connections in the order they came, `heads` each request's head.
 */
async function rawServer(onRequest: (socket: Socket, nth: number) => void): Promise<{
  url: string; requests: () => number; connections: () => number; sockets: Socket[]; heads: string[];
}> {
  let requests = 0;
  let connections = 0;
  const sockets: Socket[] = [];
  const heads: string[] = [];
  const { url } = await listen(
    createServer((socket) => {
      connections++;
      sockets.push(socket);
      let buffered = Buffer.alloc(0);
      let nth = 0;
      socket.on("error", () => undefined);
      socket.on("data", (chunk: Buffer) => {
        buffered = Buffer.concat([buffered, chunk]);
        for (;;) {
          const end = buffered.indexOf("\r\n\r\n");
          if (end < 0) return;
          const length = Number(/\r\ncontent-length: *(\d+)/i.exec(buffered.subarray(0, end).toString())?.[1] ?? 0);
          if (buffered.length < end + 4 + length) return;
          heads.push(buffered.subarray(0, end).toString("latin1"));
          buffered = buffered.subarray(end + 4 + length);
          requests++;
          onRequest(socket, ++nth);
        }
      });
    }),
  );
  return { url, requests: () => requests, connections: () => connections, sockets, heads };
}

const OK = (body: string) => `HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;

function requestTo(url: string, timeoutMs = 5000, mayRepeat?: boolean): Request {
  return { origin: origin(url), method: "POST", path: "/v1/sessions", headers: { "content-type": "application/json" }, body: "{}", timeoutMs, mayRepeat };
}

/** The Node transports, each made with at most `maxSockets` connections a service. */
const NODE_TRANSPORTS: [string, (maxSockets?: number) => Transport][] = [
  ["socket", (maxSockets) => new SocketTransport({ maxSockets })],
  ["node", (maxSockets) => new NodeTransport(maxSockets)],
];

/** The `AttemptFailed` sending `r` on `transport` fails with (fails the test if it succeeds or throws anything else). */
async function failure(transport: Transport, r: Request): Promise<AttemptFailed> {
  const error = await transport.send(r).then(() => undefined, (e: unknown) => e);
  assert.ok(error instanceof AttemptFailed, `an AttemptFailed, not ${String(error)}`);
  return error;
}

const code = (e: AttemptFailed) => (e.cause as { code?: string } | undefined)?.code;

test("a client sends over its own sockets on Node, with node:http or fetch when asked, and refuses other transports", async () => {
  assert.equal(new Client().transport, "socket");
  assert.equal(new Client({ transport: "fetch" }).transport, "fetch");
  assert.equal(new Client({ transport: "node" }).transport, "node");
  assert.equal(new Client({ transport: "socket" }).transport, "socket");
  assert.throws(() => new Client({ transport: "carrier-pigeon" as "node" }), InvalidArgument);
  assert.throws(() => new Client({ maxSockets: 0 }), /maxSockets/);
  assert.throws(() => new Client({ transport: "node", maxSockets: 0 }), /maxSockets/);
  // Not an http(s) URL: refused before any attempt, not retried as an outage.
  await assert.rejects(new Client({ ingestUrl: "ftp://example.com", retryFor: 60 }).find("x"), InvalidArgument);
  // Headers no transport would send: refused at once, not retried for a minute as an outage.
  const nowhere = "http://127.0.0.1:9";
  for (const transport of TRANSPORTS) await assert.rejects(new Client({ transport, ingestUrl: nowhere, token: "a\r\nb", retryFor: 60 }).find("x"), InvalidArgument);
  await assert.rejects(new Client({ ingestUrl: nowhere, retryFor: 60 }).append(newSessionId(), 1, [], { writerToken: "a\nb" }), InvalidArgument);
});

test("every transport sends the bearer token and JSON, and read answers and problems alike", async () => {
  const seen: { method?: string; url?: string; host?: string; authorization?: string; accept?: string; body: string }[] = [];
  const sid = newSessionId();
  const { url } = await listen(
    createHttpServer(async (req: IncomingMessage, res: ServerResponse) => {
      let body = "";
      for await (const chunk of req) body += String(chunk);
      seen.push({ method: req.method, url: req.url, host: req.headers.host, authorization: req.headers.authorization, accept: req.headers.accept, body });
      if (req.url?.includes("absent")) {
        res.writeHead(404, { "content-type": "application/problem+json" });
        res.end(JSON.stringify({ code: "unknown_name", status: 404, detail: "no such name" }));
      } else {
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify({ session_id: sid.toUpperCase() }));
      }
    }),
  );
  for (const transport of TRANSPORTS) {
    seen.length = 0;
    const client = new Client({ transport, ingestUrl: url, token: () => "t-1" });
    assert.equal(await client.find("café / ü"), sid, transport);
    assert.equal(await client.find("absent"), undefined, transport);
    const host = new URL(url).host;
    assert.deepEqual(seen.map((s) => [s.method, s.url, s.host, s.authorization, s.accept]), [
      ["GET", "/v1/sessions?name=caf%C3%A9+%2F+%C3%BC", host, "Bearer t-1", "application/json"],
      ["GET", "/v1/sessions?name=absent", host, "Bearer t-1", "application/json"],
    ], transport);
    client.disconnect();
  }
});

for (const transport of ["socket", "node"] as const) {
test(`the ${transport} transport keeps its connections alive and opens at most maxSockets to a service`, async () => {
  const server = await rawServer((socket) => socket.write(OK(JSON.stringify({ session_id: newSessionId() }))));
  const client = new Client({ transport, ingestUrl: server.url, token: "t" });
  for (let i = 0; i < 5; i++) await client.find(`n${i}`);
  assert.equal(server.connections(), 1, "five requests in turn, one connection");
  await Promise.all(Array.from({ length: 8 }, (_, i) => client.find(`c${i}`)));
  assert.equal(server.connections(), 8, "eight at once open eight (the one kept, seven new)");
  client.disconnect();

  const capped = await rawServer((socket) => socket.write(OK(JSON.stringify({ session_id: newSessionId() }))));
  const two = new Client({ transport, ingestUrl: capped.url, token: "t", maxSockets: 2 });
  await Promise.all(Array.from({ length: 8 }, (_, i) => two.find(`c${i}`)));
  assert.deepEqual([capped.requests(), capped.connections()], [8, 2], "eight at once over two connections");
  two.disconnect();
});
}

for (const [name, make] of NODE_TRANSPORTS) {
test(`${name} transport: no connection made is certainly unsent (refused, unresolved, not connecting in time)`, async () => {
  const transport = make();
  const refused = await failure(transport, requestTo(`http://127.0.0.1:${await freePort()}`));
  assert.deepEqual([refused.unsent, code(refused)], [true, "ECONNREFUSED"]);

  const unresolved = await failure(transport, requestTo("http://sessionlog-no-such-host.invalid:8090"));
  assert.equal(unresolved.unsent, true, `unresolved (${code(unresolved)}) is unsent`);
  assert.ok(["ENOTFOUND", "EAI_AGAIN", "ECONNTIMEOUT"].includes(code(unresolved) ?? ""), String(code(unresolved)));

  const connecting = await failure(transport, requestTo(await unconnectable(), 300));
  assert.deepEqual([connecting.unsent, code(connecting)], [true, "ECONNTIMEOUT"], "a connect that timed out is unsent");
  transport.close();
});
}

/**
 * A port whose connects hang: a process listening with a backlog of 1 that never accepts (its
 * event loop blocked), its accept queue filled first; the kernel drops further SYNs.
 */
async function unconnectable(): Promise<string> {
  const child = spawn(process.execPath, ["-e", `
    const server = require("node:net").createServer();
    server.listen({ port: 0, host: "127.0.0.1", backlog: 1 }, () => {
      process.stdout.write(server.address().port + "\\n", () => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0));
    });
  `], { stdio: ["ignore", "pipe", "inherit"] });
  after(() => child.kill("SIGKILL"));
  const [line] = (await once(child.stdout!, "data")) as [Buffer];
  const port = Number(String(line).trim());
  const fillers = Array.from({ length: 8 }, () => connect(port, "127.0.0.1").on("error", () => undefined));
  after(() => fillers.forEach((f) => f.destroy()));
  // The queue holds two (the backlog and one); wait for them to be in it.
  let connected = 0;
  await new Promise<void>((r) => fillers.forEach((f) => f.once("connect", () => ++connected === 2 && r())));
  return `http://127.0.0.1:${port}`;
}

for (const [name, make] of NODE_TRANSPORTS) {
test(`${name} transport: once a connection was made, a reset or a cut-off answer may have reached the service`, async () => {
  const transport = make();
  // Reset right after reading the request, on a new connection.
  const resetting = await rawServer((socket) => socket.resetAndDestroy());
  const reset = await failure(transport, requestTo(resetting.url));
  assert.deepEqual([reset.unsent, code(reset), resetting.requests()], [false, "ECONNRESET", 1]);

  // Reset on a kept-alive connection: the first request answered, the second read, then reset.
  const second = await rawServer((socket, nth) => (nth === 1 ? socket.write(OK("{}")) : socket.resetAndDestroy()));
  assert.equal((await transport.send(requestTo(second.url))).status, 200);
  const reused = await failure(transport, requestTo(second.url));
  assert.deepEqual([reused.unsent, second.requests(), second.connections()], [false, 2, 1]);

  // The answer cut off after its first byte.
  const cut = await rawServer((socket) => {
    socket.write("HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{");
    socket.destroy();
  });
  assert.equal((await failure(transport, requestTo(cut.url))).unsent, false);
  transport.close();
});

test(`${name} transport: an attempt timing out is maybe sent when it had a connection, unsent while queued for one`, async () => {
  const transport = make(1);
  let arrived!: () => void;
  const first = new Promise<void>((r) => (arrived = r));
  const silent = await rawServer(() => arrived()); // reads, never answers
  const hung = failure(transport, requestTo(silent.url, 60_000));
  await first; // the only connection is taken: the next request waits for it
  const queued = await failure(transport, requestTo(silent.url, 200));
  assert.deepEqual([queued.unsent, queued.name, (queued.cause as Error).name], [true, "AttemptFailed", "TimeoutError"]);
  assert.equal(silent.requests(), 1, "the queued request never reached the server");
  transport.close(); // destroys the hung request's connection: a failure after it connected
  const ended = await hung;
  assert.equal(ended.unsent, false);

  const timed = make();
  const late = await failure(timed, requestTo(silent.url, 200));
  assert.deepEqual([late.unsent, (late.cause as Error).name], [false, "TimeoutError"]);
  timed.close();
});
}

for (const transport of TRANSPORTS) {
  test(`${transport}: a client's TransportError says whether the request may have reached the service`, async () => {
    const resetting = await rawServer((socket) => socket.resetAndDestroy());
    const reset = await new Client({ transport, ingestUrl: resetting.url, retryFor: 0.3 }).create("ts-tests").catch((e: unknown) => e);
    assert.ok(reset instanceof TransportError, String(reset));
    assert.equal(reset.sent, true, "reset after the request was read: maybe sent");
    assert.ok(resetting.requests() >= 1);
    const nowhere = await new Client({ transport, ingestUrl: `http://127.0.0.1:${await freePort()}`, retryFor: 0.3 }).create("ts-tests").catch((e: unknown) => e);
    assert.ok(nowhere instanceof TransportError, String(nowhere));
    assert.equal(nowhere.sent, false, "refused: never sent");
  });
}

// The socket transport's own HTTP/1.1.

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const BODY = JSON.stringify({ detail: "café ☕ naïve — ünïcödé split across chunks" });

/** A chunked 503 after a 100 Continue: a folded header, chunk extensions, a size in capitals, a trailer, the body's characters split across chunks. */
function chunkedAnswer(): Buffer {
  const body = Buffer.from(BODY, "utf8");
  const sizes = [5, 8, 13, body.length - 26];
  const parts: Buffer[] = [Buffer.from(
    "HTTP/1.1 100 Continue\r\n\r\n" +
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n" +
      "X-Folded: a\r\n  b\r\nretry-after: 7\r\nRetry-After: 9\r\n\r\n",
    "latin1",
  )];
  let at = 0;
  for (const [i, size] of sizes.entries()) {
    parts.push(Buffer.from(`${size.toString(16).toUpperCase()}${i === 1 ? ";name=value;flag" : ""}\r\n`, "latin1"), body.subarray(at, at + size), Buffer.from("\r\n"));
    at += size;
  }
  parts.push(Buffer.from("0\r\nX-Checksum: abc\r\nX-Other: d\r\n\r\n", "latin1"));
  return Buffer.concat(parts);
}

/** `pieces` fed in turn to a new parser, which must complete on the last one and not before. */
function parsed(pieces: Buffer[], options: { head?: boolean; maxHeaderBytes?: number; maxBodyBytes?: number } = {}): ResponseParser {
  const p = new ResponseParser(options.maxHeaderBytes, options.maxBodyBytes);
  p.reset(options.head);
  pieces.forEach((piece, i) => assert.equal(p.feed(piece), i === pieces.length - 1, `complete after piece ${i} of ${pieces.length}`));
  return p;
}

test("socket parser: an answer split at every byte boundary reads the same", () => {
  const chunked = chunkedAnswer();
  const plain = Buffer.from(OK(BODY), "utf8");
  for (const [wire, status, retryAfter] of [[chunked, 503, "7"], [plain, 200, null]] as const) {
    const check = (p: ResponseParser, where: string) => {
      assert.deepEqual([p.status, p.retryAfter, p.text(), p.keepAlive, p.extra], [status, retryAfter, BODY, true, false], where);
    };
    check(parsed([wire]), "whole");
    check(parsed([...wire].map((b) => Buffer.from([b]))), "byte by byte");
    for (let i = 1; i < wire.length; i++) {
      check(parsed([wire.subarray(0, i), wire.subarray(i)]), `split at ${i}`);
      for (let j = i + 1; j < wire.length; j += 7) check(parsed([wire.subarray(0, i), wire.subarray(i, j), wire.subarray(j)]), `split at ${i} and ${j}`);
    }
  }
});

test("socket parser: framing, keep-alive and what it refuses", () => {
  const p = (text: string, options?: Parameters<typeof parsed>[1]) => parsed([Buffer.from(text, "latin1")], options);
  assert.equal(p("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}").keepAlive, false);
  assert.equal(p("HTTP/1.1 200 OK\r\nConnection: Keep-Alive, Close\r\nContent-Length: 2\r\n\r\n{}").keepAlive, false);
  assert.equal(p("HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}").keepAlive, false, "HTTP/1.0 closes unless asked");
  assert.equal(p("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\n{}").keepAlive, true);
  assert.equal(p("HTTP/1.1 200 OK\r\nKeep-Alive: timeout=5, max=100\r\nContent-Length: 2\r\n\r\n{}").keepAliveMs, 5000);
  assert.equal(p("HTTP/1.1 204 No Content\r\nContent-Length: 10\r\n\r\n").text(), "", "a 204 has no body");
  assert.equal(p("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", { head: true }).text(), "", "nor has the answer to HEAD");
  assert.equal(p("HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n").status, 200, "a status line without a reason");
  assert.equal(p("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}X").extra, true, "bytes after the answer");
  // No length: the body runs to the end of the connection, which is then not kept.
  const toEof = new ResponseParser();
  toEof.reset();
  assert.equal(toEof.feed(Buffer.from("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nto the ")), false);
  assert.equal(toEof.feed(Buffer.from("end")), false);
  assert.deepEqual([toEof.eof(), toEof.text(), toEof.keepAlive], [true, "to the end", false]);
  const cut = new ResponseParser();
  cut.reset();
  cut.feed(Buffer.from("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{"));
  assert.equal(cut.eof(), false, "a body cut short is not an answer");

  const refused = (text: string, code: string, message: RegExp, options?: Parameters<typeof parsed>[1]) =>
    assert.throws(() => p(text, options), (e: unknown) => (e as { code?: string }).code === code && message.test((e as Error).message), text);
  refused(`HTTP/1.1 200 OK\r\nX-Big: ${"x".repeat(20_000)}\r\n\r\n`, "HPE_HEADER_OVERFLOW", /exceed 16384 bytes/);
  refused(`HTTP/1.1 200 OK\r\nX-Big: ${"x".repeat(20_000)}`, "HPE_HEADER_OVERFLOW", /exceed 16384 bytes/); // before the headers end
  refused("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-T: 1234567890\r\n\r\n", "HPE_HEADER_OVERFLOW", /exceed 60 bytes/, { maxHeaderBytes: 60 });
  refused("HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n", "HPE_BODY_OVERFLOW", /exceeds 10 bytes/, { maxBodyBytes: 10 });
  refused("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\n", "HPE_BODY_OVERFLOW", /exceeds 5 bytes/, { maxBodyBytes: 5 });
  refused("HTTP/2 200\r\n\r\n", "HPE_INVALID_RESPONSE", /status line/);
  refused("HTTP/1.1 101 Switching Protocols\r\n\r\n", "HPE_INVALID_RESPONSE", /101/);
  refused("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", "HPE_INVALID_RESPONSE", /two Content-Lengths/);
  refused("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "HPE_INVALID_RESPONSE", /Content-Length/);
  refused("HTTP/1.1 200 OK\r\nNo colon\r\n\r\n", "HPE_INVALID_RESPONSE", /header line/);
  refused("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "HPE_INVALID_RESPONSE", /chunk size/);
  refused("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX\r\n", "HPE_INVALID_RESPONSE", /CRLF/);
});

/** Sends one request on `transport` to `url`; its answer. */
const sendTo = (transport: Transport, url: string, mayRepeat?: boolean) => transport.send(requestTo(url, 5000, mayRepeat));

test("socket transport: a chunked answer written in pieces cut at awkward bytes, with its Retry-After", async () => {
  const wire = chunkedAnswer();
  // Inside the status line, between the head's CR and LF, inside a chunk-size line and its
  // extension, between a chunk's data and its CRLF and between that CR and LF, inside a
  // character, inside the last chunk's line, in a trailer, between the last CR and LF.
  const head = wire.indexOf("\r\n\r\n", wire.indexOf("503"));
  const firstData = wire.indexOf("\r\n", head + 4) + 2;
  const cuts = [
    10, head + 1, head + 5, wire.indexOf(";name") + 3, firstData + 5, firstData + 6, wire.indexOf("é", 0, "utf8") + 1,
    wire.indexOf("\r\n0\r\n") + 3, wire.indexOf("X-Checksum") + 4, wire.length - 1,
  ].sort((a, b) => a - b);
  const pieces = cuts.map((cut, i) => wire.subarray(i === 0 ? 0 : cuts[i - 1], cut)).concat(wire.subarray(cuts[cuts.length - 1]));
  assert.equal(Buffer.concat(pieces).compare(wire), 0);
  const server = await rawServer(async (socket) => {
    socket.setNoDelay(true);
    for (const piece of pieces) {
      socket.write(piece);
      await sleep(15); // a TCP segment each
    }
  });
  const transport = new SocketTransport();
  assert.deepEqual(await sendTo(transport, server.url), { status: 503, text: BODY, retryAfter: "7" });
  assert.deepEqual(await sendTo(transport, server.url), { status: 503, text: BODY, retryAfter: "7" }, "and again on the same connection");
  assert.equal(server.connections(), 1);
  transport.close();
});

test("socket transport: writes the request line, Host, the caller's headers, the length in bytes, keep-alive", async () => {
  const server = await rawServer((socket) => socket.write(OK("{}")));
  const transport = new SocketTransport();
  const r = { ...requestTo(server.url + "/prefix/"), headers: { authorization: "Bearer t", "Sessionlog-Writer-Token": "w", "content-type": "application/json", host: "ignored" }, body: '{"t":"é☕"}' };
  assert.equal((await transport.send(r)).status, 200);
  await transport.send({ ...r, method: "GET", body: undefined });
  const host = new URL(server.url).host;
  assert.deepEqual(server.heads, [
    `POST /prefix/v1/sessions HTTP/1.1\r\nHost: ${host}\r\nauthorization: Bearer t\r\nSessionlog-Writer-Token: w\r\ncontent-type: application/json\r\nContent-Length: 13\r\nConnection: keep-alive`,
    `GET /prefix/v1/sessions HTTP/1.1\r\nHost: ${host}\r\nauthorization: Bearer t\r\nSessionlog-Writer-Token: w\r\ncontent-type: application/json\r\nConnection: keep-alive`,
  ]);
  await assert.rejects(transport.send({ ...r, headers: { "x-bad": "a\r\nb" } }), InvalidArgument);
  await assert.rejects(transport.send({ ...r, headers: { "bad name": "a" } }), InvalidArgument);
  assert.equal(server.requests(), 2, "refused requests are not sent");
  transport.close();
});

test("socket transport: keeps a connection alive, reuses the idle one last used, and closes idle ones in time", async () => {
  const served: [number, number][] = [];
  const server = await rawServer((socket, nth) => {
    served.push([server.sockets.indexOf(socket), nth]);
    socket.write(OK("{}"));
  });
  const transport = new SocketTransport({ idleTimeoutMs: 300 });
  await sendTo(transport, server.url);
  await sendTo(transport, server.url);
  assert.deepEqual(served, [[0, 1], [0, 2]], "the same socket served both requests");
  // Two at once: the kept one and a new one; then one alone takes the one last freed.
  await Promise.all([sendTo(transport, server.url), sendTo(transport, server.url)]);
  const lastFreed = served[served.length - 1]![0];
  await sendTo(transport, server.url);
  assert.equal(served[served.length - 1]![0], lastFreed, "last in, first out");
  assert.equal(server.connections(), 2);
  // Idle past idleTimeoutMs: closed by the transport, and the next request opens another.
  await Promise.all(server.sockets.map((s) => (s.closed ? undefined : once(s, "close"))));
  await sendTo(transport, server.url);
  assert.equal(server.connections(), 3);
  transport.close();
});

test("socket transport: a connection the server closed while idle is not reused", async () => {
  const server = await rawServer((socket) => {
    socket.write(OK("{}"));
    setTimeout(() => socket.end(), 20); // an idle timeout of the server's
  });
  const transport = new SocketTransport();
  await sendTo(transport, server.url);
  await once(server.sockets[0]!, "close");
  await sleep(20);
  assert.equal((await sendTo(transport, server.url, false)).status, 200, "a new connection, never the closed one");
  assert.equal(server.connections(), 2);

  // A server's Keep-Alive: timeout of 1 s leaves no time to reuse it at all.
  const hinting = await rawServer((socket) => socket.write("HTTP/1.1 200 OK\r\nKeep-Alive: timeout=1\r\nContent-Length: 2\r\n\r\n{}"));
  await sendTo(transport, hinting.url);
  await sendTo(transport, hinting.url);
  assert.equal(hinting.connections(), 2);
  transport.close();
});

test("socket transport: a kept-alive connection closed as the request went out is resent once, on a new one, when the caller may repeat it", async () => {
  const transport = new SocketTransport();
  // The first connection answers its first request and closes on the second (a reset, then the
  // end of the stream): the second is sent again on a new connection, which answers.
  for (const close of [(s: Socket) => s.resetAndDestroy(), (s: Socket) => s.end()]) {
    const server = await rawServer((socket, nth) => (nth === 1 ? socket.write(OK("{}")) : close(socket)));
    await sendTo(transport, server.url, true);
    assert.equal((await sendTo(transport, server.url, true)).status, 200);
    assert.deepEqual([server.requests(), server.connections()], [3, 2]);
  }
  // Not when the caller may not repeat it: it may have reached the service.
  const once_ = await rawServer((socket, nth) => (nth === 1 ? socket.write(OK("{}")) : socket.end()));
  await sendTo(transport, once_.url, false);
  const refusedRepeat = await failure(transport, requestTo(once_.url, 5000, false));
  assert.deepEqual([refusedRepeat.unsent, once_.requests(), once_.connections()], [false, 2, 1]);
  // Only once: the new connection closing too fails the attempt, as maybe sent.
  const closing = await rawServer((socket, nth) => (socket === closing.sockets[0] && nth === 1 ? socket.write(OK("{}")) : socket.end()));
  await sendTo(transport, closing.url, true);
  const twice = await failure(transport, requestTo(closing.url, 5000, true));
  assert.deepEqual([twice.unsent, code(twice), closing.requests(), closing.connections()], [false, "ECONNRESET", 3, 2]);
  // Nor once an answer began: then the service certainly had it.
  const partial = await rawServer((socket, nth) => (nth === 1 ? socket.write(OK("{}")) : socket.end("HTTP/1.1 200 OK\r\n")));
  await sendTo(transport, partial.url, true);
  assert.equal((await failure(transport, requestTo(partial.url, 5000, true))).unsent, false);
  assert.deepEqual([partial.requests(), partial.connections()], [2, 1]);
  transport.close();
});

test("socket transport: Connection: close, and a body read to the end of the connection", async () => {
  const closing = await rawServer((socket) => socket.write("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}"));
  const transport = new SocketTransport();
  assert.equal((await sendTo(transport, closing.url)).text, "{}");
  assert.equal((await sendTo(transport, closing.url)).text, "{}");
  assert.equal(closing.connections(), 2, "a connection the server closes is not reused");
  await Promise.all(closing.sockets.map((s) => (s.closed ? undefined : once(s, "close"))));

  const toEof = await rawServer((socket) => socket.end("HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + BODY));
  assert.deepEqual(await sendTo(transport, toEof.url), { status: 200, text: BODY, retryAfter: null });
  assert.deepEqual(await sendTo(transport, toEof.url), { status: 200, text: BODY, retryAfter: null });
  assert.equal(toEof.connections(), 2);
  transport.close();
});

test("socket transport: an answer over the header limit fails clearly, as maybe sent", async () => {
  const server = await rawServer((socket) => socket.write(`HTTP/1.1 200 OK\r\nX-Big: ${"x".repeat(20_000)}\r\nContent-Length: 2\r\n\r\n{}`));
  const transport = new SocketTransport();
  const error = await failure(transport, requestTo(server.url));
  assert.deepEqual([error.unsent, code(error)], [false, "HPE_HEADER_OVERFLOW"]);
  assert.match(error.message, /headers exceed 16384 bytes/);
  // Through a client: a TransportError naming it, after its retries.
  const client = new Client({ ingestUrl: server.url, retryFor: 0.2 });
  const failed = await client.find("x").catch((e: unknown) => e);
  assert.ok(failed instanceof TransportError && failed.sent && /headers exceed 16384 bytes/.test(failed.message), String(failed));
  transport.close();
});

test("socket transport: a server that accepts and never answers times out, as maybe sent", async () => {
  const silent = await rawServer(() => undefined);
  const transport = new SocketTransport();
  const started = Date.now();
  const error = await failure(transport, requestTo(silent.url, 300));
  assert.ok(Date.now() - started >= 290);
  assert.deepEqual([error.unsent, code(error), (error.cause as Error).name, silent.requests()], [false, "ETIMEDOUT", "TimeoutError", 1]);
  await once(silent.sockets[0]!, "close"); // abandoned: a late answer must not be read as the next request's
  transport.close();
});

/** A self-signed certificate for `name` (localhost unless named; key and cert in PEM), or undefined without openssl. */
function selfSigned(name = "localhost"): { key: string; cert: string; certFile: string } | undefined {
  const dir = mkdtempSync(join(tmpdir(), "sessionlog-ts-tls-"));
  const made = spawnSync("openssl", [
    "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj", `/CN=${name}`,
    "-addext", `subjectAltName=DNS:${name}`, "-keyout", join(dir, "key.pem"), "-out", join(dir, "cert.pem"),
  ], { encoding: "utf8" });
  if (made.status !== 0) return undefined;
  const read = (f: string) => readFileSync(join(dir, f), "utf8");
  return { key: read("key.pem"), cert: read("cert.pem"), certFile: join(dir, "cert.pem") };
}

test("socket transport: TLS with Node's CA store: an untrusted certificate is unsent, a trusted one (NODE_EXTRA_CA_CERTS) keeps its connection", async (t) => {
  const tls = selfSigned();
  if (!tls) return t.skip("no openssl to make a certificate");
  const server = createHttpsServer({ key: tls.key, cert: tls.cert }, (req, res) => {
    req.resume();
    req.on("end", () => res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ port: req.socket.remotePort })));
  });
  const { url } = await listen(server);
  const httpsUrl = url.replace("http://127.0.0.1", "https://localhost");
  const untrusted = await failure(new SocketTransport(), requestTo(httpsUrl));
  assert.equal(untrusted.unsent, true, `a handshake that failed sent nothing (${code(untrusted)})`);

  // Trusted: in a process of its own, as NODE_EXTRA_CA_CERTS is read at start.
  const script = join(mkdtempSync(join(tmpdir(), "sessionlog-ts-tls-")), "probe.mts"); // a module wherever it is
  writeFileSync(script, `
    import { SocketTransport } from ${JSON.stringify(fileURLToPath(new URL("../src/http1.ts", import.meta.url)))};
    import { origin } from ${JSON.stringify(fileURLToPath(new URL("../src/transport.ts", import.meta.url)))};
    const t = new SocketTransport();
    const r = { origin: origin(${JSON.stringify(httpsUrl)}), method: "POST", path: "/x", headers: {}, body: "{}", timeoutMs: 5000 };
    const answers = [await t.send(r), await t.send(r)];
    t.close();
    console.log(JSON.stringify(answers.map((a) => [a.status, JSON.parse(a.text).port])));
  `);
  // Spawned, not spawnSync: this process serves the requests.
  const child = spawn(process.execPath, ["--import", "tsx", script], { env: { ...process.env, NODE_EXTRA_CA_CERTS: tls.certFile }, stdio: ["ignore", "pipe", "pipe"], timeout: 30_000 });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
  child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
  const [status] = (await once(child, "exit")) as [number | null];
  assert.equal(status, 0, stderr);
  const [[s1, port1], [s2, port2]] = JSON.parse(stdout) as [[number, number], [number, number]];
  assert.deepEqual([s1, s2], [200, 200]);
  assert.equal(port1, port2, "both requests on one TLS connection");
});

test("socket transport: a certificate trusted but for another name is refused (the host name is checked), as unsent", async (t) => {
  const tls = selfSigned("other.example");
  if (!tls) return t.skip("no openssl to make a certificate");
  const server = createHttpsServer({ key: tls.key, cert: tls.cert }, (req, res) => {
    req.resume();
    req.on("end", () => res.writeHead(200, { "content-type": "application/json" }).end("{}"));
  });
  let requests = 0;
  server.on("request", () => requests++);
  const { url } = await listen(server);
  const httpsUrl = url.replace("http://127.0.0.1", "https://localhost");
  // Trusted as a CA (NODE_EXTRA_CA_CERTS, read at start: a process of its own), yet for another name.
  const script = join(mkdtempSync(join(tmpdir(), "sessionlog-ts-tls-")), "probe.mts");
  writeFileSync(script, `
    import { SocketTransport } from ${JSON.stringify(fileURLToPath(new URL("../src/http1.ts", import.meta.url)))};
    import { origin } from ${JSON.stringify(fileURLToPath(new URL("../src/transport.ts", import.meta.url)))};
    const t = new SocketTransport();
    const r = { origin: origin(${JSON.stringify(httpsUrl)}), method: "POST", path: "/x", headers: {}, body: "{}", timeoutMs: 5000 };
    const outcome = await t.send(r).then((a) => ({ status: a.status }), (e) => ({ unsent: e.unsent, code: e.cause?.code }));
    t.close();
    console.log(JSON.stringify(outcome));
  `);
  const child = spawn(process.execPath, ["--import", "tsx", script], { env: { ...process.env, NODE_EXTRA_CA_CERTS: tls.certFile }, stdio: ["ignore", "pipe", "pipe"], timeout: 30_000 });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
  child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
  const [status] = (await once(child, "exit")) as [number | null];
  assert.equal(status, 0, stderr);
  assert.deepEqual(JSON.parse(stdout), { unsent: true, code: "ERR_TLS_CERT_ALTNAME_INVALID" });
  assert.equal(requests, 0);
});

test("socket transport: an answer framed by both Content-Length and chunked does not leave its connection reused", async () => {
  const server = await rawServer((socket) => socket.write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"));
  const transport = new SocketTransport();
  assert.equal((await sendTo(transport, server.url)).text, "{}");
  assert.equal((await sendTo(transport, server.url)).text, "{}");
  assert.deepEqual([server.requests(), server.connections()], [2, 2], "the second request on a new connection");
  transport.close();
});

test("socket transport: an answer followed by bytes nothing asked for does not leave its connection reused", async () => {
  const server = await rawServer((socket) => socket.write(OK("{}") + "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n[]")); // one write, one read
  const transport = new SocketTransport();
  assert.equal((await sendTo(transport, server.url)).text, "{}");
  assert.equal((await sendTo(transport, server.url)).text, "{}", "never the stray answer");
  assert.deepEqual([server.requests(), server.connections()], [2, 2], "the second request on a new connection");
  transport.close();
});

/** `requestTo(url)` for `path`. */
const requestAt = (url: string, path: string, timeoutMs = 5000, mayRepeat?: boolean): Request => ({ ...requestTo(url, timeoutMs, mayRepeat), path });
const paths = (heads: string[]) => heads.map((h) => h.split(" ")[1]);

test("socket transport: requests waiting for a connection are sent first in, first out", async () => {
  let release!: () => void;
  const held = new Promise<void>((r) => (release = r));
  const server = await rawServer(async (socket, nth) => {
    if (nth === 1) await held;
    socket.write(OK("{}"));
  });
  const transport = new SocketTransport({ maxSockets: 1 });
  const first = transport.send(requestAt(server.url, "/a"));
  while (server.requests() < 1) await sleep(5);
  const queued = ["/b", "/c", "/d"].map((path) => transport.send(requestAt(server.url, path)));
  await sleep(20);
  release();
  await Promise.all([first, ...queued]);
  assert.deepEqual(paths(server.heads), ["/a", "/b", "/c", "/d"]);
  assert.equal(server.connections(), 1);
  transport.close();
});

test("socket transport: a request that timed out while queued is never sent afterwards", async () => {
  // The connection it waited for is freed by an answer, then (second round) by a reset.
  for (const free of [(s: Socket) => s.write(OK("{}")), (s: Socket) => s.resetAndDestroy()]) {
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    const server = await rawServer(async (socket, nth) => {
      if (nth === 1 && socket === server.sockets[0]) {
        await held;
        free(socket);
      } else socket.write(OK("{}"));
    });
    const transport = new SocketTransport({ maxSockets: 1 });
    const first = transport.send(requestAt(server.url, "/first")).then(() => undefined, () => undefined);
    while (server.requests() < 1) await sleep(5);
    const queued = await failure(transport, requestAt(server.url, "/late", 100));
    assert.equal(queued.unsent, true);
    release();
    await first;
    await sleep(50);
    assert.equal((await transport.send(requestAt(server.url, "/next"))).status, 200);
    assert.deepEqual(paths(server.heads), ["/first", "/next"], "the timed-out request was never written");
    transport.close();
  }
});

test("socket transport: a brand-new connection closed under its request is never resent, even when the caller may repeat it", async () => {
  for (const close of [(s: Socket) => s.resetAndDestroy(), (s: Socket) => s.end()]) {
    const server = await rawServer((socket) => close(socket));
    const transport = new SocketTransport();
    const error = await failure(transport, requestTo(server.url, 5000, true));
    assert.deepEqual([error.unsent, server.requests(), server.connections()], [false, 1, 1]);
    transport.close();
  }
});

test("socket transport: a stale connection is not resent once the caller's deadline has passed (mayRepeat asked at the resend)", async () => {
  // The client's own retry deadline (retryFor) passes while the server holds the request on a
  // reused connection; it then resets it. Resending then would be a second effect nobody retries.
  const server = await rawServer(async (socket, nth) => {
    if (socket === server.sockets[0] && nth === 2) {
      await sleep(600);
      socket.resetAndDestroy();
    } else socket.write(OK(JSON.stringify(opened)));
  });
  const opened = { session_id: newSessionId(), epoch: 1, next_seq: 2, event: { seq: 1, event_id: "e", partition: 0, offset: 0 } };
  const client = new Client({ transport: "socket", ingestUrl: server.url, retryFor: 0.3, timeout: 10 });
  await client.create("ts-tests");
  const error = await client.create("ts-tests").catch((e: unknown) => e);
  assert.ok(error instanceof TransportError, String(error));
  assert.equal(error.sent, true, "it may have reached the service");
  assert.deepEqual([server.requests(), server.connections()], [2, 1], "no second request reached the server");
  client.disconnect();

  // The same through the transport: a callback asked when the resend would happen.
  let asked = 0;
  const again = await rawServer(async (socket, nth) => (socket === again.sockets[0] && nth === 2 ? socket.end() : socket.write(OK("{}"))));
  const transport = new SocketTransport();
  await transport.send(requestTo(again.url));
  const refused = await failure(transport, { ...requestTo(again.url), mayRepeat: () => (asked++, false) });
  assert.deepEqual([refused.unsent, asked, again.requests(), again.connections()], [false, 1, 2, 1]);
  assert.equal((await transport.send({ ...requestTo(again.url), mayRepeat: () => true })).status, 200);
  transport.close();
});

test("socket transport: a 408 on a reused connection is a stale connection: resent once, on a new one, when the caller may repeat it", async () => {
  const timeout = "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";
  const server = await rawServer((socket, nth) => (nth === 2 && socket === server.sockets[0] ? socket.end(timeout) : socket.write(OK("{}"))));
  const transport = new SocketTransport();
  await sendTo(transport, server.url, true);
  assert.equal((await sendTo(transport, server.url, true)).status, 200);
  assert.deepEqual([server.requests(), server.connections()], [3, 2]);
  // Not when the caller may not repeat it, nor on a new connection: the 408 is the answer.
  const refusing = await rawServer((socket, nth) => (nth === 2 || socket !== refusing.sockets[0] ? socket.end(timeout) : socket.write(OK("{}"))));
  await sendTo(transport, refusing.url, false);
  assert.equal((await sendTo(transport, refusing.url, false)).status, 408);
  assert.equal((await sendTo(transport, refusing.url, true)).status, 408, "a new connection's 408 is an answer");
  assert.deepEqual([refusing.requests(), refusing.connections()], [3, 2]);
  transport.close();
});
