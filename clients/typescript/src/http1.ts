/**
 * The `"socket"` transport: HTTP/1.1 written and parsed by hand over `node:net` / `node:tls`
 * sockets. By hand because the package takes no runtime dependency, and because `node:http`'s
 * per-request machinery (an `IncomingMessage` stream, header objects, the `Agent`'s bookkeeping)
 * is most of the client's CPU when a process appends for a thousand sessions at once.
 *
 * What it speaks: one request at a time on each connection (no pipelining), kept alive in a pool
 * per service of at most `maxSockets` connections, idle ones reused last-in first-out and closed
 * after `idleTimeoutMs` (or a second before the server's `Keep-Alive: timeout=N`). Answers are
 * parsed as the bytes arrive: the status line, the headers (1xx answers skipped), then the body
 * by `Content-Length`, `Transfer-Encoding: chunked` (extensions and trailers read and dropped), or
 * to the end of a connection that is not kept. `Connection: close` (and HTTP/1.0 without
 * keep-alive) closes the connection after the answer. Headers are limited to `MAX_HEADER_BYTES`
 * (as `node:http`'s default) and bodies to `MAX_BODY_BYTES`.
 *
 * Failures are `AttemptFailed`, classified as the `"node"` transport classifies them: certainly
 * unsent until the request's first byte is written (refused, unresolved, the connect or the TLS
 * handshake timed out, still queued for a connection), maybe sent after. One exception to
 * failing at once: a kept-alive connection the server closed just as the request went out (a reset
 * or the end of the stream before any byte of an answer) is the classic race of keep-alive, and
 * the request is sent again once, on a new connection, when the caller says it may repeat it
 * (`Request.mayRepeat`, asked at the moment of resending: the `Client` does while its `retryFor`
 * lasts, as it would resend it anyway, and a resent append is answered as a duplicate). A `408`
 * answered on a kept-alive connection is taken the same way (as browsers do: the server timed the
 * idle connection out as the request went out). If that fails too, it may have been sent.
 */
import type * as Net from "node:net";
import type * as Tls from "node:tls";
import { InvalidArgument } from "./errors.js";
import { AttemptFailed, CONNECT_TIMEOUT_MS, DEFAULT_MAX_SOCKETS, type Answer, type Origin, type Request, type Transport } from "./transport.js";

/** The most bytes an answer's status line and headers may take (its trailers too), as `node:http`'s default `maxHeaderSize`. */
export const MAX_HEADER_BYTES = 16 * 1024;
/** The most bytes an answer's body may take. */
export const MAX_BODY_BYTES = 256 * 1024 * 1024;
/** How long a kept-alive connection may stay idle before it is closed (as `fetch`'s default; shorter than `node:http` servers' 5 s). */
export const DEFAULT_IDLE_TIMEOUT_MS = 4_000;
/** The longest a chunk-size line may be (its extensions included). */
const MAX_CHUNK_LINE = 1024;

/** An answer the parser refuses: `code` as `node:http`'s parser names such failures. */
export class ParseError extends Error {
  override name = "ParseError";
  constructor(readonly code: "HPE_HEADER_OVERFLOW" | "HPE_BODY_OVERFLOW" | "HPE_INVALID_RESPONSE", message: string) {
    super(message);
  }
}

const invalid = (message: string) => new ParseError("HPE_INVALID_RESPONSE", message);
const headerOverflow = (limit: number) =>
  new ParseError("HPE_HEADER_OVERFLOW", `the answer's status line and headers exceed ${limit} bytes (the limit)`);
const bodyOverflow = (limit: number) => new ParseError("HPE_BODY_OVERFLOW", `the answer's body exceeds ${limit} bytes (the limit)`);

// The parser's states.
const HEAD = 0;
const LENGTH = 1;
const CHUNK_SIZE = 2;
const CHUNK_DATA = 3;
const CHUNK_END = 4;
const TRAILERS = 5;
const TO_EOF = 6;
const DONE = 7;

