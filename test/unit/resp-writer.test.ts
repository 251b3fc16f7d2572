// The RESP reply writer: every type in RESP2 and RESP3 against hand-written bytes (Redis 7
// networking.c addReply*; RESP3 spec), double spelling as Redis ≥ 7.2 (util.c d2string, fpconv_dtoa),
// buffer ownership, and a round trip through the request parser.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { RespCommand, RespParser } from '../../src/core/resp-parser.js';
import {
  formatDouble,
  RESP_WRITER_HANDOVER_BYTES_MIN,
  RESP_WRITER_INITIAL_BYTES,
  RESP_WRITER_KEEP_BYTES_MAX,
  type RespProtocol,
  RespWriter,
} from '../../src/core/resp-writer.js';

function encode(protocol: RespProtocol, write: (w: RespWriter) => void): string {
  const w = new RespWriter(protocol);
  write(w);
  assert.equal(w.length, w.bytes().length);
  return w.take().toString('latin1');
}

/** [name, write, RESP2 bytes, RESP3 bytes] */
const CASES: [string, (w: RespWriter) => void, string, string][] = [
  ['ok', (w) => w.ok(), '+OK\r\n', '+OK\r\n'],
  ['simple string', (w) => w.simple('PONG'), '+PONG\r\n', '+PONG\r\n'],
  ['simple string with CRLF inside', (w) => w.simple('a\r\nb'), '+a  b\r\n', '+a  b\r\n'],
  ['error', (w) => w.error('unknown command'), '-ERR unknown command\r\n', '-ERR unknown command\r\n'],
  ['error with newline inside', (w) => w.error('bad\nthing'), '-ERR bad thing\r\n', '-ERR bad thing\r\n'],
  [
    'error with a code',
    (w) => w.errorCode('WRONGTYPE', 'Operation against a key holding the wrong kind of value'),
    '-WRONGTYPE Operation against a key holding the wrong kind of value\r\n',
    '-WRONGTYPE Operation against a key holding the wrong kind of value\r\n',
  ],
  ['integer 0', (w) => w.integer(0), ':0\r\n', ':0\r\n'],
  ['integer 1', (w) => w.integer(1), ':1\r\n', ':1\r\n'],
  ['integer -1', (w) => w.integer(-1), ':-1\r\n', ':-1\r\n'],
  ['integer 10', (w) => w.integer(10), ':10\r\n', ':10\r\n'],
  ['largest safe integer', (w) => w.integer(2 ** 53 - 1), ':9007199254740991\r\n', ':9007199254740991\r\n'],
  [
    'smallest safe integer',
    (w) => w.integer(-(2 ** 53 - 1)),
    ':-9007199254740991\r\n',
    ':-9007199254740991\r\n',
  ],
  ['int64 max', (w) => w.integer(2n ** 63n - 1n), ':9223372036854775807\r\n', ':9223372036854775807\r\n'],
  ['int64 min', (w) => w.integer(-(2n ** 63n)), ':-9223372036854775808\r\n', ':-9223372036854775808\r\n'],
  ['bulk string', (w) => w.bulk('hello'), '$5\r\nhello\r\n', '$5\r\nhello\r\n'],
  ['bulk string, UTF-8', (w) => w.bulk('é'), '$2\r\n\xc3\xa9\r\n', '$2\r\n\xc3\xa9\r\n'],
  ['empty bulk string', (w) => w.bulk(''), '$0\r\n\r\n', '$0\r\n\r\n'],
  [
    'binary bulk',
    (w) => w.bulk(Buffer.from([0, 13, 10, 255])),
    '$4\r\n\0\r\n\xff\r\n',
    '$4\r\n\0\r\n\xff\r\n',
  ],
  ['bulk of a range', (w) => w.bulkRange(Buffer.from('xxabcxx'), 2, 5), '$3\r\nabc\r\n', '$3\r\nabc\r\n'],
  ['null', (w) => w.null(), '$-1\r\n', '_\r\n'],
  ['null array', (w) => w.nullArray(), '*-1\r\n', '_\r\n'],
  ['empty array', (w) => w.arrayHeader(0), '*0\r\n', '*0\r\n'],
  [
    'array of bulks and a null',
    (w) => {
      w.arrayHeader(3);
      w.bulk('a');
      w.null();
      w.integer(7);
    },
    '*3\r\n$1\r\na\r\n$-1\r\n:7\r\n',
    '*3\r\n$1\r\na\r\n_\r\n:7\r\n',
  ],
  [
    'map',
    (w) => {
      w.mapHeader(2);
      w.bulk('server');
      w.bulk('tessera');
      w.bulk('proto');
      w.integer(3);
    },
    '*4\r\n$6\r\nserver\r\n$7\r\ntessera\r\n$5\r\nproto\r\n:3\r\n',
    '%2\r\n$6\r\nserver\r\n$7\r\ntessera\r\n$5\r\nproto\r\n:3\r\n',
  ],
  [
    'set',
    (w) => {
      w.setHeader(2);
      w.bulk('x');
      w.bulk('y');
    },
    '*2\r\n$1\r\nx\r\n$1\r\ny\r\n',
    '~2\r\n$1\r\nx\r\n$1\r\ny\r\n',
  ],
  ['double', (w) => w.double(1.5), '$3\r\n1.5\r\n', ',1.5\r\n'],
  ['double 0.1 (shortest digits)', (w) => w.double(0.1), '$3\r\n0.1\r\n', ',0.1\r\n'],
  ['integral double', (w) => w.double(3), '$1\r\n3\r\n', ',3\r\n'],
  ['inf', (w) => w.double(Number.POSITIVE_INFINITY), '$3\r\ninf\r\n', ',inf\r\n'],
  ['-inf', (w) => w.double(Number.NEGATIVE_INFINITY), '$4\r\n-inf\r\n', ',-inf\r\n'],
  ['nan', (w) => w.double(Number.NaN), '$3\r\nnan\r\n', ',nan\r\n'],
  ['true', (w) => w.boolean(true), ':1\r\n', '#t\r\n'],
  ['false', (w) => w.boolean(false), ':0\r\n', '#f\r\n'],
  ['verbatim', (w) => w.verbatim('Some string'), '$11\r\nSome string\r\n', '=15\r\ntxt:Some string\r\n'],
  ['verbatim markdown', (w) => w.verbatim('# x', 'mkd'), '$3\r\n# x\r\n', '=7\r\nmkd:# x\r\n'],
  [
    'big number',
    (w) => w.bigNumber(3492890328409238509324850943850943825024385n),
    '$43\r\n3492890328409238509324850943850943825024385\r\n',
    '(3492890328409238509324850943850943825024385\r\n',
  ],
  ['raw bytes', (w) => w.raw(Buffer.from('+QUEUED\r\n')), '+QUEUED\r\n', '+QUEUED\r\n'],
];

