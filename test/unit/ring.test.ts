// The SharedArrayBuffer ring (DESIGN.md "SharedArrayBuffer rings"): layout edge cases, the wake-up protocol,
// a fast-check comparison against an array, and a real worker thread moving 100k records.
// This file is also the worker's entry: loaded off the main thread, it only runs the consumer.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { isMainThread, Worker, workerData } from 'node:worker_threads';
import fc from 'fast-check';
import { AssertionFailure } from '../../src/core/assert.js';
import { TesseraError } from '../../src/core/errors.js';
import { RING_WAKE_CHECK_MS } from '../../src/core/limits.js';
import {
  CLOSED_INDEX,
  CONSUMER_WAITING_INDEX,
  createRing,
  drainLoop,
  PRODUCER_WAITING_INDEX,
  READ_INDEX,
  RING_HEADER_BYTES,
  RingReader,
  RingWriter,
  ringRecordBytes,
  ringWakeupsRecovered,
  WRITE_INDEX,
} from '../../src/threads/ring.js';
import { RingOutbox } from '../../src/threads/ring-outbox.js';
import { xorshift32 } from './fixtures/xorshift32.js';

interface Pair {
  writer: RingWriter;
  reader: RingReader;
  header: Int32Array;
}

/** A ring whose counters start at `startCounter`, to put the u32 wrap wherever a test wants it. */
function ringPair(capacityBytes: number, startCounter = 0): Pair {
  const sab = createRing(capacityBytes);
  const header = new Int32Array(sab, 0, RING_HEADER_BYTES / 4);
  header[WRITE_INDEX] = startCounter | 0;
  header[READ_INDEX] = startCounter | 0;
  return { writer: new RingWriter(sab), reader: new RingReader(sab), header };
}

/** The byte a record's payload holds at `index`: a function of its sequence number, so any mix-up shows. */
function patternByte(seq: number, index: number): number {
  return (seq * 131 + index * 7 + 1) & 0xff;
}

function writeRecord(writer: RingWriter, seq: number, payloadBytes: number): number {
  const offset = writer.reserve(payloadBytes);
  if (offset === -1) return -1;
  for (let i = 0; i < payloadBytes; i++) writer.bytes[offset + i] = patternByte(seq, i);
  writer.commit();
  return offset;
}

function checkRecord(reader: RingReader, offset: number, seq: number, payloadBytes: number): void {
  assert.notEqual(offset, -1, `record ${seq} missing`);
  assert.equal(reader.recordBytes, payloadBytes, `record ${seq} length`);
  for (let i = 0; i < payloadBytes; i++) {
    if (reader.bytes[offset + i] !== patternByte(seq, i)) assert.fail(`record ${seq} byte ${i} corrupted`);
  }
}

/** Lets queued tasks (waitAsync resolutions, immediates) run. */
function turns(count: number): Promise<void> {
  return count === 0
    ? Promise.resolve()
    : new Promise((resolve) => setImmediate(() => resolve(turns(count - 1))));
}

function settled(promise: Promise<unknown>): { done: boolean } {
  const state = { done: false };
  promise.then(
    () => (state.done = true),
    () => (state.done = true),
  );
  return state;
}

