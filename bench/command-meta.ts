// Writes src/main/resp/command-meta.ts: what COMMAND INFO and COMMAND DOCS answer for the commands
// Tessera supports, taken from a redis-server 7.0.15 (whose replies Tessera matches). Rerun it when a
// command or a container's subcommand is added:
//
//   npx tsc -p tsconfig.test.json && node .build/bench/command-meta.js && npx biome format --write src/main/resp/command-meta.ts
//
// It starts its own redis-server (on a unix socket, no port), asks it in RESP3 so sets, maps and
// simple strings keep their kind, keeps of each container only the subcommands Tessera implements
// (IMPLEMENTED_SUBCOMMANDS, sorted by name), and fails when Redis's arity or key positions disagree with Tessera's
// command table. Commands Tessera refuses, and its own TESSERA.* commands, get no entry.

import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { MetaValue } from '../src/main/resp/command-meta-value.js';
import { COMMANDS } from '../src/main/resp/commands.js';
import { UNSUPPORTED_COMMANDS } from '../src/main/resp/unsupported-commands.js';

const OUTPUT = fileURLToPath(new URL('../../src/main/resp/command-meta.ts', import.meta.url));
const REDIS_VERSION = '7.0.15';

/**
 * Per container, the subcommands Tessera runs (lower case). Those it refuses (CONFIG SET, MEMORY
 * STATS…) and Redis 7.2's CLIENT SETINFO and CLIENT NO-TOUCH, which 7.0.15 does not describe, are
 * left out.
 */
const IMPLEMENTED_SUBCOMMANDS: Record<string, readonly string[]> = {
  client: ['setname', 'getname', 'id', 'info', 'list', 'kill', 'reply', 'no-evict', 'help'],
  command: ['count', 'list', 'info', 'docs', 'getkeys', 'help'],
  config: ['get', 'help'],
  slowlog: ['get', 'len', 'reset', 'help'],
  latency: ['latest', 'history', 'reset', 'doctor', 'help'],
  memory: ['usage', 'help'],
  object: ['encoding', 'refcount', 'freq', 'idletime', 'help'],
  cluster: ['info', 'slots', 'shards', 'nodes', 'myid', 'keyslot', 'countkeysinslot', 'help'],
  pubsub: ['channels', 'shardchannels', 'numsub', 'shardnumsub', 'numpat', 'help'],
};

/** A RESP3 reply read whole, each value in the form command-meta.ts stores (MetaValue). */
class Resp3Reader {
  private at = 0;
  constructor(private readonly text: Buffer) {}

  done(): boolean {
    return this.at >= this.text.length;
  }

  /** The next value; undefined when the buffer ends inside it. */
  read(): MetaValue | null | undefined {
    const end = this.text.indexOf('\r\n', this.at);
    if (end === -1) return undefined;
    const kind = String.fromCharCode(this.text[this.at]);
    const line = this.text.toString('utf8', this.at + 1, end);
    this.at = end + 2;
    switch (kind) {
      case '$': {
        const n = Number(line);
        if (this.at + n + 2 > this.text.length) return undefined;
        const value = this.text.toString('utf8', this.at, this.at + n);
        this.at += n + 2;
        return value;
      }
      case ':':
        return Number(line);
      case '+':
        return { '+': line };
      case '_':
        return null;
      case '-':
        throw new Error(`redis-server answered an error: ${line}`);
      case '*':
      case '~':
      case '%': {
        const count = kind === '%' ? Number(line) * 2 : Number(line);
        const items: Array<MetaValue | null> = [];
        for (let i = 0; i < count; i++) {
          const item = this.read();
          if (item === undefined) return undefined;
          items.push(item);
        }
        if (kind === '*') return items as MetaValue[];
        if (kind === '~') return setOf(items as MetaValue[]);
        const map: Record<string, MetaValue> = {};
        for (let i = 0; i < items.length; i += 2) map[items[i] as string] = items[i + 1] as MetaValue;
        return map;
      }
      default:
        throw new Error(`unexpected RESP3 type ${kind}`);
    }
  }
}

