// RESP request parsing for the server side: a byte state machine fed with socket chunks that yields
// complete commands whose arguments are views into those chunks. Redis's own parser is the
// specification (src/networking.c, processMultibulkBuffer and processInlineBuffer; sds.c,
// sdssplitargs): the same frames are accepted and the same error texts returned. Deviations, each
// deliberate: the byte after a length line's CR must be LF and a bulk must be followed by CRLF
// (Redis skips those bytes unchecked; we answer "invalid multibulk/bulk length"), an inline line is
// bounded even when its LF arrived in the same read, and a NUL byte is an ordinary byte when looking
// for CR/LF (Redis's strchr stops at it). Imports nothing that does I/O.
//
// Parser states (one command at a time; `Failed` is terminal and the connection is to be closed):
//
//                 '*'               CR              LF, count > 0
//   CommandStart ─────▶ CountLine ─────▶ CountLf ─────────────────▶ BulkPrefix ◀───────────────┐
//     │   ▲   ▲                            │ LF, count ≤ 0 (skipped)    │ '$'                  │
//     │   │   └────────────────────────────┘                            ▼                      │
//     │   │                                                       BulkLengthLine               │
//     │   │                                                             │ CR                   │
//     │   │                                                             ▼                      │
//     │   │                                                       BulkLengthLf                 │
//     │   │                                                             │ LF                   │
//     │   │                                                             ▼                      │
//     │   │                                                        BulkData (length bytes)     │
//     │   │                                                             │                      │
//     │   │        last argument: command ready                         ▼          more args   │
//     │   └──────────────────────────────────────────────────── BulkCr ─▶ BulkLf ──────────────┘
//     │ any other byte
//     ▼
//   InlineLine (up to LF) ──▶ command ready, or an empty line skipped ──▶ CommandStart
//
//   any state ── bad byte or limit ──▶ Failed
//
// Whole `*<n>` headers and `$<n>` arguments lying inside one chunk skip the byte states (fastCount,
// fastArguments); the states handle everything else, partial frames and errors included.
//
// Memory: a length line is never buffered (its digits are folded into a number as they arrive); an
// argument wholly inside one chunk is a byte range of that chunk (a `subarray` view only if `argv` is
// read); only an argument that straddles chunks, and inline lines, are copied into the parser's spill
// buffer, grown in 4 KiB steps.

import { assert } from './assert.js';
import { copyRange } from './bytes.js';
import { ErrorKind, TesseraError } from './errors.js';
import {
  RESP_BULK_BYTES_MAX,
  RESP_CLIENT_BUFFER_BYTES_MAX,
  RESP_INLINE_BYTES_MAX,
  RESP_MULTIBULK_ARGS_MAX,
} from './limits.js';

export { RESP_BULK_BYTES_MAX, RESP_CLIENT_BUFFER_BYTES_MAX, RESP_INLINE_BYTES_MAX, RESP_MULTIBULK_ARGS_MAX };

/** The spill buffer grows in steps of this, like undici's parse buffer, so small growth is rare. */
export const RESP_SPILL_GROWTH_STEP_BYTES = 4096;
/** A spill buffer that grew past this (a big straddling value) is dropped at the next command, so idle connections stay small. */
export const RESP_SPILL_BYTES_KEEP_MAX = 64 * 1024;

assert(RESP_SPILL_BYTES_KEEP_MAX >= RESP_INLINE_BYTES_MAX, 'an inline line must fit a kept spill buffer');

/** Why a request was refused; each maps to one of Redis's error texts. */
export const RespProtocolReason = {
  InvalidMultibulkLength: 1,
  InvalidBulkLength: 2,
  ExpectedDollar: 3,
  TooBigInlineRequest: 4,
  UnbalancedQuotes: 5,
  TooBigMultibulkCount: 6,
  TooBigBulkCount: 7,
} as const;
export type RespProtocolReason = (typeof RespProtocolReason)[keyof typeof RespProtocolReason];