const STATUS_LINE = /^HTTP\/1\.([01]) ([1-9]\d\d)(?: [^\r\n]*)?$/;
const DIGITS = /^\d{1,15}$/;
const HEX = /^[0-9a-fA-F]{1,12}$/;

/**
 * One HTTP/1.1 answer parsed incrementally from the bytes of a connection: `feed` each chunk as it
 * arrives until it answers true (the answer is complete), `eof` when the connection ended. Throws
 * `ParseError` on what is not HTTP/1.x or exceeds the limits. `reset` readies it for the next
 * answer on the same connection.
 */
export class ResponseParser {
  /** The answer's status (0 until its headers arrived). */
  status = 0;
  /** The `Retry-After` header (the first), or null. */
  retryAfter: string | null = null;
  /** Whether the connection may carry another request after this answer. */
  keepAlive = true;
  /** The server's `Keep-Alive: timeout=N`, in ms, when it named one. */
  keepAliveMs: number | undefined;
  /** Bytes received for this answer so far (0: none yet). */
  received = 0;
  /** Whether bytes arrived after the answer was complete (nothing asked for them: the connection is not to be reused). */
  extra = false;
  private state = HEAD;
  private noBody = false;
  private pending: Buffer | undefined;
  private chunks: Buffer[] = [];
  private bodyBytes = 0;
  private remaining = 0;
  /** Bytes of the head and the trailers. */
  private trailerBytes = 0;

  constructor(readonly maxHeaderBytes = MAX_HEADER_BYTES, readonly maxBodyBytes = MAX_BODY_BYTES) {}

  /** Readies the parser for the answer to a request (`head`: a `HEAD` request, whose answer has no body). */
  reset(head = false): void {
    this.status = 0;
    this.retryAfter = null;
    this.keepAlive = true;
    this.keepAliveMs = undefined;
    this.received = 0;
    this.extra = false;
    this.state = HEAD;
    this.noBody = head;
    this.pending = undefined;
    this.chunks = [];
    this.bodyBytes = 0;
    this.remaining = 0;
    this.trailerBytes = 0;
  }

  /** Whether the answer is complete. */
  get complete(): boolean {
    return this.state === DONE;
  }

  /** Whether the answer's body runs to the end of the connection (it named no length). */
  get toEof(): boolean {
    return this.state === TO_EOF;
  }

  /** The body decoded as UTF-8 (once the answer is complete). */
  text(): string {
    const c = this.chunks;
    if (c.length === 0) return "";
    return c.length === 1 ? c[0]!.toString("utf8") : Buffer.concat(c, this.bodyBytes).toString("utf8");
  }

