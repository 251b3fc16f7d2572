// Tessera against redis-server itself. fast-check draws short sequences of string, bit, HyperLogLog
// and keyspace commands (good and bad arguments, wrong arity, option clashes, numbers at and past the 64-bit
// edges, floats Redis refuses) over a few keys in one hash slot, sends each sequence to a Tessera
// node and to a real redis-server, both emptied first and speaking the same protocol (RESP2 or
// RESP3, drawn), and requires the same reply bytes, command by command, then the same value and
// deadline for every key. Only what must differ is loosened:
// KEYS answers in no defined order (compared sorted), and a remaining time or deadline may differ
// by the time between the two servers' clocks reading it.
//
// Deadlines stay inside Tessera's 48-bit range (up to the year 10889; Tessera refuses later ones
// where Redis accepts them) and relative expiries are long, so nothing expires while a sequence runs.
// The seed is printed; TESSERA_SEED=<seed> replays a run. Without redis-server on PATH the file is
// skipped, unless TESSERA_REQUIRE_REDIS_TOOLS=1 (CI) makes that a failure.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import fc from 'fast-check';
import type { Redis } from 'ioredis';
import { dumpPayload, restoreValue } from '../../src/core/dump-payload.js';
import { slotOf } from '../../src/core/keyspace.js';
import { lcsTableBytes } from '../../src/core/lcs.js';
import { VALUE_BYTES_MAX_DEFAULT } from '../../src/core/limits.js';
import { UNSUPPORTED_COMMANDS } from '../../src/main/resp/unsupported-commands.js';
import {
  newClient,
  onPath,
  RawClient,
  REDIS_INSTALL_HINT,
  REQUIRE_REDIS_TOOLS,
  type RedisServer,
  type RespFixture,
  redisServerSkip,
  startRedisServer,
  startResp,
} from './resp-helpers.js';

const SEED = Number(process.env.TESSERA_SEED ?? Date.now() % 2 ** 31) | 0;
const SEQUENCE_RUNS = 400;
/** Bound on the property's time, so a slow machine still finishes (a run takes a few ms). */
const SEQUENCE_TIME_MS_MAX = 20_000;
const SEQUENCE_COMMANDS_MAX = 24;
/**
 * How far apart the two servers' remaining times (or deadlines) may be, in their own unit: the
 * milliseconds between their clocks reading, with room for a stall of a loaded machine. A real fault
 * (a wrong unit, a lost deadline) is off by far more.
 */
const SECONDS_SLACK = 5;
const MILLIS_SLACK = 5000;

const skip = redisServerSkip();

// ── What the sequences are made of ──────────────────────────────────────────────────────────────

/** One hash slot, so multi-key commands are legal in Tessera; names chosen to exercise KEYS globs. */
const KEYS = ['{p}a', '{p}b', '{p}ab', '{p}A*'];
const VALUES = [
  '',
  '0',
  '1',
  '-1',
  '10',
  '3.5',
  '-0',
  '007',
  ' 1',
  '1 ',
  '+5',
  '5.',
  '.5',
  '1e3',
  '0x10',
  'abc',
  'hello world',
  'ohmytext',
  'mynewtext',
  '9223372036854775807',
  '-9223372036854775808',
  '9223372036854775808',
  '1.5e308',
  'inf',
  '-inf',
  'nan',
  '0.1',
  '\x00\xff\r\n',
];
const INTEGERS = [
  '0',
  '1',
  '-1',
  '5',
  '100',
  '-100',
  '9223372036854775807',
  '-9223372036854775808',
  '1.5',
  'x',
  '',
  '99999999999999999999',
  '+3',
  ' 2',
];
const FLOATS = [
  '0',
  '1',
  '-1',
  '0.1',
  '1.5',
  '-2.25',
  '1e3',
  '3e-5',
  'inf',
  'nan',
  'x',
  '',
  '1e308',
  '5.0',
  '.5',
  '0x1p3',
  '1.7976931348623157e308',
  '0x10',
  '0x1.8p1',
  '1e4932',
  '-1e4932',
  'infinity',
  '123456789.123456789',
  '2.5e-17',
  '1e-20',
  ' 1',
  '1e',
];
/** Relative expiries: long enough never to pass during a run, plus the ones both servers refuse. */
const SECONDS = ['100', '1000', '100000', '0', '-1', '-100', 'x', '', '1.5', '99999999999999999999'];
const MILLIS = ['100000', '1000000', '100000000', '0', '-1', 'x', '1.5', '9223372036854775807'];
const nowSeconds = Math.floor(Date.now() / 1000);
/**
 * Absolute deadlines in seconds: past, near future, far future (2286), and invalid. SET takes no past
 * one: Redis stores such a key and reclaims it lazily, so until then its DBSIZE counts a key that
 * no command can read, where Tessera counts live keys only.
 */
