// INCRBYFLOAT's numbers, as Redis computes them on x86-64: C's long double there is the x87 80-bit
// extended format (a 64-bit significand; exponents down to 2^-16445 with subnormals, up to 2^16384).
// Redis parses both operands with strtold, adds, and prints the sum with "%.17Lf" less trailing zeros.
// This module does the same in exact integer arithmetic, rounding to nearest, ties to even, wherever
// the hardware would round, so the text a client gets back is the text Redis gives: 0.1 + 0.2 is
// "0.3", but 0.1 + 1000 is "1000.09999999999999998", because 1000.1 needs more than 64 bits.
// (Redis on aarch64 has a 128-bit long double and prints other digits there; x86-64 is the reference.)

/** A finite long double: `significand * 2^exponent`, |significand| < 2^64. */
export interface LongDouble {
  significand: bigint;
  exponent: number;
}

/** strtold's result for inf / infinity: a number Redis parses, then refuses as a sum. */
export const LONG_DOUBLE_INFINITE = Symbol('infinite');
export type Parsed = LongDouble | typeof LONG_DOUBLE_INFINITE;

const SIGNIFICAND_BITS = 64;
const SIGNIFICAND_MIN = 1n << BigInt(SIGNIFICAND_BITS - 1);
const SIGNIFICAND_END = 1n << BigInt(SIGNIFICAND_BITS);
/** The exponent of a subnormal, and the lowest of a normal number: 2^-16382 has significand 2^63. */
const EXPONENT_MIN = -16382 - (SIGNIFICAND_BITS - 1);
/** The highest exponent: the largest finite value is (2^64 - 1) * 2^16320, just under 2^16384. */
const EXPONENT_MAX = 16384 - SIGNIFICAND_BITS;
/**
 * Text Redis parses at most (its string2ld buffer is 5 KiB with the NUL): longer is not a float.
 * It also bounds the exact arithmetic, so no operand can make the fragment actor stall.
 */
export const LONG_DOUBLE_TEXT_BYTES_MAX = 5 * 1024 - 1;
/** Decimals "%.17Lf" prints. */
const PRINTED_DECIMALS = 17;
/**
 * Powers of ten (or two) past which a nonzero value surely overflows or underflows; only bounds the
 * work, since values between these and the exact limits are rounded and checked like any other.
 */
const DECIMAL_MAGNITUDE_MAX = 4940;
const DECIMAL_MAGNITUDE_MIN = -4960;
const BINARY_MAGNITUDE_MAX = 16400;
const BINARY_MAGNITUDE_MIN = -16500;