  /** Takes the next bytes of the connection; whether the answer is complete. */
  feed(chunk: Buffer): boolean {
    this.received += chunk.length;
    let buf = chunk;
    if (this.pending !== undefined) {
      buf = Buffer.concat([this.pending, chunk]);
      this.pending = undefined;
    }
    let pos = 0;
    for (;;) {
      switch (this.state) {
        case HEAD: {
          const end = buf.indexOf("\r\n\r\n", pos, "latin1");
          if (end < 0) {
            if (buf.length - pos > this.maxHeaderBytes) throw headerOverflow(this.maxHeaderBytes);
            this.pending = buf.subarray(pos);
            return false;
          }
          if (end + 4 - pos > this.maxHeaderBytes) throw headerOverflow(this.maxHeaderBytes);
          this.head(buf.toString("latin1", pos, end));
          this.trailerBytes = end + 4 - pos; // trailers count toward the limit with the head
          pos = end + 4;
          if (this.complete) return this.done(buf, pos); // no body
          break;
        }
        case LENGTH:
        case CHUNK_DATA: {
          const n = Math.min(this.remaining, buf.length - pos);
          if (n > 0) {
            this.chunks.push(pos === 0 && n === buf.length ? buf : buf.subarray(pos, pos + n));
            pos += n;
            this.remaining -= n;
          }
          if (this.remaining > 0) return false;
          if (this.state === LENGTH) return this.done(buf, pos);
          this.state = CHUNK_END;
          break;
        }
        case CHUNK_SIZE: {
          const eol = buf.indexOf("\r\n", pos, "latin1");
          if (eol < 0 || eol - pos > MAX_CHUNK_LINE) {
            if (buf.length - pos > MAX_CHUNK_LINE) throw invalid(`a chunk-size line longer than ${MAX_CHUNK_LINE} bytes`);
            this.pending = buf.subarray(pos);
            return false;
          }
          const line = buf.toString("latin1", pos, eol);
          pos = eol + 2;
          const semicolon = line.indexOf(";");
          const digits = (semicolon < 0 ? line : line.slice(0, semicolon)).replace(/[ \t]+$/, "");
          if (!HEX.test(digits)) throw invalid(`not a chunk size: ${JSON.stringify(line.slice(0, 40))}`);
          const size = parseInt(digits, 16);
          if (size === 0) {
            this.state = TRAILERS;
            break;
          }
          if (this.bodyBytes + size > this.maxBodyBytes) throw bodyOverflow(this.maxBodyBytes);
          this.bodyBytes += size;
          this.remaining = size;
          this.state = CHUNK_DATA;
          break;
        }
        case CHUNK_END: {
          // The CRLF after a chunk's data, perhaps split across reads.
          const left = buf.length - pos;
          if (left === 0) return false;
          if (buf[pos] !== 13 || (left > 1 && buf[pos + 1] !== 10)) throw invalid("a chunk's data is not followed by CRLF");
          if (left === 1) {
            this.pending = buf.subarray(pos);
            return false;
          }
          pos += 2;
          this.state = CHUNK_SIZE;
          break;
        }
        case TRAILERS: {
          // Trailer fields, one a line, until an empty line; read and dropped (an answer's
          // Retry-After is a header, never a trailer). They count toward the header limit.
          const eol = buf.indexOf("\r\n", pos, "latin1");
          if (eol < 0) {
            if (this.trailerBytes + buf.length - pos > this.maxHeaderBytes) throw headerOverflow(this.maxHeaderBytes);
            this.pending = buf.subarray(pos);
            return false;
          }
          const length = eol - pos;
          this.trailerBytes += length + 2;
          if (this.trailerBytes > this.maxHeaderBytes) throw headerOverflow(this.maxHeaderBytes);
          const start = pos;
          pos = eol + 2;
          if (length === 0) return this.done(buf, pos);
          const colon = buf.indexOf(":", start, "latin1");
          if (colon <= start || colon > eol) throw invalid("a trailer line without a field name");
          break;
        }
        case TO_EOF: {
          const n = buf.length - pos;
          if (n > 0) {
            if (this.bodyBytes + n > this.maxBodyBytes) throw bodyOverflow(this.maxBodyBytes);
            this.chunks.push(pos === 0 ? buf : buf.subarray(pos));
            this.bodyBytes += n;
          }
          return false;
        }
        default: // DONE: more bytes than the answer
          if (pos < buf.length) this.extra = true;
          return true;
      }
    }
  }

  /** The connection ended: whether that completes the answer (a body read to the end), as opposed to cutting it off. */
  eof(): boolean {
    if (this.state === TO_EOF) {
      this.state = DONE;
      return true;
    }
    return this.state === DONE;
  }

  private done(buf: Buffer, pos: number): boolean {
    this.state = DONE;
    if (pos < buf.length) this.extra = true;
    return true;
  }

