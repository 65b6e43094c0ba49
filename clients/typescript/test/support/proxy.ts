/**
 * A proxy in front of a service that misbehaves on purpose, for the retry tests: `fault` decides
 * for each request whether to pass it on as it is, pass it on and then drop the connection before
 * the answer (the service did it, the client never heard), pass it on and hold a 2xx answer until
 * the client gives up on it (its timeout: the answer came too late; it is kept in `held`, and any
 * other answer is passed on), or answer 503 itself without passing it.
 */
import { createServer, type IncomingMessage, type Server } from "node:http";

export type Fault = "pass" | "drop-answer" | "hold-answer" | { status: 503; retryAfter: number };

/** An answer the proxy held until its client gave up: the request and what the service answered. */
export interface Held {
  request: string;
  status: number;
  body: string;
}

/** Serves the proxy to `upstream` on a free port; the server, its base URL and what reached the upstream. */
export async function faultyProxy(
  upstream: string, fault: (req: IncomingMessage) => Fault,
): Promise<{ server: Server; url: string; forwarded: string[]; held: Held[] }> {
  const forwarded: string[] = [];
  const held: Held[] = [];
  const server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const what = fault(req);
    if (typeof what === "object") {
      res.writeHead(what.status, { "content-type": "application/problem+json", "retry-after": String(what.retryAfter) });
      res.end(JSON.stringify({ code: "backpressure", status: 503, detail: "the proxy says: later" }));
      return;
    }
    const headers = Object.fromEntries(Object.entries(req.headers).filter(([k]) => !["host", "connection", "content-length"].includes(k))) as Record<string, string>;
    forwarded.push(`${req.method} ${req.url}`);
    const answer = await fetch(upstream + req.url, { method: req.method, headers, body: chunks.length ? Buffer.concat(chunks) : undefined });
    const body = Buffer.from(await answer.arrayBuffer());
    if (what === "drop-answer") {
      req.socket.destroy(); // the write happened; its answer is lost on the way back
      return;
    }
    if (what === "hold-answer" && answer.ok && answer.status !== 204) {
      // Too late for the client: it is never sent, and the connection closes once the client gave up.
      held.push({ request: `${req.method} ${req.url}`, status: answer.status, body: body.toString("utf8") });
      req.socket.once("close", () => res.destroy());
      return;
    }
    res.writeHead(answer.status, Object.fromEntries(answer.headers));
    res.end(body);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("no port");
  return { server, url: `http://127.0.0.1:${address.port}`, forwarded, held };
}