function ringTests(): void {
  test('empty ring: next is -1, a zero-byte record round-trips', () => {
    const { writer, reader } = ringPair(64);
    assert.equal(reader.next(), -1);
    assert.equal(reader.hasData(), false);
    assert.equal(writer.reserve(0), 4);
    writer.commit();
    assert.equal(reader.next(), -1, 'committed but unpublished records are invisible');
    writer.publish();
    assert.equal(reader.next(), 4);
    assert.equal(reader.recordBytes, 0);
    assert.equal(reader.next(), -1);
  });

  test('full ring: reserve fails until a release frees space', () => {
    const { writer, reader } = ringPair(64);
    for (let seq = 0; seq < 8; seq++) assert.notEqual(writeRecord(writer, seq, 4), -1, `record ${seq}`);
    assert.equal(writer.reserve(0), -1, '8 records of 8 bytes fill 64');
    writer.publish();
    checkRecord(reader, reader.next(), 0, 4);
    assert.equal(writer.reserve(0), -1, 'read but unreleased space is still taken');
    reader.release();
    assert.notEqual(writeRecord(writer, 8, 4), -1);
    writer.publish();
    for (let seq = 1; seq <= 8; seq++) checkRecord(reader, reader.next(), seq, 4);
    assert.equal(reader.next(), -1);
  });

  test('wrap-around: a record that does not fit at the end is padded to offset 0', () => {
    const { writer, reader } = ringPair(64, 56); // drained, head at offset 56: 8 bytes left at the end
    assert.equal(writeRecord(writer, 1, 12), 4, '16 bytes do not fit in 8: pad, then offset 0');
    writer.publish();
    checkRecord(reader, reader.next(), 1, 12);
    assert.equal(reader.next(), -1);
    reader.release();
    assert.equal(writeRecord(writer, 2, 4), 20, 'the pad consumed the end: the next record follows at 16');
    assert.equal(writeRecord(writer, 3, 24), 28);
    writer.publish();
    checkRecord(reader, reader.next(), 2, 4);
    checkRecord(reader, reader.next(), 3, 24);
  });

  test('wrap-around counts the pad as well as the record', () => {
    const { writer, reader } = ringPair(64, 24);
    writeRecord(writer, 0, 12); // 24..40
    writeRecord(writer, 1, 12); // 40..56: 32 bytes free, 8 of them at the end
    writer.publish();
    assert.equal(
      writeRecord(writer, 2, 24),
      -1,
      'a 28-byte record fits in 32 bytes, but not after an 8-byte pad',
    );
    checkRecord(reader, reader.next(), 0, 12);
    reader.release();
    assert.equal(writeRecord(writer, 2, 24), 4);
    writer.publish();
    checkRecord(reader, reader.next(), 1, 12);
    checkRecord(reader, reader.next(), 2, 24);
  });

  test('exact fit at the end: no pad, the next record starts at 0', () => {
    const { writer, reader } = ringPair(64, 48); // drained, head at offset 48: 16 bytes left
    assert.equal(writeRecord(writer, 1, 12), 52, 'a 16-byte record fills the end exactly');
    assert.equal(writeRecord(writer, 2, 0), 4);
    writer.publish();
    checkRecord(reader, reader.next(), 1, 12);
    checkRecord(reader, reader.next(), 2, 0);
    assert.equal(reader.next(), -1);
  });

  test('unpadded payload lengths round up to 4 bytes', () => {
    const { writer, reader } = ringPair(64);
    assert.equal(ringRecordBytes(5), 12);
    assert.equal(writeRecord(writer, 0, 5), 4);
    assert.equal(writeRecord(writer, 1, 1), 16);
    writer.publish();
    checkRecord(reader, reader.next(), 0, 5);
    checkRecord(reader, reader.next(), 1, 1);
  });

  test('max record: capacity/2 - 8 fits a drained ring at every offset; one byte more asserts', () => {
    for (const capacityBytes of [16, 64, 256]) {
      const maxBytes = capacityBytes / 2 - 8;
      for (let startCounter = 0; startCounter < capacityBytes; startCounter += 4) {
        const { writer, reader } = ringPair(capacityBytes, startCounter);
        assert.equal(writer.payloadBytesMax, maxBytes);
        assert.notEqual(writeRecord(writer, startCounter, maxBytes), -1, `fits at offset ${startCounter}`);
        writer.publish();
        checkRecord(reader, reader.next(), startCounter, maxBytes);
        reader.release();
        assert.throws(() => writer.reserve(maxBytes + 1), AssertionFailure);
      }
    }
  });

  test('commit may shorten the reserved record', () => {
    const { writer, reader } = ringPair(64);
    const offset = writer.reserve(20);
    writer.bytes[offset] = 7;
    writer.commit(1);
    writeRecord(writer, 1, 4);
    writer.publish();
    assert.equal(reader.next(), 4);
    assert.equal(reader.recordBytes, 1);
    checkRecord(reader, reader.next(), 1, 4);
  });

  test('counters wrap at 2^32 without losing a record', () => {
    const { writer, reader } = ringPair(64, 0xffffffe0);
    for (let seq = 0; seq < 40; seq++) {
      assert.notEqual(writeRecord(writer, seq, seq % 17), -1);
      writer.publish();
      checkRecord(reader, reader.next(), seq, seq % 17);
      reader.release();
    }
  });

  test('an outbox with publishEvery shows each full group of records without waiting for publish', () => {
    const { writer, reader } = ringPair(256);
    const outbox = new RingOutbox(writer, 3);
    const put = (seq: number) => {
      const at = outbox.reserve(4);
      outbox.buffer.writeUInt32LE(seq, at);
      outbox.commit();
    };
    put(0);
    put(1);
    assert.equal(reader.next(), -1, 'two records: still unpublished');
    put(2);
    for (let seq = 0; seq < 3; seq++) assert.equal(reader.bytes.readUInt32LE(reader.next()), seq);
    put(3);
    assert.equal(reader.next(), -1, 'the count starts again after a publish');
    outbox.publish();
    assert.equal(reader.bytes.readUInt32LE(reader.next()), 3);
    const plain = ringPair(256);
    const unbatched = new RingOutbox(plain.writer);
    for (let seq = 0; seq < 10; seq++) {
      unbatched.reserve(4);
      unbatched.commit();
    }
    assert.equal(plain.reader.next(), -1, 'without publishEvery only the caller publishes');
  });

  // A length beyond the ring, and a pad marker at offset 0 (a pad fills the ring's end; there it
  // would skip the whole ring).
  for (const lengthWord of [1000, 0xffffffff]) {
    test(`a corrupted length prefix (${lengthWord}) fails the read-side assertion`, () => {
      const { writer, reader } = ringPair(64);
      writeRecord(writer, 0, 4);
      writer.publish();
      new Uint32Array(writer.bytes.buffer, RING_HEADER_BYTES, 1)[0] = lengthWord;
      assert.throws(() => reader.next(), {
        name: AssertionFailure.name,
        message: `ring record at 0 is malformed (length word ${lengthWord})`,
      });
    });
  }

  test('publish and release notify only when the other end announced a wait', async () => {
    const { writer, reader, header } = ringPair(64);
    writeRecord(writer, 0, 4);
    writer.publish();
    reader.next();
    reader.release();
    assert.equal(writer.notifyCount, 0);
    assert.equal(reader.notifyCount, 0);
    const data = reader.waitForData();
    assert.equal(Atomics.load(header, CONSUMER_WAITING_INDEX), 1);
    writeRecord(writer, 1, 4);
    writer.publish();
    await data;
    assert.equal(writer.notifyCount, 1);
    assert.equal(Atomics.load(header, CONSUMER_WAITING_INDEX), 0, 'the woken consumer withdraws its flag');
    writer.publish();
    assert.equal(writer.notifyCount, 1, 'nothing new: no store, no notify');
  });

  test('a burst of publishes to a sleeping consumer wakes it once', async () => {
    const { writer, reader, header } = ringPair(64);
    const data = reader.waitForData();
    for (let seq = 0; seq < 3; seq++) {
      writeRecord(writer, seq, 4);
      writer.publish();
    }
    assert.equal(writer.notifyCount, 1, 'the first publish takes the flag down and notifies');
    assert.equal(Atomics.load(header, CONSUMER_WAITING_INDEX), 0);
    await data;
    for (let seq = 0; seq < 3; seq++) checkRecord(reader, reader.next(), seq, 4);
  });

  test('waitForData resolves at once when data is there', async () => {
    const { writer, reader } = ringPair(64);
    writeRecord(writer, 0, 4);
    writer.publish();
    await reader.waitForData();
    assert.equal(writer.notifyCount, 0);
  });

  test('waitForSpace publishes, then resolves after the consumer releases', async () => {
    const { writer, reader, header } = ringPair(64);
    for (let seq = 0; seq < 6; seq++) writeRecord(writer, seq, 4);
    assert.equal(writer.reserve(20), -1);
    const space = writer.waitForSpace(20);
    const state = settled(space);
    assert.equal(reader.hasData(), true, 'waitForSpace published the committed records');
    await turns(3);
    assert.equal(state.done, false);
    assert.equal(Atomics.load(header, PRODUCER_WAITING_INDEX), 1);
    checkRecord(reader, reader.next(), 0, 4);
    reader.release(); // 8 free: not enough for a 24-byte record, so the producer sleeps again
    await turns(3);
    assert.equal(state.done, false);
    checkRecord(reader, reader.next(), 1, 4);
    checkRecord(reader, reader.next(), 2, 4);
    reader.release();
    await space;
    assert.equal(reader.notifyCount, 2);
    assert.notEqual(writeRecord(writer, 6, 20), -1);
  });

  test('a wake-up that never comes is made up by the watchdog: the waiter still wakes, in two periods or three', async () => {
    // The state a lost wake-up leaves: the counter moved and the flag taken down, but no notify.
    // A pending wait holds no handle: keep this thread up while the watchdog (unref'd) works.
    const keepAlive = setInterval(() => {}, 1000);
    const { writer, reader, header } = ringPair(64);
    const before = ringWakeupsRecovered();
    let woke = false;
    const waiting = reader.waitForData().then(() => {
      woke = true;
    });
    assert.equal(header[CONSUMER_WAITING_INDEX], 1);
    writeRecord(writer, 0, 4);
    Atomics.store(header, WRITE_INDEX, Atomics.load(header, WRITE_INDEX) + 8);
    Atomics.store(header, CONSUMER_WAITING_INDEX, 0);
    const startedMs = Date.now();
    await new Promise((resolve) => setTimeout(resolve, RING_WAKE_CHECK_MS / 2));
    assert.equal(woke, false, 'no wake-up before a whole period has passed with the counter moved');
    await waiting;
    const tookMs = Date.now() - startedMs;
    assert.ok(tookMs >= RING_WAKE_CHECK_MS && tookMs < 10 * RING_WAKE_CHECK_MS, `woke after ${tookMs} ms`);
    assert.equal(ringWakeupsRecovered(), before + 1);
    // A producer waiting for space the same way.
    const full = ringPair(64);
    while (writeRecord(full.writer, 0, 4) !== -1);
    const spaceWait = full.writer.waitForSpace(4);
    Atomics.store(full.header, READ_INDEX, Atomics.load(full.header, WRITE_INDEX));
    Atomics.store(full.header, PRODUCER_WAITING_INDEX, 0);
    await spaceWait;
    assert.equal(ringWakeupsRecovered(), before + 2);
    clearInterval(keepAlive);
  });

  test('the watchdog ends no wait whose counter has not moved, and counts none that were woken', async () => {
    const keepAlive = setInterval(() => {}, 1000);
    const { writer, reader } = ringPair(64);
    const before = ringWakeupsRecovered();
    let woke = false;
    const waiting = reader.waitForData().then(() => {
      woke = true;
    });
    await new Promise((resolve) => setTimeout(resolve, 3 * RING_WAKE_CHECK_MS));
    assert.equal(woke, false);
    writeRecord(writer, 0, 4);
    writer.publish();
    await waiting;
    await new Promise((resolve) => setTimeout(resolve, 3 * RING_WAKE_CHECK_MS));
    assert.equal(ringWakeupsRecovered(), before);
    clearInterval(keepAlive);
  });

  test('close wakes a waiting consumer and a waiting producer with a ShuttingDown error', async () => {
    const { writer, reader } = ringPair(64);
    const data = reader.waitForData();
    await turns(2);
    writer.close();
    await assert.rejects(
      data,
      (error: unknown) => error instanceof TesseraError && /ring closed/.test(error.message),
    );
    const full = ringPair(64);
    for (let seq = 0; seq < 8; seq++) writeRecord(full.writer, seq, 4);
    const space = full.writer.waitForSpace(4);
    await turns(2);
    full.reader.close();
    await assert.rejects(
      space,
      (error: unknown) => error instanceof TesseraError && error.code === 'TESSERA_SHUTTING_DOWN',
    );
    assert.equal(full.writer.reserve(0), -1, 'a closed ring takes no records');
  });

  test('records published before close are still delivered', async () => {
    const { writer, reader } = ringPair(64);
    writeRecord(writer, 0, 4);
    writer.publish();
    writer.close();
    await reader.waitForData();
    checkRecord(reader, reader.next(), 0, 4);
    await assert.rejects(reader.waitForData(), TesseraError);
  });

  test('drainLoop delivers batches, then reports the close once drained', async () => {
    const { writer, reader } = ringPair(256);
    const seen: number[] = [];
    let closedWith: Error | undefined;
    const done = new Promise<void>((resolve) => {
      drainLoop(
        reader,
        () => {
          for (let offset = reader.next(); offset !== -1; offset = reader.next())
            seen.push(reader.bytes[offset]);
          reader.release();
        },
        (error) => {
          closedWith = error;
          resolve();
        },
      );
    });
    for (let seq = 0; seq < 50; seq++) {
      if (writeRecord(writer, seq, 1) === -1) {
        await writer.waitForSpace(1);
        writeRecord(writer, seq, 1);
      }
      if (seq % 7 === 0) writer.publish();
      if (seq % 5 === 0) await turns(1);
    }
    writer.publish();
    await turns(5);
    writer.close();
    await done;
    assert.deepEqual(
      seen,
      Array.from({ length: 50 }, (_, seq) => patternByte(seq, 0)),
    );
    assert.ok(closedWith instanceof TesseraError);
  });

  test('drainLoop yields to timers while data keeps arriving', async () => {
    const { writer, reader } = ringPair(64);
    let batches = 0;
    writeRecord(writer, 0, 4);
    writer.publish();
    const loop = drainLoop(reader, () => {
      batches++;
      reader.next(); // one record per batch, and always publish another: data is never missing
      reader.release();
      writeRecord(writer, batches, 4);
      writer.publish();
    });
    await turns(1);
    assert.equal(batches, 1);
    await new Promise((resolve) => setTimeout(resolve, 2)); // never fires if the loop starves the event loop
    const batchesAtTimer = batches;
    await turns(3);
    loop.stop();
    assert.ok(batches > batchesAtTimer, 'the loop keeps running after the timer');
  });

  test('a stopped drainLoop ignores later records', async () => {
    const { writer, reader } = ringPair(64);
    let batches = 0;
    const loop = drainLoop(reader, () => {
      batches++;
      while (reader.next() !== -1);
      reader.release();
    });
    await turns(2);
    loop.stop();
    writeRecord(writer, 0, 4);
    writer.publish();
    await turns(5);
    assert.equal(batches, 0);
  });

  test('fast-check: every record arrives once, in order, intact, across any interleaving', () => {
    fc.assert(fc.property(scenario(), runScenario), { numRuns: 300 });
  });

  test(
    'a worker consumer receives 100k records through a small ring, no wake-up lost',
    { timeout: 30_000 },
    () => runWorkerExchange(),
  );
}

