// The RESP face under hostile input, over real TCP. fast-check sends random bytes and mutated command
// streams (byte flips, truncations, inserted CR/LF, huge and negative lengths), cut into many socket
// writes, each on a fresh connection, while a bystander ioredis client keeps writing and reading its
// own keys. What must hold (Redis's networking.c behaviour, as src/core/resp-parser.ts specifies it):
//
//   - the process never crashes: no uncaught exception, workers never restart, PING keeps answering;
//   - it never hangs: every complete command is answered within REPLY_TIMEOUT_MS, a protocol error
//     or QUIT closes the connection within it, and the server closes once the client does;
//   - a protocol error ends only its own connection: the replies of the commands before it, then
//     exactly `-ERR Protocol error: …`, then the close; nothing after it runs;
//   - the bystander sees every value it wrote and no error.
//
// How many replies each input should get is predicted by feeding the same bytes to a RespParser in one
// piece (the unit tests hold the parser to a reference; here the server must agree with it whatever
// the chunking). Inputs that end between commands get an ECHO sentinel, so missing or extra replies
// show. The seed is printed; TESSERA_SEED=<seed> replays a run (TESSERA_FUZZ_RUNS scales it).

import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { after, before, test } from 'node:test';
import fc from 'fast-check';
import { Redis } from 'ioredis';
import pino from 'pino';
import {
  RESP_BULK_BYTES_MAX,
  RESP_INLINE_BYTES_MAX,
  RESP_MULTIBULK_ARGS_MAX,
  RespParser,
  RespProtocolError,
} from '../../src/core/resp-parser.js';
import { Tessera } from '../../src/main/node.js';
import { RespServer } from '../../src/main/resp/server.js';
import { eventually, tempDir } from '../integration/helpers.js';
import { replyLength } from '../integration/resp-helpers.js';

/** Longest wait for an expected reply or close; past it the server is hung. */
const REPLY_TIMEOUT_MS = 3000;
/** Longest single bystander round trip (SET then GET) before it counts as starved. */
const BYSTANDER_ROUND_TRIP_MS_MAX = 2000;
const RUNS_SCALE = Number(process.env.TESSERA_FUZZ_RUNS ?? 1);
const RANDOM_BYTES_RUNS = Math.round(1000 * RUNS_SCALE);
const MUTATED_STREAM_RUNS = Math.round(2500 * RUNS_SCALE);
/** Bounds on each property's time, so a slow machine still finishes in about 20 s (runs are ~4 ms). */
const RANDOM_BYTES_TIME_MS_MAX = Math.round(7000 * RUNS_SCALE);
const MUTATED_STREAM_TIME_MS_MAX = Math.round(11_000 * RUNS_SCALE);
const SEED = Number(process.env.TESSERA_SEED ?? Date.now() % 2 ** 31) | 0;

const b = (s: string): Buffer => Buffer.from(s, 'latin1');
const show = (buf: Uint8Array) => JSON.stringify(Buffer.from(buf).toString('latin1'));

// ── The server, the bystander and the crash detector, shared by every test in this file ──────────

let dir: Awaited<ReturnType<typeof tempDir>>;
let node: Tessera;
let server: RespServer;
let port: number;
let pinger: Redis;
let bystander: Bystander;
/** Clients the server holds with no fuzz connection open: the pinger and the bystander. */
let baselineClients: number;
/** Uncaught exceptions and rejections while the server runs; a crash would be one of these. */
const uncaught: unknown[] = [];
const onUncaught = (err: unknown) => uncaught.push(err);

async function client(): Promise<Redis> {
  const redis = new Redis({
    host: '127.0.0.1',
    port,
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    enableOfflineQueue: false,
    retryStrategy: () => null,
    // A reply that never comes fails the command (and the run) instead of hanging the test.
    commandTimeout: REPLY_TIMEOUT_MS,
  });
  await redis.connect();
  return redis;
}

/** Writes and reads back its own keys in a loop, recording anything that goes wrong. */
class Bystander {
  roundTrips = 0;
  slowestMs = 0;
  readonly failures: string[] = [];
  private running = true;
  private readonly done: Promise<void>;