const ZERO: LongDouble = { significand: 0n, exponent: 0 };
const DECIMAL = /^([+-]?)(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?$/;
const HEXADECIMAL = /^([+-]?)0[xX]([0-9a-fA-F]*)(?:\.([0-9a-fA-F]*))?(?:[pP]([+-]?\d+))?$/;
const INFINITY_TEXT = /^[+-]?(inf|infinity)$/i;

/**
 * Parses `bytes` as Redis's string2ld does: all of it (a NUL included) must be one strtold number (decimal,
 * hexadecimal with a binary exponent, inf or infinity) with no leading space; nan, overflow and
 * underflow to zero are refused. undefined: not a valid float.
 */
export function parseLongDouble(bytes: Uint8Array): Parsed | undefined {
  if (bytes.length === 0 || bytes.length > LONG_DOUBLE_TEXT_BYTES_MAX) return undefined;
  const text = Buffer.from(bytes).toString('latin1');
  if (INFINITY_TEXT.test(text)) return LONG_DOUBLE_INFINITE;
  const hex = HEXADECIMAL.exec(text);
  if (hex !== null) return parseHexadecimal(hex[1] === '-', hex[2], hex[3] ?? '', hex[4]);
  const dec = DECIMAL.exec(text);
  if (dec !== null) return parseDecimal(dec[1] === '-', dec[2], dec[3] ?? '', dec[4]);
  return undefined;
}

function parseDecimal(negative: boolean, whole: string, fraction: string, exponentText?: string) {
  if (whole === '' && fraction === '') return undefined;
  const digits = (whole + fraction).replace(/^0+/, '');
  if (digits === '') return ZERO;
  const exponent = exponentText === undefined ? 0 : Number(exponentText);
  const scale = exponent - fraction.length; // value = digits * 10^scale
  const magnitude = digits.length + scale;
  if (magnitude > DECIMAL_MAGNITUDE_MAX || magnitude < DECIMAL_MAGNITUDE_MIN) return undefined;
  const units = BigInt(digits);
  const rounded =
    scale >= 0
      ? roundToLongDouble(negative, units * 10n ** BigInt(scale), 1n)
      : roundToLongDouble(negative, units, 10n ** BigInt(-scale));
  return rounded === LONG_DOUBLE_INFINITE || rounded.significand === 0n ? undefined : rounded;
}

function parseHexadecimal(negative: boolean, whole: string, fraction: string, exponentText?: string) {
  if (whole === '' && fraction === '') return undefined;
  const digits = (whole + fraction).replace(/^0+/, '');
  if (digits === '') return ZERO;
  const exponent = (exponentText === undefined ? 0 : Number(exponentText)) - 4 * fraction.length;
  const magnitude = 4 * digits.length + exponent;
  if (magnitude > BINARY_MAGNITUDE_MAX || magnitude < BINARY_MAGNITUDE_MIN) return undefined;
  const rounded = roundBinary(negative, BigInt(`0x${digits}`), exponent);
  return rounded === LONG_DOUBLE_INFINITE || rounded.significand === 0n ? undefined : rounded;
}

/** `a + b`, rounded as the x87 adds: to nearest, ties to even; infinite if it overflows. */
export function addLongDoubles(a: LongDouble, b: LongDouble): Parsed {
  const exponent = Math.min(a.exponent, b.exponent);
  const sum =
    (a.significand << BigInt(a.exponent - exponent)) + (b.significand << BigInt(b.exponent - exponent));
  if (sum === 0n) return ZERO;
  return roundBinary(sum < 0n, sum < 0n ? -sum : sum, exponent);
}

/** `magnitude * 2^exponent` with the sign `negative`, rounded. */
function roundBinary(negative: boolean, magnitude: bigint, exponent: number): Parsed {
  return exponent >= 0
    ? roundToLongDouble(negative, magnitude << BigInt(exponent), 1n)
    : roundToLongDouble(negative, magnitude, 1n << BigInt(-exponent));
}

/** The long double nearest `numerator / denominator` (both positive), ties to even. */
function roundToLongDouble(negative: boolean, numerator: bigint, denominator: bigint): Parsed {
  // Scale so the quotient has 64 bits: numerator / denominator is in [2^(k-1), 2^(k+1)).
  const k = bitLength(numerator) - bitLength(denominator);
  let exponent = Math.max(k - SIGNIFICAND_BITS, EXPONENT_MIN);
  let [quotient, remainder, divisor] = divide(numerator, denominator, exponent);
  if (quotient >= SIGNIFICAND_END) {
    exponent++;
    [quotient, remainder, divisor] = divide(numerator, denominator, exponent);
  }
  const twice = remainder * 2n;
  if (twice > divisor || (twice === divisor && (quotient & 1n) === 1n)) quotient++;
  if (quotient === SIGNIFICAND_END) {
    quotient = SIGNIFICAND_MIN;
    exponent++;
  }
  if (exponent > EXPONENT_MAX) return LONG_DOUBLE_INFINITE;
  return { significand: negative ? -quotient : quotient, exponent };
}

/** floor(n / (d * 2^exponent)), its remainder, and the divisor that remainder is out of. */
function divide(n: bigint, d: bigint, exponent: number): [bigint, bigint, bigint] {
  const num = exponent < 0 ? n << BigInt(-exponent) : n;
  const den = exponent > 0 ? d << BigInt(exponent) : d;
  return [num / den, num % den, den];
}

function bitLength(n: bigint): number {
  return n.toString(2).length;
}

/** `value` as Redis prints it: "%.17Lf" (ties to even), trailing zeros and a bare dot removed, "-0" as "0". */
export function formatLongDouble(value: LongDouble): string {
  const { significand, exponent } = value;
  const negative = significand < 0n;
  const magnitude = negative ? -significand : significand;
  let digits: string;
  if (exponent >= 0) digits = (magnitude << BigInt(exponent)).toString();
  else {
    // magnitude / 2^-exponent = magnitude * 5^-exponent / 10^-exponent, exactly.
    let units = magnitude * 5n ** BigInt(-exponent);
    const dropped = -exponent - PRINTED_DECIMALS;
    if (dropped > 0) {
      const divisor = 10n ** BigInt(dropped);
      const remainder = units % divisor;
      units /= divisor;
      const twice = remainder * 2n;
      if (twice > divisor || (twice === divisor && (units & 1n) === 1n)) units++;
    }
    const scale = Math.min(-exponent, PRINTED_DECIMALS);
    const padded = units.toString().padStart(scale + 1, '0');
    const fraction = padded.slice(-scale).replace(/0+$/, '');
    digits = padded.slice(0, -scale) + (fraction === '' ? '' : `.${fraction}`);
  }
  return negative && digits !== '0' ? `-${digits}` : digits;
}
