// The record codec: encoding a write request (header + versioned record) into ring memory, and
// decoding the fields the worker reads back out.

import { RECORD_HEADER_BYTES, recordBytes, wallMsOf, writeRecordHeader } from '../src/core/record.js';
import {
  requestBytes,
  requestFragment,
  requestId,
  requestKeyBytes,
  writeRequestHeader,
} from '../src/threads/op-codec.js';
import { type BenchRow, formatTable, isMain, runTasks } from './common.js';

const BATCH = 1000;

export async function codecBench(): Promise<BenchRow[]> {
  const key = Buffer.from('user:000123456');
  const value = Buffer.alloc(100, 7);
  const nodeId = Buffer.from('n-0123456789ab');
  const bytes = requestBytes(key.length, recordBytes(nodeId.length, value.length));
  const ring = Buffer.alloc(bytes * BATCH);
  const encode = () => {
    for (let i = 0, at = 0; i < BATCH; i++, at += bytes) {
      const p = writeRequestHeader(ring, at, 1, 1, 1, false, 7, i, key);
      const v = writeRecordHeader(ring, p, false, 1_800_000_000_000 + i, i & 0xffff, 0, nodeId);
      ring.set(value, v);
    }
  };
  encode();
  let sink = 0;
  const decode = () => {
    for (let i = 0, at = 0; i < BATCH; i++, at += bytes) {
      const k = requestKeyBytes(ring, at);
      sink +=
        requestFragment(ring, at) +
        requestId(ring, at) +
        wallMsOf(ring.subarray(at + 10 + k, at + 10 + k + RECORD_HEADER_BYTES));
    }
  };
  const json = () => {
    for (let i = 0; i < BATCH; i++) {
      const s = JSON.stringify({
        kind: 1,
        fragment: 7,
        reqId: i,
        key: key.toString('latin1'),
        value: value.toString('base64'),
      });
      sink += (JSON.parse(s) as { reqId: number }).reqId;
    }
  };
  const rows = await runTasks('codec', [
    {
      name: 'encode write request (100 B value)',
      opsPerCall: BATCH,
      fn: encode,
      baseline: 'JSON encode+decode',
    },
    { name: 'decode request header', opsPerCall: BATCH, fn: decode, baseline: 'JSON encode+decode' },
    { name: 'JSON encode+decode', opsPerCall: BATCH, fn: json },
  ]);
  if (sink === -1) console.log(sink);
  return rows;
}

if (isMain(import.meta.url)) console.log(formatTable(await codecBench()));
