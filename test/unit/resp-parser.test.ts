// The RESP request parser against Redis's behaviour (networking.c processMultibulkBuffer /
// processInlineBuffer, sds.c sdssplitargs, tests/unit/protocol.tcl) and against a dumb whole-input
// reference parser written in the shape of that C code.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { ErrorKind, TesseraError } from '../../src/core/errors.js';
import {
  CommandTable,
  commandIs,
  commandNameKey,
  RESP_BULK_BYTES_MAX,
  RESP_INLINE_BYTES_MAX,
  RESP_MULTIBULK_ARGS_MAX,
  RESP_SPILL_BYTES_KEEP_MAX,
  RESP_SPILL_GROWTH_STEP_BYTES,
  RespCommand,
  RespParser,
  RespProtocolError,
  RespProtocolReason,
  splitInlineArgs,
} from '../../src/core/resp-parser.js';

const bytes = (s: string) => Buffer.from(s, 'latin1');
const text = (b: Uint8Array) => Buffer.from(b).toString('latin1');

function encodeMultibulk(args: readonly Uint8Array[]): Buffer {
  const parts: Buffer[] = [bytes(`*${args.length}\r\n`)];
  for (const a of args) parts.push(bytes(`$${a.length}\r\n`), Buffer.from(a), bytes('\r\n'));
  return Buffer.concat(parts);
}

interface Parsed {
  commands: string[][];
  reason: RespProtocolReason | null;
  message: string | null;
}

/** Pushes each chunk and drains; copies every argument (views die at the next next()). */
function parseChunks(chunks: readonly Buffer[], parser = new RespParser()): Parsed {
  const out: Parsed = { commands: [], reason: null, message: null };
  let guard = chunks.reduce((n, c) => n + c.length, 0) + 2;
  for (const chunk of chunks) {
    parser.push(chunk);
    for (let r = parser.next(); r !== null; r = parser.next()) {
      assert.ok(guard-- > 0, 'the parser returned more results than there are bytes');
      if (r instanceof RespProtocolError) {
        out.reason = r.reason;
        out.message = r.message;
        assert.equal(parser.next(), r, 'a failed parser keeps returning its error');
        return out;
      }
      assert.ok(r.argc >= 1);
      assert.equal(r.argv.length, r.argc);
      out.commands.push(r.argv.map(text));
    }
  }
  return out;
}

function cut(input: Buffer, points: readonly number[]): Buffer[] {
  const sorted = [...new Set(points.map((p) => p % (input.length + 1)))].sort((a, b) => a - b);
  const chunks: Buffer[] = [];
  let from = 0;
  for (const p of sorted) {
    chunks.push(input.subarray(from, p));
    from = p;
  }
  chunks.push(input.subarray(from));
  return chunks;
}

function byteChunks(input: Buffer): Buffer[] {
  return [...input].map((b) => Buffer.from([b]));
}

// ── Frames ─────────────────────────────────────────────────────────────────────────────────────

const FRAMES: [string, string, string[][]][] = [
  ['multibulk', '*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n', [['SET', 'k', 'hello']]],
  ['empty bulk', '*2\r\n$3\r\nGET\r\n$0\r\n\r\n', [['GET', '']]],
  ['binary bulk with CRLF and NUL inside', '*1\r\n$5\r\n\r\n\0\xff*\r\n', [['\r\n\0\xff*']]],
  ['*0, *-1 and *-10 are skipped (protocol.tcl)', '*0\r\n*-1\r\n*-10\r\n*1\r\n$4\r\nPING\r\n', [['PING']]],
  ['the most negative int64 count is skipped', '*-9223372036854775808\r\nPING\r\n', [['PING']]],
  ['inline with CRLF', 'PING\r\n', [['PING']]],
  ['inline with LF only', 'PING\n', [['PING']]],
  ['inline blanks between words', '  set \t a   b  \r\n', [['set', 'a', 'b']]],
  ['empty inline lines are ignored (protocol.tcl)', '\r\n\n   \r\nPING\r\n', [['PING']]],
  ['inline then multibulk', 'PING\r\n*1\r\n$4\r\nPING\r\n', [['PING'], ['PING']]],
];

