// Records/s moved main → worker → ack through a SharedArrayBuffer ring pair, against postMessage used the
// naive way (one message per record) and the batched way (one array of records per message). One task
// iteration is one batch of N records delivered and acknowledged, so records/s = N × ops/s.
//
//   node .build/bench/ring.bench.js      prints the table with the ring/postMessage ratios

import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { Bench } from 'tinybench';
import { copyBytes } from '../src/core/bytes.js';
import { RING_BYTES_MIN } from '../src/core/limits.js';
import { createRing, RingReader, RingWriter } from '../src/threads/ring.js';
import type { RingBenchAck, RingBenchWorkerInput } from './ring-bench-worker.js';

export interface RingBenchRow {
  name: string;
  /** Batches delivered and acknowledged per second. */
  opsPerSec: number;
  recordsPerSec: number;
}

type Transport = 'ring' | 'message-per-record' | 'message-per-batch';

const RECORD_SIZES_BYTES = [64, 1024];
const BATCH_RECORDS = [1, 16, 256];
const TRANSPORTS: Transport[] = ['ring', 'message-per-record', 'message-per-batch'];
/** Ack ring: one 8-byte record per drained batch, drained after every task iteration. */
const REPLY_RING_BYTES = 64 * 1024;

/** Independent records with their own ArrayBuffers, so structured clone copies only the record. */
function makeRecords(count: number, recordBytes: number): Uint8Array[] {
  const records: Uint8Array[] = [];
  for (let i = 0; i < count; i++) {
    const record = new Uint8Array(recordBytes);
    for (let j = 0; j < recordBytes; j++) record[j] = (i * 31 + j) & 0xff;
    records.push(record);
  }
  return records;
}

/** One side of a transport: `deliver` sends a batch and resolves when the worker acknowledged all of it. */
interface Harness {
  deliver(): Promise<void>;
  close(): Promise<void>;
}

function startWorker(input: RingBenchWorkerInput): Worker {
  return new Worker(new URL('./ring-bench-worker.js', import.meta.url), { workerData: input });
}

function ringHarness(records: Uint8Array[]): Harness {
  const requests = createRing(RING_BYTES_MIN);
  const replies = createRing(REPLY_RING_BYTES);
  const worker = startWorker({ mode: 'ring', requests, replies });
  const writer = new RingWriter(requests);
  const reader = new RingReader(replies);
  const deliver = async (): Promise<void> => {
    for (const record of records) {
      let offset = writer.reserve(record.length);
      if (offset === -1) {
        await writer.waitForSpace(record.length);
        offset = writer.reserve(record.length);
      }
      copyBytes(writer.bytes, offset, record);
      writer.commit();
    }
    writer.publish(); // one wake-up for the whole batch
    for (let acked = 0; acked < records.length; ) {
      await reader.waitForData();
      for (let offset = reader.next(); offset !== -1; offset = reader.next()) {
        acked += reader.bytes.readUInt32LE(offset);
      }
      reader.release();
    }
  };
  const close = async (): Promise<void> => {
    writer.close();
    await worker.terminate();
  };
  return { deliver, close };
}

function messageHarness(records: Uint8Array[], perRecord: boolean): Harness {
  const worker = startWorker(
    perRecord ? { mode: 'message-per-record', batchRecords: records.length } : { mode: 'message-per-batch' },
  );
  let acked = 0;
  let wake: (() => void) | null = null;
  worker.on('message', (count: RingBenchAck) => {
    acked += count;
    if (acked >= records.length) wake?.();
  });
  const deliver = (): Promise<void> => {
    acked = 0;
    if (perRecord) for (const record of records) worker.postMessage(record);
    else worker.postMessage(records);
    return new Promise((resolve) => {
      wake = resolve;
    });
  };
  const close = async (): Promise<void> => {
    await worker.terminate();
  };
  return { deliver, close };
}

function harnessFor(transport: Transport, records: Uint8Array[]): Harness {
  if (transport === 'ring') return ringHarness(records);
  return messageHarness(records, transport === 'message-per-record');
}

function taskName(transport: Transport, recordBytes: number, batchRecords: number): string {
  return `${transport} ${recordBytes}B x${batchRecords}`;
}

/** Adds one task; its worker lives for one phase (warmup or run) and is started outside the timing. */
function addTask(bench: Bench, transport: Transport, recordBytes: number, batchRecords: number): void {
  const records = makeRecords(batchRecords, recordBytes);
  let harness: Harness | null = null;
  // An async function, so tinybench sees an async task without calling it before beforeAll.
  const deliver = async (): Promise<void> => {
    await harness!.deliver();
  };
  bench.add(taskName(transport, recordBytes, batchRecords), deliver, {
    beforeAll: async () => {
      harness = harnessFor(transport, records);
      await harness.deliver(); // waits for the worker to start
    },
    afterAll: async () => {
      await harness?.close();
      harness = null;
    },
  });
}

export async function runRingBench(timeMs = 500): Promise<RingBenchRow[]> {
  const bench = new Bench({ name: 'ring vs postMessage', time: timeMs, warmupTime: timeMs / 5 });
  for (const recordBytes of RECORD_SIZES_BYTES) {
    for (const batchRecords of BATCH_RECORDS) {
      for (const transport of TRANSPORTS) addTask(bench, transport, recordBytes, batchRecords);
    }
  }
  await bench.run();
  return bench.tasks.map((task) => {
    const result = task.result;
    if (result.state === 'errored')
      throw new Error(`bench task ${task.name} failed`, { cause: result.error });
    if (result.state !== 'completed') throw new Error(`bench task ${task.name} ended ${result.state}`);
    const opsPerSec = 1000 / result.period;
    const batchRecords = Number(task.name.slice(task.name.lastIndexOf('x') + 1));
    return { name: task.name, opsPerSec, recordsPerSec: opsPerSec * batchRecords };
  });
}

/** One line per record size and batch: records/s of each transport and the ring's ratio to both. */
export function ringRatios(rows: RingBenchRow[]): Record<string, string | number>[] {
  const recordsPerSec = new Map(rows.map((row) => [row.name, row.recordsPerSec]));
  const lines: Record<string, string | number>[] = [];
  for (const recordBytes of RECORD_SIZES_BYTES) {
    for (const batchRecords of BATCH_RECORDS) {
      const rate = (transport: Transport): number =>
        recordsPerSec.get(taskName(transport, recordBytes, batchRecords)) ?? Number.NaN;
      lines.push({
        records: `${recordBytes}B x${batchRecords}`,
        'ring rec/s': Math.round(rate('ring')),
        'msg/record rec/s': Math.round(rate('message-per-record')),
        'msg/batch rec/s': Math.round(rate('message-per-batch')),
        'ring ÷ msg/record': Number((rate('ring') / rate('message-per-record')).toFixed(2)),
        'ring ÷ msg/batch': Number((rate('ring') / rate('message-per-batch')).toFixed(2)),
      });
    }
  }
  return lines;
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const timeMs = Number(process.env.TESSERA_BENCH_TIME_MS ?? 500);
  runRingBench(timeMs).then((rows) => console.table(ringRatios(rows)));
}
