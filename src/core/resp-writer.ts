// RESP reply encoding into one growable output buffer per connection, so that a batch of replies
// leaves in one socket write. Byte for byte what Redis 7 sends (src/networking.c, addReply*): RESP3
// types fall back to their RESP2 forms exactly as Redis's do when the connection speaks RESP2 —
// map → flat array of 2n, set → array, double → bulk string, boolean → integer 1/0,
// null → `$-1` (null array → `*-1`), verbatim string and big number → bulk string.
// Integers and lengths are written as ASCII digits straight into the buffer; no intermediate strings
// except for doubles and bigints.

import { assert } from './assert.js';
import { copyBytes, copyRange } from './bytes.js';

/** Initial output buffer: Redis's per-client static reply buffer (PROTO_REPLY_CHUNK_BYTES) is 16 KiB too. */
export const RESP_WRITER_INITIAL_BYTES = 16 * 1024;
/** The buffer grows by doubling, rounded up to this step, so one large reply does not reallocate twice. */
export const RESP_WRITER_GROWTH_STEP_BYTES = 16 * 1024;
/**
 * `take()` hands the buffer itself over (and allocates a fresh one) from this many pending bytes; below
 * it, copying the bytes out is cheaper than allocating a whole new buffer.
 */
export const RESP_WRITER_HANDOVER_BYTES_MIN = 16 * 1024;
/** A buffer that grew past this (a big reply) is dropped by `reset()`, so idle connections stay small. */
export const RESP_WRITER_KEEP_BYTES_MAX = 1024 * 1024;

/** Bytes of the longest `<prefix><int64>\r\n` header. */
const HEADER_BYTES_MAX = 1 + 20 + 2;
const CR = 0x0d;
const LF = 0x0a;
const SPACE = 0x20;
const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;
/** Integer-valued doubles up to this magnitude print as integers (Redis's double2ll bound, LLONG_MAX/2). */
const DOUBLE_AS_INTEGER_MAX = 2 ** 62;

export type RespProtocol = 2 | 3;

/** `+OK\r\n`, shared by every `take()` of exactly that reply. */
const OK_REPLY = Buffer.from('+OK\r\n', 'latin1');

/**
 * Reply writer for one connection. Methods append; `take()` returns the pending bytes for one socket
 * write. `protocol` (2 or 3, set by HELLO) selects the encoding of the RESP3 types.
 */
export class RespWriter {
  protocol: RespProtocol;
  /** Error replies written, sent or not (INFO's total_error_replies). */
  errorReplies = 0;
  /** Where error replies are counted by their code (INFO errorstats), when someone counts them. */
  errorCodes: Map<string, number> | undefined;
  private buf: Buffer;
  private len = 0;

  constructor(protocol: RespProtocol = 2) {
    this.protocol = protocol;
    this.buf = Buffer.allocUnsafe(RESP_WRITER_INITIAL_BYTES);
  }

  /** Pending bytes, for the caller's per-client output limit. */
  get length(): number {
    return this.len;
  }

  /** A view of the pending bytes, valid until the next append, `take()` or `reset()`. */
  bytes(): Buffer {
    return this.buf.subarray(0, this.len);
  }

  /**
   * The pending bytes as a buffer the caller owns (it may sit in a socket queue while we keep writing);
   * the writer is left empty. A lone `+OK\r\n` comes back as one shared buffer (redis-server's
   * `shared.ok`): the reply of a pipelined write kept for its turn costs no allocation. Callers never
   * write into what this returns.
   */
  take(): Buffer {
    const n = this.len;
    this.len = 0;
    if (n === OK_REPLY.length && this.buf[0] === 0x2b && this.buf[1] === 0x4f && this.buf[2] === 0x4b)
      return OK_REPLY;
    if (n >= RESP_WRITER_HANDOVER_BYTES_MIN) {
      const out = this.buf.subarray(0, n);
      this.buf = Buffer.allocUnsafe(RESP_WRITER_INITIAL_BYTES);
      return out;
    }
    const out = Buffer.allocUnsafe(n);
    this.buf.copy(out, 0, 0, n);
    return out;
  }

