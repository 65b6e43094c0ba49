/**
 * Stands in for the SDK's `src/memory/memorySession` in the vendored tests: a `MemorySession`
 * with the SDK's constructor options that is a `SessionlogSession` on the real services, so every
 * test that makes a MemorySession runs against SessionlogSession. It adds no method of its own:
 * the SDK's MemorySession also implements the optional history rewrite and transaction
 * capabilities, SessionlogSession does not, so the runner takes its path for plain sessions.
 *
 * `sessionId` names the session (a fresh UUID by default, as MemorySession's) within the test's
 * tenant (sdk/tenant.ts). `initialItems` are appended before any other call when the session's
 * log is empty; when it is not, a MemorySession made from an earlier one's items (a test
 * "rehydrating" a session) finds them in the log, and other items there fail its first call.
 * `logger` is accepted and unused: SessionlogSession logs no items.
 */
import { randomUUID } from "node:crypto";

import type { AgentInputItem } from "@openai/agents-core";

import { SessionlogSession } from "../../../src/integrations/openai-agents.js";
import { testClient } from "./tenant.js";

export type MemorySessionOptions = {
  sessionId?: string;
  initialItems?: AgentInputItem[];
  logger?: unknown;
};

/** The writer name the tests' appends carry. */
export const WRITER = "agents-sdk-tests";

/** AGENTS_SDK_OBJECTS=fresh: each call on a new SessionlogSession object, as if from a new process. */
const fresh = process.env["AGENTS_SDK_OBJECTS"] === "fresh";

export class MemorySession extends SessionlogSession {
  private readonly seeded: Promise<void>;

  constructor(options: MemorySessionOptions = {}) {
    super(options.sessionId ?? randomUUID(), testClient(), { writer: WRITER });
    this.seeded = seed(this, (options.initialItems ?? []).map((item) => structuredClone(item)));
    this.seeded.catch(() => undefined); // the first call answers it
  }

  override async getItems(limit?: number): Promise<AgentInputItem[]> {
    await this.seeded;
    return fresh ? this.another().getItems(limit) : super.getItems(limit);
  }

  override async addItems(items: AgentInputItem[]): Promise<void> {
    await this.seeded;
    return fresh ? this.another().addItems(items) : super.addItems(items);
  }

  override async popItem(): Promise<AgentInputItem | undefined> {
    await this.seeded;
    return fresh ? this.another().popItem() : super.popItem();
  }

  override async clearSession(): Promise<void> {
    await this.seeded;
    return fresh ? this.another().clearSession() : super.clearSession();
  }

  private another(): SessionlogSession {
    return new SessionlogSession(this.sessionId, this.client, { writer: WRITER });
  }
}

/** Gives `session` its initial items (SessionlogSession's own methods: a subclass's overrides see none of it). */
async function seed(session: SessionlogSession, items: AgentInputItem[]): Promise<void> {
  if (items.length === 0) return;
  const stored = await SessionlogSession.prototype.getItems.call(session);
  if (stored.length === 0) return SessionlogSession.prototype.addItems.call(session, items);
  if (JSON.stringify(stored) !== JSON.stringify(items)) {
    throw new Error(`MemorySession ${session.sessionId}: its log holds ${stored.length} items other than the ${items.length} initialItems`);
  }
}
