/**
 * How one attempt of a request reaches a service. Three transports, all answering the status, the
 * body's text and the `Retry-After` header, all failing with what `Client` classifies as the
 * transport failing:
 *   - `"socket"` (the default on Node): HTTP/1.1 written and parsed by the package itself over
 *     `node:net`/`node:tls` sockets kept alive (./http1.ts), the least CPU per request;
 *   - `"node"`: Node's `http`/`https` modules over a keep-alive `Agent` (a sixth of global
 *     `fetch`'s CPU per request, or less);
 *   - `"fetch"`: global `fetch` (other runtimes, or when asked).
 * The Node transports' failures are `AttemptFailed`, which says whether the request certainly
 * never left (no connection was made: refused, unresolved, the connect timed out, still queued for
 * a connection) or may have reached the service (a connection was made: a reset, a timeout or a
 * cut-off answer after it).
 */
import type * as Http from "node:http";
import { InvalidArgument } from "./errors.js";

/**
 * Which transport a `Client` sends with: `"socket"` (HTTP/1.1 over `node:net`/`node:tls`, the
 * default on Node), `"node"` (`node:http`/`node:https`) or `"fetch"` (global `fetch`).
 */
export type TransportKind = "socket" | "node" | "fetch";

/** Where a service is, parsed once. */
export interface Origin {
  /** The base URL without a trailing slash (`fetch` appends the path to it). */
  base: string;
  secure: boolean;
  hostname: string;
  /** The `Host` header: the host, and the port unless the scheme's default. */
  host: string;
  port: number;
  /** The base URL's path without a trailing slash (`""` for a bare origin). */
  prefix: string;
}

/** Parses a service's base URL. */
export function origin(base: string): Origin {
  const url = new URL(base);
  if (url.protocol !== "http:" && url.protocol !== "https:") throw new TypeError(`${base}: a service URL is http: or https:`);
  const secure = url.protocol === "https:";
  return {
    base,
    secure,
    hostname: url.hostname.replace(/^\[(.*)\]$/, "$1"), // an IPv6 literal without its brackets
    host: url.host,
    port: url.port ? Number(url.port) : secure ? 443 : 80,
    prefix: url.pathname.replace(/\/+$/, ""),
  };
}

/** One attempt's request (`path` with its query). */
export interface Request {
  origin: Origin;
  method: string;
  path: string;
  headers: Record<string, string>;
  body: string | undefined;
  timeoutMs: number;
  /**
   * Whether the transport may send the request a second time on its own when a kept-alive
   * connection turns out closed by the server as the request went out (only the `"socket"`
   * transport does): `Client` says so while its `retryFor` lasts, as it would send the same
   * request again anyway. A function is asked at the moment of resending (which may be up to
   * `timeoutMs` after the attempt began), so that a deadline passed meanwhile is honoured.
   * Absent: never.
   */
  mayRepeat?: boolean | (() => boolean);
}

/** A service's answer. */
export interface Answer {
  status: number;
  text: string;
  retryAfter: string | null;
}

/** Sends one attempt. */
export interface Transport {
  readonly kind: TransportKind;
  send(request: Request): Promise<Answer>;
  /** Closes the connections it keeps (idle ones do not keep the process alive anyway). */
  close(): void;
}

