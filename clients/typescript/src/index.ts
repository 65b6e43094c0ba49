/**
 * sessionlog for TypeScript harnesses: a client for the ingest and recovery services, a session
 * writer with resume, and durable tools that never repeat a recorded side effect.
 *
 * Skeleton: the names below are the package's public surface; their bodies land in the next commits.
 */

/** A bearer credential (a JWT or an `slk_` API key), or a function answering the current one. */
export type Credential = string | (() => string | Promise<string>);

/** Where the services are and how to reach them. */
export interface ClientOptions {
  ingestUrl?: string;
  recoveryUrl?: string;
  token?: Credential;
  /** Seconds to retry transport errors and 503s with the same request (default 30). */
  retryFor?: number;
  /** Seconds one request may take (default 30). */
  timeout?: number;
}

/** A client of the ingest and recovery services (skeleton). */
export class Client {
  constructor(readonly options: ClientOptions = {}) {}
}

/** One writer of one session (skeleton). */
export class Session {
  private constructor(readonly client: Client, readonly sessionId: string) {}
}