const PROTOCOL_ERROR_TEXTS: Record<RespProtocolReason, string> = {
  [RespProtocolReason.InvalidMultibulkLength]: 'Protocol error: invalid multibulk length',
  [RespProtocolReason.InvalidBulkLength]: 'Protocol error: invalid bulk length',
  [RespProtocolReason.ExpectedDollar]: "Protocol error: expected '$', got '%c'", // %c: the byte
  [RespProtocolReason.TooBigInlineRequest]: 'Protocol error: too big inline request',
  [RespProtocolReason.UnbalancedQuotes]: 'Protocol error: unbalanced quotes in request',
  [RespProtocolReason.TooBigMultibulkCount]: 'Protocol error: too big mbulk count string',
  [RespProtocolReason.TooBigBulkCount]: 'Protocol error: too big bulk count string',
};

/**
 * A request the connection cannot recover from. `message` is Redis's text, to be sent as
 * `-ERR <message>` before the connection is closed.
 */
export class RespProtocolError extends TesseraError {
  override name = 'RespProtocolError';
  readonly reason: RespProtocolReason;

  constructor(reason: RespProtocolReason, byte = 0) {
    // Redis prints the offending byte with %c and then maps CR/LF to spaces (addReplyErrorFormat).
    const got = byte === CR || byte === LF ? ' ' : String.fromCharCode(byte);
    super(
      ErrorKind.InvalidInput,
      PROTOCOL_ERROR_TEXTS[reason].replace('%c', () => got),
    );
    this.reason = reason;
  }
}

const LF = 0x0a;
const CR = 0x0d;
const SPACE = 0x20;
const DQUOTE = 0x22;
const DOLLAR = 0x24;
const SQUOTE = 0x27;
const STAR = 0x2a;
const MINUS = 0x2d;
const ZERO = 0x30;
const BACKSLASH = 0x5c;
const LOWER_X = 0x78;
const EMPTY = Buffer.alloc(0);
/** Digits of 2^63: a length beyond int64 is invalid, as in Redis's string2ll. */
const INT64_LIMIT_DIGITS = [9, 2, 2, 3, 3, 7, 2, 0, 3, 6, 8, 5, 4, 7, 7, 5, 8, 0, 8];

/**
 * One parsed command. The parser reuses a single instance: everything here is valid until the next
 * call to `RespParser.next()` (not invalidated by `push()`). Argument `i` is the byte range
 * `bufs[i][starts[i], ends[i])`; `bufs[i]` is either a chunk passed to `push()` or the parser's
 * spill buffer, which the next command overwrites. Copy what you keep.
 */
export class RespCommand {
  /** Number of arguments (≥ 1); argument 0 is the command name. */
  argc = 0;
  /** Backing buffer, start and end of each argument, for index < argc. Read-only for consumers. */
  readonly bufs: Buffer[] = [];
  readonly starts: number[] = [];
  readonly ends: number[] = [];
  /** Slots of `bufs` holding references, cleared past `argc` so old chunks can be collected. */
  private filled = 0;
  private readonly views: Buffer[] = [];
  private viewsReady = false;

  /**
   * The arguments as `Buffer` views. The array object is reused between commands and built on first
   * access (one `subarray` per argument); the offset accessors below allocate nothing.
   */
  get argv(): Buffer[] {
    if (!this.viewsReady) {
      const views = this.views;
      for (let i = 0; i < this.argc; i++) views[i] = this.bufs[i].subarray(this.starts[i], this.ends[i]);
      if (views.length > this.argc) views.length = this.argc;
      this.viewsReady = true;
    }
    return this.views;
  }

  /** Argument `i` as a view (allocates the view). */
  arg(i: number): Buffer {
    return this.bufs[i].subarray(this.starts[i], this.ends[i]);
  }

  argLength(i: number): number {
    return this.ends[i] - this.starts[i];
  }

  /** Whether argument `i` equals `upperName` ignoring ASCII case; allocates nothing. */
  argIs(i: number, upperName: string): boolean {
    return rangeIs(this.bufs[i], this.starts[i], this.ends[i], upperName);
  }

  /** Copies argument `i` into `target` at `at`; returns the bytes copied. Allocates no view of a short one. */
  copyArg(i: number, target: Uint8Array, at: number): number {
    return copyRange(this.bufs[i], this.starts[i], this.ends[i], target, at);
  }

  /** @internal parser side */
  clear(): void {
    this.argc = 0;
    this.viewsReady = false;
  }

