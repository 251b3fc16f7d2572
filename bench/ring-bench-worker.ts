// Worker side of bench/ring.bench.ts: consumes records and acknowledges each delivery, either through a
// pair of rings or through postMessage. Consuming a record means reading its first and last byte, the same
// in every mode, so the comparison measures transport alone.

import { parentPort, workerData } from 'node:worker_threads';
import { drainLoop, RingReader, RingWriter } from '../src/threads/ring.js';

export type RingBenchWorkerInput =
  | { mode: 'ring'; requests: SharedArrayBuffer; replies: SharedArrayBuffer }
  /** One message per record; the worker acknowledges every `batchRecords` records with one message. */
  | { mode: 'message-per-record'; batchRecords: number }
  /** One message carrying an array of records; acknowledged with one message. */
  | { mode: 'message-per-batch' };

/** What the main thread receives from a postMessage-mode worker: records consumed since the last ack. */
export type RingBenchAck = number;

let touched = 0;

function consumeRing(requests: SharedArrayBuffer, replies: SharedArrayBuffer): void {
  const reader = new RingReader(requests);
  const writer = new RingWriter(replies);
  drainLoop(
    reader,
    () => {
      let count = 0;
      for (let offset = reader.next(); offset !== -1; offset = reader.next()) {
        touched += reader.bytes[offset] + reader.bytes[offset + reader.recordBytes - 1];
        count++;
      }
      reader.release();
      // The main thread drains acks after every batch, so a 4-byte ack always finds room.
      const at = writer.reserve(4);
      if (at === -1) throw new Error('ack ring full');
      writer.bytes.writeUInt32LE(count, at);
      writer.commit();
      writer.publish();
    },
    () => writer.close(),
  );
}

function consumeMessages(port: NonNullable<typeof parentPort>, batchRecords: number): void {
  let count = 0;
  port.on('message', (record: Uint8Array) => {
    touched += record[0] + record[record.length - 1];
    if (++count < batchRecords) return;
    port.postMessage(count satisfies RingBenchAck);
    count = 0;
  });
}

function consumeBatches(port: NonNullable<typeof parentPort>): void {
  port.on('message', (records: Uint8Array[]) => {
    for (const record of records) touched += record[0] + record[record.length - 1];
    port.postMessage(records.length satisfies RingBenchAck);
  });
}

const input = workerData as RingBenchWorkerInput;
if (parentPort === null) throw new Error('ring-bench-worker runs as a worker thread');
if (input.mode === 'ring') consumeRing(input.requests, input.replies);
else if (input.mode === 'message-per-record') consumeMessages(parentPort, input.batchRecords);
else consumeBatches(parentPort);
// Keeps `touched` observable so no consumer loop can be optimised away.
process.on('exit', () => {
  if (touched < 0) console.log(touched);
});