for (const [name, input, expected] of FRAMES) {
  test(`frame: ${name}`, () => {
    assert.deepEqual(parseChunks([bytes(input)]).commands, expected);
    assert.deepEqual(parseChunks(byteChunks(bytes(input))).commands, expected);
  });
}

// sds.c sdssplitargs semantics, line (without its LF) → arguments, or null for unbalanced quotes.
const INLINE: [string, string[] | null][] = [
  ['set "a b" c', ['set', 'a b', 'c']],
  ['"\\x41\\x4a\\x4A" "\\n\\r\\t\\b\\a\\\\\\"\\q"', ['AJJ', '\n\r\t\b\x07\\"q']],
  ['"\\x4g" "\\x"', ['x4g', 'x']],
  ["'a\\'b' 'c\\\\d' 'e\"f'", ["a'b", 'c\\\\d', 'e"f']],
  ['a"b c" d', ['ab c', 'd']],
  ['"" \'\'', ['', '']],
  ['a\tb\x0bc', ['a', 'b\x0bc']], // \v is a blank between words, not a word end
  ['\x0b\x0cPING', ['PING']],
  ['a\0b c', ['a']], // the line is a C string to Redis
  ['a\rb', ['a', 'b']],
  ['"a\\"', null],
  ['"abc', null],
  ["'abc", null],
  ['"a\0"', null],
  ['a"b c"d', null], // a closing quote must be followed by a blank
  ["'a'b", null],
  ['set """test-key""" test-value', null], // protocol.tcl "Unbalanced number of quotes"
];

for (const [line, expected] of INLINE) {
  test(`inline splitting: ${JSON.stringify(line)}`, () => {
    const into = new RespCommand();
    const argc = splitInlineArgs(bytes(line), line.length, into);
    if (expected === null) {
      assert.equal(argc, -1);
      return;
    }
    assert.equal(argc, expected.length);
    assert.deepEqual(into.argv.map(text), expected);
    assert.deepEqual(referenceSplitArgs(bytes(line))?.map(text), expected);
  });
}

test('hundreds of pipelined commands in one chunk', () => {
  const commands = Array.from({ length: 300 }, (_, i) => ['SET', `key:${i}`, 'v'.repeat(i % 50)]);
  const input = Buffer.concat(commands.map((c) => encodeMultibulk(c.map(bytes))));
  assert.deepEqual(parseChunks([input]).commands, commands);
});

// ── Errors: Redis's exact texts ────────────────────────────────────────────────────────────────