type Op =
  | { kind: 'write'; payloadBytes: number }
  | { kind: 'publish' }
  | { kind: 'read'; count: number }
  | { kind: 'release' };

interface Scenario {
  capacityBytes: number;
  startCounter: number;
  ops: Op[];
}

/** Small capacities so pads and full rings are common; counters sometimes start just below 2^32. */
function scenario(): fc.Arbitrary<Scenario> {
  return fc.constantFrom(16, 32, 64, 128).chain((capacityBytes) => {
    const op: fc.Arbitrary<Op> = fc.oneof(
      { weight: 4, arbitrary: fc.integer({ min: 0, max: capacityBytes / 2 - 8 }).map(writeOp) },
      { weight: 2, arbitrary: fc.constant<Op>({ kind: 'publish' }) },
      { weight: 2, arbitrary: fc.integer({ min: 1, max: 4 }).map((count): Op => ({ kind: 'read', count })) },
      { weight: 1, arbitrary: fc.constant<Op>({ kind: 'release' }) },
    );
    return fc.record({
      capacityBytes: fc.constant(capacityBytes),
      startCounter: fc.oneof(
        fc.constant(0),
        fc.integer({ min: 2 ** 32 - 4 * capacityBytes, max: 2 ** 32 - 1 }),
      ),
      ops: fc.array(op, { maxLength: 120 }),
    });
  });
}

