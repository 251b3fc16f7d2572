// The RESP codec: parsing a pipelined chunk of 100 commands (SET with a 100-byte value, GET) and
// writing 100 bulk replies into one output buffer, each against a naive string-based baseline.

import { RespCommand, RespParser } from '../src/core/resp-parser.js';
import { RespWriter } from '../src/core/resp-writer.js';
import { type BenchRow, formatTable, isMain, runTasks } from './common.js';

const BATCH = 100;
const VALUE = Buffer.alloc(100, 0x76);

function multibulk(args: readonly Buffer[]): Buffer {
  const parts: Buffer[] = [Buffer.from(`*${args.length}\r\n`)];
  for (const a of args) parts.push(Buffer.from(`$${a.length}\r\n`), a, Buffer.from('\r\n'));
  return Buffer.concat(parts);
}

function keyOf(i: number): Buffer {
  return Buffer.from(`key:${String(i).padStart(4, '0')}`);
}

const SET_CHUNK = Buffer.concat(
  Array.from({ length: BATCH }, (_, i) => multibulk([Buffer.from('SET'), keyOf(i), VALUE])),
);
const GET_CHUNK = Buffer.concat(
  Array.from({ length: BATCH }, (_, i) => multibulk([Buffer.from('GET'), keyOf(i)])),
);

/** A straightforward parser: latin1 string, split on CRLF, walk the lines. The baseline. */
function naiveParse(chunk: Buffer): string[][] {
  const lines = chunk.toString('latin1').split('\r\n');
  const commands: string[][] = [];
  for (let i = 0; i < lines.length - 1; ) {
    const argc = Number(lines[i++].slice(1));
    const args: string[] = [];
    for (let j = 0; j < argc; j++, i += 2) args.push(lines[i + 1]);
    commands.push(args);
  }
  return commands;
}

export async function respBench(): Promise<BenchRow[]> {
  const parser = new RespParser();
  const writer = new RespWriter();
  let sink = 0;

  /** Parse and touch each command through the allocation-free accessors. */
  const parse = (chunk: Buffer) => () => {
    parser.push(chunk);
    for (let c = parser.next(); c instanceof RespCommand; c = parser.next()) sink += c.argLength(c.argc - 1);
  };
  /** Parse and materialise `argv` (one subarray view per argument). */
  const parseArgv = (chunk: Buffer) => () => {
    parser.push(chunk);
    for (let c = parser.next(); c instanceof RespCommand; c = parser.next())
      sink += c.argv[c.argc - 1].length;
  };
  const naive = (chunk: Buffer) => () => {
    for (const c of naiveParse(chunk)) sink += c[c.length - 1].length;
  };
  const write = () => {
    for (let i = 0; i < BATCH; i++) writer.bulk(VALUE);
    sink += writer.take().length;
  };
  const naiveWrite = () => {
    const value = VALUE.toString('latin1');
    const parts: string[] = [];
    for (let i = 0; i < BATCH; i++) parts.push(`$${value.length}\r\n${value}\r\n`);
    sink += Buffer.from(parts.join(''), 'latin1').length;
  };

  const rows = await runTasks('resp (commands/s)', [
    {
      name: 'parse 100 SET (100 B value)',
      opsPerCall: BATCH,
      fn: parse(SET_CHUNK),
      baseline: 'naive parse 100 SET',
    },
    {
      name: 'parse 100 SET + argv views',
      opsPerCall: BATCH,
      fn: parseArgv(SET_CHUNK),
      baseline: 'naive parse 100 SET',
    },
    { name: 'naive parse 100 SET', opsPerCall: BATCH, fn: naive(SET_CHUNK) },
    { name: 'parse 100 GET', opsPerCall: BATCH, fn: parse(GET_CHUNK), baseline: 'naive parse 100 GET' },
    {
      name: 'parse 100 GET + argv views',
      opsPerCall: BATCH,
      fn: parseArgv(GET_CHUNK),
      baseline: 'naive parse 100 GET',
    },
    { name: 'naive parse 100 GET', opsPerCall: BATCH, fn: naive(GET_CHUNK) },
    {
      name: 'write 100 bulk replies (100 B) + take',
      opsPerCall: BATCH,
      fn: write,
      baseline: 'naive write 100 bulks',
    },
    { name: 'naive write 100 bulks', opsPerCall: BATCH, fn: naiveWrite },
  ]);
  if (sink === -1) console.log(sink);
  return rows;
}

if (isMain(import.meta.url)) console.log(formatTable(await respBench()));