const E = RespProtocolReason;
const ERRORS: [string, string, RespProtocolReason, string][] = [
  ['non-number count', '*abc\r\n', E.InvalidMultibulkLength, 'Protocol error: invalid multibulk length'],
  ['count out of int range (protocol.tcl)', '*3000000000\r\n', E.InvalidMultibulkLength, ''],
  ['count over the maximum', `*${RESP_MULTIBULK_ARGS_MAX + 1}\r\n`, E.InvalidMultibulkLength, ''],
  ['empty count', '*\r\n', E.InvalidMultibulkLength, ''],
  ['leading zero', '*01\r\n', E.InvalidMultibulkLength, ''],
  ['minus zero', '*-0\r\n', E.InvalidMultibulkLength, ''],
  ['plus sign', '*+1\r\n', E.InvalidMultibulkLength, ''],
  ['trailing blank', '*1 \r\n', E.InvalidMultibulkLength, ''],
  ['count past int64', '*-9223372036854775809\r\n', E.InvalidMultibulkLength, ''],
  ['2^63 positive', '*9223372036854775808\r\n', E.InvalidMultibulkLength, ''],
  ['count CR without LF', '*1\rX', E.InvalidMultibulkLength, ''],
  [
    'wrong payload header (protocol.tcl)',
    '*3\r\n$3\r\nSET\r\n$1\r\nx\r\nfooz\r\n',
    E.ExpectedDollar,
    "Protocol error: expected '$', got 'f'",
  ],
  [
    'bulk expected (protocol.tcl)',
    '*1\r\nfoo\r\n',
    E.ExpectedDollar,
    "Protocol error: expected '$', got 'f'",
  ],
  [
    'CR where $ belongs is printed as a space',
    '*1\r\n\r\n',
    E.ExpectedDollar,
    "Protocol error: expected '$', got ' '",
  ],
  [
    'negative bulk length (protocol.tcl)',
    '*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$-10\r\n',
    E.InvalidBulkLength,
    'Protocol error: invalid bulk length',
  ],
  [
    'bulk out of range (protocol.tcl)',
    '*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$2000000000\r\n',
    E.InvalidBulkLength,
    '',
  ],
  [
    'non-number bulk length (protocol.tcl)',
    '*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$blabla\r\n',
    E.InvalidBulkLength,
    '',
  ],
  ['bulk over the maximum', `*1\r\n$${RESP_BULK_BYTES_MAX + 1}\r\n`, E.InvalidBulkLength, ''],
  ['bulk length CR without LF', '*1\r\n$3\rX', E.InvalidBulkLength, ''],
  ['bulk not followed by CR', '*1\r\n$3\r\nfooX', E.InvalidBulkLength, ''],
  ['bulk not followed by LF', '*1\r\n$3\r\nfoo\rX', E.InvalidBulkLength, ''],
  [
    'count line too long',
    `*${'1'.repeat(RESP_INLINE_BYTES_MAX)}`,
    E.TooBigMultibulkCount,
    'Protocol error: too big mbulk count string',
  ],
  [
    'bulk length line too long',
    `*1\r\n$${'1'.repeat(RESP_INLINE_BYTES_MAX)}`,
    E.TooBigBulkCount,
    'Protocol error: too big bulk count string',
  ],
  [
    'inline line too long',
    'a'.repeat(RESP_INLINE_BYTES_MAX + 1),
    E.TooBigInlineRequest,
    'Protocol error: too big inline request',
  ],
  [
    'inline line too long with its LF',
    `${'a'.repeat(RESP_INLINE_BYTES_MAX + 1)}\n`,
    E.TooBigInlineRequest,
    '',
  ],
  [
    'unbalanced quotes (protocol.tcl)',
    'set """test-key""" test-value\r\nping\r\n',
    E.UnbalancedQuotes,
    'Protocol error: unbalanced quotes in request',
  ],
];

for (const [name, input, reason, message] of ERRORS) {
  test(`error: ${name}`, () => {
    const whole = parseChunks([bytes(input)]);
    assert.equal(whole.reason, reason);
    if (message !== '') assert.equal(whole.message, message);
    // Any split gives the same answer: one byte at a time, and in two halves.
    const half = input.length >> 1;
    if (input.length < 1000) assert.equal(parseChunks(byteChunks(bytes(input))).reason, reason);
    assert.equal(parseChunks([bytes(input.slice(0, half)), bytes(input.slice(half))]).reason, reason);
  });
}

test('limits are inclusive: one byte under each bound still waits for more', () => {
  for (const input of [
    `*${'1'.repeat(RESP_INLINE_BYTES_MAX - 1)}`,
    `*1\r\n$${'1'.repeat(RESP_INLINE_BYTES_MAX - 1)}`,
    'a'.repeat(RESP_INLINE_BYTES_MAX),
    `*1\r\n$${RESP_BULK_BYTES_MAX}\r\n`,
    `*${RESP_MULTIBULK_ARGS_MAX}\r\n`,
  ]) {
    const parser = new RespParser();
    parser.push(bytes(input));
    assert.equal(parser.next(), null, input.slice(0, 20));
    assert.equal(parser.bufferedBytes, input.length);
  }
  // The bound counts the bytes before LF, a CR among them (Redis measures the same span).
  for (const line of ['a'.repeat(RESP_INLINE_BYTES_MAX), `${'a'.repeat(RESP_INLINE_BYTES_MAX - 1)}\r`]) {
    const parsed = parseChunks([bytes(`${line}\n`)]);
    assert.equal(parsed.reason, null);
    assert.equal(parsed.commands[0][0].length, RESP_INLINE_BYTES_MAX - (line.endsWith('\r') ? 1 : 0));
  }
});