const AT_SECONDS = [
  '1',
  '0',
  '-5',
  'x',
  String(nowSeconds + 50_000),
  String(nowSeconds + 500_000),
  '9999999999',
];
const AT_MILLIS = ['1', '0', 'x', String((nowSeconds + 50_000) * 1000), '99999999999999'];
const isPast = (at: string) => at === '1';
const SET_AT_SECONDS = AT_SECONDS.filter((at) => !isPast(at));
const SET_AT_MILLIS = AT_MILLIS.filter((at) => !isPast(at));
const BIT_OFFSETS = ['0', '1', '7', '8', '15', '23', '100', '-1', 'x', '4294967296'];
const BIT_INDEXES = ['0', '1', '2', '-1', '-2', '5', '9', '100', '-100', 'x'];
const BIT_UNITS = ['BYTE', 'BIT', 'bit', 'BAD'];
const FIELD_TYPES = [
  'i1',
  'i5',
  'i8',
  'i16',
  'i63',
  'i64',
  'u1',
  'u5',
  'u8',
  'u16',
  'u63',
  'u64',
  'I8',
  'i0',
  'u',
  'x',
];
const FIELD_OFFSETS = ['0', '1', '7', '8', '13', '#0', '#1', '#3', '100', '-1', 'x', '4294967296', '#-1'];
const FIELD_VALUES = [...INTEGERS, '127', '128', '255', '256', '-129'];
/** RESTORE payloads: DUMPs of a few values (integers, text, binary), one with a bad checksum, junk. */
const PAYLOADS = [
  ...['7', '-40000', 'hello', '\x00\xff\r\n', 'x'.repeat(40)].map((v) =>
    dumpPayload(Buffer.from(v, 'latin1')).toString('latin1'),
  ),
  `${dumpPayload(Buffer.from('v')).toString('latin1').slice(0, -1)}!`,
  'junk',
];
const PATTERNS = [
  '*',
  '{p}a*',
  '{p}?',
  '{p}[ab]',
  '{p}[^a]*',
  '*b',
  '{p}A\\*',
  '{p}A*',
  '[',
  '{p}[a-b]?',
  'x*',
];

type Command = readonly string[];
/** What a command is built from: words, and lists of them nested any way (spliced in, in order). */
type Part = string | readonly Part[];
const splice = (part: Part): string[] => (typeof part === 'string' ? [part] : part.flatMap(splice));
const key = fc.constantFrom(...KEYS);
const value = fc.constantFrom(...VALUES);
const pick = (...options: string[]) => fc.constantFrom(...options);
/** A command from fixed words and drawn parts. */
const command = (...parts: Array<string | fc.Arbitrary<Part>>): fc.Arbitrary<Command> =>
  fc.tuple(...parts.map((p) => (typeof p === 'string' ? fc.constant(p) : p))).map(splice);
/** Either nothing or one of `arbs`' drawings. */
const optional = (...arbs: Array<fc.Arbitrary<Part>>): fc.Arbitrary<Part> =>
  fc.oneof(fc.constant([]), ...arbs);
const some = <T>(arb: fc.Arbitrary<T>, min: number, max: number) =>
  fc.array(arb, { minLength: min, maxLength: max });

/** EX / PX / EXAT / PXAT with their numbers, absolute ones drawn from the lists given. */
const expiries = (atSeconds: string[], atMillis: string[]) => [
  command('EX', fc.constantFrom(...SECONDS)),
  command('PX', fc.constantFrom(...MILLIS)),
  command('EXAT', fc.constantFrom(...atSeconds)),
  command('PXAT', fc.constantFrom(...atMillis)),
];
const setExpiry = optional(...expiries(SET_AT_SECONDS, SET_AT_MILLIS), fc.constant('KEEPTTL'));
const getexExpiry = optional(...expiries(AT_SECONDS, AT_MILLIS), fc.constant('PERSIST'));
/** Option lists that are wrong on purpose: clashes, repeats, missing numbers, unknown words. */
const badSetOptions = fc.constantFrom(
  ['NX', 'XX'],
  ['EX', '10', 'PX', '100'],
  ['EX', '10', 'KEEPTTL'],
  ['EX'],
  ['PXAT'],
  ['GETX'],
  ['KEEPTTL', 'EX', 'x'],
  ['EX', 'x', 'NX', 'XX'],
  ['GET', 'GET'],
  ['EX', '10', 'EX', '10'],
);

const field = () => [pick(...FIELD_TYPES), pick(...FIELD_OFFSETS)] as const;
const BITFIELD_SUBCOMMAND: fc.Arbitrary<Command> = fc.oneof(
  { arbitrary: command('GET', ...field()), weight: 3 },
  { arbitrary: command('SET', ...field(), pick(...FIELD_VALUES)), weight: 2 },
  { arbitrary: command('INCRBY', ...field(), pick(...FIELD_VALUES)), weight: 3 },
  command('OVERFLOW', pick('WRAP', 'SAT', 'fail', 'BAD')),
  // Cut short or unknown.
  fc.constantFrom(['GET', 'i8'], ['SET', 'u8', '0'], ['OVERFLOW'], ['NOPE']),
);