/** An attempt of a Node transport (`"socket"` or `"node"`) that failed without an answer; `unsent` when it certainly never reached the service. */
export class AttemptFailed extends Error {
  override name = "AttemptFailed";
  constructor(message: string, readonly unsent: boolean, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/** Whether this runtime is Node itself (Bun and Deno answer `process.versions.node` too, and have `fetch` of their own). */
export function onNode(): boolean {
  const g = globalThis as { process?: { versions?: { node?: unknown } }; Bun?: unknown; Deno?: unknown };
  return typeof g.process?.versions?.node === "string" && g.Bun === undefined && g.Deno === undefined;
}

/** Global `fetch`, with the attempt's timeout as an abort signal. */
export const fetchTransport: Transport = {
  kind: "fetch",
  async send(r: Request): Promise<Answer> {
    const response = await fetch(r.origin.base + r.path, {
      method: r.method, headers: r.headers, body: r.body, signal: AbortSignal.timeout(r.timeoutMs),
    });
    const text = await response.text();
    return { status: response.status, text, retryAfter: response.headers.get("retry-after") };
  },
  close() {},
};

/** Most connections the Node transports keep to one service by default: concurrent requests beyond it wait for one. */
export const DEFAULT_MAX_SOCKETS = 1024;
/** Longest a new connection may take to open before the attempt fails as unsent (as `fetch`'s own connect timeout). */
export const CONNECT_TIMEOUT_MS = 10_000;

type Modules = { http: typeof Http; https: typeof import("node:https") };
let modules: Promise<Modules> | undefined;
/** `node:http` and `node:https`, imported on first use only (a bundle for another runtime never loads them). */
function load(): Promise<Modules> {
  modules ??= Promise.all([import("node:http"), import("node:https")]).then(([http, https]) => ({ http, https }));
  return modules;
}

/** `node:http`/`node:https` over keep-alive agents of at most `maxSockets` connections per service. */
export class NodeTransport implements Transport {
  readonly kind = "node";
  private agents: { http: Http.Agent; https: Http.Agent } | undefined;
  private loaded: Modules | undefined;

  constructor(readonly maxSockets: number = DEFAULT_MAX_SOCKETS) {
    if (!(maxSockets >= 1)) throw new TypeError(`maxSockets is at least 1, not ${maxSockets}`);
  }

  send(r: Request): Promise<Answer> {
    if (this.loaded === undefined) return load().then((m) => ((this.loaded = m), this.send(r)));
    const m = this.loaded;
    if (!this.agents) {
      // As many idle connections kept as open ones: a fleet of sessions between two requests
      // would otherwise close all but 256 (Node's default) and connect again on the next.
      const options = { keepAlive: true, maxSockets: this.maxSockets, maxFreeSockets: this.maxSockets, scheduling: "lifo" as const, noDelay: true };
      this.agents = { http: new m.http.Agent(options), https: new m.https.Agent(options) };
    }
    return new Promise<Answer>((resolve, reject) => {
      const secure = r.origin.secure;
      try {
        new Exchange(secure ? m.https : m.http, secure ? this.agents!.https : this.agents!.http, r, resolve, reject);
      } catch (e) {
        // Refused before anything was sent (a header Node will not send): a bug, not an outage to retry.
        reject(new InvalidArgument(`the request cannot be sent: ${(e as Error).message}`, { cause: e }));
      }
    });
  }

  close(): void {
    this.agents?.http.destroy();
    this.agents?.https.destroy();
    this.agents = undefined;
  }
}

const failure = (name: string, code: string, message: string) => Object.assign(new Error(message), { name, code });

/** One attempt on `node:http`: resolves with the answer, or rejects with `AttemptFailed` (once). */
class Exchange {
  /**
   * Whether the request may have reached the service: a connection was made for it (a kept-alive
   * one, or a new one that connected; over TLS, once the handshake is done, before which no byte
   * of the request goes out). Until then (refused, unresolved, still connecting, or queued for a
   * connection), nothing was sent.
   */
  private reached = false;
  private done = false;
  private readonly req: Http.ClientRequest;
  private readonly timer: NodeJS.Timeout;
  private connectTimer: NodeJS.Timeout | undefined;
  private readonly chunks: Buffer[] = [];

  constructor(
    module: Pick<typeof Http, "request">,
    agent: Http.Agent,
    private readonly r: Request,
    private readonly resolve: (answer: Answer) => void,
    private readonly reject: (error: AttemptFailed) => void,
  ) {
    const o = r.origin;
    // As a list: Node validates it as it writes it, and skips its header map (about a tenth of
    // the CPU of a request); the Host header is then the caller's to give.
    const headers = ["host", o.host];
    for (const name in r.headers) headers.push(name, r.headers[name]!);
    if (r.body !== undefined) headers.push("content-length", String(Buffer.byteLength(r.body)));
    this.req = module.request({ agent, hostname: o.hostname, port: o.port, path: o.prefix + r.path, method: r.method, headers }, (res) => this.answered(res));
    this.req.on("socket", (socket) => this.assigned(socket));
    this.req.on("error", (e) => this.fail(e));
    this.timer = setTimeout(() => this.fail(failure("TimeoutError", this.reached ? "ETIMEDOUT" : "ECONNTIMEOUT", `no answer within ${r.timeoutMs / 1000} s`)), r.timeoutMs);
    this.req.end(r.body);
  }

  private assigned(socket: import("node:net").Socket): void {
    if (!socket.connecting) {
      this.reached = true; // a kept-alive connection
      return;
    }
    socket.once(this.r.origin.secure ? "secureConnect" : "connect", () => {
      this.reached = true;
      clearTimeout(this.connectTimer);
    });
    // A connection that does not open in time: unsent (as fetch's connect timeout). Time spent
    // queued for a free connection is not connecting; only the attempt's timeout bounds it.
    const connectMs = Math.min(CONNECT_TIMEOUT_MS, this.r.timeoutMs);
    this.connectTimer = setTimeout(() => {
      const o = this.r.origin;
      if (!this.reached) this.fail(failure("ConnectTimeoutError", "ECONNTIMEOUT", `no connection to ${o.hostname}:${o.port} within ${connectMs / 1000} s`), true);
    }, connectMs);
  }

  private answered(res: Http.IncomingMessage): void {
    res.on("data", (chunk: Buffer) => this.chunks.push(chunk));
    res.on("end", () => {
      if (this.done) return;
      this.finish();
      const c = this.chunks;
      const text = c.length === 1 ? c[0]!.toString("utf8") : Buffer.concat(c).toString("utf8");
      this.resolve({ status: res.statusCode ?? 0, text, retryAfter: res.headers["retry-after"] ?? null });
    });
    // The connection closed before the answer was complete: `error` (ECONNRESET, "aborted"), no `end`.
    res.on("error", (e) => this.fail(e));
  }

  private finish(): void {
    this.done = true;
    clearTimeout(this.timer);
    if (this.connectTimer !== undefined) clearTimeout(this.connectTimer);
  }

  private fail(error: Error, unsent = !this.reached): void {
    if (this.done) return;
    this.finish();
    this.req.destroy();
    this.reject(new AttemptFailed(error.message || String(error), unsent, { cause: error }));
  }
}