for (const [name, write, resp2, resp3] of CASES) {
  test(`encode ${name}`, () => {
    assert.equal(encode(2, write), resp2, 'RESP2');
    assert.equal(encode(3, write), resp3, 'RESP3');
  });
}

// d2string (Redis ≥ 7.2): special values, integers to 2^62 in full, else fpconv_dtoa's layout.
const DOUBLES: [number, string][] = [
  [0, '0'],
  [-0, '-0'],
  [1, '1'],
  [-2.5, '-2.5'],
  [0.1, '0.1'],
  [1 / 3, '0.3333333333333333'],
  [123456789.123, '123456789.123'],
  [1e15, '1000000000000000'],
  [2 ** 62, '4611686018427387904'], // printed as an integer, all digits
  [2 ** 62 + 2 ** 11, '4611686018427390000'], // past double2ll's bound: shortest digits, padded
  [1e19, '1e+19'],
  [1e21, '1e+21'],
  [1.5e300, '1.5e+300'],
  [0.000001, '0.000001'], // down to 1e-6 without an exponent
  [0.000012, '0.000012'],
  [1.2345e-5, '1.2345e-5'], // exponent form once the decimal point is 7+ places left of the last digit
  [1e-7, '1e-7'],
  [-1e-300, '-1e-300'],
  [5e-324, '5e-324'],
  [Number.NaN, 'nan'],
  [Number.POSITIVE_INFINITY, 'inf'],
  [Number.NEGATIVE_INFINITY, '-inf'],
];

for (const [value, expected] of DOUBLES) {
  test(`double ${expected}`, () => assert.equal(formatDouble(value), expected));
}