/** A set of simple strings is stored as `{ '~+': [...] }`, any other set as `{ '~': [...] }`. */
function setOf(items: MetaValue[]): MetaValue {
  const simple = (v: MetaValue) => typeof v === 'object' && v !== null && '+' in v;
  if (items.length > 0 && items.every(simple)) {
    return { '~+': items.map((v) => (v as { '+': string })['+']) };
  }
  return { '~': items };
}

/** Sends each command and reads one reply for it. */
async function ask(socket: Socket, commands: string[][]): Promise<Array<MetaValue | null>> {
  let received = Buffer.alloc(0);
  const replies: Array<MetaValue | null> = [];
  return new Promise((resolve, reject) => {
    socket.on('error', reject);
    socket.on('data', (chunk) => {
      received = Buffer.concat([received, chunk]);
      try {
        const reader = new Resp3Reader(received);
        const got: Array<MetaValue | null> = [];
        while (!reader.done()) {
          const value = reader.read();
          if (value === undefined) return;
          got.push(value);
        }
        if (got.length === commands.length) {
          replies.push(...got);
          resolve(replies);
        }
      } catch (err) {
        reject(err);
      }
    });
    for (const args of commands) {
      socket.write(`*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join('')}`);
    }
  });
}

async function startRedis(dir: string): Promise<{ socket: Socket; stop: () => void }> {
  const path = join(dir, 'redis.sock');
  const child = spawn(
    'redis-server',
    ['--port', '0', '--unixsocket', path, '--save', '', '--appendonly', 'no'],
    {
      stdio: 'ignore',
    },
  );
  for (let attempt = 0; ; attempt++) {
    try {
      const socket = await new Promise<Socket>((resolve, reject) => {
        const s = connect(path, () => resolve(s));
        s.once('error', reject);
      });
      return { socket, stop: () => child.kill() };
    } catch (err) {
      if (attempt > 100) throw err;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
}

function field(map: MetaValue, key: string): MetaValue | undefined {
  return (map as Record<string, MetaValue>)[key];
}

/** A container's INFO and DOCS with only the subcommands Tessera implements, in Redis's order. */
function keepImplemented(name: string, info: MetaValue[], docs: Record<string, MetaValue>): void {
  const implemented = IMPLEMENTED_SUBCOMMANDS[name];
  const subInfos = info[9] as MetaValue[] | { '~': MetaValue[] };
  if (implemented === undefined) {
    if (Array.isArray(subInfos))
      throw new Error(`${name} has subcommands: list them in IMPLEMENTED_SUBCOMMANDS`);
    return;
  }
  const keep = (fullname: string) => implemented.includes(fullname.slice(name.length + 1));
  // By name: Redis lists them in its hash table's order, which differs from one process to the next.
  const kept = (subInfos as MetaValue[][])
    .filter((sub) => keep(sub[0] as string))
    .sort((a, b) => compareText(a[0] as string, b[0] as string));
  if (kept.length !== implemented.length)
    throw new Error(`redis-server lacks one of ${name}'s ${implemented}`);
  info[9] = kept;
  const subDocs = field(docs, 'subcommands') as Record<string, MetaValue>;
  docs.subcommands = Object.fromEntries(
    Object.entries(subDocs)
      .filter(([fullname]) => keep(fullname))
      .sort(([a], [b]) => compareText(a, b)),
  );
}

/**
 * Commands newer than Redis 7.0 that Tessera runs, described as the Redis release that added them
 * describes them (its src/commands/*.json), since redis-server 7.0.15 cannot be asked.
 */
const NEWER_COMMANDS: Record<string, { info: MetaValue[]; doc: MetaValue }> = {
  // Redis 7.2's waitaof.json.
  waitaof: {
    info: [
      'waitaof',
      4,
      { '~+': ['noscript'] },
      0,
      0,
      0,
      { '~+': ['@slow', '@connection'] },
      { '~': ['request_policy:all_shards', 'response_policy:agg_min'] },
      { '~': [] },
      { '~': [] },
    ],
    doc: {
      summary:
        'Blocks until all of the preceding write commands sent by the connection are written to the append-only file of the master and/or replicas.',
      since: '7.2.0',
      group: 'generic',
      complexity: 'O(1)',
      arguments: [
        { name: 'numlocal', type: 'integer' },
        { name: 'numreplicas', type: 'integer' },
        { name: 'timeout', type: 'integer' },
      ],
    },
  },
};

const compareText = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

async function main(): Promise<void> {
  const refused = new Set(UNSUPPORTED_COMMANDS.map((c) => c.name));
  const specs = COMMANDS.filter((c) => !refused.has(c.name) && !c.name.startsWith('TESSERA.'));
  const dir = mkdtempSync(join(tmpdir(), 'command-meta-'));
  const redis = await startRedis(dir);
  try {
    const names = specs.map((c) => c.name.toLowerCase());
    const asked = names.filter((name) => !Object.hasOwn(NEWER_COMMANDS, name));
    const [hello, askedInfos, docs] = await ask(redis.socket, [
      ['HELLO', '3'],
      ['COMMAND', 'INFO', ...asked],
      ['COMMAND', 'DOCS', ...asked],
    ]);
    const infoOf = new Map(asked.map((name, i) => [name, (askedInfos as Array<MetaValue[] | null>)[i]]));
    const version = field(hello as MetaValue, 'version');
    if (version !== REDIS_VERSION) throw new Error(`redis-server is ${version}, not ${REDIS_VERSION}`);
    const entries = specs.map((spec, i) => {
      const name = names[i];
      const newer = NEWER_COMMANDS[name];
      const info = newer === undefined ? (infoOf.get(name) ?? null) : newer.info;
      const doc = (newer === undefined ? field(docs as MetaValue, name) : newer.doc) as
        | Record<string, MetaValue>
        | undefined;
      if (info === null || doc === undefined) throw new Error(`redis-server ${REDIS_VERSION} has no ${name}`);
      const [arity, first, last, step] = [info[1], info[3], info[4], info[5]];
      if (arity !== spec.arity || first !== spec.keys[0] || last !== spec.keys[1] || step !== spec.keys[2]) {
        throw new Error(
          `${name}: redis-server's arity and keys ${[arity, first, last, step]} differ from Tessera's`,
        );
      }
      keepImplemented(name, info, doc);
      return { name, info, doc };
    });
    writeFileSync(OUTPUT, source(entries));
    console.log(`wrote ${OUTPUT}: ${entries.length} commands`);
  } finally {
    redis.socket.destroy();
    redis.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

function source(entries: Array<{ name: string; info: MetaValue[]; doc: MetaValue }>): string {
  const lines = [
    '// Generated by bench/command-meta.ts from redis-server 7.0.15 (and, for the few newer commands,',
    '// the command JSON of the Redis release that added them); do not edit by hand (rerun it).',
    '//',
    "// What COMMAND INFO and COMMAND DOCS answer for the commands Tessera supports: Redis 7.0's command",
    '// metadata (src/commands/*.json in the Redis repository, BSD-3-Clause, Copyright (c) 2006-2020,',
    '// Salvatore Sanfilippo), as redis-server 7.0.15 replies it, keeping of each container only the',
    "// subcommands Tessera implements. Flags are Redis's: those about scripts, loading and replicas",
    '// (noscript, loading, stale…) describe nothing Tessera does differently. The value encoding is',
    "// command-meta-value.ts's.",
    '',
    "import type { MetaValue } from './command-meta-value.js';",
    '',
    "/** COMMAND INFO of each supported command, in the command table's order. */",
    `export const COMMAND_INFO: readonly MetaValue[] = ${JSON.stringify(entries.map((e) => e.info))};`,
    '',
    '/** COMMAND DOCS of each supported command, by lower-case name. */',
    `export const COMMAND_DOCS: Readonly<Record<string, MetaValue>> = ${JSON.stringify(
      Object.fromEntries(entries.map((e) => [e.name, e.doc])),
    )};`,
    '',
  ];
  return lines.join('\n');
}

await main();
