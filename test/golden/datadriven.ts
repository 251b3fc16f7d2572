// Golden-file scripts in the style of etcd's datadriven tests (STYLE.md "Tests"):
//
//   # a comment
//   command key=value key2="quoted value" flag
//   ----
//   expected output lines
//
// Cases are separated by blank lines. `TESSERA_REWRITE=1` rewrites the expected outputs in place;
// read the diff before committing it.

import assert from 'node:assert/strict';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export interface Command {
  name: string;
  args: Map<string, string>;
  line: string;
}

interface Case {
  command: Command;
  expected: string;
  /** Lines of the file before this case's command (comments, blank lines), kept on rewrite. */
  preamble: string[];
}

/** Directory of golden files: <repo>/test/data/<module>, found from the compiled test's location. */
export function dataDir(module: string): string {
  return fileURLToPath(new URL(`../../../test/data/${module}/`, import.meta.url));
}

export function goldenFiles(module: string): string[] {
  const dir = dataDir(module);
  return readdirSync(dir)
    .filter((f) => f.endsWith('.txt'))
    .sort()
    .map((f) => join(dir, f));
}

export function parseCommand(line: string): Command {
  const tokens = line.match(/(?:[^\s"]+|"(?:[^"\\]|\\.)*")+/g) ?? [];
  const [name, ...rest] = tokens;
  const args = new Map<string, string>();
  for (const token of rest) {
    const eq = token.indexOf('=');
    if (eq === -1) args.set(token, '');
    else {
      const raw = token.slice(eq + 1);
      args.set(token.slice(0, eq), raw.startsWith('"') ? (JSON.parse(raw) as string) : raw);
    }
  }
  return { name: name ?? '', args, line };
}

function parseFile(text: string): { cases: Case[]; trailer: string[] } {
  const lines = text.split('\n');
  const cases: Case[] = [];
  let preamble: string[] = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (line.trim() === '' || line.startsWith('#')) {
      preamble.push(line);
      i++;
      continue;
    }
    assert.equal(lines[i + 1], '----', `expected ---- after "${line}"`);
    i += 2;
    const out: string[] = [];
    while (i < lines.length && lines[i] !== '') out.push(lines[i++]);
    cases.push({ command: parseCommand(line), expected: out.join('\n'), preamble });
    preamble = [];
  }
  return { cases, trailer: preamble };
}

/** Runs every case of `file` through `handle`; compares or rewrites the expected outputs. */
export function runGoldenFile(file: string, handle: (command: Command) => string): void {
  const { cases, trailer } = parseFile(readFileSync(file, 'utf8'));
  const rewrite = process.env.TESSERA_REWRITE === '1';
  const out: string[] = [];
  for (const c of cases) {
    const actual = handle(c.command).trimEnd();
    if (rewrite) {
      out.push(...c.preamble, c.command.line, '----', ...(actual === '' ? [] : actual.split('\n')));
    } else {
      assert.equal(actual, c.expected, `${file}: "${c.command.line}"`);
    }
  }
  if (rewrite) {
    while (trailer.length > 0 && trailer[trailer.length - 1] === '') trailer.pop();
    writeFileSync(file, `${[...out, ...trailer].join('\n')}\n`);
  }
}

export function intArg(c: Command, name: string, fallback?: number): number {
  const raw = c.args.get(name);
  if (raw === undefined) {
    if (fallback === undefined) throw new Error(`${c.line}: missing ${name}=`);
    return fallback;
  }
  const n = Number(raw);
  if (!Number.isFinite(n)) throw new Error(`${c.line}: ${name}=${raw} is not a number`);
  return n;
}