  /** Drops the bytes appended after the first `length` (a reply that is not to be sent). */
  truncate(length: number): void {
    assert(length >= 0 && length <= this.len, 'truncate past the pending bytes');
    this.len = length;
  }

  /** Drops the pending bytes. */
  reset(): void {
    this.len = 0;
    if (this.buf.length > RESP_WRITER_KEEP_BYTES_MAX)
      this.buf = Buffer.allocUnsafe(RESP_WRITER_INITIAL_BYTES);
  }

  // ── Simple types ───────────────────────────────────────────────────────────────────────────

  /** `+OK\r\n` */
  ok(): void {
    const b = this.reserve(5);
    const at = this.len;
    b[at] = 0x2b; // +
    b[at + 1] = 0x4f; // O
    b[at + 2] = 0x4b; // K
    b[at + 3] = CR;
    b[at + 4] = LF;
    this.len = at + 5;
  }

  /** `+<text>\r\n`; CR and LF inside become spaces so the reply cannot break the framing. */
  simple(text: string): void {
    this.line(0x2b, '', text);
  }

  /** `-ERR <message>\r\n` (Redis's generic error code); CR and LF inside become spaces. */
  error(message: string): void {
    this.countError('ERR');
    this.line(0x2d, 'ERR ', message);
  }

  /** `-<code> <message>\r\n`, e.g. code `WRONGTYPE`. */
  errorCode(code: string, message: string): void {
    assert(/^[A-Z][A-Z0-9_]*$/.test(code), `RESP error code ${code} must be an upper-case word`);
    this.countError(code);
    this.line(0x2d, `${code} `, message);
  }

  private countError(code: string): void {
    this.errorReplies++;
    const codes = this.errorCodes;
    if (codes !== undefined) codes.set(code, (codes.get(code) ?? 0) + 1);
  }

  /** `:<n>\r\n` for any int64 (a number must be a safe integer). */
  integer(n: number | bigint): void {
    if (typeof n === 'bigint') {
      assert(n >= INT64_MIN && n <= INT64_MAX, 'RESP integers are 64-bit');
      this.ascii(0x3a, n.toString());
      return;
    }
    this.header(0x3a, n);
  }

  /** RESP3 `#t`/`#f`; RESP2 `:1`/`:0`. */
  boolean(value: boolean): void {
    if (this.protocol === 2) this.header(0x3a, value ? 1 : 0);
    else this.four(0x23, value ? 0x74 : 0x66); // #t / #f
  }

  /** RESP3 `,<d>`; RESP2 the same text as a bulk string. Spelling as Redis ≥ 7.2 (d2string). */
  double(value: number): void {
    const text = formatDouble(value);
    if (this.protocol === 2) this.bulk(text);
    else this.ascii(0x2c, text);
  }

  /** RESP3 `(<digits>`; RESP2 a bulk string. */
  bigNumber(value: bigint | string): void {
    const text = typeof value === 'bigint' ? value.toString() : value;
    assert(/^-?[0-9]+$/.test(text), 'a big number is decimal digits');
    if (this.protocol === 2) this.bulk(text);
    else this.ascii(0x28, text);
  }

  // ── Bulk strings and nulls ─────────────────────────────────────────────────────────────────

  /** `$<len>\r\n<bytes>\r\n`; a string is written as UTF-8. Binary safe. */
  bulk(value: Uint8Array | string): void {
    if (typeof value === 'string') {
      const n = Buffer.byteLength(value, 'utf8');
      this.header(0x24, n);
      this.reserve(n + 2);
      this.len += this.buf.write(value, this.len, n, 'utf8');
    } else {
      this.header(0x24, value.length);
      this.reserve(value.length + 2);
      this.len += copyBytes(this.buf, this.len, value);
    }
    this.crlf();
  }