function writeOp(payloadBytes: number): Op {
  return { kind: 'write', payloadBytes };
}

/** The dumb reference: records are an array, and three indices say what is published, read and released. */
function runScenario({ capacityBytes, startCounter, ops }: Scenario): void {
  const { writer, reader } = ringPair(capacityBytes, (startCounter & ~3) >>> 0);
  const sizes: number[] = [];
  const readOffsets: number[] = [];
  let published = 0;
  let released = 0;
  for (const op of ops) {
    if (op.kind === 'write') {
      const offset = writeRecord(writer, sizes.length, op.payloadBytes);
      if (offset === -1) assert.ok(released < sizes.length, 'reserve failed although the ring was drained');
      else sizes.push(op.payloadBytes);
    } else if (op.kind === 'publish') {
      writer.publish();
      published = sizes.length;
    } else if (op.kind === 'read') {
      readSome(reader, op.count, sizes, readOffsets, released, published);
    } else {
      reader.release();
      released += readOffsets.length;
      readOffsets.length = 0;
    }
    // Records read but not released must stay intact while the producer keeps writing.
    for (let i = 0; i < readOffsets.length; i++) {
      checkRecordAt(reader, readOffsets[i], released + i, sizes[released + i]);
    }
  }
  writer.publish();
  readSome(reader, sizes.length, sizes, readOffsets, released, sizes.length);
  assert.equal(released + readOffsets.length, sizes.length, 'every record arrived');
}

