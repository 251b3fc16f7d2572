// Encodes the harness's few commands straight into one growable buffer per connection, so that a
// batch of requests leaves in one socket write. Keys are `<prefix><index>` with the index written as
// KEY_DIGITS zero-padded decimal digits, straight into the buffer; the fixed parts of each command
// and the SET value are encoded once, at construction.
//
//   GET   *2\r\n $3\r\nGET\r\n  $<k>\r\n<key>\r\n
//   SET   *3\r\n $3\r\nSET\r\n  $<k>\r\n<key>\r\n  $<v>\r\n<value>\r\n
//   MGET  *<n+1>\r\n $4\r\nMGET\r\n  ($<k>\r\n<key>\r\n) × n

import { assert } from '../../src/core/assert.js';

/** Digits of a key index: up to 10^10 keys, and every key the same length. */
export const KEY_DIGITS = 10;
export const KEY_INDEX_MAX = 10 ** KEY_DIGITS - 1;
/** Initial buffer: a deep pipeline of small requests fits without growing. */
const WRITER_INITIAL_BYTES = 64 * 1024;

/** The parts of every request, encoded once per run and shared by all connections. */
export class RequestTemplates {
  readonly keyBytes: number;
  readonly prefix: Buffer;
  /** `$<k>\r\n`: the header of one key argument. */
  readonly keyHeader: Buffer;
  readonly getHead: Buffer;
  readonly setHead: Buffer;
  /** `$<v>\r\n<value>\r\n`: SET's value argument. */
  readonly valueArg: Buffer;
  readonly mgetName: Buffer;

  constructor(prefix: string, value: Buffer) {
    this.prefix = Buffer.from(prefix, 'utf8');
    this.keyBytes = this.prefix.length + KEY_DIGITS;
    this.keyHeader = Buffer.from(`$${this.keyBytes}\r\n`, 'latin1');
    this.getHead = Buffer.from('*2\r\n$3\r\nGET\r\n', 'latin1');
    this.setHead = Buffer.from('*3\r\n$3\r\nSET\r\n', 'latin1');
    this.valueArg = Buffer.concat([
      Buffer.from(`$${value.length}\r\n`, 'latin1'),
      value,
      Buffer.from('\r\n'),
    ]);
    this.mgetName = Buffer.from('$4\r\nMGET\r\n', 'latin1');
  }

  /** The key of `index` as a string (for messages and tests; the hot path writes bytes). */
  key(index: number): string {
    return `${this.prefix.toString('utf8')}${String(index).padStart(KEY_DIGITS, '0')}`;
  }
}

/** Pending request bytes of one connection. */
export class RequestWriter {
  private buf = Buffer.allocUnsafe(WRITER_INITIAL_BYTES);
  private len = 0;

  constructor(private readonly t: RequestTemplates) {}

  get length(): number {
    return this.len;
  }

  get(key: number): void {
    const t = this.t;
    this.reserve(t.getHead.length + t.keyHeader.length + t.keyBytes + 2);
    this.put(t.getHead);
    this.key(key);
  }

  set(key: number): void {
    const t = this.t;
    this.reserve(t.setHead.length + t.keyHeader.length + t.keyBytes + 2 + t.valueArg.length);
    this.put(t.setHead);
    this.key(key);
    this.put(t.valueArg);
  }

  /** MGET of `count` consecutive keys from `first`. */
  mget(first: number, count: number): void {
    const t = this.t;
    assert(count >= 1, 'MGET takes at least one key');
    this.reserve(16 + t.mgetName.length + count * (t.keyHeader.length + t.keyBytes + 2));
    this.len += this.buf.write(`*${count + 1}\r\n`, this.len, 'latin1');
    this.put(t.mgetName);
    for (let i = 0; i < count; i++) this.key(first + i);
  }

  /** Any command with string arguments (setup commands: AUTH, PING). */
  command(args: readonly string[]): void {
    const parts = [`*${args.length}\r\n`];
    for (const arg of args) parts.push(`$${Buffer.byteLength(arg, 'utf8')}\r\n${arg}\r\n`);
    const bytes = Buffer.from(parts.join(''), 'utf8');
    this.reserve(bytes.length);
    this.put(bytes);
  }

  /**
   * The pending bytes, for one socket write; the writer is left empty. The returned view stays valid
   * until `release(reusable)` says whether the socket still holds it.
   */
  take(): Buffer {
    const out = this.buf.subarray(0, this.len);
    this.len = 0;
    return out;
  }

  /**
   * After a write of `take()`'s bytes: `reusable` when the socket wrote them at once (it holds no
   * reference), else the writer moves to a fresh buffer and leaves the old one to the socket.
   */
  release(reusable: boolean): void {
    if (!reusable) this.buf = Buffer.allocUnsafe(Math.max(WRITER_INITIAL_BYTES, this.buf.length));
  }

  /** Drops the pending bytes (the connection was lost). */
  clear(): void {
    this.len = 0;
  }

  private key(index: number): void {
    assert(index >= 0 && index <= KEY_INDEX_MAX, `key index ${index} out of range`);
    const t = this.t;
    const b = this.buf;
    this.put(t.keyHeader);
    this.put(t.prefix);
    let n = index;
    const last = this.len + KEY_DIGITS - 1;
    for (let at = last; at > last - KEY_DIGITS; at--) {
      b[at] = 0x30 + (n % 10);
      n = Math.floor(n / 10);
    }
    b[last + 1] = 0x0d;
    b[last + 2] = 0x0a;
    this.len = last + 3;
  }

  private put(bytes: Buffer): void {
    bytes.copy(this.buf, this.len);
    this.len += bytes.length;
  }

  private reserve(bytes: number): void {
    if (this.len + bytes <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.len + bytes) size *= 2;
    const grown = Buffer.allocUnsafe(size);
    this.buf.copy(grown, 0, 0, this.len);
    this.buf = grown;
  }
}
