// A single-producer single-consumer byte ring of length-prefixed records in a SharedArrayBuffer, one per
// direction between the main thread and a worker (DESIGN.md "SharedArrayBuffer rings").
//
// Header (Int32Array, one 128-byte block per writer so the two ends never share a cache line — 128 because
// adjacent-line prefetchers pair 64-byte lines), then the data region of CAPACITY bytes, a power of two:
//
//   byte 0     ┌─────────────┬──────────────────┬─────┐
//              │ WRITE (u32) │ PRODUCER_WAITING │ ... │  stored only by the producer
//   byte 128   ├─────────────┼──────────────────┼─────┤
//              │ READ (u32)  │ CONSUMER_WAITING │ ... │  stored only by the consumer
//   byte 256   ├─────────────┼──────────────────┼─────┤
//              │ CLOSED      │ CAPACITY         │MAGIC│  CLOSED by either end; the rest set once
//   byte 384   ├─────────────┴──────────────────┴─────┤
//              │ data: records, offset = counter & (CAPACITY - 1)
//              └──────────────────────────────────────┘
//
// WRITE and READ are monotonically increasing byte counters kept modulo 2^32 (stored as int32, read with
// `>>> 0`); CAPACITY divides 2^32, so `used = (WRITE - READ) >>> 0` stays exact across the wrap.
//
// A record is `u32 payload length + payload`, padded to 4 bytes, and never straddles the end of the data
// region: when the contiguous space left at the end is too small, the producer writes a PAD length there
// and continues at offset 0, so the consumer always decodes a record in place. Lengths are native-endian:
// both ends live in one process.

import { assert } from '../core/assert.js';
import { ErrorKind, TesseraError } from '../core/errors.js';
import { RING_RECORD_HEADER_BYTES, RING_WAKE_CHECK_MS } from '../core/limits.js';

/** Int32 indices into the header. */
export const WRITE_INDEX = 0;
export const PRODUCER_WAITING_INDEX = 1;
export const READ_INDEX = 32;
export const CONSUMER_WAITING_INDEX = 33;
export const CLOSED_INDEX = 64;
export const CAPACITY_INDEX = 65;
export const MAGIC_INDEX = 66;
/** Bytes before the data region. */
export const RING_HEADER_BYTES = 384;

/** Tells a ring from any other SharedArrayBuffer handed to a constructor ("TsRg"). */
const RING_MAGIC = 0x54735267;
/** Length prefix of a skip-to-offset-0 marker; no payload can be this long. */
const PAD_LENGTH = 0xffffffff;
/** Smallest capacity: holds one zero-byte record plus a pad (payloadBytesMax = 0). */
export const RING_CAPACITY_BYTES_MIN = 16;
/** Largest capacity: keeps `used` (≤ capacity) and every offset far inside the u32 counter arithmetic. */
export const RING_CAPACITY_BYTES_MAX = 2 ** 30;

/**
 * Largest payload a ring of this capacity carries, so that a drained ring always takes a record: such a
 * record needs r ≤ capacity/2 − 4 bytes, and a pad is written only when the tail is shorter than r, so
 * pad + record < 2r < capacity.
 */
export function ringPayloadBytesMax(capacityBytes: number): number {
  return capacityBytes / 2 - 8;
}

/** Bytes a record of `payloadBytes` occupies: prefix plus payload rounded up to 4. */
export function ringRecordBytes(payloadBytes: number): number {
  return RING_RECORD_HEADER_BYTES + ((payloadBytes + 3) & ~3);
}

/** Allocates a ring with `capacityBytes` of data (a power of two) and an initialised header. */
export function createRing(capacityBytes: number): SharedArrayBuffer {
  assert(
    Number.isInteger(capacityBytes) &&
      capacityBytes >= RING_CAPACITY_BYTES_MIN &&
      capacityBytes <= RING_CAPACITY_BYTES_MAX &&
      (capacityBytes & (capacityBytes - 1)) === 0,
    `ring capacity ${capacityBytes} must be a power of two in [16, 2^30]`,
  );
  const sab = new SharedArrayBuffer(RING_HEADER_BYTES + capacityBytes);
  const header = new Int32Array(sab, 0, RING_HEADER_BYTES / 4);
  header[CAPACITY_INDEX] = capacityBytes;
  header[MAGIC_INDEX] = RING_MAGIC;
  return sab;
}

/** The error a wait settles with once either end has closed the ring. */
export function ringClosedError(): TesseraError {
  return new TesseraError(ErrorKind.ShuttingDown, 'ring closed: one of its threads is shutting down');
}

