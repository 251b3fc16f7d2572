// INCRBYFLOAT's arithmetic (src/core/long-double.ts): x86-64 long double, parsed like strtold and
// printed like "%.17Lf". The expected texts are what redis-server 7.0.15 on x86-64 answered to the
// same INCRBYFLOAT commands, one chain per test row, starting from a missing key.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import {
  addLongDoubles,
  formatLongDouble,
  LONG_DOUBLE_INFINITE,
  LONG_DOUBLE_TEXT_BYTES_MAX,
  type LongDouble,
  type Parsed,
  parseLongDouble,
} from '../../src/core/long-double.js';

const parse = (text: string): Parsed | undefined => parseLongDouble(Buffer.from(text, 'latin1'));

/** INCRBYFLOAT as Redis runs it: parse the stored text and the increment, add, print. */
function incrbyfloat(stored: string | undefined, increment: string): string {
  const current = stored === undefined ? parse('0') : parse(stored);
  const delta = parse(increment);
  if (current === undefined || delta === undefined) return 'ERR value is not a valid float';
  const sum =
    current === LONG_DOUBLE_INFINITE || delta === LONG_DOUBLE_INFINITE
      ? LONG_DOUBLE_INFINITE
      : addLongDoubles(current, delta);
  if (sum === LONG_DOUBLE_INFINITE) return 'ERR increment would produce NaN or Infinity';
  return formatLongDouble(sum);
}

function chain(increments: string[]): string[] {
  const replies: string[] = [];
  let stored: string | undefined;
  for (const increment of increments) {
    const reply = incrbyfloat(stored, increment);
    if (!reply.startsWith('ERR')) stored = reply;
    replies.push(reply);
  }
  return replies;
}

test('sums print as Redis prints them: exact where 64 bits suffice, long double digits where not', () => {
  assert.deepEqual(chain(['0.1', '0.2', '1e3', '-1000.3']), ['0.1', '0.3', '1000.29999999999999999', '0']);
  assert.deepEqual(chain(['10.5', '0.1', '5.0e3']), ['10.5', '10.6', '5010.60000000000000009']);
  assert.deepEqual(chain(['0.1', '1e3']), ['0.1', '1000.09999999999999998']);
  assert.equal(incrbyfloat('123456789012345678901234567890', '0'), '123456789012345678899921813504');
  assert.equal(incrbyfloat('1.0000000000000000000000000001', '0'), '1');
  assert.equal(incrbyfloat('3', '0'), '3');
});

test('the 17th decimal rounds to nearest, ties to even, and a negative zero prints as 0', () => {
  // 2^-18 = 0.000003814697265625 exactly: a tie at the 17th decimal, kept even.
  assert.deepEqual(chain(['3.814697265625e-6']), ['0.00000381469726562']);
  assert.deepEqual(chain(['1.5e-17', '2.5e-17']), ['0.00000000000000002', '0.00000000000000004']);
  assert.deepEqual(chain(['-1e-20']), ['0']);
  assert.deepEqual(chain(['1e-4940']), ['0'], 'a subnormal prints as 0');
});

test('hexadecimal floats with binary exponents parse as strtold reads them', () => {
  assert.deepEqual(chain(['0x10', '0x1p3']), ['16', '24']);
  assert.deepEqual(
    chain([
      '0X1P-2',
      '1E2',
      '1e+2',
      '+.5',
      '0x.8',
      '0x1.8p1',
      '-0x10',
      '0xABCDEFp-30',
      '0x1p-16445',
      '0x1P+1',
    ]),
    [
      '0.25',
      '100.25',
      '200.25',
      '200.75',
      '201.25',
      '204.25',
      '188.25',
      '188.26048611011356115',
      '188.26048611011356115',
      '190.26048611011356115',
    ],
  );
});

test('huge values print in full, and overflow is refused', () => {
  const big = incrbyfloat(undefined, '1e4000');
  assert.equal(big.length, 4000);
  assert.ok(
    big.startsWith('99999999999999999999654638730996237849324925835069576313015083330432619433063423'),
  );
  const max = incrbyfloat(undefined, '1e4932');
  assert.ok(
    max.startsWith('10000000000000000000060189493879638913238377742545331147737850413525330194866087'),
  );
  assert.equal(incrbyfloat(max, '1e4932'), 'ERR increment would produce NaN or Infinity');
});

test('what strtold overflows, underflows to zero or stops short of is not a float', () => {
  for (const text of [
    '1e5000',
    '1e-5000',
    '0x1p-16446',
    '1e99999999999999999999',
    'nan',
    'nan(123)',
    '1_0',
    '0x',
    '0x1p',
    '1e',
    '1e-',
    '.',
    '-',
    '00x1',
    ' 1',
    '1 ',
    '',
    '\0',
    '1\0',
    'infinit',
  ]) {
    assert.equal(parse(text), undefined, JSON.stringify(text));
  }
  const digits = (n: number) => `0.${'1'.repeat(n - 2)}`;
  assert.equal(parse(digits(LONG_DOUBLE_TEXT_BYTES_MAX + 1)), undefined, 'longer than Redis reads');
  assert.equal(incrbyfloat(undefined, digits(LONG_DOUBLE_TEXT_BYTES_MAX)), '0.11111111111111111');
  assert.equal(incrbyfloat('0', '0e99999999'), '0', 'zero is zero at any exponent');
});

test('inf and infinity parse, and any sum with them is refused', () => {
  for (const text of ['inf', 'infinity', '-INF', '+Infinity'])
    assert.equal(parse(text), LONG_DOUBLE_INFINITE, text);
  assert.equal(incrbyfloat('inf', '1'), 'ERR increment would produce NaN or Infinity');
  assert.equal(incrbyfloat('1', '-inf'), 'ERR increment would produce NaN or Infinity');
});

const finite = (text: string): LongDouble => {
  const value = parse(text);
  assert.ok(value !== undefined && value !== LONG_DOUBLE_INFINITE, text);
  return value;
};

test('property: sums of integers below 2^63 in magnitude are exact', () => {
  const int = fc.bigInt({ min: -(2n ** 62n), max: 2n ** 62n });
  fc.assert(
    fc.property(int, int, (a, b) => {
      const sum = addLongDoubles(finite(String(a)), finite(String(b)));
      assert.ok(sum !== LONG_DOUBLE_INFINITE);
      assert.equal(formatLongDouble(sum), String(a + b));
    }),
  );
});

test('property: addition commutes, and adding zero changes no printed value', () => {
  const decimal = fc
    .tuple(fc.bigInt({ min: -(10n ** 30n), max: 10n ** 30n }), fc.integer({ min: -40, max: 40 }))
    .map(([units, exponent]) => `${units}e${exponent}`);
  fc.assert(
    fc.property(decimal, decimal, (a, b) => {
      const x = finite(a);
      const y = finite(b);
      const xy = addLongDoubles(x, y);
      const yx = addLongDoubles(y, x);
      assert.ok(xy !== LONG_DOUBLE_INFINITE && yx !== LONG_DOUBLE_INFINITE);
      assert.equal(formatLongDouble(xy), formatLongDouble(yx));
      assert.equal(incrbyfloat(a, '0'), incrbyfloat('0', a));
    }),
  );
});
