// Redis's 64-bit integers as text: the canonical decimal form its string2ll accepts.

export const INT64_MIN = -(2n ** 63n);
export const INT64_MAX = 2n ** 63n - 1n;
/** Longest canonical int64 in decimal, sign included (Redis's string2ll limit). */
const INT64_DIGITS_MAX = 20;

/** A canonical signed 64-bit decimal, as Redis's string2ll accepts it; undefined otherwise. */
export function parseInt64(bytes: Uint8Array): bigint | undefined {
  const n = bytes.length;
  if (n === 0 || n > INT64_DIGITS_MAX) return undefined;
  let i = 0;
  const negative = bytes[0] === 0x2d;
  if (negative) i = 1;
  if (i === n) return undefined;
  // No leading zeros (except "0" itself), no "+", no spaces: the canonical form only.
  if (bytes[i] === 0x30 && n - i > 1) return undefined;
  if (negative && bytes[i] === 0x30) return undefined;
  for (let j = i; j < n; j++) if (bytes[j] < 0x30 || bytes[j] > 0x39) return undefined;
  const value = BigInt(Buffer.from(bytes).toString('latin1'));
  return value < INT64_MIN || value > INT64_MAX ? undefined : value;
}