  /** Reads a status line and headers (without the blank line); sets what comes next. */
  private head(text: string): void {
    // obs-fold (a header continued on an indented line) is one space (RFC 9112, 5.2).
    if (text.includes("\r\n ") || text.includes("\r\n\t")) text = text.replace(/\r\n[ \t]+/g, " ");
    const lines = text.split("\r\n");
    const status = STATUS_LINE.exec(lines[0]!);
    if (!status) throw invalid(`not an HTTP/1.x status line: ${JSON.stringify(lines[0]!.slice(0, 80))}`);
    const code = Number(status[2]);
    const http10 = status[1] === "0";
    let length: number | undefined;
    let encoded = false;
    let chunked = false;
    let connection = "";
    let retryAfter: string | null = null;
    let keepAliveMs: number | undefined;
    for (let i = 1; i < lines.length; i++) {
      const line = lines[i]!;
      const colon = line.indexOf(":");
      if (colon <= 0 || line.charCodeAt(colon - 1) === 32 || line.charCodeAt(colon - 1) === 9) {
        throw invalid(`not a header line: ${JSON.stringify(line.slice(0, 80))}`);
      }
      const name = line.slice(0, colon).toLowerCase();
      switch (name) {
        case "content-length": {
          const value = line.slice(colon + 1).trim();
          if (!DIGITS.test(value)) throw invalid(`not a Content-Length: ${JSON.stringify(value.slice(0, 40))}`);
          const n = Number(value);
          if (length !== undefined && length !== n) throw invalid(`two Content-Lengths: ${length} and ${n}`);
          length = n;
          break;
        }
        case "transfer-encoding": {
          // The last coding says whether the body is chunked (RFC 9112, 6.3).
          const codings = line.slice(colon + 1).toLowerCase().split(",");
          encoded = true;
          chunked = codings[codings.length - 1]!.trim() === "chunked";
          break;
        }
        case "connection":
          connection += "," + line.slice(colon + 1).toLowerCase();
          break;
        case "retry-after":
          retryAfter ??= line.slice(colon + 1).trim(); // the first, as node:http keeps it
          break;
        case "keep-alive": {
          const timeout = /(?:^|[,;\s])timeout\s*=\s*(\d+)/i.exec(line.slice(colon + 1));
          if (timeout) keepAliveMs = Number(timeout[1]) * 1000;
          break;
        }
      }
    }
    if (code < 200) {
      // An informational answer (100 Continue, 103 Early Hints): the answer follows it.
      if (code === 101) throw invalid("101 Switching Protocols, which no request asked for");
      return;
    }
    this.status = code;
    this.retryAfter = retryAfter;
    this.keepAliveMs = keepAliveMs;
    const tokens = connection.split(",").map((t) => t.trim());
    this.keepAlive = http10 ? tokens.includes("keep-alive") : !tokens.includes("close");
    if (this.noBody || code === 204 || code === 304) {
      this.state = DONE;
    } else if (encoded) {
      // Transfer-Encoding overrides Content-Length; a sender giving both cannot be trusted to
      // frame the next answer, so the connection is not reused (RFC 9112, 6.3).
      if (length !== undefined) this.keepAlive = false;
      if (chunked) {
        this.state = CHUNK_SIZE;
      } else {
        this.state = TO_EOF;
        this.keepAlive = false;
      }
    } else if (length !== undefined) {
      if (length > this.maxBodyBytes) throw bodyOverflow(this.maxBodyBytes);
      this.bodyBytes = length;
      this.remaining = length;
      this.state = length === 0 ? DONE : LENGTH;
    } else {
      this.state = TO_EOF;
      this.keepAlive = false;
    }
  }
}

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const ASCII_VALUE = /^[\t\x20-\x7e]*$/;
const LATIN1_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;
const ASCII_TARGET = /^[\x21-\x7e]+$/;
const LATIN1_TARGET = /^[\x21-\x7e\x80-\xff]+$/;
/** Headers the transport writes itself: the caller's are dropped. */
const FRAMING = new Set(["host", "content-length", "transfer-encoding", "connection", "keep-alive", "upgrade"]);
/** Methods whose request says nothing of a body when it has none (the others say `Content-Length: 0`, as `node:http` does). */
const BODILESS = new Set(["GET", "HEAD", "DELETE", "OPTIONS", "TRACE", "CONNECT"]);

