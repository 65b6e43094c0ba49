/** Harness scripts run as processes, to be killed with kill -9 and run again (as clients/python/tests/processes.py). */
import { spawn, type ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { Corner } from "./stackcorner.js";

const HERE = dirname(fileURLToPath(import.meta.url));

/** One run of a harness script of this folder, its stdout read line by line. */
export class Harness {
  readonly process: ChildProcess;
  private readonly lines: Record<string, unknown>[] = [];
  private readonly waiting: ((line: Record<string, unknown> | undefined) => void)[] = [];
  private exited = false;

  constructor(script: string, c: Corner, token: string, tool: string, effect: string, ...extra: string[]) {
    this.process = spawn(process.execPath, [
      "--import", "tsx", join(HERE, script), "--ingest", c.ingestUrl, "--recovery", c.recoveryUrl, "--token", token,
      "--service", c.counterUrl, "--tool", tool, "--effect", effect, ...extra,
    ], { stdio: ["ignore", "pipe", "inherit"] });
    createInterface({ input: this.process.stdout! }).on("line", (line) => {
      const parsed = JSON.parse(line) as Record<string, unknown>;
      const waiter = this.waiting.shift();
      if (waiter) waiter(parsed); else this.lines.push(parsed);
    });
    this.process.on("exit", () => {
      this.exited = true;
      for (const w of this.waiting.splice(0)) w(undefined);
    });
  }

  /** The next line it prints (fails after the deadline, or when it exits without one). */
  async next(deadlineS = 60): Promise<Record<string, unknown>> {
    const ready = this.lines.shift();
    if (ready) return ready;
    if (this.exited) throw new Error(`the harness exited (${this.process.exitCode}) without saying more`);
    let timer: NodeJS.Timeout | undefined;
    const line = await Promise.race([
      new Promise<Record<string, unknown> | undefined>((r) => this.waiting.push(r)),
      new Promise<undefined>((r) => (timer = setTimeout(() => r(undefined), deadlineS * 1000))),
    ]);
    clearTimeout(timer);
    if (!line) {
      this.process.kill("SIGKILL");
      throw new Error(`the harness said nothing for ${deadlineS}s or exited (exit ${this.process.exitCode})`);
    }
    return line;
  }

  /** SIGKILL: no handler, no flush, no goodbye. */
  async kill(): Promise<void> {
    if (this.exited) return;
    const gone = new Promise((r) => this.process.once("exit", r));
    this.process.kill("SIGKILL");
    await gone;
  }

  /** Waits for the process to end. */
  async exit(): Promise<number | null> {
    if (!this.exited) await new Promise((r) => this.process.once("exit", r));
    return this.process.exitCode;
  }
}