test('a protocol error is a typed TesseraError, final, and later input is dropped', () => {
  const parser = new RespParser();
  parser.push(bytes('*1\r\nfoo\r\n'));
  const err = parser.next();
  assert.ok(err instanceof RespProtocolError && err instanceof TesseraError);
  assert.equal(err.kind, ErrorKind.InvalidInput);
  assert.equal(err.code, 'TESSERA_INVALID_INPUT');
  assert.equal(err.reason, RespProtocolReason.ExpectedDollar);
  parser.push(bytes('PING\r\n'));
  assert.equal(parser.next(), err);
});

// ── Memory: views, spill, limits ───────────────────────────────────────────────────────────────

test('arguments of a command inside one chunk are views of that chunk', () => {
  const chunk = encodeMultibulk([bytes('SET'), bytes('k'), Buffer.alloc(100, 7)]);
  const parser = new RespParser();
  parser.push(chunk);
  const c = parser.next();
  assert.ok(c instanceof RespCommand);
  for (const arg of c.argv) assert.equal(arg.buffer, chunk.buffer);
  assert.equal(parser.retainedBytes, 0);
});

test('a command spanning chunks: only the straddling argument is copied', () => {
  const input = encodeMultibulk([bytes('SET'), bytes('key'), Buffer.alloc(100, 7)]);
  const at = input.length - 50; // inside the value
  const first = input.subarray(0, at);
  const parser = new RespParser();
  parser.push(first);
  assert.equal(parser.next(), null);
  assert.equal(parser.bufferedBytes, at);
  parser.push(input.subarray(at));
  const c = parser.next();
  assert.ok(c instanceof RespCommand);
  assert.equal(c.arg(0).buffer, first.buffer);
  assert.equal(c.arg(1).buffer, first.buffer);
  assert.notEqual(c.arg(2).buffer, first.buffer);
  assert.deepEqual(c.arg(2), Buffer.alloc(100, 7));
  assert.equal(parser.bufferedBytes, 0);
});

test('push() does not invalidate the current command; next() reuses the command and argv objects', () => {
  const a = encodeMultibulk([bytes('SET'), bytes('k'), bytes('first-value')]);
  const b = encodeMultibulk([bytes('SET'), bytes('k'), bytes('other-value')]);
  const parser = new RespParser();
  parser.push(a.subarray(0, a.length - 5));
  assert.equal(parser.next(), null);
  parser.push(a.subarray(a.length - 5));
  const c = parser.next();
  assert.ok(c instanceof RespCommand);
  const argv = c.argv;
  parser.push(b.subarray(0, b.length - 5)); // more input arrives while the command is being handled
  assert.deepEqual(argv.map(text), ['SET', 'k', 'first-value']);
  assert.equal(parser.next(), null);
  parser.push(b.subarray(b.length - 5));
  const d = parser.next();
  assert.equal(d, c);
  assert.equal(d.argv, argv);
  assert.deepEqual(argv.map(text), ['SET', 'k', 'other-value']);
});

test('a large value arriving in small chunks grows the spill geometrically and is then released', () => {
  const value = Buffer.alloc(1024 * 1024, 0x61);
  const input = encodeMultibulk([bytes('SET'), bytes('k'), value]);
  const parser = new RespParser();
  let command: RespCommand | null = null;
  for (let at = 0; at < input.length; at += 16 * 1024) {
    parser.push(input.subarray(at, at + 16 * 1024));
    const r = parser.next();
    assert.ok(!(r instanceof RespProtocolError));
    if (r !== null) command = r;
    assert.ok(parser.retainedBytes <= value.length + RESP_SPILL_GROWTH_STEP_BYTES);
    assert.ok(parser.bufferedBytes <= input.length);
  }
  assert.ok(command !== null);
  assert.ok(command.arg(2).equals(value));
  parser.push(bytes('PING\r\n'));
  assert.ok(parser.next() instanceof RespCommand);
  assert.ok(parser.retainedBytes <= RESP_SPILL_BYTES_KEEP_MAX);
});