/**
 * A request's bytes: the request line, `Host`, the caller's headers, the body's length,
 * `Connection: keep-alive`, then the body as UTF-8. A string (written as UTF-8) unless a header
 * holds characters beyond ASCII (Latin-1, as `node:http` writes them). Throws `InvalidArgument` for
 * what no HTTP/1.1 request can carry (a header name that is not a token, a CR or LF in a value).
 */
export function requestBytes(r: Request): string | Buffer {
  const o = r.origin;
  const target = o.prefix + r.path;
  if (!TOKEN.test(r.method)) throw new InvalidArgument(`the request cannot be sent: the method ${JSON.stringify(r.method)} is not a token`);
  let latin1 = !ASCII_TARGET.test(target);
  if (latin1 && !LATIN1_TARGET.test(target)) throw new InvalidArgument(`the request cannot be sent: the path ${JSON.stringify(target)} holds unescaped characters`);
  let head = `${r.method} ${target} HTTP/1.1\r\nHost: ${o.host}\r\n`;
  for (const name in r.headers) {
    const value = r.headers[name]!;
    if (!TOKEN.test(name)) throw new InvalidArgument(`the request cannot be sent: the header name ${JSON.stringify(name)} is not a token`);
    if (!ASCII_VALUE.test(value)) {
      if (!LATIN1_VALUE.test(value)) throw new InvalidArgument(`the request cannot be sent: the header ${name} holds characters a header cannot carry`);
      latin1 = true;
    }
    if (FRAMING.has(name.toLowerCase())) continue;
    head += `${name}: ${value}\r\n`;
  }
  const body = r.body;
  if (body !== undefined) head += `Content-Length: ${Buffer.byteLength(body, "utf8")}\r\n`;
  else if (!BODILESS.has(r.method)) head += "Content-Length: 0\r\n";
  head += "Connection: keep-alive\r\n\r\n";
  if (!latin1) return body === undefined ? head : head + body;
  const headBytes = Buffer.from(head, "latin1");
  return body === undefined ? headBytes : Buffer.concat([headBytes, Buffer.from(body, "utf8")]);
}

const failure = (name: string, code: string, message: string) => Object.assign(new Error(message), { name, code });
const codeOf = (e: unknown) => (e as { code?: unknown } | undefined)?.code;
/** A connection this side closed (never mistaken for the server closing it under a request). */
const closedByUs = (why: string) => failure("Error", "ECONNABORTED", `the connection was closed: ${why}`);

type Modules = { net: typeof Net; tls: typeof Tls };
let modules: Promise<Modules> | undefined;
/** `node:net` and `node:tls`, imported on first use only (a bundle for another runtime never loads them). */
function load(): Promise<Modules> {
  modules ??= Promise.all([import("node:net"), import("node:tls")]).then(([net, tls]) => ({ net, tls }));
  return modules;
}

/** Options of a `SocketTransport`. */
export interface SocketTransportOptions {
  /** The most connections to each service (default `DEFAULT_MAX_SOCKETS`); requests beyond it wait for one. */
  maxSockets?: number;
  /** How long an idle connection is kept (default `DEFAULT_IDLE_TIMEOUT_MS`); a server's `Keep-Alive: timeout` shortens it. */
  idleTimeoutMs?: number;
  /** The most bytes of an answer's head (default `MAX_HEADER_BYTES`). */
  maxHeaderBytes?: number;
  /** The most bytes of an answer's body (default `MAX_BODY_BYTES`). */
  maxBodyBytes?: number;
}

/**
 * HTTP/1.1 over `node:net` / `node:tls`, a keep-alive pool per service (see this module's
 * comment). TLS as `node:https` does it by default: Node's CA store (and `NODE_EXTRA_CA_CERTS`),
 * the host name as SNI and checked against the certificate, TLS sessions resumed.
 */
export class SocketTransport implements Transport {
  readonly kind = "socket";
  readonly maxSockets: number;
  readonly idleTimeoutMs: number;
  readonly maxHeaderBytes: number;
  readonly maxBodyBytes: number;
  private readonly pools = new Map<string, Pool>();
  private loaded: Modules | undefined;

