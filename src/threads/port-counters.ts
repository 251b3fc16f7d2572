// The counters each worker's RESP port publishes for the node's INFO (Clients and Stats): a row of
// 64-bit integers per worker in shared memory, written by the worker every RATE_SAMPLE_INTERVAL_MS
// and summed by the main thread when INFO asks. A worker restarted after a crash starts from its
// row, so the totals keep counting up.

/** The fields of a row, in order. */
export const PortCounter = {
  ConnectedClients: 0,
  ConnectionsReceived: 1,
  RejectedConnections: 2,
  CommandsProcessed: 3,
  ErrorReplies: 4,
  KeyspaceHits: 5,
  KeyspaceMisses: 6,
  NetInputBytes: 7,
  NetOutputBytes: 8,
} as const;
export type PortCounter = (typeof PortCounter)[keyof typeof PortCounter];
const FIELDS = 9;

export class PortCounters {
  private readonly cells: BigInt64Array;

  /** A row for each of `workers` workers, all zero. */
  static create(workers: number): PortCounters {
    return new PortCounters(new SharedArrayBuffer(workers * FIELDS * BigInt64Array.BYTES_PER_ELEMENT));
  }

  constructor(readonly buffer: SharedArrayBuffer) {
    this.cells = new BigInt64Array(buffer);
  }

  /** Worker `worker`'s value of `field`. */
  read(worker: number, field: PortCounter): number {
    return Number(Atomics.load(this.cells, worker * FIELDS + field));
  }

  write(worker: number, field: PortCounter, value: number): void {
    Atomics.store(this.cells, worker * FIELDS + field, BigInt(value));
  }

  /** `field` summed over every worker. */
  total(field: PortCounter): number {
    let sum = 0;
    for (let at = field; at < this.cells.length; at += FIELDS) sum += Number(Atomics.load(this.cells, at));
    return sum;
  }
}