test('bufferedBytes counts unparsed input and the command in progress', () => {
  const parser = new RespParser();
  const one = encodeMultibulk([bytes('GET'), bytes('k')]);
  parser.push(Buffer.concat([one, one, one.subarray(0, 7)]));
  assert.equal(parser.bufferedBytes, one.length * 2 + 7);
  parser.next();
  assert.equal(parser.bufferedBytes, one.length + 7);
  parser.next();
  assert.equal(parser.next(), null);
  assert.equal(parser.bufferedBytes, 7);
  parser.push(one.subarray(7));
  assert.ok(parser.next() instanceof RespCommand);
  assert.equal(parser.bufferedBytes, 0);
});

// ── Command names ──────────────────────────────────────────────────────────────────────────────

test('command names compare case-insensitively without strings', () => {
  assert.ok(commandIs(bytes('get'), 'GET'));
  assert.ok(commandIs(bytes('GeT'), 'GET'));
  assert.ok(!commandIs(bytes('GETS'), 'GET'));
  assert.ok(!commandIs(bytes('GE'), 'GET'));
  assert.ok(!commandIs(bytes('G\xc5T'), 'GET'));
  assert.equal(commandNameKey(bytes('cLiEnt|\xe9')), 'CLIENT|\xe9');
  const parser = new RespParser();
  parser.push(bytes('*2\r\n$3\r\nget\r\n$3\r\nabc\r\n'));
  const c = parser.next();
  assert.ok(c instanceof RespCommand);
  assert.ok(c.argIs(0, 'GET') && !c.argIs(1, 'GET'));
  assert.equal(c.argLength(1), 3);
  const target = Buffer.alloc(5);
  assert.equal(c.copyArg(1, target, 1), 3);
  assert.equal(text(target), '\0abc\0');
});

test('CommandTable matches a Map of upper-cased names', () => {
  const names = ['GET', 'SET', 'DEL', 'MSET', 'MGET', 'CLIENT', 'CONFIG', 'COMMAND', 'PING', 'ECHO', 'HELLO'];
  const table = new CommandTable(names);
  const reference = new Map(names.map((n, i) => [n, i]));
  fc.assert(
    fc.property(
      fc.oneof(
        fc
          .constantFrom(...names)
          .chain((n) =>
            fc
              .array(fc.boolean(), { minLength: n.length, maxLength: n.length })
              .map((lower) => [...n].map((ch, i) => (lower[i] ? ch.toLowerCase() : ch)).join('')),
          ),
        fc.string({ maxLength: 8 }),
      ),
      (name) => {
        const expected = reference.get(name.replace(/[a-z]/g, (ch) => ch.toUpperCase())) ?? -1;
        assert.equal(table.lookup(Buffer.from(name, 'utf8')), expected);
      },
    ),
  );
  const parser = new RespParser();
  parser.push(bytes('*1\r\n$4\r\nmGeT\r\n'));
  const c = parser.next();
  assert.ok(c instanceof RespCommand);
  assert.equal(table.lookupCommand(c), 4);
  assert.throws(() => new CommandTable(['GET', 'GET']));
  assert.throws(() => new CommandTable(['get']));
});

// ── Properties ─────────────────────────────────────────────────────────────────────────────────

const binaryArg = fc.uint8Array({ maxLength: 40 }).map((a) => Buffer.from(a));
const wordArg = fc.stringMatching(/^[A-Za-z0-9:_.-]{1,12}$/).map(bytes);

/** A command and one way to encode it: multibulk, plain inline words, or double-quoted inline. */
const encodedCommand = fc.oneof(
  fc.array(binaryArg, { minLength: 1, maxLength: 6 }).map((args) => ({ args, wire: encodeMultibulk(args) })),
  fc
    .tuple(fc.array(wordArg, { minLength: 1, maxLength: 6 }), fc.constantFrom('\r\n', '\n'))
    .map(([args, eol]) => ({ args, wire: bytes(args.map(text).join(' ') + eol) })),
  fc
    .array(binaryArg, { minLength: 1, maxLength: 4 })
    .map((args) => ({ args, wire: bytes(`${args.map(quoteInline).join(' ')}\r\n`) })),
);