  /** @internal parser side */
  add(buf: Buffer, start: number, end: number): void {
    const i = this.argc++;
    this.bufs[i] = buf;
    this.starts[i] = start;
    this.ends[i] = end;
  }

  /** @internal parser side: drops references past argc. */
  seal(): void {
    for (let i = this.argc; i < this.filled; i++) this.bufs[i] = EMPTY;
    this.filled = this.argc;
  }
}

const State = {
  CommandStart: 0,
  CountLine: 1,
  CountLf: 2,
  BulkPrefix: 3,
  BulkLengthLine: 4,
  BulkLengthLf: 5,
  BulkData: 6,
  BulkCr: 7,
  BulkLf: 8,
  InlineLine: 9,
  Failed: 10,
} as const;
type State = (typeof State)[keyof typeof State];

/** What one state handler achieved: keep going, a command is ready, or the request is refused. */
const Step = { Continue: 0, Command: 1, Failed: 2 } as const;
type Step = (typeof Step)[keyof typeof Step];

/** Result of scanning a length line: its CR was consumed, more bytes are needed, or it is too long. */
const Line = { Found: 0, NeedMore: 1, TooLong: 2 } as const;
type Line = (typeof Line)[keyof typeof Line];

/**
 * Incremental RESP request parser, one per connection. Feed socket chunks with `push()`, then call
 * `next()` until it returns `null`:
 *
 *   parser.push(chunk);
 *   for (let c = parser.next(); c !== null; c = parser.next()) {
 *     if (c instanceof RespProtocolError) { reply `-ERR ${c.message}`, close; break; }
 *     dispatch(c);  // copy argument bytes before the next next()
 *   }
 *   if (parser.bufferedBytes > RESP_CLIENT_BUFFER_BYTES_MAX) close;
 *
 * Lifetime rules: the returned command (and its `argv` array and views) is valid until the next
 * `next()`; `push()` never invalidates it. Pushed chunks are read in place, so the caller must not
 * modify a chunk after pushing it (Node's socket chunks are never reused). Once `next()` returned a
 * `RespProtocolError` it returns the same error forever and `push()` drops its input.
 */
export class RespParser {
  private state: State = State.CommandStart;
  /** The chunk being parsed; bytes [pos, end) are not yet consumed. */
  private src: Buffer = EMPTY;
  private pos = 0;
  private end = 0;
  /** Stream offset of src[0]. */
  private srcBase = 0;
  /** Chunks pushed while `src` still had unconsumed bytes: an index-based queue, never shifted. */
  private readonly queue: Buffer[] = [];
  private queueHead = 0;
  private pushedBytes = 0;
  /** Stream offset where the command being parsed began; bytes before it are done with. */
  private commandBase = 0;

  /** Bytes [0, spillLength) belong to the current command: straddling bulks, or its inline line. */
  private spill: Buffer = EMPTY;
  private spillLength = 0;

  // A length line's text, folded into a number byte by byte with string2ll's rules.
  /** Bytes of the line so far, its '*' or '$' included. */
  private lineBytes = 0;
  private numberValue = 0;
  private numberDigits = 0;
  private numberNegative = false;
  private numberLeadingZero = false;
  private numberBad = false;
  /** Sign of the first digit that differs from 2^63's (0 while equal). */
  private numberOrder = 0;

  private argsLeft = 0;
  private bulkLeft = 0;
  /** Where the current bulk starts in the spill, or -1 while it is still inside one chunk. */
  private bulkSpillStart = -1;

  private failure: RespProtocolError | null = null;
  private readonly command = new RespCommand();

  /**
   * Bytes received but not yet returned as part of a complete command: unparsed input plus the
   * command in progress. The driver compares it with RESP_CLIENT_BUFFER_BYTES_MAX after draining.
   */
  get bufferedBytes(): number {
    return this.pushedBytes - this.commandBase;
  }

  /** Bytes of parser-owned memory (the spill buffer), for per-connection memory accounting. */
  get retainedBytes(): number {
    return this.spill.length;
  }

  /** Queues a socket chunk; parsing happens in `next()`. */
  push(chunk: Buffer): void {
    if (this.failure !== null || chunk.length === 0) return;
    this.pushedBytes += chunk.length;
    if (this.pos === this.end && this.queueHead === this.queue.length) this.adopt(chunk);
    else this.queue.push(chunk);
  }