  constructor(private readonly redis: Redis) {
    redis.on('error', (err: Error) => this.failures.push(`connection error: ${err.message}`));
    redis.on('close', () => {
      if (this.running) this.failures.push('the bystander was disconnected');
    });
    this.done = this.loop();
  }

  private async loop(): Promise<void> {
    for (let i = 0; this.running; i++) {
      const key = `bystander:${i % 64}`;
      const value = `${i}:${'v'.repeat(i % 200)}`;
      const startedMs = performance.now();
      try {
        assert.equal(await this.redis.set(key, value), 'OK');
        assert.equal(await this.redis.get(key), value);
        if (i % 16 === 0) assert.deepEqual(await this.redis.mget(key, 'bystander:none'), [value, null]);
      } catch (err) {
        this.failures.push(`round trip ${i}: ${(err as Error).message}`);
        if (this.redis.status !== 'ready') return;
      }
      this.slowestMs = Math.max(this.slowestMs, performance.now() - startedMs);
      this.roundTrips++;
    }
  }

  async stop(): Promise<void> {
    this.running = false;
    await this.done;
  }
}

before(async () => {
  console.log(`resp-fuzz seed ${SEED} (replay: TESSERA_SEED=${SEED})`);
  process.on('uncaughtException', onUncaught);
  process.on('unhandledRejection', onUncaught);
  dir = await tempDir('resp-fuzz');
  node = await Tessera.start({ store: 'lmdb', dataDir: dir.path, workers: 2, fragments: 16 });
  server = await RespServer.listen(node, {
    port: 0,
    bind: '127.0.0.1',
    logger: pino({ level: 'silent' }),
    workerPorts: { base: 0 },
  });
  port = server.address.port;
  pinger = await client();
  bystander = new Bystander(await client());
  baselineClients = server.connections().length;
  assert.equal(baselineClients, 2);
});

after(async () => {
  await bystander?.stop();
  pinger?.disconnect();
  await server?.close();
  await node?.close();
  await dir?.cleanup();
  process.off('uncaughtException', onUncaught);
  process.off('unhandledRejection', onUncaught);
});

/** The process is still whole: nothing thrown, workers never restarted, PING answered. */
async function assertServerWhole(context: string): Promise<void> {
  assert.deepEqual(uncaught, [], `uncaught exception or rejection ${context}`);
  assert.equal(await pinger.ping(), 'PONG', `PING ${context}`);
  const health = await node.health();
  for (const w of health.workers) {
    assert.equal(w.restarts, 0, `worker ${w.index} restarted ${context}`);
    assert.equal(w.state, 'ready', `worker ${w.index} state ${context}`);
  }
}

function assertBystanderUnaffected(): void {
  assert.deepEqual(bystander.failures, [], 'the bystander saw failures');
  assert.ok(
    bystander.slowestMs < BYSTANDER_ROUND_TRIP_MS_MAX,
    `a bystander round trip took ${bystander.slowestMs.toFixed(0)} ms`,
  );
}

interface Exchange {
  replies: Buffer[];
  /** Bytes after the last complete reply. */
  trailing: Buffer;
  /** The server closed (sent FIN or reset) before this side ended the connection. */
  serverClosedFirst: boolean;
  /** What was still awaited when REPLY_TIMEOUT_MS ran out, or null. */
  hung: string | null;
  /** Why the reply stream is not valid RESP, or null. */
  malformed: string | null;
}

/**
 * Sends `chunks` as separate writes on a fresh connection, then waits for `repliesExpected` replies
 * (and for the server's close when `closeExpected`), ends the connection and waits for it to close.
 */