/** Double-quoted inline form of any bytes: printable ASCII as is, the rest as \xHH or \n-style escapes. */
function quoteInline(arg: Uint8Array): string {
  let s = '"';
  for (const b of arg) {
    if (b === 0x22 || b === 0x5c) s += `\\${String.fromCharCode(b)}`;
    else if (b === 0x0a) s += '\\n';
    else if (b >= 0x20 && b < 0x7f) s += String.fromCharCode(b);
    else s += `\\x${b.toString(16).padStart(2, '0')}`;
  }
  return `${s}"`;
}

test('property: commands split at any points parse back exactly', () => {
  fc.assert(
    fc.property(
      fc.array(encodedCommand, { minLength: 1, maxLength: 20 }),
      fc.array(fc.nat(), { maxLength: 30 }),
      (commands, points) => {
        const input = Buffer.concat(commands.map((c) => c.wire));
        const expected = commands.map((c) => c.args.map(text));
        const parsed = parseChunks(cut(input, points));
        assert.equal(parsed.reason, null);
        assert.deepEqual(parsed.commands, expected);
      },
    ),
    { numRuns: 300 },
  );
});

const SPECIAL = [...bytes('*$\r\n-09 "\'\\x\0')];
const mutation = fc.tuple(fc.nat(), fc.constantFrom('flip', 'insert', 'delete'), fc.constantFrom(...SPECIAL));

function mutate(input: Buffer, mutations: readonly [number, string, number][]): Buffer {
  const out = [...input];
  for (const [at, kind, b] of mutations) {
    const i = out.length === 0 ? 0 : at % out.length;
    if (kind === 'flip' && out.length > 0) out[i] = b;
    else if (kind === 'insert') out.splice(i, 0, b);
    else out.splice(i, 1);
  }
  return Buffer.from(out);
}

test('property: mutated and random bytes never throw, hang or overrun, and match the reference', () => {
  const streams = fc.oneof(
    fc
      .tuple(fc.array(encodedCommand, { minLength: 1, maxLength: 8 }), fc.array(mutation, { maxLength: 6 }))
      .map(([commands, mutations]) => mutate(Buffer.concat(commands.map((c) => c.wire)), mutations)),
    fc.uint8Array({ maxLength: 200 }).map((a) => Buffer.from(a)),
    fc.array(fc.constantFrom(...SPECIAL), { maxLength: 60 }).map((a) => Buffer.from(a)),
  );
  fc.assert(
    fc.property(streams, fc.array(fc.nat(), { maxLength: 20 }), (input, points) => {
      const parser = new RespParser();
      const parsed = parseChunks(cut(input, points), parser);
      const reference = referenceParse(input);
      assert.deepEqual(parsed.commands, reference.commands);
      assert.equal(parsed.reason, reference.reason);
      assert.ok(parser.bufferedBytes >= 0 && parser.bufferedBytes <= input.length);
      assert.ok(parser.retainedBytes <= RESP_SPILL_BYTES_KEEP_MAX);
    }),
    { numRuns: 1000 },
  );
});

// ── Reference: whole input at once, shaped like Redis's C code ─────────────────────────────────

/** util.c string2ll: null unless "0" or an optional '-' then [1-9][0-9]* within int64. */
function string2ll(s: Buffer): number | null {
  const t = text(s);
  if (!/^(0|-?[1-9][0-9]*)$/.test(t)) return null;
  const v = BigInt(t);
  if (v < -(2n ** 63n) || v > 2n ** 63n - 1n) return null;
  return Number(v);
}