  /** The next complete command, `null` when more bytes are needed, or the error that ends the connection. */
  next(): RespCommand | RespProtocolError | null {
    if (this.failure !== null) return this.failure;
    for (;;) {
      if (this.pos === this.end && !this.adoptQueuedChunk()) return null;
      const step = this.step();
      if (step === Step.Command) return this.completeCommand();
      if (step === Step.Failed) return this.failure!;
    }
  }

  private step(): Step {
    switch (this.state) {
      case State.CommandStart:
        return this.startCommand();
      case State.CountLine:
        return this.countLine();
      case State.CountLf:
        return this.countLf();
      case State.BulkPrefix:
        return this.bulkPrefix();
      case State.BulkLengthLine:
        return this.bulkLengthLine();
      case State.BulkLengthLf:
        return this.bulkLengthLf();
      case State.BulkData:
        return this.bulkData();
      case State.BulkCr:
        return this.bulkCr();
      case State.BulkLf:
        return this.bulkLf();
      case State.InlineLine:
        return this.inlineLine();
      default:
        assert(false, `RespParser stepped in state ${this.state}`);
    }
  }

  private adopt(chunk: Buffer): void {
    this.srcBase += this.end;
    this.src = chunk;
    this.pos = 0;
    this.end = chunk.length;
  }

  private adoptQueuedChunk(): boolean {
    if (this.queueHead === this.queue.length) {
      if (this.queueHead > 0) {
        this.queue.length = 0;
        this.queueHead = 0;
      }
      return false;
    }
    const chunk = this.queue[this.queueHead];
    this.queue[this.queueHead++] = EMPTY;
    this.adopt(chunk);
    return true;
  }

  private startCommand(): Step {
    // The previous command's views die here: its spill bytes are about to be overwritten.
    this.commandBase = this.srcBase + this.pos;
    this.command.clear();
    if (this.spill.length > RESP_SPILL_BYTES_KEEP_MAX) this.spill = EMPTY;
    this.spillLength = 0;
    if (this.src[this.pos] === STAR) {
      if (this.fastCount()) return Step.Continue;
      this.pos++;
      this.startLengthLine();
      this.state = State.CountLine;
    } else {
      this.state = State.InlineLine;
    }
    return Step.Continue;
  }

  private completeCommand(): RespCommand {
    this.state = State.CommandStart;
    this.commandBase = this.srcBase + this.pos;
    this.command.seal();
    return this.command;
  }

  /** An empty command (`*0`, `*-1`, a blank inline line) is skipped, as Redis does. */
  private skipCommand(): Step {
    this.state = State.CommandStart;
    this.commandBase = this.srcBase + this.pos;
    return Step.Continue;
  }

  private fail(reason: RespProtocolReason, byte = 0): Step {
    this.failure = new RespProtocolError(reason, byte);
    this.state = State.Failed;
    this.queue.length = 0;
    this.queueHead = 0;
    return Step.Failed;
  }

  // ── Multibulk ──────────────────────────────────────────────────────────────────────────────

  private countLine(): Step {
    const line = this.scanLengthLine();
    if (line === Line.NeedMore) return Step.Continue;
    if (line === Line.TooLong) return this.fail(RespProtocolReason.TooBigMultibulkCount);
    if (!this.numberValid() || this.signedNumber() > RESP_MULTIBULK_ARGS_MAX) {
      return this.fail(RespProtocolReason.InvalidMultibulkLength);
    }
    this.argsLeft = this.signedNumber();
    this.state = State.CountLf;
    return Step.Continue;
  }

  private countLf(): Step {
    if (this.src[this.pos] !== LF) return this.fail(RespProtocolReason.InvalidMultibulkLength);
    this.pos++;
    if (this.argsLeft <= 0) return this.skipCommand();
    this.state = State.BulkPrefix;
    return Step.Continue;
  }

  private bulkPrefix(): Step {
    if (this.fastArguments()) return Step.Command;
    if (this.pos === this.end) return Step.Continue;
    const b = this.src[this.pos];
    if (b !== DOLLAR) return this.fail(RespProtocolReason.ExpectedDollar, b);
    this.pos++;
    this.startLengthLine();
    this.state = State.BulkLengthLine;
    return Step.Continue;
  }