  /** A bulk string of source[start, end), without making a view of it. */
  bulkRange(source: Buffer, start: number, end: number): void {
    this.header(0x24, end - start);
    this.reserve(end - start + 2);
    this.len += copyRange(source, start, end, this.buf, this.len);
    this.crlf();
  }

  /** RESP3 `_`; RESP2 the null bulk string `$-1`. */
  null(): void {
    if (this.protocol === 2) this.header(0x24, -1);
    else this.three(0x5f);
  }

  /** RESP3 `_`; RESP2 the null array `*-1` (e.g. EXEC after a WATCH failure, BLPOP timeout). */
  nullArray(): void {
    if (this.protocol === 2) this.header(0x2a, -1);
    else this.three(0x5f);
  }

  /** RESP3 `=<len+4>\r\n<fmt>:<text>\r\n` (fmt: `txt` or `mkd`); RESP2 a bulk string of the text. */
  verbatim(text: Uint8Array | string, format = 'txt'): void {
    assert(format.length === 3, 'a verbatim format is three bytes');
    if (this.protocol === 2) {
      this.bulk(text);
      return;
    }
    const bytes = typeof text === 'string' ? Buffer.from(text, 'utf8') : text;
    this.header(0x3d, bytes.length + 4);
    this.reserve(bytes.length + 6);
    this.len += this.buf.write(format, this.len, 3, 'latin1');
    this.buf[this.len++] = 0x3a; // :
    this.buf.set(bytes, this.len);
    this.len += bytes.length;
    this.crlf();
  }

  // ── Aggregates: headers, then the elements ─────────────────────────────────────────────────

  /** `*<n>\r\n`, followed by n elements. */
  arrayHeader(n: number): void {
    this.header(0x2a, n);
  }

  /** RESP3 `%<pairs>`; RESP2 `*<2·pairs>`. Followed by key, value, key, value… */
  mapHeader(pairs: number): void {
    if (this.protocol === 2) this.header(0x2a, pairs * 2);
    else this.header(0x25, pairs);
  }

  /** RESP3 `><n>` (an out-of-band push: Pub/Sub messages); RESP2 `*<n>`. */
  pushHeader(n: number): void {
    this.header(this.protocol === 2 ? 0x2a : 0x3e, n);
  }

  /** RESP3 `~<n>`; RESP2 `*<n>`. */
  setHeader(n: number): void {
    this.header(this.protocol === 2 ? 0x2a : 0x7e, n);
  }

  /** Pre-encoded bytes (a constant reply, or a reply encoded elsewhere). */
  raw(bytes: Uint8Array): void {
    this.reserve(bytes.length);
    this.len += copyBytes(this.buf, this.len, bytes);
  }

  // ── Encoding helpers ───────────────────────────────────────────────────────────────────────

  /** Room for `n` more bytes; returns the (possibly new) buffer. */
  private reserve(n: number): Buffer {
    const need = this.len + n;
    if (need > this.buf.length) {
      const step = RESP_WRITER_GROWTH_STEP_BYTES;
      const grown = Buffer.allocUnsafe(Math.ceil(Math.max(need, this.buf.length * 2) / step) * step);
      this.buf.copy(grown, 0, 0, this.len);
      this.buf = grown;
    }
    return this.buf;
  }

  private crlf(): void {
    this.buf[this.len] = CR;
    this.buf[this.len + 1] = LF;
    this.len += 2;
  }

  /** `<prefix><n>\r\n` with n a safe integer, digits written in place. */
  private header(prefix: number, n: number): void {
    assert(Number.isSafeInteger(n), 'RESP integers and lengths are safe integers');
    const b = this.reserve(HEADER_BYTES_MAX);
    let at = this.len;
    b[at++] = prefix;
    if (n < 0) {
      b[at++] = 0x2d; // -
      n = -n;
    }
    const digits = decimalDigits(n);
    at += digits;
    for (let i = 1; i <= digits; i++) {
      const q = Math.floor(n / 10);
      b[at - i] = 0x30 + (n - q * 10);
      n = q;
    }
    b[at] = CR;
    b[at + 1] = LF;
    this.len = at + 2;
  }