  constructor(options: SocketTransportOptions = {}) {
    this.maxSockets = options.maxSockets ?? DEFAULT_MAX_SOCKETS;
    this.idleTimeoutMs = options.idleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS;
    this.maxHeaderBytes = options.maxHeaderBytes ?? MAX_HEADER_BYTES;
    this.maxBodyBytes = options.maxBodyBytes ?? MAX_BODY_BYTES;
    if (!(this.maxSockets >= 1)) throw new TypeError(`maxSockets is at least 1, not ${this.maxSockets}`);
    if (!(this.idleTimeoutMs >= 0)) throw new TypeError(`idleTimeoutMs is at least 0, not ${this.idleTimeoutMs}`);
  }

  send(r: Request): Promise<Answer> {
    if (this.loaded === undefined) return load().then((m) => ((this.loaded = m), this.send(r)));
    let bytes: string | Buffer;
    try {
      bytes = requestBytes(r);
    } catch (e) {
      return Promise.reject(e); // a bug, not an outage to retry
    }
    const o = r.origin;
    const key = `${o.secure ? "https" : "http"}://${o.hostname}:${o.port}`;
    let pool = this.pools.get(key);
    if (pool === undefined) this.pools.set(key, (pool = new Pool(this, this.loaded, o)));
    const p = pool;
    return new Promise<Answer>((resolve, reject) => p.submit(new Exchange(p, r, bytes, resolve, reject)));
  }

  /** Closes every connection: idle ones, and those carrying a request (which fails; queued ones go on, on new connections). */
  close(): void {
    for (const pool of this.pools.values()) pool.closeAll();
  }
}

/** The connections to one service, and the requests waiting for one. */
class Pool {
  /** Idle connections, the most recently used last (taken first). */
  private readonly idle: Connection[] = [];
  private readonly all = new Set<Connection>();
  /** Requests waiting for a connection, in arrival order. */
  private queue: Exchange[] = [];
  private sweeper: NodeJS.Timeout | undefined;
  /** The last TLS session the service gave, to resume on the next connection. */
  tlsSession: Buffer | undefined;

  constructor(readonly transport: SocketTransport, readonly modules: Modules, readonly origin: Origin) {}

  /** Sends `x` on an idle connection, a new one, or queues it until one is free. */
  submit(x: Exchange): void {
    const now = Date.now();
    for (let c = this.idle.pop(); c !== undefined; c = this.idle.pop()) {
      if (now - c.idleSince >= c.idleLimitMs) {
        c.die(closedByUs("idle for too long"));
        continue;
      }
      c.assign(x);
      return;
    }
    if (this.all.size < this.transport.maxSockets) this.open(x);
    else this.queue.push(x);
  }

  /** Sends `x` again on a new connection (or the next freed one: it was just used, so it is not stale). */
  resubmit(x: Exchange): void {
    if (this.all.size < this.transport.maxSockets) this.open(x);
    else this.queue.unshift(x);
  }

  private open(x: Exchange): void {
    this.all.add(new Connection(this, x));
  }

  /** `c` answered and may carry another request: the next queued one, or it waits idle. */
  release(c: Connection): void {
    for (let x = this.queue.shift(); x !== undefined; x = this.queue.shift()) {
      if (!x.done) return c.assign(x);
    }
    c.idleSince = Date.now();
    c.socket.unref(); // an idle connection does not keep the process alive
    this.idle.push(c);
    this.sweeper ??= setInterval(() => this.sweep(), Math.max(250, Math.min(1000, this.transport.idleTimeoutMs))).unref();
  }

  /** `c` is gone: no longer counted, nor offered. */
  closed(c: Connection): void {
    this.all.delete(c);
    const at = this.idle.lastIndexOf(c);
    if (at >= 0) this.idle.splice(at, 1);
  }

  /** Opens connections for queued requests while there is room. */
  drain(): void {
    while (this.queue.length > 0 && this.all.size < this.transport.maxSockets) {
      const x = this.queue.shift()!;
      if (!x.done) this.open(x);
    }
  }