// Lost wake-up freedom (both directions use the same steps; shown for the consumer waiting on WRITE):
//
//   waiter (consumer)                        publisher (producer)
//   W1 store CONSUMER_WAITING = 1            P1 store WRITE = w'
//   W2 waitAsync(WRITE, expected = w)        P2 exchange CONSUMER_WAITING with 0; if it was 1: notify(WRITE)
//      (an SC load of WRITE + enqueue in one critical section of the waiter list)
//
// All four are sequentially consistent Atomics, so they fall into one total order. If P2 reads 0, then P2
// precedes W1, hence P1 < P2 < W1 < W2 and W2 loads w' ≠ w: waitAsync returns `not-equal` at once. If P2
// reads 1, the producer notifies after P1: either the waiter enqueued before that notify (it is woken), or
// its critical section came after the notify's and its load sees w'. The flag only saves notify calls
// when nobody sleeps; a stale 1 costs one needless notify, never a missed one. P2 takes the flag down
// itself, so a burst of publishes to a sleeping thread sends one wake-up, not one each until the thread
// runs: a later publish that reads 0 came after a notify that already wakes the waiter (or after W2
// found the counter moved).
//
// Close stores CLOSED then notifies both counters. A waiter checks CLOSED after it has enqueued: if the
// closer's notify ran before the enqueue, that check sees CLOSED (store < notify < enqueue < check), and the
// waiter wakes itself with its own notify — only one thread ever waits on each counter, so that is safe.

/** Atomics.waitAsync (Node ≥ 16), typed here because the project's lib (ES2023) predates it. */
type WaitAsyncResult =
  | { async: false; value: 'not-equal' | 'timed-out' }
  | { async: true; value: Promise<string> };
const atomicsWaitAsync = (
  Atomics as unknown as { waitAsync?: (a: Int32Array, i: number, v: number) => WaitAsyncResult }
).waitAsync;
assert(atomicsWaitAsync !== undefined, 'the ring needs Atomics.waitAsync (Node ≥ 16)');
const waitAsync = atomicsWaitAsync;

/** A wait in flight on this thread, as the watchdog sees it. */
interface Sleeper {
  header: Int32Array;
  counterIndex: number;
  expected: number;
  /** Watchdog periods the counter has been seen moved (or the ring closed) while still waiting. */
  periodsMoved: number;
  resolve: () => void;
}

// The wake-up safety net. By the argument above no wake-up is lost, and yet under heavy CPU contention
// Node 20 was seen (about once in 10^6 waits) to leave a waitAsync unresolved although its counter had
// moved and the notifier had taken the flag down, i.e. had notified: a consumer stranded that way would
// never wake again, since later publishers see the flag down. Each thread's watchdog looks at its waits
// every RING_WAKE_CHECK_MS and ends one whose counter has moved (or whose ring closed) for a whole
// period; an early end is harmless, as every waiter checks its condition again when it wakes.
const sleepers = new Set<Sleeper>();
let watchdogRunning = false;
let wakeupsRecovered = 0;

/** Waits this thread's watchdog has ended because their wake-up never came (for tests and health). */
export function ringWakeupsRecovered(): number {
  return wakeupsRecovered;
}

function checkSleepers(): void {
  for (const s of sleepers) {
    const moved =
      Atomics.load(s.header, s.counterIndex) !== s.expected || Atomics.load(s.header, CLOSED_INDEX) !== 0;
    if (!moved) s.periodsMoved = 0;
    else if (++s.periodsMoved >= 2) {
      sleepers.delete(s);
      wakeupsRecovered++;
      s.resolve();
    }
  }
}

/** Announces a wait on `counterIndex` (still `expected`); null if it changed already, else the wake-up. */
function sleepWhileEqual(header: Int32Array, flagIndex: number, counterIndex: number, expected: number) {
  Atomics.store(header, flagIndex, 1);
  const result = waitAsync(header, counterIndex, expected | 0);
  if (!result.async) {
    Atomics.store(header, flagIndex, 0);
    return null;
  }
  if (Atomics.load(header, CLOSED_INDEX) !== 0) Atomics.notify(header, counterIndex);
  // Unref'd: the watchdog never keeps a thread alive by itself (drainLoop holds its own timer).
  if (!watchdogRunning) {
    watchdogRunning = true;
    setInterval(checkSleepers, RING_WAKE_CHECK_MS).unref();
  }
  return new Promise<void>((resolve) => {
    const sleeper: Sleeper = { header, counterIndex, expected: expected | 0, periodsMoved: 0, resolve };
    sleepers.add(sleeper);
    result.value.then(() => {
      sleepers.delete(sleeper);
      resolve();
    });
  });
}

