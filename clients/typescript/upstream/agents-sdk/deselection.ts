/**
 * The deselection list (deselected.tsv): the vendored tests left out, each with its reason. Lines
 * are `FILE<TAB>TEST<TAB>REASON`: FILE under test/, TEST the test's name with its describe blocks
 * before it, ` > ` between them (a trailing `*` takes every test whose name begins so), REASON
 * one line. `#` begins a comment line.
 */
import { readFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
export const TESTS = join(here, "test");

export interface Deselection {
  file: string;
  test: string;
  reason: string;
  line: number;
}

export function deselections(): Deselection[] {
  const entries: Deselection[] = [];
  readFileSync(join(here, "deselected.tsv"), "utf8").split("\n").forEach((text, at) => {
    if (text.trim() === "" || text.startsWith("#")) return;
    const [file, test, reason, ...rest] = text.split("\t");
    if (!file || !test || !reason || rest.length > 0) throw new Error(`deselected.tsv:${at + 1}: not FILE<TAB>TEST<TAB>REASON`);
    entries.push({ file, test, reason, line: at + 1 });
  });
  return entries;
}

/** The entry that deselects the test `name` (describe blocks first, ` > ` between) of `filepath`. */
export function deselectionOf(entries: Deselection[], filepath: string, name: string): Deselection | undefined {
  const file = relative(TESTS, filepath);
  return entries.find((e) => e.file === file && (e.test.endsWith("*") ? name.startsWith(e.test.slice(0, -1)) : name === e.test));
}