  private bulkLengthLine(): Step {
    const line = this.scanLengthLine();
    if (line === Line.NeedMore) return Step.Continue;
    if (line === Line.TooLong) return this.fail(RespProtocolReason.TooBigBulkCount);
    const length = this.signedNumber();
    if (!this.numberValid() || length < 0 || length > RESP_BULK_BYTES_MAX) {
      return this.fail(RespProtocolReason.InvalidBulkLength);
    }
    this.bulkLeft = length;
    this.state = State.BulkLengthLf;
    return Step.Continue;
  }

  private bulkLengthLf(): Step {
    if (this.src[this.pos] !== LF) return this.fail(RespProtocolReason.InvalidBulkLength);
    this.pos++;
    this.bulkSpillStart = -1;
    this.state = State.BulkData;
    return Step.Continue;
  }

  private bulkData(): Step {
    const available = this.end - this.pos;
    if (this.bulkSpillStart < 0) {
      if (available >= this.bulkLeft) {
        // The whole argument is inside this chunk: hand out a view, copy nothing.
        this.command.add(this.src, this.pos, this.pos + this.bulkLeft);
        this.pos += this.bulkLeft;
        this.state = State.BulkCr;
        return Step.Continue;
      }
      this.bulkSpillStart = this.spillLength;
    }
    const n = Math.min(available, this.bulkLeft);
    this.spillAppend(this.pos, this.pos + n, this.bulkLeft);
    this.pos += n;
    this.bulkLeft -= n;
    if (this.bulkLeft > 0) return Step.Continue;
    this.command.add(this.spill, this.bulkSpillStart, this.spillLength);
    this.state = State.BulkCr;
    return Step.Continue;
  }

  private bulkCr(): Step {
    // Redis skips these two bytes unchecked; anything but CRLF means the length was wrong.
    if (this.src[this.pos] !== CR) return this.fail(RespProtocolReason.InvalidBulkLength);
    this.pos++;
    this.state = State.BulkLf;
    return Step.Continue;
  }

  private bulkLf(): Step {
    if (this.src[this.pos] !== LF) return this.fail(RespProtocolReason.InvalidBulkLength);
    this.pos++;
    if (--this.argsLeft > 0) {
      this.state = State.BulkPrefix;
      return Step.Continue;
    }
    return Step.Command;
  }

  // ── Fast path: whole frames inside the chunk ───────────────────────────────────────────────
  // The common case, `*<n>\r\n` and `$<n>\r\n<bytes>\r\n` with plain positive lengths lying wholly in
  // this chunk, parsed without a state transition per byte. It accepts a subset of what the byte
  // states accept and consumes only whole items; on anything else it stops and leaves the bytes to the
  // byte states, which produce the same result or Redis's error.

  /** `*<1–7 digits>\r\n` at pos: sets the argument count and moves to BulkPrefix. */
  private fastCount(): boolean {
    const src = this.src;
    let i = this.pos + 1;
    let count = src[i] - ZERO;
    if (!(count >= 1 && count <= 9)) return false;
    const digitsEnd = Math.min(this.end, i + 7);
    for (i++; i < digitsEnd; i++) {
      const digit = src[i] - ZERO;
      if (!(digit >= 0 && digit <= 9)) break;
      count = count * 10 + digit;
    }
    if (i + 1 >= this.end || src[i] !== CR || src[i + 1] !== LF || count > RESP_MULTIBULK_ARGS_MAX)
      return false;
    this.pos = i + 2;
    this.argsLeft = count;
    this.state = State.BulkPrefix;
    return true;
  }