/** Header and data views both ends share; validates that `sab` is a ring. */
abstract class RingEnd {
  protected readonly header: Int32Array;
  protected readonly words: Uint32Array;
  protected readonly mask: number;
  /** The data region; record payloads are encoded and decoded here in place. */
  readonly bytes: Buffer;
  readonly capacityBytes: number;
  readonly payloadBytesMax: number;
  /** Atomics.notify calls this end has made (wake-ups sent), for tests and metrics. */
  notifyCount = 0;
  /** A wait is in flight: each end has one thread and one wait at a time. */
  protected waiting = false;

  constructor(sab: SharedArrayBuffer) {
    assert(sab.byteLength > RING_HEADER_BYTES, 'ring buffer is smaller than its header');
    this.header = new Int32Array(sab, 0, RING_HEADER_BYTES / 4);
    const capacityBytes = this.header[CAPACITY_INDEX];
    assert(this.header[MAGIC_INDEX] === RING_MAGIC, 'buffer was not made by createRing');
    assert(sab.byteLength === RING_HEADER_BYTES + capacityBytes, 'ring capacity disagrees with its buffer');
    this.capacityBytes = capacityBytes;
    this.mask = capacityBytes - 1;
    this.payloadBytesMax = ringPayloadBytesMax(capacityBytes);
    this.bytes = Buffer.from(sab, RING_HEADER_BYTES, capacityBytes);
    this.words = new Uint32Array(sab, RING_HEADER_BYTES, capacityBytes / 4);
    const used = (Atomics.load(this.header, WRITE_INDEX) - Atomics.load(this.header, READ_INDEX)) >>> 0;
    assert(used <= capacityBytes, `ring counters are ${used} bytes apart, more than its capacity`);
  }

  get closed(): boolean {
    return Atomics.load(this.header, CLOSED_INDEX) !== 0;
  }

  /** Marks the ring closed for both ends and wakes whichever of them is waiting. Idempotent. */
  close(): void {
    Atomics.store(this.header, CLOSED_INDEX, 1);
    Atomics.notify(this.header, WRITE_INDEX);
    Atomics.notify(this.header, READ_INDEX);
  }

  protected notify(counterIndex: number): void {
    this.notifyCount++;
    Atomics.notify(this.header, counterIndex);
  }

  protected beginWait(): void {
    assert(!this.waiting, 'a ring end has one wait in flight at a time');
    this.waiting = true;
  }
}

/** The producing end: reserve → encode into `bytes` → commit, then one publish per batch. */
export class RingWriter extends RingEnd {
  /** Counter after the last committed record: what publish stores. */
  private head: number;
  /** Last WRITE value stored. */
  private published: number;
  /** Last READ value seen; reloaded only when the cached one says the ring is full. */
  private readSeen: number;
  /** Open reservation: counter of its pad or record start, pad bytes, payload bytes; -1 when none. */
  private reservedAt = -1;
  private reservedPadBytes = 0;
  private reservedPayloadBytes = 0;

  constructor(sab: SharedArrayBuffer) {
    super(sab);
    this.head = Atomics.load(this.header, WRITE_INDEX) >>> 0;
    this.published = this.head;
    this.readSeen = Atomics.load(this.header, READ_INDEX) >>> 0;
  }

  /**
   * Reserves a record of `payloadBytes` and returns the offset in `bytes` to encode its payload at, or -1
   * when the ring has no room now (or is closed). The record stays invisible until commit and publish.
   */
  reserve(payloadBytes: number): number {
    assert(this.reservedAt === -1, 'reserve while a reservation is open');
    // Hot-path assertions build their message only on failure: a template literal argument would allocate
    // a string per record.
    if (!(payloadBytes >= 0 && payloadBytes <= this.payloadBytesMax && Number.isInteger(payloadBytes))) {
      assert(false, `ring record of ${payloadBytes} bytes exceeds ${this.payloadBytesMax}`);
    }
    const padBytes = this.padBytesBefore(payloadBytes);
    const needBytes = padBytes + ringRecordBytes(payloadBytes);
    if (!this.hasRoom(needBytes) || this.closed) return -1;
    this.reservedAt = this.head;
    this.reservedPadBytes = padBytes;
    this.reservedPayloadBytes = payloadBytes;
    return ((this.head + padBytes) & this.mask) + RING_RECORD_HEADER_BYTES;
  }