const COMMAND: fc.Arbitrary<Command> = fc.oneof(
  {
    arbitrary: command('SET', key, value, optional(pick('NX', 'XX')), optional(pick('GET')), setExpiry),
    weight: 4,
  },
  command('SET', key, value, badSetOptions),
  { arbitrary: command('GET', key), weight: 3 },
  command('GETDEL', key),
  command('GETEX', key, getexExpiry),
  command('GETEX', key, pick('EX', 'PX', 'EXAT', 'PERSIST', 'BAD'), optional(fc.constantFrom(...SECONDS))),
  command('SETNX', key, value),
  command('SETEX', key, fc.constantFrom(...SECONDS), value),
  command('PSETEX', key, fc.constantFrom(...MILLIS), value),
  command('MSET', some(command(key, value), 1, 3), optional(key)),
  command('MSETNX', some(command(key, value), 1, 3)),
  command('MGET', some(key, 1, 4)),
  command(pick('DEL', 'UNLINK', 'EXISTS', 'TOUCH'), some(key, 1, 3)),
  { arbitrary: command(pick('INCR', 'DECR'), key), weight: 2 },
  { arbitrary: command(pick('INCRBY', 'DECRBY'), key, fc.constantFrom(...INTEGERS)), weight: 2 },
  { arbitrary: command('INCRBYFLOAT', key, fc.constantFrom(...FLOATS)), weight: 2 },

  command('APPEND', key, value),
  command('GETSET', key, value),
  command('DUMP', key),
  {
    arbitrary: command(
      'RESTORE',
      key,
      pick('0', '100000', '-1', 'x'),
      pick(...PAYLOADS),
      some(pick('REPLACE', 'ABSTTL', 'IDLETIME', '5', 'FREQ', '300', 'BAD'), 0, 3),
    ),
    weight: 2,
  },
  {
    arbitrary: command(
      'LCS',
      key,
      key,
      some(pick('LEN', 'IDX', 'withmatchlen', 'MINMATCHLEN', '2', '-1', 'x'), 0, 4),
    ),
    weight: 2,
  },
  // Offsets stay small: a valid offset near 2^32 makes Redis allocate 512 MiB (Tessera refuses it).
  { arbitrary: command('SETBIT', key, pick(...BIT_OFFSETS), pick('0', '1', '2', '-1', 'x')), weight: 2 },
  command('GETBIT', key, pick(...BIT_OFFSETS)),
  { arbitrary: command('PFADD', key, some(pick('a', 'b', 'c', 'x1', 'x2', 'hello', ''), 0, 4)), weight: 2 },
  { arbitrary: command('PFCOUNT', some(key, 1, 3)), weight: 2 },
  command('PFMERGE', key, some(key, 0, 2)),
  {
    arbitrary: command(pick('BITFIELD', 'BITFIELD', 'BITFIELD_RO'), key, some(BITFIELD_SUBCOMMAND, 0, 4)),
    weight: 3,
  },
  {
    arbitrary: command('BITOP', pick('AND', 'OR', 'XOR', 'NOT', 'and', 'BAD'), key, some(key, 1, 3)),
    weight: 2,
  },
  {
    arbitrary: command('BITCOUNT', key, some(pick(...BIT_INDEXES), 0, 2), optional(pick(...BIT_UNITS))),
    weight: 2,
  },
  {
    arbitrary: command(
      'BITPOS',
      key,
      pick('0', '1', '2', 'x'),
      some(pick(...BIT_INDEXES), 0, 2),
      optional(pick(...BIT_UNITS)),
    ),
    weight: 2,
  },
  command('STRLEN', key),
  command(
    pick('GETRANGE', 'SUBSTR'),
    key,
    pick('0', '1', '-1', '-3', '2', '100', '-100', 'x'),
    pick('0', '1', '-1', '-2', '5', '100', '-100'),
  ),
  command('SETRANGE', key, pick('0', '1', '3', '10', '-1', 'x', '536870912'), value),
  { arbitrary: command(pick('TTL', 'PTTL', 'EXPIRETIME', 'PEXPIRETIME'), key), weight: 2 },
  // GT and LT compare against deadlines two clocks computed; only absolute deadlines compare the same.
  command('EXPIRE', key, fc.constantFrom(...SECONDS), optional(pick('NX', 'XX', 'BAD'))),
  command('PEXPIRE', key, fc.constantFrom(...MILLIS), optional(pick('NX', 'XX'))),
  command('EXPIREAT', key, fc.constantFrom(...AT_SECONDS), optional(pick('NX', 'XX', 'GT', 'LT'))),
  command('PEXPIREAT', key, fc.constantFrom(...AT_MILLIS), optional(pick('NX', 'XX', 'GT', 'LT'))),
  // Two options at once, mostly clashing; on a deadline both servers read alike.
  command(
    'EXPIREAT',
    key,
    String(nowSeconds + 50_000),
    pick('NX', 'XX', 'GT', 'LT'),
    pick('NX', 'XX', 'GT', 'LT'),
  ),
  command('PERSIST', key),
  command('TYPE', key),
  command(pick('RENAME', 'RENAMENX'), key, key),
  command('COPY', key, key, optional(pick('REPLACE'))),
  command('DBSIZE'),
  command('ECHO', value),
  command('KEYS', fc.constantFrom(...PATTERNS)),
  // Wrong arity.
  fc.constantFrom(
    ['GET'],
    ['SET', '{p}a'],
    ['INCRBY', '{p}a'],
    ['MGET'],
    ['DEL'],
    ['GETRANGE', '{p}a', '0'],
    ['KEYS'],
  ),
);

