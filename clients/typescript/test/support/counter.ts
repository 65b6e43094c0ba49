/**
 * The Python tests' counting service (clients/python/tests/counter_service.py), ported: it counts
 * the side effects of each call, dedupes the calls of idempotent tools by key, and answers
 * recovery's resolver (`GET /{tool}/calls/{key}`: 200 with the outcome when the call ran, 404 when
 * it never arrived). `GET /{tool}/total` answers a tool's count, for tests in other processes.
 */
import { createServer, type Server } from "node:http";

/** Tools the service dedupes by key (the others take effect on every call). */
export const IDEMPOTENT_TOOLS = ["counter", "reissued", "retried", "dedupe"];

/** Serves the counter on a free port of 127.0.0.1; the server, its base URL, and `reset` to forget every effect (a new run of the suite). */
export async function serveCounter(): Promise<{ server: Server; url: string; reset: () => void }> {
  const effects = new Map<string, number>();
  const id = (tool: string, key: string) => JSON.stringify([tool, key]);
  const server = createServer((req, res) => {
    const parts = (req.url ?? "").replace(/^\/+|\/+$/g, "").split("/").map(decodeURIComponent);
    const answer = (status: number, body?: unknown) => {
      res.writeHead(status, { "content-type": "application/json" });
      res.end(body === undefined ? "" : JSON.stringify(body));
    };
    if (parts.length === 2 && parts[1] === "total" && req.method === "GET") {
      let total = 0;
      for (const [k, n] of effects) if ((JSON.parse(k) as string[])[0] === parts[0]) total += n;
      return answer(200, { total });
    }
    if (parts.length !== 3 || parts[1] !== "calls") return answer(404);
    const [tool, , key] = parts as [string, string, string];
    let done = effects.get(id(tool, key)) ?? 0;
    if (req.method === "POST") {
      if (!IDEMPOTENT_TOOLS.includes(tool) || done === 0) effects.set(id(tool, key), ++done);
      return answer(200, { output: `${tool} effect #${done}` });
    }
    if (done === 0) return answer(404);
    return answer(200, { outcome: "succeeded", output: `${tool} effect #${done}` });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("the counter service has no port");
  return { server, url: `http://127.0.0.1:${address.port}`, reset: () => effects.clear() };
}

/** Has the counter at `url` take effect for `tool` under `key`; the service's output. */
export async function perform(url: string, tool: string, key: string): Promise<string> {
  const response = await fetch(`${url}/${encodeURIComponent(tool)}/calls/${encodeURIComponent(key)}`, { method: "POST" });
  return String(((await response.json()) as { output: unknown }).output);
}

/** How many side effects `tool` had. */
export async function total(url: string, tool: string): Promise<number> {
  const response = await fetch(`${url}/${encodeURIComponent(tool)}/total`);
  return Number(((await response.json()) as { total: unknown }).total);
}