function referenceParse(input: Buffer): { commands: string[][]; reason: RespProtocolReason | null } {
  const commands: string[][] = [];
  const fail = (reason: RespProtocolReason) => ({ commands, reason });
  let pos = 0;
  while (pos < input.length) {
    if (input[pos] !== 0x2a) {
      const lf = input.indexOf(0x0a, pos);
      if (lf < 0) break;
      let line = input.subarray(pos, lf);
      if (line.length > 0 && line[line.length - 1] === 0x0d) line = line.subarray(0, -1);
      const args = referenceSplitArgs(line);
      if (args === null) return fail(E.UnbalancedQuotes);
      if (args.length > 0) commands.push(args.map(text));
      pos = lf + 1;
      continue;
    }
    const cr = input.indexOf(0x0d, pos);
    if (cr < 0) break;
    const count = string2ll(input.subarray(pos + 1, cr));
    if (count === null || count > RESP_MULTIBULK_ARGS_MAX) return fail(E.InvalidMultibulkLength);
    if (cr + 1 === input.length) break;
    if (input[cr + 1] !== 0x0a) return fail(E.InvalidMultibulkLength);
    pos = cr + 2;
    const args: string[] = [];
    for (let i = 0; i < count; i++) {
      if (pos === input.length) return { commands, reason: null };
      if (input[pos] !== 0x24) return fail(E.ExpectedDollar);
      const bulkCr = input.indexOf(0x0d, pos);
      if (bulkCr < 0) return { commands, reason: null };
      const length = string2ll(input.subarray(pos + 1, bulkCr));
      if (length === null || length < 0 || length > RESP_BULK_BYTES_MAX) return fail(E.InvalidBulkLength);
      const start = bulkCr + 2;
      const after = start + length;
      // The LF after the length, then CRLF after the payload: missing is "wait", wrong is an error.
      for (const [at, want] of [
        [bulkCr + 1, 0x0a],
        [after, 0x0d],
        [after + 1, 0x0a],
      ]) {
        if (at >= input.length) return { commands, reason: null };
        if (input[at] !== want) return fail(E.InvalidBulkLength);
      }
      args.push(text(input.subarray(start, after)));
      pos = after + 2;
    }
    if (count > 0) commands.push(args);
  }
  return { commands, reason: null };
}

/** sds.c sdssplitargs over a C string (reading stops at NUL); null for unbalanced quotes. */
function referenceSplitArgs(line: Buffer): Buffer[] | null {
  const at = (i: number) => (i < line.length ? line[i] : 0);
  const isspace = (c: number) => c === 0x20 || (c >= 0x09 && c <= 0x0d);
  const isHex = (c: number) => /[0-9a-fA-F]/.test(String.fromCharCode(c));
  const ESC: Record<string, number> = { n: 10, r: 13, t: 9, b: 8, a: 7 };
  const out: Buffer[] = [];
  let p = 0;
  for (;;) {
    while (at(p) !== 0 && isspace(at(p))) p++;
    if (at(p) === 0) return out;
    let inq = false;
    let insq = false;
    let done = false;
    const current: number[] = [];
    while (!done) {
      const c = at(p);
      if (inq) {
        if (c === 0x5c && at(p + 1) === 0x78 && isHex(at(p + 2)) && isHex(at(p + 3))) {
          current.push(Number.parseInt(String.fromCharCode(at(p + 2), at(p + 3)), 16));
          p += 3;
        } else if (c === 0x5c && at(p + 1) !== 0) {
          p++;
          current.push(ESC[String.fromCharCode(at(p))] ?? at(p));
        } else if (c === 0x22) {
          if (at(p + 1) !== 0 && !isspace(at(p + 1))) return null;
          done = true;
        } else if (c === 0) {
          return null;
        } else {
          current.push(c);
        }
      } else if (insq) {
        if (c === 0x5c && at(p + 1) === 0x27) {
          p++;
          current.push(0x27);
        } else if (c === 0x27) {
          if (at(p + 1) !== 0 && !isspace(at(p + 1))) return null;
          done = true;
        } else if (c === 0) {
          return null;
        } else {
          current.push(c);
        }
      } else if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09 || c === 0) {
        done = true;
      } else if (c === 0x22) {
        inq = true;
      } else if (c === 0x27) {
        insq = true;
      } else {
        current.push(c);
      }
      if (at(p) !== 0) p++;
    }
    out.push(Buffer.from(current));
  }
}