// ── Comparing replies ─────────────────────────────────────────────────────────────────────────────

const SECONDS_CLOCK = new Set(['TTL', 'EXPIRETIME']);
const MILLIS_CLOCK = new Set(['PTTL', 'PEXPIRETIME']);

/** Whether `ours` may stand for `theirs` as the reply to `cmd` (see the header for what is loosened). */
function sameReply(cmd: Command, ours: string, theirs: string): boolean {
  if (ours === theirs) return true;
  const name = cmd[0].toUpperCase();
  const slack = SECONDS_CLOCK.has(name) ? SECONDS_SLACK : MILLIS_CLOCK.has(name) ? MILLIS_SLACK : -1;
  if (slack >= 0) {
    const a = integerReply(ours);
    const b = integerReply(theirs);
    // -1 (no deadline) and -2 (no key) are exact answers; only real times get the slack.
    return a !== undefined && b !== undefined && a >= 0 && b >= 0 && Math.abs(a - b) <= slack;
  }
  if (name === 'KEYS') return sortedArray(ours) === sortedArray(theirs);
  // Redis LZF-compresses longer strings in DUMP (Tessera does not): the payloads must hold the same value.
  if (name === 'DUMP') return samePayloadValue(ours, theirs);
  return false;
}

const LCS_TABLE_REFUSAL = '-ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len\r\n';

/**
 * The one documented difference a sequence can reach: Tessera bounds LCS's table by its value limit
 * (Redis by 512 MiB), so LCS of two long values (INCRBYFLOAT 1e4932 makes one) is refused. It counts
 * only when the two values' lengths really put the table past that limit.
 */
async function refusedByTableLimit(cmd: Command, ours: string, tessera: RawClient): Promise<boolean> {
  if (cmd[0].toUpperCase() !== 'LCS' || ours !== LCS_TABLE_REFUSAL) return false;
  const length = async (key: string) => Number((await tessera.call('STRLEN', key)).slice(1, -2));
  return lcsTableBytes(await length(cmd[1]), await length(cmd[2])) > VALUE_BYTES_MAX_DEFAULT;
}

function samePayloadValue(ours: string, theirs: string): boolean {
  const value = (reply: string) => {
    if (!reply.startsWith('$') || reply.startsWith('$-1')) return undefined;
    const restored = restoreValue(Buffer.from(reply.slice(reply.indexOf('\r\n') + 2, -2), 'latin1'), 1 << 30);
    return typeof restored === 'string' ? undefined : restored;
  };
  const a = value(ours);
  const b = value(theirs);
  return a !== undefined && b !== undefined && a.equals(b);
}

function integerReply(reply: string): number | undefined {
  return /^:-?\d+\r\n$/.test(reply) ? Number(reply.slice(1, -2)) : undefined;
}

/** An array reply of bulk strings with its elements in sorted order (as text, for comparing). */
function sortedArray(reply: string): string {
  const [header, ...rest] = reply.split('\r\n');
  const elements: string[] = [];
  for (let i = 0; i + 1 < rest.length; i += 2) elements.push(`${rest[i]}\r\n${rest[i + 1]}`);
  return [header, ...elements.sort()].join('\r\n');
}

const show = (cmd: Command) => cmd.map((a) => JSON.stringify(a)).join(' ');

// ── The two servers ───────────────────────────────────────────────────────────────────────────────

let fixture: RespFixture;
let redisServer: RedisServer;
let tessera: RawClient;
let redis: RawClient;

before(async () => {
  if (skip) return;
  console.log(`resp-parity seed ${SEED} (replay: TESSERA_SEED=${SEED})`);
  fixture = await startResp({ label: 'resp-parity' });
  tessera = await fixture.raw();
  redisServer = await startRedisServer('resp-parity-redis');
  redis = await redisServer.raw();
});

after(async () => {
  await redisServer?.stop();
  await fixture?.stop();
});

if (REQUIRE_REDIS_TOOLS) {
  test('redis-server is installed (TESSERA_REQUIRE_REDIS_TOOLS=1)', () => {
    assert.ok(onPath('redis-server'), `redis-server is not on PATH: ${REDIS_INSTALL_HINT}`);
  });
}

test('random command sequences get the same replies from Tessera and redis-server', { skip }, async () => {
  await compareSequences(tessera);
});

test('random command sequences through a worker port get the same replies as from redis-server', {
  skip,
}, async () => {
  const workerFixture = await startResp({
    label: 'resp-parity-worker',
    server: { workerPorts: { base: 0 } },
  });
  try {
    // The sequences' keys share one slot: the worker that owns it serves them all on its port.
    const dispatcher = workerFixture.node.dispatcher;
    const owner = dispatcher.workerLinkOf(
      dispatcher.keyspace.fragmentOfSlot(slotOf(Buffer.from(KEYS[0]))),
    ).index;
    const ports = workerFixture.server.workerPorts!;
    const client = await RawClient.connect(ports[owner]);
    try {
      await compareSequences(client);
    } finally {
      client.destroy();
    }
  } finally {
    await workerFixture.stop();
  }
});