  /** As many whole `$<len>\r\n<bytes>\r\n` arguments as lie in this chunk; true when the command is complete. */
  private fastArguments(): boolean {
    const src = this.src;
    const end = this.end;
    let pos = this.pos;
    while (this.argsLeft > 0 && pos + 5 < end && src[pos] === DOLLAR) {
      let i = pos + 1;
      let length = src[i++] - ZERO;
      if (!(length >= 0 && length <= 9)) break;
      const digitsEnd = Math.min(end, pos + 9); // 8 digits: RESP_BULK_BYTES_MAX has 8
      if (length > 0) {
        for (; i < digitsEnd; i++) {
          const digit = src[i] - ZERO;
          if (!(digit >= 0 && digit <= 9)) break;
          length = length * 10 + digit;
        }
      }
      const start = i + 2;
      const stop = start + length;
      if (stop + 2 > end || src[i] !== CR || src[i + 1] !== LF || length > RESP_BULK_BYTES_MAX) break;
      if (src[stop] !== CR || src[stop + 1] !== LF) break;
      this.command.add(src, start, stop);
      pos = stop + 2;
      this.argsLeft--;
    }
    this.pos = pos;
    return this.argsLeft === 0;
  }

  // ── Length lines: string2ll over a streamed line ───────────────────────────────────────────

  private startLengthLine(): void {
    this.lineBytes = 1;
    this.numberValue = 0;
    this.numberDigits = 0;
    this.numberNegative = false;
    this.numberLeadingZero = false;
    this.numberBad = false;
    this.numberOrder = 0;
  }

  /** Folds line bytes into the number up to CR (consumed), never reading past the line bound. */
  private scanLengthLine(): Line {
    const src = this.src;
    const stop = Math.min(this.end, this.pos + RESP_INLINE_BYTES_MAX + 1 - this.lineBytes);
    for (let i = this.pos; i < stop; i++) {
      const b = src[i];
      if (b === CR) {
        this.pos = i + 1;
        return Line.Found;
      }
      this.numberByte(b);
    }
    this.pos = stop;
    return this.lineBytes > RESP_INLINE_BYTES_MAX ? Line.TooLong : Line.NeedMore;
  }

  private numberByte(b: number): void {
    const index = this.lineBytes++ - 1;
    const digit = b - ZERO;
    if (digit < 0 || digit > 9) {
      if (b === MINUS && index === 0) this.numberNegative = true;
      else this.numberBad = true;
      return;
    }
    const n = this.numberDigits++;
    if (n === 0) this.numberLeadingZero = digit === 0;
    else if (this.numberLeadingZero) this.numberBad = true;
    if (n < INT64_LIMIT_DIGITS.length && this.numberOrder === 0)
      this.numberOrder = digit - INT64_LIMIT_DIGITS[n];
    this.numberValue = this.numberValue * 10 + digit;
  }

  /** string2ll: "0", or an optional '-' then [1-9][0-9]* within int64 (2^63 only when negative). */
  private numberValid(): boolean {
    if (this.numberBad || this.numberDigits === 0) return false;
    if (this.numberLeadingZero && this.numberNegative) return false;
    if (this.numberDigits !== INT64_LIMIT_DIGITS.length) return this.numberDigits < INT64_LIMIT_DIGITS.length;
    return this.numberOrder < 0 || (this.numberOrder === 0 && this.numberNegative);
  }

  private signedNumber(): number {
    return this.numberNegative ? -this.numberValue : this.numberValue;
  }

  // ── Inline ─────────────────────────────────────────────────────────────────────────────────

  private inlineLine(): Step {
    const lf = this.src.indexOf(LF, this.pos);
    const lineEnd = lf < 0 ? this.end : lf;
    if (this.spillLength + (lineEnd - this.pos) > RESP_INLINE_BYTES_MAX) {
      return this.fail(RespProtocolReason.TooBigInlineRequest);
    }
    // Copied even when whole: splitting unescapes in place, and the caller's chunk is not ours.
    this.spillAppend(this.pos, lineEnd, RESP_INLINE_BYTES_MAX - this.spillLength);
    if (lf < 0) {
      this.pos = this.end;
      return Step.Continue;
    }
    this.pos = lf + 1;
    let length = this.spillLength;
    if (length > 0 && this.spill[length - 1] === CR) length--;
    const argc = splitInlineArgs(this.spill, length, this.command);
    if (argc < 0) return this.fail(RespProtocolReason.UnbalancedQuotes);
    return argc === 0 ? this.skipCommand() : Step.Command;
  }

  // ── Spill buffer ───────────────────────────────────────────────────────────────────────────

  /** Copies src[from, to) to the end of the spill; `hint` is how many bytes the current item may still bring. */
  private spillAppend(from: number, to: number, hint: number): void {
    const need = this.spillLength + (to - from);
    if (need > this.spill.length) this.growSpill(need, this.spillLength + hint);
    this.src.copy(this.spill, this.spillLength, from, to);
    this.spillLength = need;
  }