  /** Finishes the open reservation, optionally shorter than reserved (an encoder that overestimated). */
  commit(payloadBytes: number = this.reservedPayloadBytes): void {
    assert(this.reservedAt !== -1, 'commit without a reservation');
    assert(payloadBytes >= 0 && payloadBytes <= this.reservedPayloadBytes, 'commit longer than reserved');
    let at = this.reservedAt;
    if (this.reservedPadBytes > 0) {
      this.words[(at & this.mask) >>> 2] = PAD_LENGTH;
      at = (at + this.reservedPadBytes) >>> 0;
    }
    const offset = at & this.mask;
    const recordBytes = ringRecordBytes(payloadBytes);
    assert(offset + recordBytes <= this.capacityBytes, 'ring record would straddle the end');
    this.words[offset >>> 2] = payloadBytes;
    this.head = (at + recordBytes) >>> 0;
    this.reservedAt = -1;
  }

  /** Makes every committed record visible; wakes the consumer only if it announced it sleeps. */
  publish(): void {
    if (this.head === this.published) return;
    this.published = this.head;
    Atomics.store(this.header, WRITE_INDEX, this.head | 0);
    if (Atomics.exchange(this.header, CONSUMER_WAITING_INDEX, 0) !== 0) this.notify(WRITE_INDEX);
  }

  /**
   * Resolves once a reserve of `payloadBytes` would succeed; rejects with a ShuttingDown error if the ring
   * closes first. Publishes first: the consumer can only free space it has been shown.
   */
  async waitForSpace(payloadBytes: number): Promise<void> {
    assert(this.reservedAt === -1, 'waitForSpace while a reservation is open');
    assert(payloadBytes >= 0 && payloadBytes <= this.payloadBytesMax, 'waitForSpace for an oversized record');
    this.publish();
    this.beginWait();
    try {
      for (;;) {
        if (this.closed) throw ringClosedError();
        if (this.hasRoom(this.padBytesBefore(payloadBytes) + ringRecordBytes(payloadBytes))) return;
        const wake = sleepWhileEqual(this.header, PRODUCER_WAITING_INDEX, READ_INDEX, this.readSeen);
        if (wake === null) continue;
        await wake;
        Atomics.store(this.header, PRODUCER_WAITING_INDEX, 0);
      }
    } finally {
      this.waiting = false;
    }
  }

  /** Pad needed before a record of `payloadBytes` at the head: all the space left at the end, or none. */
  private padBytesBefore(payloadBytes: number): number {
    const tailBytes = this.capacityBytes - (this.head & this.mask);
    return ringRecordBytes(payloadBytes) <= tailBytes ? 0 : tailBytes;
  }

  private hasRoom(needBytes: number): boolean {
    if (this.capacityBytes - ((this.head - this.readSeen) >>> 0) >= needBytes) return true;
    this.readSeen = Atomics.load(this.header, READ_INDEX) >>> 0;
    const usedBytes = (this.head - this.readSeen) >>> 0;
    assert(usedBytes <= this.capacityBytes, 'ring read counter passed the write counter');
    return this.capacityBytes - usedBytes >= needBytes;
  }
}

/** The consuming end: next() until -1, then one release per batch. */
export class RingReader extends RingEnd {
  /** Payload length of the record the last next() returned. */
  recordBytes = 0;
  /** Counter of the next unread byte; records before it stay valid until release. */
  private cursor: number;
  /** Last READ value stored. */
  private released: number;
  /** Last WRITE value seen; reloaded only when the cursor reaches it. */
  private writeSeen: number;

  constructor(sab: SharedArrayBuffer) {
    super(sab);
    this.cursor = Atomics.load(this.header, READ_INDEX) >>> 0;
    this.released = this.cursor;
    this.writeSeen = Atomics.load(this.header, WRITE_INDEX) >>> 0;
  }

  /** Whether next() would return a record (or a pad before one). */
  hasData(): boolean {
    if (this.cursor !== this.writeSeen) return true;
    this.writeSeen = Atomics.load(this.header, WRITE_INDEX) >>> 0;
    return this.cursor !== this.writeSeen;
  }

