/**
 * The client's transports against local servers that misbehave on purpose: which one a client
 * picks, that the Node transport keeps its connections and caps them, and how it classifies a
 * failed attempt (certainly unsent: nothing connected; maybe sent: a connection was made).
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { createServer as createHttpServer, type IncomingMessage, type ServerResponse } from "node:http";
import { connect, createServer, type Server, type Socket } from "node:net";
import { after, test } from "node:test";
import { Client, InvalidArgument, TransportError, newSessionId } from "../src/index.js";
import { AttemptFailed, NodeTransport, origin, type Request } from "../src/transport.js";
import { freePort } from "./support/stackcorner.js";
import { TRANSPORTS } from "./support/transport.js";

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
 * body read), the connection's socket, and the request's number on its connection (1, 2, ...).
 */
async function rawServer(onRequest: (socket: Socket, nth: number) => void): Promise<{ url: string; requests: () => number; connections: () => number }> {
  let requests = 0;
  let connections = 0;
  const { url } = await listen(
    createServer((socket) => {
      connections++;
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
          buffered = buffered.subarray(end + 4 + length);
          requests++;
          onRequest(socket, ++nth);
        }
      });
    }),
  );
  return { url, requests: () => requests, connections: () => connections };
}

const OK = (body: string) => `HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;

function requestTo(url: string, timeoutMs = 5000): Request {
  return { origin: origin(url), method: "POST", path: "/v1/sessions", headers: { "content-type": "application/json" }, body: "{}", timeoutMs };
}

/** The `AttemptFailed` sending `r` on `transport` fails with (fails the test if it succeeds or throws anything else). */
async function failure(transport: NodeTransport, r: Request): Promise<AttemptFailed> {
  const error = await transport.send(r).then(() => undefined, (e: unknown) => e);
  assert.ok(error instanceof AttemptFailed, `an AttemptFailed, not ${String(error)}`);
  return error;
}

const code = (e: AttemptFailed) => (e.cause as { code?: string } | undefined)?.code;

test("a client sends with node:http on Node, with fetch when asked, and refuses other transports", async () => {
  assert.equal(new Client().transport, "node");
  assert.equal(new Client({ transport: "fetch" }).transport, "fetch");
  assert.equal(new Client({ transport: "node" }).transport, "node");
  assert.throws(() => new Client({ transport: "carrier-pigeon" as "node" }), InvalidArgument);
  assert.throws(() => new Client({ maxSockets: 0 }), /maxSockets/);
  // Not an http(s) URL: refused before any attempt, not retried as an outage.
  await assert.rejects(new Client({ ingestUrl: "ftp://example.com", retryFor: 60 }).find("x"), InvalidArgument);
  // Headers no transport would send: refused at once, not retried for a minute as an outage.
  const nowhere = "http://127.0.0.1:9";
  for (const transport of TRANSPORTS) await assert.rejects(new Client({ transport, ingestUrl: nowhere, token: "a\r\nb", retryFor: 60 }).find("x"), InvalidArgument);
  await assert.rejects(new Client({ ingestUrl: nowhere, retryFor: 60 }).append(newSessionId(), 1, [], { writerToken: "a\nb" }), InvalidArgument);
});

test("both transports send the bearer token and JSON, and read answers and problems alike", async () => {
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

test("the node transport keeps its connections alive and opens at most maxSockets to a service", async () => {
  const server = await rawServer((socket) => socket.write(OK(JSON.stringify({ session_id: newSessionId() }))));
  const client = new Client({ ingestUrl: server.url, token: "t" });
  for (let i = 0; i < 5; i++) await client.find(`n${i}`);
  assert.equal(server.connections(), 1, "five requests in turn, one connection");
  await Promise.all(Array.from({ length: 8 }, (_, i) => client.find(`c${i}`)));
  assert.equal(server.connections(), 8, "eight at once open eight (the one kept, seven new)");
  client.disconnect();

  const capped = await rawServer((socket) => socket.write(OK(JSON.stringify({ session_id: newSessionId() }))));
  const two = new Client({ ingestUrl: capped.url, token: "t", maxSockets: 2 });
  await Promise.all(Array.from({ length: 8 }, (_, i) => two.find(`c${i}`)));
  assert.deepEqual([capped.requests(), capped.connections()], [8, 2], "eight at once over two connections");
  two.disconnect();
});

test("node transport: no connection made is certainly unsent (refused, unresolved, not connecting in time)", async () => {
  const transport = new NodeTransport();
  const refused = await failure(transport, requestTo(`http://127.0.0.1:${await freePort()}`));
  assert.deepEqual([refused.unsent, code(refused)], [true, "ECONNREFUSED"]);

  const unresolved = await failure(transport, requestTo("http://sessionlog-no-such-host.invalid:8090"));
  assert.equal(unresolved.unsent, true, `unresolved (${code(unresolved)}) is unsent`);
  assert.ok(["ENOTFOUND", "EAI_AGAIN", "ECONNTIMEOUT"].includes(code(unresolved) ?? ""), String(code(unresolved)));

  const connecting = await failure(transport, requestTo(await unconnectable(), 300));
  assert.deepEqual([connecting.unsent, code(connecting)], [true, "ECONNTIMEOUT"], "a connect that timed out is unsent");
  transport.close();
});

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

test("node transport: once a connection was made, a reset or a timeout may have reached the service", async () => {
  const transport = new NodeTransport();
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

test("node transport: an attempt timing out is maybe sent when it had a connection, unsent while queued for one", async () => {
  const transport = new NodeTransport(1);
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

  const timed = new NodeTransport();
  const late = await failure(timed, requestTo(silent.url, 200));
  assert.deepEqual([late.unsent, (late.cause as Error).name], [false, "TimeoutError"]);
  timed.close();
});

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