  /**
   * Doubles (amortised linear copying for a big value arriving in many chunks) but never past what the
   * current item can still need, in RESP_SPILL_GROWTH_STEP_BYTES steps. Earlier views of this command
   * keep the old buffer alive, so growing never invalidates them.
   */
  private growSpill(need: number, ceiling: number): void {
    const target = Math.max(need, Math.min(this.spill.length * 2, ceiling));
    const step = RESP_SPILL_GROWTH_STEP_BYTES;
    const grown = Buffer.allocUnsafe(Math.ceil(target / step) * step);
    this.spill.copy(grown, 0, 0, this.spillLength);
    this.spill = grown;
  }
}

// ── Inline argument splitting (sds.c sdssplitargs) ─────────────────────────────────────────────

function isSpace(b: number): boolean {
  // C isspace: space, \t, \n, \v, \f, \r.
  return b === SPACE || (b >= 0x09 && b <= 0x0d);
}

function isHexDigit(b: number): boolean {
  return (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x46) || (b >= 0x61 && b <= 0x66);
}

function hexValue(b: number): number {
  return b <= 0x39 ? b - 0x30 : (b | 0x20) - 0x61 + 10;
}

/** Byte escapes inside double quotes; any other escaped byte stands for itself. */
function escapedByte(b: number): number {
  switch (b) {
    case 0x6e: // n
      return LF;
    case 0x72: // r
      return CR;
    case 0x74: // t
      return 0x09;
    case 0x62: // b
      return 0x08;
    case 0x61: // a
      return 0x07;
    default:
      return b;
  }
}

/**
 * Splits an inline line into arguments with Redis's rules (sdssplitargs): blanks separate words;
 * "double quotes" take \xHH, \n, \r, \t, \b, \a and \<any> escapes; 'single quotes' take only \';
 * a closing quote must be followed by a blank or the end; a NUL byte ends the line (Redis reads it
 * as a C string). Unescapes in place (every output byte consumes at least one input byte, so the
 * write index never passes the read index) and adds each argument to `into` as a range of `line`.
 * Returns the argument count, or -1 for unbalanced quotes.
 */
export function splitInlineArgs(line: Buffer, length: number, into: RespCommand): number {
  let end = 0;
  while (end < length && line[end] !== 0) end++;
  let r = 0;
  for (;;) {
    while (r < end && isSpace(line[r])) r++;
    if (r === end) return into.argc;
    const w = into.argc === 0 ? 0 : into.ends[into.argc - 1];
    r = splitWord(line, r, end, w, into);
    if (r < 0) return -1;
  }
}

/** Reads one word from `r`, writes its bytes from `w` and adds it to `into`; returns the read index after it or -1. */
function splitWord(line: Buffer, r: number, end: number, w: number, into: RespCommand): number {
  const start = w;
  let quote = 0; // 0: bare, DQUOTE or SQUOTE: inside that quote
  for (;;) {
    const c = r < end ? line[r] : 0;
    if (quote === 0) {
      if (c === 0 || c === SPACE || c === LF || c === CR || c === 0x09) break;
      if (c === DQUOTE || c === SQUOTE) quote = c;
      else line[w++] = c;
      r++;
      continue;
    }
    if (r >= end) return -1; // unterminated quotes
    const c1 = r + 1 < end ? line[r + 1] : 0;
    if (c === quote) {
      if (c1 !== 0 && !isSpace(c1)) return -1; // a closing quote must be followed by a blank
      r++;
      break;
    }
    if (quote === DQUOTE && c === BACKSLASH && c1 !== 0) {
      if (c1 === LOWER_X && r + 3 < end && isHexDigit(line[r + 2]) && isHexDigit(line[r + 3])) {
        line[w++] = hexValue(line[r + 2]) * 16 + hexValue(line[r + 3]);
        r += 4;
      } else {
        line[w++] = escapedByte(c1);
        r += 2;
      }
    } else if (quote === SQUOTE && c === BACKSLASH && c1 === SQUOTE) {
      line[w++] = SQUOTE;
      r += 2;
    } else {
      line[w++] = c;
      r++;
    }
  }
  into.add(line, start, w);
  return r;
}