function readSome(
  reader: RingReader,
  count: number,
  sizes: number[],
  readOffsets: number[],
  released: number,
  published: number,
): void {
  for (let i = 0; i < count; i++) {
    const seq = released + readOffsets.length;
    const offset = reader.next();
    if (seq === published) {
      assert.equal(offset, -1, 'only published records are visible');
      return;
    }
    checkRecord(reader, offset, seq, sizes[seq]);
    readOffsets.push(offset);
  }
}

function checkRecordAt(reader: RingReader, offset: number, seq: number, payloadBytes: number): void {
  for (let i = 0; i < payloadBytes; i++) {
    if (reader.bytes[offset + i] !== patternByte(seq, i))
      assert.fail(`unreleased record ${seq} was overwritten`);
  }
}

// --- Two threads: main produces into `requests`, the worker checks each record and reports its running
// count and checksum back through `acks`. Both rings are small, so both ends wait often in both directions.

const RECORD_COUNT = 100_000;
const WORKER_ROLE = 'ring-test-consumer';

interface WorkerInput {
  role: typeof WORKER_ROLE;
  requests: SharedArrayBuffer;
  acks: SharedArrayBuffer;
}

/** FNV-1a step over one byte. */
function fnv(hash: number, byte: number): number {
  return Math.imul(hash ^ byte, 0x01000193) >>> 0;
}

