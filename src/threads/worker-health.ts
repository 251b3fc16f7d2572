// A worker's health report as it crosses the result ring (ResultKind.Health): its one type, encoder
// and decoder. It is asked for rarely (health pages, `tessera status`), so it travels as JSON; the
// decoder checks every field against the type's own table, so a report the main thread does not
// understand is an error naming the field, not a cast that lets `undefined` through.

import { internalError } from '../core/errors.js';
import type { FragmentStats } from '../core/fragment.js';
import type { SenderReport } from '../core/replication-sender.js';

export interface WorkerHealthReport {
  worker: number;
  /** The worker's store kind (KvStore.kind). */
  store: string;
  /** A group fsync is running. */
  syncInFlight: boolean;
  heapUsedBytes: number;
  /** V8's heap limit of the worker (raised for a memory store's `maxMemoryBytes`). */
  heapLimitBytes: number;
  /** Keys its memory store evicted under `maxMemoryPolicy`, since the worker started. */
  evictedKeys: number;
  /** Ring waits the worker's watchdog ended because their wake-up never came (src/threads/ring.ts). */
  ringWakeupsRecovered: number;
  fragments: FragmentStats[];
  /** The worker's replication senders (empty outside a cluster). */
  replication: SenderReport[];
}

type FieldType = 'number' | 'string' | 'boolean' | 'numbers';

// One entry per field of each type: `satisfies` makes a field added to the type without its entry
// here fail to compile.
const REPORT_FIELDS = {
  worker: 'number',
  store: 'string',
  syncInFlight: 'boolean',
  heapUsedBytes: 'number',
  heapLimitBytes: 'number',
  evictedKeys: 'number',
  ringWakeupsRecovered: 'number',
} as const satisfies Record<Exclude<keyof WorkerHealthReport, 'fragments' | 'replication'>, FieldType>;

const FRAGMENT_FIELDS = {
  fragment: 'number',
  queued: 'numbers',
  shed: 'numbers',
  unflushed: 'number',
  committedGeneration: 'number',
  syncedGeneration: 'number',
  writes: 'number',
  reads: 'number',
  expiredSwept: 'number',
  commitFailures: 'number',
} as const satisfies Record<keyof FragmentStats, FieldType>;

const SENDER_FIELDS = {
  fragment: 'number',
  peer: 'string',
  state: 'string',
  connected: 'boolean',
  sessionId: 'number',
  buffered: 'number',
  bufferedBytes: 'number',
  inFlight: 'number',
  lastAckLevel: 'number',
  ackDurabilityMismatch: 'boolean',
  reconcileRounds: 'number',
  resets: 'number',
  opsDropped: 'number',
  batchesAcked: 'number',
  opsAcked: 'number',
  lagMs: 'number',
} as const satisfies Record<keyof SenderReport, FieldType>;

export function encodeWorkerHealth(report: WorkerHealthReport): string {
  return JSON.stringify(report);
}

/** The report in `text`; throws an Internal error naming the first field that does not fit. */
export function decodeWorkerHealth(text: string): WorkerHealthReport {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw internalError(`worker health report is not JSON: ${(err as Error).message}`);
  }
  checkFields(value, REPORT_FIELDS, 'report');
  const report = value as WorkerHealthReport;
  checkList(report.fragments, FRAGMENT_FIELDS, 'fragments');
  checkList(report.replication, SENDER_FIELDS, 'replication');
  return report;
}

function checkList(list: unknown, fields: Record<string, FieldType>, name: string): void {
  if (!Array.isArray(list)) throw internalError(`worker health report: ${name} is not a list`);
  for (let i = 0; i < list.length; i++) checkFields(list[i], fields, `${name}[${i}]`);
}

function checkFields(value: unknown, fields: Record<string, FieldType>, name: string): void {
  if (typeof value !== 'object' || value === null) {
    throw internalError(`worker health report: ${name} is not an object`);
  }
  const record = value as Record<string, unknown>;
  for (const [field, type] of Object.entries(fields)) {
    const v = record[field];
    const fits =
      type === 'numbers' ? Array.isArray(v) && v.every((n) => typeof n === 'number') : typeof v === type;
    if (!fits) {
      const expected = type === 'numbers' ? 'list of numbers' : type;
      throw internalError(`worker health report: ${name}.${field} is not a ${expected}`);
    }
  }
}