  /** Closes the connections idle for longer than they may be. */
  private sweep(): void {
    const now = Date.now();
    for (const c of this.idle.filter((c) => now - c.idleSince >= c.idleLimitMs)) c.die(closedByUs("idle for too long"));
    if (this.idle.length === 0) {
      clearInterval(this.sweeper);
      this.sweeper = undefined;
    }
  }

  closeAll(): void {
    for (const c of [...this.all]) c.die(closedByUs("the client disconnected"));
  }
}

/** One connection: its socket, the answer it is reading, the request it carries. */
class Connection {
  readonly socket: Net.Socket;
  /** The request it carries, if any. */
  private exchange: Exchange | undefined;
  private readonly parser: ResponseParser;
  private connectTimer: NodeJS.Timeout | undefined;
  private dead = false;
  /** Answers it read. */
  private served = 0;
  /** When it last became idle (ms since the epoch). */
  idleSince = 0;
  /** How long it may stay idle. */
  idleLimitMs: number;

  constructor(private readonly pool: Pool, x: Exchange) {
    const o = pool.origin;
    const { net, tls } = pool.modules;
    this.parser = new ResponseParser(pool.transport.maxHeaderBytes, pool.transport.maxBodyBytes);
    this.idleLimitMs = pool.transport.idleTimeoutMs;
    this.exchange = x;
    x.conn = this;
    x.reused = false;
    if (o.secure) {
      const socket = tls.connect({
        host: o.hostname, port: o.port, session: pool.tlsSession,
        servername: net.isIP(o.hostname) ? undefined : o.hostname, // SNI names a host, not an address
      });
      socket.once("secureConnect", () => this.connected());
      socket.on("session", (session: Buffer) => (pool.tlsSession = session));
      this.socket = socket;
    } else {
      this.socket = net.connect({ host: o.hostname, port: o.port });
      this.socket.once("connect", () => this.connected());
    }
    this.socket.setNoDelay(true);
    this.socket.setKeepAlive(true, 1000);
    this.socket.on("data", (chunk: Buffer) => this.data(chunk));
    this.socket.on("end", () => this.ended());
    this.socket.on("error", (e: Error) => this.die(e));
    this.socket.on("close", () => this.die(failure("Error", "ECONNRESET", "the connection closed")));
    // A connection that does not open in time: unsent (as fetch's connect timeout). Time queued
    // for a free connection is not connecting; only the attempt's timeout bounds it.
    const connectMs = Math.min(CONNECT_TIMEOUT_MS, x.request.timeoutMs);
    this.connectTimer = setTimeout(() => {
      this.die(failure("ConnectTimeoutError", "ECONNTIMEOUT", `no connection to ${o.hostname}:${o.port} within ${connectMs / 1000} s`));
    }, connectMs);
  }

  /** Sends `x` on this kept-alive connection. */
  assign(x: Exchange): void {
    this.exchange = x;
    x.conn = this;
    x.reused = this.served > 0;
    this.socket.ref();
    this.write(x);
  }

  private connected(): void {
    clearTimeout(this.connectTimer);
    this.connectTimer = undefined;
    const x = this.exchange;
    if (x !== undefined) this.write(x);
    else this.pool.release(this);
  }

  private write(x: Exchange): void {
    this.parser.reset(x.request.method === "HEAD");
    x.written = true; // from here on, the request may reach the service
    this.socket.write(x.bytes);
  }

  private data(chunk: Buffer): void {
    const x = this.exchange;
    if (x === undefined) return this.die(invalid("bytes from the service with no request outstanding"));
    let complete: boolean;
    try {
      complete = this.parser.feed(chunk);
    } catch (e) {
      return this.die(e as Error);
    }
    if (complete) this.answered(x);
  }

  private ended(): void {
    const x = this.exchange;
    if (x !== undefined && this.parser.eof()) {
      this.answered(x);
      return;
    }
    const received = this.parser.received;
    this.die(failure("Error", "ECONNRESET", received === 0 ? "the connection closed before an answer" : `the connection closed ${received} bytes into the answer`));
  }