// ── Command names ──────────────────────────────────────────────────────────────────────────────

/** ASCII upper case of one byte; other bytes unchanged. */
function upper(b: number): number {
  return b >= 0x61 && b <= 0x7a ? b - 0x20 : b;
}

function rangeIs(buf: Uint8Array, start: number, end: number, upperName: string): boolean {
  if (end - start !== upperName.length) return false;
  for (let i = 0; i < upperName.length; i++) {
    if (upper(buf[start + i]) !== upperName.charCodeAt(i)) return false;
  }
  return true;
}

/** Whether `name` equals `upperName` (an upper-case ASCII literal) ignoring ASCII case; no strings built. */
export function commandIs(name: Uint8Array, upperName: string): boolean {
  return rangeIs(name, 0, name.length, upperName);
}

/** Upper-case (ASCII only) latin1 string of a name: for the slow path (errors, rare commands). */
export function commandNameKey(name: Uint8Array): string {
  const folded = Buffer.allocUnsafe(name.length);
  for (let i = 0; i < name.length; i++) folded[i] = upper(name[i]);
  return folded.toString('latin1');
}

/**
 * Command names to ids (their index in the constructor's list), case-insensitively, by hashing the
 * bytes: an open-addressing table checked by byte comparison. `lookup` builds no string.
 */
export class CommandTable {
  /** Upper-case names back to back; name `id` is nameBytes[nameStarts[id], nameStarts[id + 1]). */
  private readonly nameBytes: Uint8Array;
  private readonly nameStarts: Int32Array;
  /** id + 1 per slot, 0 when empty; a power of two at least twice the name count (short probes). */
  private readonly slots: Int32Array;
  private readonly nameLengthMax: number;

  constructor(names: readonly string[]) {
    const encoded = names.map((n) => Buffer.from(n, 'latin1'));
    this.nameBytes = Buffer.concat(encoded);
    this.nameStarts = new Int32Array(names.length + 1);
    let slotCount = 8;
    while (slotCount < names.length * 2) slotCount *= 2;
    this.slots = new Int32Array(slotCount);
    this.nameLengthMax = 0;
    for (let id = 0; id < names.length; id++) {
      const name = names[id];
      assert(/^[\x21-\x60\x7b-\x7e]+$/.test(name), `command name ${name} must be printable upper-case ASCII`);
      assert(this.lookup(encoded[id]) === -1, `command name ${name} is listed twice`);
      this.nameStarts[id + 1] = this.nameStarts[id] + name.length;
      this.nameLengthMax = Math.max(this.nameLengthMax, name.length);
      let slot = hashUpper(encoded[id], 0, name.length) & (slotCount - 1);
      while (this.slots[slot] !== 0) slot = (slot + 1) & (slotCount - 1);
      this.slots[slot] = id + 1;
    }
  }

  /** The id of buf[start, end) as a command name, or -1. */
  lookup(buf: Uint8Array, start = 0, end = buf.length): number {
    const length = end - start;
    if (length === 0 || length > this.nameLengthMax) return -1;
    const mask = this.slots.length - 1;
    for (let slot = hashUpper(buf, start, end) & mask; ; slot = (slot + 1) & mask) {
      const id = this.slots[slot] - 1;
      if (id < 0) return -1;
      if (this.matches(id, buf, start, length)) return id;
    }
  }

  /** The id of a command's name (argument 0), or -1. */
  lookupCommand(command: RespCommand): number {
    return this.lookup(command.bufs[0], command.starts[0], command.ends[0]);
  }

  private matches(id: number, buf: Uint8Array, start: number, length: number): boolean {
    const at = this.nameStarts[id];
    if (this.nameStarts[id + 1] - at !== length) return false;
    for (let i = 0; i < length; i++) if (upper(buf[start + i]) !== this.nameBytes[at + i]) return false;
    return true;
  }
}

/** FNV-1a over upper-cased bytes. */
function hashUpper(buf: Uint8Array, start: number, end: number): number {
  let h = 0x811c9dc5;
  for (let i = start; i < end; i++) h = Math.imul(h ^ upper(buf[i]), 0x01000193);
  return h >>> 0;
}