test('formatted doubles read back as the same double', () => {
  fc.assert(
    fc.property(fc.double({ noNaN: true, noDefaultInfinity: true }), (d) => {
      const back = Number(formatDouble(d));
      assert.ok(Object.is(back, d), `${d} → ${formatDouble(d)}`);
    }),
  );
});

test('take() leaves the writer empty and the caller owns the bytes', () => {
  const w = new RespWriter();
  w.bulk('first');
  const small = w.take();
  assert.equal(w.length, 0);
  w.bulk('again');
  assert.equal(small.toString('latin1'), '$5\r\nfirst\r\n');
  // Large output is handed over, not copied: the writer continues in a fresh buffer.
  const big = Buffer.alloc(RESP_WRITER_HANDOVER_BYTES_MIN, 0x61);
  w.reset();
  w.bulk(big);
  const out = w.take();
  w.bulk(Buffer.alloc(big.length, 0x62));
  assert.ok(out.subarray(out.length - 2 - big.length, out.length - 2).equals(big));
});

test('take() of a lone +OK is one shared buffer that later writes leave intact', () => {
  const w = new RespWriter();
  w.ok();
  const first = w.take();
  w.simple('OK');
  const second = w.take();
  assert.equal(first, second, 'the same buffer');
  w.ok();
  w.ok();
  const two = w.take();
  assert.notEqual(two, first);
  assert.equal(two.toString('latin1'), '+OK\r\n+OK\r\n');
  w.simple('OKAY');
  w.error('OK');
  assert.equal(w.take().toString('latin1'), '+OKAY\r\n-ERR OK\r\n');
  assert.equal(first.toString('latin1'), '+OK\r\n');
});

test('bytes() is a view of the pending output; reset() drops it and a grown buffer', () => {
  const w = new RespWriter();
  w.ok();
  w.integer(42);
  assert.equal(w.bytes().toString('latin1'), '+OK\r\n:42\r\n');
  assert.equal(w.length, 10);
  w.reset();
  assert.equal(w.length, 0);
  assert.equal(w.bytes().length, 0);
  w.bulk(Buffer.alloc(RESP_WRITER_KEEP_BYTES_MAX + 1));
  w.reset();
  w.ok();
  assert.equal(w.take().toString('latin1'), '+OK\r\n');
});

test('many replies grow one buffer; the batch is the concatenation of the replies', () => {
  const w = new RespWriter();
  const expected: string[] = [];
  for (let i = 0; i < 2000; i++) {
    const v = 'v'.repeat(i % 300);
    w.bulk(v);
    expected.push(`$${v.length}\r\n${v}\r\n`);
  }
  assert.ok(w.length > RESP_WRITER_INITIAL_BYTES);
  assert.equal(w.take().toString('latin1'), expected.join(''));
});

test('protocol can change between replies (HELLO 3)', () => {
  const w = new RespWriter(2);
  w.null();
  w.protocol = 3;
  w.null();
  assert.equal(w.take().toString('latin1'), '$-1\r\n_\r\n');
});

test('programmer errors are assertions', () => {
  const w = new RespWriter();
  assert.throws(() => w.integer(1.5));
  assert.throws(() => w.integer(2 ** 53));
  assert.throws(() => w.integer(2n ** 63n));
  assert.throws(() => w.errorCode('bad code', 'x'));
  assert.throws(() => w.verbatim('x', 'text'));
  assert.throws(() => w.bigNumber('12a'));
});

test('property: an array of bulks reads back through the request parser', () => {
  fc.assert(
    fc.property(
      fc.array(fc.array(fc.uint8Array({ maxLength: 64 }), { minLength: 1, maxLength: 8 }), {
        minLength: 1,
        maxLength: 10,
      }),
      (commands) => {
        const w = new RespWriter();
        for (const args of commands) {
          w.arrayHeader(args.length);
          for (const a of args) w.bulk(a);
        }
        const parser = new RespParser();
        parser.push(w.take());
        for (const args of commands) {
          const c = parser.next();
          assert.ok(c instanceof RespCommand);
          assert.deepEqual(
            c.argv.map((a) => [...a]),
            args.map((a) => [...a]),
          );
        }
        assert.equal(parser.next(), null);
      },
    ),
  );
});