  private answered(x: Exchange): void {
    const p = this.parser;
    const answer: Answer = { status: p.status, text: p.text(), retryAfter: p.retryAfter };
    this.exchange = undefined;
    x.conn = undefined;
    this.served++;
    let reusable = p.keepAlive && !p.extra && !this.dead;
    if (p.keepAliveMs !== undefined) {
      this.idleLimitMs = Math.min(this.pool.transport.idleTimeoutMs, p.keepAliveMs - 1000);
      if (this.idleLimitMs <= 0) reusable = false;
    }
    if (p.status === 408 && x.reused && x.mayResend()) {
      // A kept-alive connection the server timed out as the request went out: stale, as a reset.
      this.die(closedByUs("408 on a kept-alive connection"));
      x.resend();
      return;
    }
    x.succeed(answer);
    if (reusable) this.pool.release(this);
    else this.die(closedByUs("not kept after its answer"));
  }

  /** Closes the connection for `error` (once): the request it carries fails with it, or is sent again when that is safe. */
  die(error: Error): void {
    if (this.dead) return;
    this.dead = true;
    clearTimeout(this.connectTimer);
    this.socket.destroy();
    this.pool.closed(this);
    const x = this.exchange;
    this.exchange = undefined;
    if (x !== undefined) {
      x.conn = undefined;
      // The race of keep-alive: the server closed the connection as the request went out.
      const stale = x.reused && this.parser.received === 0 && ["ECONNRESET", "EPIPE"].includes(String(codeOf(error)));
      x.connectionFailed(error, stale);
    }
    this.pool.drain();
  }

  /** Abandons the request it carries (its attempt failed): the connection cannot carry another. */
  abandon(error: Error): void {
    this.exchange = undefined;
    this.die(error);
  }
}

/** One attempt: resolves with the answer, or rejects with `AttemptFailed` (once). */
class Exchange {
  /** The connection carrying it, if any. */
  conn: Connection | undefined;
  /** Whether any of its bytes were written (then it may have reached the service). */
  written = false;
  /** Whether its connection had carried a request before. */
  reused = false;
  done = false;
  private resent = false;
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly pool: Pool,
    readonly request: Request,
    readonly bytes: string | Buffer,
    private readonly resolve: (answer: Answer) => void,
    private readonly reject: (error: AttemptFailed) => void,
  ) {
    this.timer = setTimeout(() => {
      const error = failure("TimeoutError", this.written ? "ETIMEDOUT" : "ECONNTIMEOUT", `no answer within ${request.timeoutMs / 1000} s`);
      this.fail(error);
    }, request.timeoutMs);
  }

  succeed(answer: Answer): void {
    if (this.done) return;
    this.done = true;
    clearTimeout(this.timer);
    this.resolve(answer);
  }

  /** Its connection closed or failed before the answer; `stale` when that was a kept-alive connection closing under it. */
  connectionFailed(error: Error, stale: boolean): void {
    if (this.done) return;
    if (stale && this.mayResend()) return this.resend();
    this.fail(error);
  }

  /** Whether it may be sent again now: once only, and while the caller says it may repeat it (asked now, not when the attempt began). */
  mayResend(): boolean {
    if (this.done || this.resent) return false;
    const may = this.request.mayRepeat;
    return typeof may === "function" ? may() === true : may === true;
  }

  /** Sends it again on a new connection (see `mayResend`). */
  resend(): void {
    this.resent = true; // still `written`: the first sending may have reached the service
    this.pool.resubmit(this);
  }

  private fail(error: Error): void {
    if (this.done) return;
    this.done = true;
    clearTimeout(this.timer);
    const c = this.conn;
    this.conn = undefined;
    c?.abandon(error); // a late answer must not be read as the next request's
    this.reject(new AttemptFailed(error.message || String(error), !this.written, { cause: error }));
  }
}