  /** `<prefix><ascii text>\r\n`, for text known to be ASCII without CR or LF. */
  private ascii(prefix: number, text: string): void {
    this.reserve(text.length + 3);
    this.buf[this.len++] = prefix;
    this.len += this.buf.write(text, this.len, text.length, 'latin1');
    this.crlf();
  }

  /** `<prefix><head><text>\r\n` with CR and LF in the text replaced by spaces (as addReplyErrorFormat does). */
  private line(prefix: number, head: string, text: string): void {
    this.reserve(1 + head.length + text.length * 3 + 2); // UTF-8 takes at most 3 bytes per UTF-16 unit
    this.buf[this.len++] = prefix;
    this.len += this.buf.write(head, this.len, head.length, 'latin1');
    const from = this.len;
    this.len += this.buf.write(text, from, text.length * 3, 'utf8');
    // In UTF-8 the bytes 0x0d and 0x0a only ever encode CR and LF themselves.
    for (let i = from; i < this.len; i++) if (this.buf[i] === CR || this.buf[i] === LF) this.buf[i] = SPACE;
    this.crlf();
  }

  /** `<prefix>\r\n` */
  private three(prefix: number): void {
    const b = this.reserve(3);
    b[this.len] = prefix;
    b[this.len + 1] = CR;
    b[this.len + 2] = LF;
    this.len += 3;
  }

  /** `<prefix><byte>\r\n` */
  private four(prefix: number, byte: number): void {
    const b = this.reserve(4);
    b[this.len] = prefix;
    b[this.len + 1] = byte;
    b[this.len + 2] = CR;
    b[this.len + 3] = LF;
    this.len += 4;
  }
}

/** Digits of a non-negative safe integer (powers of ten are exact doubles up to 1e22). */
function decimalDigits(n: number): number {
  let digits = 1;
  for (let limit = 10; n >= limit; limit *= 10) digits++;
  return digits;
}

/**
 * A double as Redis ≥ 7.2 prints it (util.c d2string): `nan`, `inf`, `-inf`, `0`, `-0`; integers up
 * to 2^62 in full; otherwise the shortest round-trip digits laid out like fpconv_dtoa (plain up to
 * 7 zeros of padding, `0.000001` down to 1e-6, scientific `1.5e-7` / `1e+21` beyond). fpconv's grisu2
 * digits are the shortest in all but rare cases, where it prints one more digit than we do.
 */
export function formatDouble(value: number): string {
  if (Number.isNaN(value)) return 'nan';
  if (value === Number.POSITIVE_INFINITY) return 'inf';
  if (value === Number.NEGATIVE_INFINITY) return '-inf';
  if (value === 0) return Object.is(value, -0) ? '-0' : '0';
  if (Number.isInteger(value) && Math.abs(value) <= DOUBLE_AS_INTEGER_MAX) {
    return Number.isSafeInteger(value) ? String(value) : BigInt(value).toString();
  }
  const [mantissa, exponent] = Math.abs(value).toExponential().split('e');
  const digits = mantissa.replace('.', '');
  const k = Number(exponent) - (digits.length - 1);
  return (value < 0 ? '-' : '') + layoutDigits(digits, k);
}

/** fpconv_dtoa's emit_digits: the value is digits × 10^k. */
function layoutDigits(digits: string, k: number): string {
  const n = digits.length;
  const exp = Math.abs(k + n - 1);
  if (k >= 0 && exp < n + 7) return digits + '0'.repeat(k);
  if (k < 0 && (k > -7 || exp < 4)) {
    const offset = n + k;
    if (offset <= 0) return `0.${'0'.repeat(-offset)}${digits}`;
    return `${digits.slice(0, offset)}.${digits.slice(offset)}`;
  }
  const fraction = n > 1 ? `.${digits.slice(1)}` : '';
  return `${digits[0]}${fraction}e${k + n - 1 < 0 ? '-' : '+'}${exp}`;
}
