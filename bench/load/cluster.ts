// Cluster mode (--cluster): each key goes to the primary CLUSTER SLOTS names for its slot, as a
// cluster client sends it (ioredis Cluster, redis-benchmark --cluster) — Tessera's worker ports, or
// the nodes of a Redis Cluster. One driver per primary, each with its share of the connections,
// operations and rate, and only its keys: its source draws as the whole run's would and passes over
// the keys of other primaries. The phases' results are merged into one. Workloads that insert or
// scan are refused here: an insert's key is taken before its primary is known, and a scan's
// consecutive keys span slots.

import { Redis } from 'ioredis';
import { slotOf } from '../../src/core/keyspace.js';
import { SLOT_COUNT } from '../../src/core/limits.js';
import type { Target } from './client.js';
import { type Driver, emptyPhaseResult, type PhaseProgress, type PhaseResult } from './driver.js';
import { LatencyHistogram } from './histogram.js';
import { KEY_DIGITS, type RequestTemplates } from './request-writer.js';
import { OP_INSERT, OP_KINDS, type OpChoice, type OpSource } from './workloads.js';

/** The primaries of a cluster and which serves each slot. */
export interface SlotMap {
  targets: Target[];
  /** Per slot, the index of its primary in `targets` (-1: none serves it). */
  ownerOfSlot: Int32Array;
}

type SlotsReply = Array<[number, number, [string, number, ...unknown[]], ...unknown[]]>;

/** Asks `seed` for CLUSTER SLOTS; rejects when it has no cluster view. */
export async function fetchSlotMap(seed: Target): Promise<SlotMap> {
  const redis = new Redis({
    host: seed.host,
    port: seed.port,
    password: seed.password,
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  });
  try {
    await redis.connect();
    const slots = (await redis.call('CLUSTER', 'SLOTS')) as SlotsReply;
    const targets: Target[] = [];
    const ownerOfSlot = new Int32Array(SLOT_COUNT).fill(-1);
    for (const [first, last, [host, port]] of slots) {
      let t = targets.findIndex((x) => x.host === host && x.port === port);
      if (t === -1) t = targets.push({ host, port, password: seed.password }) - 1;
      ownerOfSlot.fill(t, first, last + 1);
    }
    if (targets.length === 0) throw new Error(`${seed.host}:${seed.port} names no primary in CLUSTER SLOTS`);
    return { targets, ownerOfSlot };
  } finally {
    redis.disconnect();
  }
}

/** Per key index below `keys`, the index of the primary serving it. */
export function ownersOfKeys(templates: RequestTemplates, keys: number, map: SlotMap): Int32Array {
  const owners = new Int32Array(keys);
  const key = Buffer.alloc(templates.keyBytes);
  templates.prefix.copy(key);
  const digitsAt = templates.prefix.length;
  for (let i = 0; i < keys; i++) {
    key.write(String(i).padStart(KEY_DIGITS, '0'), digitsAt, 'latin1');
    owners[i] = map.ownerOfSlot[slotOf(key)];
  }
  return owners;
}

/** `inner`'s operations whose key the primary `target` serves. */
export class TargetSource implements OpSource {
  constructor(
    private readonly inner: OpSource,
    private readonly owners: Int32Array,
    private readonly target: number,
  ) {}

  next(choice: OpChoice): void {
    do this.inner.next(choice);
    while (this.owners[choice.key] !== this.target);
  }

  inserted(key: number): void {
    this.inner.inserted(key);
  }
}

/** The preload's inserts of the keys the primary `target` serves, in key order. */
export class TargetPreload implements OpSource {
  private nextKey = 0;

  constructor(
    private readonly owners: Int32Array,
    private readonly target: number,
  ) {}

  next(choice: OpChoice): void {
    while (this.owners[this.nextKey] !== this.target) this.nextKey++;
    choice.kind = OP_INSERT;
    choice.key = this.nextKey++;
    choice.count = 1;
  }

  inserted(_key: number): void {}
}

/** `total` split over the primaries in proportion to `shares` (keys each serves), summing to `total`. */
export function splitByShare(total: number, shares: readonly number[]): number[] {
  const all = shares.reduce((a, b) => a + b, 0);
  const parts = shares.map((s) => Math.floor((total * s) / all));
  let left = total - parts.reduce((a, b) => a + b, 0);
  for (let i = 0; left > 0; i = (i + 1) % parts.length, left--) parts[i]++;
  return parts;
}

/** The drivers of one phase, as one for a progress line. */
export class DriverGroup implements PhaseProgress {
  constructor(readonly drivers: readonly Driver[]) {}

  progress(): { elapsedMs: number; completed: number; errors: number; inFlight: number } {
    const all = { elapsedMs: 0, completed: 0, errors: 0, inFlight: 0 };
    for (const d of this.drivers) {
      const p = d.progress();
      all.elapsedMs = Math.max(all.elapsedMs, p.elapsedMs);
      all.completed += p.completed;
      all.errors += p.errors;
      all.inFlight += p.inFlight;
    }
    return all;
  }

  /** Runs every driver at once; their results as one phase. */
  async run(): Promise<PhaseResult> {
    return mergePhases(await Promise.all(this.drivers.map((d) => d.run())));
  }
}

/** Results of drivers that ran side by side, as one phase: counts summed, histograms merged. */
export function mergePhases(results: readonly PhaseResult[]): PhaseResult {
  const startedAtMs = Math.min(...results.map((r) => r.startedAtMs));
  const endedAtMs = Math.max(...results.map((r) => r.startedAtMs + r.elapsedMs));
  const merged = emptyPhaseResult(results[0].service !== undefined);
  merged.startedAtMs = startedAtMs;
  merged.elapsedMs = endedAtMs - startedAtMs;
  for (const r of results) {
    for (let k = 0; k < OP_KINDS; k++) {
      merged.histograms[k].add(r.histograms[k]);
      merged.failed[k] += r.failed[k];
      merged.misses[k] += r.misses[k];
    }
    if (r.service !== undefined) merged.service?.add(r.service);
    addSeries(merged.seriesOps, r.seriesOps);
    addSeries(merged.seriesErrors, r.seriesErrors);
    r.seriesLatency.forEach((h, i) => {
      while (merged.seriesLatency.length <= i) merged.seriesLatency.push(new LatencyHistogram());
      merged.seriesLatency[i].add(h);
    });
    for (const [kind, e] of r.errors) {
      const known = merged.errors.get(kind);
      if (known === undefined) merged.errors.set(kind, { ...e });
      else known.count += e.count;
    }
    merged.sentOps += r.sentOps;
    merged.intendedOps += r.intendedOps;
  }
  return merged;
}

function addSeries(into: number[], from: readonly number[]): void {
  from.forEach((n, i) => {
    while (into.length <= i) into.push(0);
    into[i] += n;
  });
}