/** Record payload: u32 sequence number, then pattern bytes. */
function recordChecksum(hash: number, seq: number, payloadBytes: number): number {
  let h = fnv(hash, seq & 0xff);
  for (let i = 4; i < payloadBytes; i++) h = fnv(h, patternByte(seq, i));
  return h;
}

function consumeInWorker(input: WorkerInput): void {
  const reader = new RingReader(input.requests);
  const acks = new RingWriter(input.acks);
  let count = 0;
  let checksum = 0x811c9dc5;
  let ackWaiting = false;
  const sendAck = (): void => {
    if (ackWaiting) return; // the pending wait sends the newest totals when it resolves
    const offset = acks.reserve(8);
    if (offset === -1) {
      ackWaiting = true;
      acks.waitForSpace(8).then(() => {
        ackWaiting = false;
        sendAck();
      }, stopQuietly);
      return;
    }
    acks.bytes.writeUInt32LE(count, offset);
    acks.bytes.writeUInt32LE(checksum, offset + 4);
    acks.commit();
    acks.publish();
  };
  drainLoop(
    reader,
    () => {
      for (let offset = reader.next(); offset !== -1; offset = reader.next()) {
        const seq = reader.bytes.readUInt32LE(offset);
        if (seq !== count) throw new Error(`record ${seq} arrived where ${count} was due`);
        for (let i = 4; i < reader.recordBytes; i++) {
          if (reader.bytes[offset + i] !== patternByte(seq, i)) throw new Error(`record ${seq} corrupted`);
        }
        checksum = recordChecksum(checksum, seq, reader.recordBytes);
        count++;
      }
      reader.release();
      sendAck();
    },
    () => acks.close(),
  );
}

function stopQuietly(): void {}

interface Produced {
  checksum: number;
  spaceWaits: number;
}

async function produce(
  writer: RingWriter,
  random: () => number,
  progress: { producer: string },
): Promise<Produced> {
  let checksum = 0x811c9dc5;
  let spaceWaits = 0;
  for (let seq = 0; seq < RECORD_COUNT; seq++) {
    const roll = random();
    // Mostly small records, one in 16 up to the maximum, so pads and full-ring waits both happen.
    const payloadBytes = 4 + (roll % 16 === 0 ? roll % (writer.payloadBytesMax - 3) : roll % 60);
    let offset = writer.reserve(payloadBytes);
    if (offset === -1) {
      spaceWaits++;
      progress.producer = `waiting for space for record ${seq} (${payloadBytes} bytes)`;
      await writer.waitForSpace(payloadBytes);
      progress.producer = 'producing';
      offset = writer.reserve(payloadBytes);
      assert.notEqual(offset, -1, 'waitForSpace resolved without space');
    }
    writer.bytes.writeUInt32LE(seq, offset);
    for (let i = 4; i < payloadBytes; i++) writer.bytes[offset + i] = patternByte(seq, i);
    writer.commit();
    checksum = recordChecksum(checksum, seq, payloadBytes);
    if ((roll >>> 8) % 8 === 0) writer.publish();
  }
  writer.publish();
  progress.producer = 'done';
  return { checksum, spaceWaits };
}