/** Draws command sequences and requires `ours` (a Tessera port) to answer each as redis-server does. */
async function compareSequences(tessera: RawClient): Promise<void> {
  let commands = 0;
  await fc.assert(
    fc.asyncProperty(
      fc.constantFrom(2, 3),
      some(COMMAND, 1, SEQUENCE_COMMANDS_MAX),
      async (protocol, sequence) => {
        for (const client of [tessera, redis]) {
          // HELLO's own reply names the server, so it is not compared: a map in RESP3, an array in RESP2.
          const hello = await client.call('HELLO', String(protocol));
          assert.equal(hello[0], protocol === 3 ? '%' : '*', `HELLO ${protocol}: ${JSON.stringify(hello)}`);
          assert.equal(await client.call('FLUSHALL'), '+OK\r\n');
        }
        const afterwards = KEYS.flatMap((k) => [
          ['GET', k],
          ['PTTL', k],
        ]);
        for (const cmd of [...sequence, ...afterwards, ['DBSIZE']]) {
          // Arguments go as latin1: one byte per character, so DUMP payloads travel intact.
          const args = cmd.map((a) => Buffer.from(a, 'latin1'));
          const ours = await tessera.call(...args);
          const theirs = await redis.call(...args);
          commands++;
          if (!sameReply(cmd, ours, theirs) && !(await refusedByTableLimit(cmd, ours, tessera))) {
            assert.fail(
              `${show(cmd)}\n  tessera: ${JSON.stringify(ours)}\n  redis:   ${JSON.stringify(theirs)}\n` +
                `  after: ${sequence.map(show).join(' ; ')}\n  in RESP${protocol}`,
            );
          }
        }
      },
    ),
    {
      seed: SEED,
      numRuns: SEQUENCE_RUNS,
      interruptAfterTimeLimit: SEQUENCE_TIME_MS_MAX,
      includeErrorInReport: true,
    },
  );
  console.log(`resp-parity: ${commands} commands compared`);
  // A run cut short by the time limit still has to have compared something real.
  assert.ok(commands >= 1000, `only ${commands} commands compared`);
}

/**
 * The text of a raw bulk reply: after its length line, and in RESP3 (the random sequences leave a
 * connection in either protocol) after a verbatim string's `txt:` format too.
 */
function bulkText(reply: string): string {
  const body = reply.slice(reply.indexOf('\r\n') + 2);
  return reply.startsWith('=') ? body.slice('txt:'.length) : body;
}

/** An INFO reply's fields (raw RESP bulk text): [name, value] per line, headings left out. */
function infoFields(reply: string): Array<[string, string]> {
  return bulkText(reply)
    .split('\r\n')
    .filter((line) => line !== '' && !line.startsWith('#'))
    .map((line) => line.split(':', 2) as [string, string]);
}