async function exchange(chunks: readonly Buffer[], repliesExpected: number, closeExpected: boolean) {
  const socket = connect({ host: '127.0.0.1', port, noDelay: true });
  const replies: Buffer[] = [];
  let pending: Buffer = Buffer.alloc(0);
  let serverClosed = false;
  let clientEnded = false;
  let closed = false;
  let wake: () => void = () => {};
  let malformed: string | null = null;
  socket.on('data', (chunk: Buffer) => {
    pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
    try {
      for (let end = replyLength(pending); end >= 0 && malformed === null; end = replyLength(pending)) {
        replies.push(Buffer.from(pending.subarray(0, end)));
        pending = pending.subarray(end);
      }
    } catch (err) {
      malformed ??= (err as Error).message;
    }
    wake();
  });
  const noteServerClose = () => {
    if (!clientEnded) serverClosed = true;
    wake();
  };
  socket.on('end', noteServerClose);
  socket.on('error', noteServerClose); // EPIPE / ECONNRESET once the server has closed
  socket.on('close', () => {
    noteServerClose();
    closed = true;
    wake();
  });
  /** Resolves true once `done()` holds, false after REPLY_TIMEOUT_MS. */
  const until = (done: () => boolean) =>
    new Promise<boolean>((resolve) => {
      if (done()) return resolve(true);
      const timer = setTimeout(() => resolve(done()), REPLY_TIMEOUT_MS);
      wake = () => {
        if (!done()) return;
        clearTimeout(timer);
        wake = () => {};
        resolve(true);
      };
    });
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  for (const chunk of chunks) {
    if (serverClosed || socket.destroyed || socket.writableEnded) break;
    await new Promise<void>((resolve) => socket.write(chunk, () => resolve()));
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
  let hung: string | null = null;
  const answered = await until(() => serverClosed || (replies.length >= repliesExpected && !closeExpected));
  if (!answered)
    hung = `${replies.length} of ${repliesExpected} replies${closeExpected ? ' and a close' : ''}`;
  const serverClosedFirst = serverClosed;
  clientEnded = true;
  socket.end();
  if (!(await until(() => closed)) && hung === null) hung = 'the server to close after the client ended';
  socket.destroy();
  return { replies, trailing: pending, serverClosedFirst, hung, malformed } satisfies Exchange;
}

// ── What the server should answer ────────────────────────────────────────────────────────────────

interface Expectation {
  /** Commands the server parses and answers, one reply each. */
  commands: number;
  /** The last of them is QUIT: the server closes after its +OK. */
  quit: boolean;
  /** The exact reply line of the protocol error that ends the input, or null. */
  error: Buffer | null;
  /** The input ends inside a command, which the server must keep waiting for. */
  midCommand: boolean;
}

function expectationOf(input: Buffer): Expectation {
  const parser = new RespParser();
  parser.push(input);
  let commands = 0;
  for (let c = parser.next(); c !== null; c = parser.next()) {
    if (c instanceof RespProtocolError) {
      const line = Buffer.from(`-ERR ${c.message.replace(/[\r\n]/g, ' ')}\r\n`, 'utf8');
      return { commands, quit: false, error: line, midCommand: false };
    }
    commands++;
    if (c.argIs(0, 'QUIT')) return { commands, quit: true, error: null, midCommand: false };
  }
  return { commands, quit: false, error: null, midCommand: parser.bufferedBytes > 0 };
}

/** Cuts `input` at the given offsets (taken modulo its length) into the writes to send. */
function cut(input: Buffer, offsets: readonly number[]): Buffer[] {
  const points = [...new Set(offsets.map((o) => o % (input.length + 1)))].sort((x, y) => x - y);
  const chunks: Buffer[] = [];
  let from = 0;
  for (const p of [...points, input.length]) {
    if (p > from) chunks.push(input.subarray(from, p));
    from = Math.max(from, p);
  }
  return chunks;
}

let sentinels = 0;
/** How the inputs ended, printed so a run that never reaches an outcome shows. */
const outcomes = { protocolError: 0, quit: 0, betweenCommands: 0, midCommand: 0, replies: 0 };

/** One fuzz case: send, then hold the connection's replies and the server to the expectation. */
async function checkInput(input: Buffer, offsets: readonly number[]): Promise<void> {
  try {
    await checkExchange(input, offsets);
  } catch (err) {
    // fast-check prints buffers as byte arrays; the latin1 text is what a reader can follow.
    if (err instanceof Error)
      err.message += `\n    input ${show(input)}, writes ${cut(input, offsets).length}`;
    throw err;
  }
}

async function checkExchange(input: Buffer, offsets: readonly number[]): Promise<void> {
  const expected = expectationOf(input);
  const chunks = cut(input, offsets);
  let sentinel: Buffer | null = null;
  let repliesExpected = expected.commands;
  if (expected.error === null && !expected.quit && !expected.midCommand) {
    // Between commands: an ECHO behind the input must come back last, after exactly one reply each.
    const word = `sentinel-${sentinels++}`;
    chunks.push(b(`*2\r\n$4\r\nECHO\r\n$${word.length}\r\n${word}\r\n`));
    sentinel = b(`$${word.length}\r\n${word}\r\n`);
    repliesExpected++;
  }
  if (expected.error !== null) repliesExpected++;
  const closeExpected = expected.error !== null || expected.quit;
  if (expected.error !== null) outcomes.protocolError++;
  else if (expected.quit) outcomes.quit++;
  else if (sentinel !== null) outcomes.betweenCommands++;
  else outcomes.midCommand++;
  outcomes.replies += repliesExpected;
  const got = await exchange(chunks, repliesExpected, closeExpected);
  const seen = () => got.replies.map((r) => show(r.subarray(0, 80))).join(' ');
  assert.equal(got.malformed, null, `the reply stream is not RESP; replies: ${seen()}`);
  assert.equal(got.hung, null, `hung waiting for ${got.hung}; replies: ${seen()}`);
  assert.equal(got.replies.length, repliesExpected, `reply count; replies: ${seen()}`);
  assert.equal(got.trailing.length, 0, `no partial reply left: ${show(got.trailing)}`);
  for (const reply of got.replies.slice(0, expected.error === null ? undefined : -1)) {
    assert.ok(!b('-ERR Protocol error').equals(reply.subarray(0, 19)), `unexpected ${show(reply)}`);
  }
  const last = got.replies.at(-1);
  if (expected.error !== null) {
    assert.equal(show(last!), show(expected.error), 'the protocol error reply');
    assert.ok(got.serverClosedFirst, 'the server closes after a protocol error');
  } else if (expected.quit) {
    assert.equal(show(last!), show(b('+OK\r\n')), 'QUIT answers OK');
    assert.ok(got.serverClosedFirst, 'the server closes after QUIT');
  } else if (sentinel !== null) {
    assert.equal(show(last!), show(sentinel), 'the sentinel comes back last');
    assert.ok(!got.serverClosedFirst, 'the server keeps a healthy connection open');
  } else {
    assert.ok(!got.serverClosedFirst, 'the server waits for the rest of a partial command');
  }
  await assertServerWhole('after this input');
}

// ── Generators ───────────────────────────────────────────────────────────────────────────────────

const keyArb = fc
  .string({ unit: fc.constantFrom(...'abcxyz019:-_ '), maxLength: 10 })
  .map((s) => b(`fz:${s}`));
const valueArb = fc.uint8Array({ maxLength: 40 }).map((a) => Buffer.from(a));
const pairsArb = fc.array(fc.tuple(keyArb, valueArb), { minLength: 1, maxLength: 3 });
const keysArb = fc.array(keyArb, { minLength: 1, maxLength: 4 });

/** Commands a client would send, some wrong (unknown name, arity, option), all confined to fz: keys. */
const commandArb: fc.Arbitrary<Buffer[]> = fc.oneof(
  fc.tuple(keyArb, valueArb).map(([k, v]) => [b('SET'), k, v]),
  fc
    .tuple(keyArb, valueArb, fc.integer({ min: -1, max: 100 }))
    .map(([k, v, s]) => [b('SET'), k, v, b('EX'), b(`${s}`)]),
  keyArb.map((k) => [b('GET'), k]),
  keysArb.map((ks) => [b('DEL'), ...ks]),
  keysArb.map((ks) => [b('MGET'), ...ks]),
  pairsArb.map((ps) => [b('MSET'), ...ps.flat()]),
  keyArb.map((k) => [b('INCR'), k]),
  fc.tuple(keyArb, valueArb).map(([k, v]) => [b('APPEND'), k, v]),
  keyArb.map((k) => [b('STRLEN'), k]),
  keysArb.map((ks) => [b('EXISTS'), ...ks]),
  fc.constant<Buffer[]>([b('PING')]),
  // On a worker port the main thread runs it, and the connection's later commands wait for it.
  fc.constant<Buffer[]>([b('DBSIZE')]),
  valueArb.map((v) => [b('ECHO'), v]),
  fc.constant<Buffer[]>([b('GET')]),
  fc.array(valueArb, { maxLength: 3 }).map((vs) => [b('NOSUCHCMD'), ...vs]),
  // Commands whose arguments the face or the fragment actor parses, with arbitrary bytes for them.
  fc
    .tuple(
      fc.constantFrom(
        'SETBIT',
        'GETBIT',
        'BITCOUNT',
        'BITPOS',
        'BITFIELD',
        'BITFIELD_RO',
        'INCRBYFLOAT',
        'GETEX',
        'SET',
      ),
      keyArb,
      fc.array(
        fc.oneof(
          valueArb,
          fc.constantFrom(
            ...['GET', 'SET', 'INCRBY', 'OVERFLOW', 'i8', 'u63', '#3', 'BIT', 'EX', '0', '-1', '1e400'].map(
              (w) => b(w),
            ),
          ),
        ),
        { maxLength: 6 },
      ),
    )
    .map(([name, k, args]) => [b(name), k, ...args]),
  fc.tuple(keyArb, fc.array(valueArb, { maxLength: 4 })).map(([k, vs]) => [b('PFADD'), k, ...vs]),
  fc.tuple(keyArb, valueArb).map(([k, v]) => [b('PFCOUNT'), k, v]),
  fc
    .tuple(keyArb, keyArb, fc.array(valueArb, { maxLength: 3 }))
    .map(([k1, k2, vs]) => [b('LCS'), k1, k2, ...vs]),
);

function multibulk(args: readonly Buffer[]): Buffer {
  const parts = [b(`*${args.length}\r\n`)];
  for (const a of args) parts.push(b(`$${a.length}\r\n`), a, b('\r\n'));
  return Buffer.concat(parts);
}

/** An inline command line: each argument double-quoted, with sdssplitargs's \xHH escapes. */
function inline(args: readonly Buffer[]): Buffer {
  const words = args.map((a) => {
    let word = '"';
    for (const byte of a) {
      const printable = byte >= 0x20 && byte < 0x7f && byte !== 0x22 && byte !== 0x5c;
      word += printable ? String.fromCharCode(byte) : `\\x${byte.toString(16).padStart(2, '0')}`;
    }
    return `${word}"`;
  });
  return b(`${words.join(' ')}\r\n`);
}

const streamArb = fc
  .array(fc.tuple(commandArb, fc.boolean(), fc.boolean()), { minLength: 1, maxLength: 8 })
  .map((commands) =>
    Buffer.concat(
      commands.map(([args, asInline, lower]) => {
        const named = lower ? [b(args[0].toString('latin1').toLowerCase()), ...args.slice(1)] : args;
        return asInline ? inline(named) : multibulk(named);
      }),
    ),
  );

/** Length texts that sit on the edges string2ll and the limits draw. */
const LENGTH_TEXTS = [
  '-1',
  '-2',
  '0',
  '00',
  '01',
  '-0',
  '+1',
  ' 1',
  '1 ',
  '',
  '0x10',
  '1e3',
  String(RESP_BULK_BYTES_MAX),
  String(RESP_BULK_BYTES_MAX + 1),
  String(RESP_MULTIBULK_ARGS_MAX),
  String(RESP_MULTIBULK_ARGS_MAX + 1),
  '2147483648',
  '4294967296',
  String(Number.MAX_SAFE_INTEGER + 2),
  '9223372036854775807',
  '9223372036854775808',
  '-9223372036854775808',
  '-9223372036854775809',
  '99999999999999999999',
];

type Mutation =
  | { kind: 'flip'; at: number; mask: number }
  | { kind: 'truncate'; at: number }
  | { kind: 'insert'; at: number; bytes: Buffer }
  | { kind: 'delete'; at: number; count: number }
  | { kind: 'length'; nth: number; text: string }
  | { kind: 'lengthDelta'; nth: number; delta: number };

const insertArb = fc.oneof(
  fc.constantFrom('\r', '\n', '\r\n', '\n\r', '\r\r\n', '*', '$', '"', "'", '\\', '\0').map(b),
  fc.constantFrom('*-1\r\n', '*0\r\n', `$${RESP_BULK_BYTES_MAX + 1}\r\n`, '*1\r\n$-1\r\n', 'QUIT\r\n').map(b),
  fc.uint8Array({ minLength: 1, maxLength: 8 }).map((a) => Buffer.from(a)),
);

const mutationArb: fc.Arbitrary<Mutation> = fc.oneof(
  fc.record({ kind: fc.constant('flip' as const), at: fc.nat(), mask: fc.integer({ min: 1, max: 255 }) }),
  fc.record({ kind: fc.constant('truncate' as const), at: fc.nat() }),
  fc.record({ kind: fc.constant('insert' as const), at: fc.nat(), bytes: insertArb }),
  fc.record({ kind: fc.constant('delete' as const), at: fc.nat(), count: fc.integer({ min: 1, max: 6 }) }),
  fc.record({
    kind: fc.constant('length' as const),
    nth: fc.nat(),
    text: fc.oneof(fc.constantFrom(...LENGTH_TEXTS), fc.integer({ min: -5, max: 70 }).map(String)),
  }),
  fc.record({
    kind: fc.constant('lengthDelta' as const),
    nth: fc.nat(),
    delta: fc.integer({ min: -3, max: 3 }),
  }),
);

/** Digits of the `*<n>` / `$<n>` headers at line starts: [start, end) of each number's text. */
function lengthFields(input: Buffer): Array<[number, number]> {
  const fields: Array<[number, number]> = [];
  const re = /(?:^|\n)[*$](-?\d+)\r/g;
  const text = input.toString('latin1');
  for (let m = re.exec(text); m !== null; m = re.exec(text)) {
    const end = m.index + m[0].length - 1;
    fields.push([end - m[1].length, end]);
  }
  return fields;
}

function mutate(input: Buffer, m: Mutation): Buffer {
  const at = m.kind === 'length' || m.kind === 'lengthDelta' ? 0 : m.at % (input.length + 1);
  switch (m.kind) {
    case 'flip': {
      if (input.length === 0) return input;
      const out = Buffer.from(input);
      out[at % input.length] ^= m.mask;
      return out;
    }
    case 'truncate':
      return input.subarray(0, at);
    case 'insert':
      return Buffer.concat([input.subarray(0, at), m.bytes, input.subarray(at)]);
    case 'delete':
      return Buffer.concat([input.subarray(0, at), input.subarray(at + m.count)]);
    case 'length':
    case 'lengthDelta': {
      const fields = lengthFields(input);
      if (fields.length === 0) return input;
      const [start, end] = fields[m.nth % fields.length];
      const text =
        m.kind === 'length' ? m.text : String(Number(input.toString('latin1', start, end)) + m.delta);
      return Buffer.concat([input.subarray(0, start), b(text), input.subarray(end)]);
    }
  }
}

/** Offsets to cut the input at: none (one write) up to a write every byte or so. */
const offsetsArb = fc.array(fc.nat(), { maxLength: 24 });

const randomBytesArb = fc.oneof(
  fc.uint8Array({ maxLength: 300 }),
  // Random lines: inline commands of random words, and garbage that completes.
  fc
    .array(fc.uint8Array({ maxLength: 24 }), { minLength: 1, maxLength: 12 })
    .map((lines) => Buffer.concat(lines.flatMap((line) => [Buffer.from(line), b('\r\n')]))),
  // Bytes the parser branches on, so random input reaches past the first state.
  fc.array(fc.constantFrom(...b('*$\r\n\r\n0123456789-+ "\'\\x\0PINGSETGEQUIT')), { maxLength: 300 }),
);

function reportOutcomes(property: string): void {
  console.log(`resp-fuzz ${property}: ${JSON.stringify(outcomes)}`);
  for (const k of Object.keys(outcomes) as Array<keyof typeof outcomes>) outcomes[k] = 0;
}

/** The same seed for both properties; a property that finds nothing stops at its time bound. */
function fuzzParameters(runs: number, timeMsMax: number) {
  return { seed: SEED, numRuns: runs, interruptAfterTimeLimit: timeMsMax, includeErrorInReport: true };
}

// ── Tests ────────────────────────────────────────────────────────────────────────────────────────

test('random bytes on fresh connections: no crash, no hang, errors close only their connection', async () => {
  await fc.assert(
    fc.asyncProperty(randomBytesArb, offsetsArb, async (bytes, offsets) => {
      await checkInput(Buffer.from(bytes), offsets);
    }),
    fuzzParameters(RANDOM_BYTES_RUNS, RANDOM_BYTES_TIME_MS_MAX),
  );
  reportOutcomes('random bytes');
  assertBystanderUnaffected();
});

/** Sends mutated command streams to `port` and checks each exchange. */
async function fuzzMutatedStreams(): Promise<void> {
  await fc.assert(
    fc.asyncProperty(
      streamArb,
      fc.array(mutationArb, { maxLength: 4 }),
      offsetsArb,
      async (stream, mutations, offsets) => {
        const input = mutations.reduce(mutate, stream);
        await checkInput(input, offsets);
      },
    ),
    fuzzParameters(MUTATED_STREAM_RUNS, MUTATED_STREAM_TIME_MS_MAX),
  );
}

test('mutated command streams: replies in order, then the protocol error and the close', async () => {
  await fuzzMutatedStreams();
  reportOutcomes('mutated streams');
  assertBystanderUnaffected();
  await eventually(() => server.connections().length === baselineClients, REPLY_TIMEOUT_MS);
  assert.ok(bystander.roundTrips > 0, 'the bystander made progress');
  console.log(
    `resp-fuzz bystander: ${bystander.roundTrips} round trips, slowest ${bystander.slowestMs.toFixed(1)} ms`,
  );
});

test('mutated command streams through a worker port: the same, whether a command runs there, moves or is relayed', async () => {
  const mainPort = port;
  port = server.workerPorts![0];
  try {
    await fuzzMutatedStreams();
  } finally {
    port = mainPort;
  }
  reportOutcomes('mutated streams, worker port');
  await assertServerWhole('after the streams through a worker port');
  assertBystanderUnaffected();
});

test('inline commands: PING, SET then GET, quoted arguments', async () => {
  const ping = await exchange([b('PING\r\n')], 1, false);
  assert.deepEqual(ping.replies.map(show), [show(b('+PONG\r\n'))]);
  const setGet = await exchange([b('SET inline:a b\r\n'), b('GET inline:a\r\n')], 2, false);
  assert.deepEqual(setGet.replies.map(show), [show(b('+OK\r\n')), show(b('$1\r\nb\r\n'))]);
  // sdssplitargs: quotes, \xHH, a bare LF line end, blank lines skipped.
  const quoted = await exchange([b('\r\n\nset inline:q "a b\\x00c" \nget  inline:q\r\n')], 2, false);
  assert.deepEqual(quoted.replies.map(show), [show(b('+OK\r\n')), show(b('$5\r\na b\0c\r\n'))]);
  assert.ok(!ping.serverClosedFirst && !setGet.serverClosedFirst && !quoted.serverClosedFirst);
  await assertServerWhole('after inline commands');
});

test('a half-sent command, then the client goes away', async () => {
  for (const leave of ['end', 'reset'] as const) {
    const key = `half:${leave}`;
    const socket = connect({ host: '127.0.0.1', port, noDelay: true });
    await new Promise<void>((resolve) => socket.once('connect', resolve));
    socket.on('error', () => {});
    const half = b(`*3\r\n$3\r\nSET\r\n$${key.length}\r\n${key}\r\n$5\r\nab`);
    await new Promise<void>((resolve) => socket.write(half, () => resolve()));
    // The server holds the half-sent command before the client goes.
    await eventually(
      () =>
        (
          server.connections().find((c) => c.socket.remotePort === socket.localPort)?.socket as
            | Socket
            | undefined
        )?.bytesRead === half.length,
      REPLY_TIMEOUT_MS,
    );
    const closed = new Promise((resolve) => socket.once('close', resolve));
    if (leave === 'end') socket.end();
    else socket.resetAndDestroy();
    await closed;
    await eventually(() => server.connections().length === baselineClients, REPLY_TIMEOUT_MS);
    assert.equal(await pinger.get(key), null, 'the half-sent SET did not run');
  }
  await assertServerWhole('after half-sent commands');
  assertBystanderUnaffected();
});

/** Inputs Redis refuses, with the replies before the error and the error text (networking.c). */
const PROTOCOL_ERRORS: Array<{
  name: string;
  input: string;
  before: string[];
  error: string;
  trailer: boolean;
}> = [
  {
    name: 'a bulk length over the limit',
    input: `*2\r\n$3\r\nGET\r\n$${RESP_BULK_BYTES_MAX + 1}\r\n`,
    before: [],
    error: 'invalid bulk length',
    trailer: true,
  },
  {
    name: 'a negative bulk length',
    input: '*1\r\n$-1\r\n',
    before: [],
    error: 'invalid bulk length',
    trailer: true,
  },
  {
    name: 'a bulk length past int64',
    input: '*1\r\n$99999999999999999999\r\n',
    before: [],
    error: 'invalid bulk length',
    trailer: true,
  },
  {
    name: 'a multibulk count over the limit',
    input: `*${RESP_MULTIBULK_ARGS_MAX + 1}\r\n`,
    before: [],
    error: 'invalid multibulk length',
    trailer: true,
  },
  {
    name: 'a bulk not followed by CRLF',
    input: '*1\r\n$4\r\nPINGxx',
    before: [],
    error: 'invalid bulk length',
    trailer: true,
  },
  {
    name: 'a missing dollar',
    input: '*1\r\nx\r\n',
    before: [],
    error: "expected '$', got 'x'",
    trailer: true,
  },
  {
    name: 'an error after good commands',
    input: 'PING\r\n*1\r\n$4\r\nPING\r\n*1\r\n$-5\r\n',
    before: ['+PONG', '+PONG'],
    error: 'invalid bulk length',
    trailer: true,
  },
  {
    name: 'unbalanced quotes',
    input: 'SET a "unbalanced\r\n',
    before: [],
    error: 'unbalanced quotes in request',
    trailer: true,
  },
  {
    name: 'an inline line over the limit',
    input: 'A'.repeat(RESP_INLINE_BYTES_MAX + 1),
    before: [],
    error: 'too big inline request',
    trailer: false,
  },
];

test('protocol errors: the replies before, -ERR Protocol error, the close; nothing after runs', async () => {
  for (const [i, c] of PROTOCOL_ERRORS.entries()) {
    const key = `proto:after:${i}`;
    const input = c.input + (c.trailer ? `SET ${key} 1\r\n` : '');
    const got = await exchange([b(input)], c.before.length + 1, true);
    assert.equal(got.malformed, null, `${c.name}: the reply stream is RESP`);
    assert.equal(got.hung, null, `${c.name}: hung waiting for ${got.hung}`);
    assert.deepEqual(
      got.replies.map((r) => r.toString('latin1')),
      [...c.before, `-ERR Protocol error: ${c.error}`].map((line) => `${line}\r\n`),
      c.name,
    );
    assert.ok(got.serverClosedFirst, `${c.name}: the server closes the connection`);
    assert.equal(await pinger.get(key), null, `${c.name}: the command after the error did not run`);
  }
  await eventually(() => server.connections().length === baselineClients, REPLY_TIMEOUT_MS);
  await assertServerWhole('after protocol errors');
  assertBystanderUnaffected();
});

test('after a protocol error or QUIT the server lets go of the socket even if the client never closes', async () => {
  for (const input of ['*1\r\n$-1\r\n', 'QUIT\r\n']) {
    // allowHalfOpen: this side does not answer the server's FIN, as a careless or hostile client.
    const socket = connect({ host: '127.0.0.1', port, allowHalfOpen: true });
    await new Promise<void>((resolve) => socket.once('connect', resolve));
    let reset: string | null = null;
    socket.on('error', (err: NodeJS.ErrnoException) => {
      reset = err.code ?? err.message;
    });
    const ended = new Promise<void>((resolve) => socket.once('end', resolve));
    socket.on('data', () => {});
    socket.write(b(input));
    await ended;
    // A socket the server closed answers later bytes with a reset (EPIPE / ECONNRESET here).
    const deadlineMs = Date.now() + REPLY_TIMEOUT_MS;
    while (reset === null && Date.now() < deadlineMs) {
      socket.write(b('PING\r\n'));
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    socket.destroy();
    assert.notEqual(reset, null, `the server still holds the socket after ${JSON.stringify(input)}`);
  }
});