async function runWorkerExchange(): Promise<void> {
  const seed = Number(process.env.TESSERA_SEED ?? Date.now()) >>> 0; // TESSERA_SEED=<seed> replays a run
  const input: WorkerInput = { role: WORKER_ROLE, requests: createRing(4096), acks: createRing(64) };
  const worker = new Worker(new URL(import.meta.url), { workerData: input });
  const exited = new Promise<number>((resolve, reject) => {
    worker.once('exit', resolve);
    worker.once('error', reject);
  });
  const acks = new RingReader(input.acks);
  let lastCount = 0;
  let lastChecksum = 0;
  const acked = new Promise<void>((resolve) => {
    const loop = drainLoop(acks, () => {
      for (let offset = acks.next(); offset !== -1; offset = acks.next()) {
        const count = acks.bytes.readUInt32LE(offset);
        assert.ok(count >= lastCount, 'acknowledged counts never go back');
        lastCount = count;
        lastChecksum = acks.bytes.readUInt32LE(offset + 4);
      }
      acks.release();
      if (lastCount === RECORD_COUNT) {
        loop.stop();
        resolve();
      }
    });
  });
  const writer = new RingWriter(input.requests);
  // A stall fails with both rings' counters and flags, not a bare timeout: which side waits on what.
  const progress = { acked: -1, atMs: Date.now(), producer: 'producing' };
  let stallTimer: NodeJS.Timeout | undefined;
  const stalled = new Promise<never>((_, reject) => {
    stallTimer = setInterval(() => {
      if (lastCount !== progress.acked) {
        progress.acked = lastCount;
        progress.atMs = Date.now();
      } else if (Date.now() - progress.atMs > STALL_MS) {
        reject(new Error(`no progress for ${STALL_MS} ms (seed ${seed}): ${describeRings(input, progress)}`));
      }
    }, 250);
  });
  stalled.catch(() => {});
  try {
    const produced = await Promise.race([produce(writer, xorshift32(seed), progress), stalled]);
    await Promise.race([acked, stalled, exited.then(() => assert.fail('worker exited early'))]);
    assert.equal(lastChecksum, produced.checksum, `checksums differ (seed ${seed})`);
    assert.ok(produced.spaceWaits > 1000, `the producer waited for space (${produced.spaceWaits} times)`);
    console.log(
      `seed ${seed}: ${produced.spaceWaits} waits for space, ${writer.notifyCount} wake-ups sent, ${ringWakeupsRecovered()} recovered by the watchdog`,
    );
  } finally {
    clearInterval(stallTimer);
  }
  writer.close();
  assert.equal(await exited, 0, 'the worker ends once its ring is closed');
}

/** Without an acknowledgement for this long the exchange is stuck (a run takes about a second). */
const STALL_MS = 10_000;

function describeRings(input: WorkerInput, progress: { acked: number; producer: string }): string {
  const ring = (sab: SharedArrayBuffer) => {
    const h = new Int32Array(sab, 0, RING_HEADER_BYTES / 4);
    return (
      `write ${h[WRITE_INDEX] >>> 0} read ${h[READ_INDEX] >>> 0} producer-waiting ${h[PRODUCER_WAITING_INDEX]} ` +
      `consumer-waiting ${h[CONSUMER_WAITING_INDEX]} closed ${h[CLOSED_INDEX]}`
    );
  };
  return `acked ${progress.acked}, producer ${progress.producer}; requests: ${ring(input.requests)}; acks: ${ring(input.acks)}`;
}

if (isMainThread) ringTests();
else if ((workerData as WorkerInput | undefined)?.role === WORKER_ROLE)
  consumeInWorker(workerData as WorkerInput);