test("INFO cpu has redis-server's fields in its order, as seconds that add up", { skip }, async () => {
  // In RESP3, INFO is a verbatim string: the same fields after its format.
  await tessera.call('HELLO', '3');
  await redis.call('HELLO', '3');
  assert.deepEqual(
    infoFields(await tessera.call('INFO', 'cpu')).map(([name]) => name),
    infoFields(await redis.call('INFO', 'cpu')).map(([name]) => name),
  );
  await tessera.call('HELLO', '2');
  await redis.call('HELLO', '2');
  const ours = infoFields(await tessera.call('INFO', 'cpu'));
  const theirs = infoFields(await redis.call('INFO', 'cpu'));
  assert.deepEqual(
    ours.map(([name]) => name),
    theirs.map(([name]) => name),
  );
  const value = new Map(ours);
  for (const [name, v] of ours) assert.match(v, /^\d+\.\d{6}$/, name);
  assert.ok(Number(value.get('used_cpu_user_main_thread')) <= Number(value.get('used_cpu_user')));
  assert.ok(Number(value.get('used_cpu_sys_main_thread')) <= Number(value.get('used_cpu_sys')));
  // The default sections include it, as Redis's do.
  assert.match(await tessera.call('INFO'), /\r\n# CPU\r\nused_cpu_sys:/);
});

/** INFO `section`'s rows as a map of row name → its comma-separated `k=v` fields. */
async function infoRows(client: RawClient, section: string): Promise<Map<string, Map<string, string>>> {
  const rows = new Map<string, Map<string, string>>();
  for (const [name, value] of infoFields(await client.call('INFO', section))) {
    rows.set(name, new Map(value.split(',').map((kv) => kv.split('=', 2) as [string, string])));
  }
  return rows;
}

test('INFO commandstats, errorstats and latencystats count a sequence as redis-server does', {
  skip,
}, async () => {
  const sequence: string[][] = [
    ['SET', 'stats:n', '5'],
    ['INCR', 'stats:n'],
    ['SET', 'stats:s', 'text'],
    ['INCR', 'stats:s'], // runs, then fails: not an integer
    ['GET', 'stats:n'],
    ['GET'], // refused before running: arity
    ['CLIENT', 'ID'],
    ['NOSUCHCOMMAND'],
  ];
  const counted = async (client: RawClient) => {
    const before = await infoRows(client, 'commandstats');
    const errorsBefore = await infoRows(client, 'errorstats');
    for (const cmd of sequence) await client.call(...cmd);
    const after = await infoRows(client, 'commandstats');
    const errorsAfter = await infoRows(client, 'errorstats');
    const delta = (rows: Map<string, Map<string, string>>, was: typeof rows, row: string, field: string) =>
      Number(rows.get(row)?.get(field) ?? 0) - Number(was.get(row)?.get(field) ?? 0);
    const figures: Record<string, number> = {};
    for (const row of ['cmdstat_set', 'cmdstat_incr', 'cmdstat_get', 'cmdstat_client|id']) {
      for (const field of ['calls', 'rejected_calls', 'failed_calls']) {
        figures[`${row}.${field}`] = delta(after, before, row, field);
      }
    }
    figures.errorstat_ERR = delta(errorsAfter, errorsBefore, 'errorstat_ERR', 'count');
    return { figures, fields: [...(after.get('cmdstat_get')?.keys() ?? [])] };
  };
  const ours = await counted(tessera);
  const theirs = await counted(redis);
  assert.deepEqual(ours.figures, theirs.figures);
  assert.deepEqual(ours.fields, theirs.fields);
  // Each command that ran has its percentiles, in Redis's form.
  const latency = infoFields(await tessera.call('INFO', 'latencystats'));
  const get = latency.find(([name]) => name === 'latency_percentiles_usec_get');
  assert.ok(get !== undefined, 'GET has latency percentiles');
  assert.match(get[1], /^p50=\d+\.\d{3},p99=\d+\.\d{3},p99\.9=\d+\.\d{3}$/);
  const theirLatency = infoFields(await redis.call('INFO', 'latencystats'));
  assert.match(
    theirLatency.find(([name]) => name === 'latency_percentiles_usec_get')![1],
    /^p50=.*,p99=.*,p99\.9=.*$/,
  );
  // Not in the default sections, as in Redis; errorstats is.
  const defaults = await tessera.call('INFO');
  assert.ok(!defaults.includes('# Commandstats') && !defaults.includes('# Latencystats'));
  assert.ok(defaults.includes('# Errorstats'));
  assert.ok((await tessera.call('INFO', 'all')).includes('# Latencystats'));
});

test('SLOWLOG keeps and lists commands as redis-server does', { skip }, async () => {
  await redis.call('CONFIG', 'SET', 'slowlog-log-slower-than', '0');
  const slowFixture = await startResp({
    label: 'resp-parity-slowlog',
    server: { slowlogLogSlowerThanUs: 0 },
  });
  const ours = newClient(slowFixture.port);
  const theirs = newClient(redisServer.port);
  try {
    const longArg = 'x'.repeat(200);
    const manyArgs = Array.from({ length: 40 }, (_, i) => `slow:${i}`);
    const listed = async (client: Redis) => {
      await client.call('SLOWLOG', 'RESET');
      await client.call('SET', 'slow:k', longArg);
      await client.call('GET', 'slow:k');
      await client.call('EXISTS', ...manyArgs);
      await client.call('AUTH', 'not-the-password').catch(() => undefined);
      const entries = (await client.call('SLOWLOG', 'GET', '-1')) as unknown[][];
      const len = await client.call('SLOWLOG', 'LEN');
      const two = ((await client.call('SLOWLOG', 'GET', '2')) as unknown[][]).length;
      // id, time and duration differ between the servers; the arguments, their order and the client name do not.
      return {
        entries: entries.map((e) => [e[3], e[5]]),
        len,
        two,
        idsFall: entries.every((e, i) => i === 0 || (e[0] as number) < (entries[i - 1][0] as number)),
      };
    };
    assert.deepEqual(await listed(ours), await listed(theirs));
    for (const cmd of [
      ['SLOWLOG', 'GET', '-2'],
      ['SLOWLOG', 'GET', 'x'],
      ['SLOWLOG', 'LEN', 'extra'],
      ['SLOWLOG', 'NOPE'],
      ['SLOWLOG', 'HELP'],
    ]) {
      const answer = (client: Redis) =>
        client.call(...(cmd as [string, ...string[]])).catch((err: Error) => `error: ${err.message}`);
      assert.deepEqual(await answer(ours), await answer(theirs), cmd.join(' '));
    }
    assert.deepEqual(await ours.call('CONFIG', 'GET', 'slowlog-*'), [
      'slowlog-log-slower-than',
      '0',
      'slowlog-max-len',
      '128',
    ]);
  } finally {
    ours.disconnect();
    theirs.disconnect();
    await redis.call('CONFIG', 'SET', 'slowlog-log-slower-than', '10000');
    await slowFixture.stop();
  }
});

test("CLIENT INFO's fields come in redis-server's order", { skip }, async () => {
  // The raw bulk reply: its length line, then the fields.
  const names = (reply: string) =>
    bulkText(reply)
      .trim()
      .split(' ')
      .map((field) => field.split('=', 1)[0]);
  const ours = names(await tessera.call('CLIENT', 'INFO'));
  const theirs = names(await redis.call('CLIENT', 'INFO'));
  // Tessera adds Redis 7.2's lib-name and lib-ver after the fields redis-server 7.0 lists.
  assert.deepEqual(ours.slice(0, theirs.length), theirs);
  assert.deepEqual(ours.slice(theirs.length), ['lib-name', 'lib-ver']);
});

// ── COMMAND ───────────────────────────────────────────────────────────────────────────────────────

/** A reply parsed just enough to drop elements and write it back byte for byte: its header line, its bulk text or its elements. */
interface RawReply {
  line: string;
  text?: string;
  items?: RawReply[];
}

function parseReply(reply: string): RawReply {
  let at = 0;
  const read = (): RawReply => {
    const end = reply.indexOf('\r\n', at);
    const line = reply.slice(at, end);
    at = end + 2;
    const n = Number(line.slice(1));
    if (line[0] === '$' && n >= 0) {
      const text = reply.slice(at, at + n);
      at += n + 2;
      return { line, text };
    }
    if ('*~%'.includes(line[0]) && n >= 0) {
      const items = Array.from({ length: line[0] === '%' ? 2 * n : n }, read);
      return { line, items };
    }
    return { line };
  };
  return read();
}

function writeReply(r: RawReply): string {
  if (r.items !== undefined) {
    const n = r.line[0] === '%' ? r.items.length / 2 : r.items.length;
    return `${r.line[0]}${n}\r\n${r.items.map(writeReply).join('')}`;
  }
  return r.text === undefined ? `${r.line}\r\n` : `${r.line}\r\n${r.text}\r\n`;
}

const compareText = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

/**
 * The subcommands Tessera implements of the containers the COMMAND tests ask about. Redis's replies
 * are compared with these kept and the others (CONFIG SET, CLIENT PAUSE…) dropped: those Tessera
 * refuses or lacks are not described. Redis lists a container's subcommands in its hash table's order,
 * which changes from one redis-server process to the next; Tessera lists them sorted by name, and
 * Redis's are sorted before they are compared.
 */
const IMPLEMENTED_SUBCOMMANDS: Record<string, string[]> = {
  client: ['setname', 'getname', 'id', 'info', 'list', 'kill', 'reply', 'no-evict', 'help'],
  config: ['get', 'help'],
  object: ['encoding', 'refcount', 'freq', 'idletime', 'help'],
};

const implemented = (fullName: string) => {
  const [container, sub] = fullName.split('|');
  return IMPLEMENTED_SUBCOMMANDS[container]?.includes(sub) ?? true;
};

/** COMMAND INFO's reply with only the implemented subcommands in each description's tenth field. */
function infoOfImplemented(reply: string): string {
  const parsed = parseReply(reply);
  for (const info of parsed.items ?? []) {
    const subcommands = info.items?.[9];
    if (subcommands?.items !== undefined) {
      subcommands.items = subcommands.items
        .filter((sub) => implemented(sub.items![0].text!))
        .sort((a, b) => compareText(a.items![0].text!, b.items![0].text!));
    }
  }
  return writeReply(parsed);
}

/** COMMAND DOCS's reply (RESP3: maps; RESP2: arrays of pairs) with only the implemented subcommands. */
function docsOfImplemented(reply: string): string {
  const parsed = parseReply(reply);
  const pairs = parsed.items ?? [];
  for (let i = 1; i < pairs.length; i += 2) {
    const fields = pairs[i].items ?? [];
    for (let f = 0; f < fields.length; f += 2) {
      if (fields[f].text !== 'subcommands') continue;
      const subs = fields[f + 1].items ?? [];
      const kept: RawReply[][] = [];
      for (let s = 0; s < subs.length; s += 2)
        if (implemented(subs[s].text!)) kept.push([subs[s], subs[s + 1]]);
      fields[f + 1].items = kept.sort(([a], [b]) => compareText(a.text!, b.text!)).flat();
    }
  }
  return writeReply(parsed);
}

const DESCRIBED = [
  'get',
  'set',
  'incr',
  'client',
  'client|list',
  'config',
  'config|get',
  'object',
  'bitfield',
  'pfadd',
  'scan',
];

/** A raw reply's lines, with the protocol first: the same bytes, compared so a failure shows where they part. */
const lines = (reply: string) => [`RESP${protocolOf}`, ...reply.split('\r\n')];
let protocolOf = '';

test('COMMAND INFO and COMMAND DOCS answer as redis-server does, byte for byte', { skip }, async () => {
  for (const protocol of ['2', '3']) {
    for (const client of [tessera, redis]) await client.call('HELLO', protocol);
    protocolOf = protocol;
    const info = ['COMMAND', 'INFO', ...DESCRIBED, 'no-such-command', 'get|x'];
    assert.deepEqual(lines(await tessera.call(...info)), lines(infoOfImplemented(await redis.call(...info))));
    // Names without documentation are left out of the map, as Redis leaves them out.
    const docs = ['COMMAND', 'DOCS', ...DESCRIBED, 'no-such-command'];
    assert.deepEqual(lines(await tessera.call(...docs)), lines(docsOfImplemented(await redis.call(...docs))));
    // Tessera's containers list only what they run: CONFIG SET and CLIENT PAUSE are refused or missing.
    for (const name of ['config|set', 'client|pause'])
      assert.equal(
        await tessera.call('COMMAND', 'INFO', name),
        protocol === '2' ? '*1\r\n$-1\r\n' : '*1\r\n_\r\n',
      );
  }
});

/** A COMMAND LIST reply's names. */
async function listed(client: RawClient, ...filter: string[]): Promise<Set<string>> {
  const reply = parseReply(await client.call('COMMAND', 'LIST', ...filter));
  assert.ok(reply.items !== undefined, `COMMAND LIST ${filter.join(' ')}: ${reply.line}`);
  return new Set(reply.items.map((item) => item.text!));
}

test('COMMAND LIST FILTERBY keeps the commands redis-server keeps, of those Tessera supports', {
  skip,
}, async () => {
  const all = await listed(tessera);
  assert.ok(all.has('client|list') && all.has('config|get') && !all.has('config|set'));
  const refused = new Set(UNSUPPORTED_COMMANDS.map((c) => c.name.toLowerCase()));
  const supported = new Set([...all].filter((name) => !refused.has(name)));
  // Commands newer than the redis-server compared with (WAITAOF, Redis 7.2) cannot be compared.
  const known = await listed(redis);
  // Commands Tessera refuses carry no ACL categories; only its supported ones are compared by category.
  for (const category of ['string', 'STRING', 'keyspace', 'connection', 'no-such-category', '@string']) {
    const ours = await listed(tessera, 'FILTERBY', 'ACLCAT', category);
    const theirs = await listed(redis, 'FILTERBY', 'ACLCAT', category);
    assert.deepEqual(
      [...ours].filter((name) => known.has(name)).sort(),
      [...theirs].filter((name) => supported.has(name)).sort(),
      category,
    );
  }
  assert.ok((await listed(tessera, 'FILTERBY', 'ACLCAT', 'string')).has('incrbyfloat'));
  // A pattern matches the full name, ignoring case; every name Tessera lists is compared.
  for (const pattern of ['client|*', 'get*', '*EX*', 'C[LO]*', 'config|?et', 'pf*', 'nothing*']) {
    const ours = await listed(tessera, 'FILTERBY', 'PATTERN', pattern);
    const theirs = await listed(redis, 'FILTERBY', 'PATTERN', pattern);
    assert.deepEqual([...ours].sort(), [...theirs].filter((name) => all.has(name)).sort(), pattern);
  }
  for (const cmd of [
    ['COMMAND', 'LIST', 'FILTERBY', 'MODULE', 'json'],
    ['COMMAND', 'LIST', 'FILTERBY'],
    ['COMMAND', 'LIST', 'FILTERBY', 'PATTERN'],
    ['COMMAND', 'LIST', 'FILTERBY', 'NOSUCH', 'x'],
    ['COMMAND', 'LIST', 'FILTERBY', 'PATTERN', '*', 'FILTERBY', 'ACLCAT', 'string'],
    ['COMMAND', 'LIST', 'extra'],
    ['COMMAND', 'GETKEYS', 'GET'],
    ['COMMAND', 'COUNT', 'extra'],
  ]) {
    assert.equal(await tessera.call(...cmd), await redis.call(...cmd), cmd.join(' '));
  }
});

test('LATENCY answers as redis-server does with the monitor at its default (off)', { skip }, async () => {
  for (const protocol of ['2', '3']) {
    await tessera.call('HELLO', protocol);
    await redis.call('HELLO', protocol);
    for (const cmd of [
      ['LATENCY', 'LATEST'],
      ['LATENCY', 'HISTORY', 'command'],
      ['LATENCY', 'RESET'],
      ['LATENCY', 'RESET', 'command', 'fast-command'],
      ['LATENCY', 'LATEST', 'extra'],
      ['LATENCY', 'NOPE'],
      ['CONFIG', 'GET', 'latency-monitor-threshold'],
    ]) {
      assert.equal(
        await tessera.call(...cmd),
        await redis.call(...cmd),
        `${cmd.join(' ')} in RESP${protocol}`,
      );
    }
    // HELP: Redis's lines, less GRAPH and HISTOGRAM, which Tessera does not have.
    const theirHelp = (await redis.call('LATENCY', 'HELP')).split('\r\n');
    const ourHelp = (await tessera.call('LATENCY', 'HELP')).split('\r\n').slice(1);
    assert.ok(
      ourHelp.every((line) => theirHelp.includes(line)),
      ourHelp.join('\n'),
    );
    assert.ok(!ourHelp.some((line) => /GRAPH|HISTOGRAM/.test(line)));
    // The same words, but the way to turn the monitor on is Tessera's (a flag, not CONFIG SET).
    const off = /I'm sorry, Dave, I can't do that\. Latency monitoring is disabled in this /;
    assert.match(await redis.call('LATENCY', 'DOCTOR'), off);
    assert.match(await tessera.call('LATENCY', 'DOCTOR'), off);
  }
  await tessera.call('HELLO', '2');
  await redis.call('HELLO', '2');
});