  /** Offset in `bytes` of the next record's payload, its length in `recordBytes`; -1 when none is published. */
  next(): number {
    for (;;) {
      if (!this.hasData()) return -1;
      const offset = this.cursor & this.mask;
      const availableBytes = (this.writeSeen - this.cursor) >>> 0;
      assert(availableBytes <= this.capacityBytes, 'ring write counter is ahead by more than its capacity');
      const length = this.words[offset >>> 2];
      if (length === PAD_LENGTH) {
        const padBytes = this.capacityBytes - offset;
        if (offset !== 0 && padBytes <= availableBytes) {
          this.cursor = (this.cursor + padBytes) >>> 0;
          continue;
        }
      } else {
        const recordBytes = ringRecordBytes(length);
        if (
          length <= this.payloadBytesMax &&
          offset + recordBytes <= this.capacityBytes &&
          recordBytes <= availableBytes
        ) {
          this.cursor = (this.cursor + recordBytes) >>> 0;
          this.recordBytes = length;
          return offset + RING_RECORD_HEADER_BYTES;
        }
      }
      // One failure site: with a message built in two branches, the optimizer computed the offset's
      // string once, ahead of both, for every record read.
      assert(false, `ring record at ${offset} is malformed (length word ${length})`);
    }
  }

  /** Frees every record read so far; wakes the producer only if it announced it sleeps. */
  release(): void {
    if (this.cursor === this.released) return;
    this.released = this.cursor;
    Atomics.store(this.header, READ_INDEX, this.cursor | 0);
    if (Atomics.exchange(this.header, PRODUCER_WAITING_INDEX, 0) !== 0) this.notify(READ_INDEX);
  }

  /**
   * Resolves when a record is published (at once if one is); rejects with a ShuttingDown error when the ring
   * is closed and drained. Records published before the close are still delivered.
   */
  async waitForData(): Promise<void> {
    this.beginWait();
    try {
      for (;;) {
        const wake = this.sleepUnlessData();
        if (wake === null) return;
        await wake;
        this.wokeUp();
      }
    } finally {
      this.waiting = false;
    }
  }

  /** null when data is there; throws when closed and drained; else the promise of the next wake-up. */
  sleepUnlessData(): Promise<unknown> | null {
    for (;;) {
      if (this.hasData()) return null;
      if (this.closed) throw ringClosedError();
      const wake = sleepWhileEqual(this.header, CONSUMER_WAITING_INDEX, WRITE_INDEX, this.cursor);
      if (wake !== null) return wake;
    }
  }

  /** Ends the announcement sleepUnlessData made, once its promise has resolved. */
  wokeUp(): void {
    Atomics.store(this.header, CONSUMER_WAITING_INDEX, 0);
  }

  /** Wakes this reader's own pending wait, so a drain loop being stopped is not left asleep. */
  interrupt(): void {
    Atomics.notify(this.header, WRITE_INDEX);
  }
}

/** A running consumer: see drainLoop. */
export interface DrainLoop {
  /** Stops after the current batch; a pending wait wakes and does nothing. */
  stop(): void;
}

/**
 * Runs `onBatch` whenever `reader` has records; `onBatch` reads them with next() and calls release() (it may
 * stop early, e.g. after a turn's worth of work — the rest comes in the next batch). Every batch starts in
 * a fresh macrotask: after a waitAsync wake-up, or after setImmediate when data was already there, because
 * waitAsync answers synchronously when the counter moved, and a loop of such answers would starve timers,
 * sockets and store callbacks (DESIGN.md "What we measured"). `onClosed` runs once the ring is closed and
 * drained. While running, the loop holds a timer so its thread stays alive: a pending waitAsync does not
 * keep Node's event loop alive, and a worker waiting only on its ring would exit.
 */
export function drainLoop(
  reader: RingReader,
  onBatch: () => void,
  onClosed?: (error: Error) => void,
): DrainLoop {
  let stopped = false;
  const keepAlive = setInterval(() => {}, 2 ** 31 - 1);
  const end = (error?: Error): void => {
    stopped = true;
    clearInterval(keepAlive);
    if (error !== undefined) onClosed?.(error);
  };
  const turn = (): void => {
    if (stopped) return;
    if (reader.hasData()) onBatch();
    if (stopped) return;
    let wake: Promise<unknown> | null;
    try {
      wake = reader.sleepUnlessData();
    } catch (error) {
      end(error as Error);
      return;
    }
    if (wake === null) setImmediate(turn);
    else wake.then(afterWake);
  };
  const afterWake = (): void => {
    reader.wokeUp();
    turn();
  };
  setImmediate(turn);
  return {
    stop(): void {
      if (stopped) return;
      end();
      reader.interrupt();
    },
  };
}
