// What a run asks for: the operation mix of each workload and the key distributions.
//
// YCSB core workloads (Cooper et al., "Benchmarking cloud serving systems with YCSB", SoCC 2010, and
// YCSB's workloads/workload[a-f]), mapped onto Redis string commands, one record per key:
//
//   a  update heavy   read 50 %  update 50 %        zipfian    GET / SET
//   b  read mostly    read 95 %  update 5 %         zipfian
//   c  read only      read 100 %                    zipfian
//   d  read latest    read 95 %  insert 5 %         latest     insert = SET of the next new key
//   e  short ranges   scan 95 %  insert 5 %         zipfian    scan = MGET of 1..100 consecutive keys
//   f  read-modify-   read 50 %  rmw 50 %           zipfian    rmw = GET, then SET of the same key
//      write                                                   once the GET's reply is in: one op
//   set / get         update 100 % / read 100 %     uniform    (redis-benchmark's -t set / -t get)
//   mixed             read --read-ratio, update the rest       uniform
//
// Workload E: Redis has no range read over string keys, and SCAN MATCH walks the whole keyspace in
// hash order (its cost grows with the database, not with the range), so a YCSB scan of `len` records
// from key `start` is one MGET of keys start..start+len-1: the same records in key order, one round
// trip, cost in proportion to `len`. Keys are dense indices written as fixed-width decimals
// (`<prefix>0000000042`), so "consecutive keys" is well defined on any server.
//
// Key space: keys [0, --keys) are the loaded records; inserts take the next indices. Reads and
// updates choose among the inserted keys whose insert has been acknowledged (YCSB's
// AcknowledgedCounterGenerator), so `latest` never reads a key whose SET is still in flight.

import { assert } from '../../src/core/assert.js';
import type { Random } from './random.js';
import { ZipfianGenerator } from './zipfian.js';

export const OP_READ = 0;
export const OP_UPDATE = 1;
export const OP_INSERT = 2;
export const OP_SCAN = 3;
export const OP_RMW = 4;
export const OP_KINDS = 5;
/** Report names, indexed by op kind. */
export const OP_NAMES: readonly string[] = ['read', 'update', 'insert', 'scan', 'rmw'];

export type Distribution = 'uniform' | 'zipfian' | 'latest';
export const DISTRIBUTIONS: readonly Distribution[] = ['uniform', 'zipfian', 'latest'];

export type WorkloadName = 'a' | 'b' | 'c' | 'd' | 'e' | 'f' | 'set' | 'get' | 'mixed';
export const WORKLOAD_NAMES: readonly WorkloadName[] = ['a', 'b', 'c', 'd', 'e', 'f', 'set', 'get', 'mixed'];

/** YCSB's default maxscanlength; scan lengths are uniform in [1, this]. */
export const SCAN_LENGTH_MAX_DEFAULT = 100;
/** Read share of `mixed` when --read-ratio is not given. */
export const MIXED_READ_RATIO_DEFAULT = 0.9;

export interface WorkloadSpec {
  name: WorkloadName;
  title: string;
  /** [op kind, proportion] pairs; proportions sum to 1. */
  mix: ReadonlyArray<readonly [number, number]>;
  distribution: Distribution;
}

/** The workload's mix and default distribution; `readRatio` only shapes `mixed`. */
export function workloadSpec(name: WorkloadName, readRatio = MIXED_READ_RATIO_DEFAULT): WorkloadSpec {
  switch (name) {
    case 'a':
      return spec(name, 'YCSB A: update heavy', zipf(OP_READ, 0.5, OP_UPDATE, 0.5));
    case 'b':
      return spec(name, 'YCSB B: read mostly', zipf(OP_READ, 0.95, OP_UPDATE, 0.05));
    case 'c':
      return spec(name, 'YCSB C: read only', zipf(OP_READ, 1));
    case 'd':
      return {
        ...spec(name, 'YCSB D: read latest', zipf(OP_READ, 0.95, OP_INSERT, 0.05)),
        distribution: 'latest',
      };
    case 'e':
      return spec(name, 'YCSB E: short ranges (MGET)', zipf(OP_SCAN, 0.95, OP_INSERT, 0.05));
    case 'f':
      return spec(name, 'YCSB F: read-modify-write', zipf(OP_READ, 0.5, OP_RMW, 0.5));
    case 'set':
      return { ...spec(name, 'SET', [[OP_UPDATE, 1]]), distribution: 'uniform' };
    case 'get':
      return { ...spec(name, 'GET', [[OP_READ, 1]]), distribution: 'uniform' };
    case 'mixed': {
      assert(readRatio >= 0 && readRatio <= 1, 'the read ratio is a fraction');
      const mix: Array<[number, number]> = [];
      if (readRatio > 0) mix.push([OP_READ, readRatio]);
      if (readRatio < 1) mix.push([OP_UPDATE, 1 - readRatio]);
      const title = `mixed: ${pct(readRatio)} GET / ${pct(1 - readRatio)} SET`;
      return { ...spec(name, title, mix), distribution: 'uniform' };
    }
  }
}

function zipf(...pairs: number[]): Array<[number, number]> {
  const mix: Array<[number, number]> = [];
  for (let i = 0; i < pairs.length; i += 2) mix.push([pairs[i], pairs[i + 1]]);
  return mix;
}

function spec(name: WorkloadName, title: string, mix: Array<[number, number]>): WorkloadSpec {
  return { name, title, mix, distribution: 'zipfian' };
}

function pct(x: number): string {
  return `${Math.round(x * 1000) / 10}%`;
}

/** Picks operation kinds by the mix's proportions. */
export class OpChooser {
  private readonly kinds: Uint8Array;
  /** Cumulative proportions; the last is 1. */
  private readonly bounds: Float64Array;

  constructor(mix: WorkloadSpec['mix']) {
    assert(mix.length > 0, 'a workload has at least one operation');
    this.kinds = new Uint8Array(mix.length);
    this.bounds = new Float64Array(mix.length);
    let sum = 0;
    mix.forEach(([kind, share], i) => {
      sum += share;
      this.kinds[i] = kind;
      this.bounds[i] = sum;
    });
    assert(Math.abs(sum - 1) < 1e-9, `a workload's proportions sum to 1, not ${sum}`);
    this.bounds[mix.length - 1] = 1;
  }

  next(random: Random): number {
    const r = random.next();
    for (let i = 0; i < this.bounds.length - 1; i++) if (r < this.bounds[i]) return this.kinds[i];
    return this.kinds[this.bounds.length - 1];
  }
}

/**
 * Keys that exist, and the inserts in flight. Indices below `readable` are loaded or acknowledged
 * inserts; `nextInsert` is the index the next insert takes. Acknowledgements arrive out of order
 * across connections, so a window of flags records them until the prefix below them is complete.
 */
export class KeySpace {
  nextInsert: number;
  readable: number;
  /** acked[i & mask] = 1: the insert of key i (readable ≤ i < nextInsert) is acknowledged. */
  private readonly acked: Uint8Array;
  private readonly mask: number;

  /** `keys`: records that exist before the run; `insertsInFlightMax`: the most inserts at once. */
  constructor(keys: number, insertsInFlightMax: number) {
    this.nextInsert = keys;
    this.readable = keys;
    let size = 1;
    while (size < insertsInFlightMax + 1) size *= 2;
    this.acked = new Uint8Array(size);
    this.mask = size - 1;
  }

  /** The key index for a new insert. */
  takeInsert(): number {
    assert(this.nextInsert - this.readable < this.acked.length, 'more inserts in flight than the window');
    return this.nextInsert++;
  }

  /** The insert of `key` is answered (success or failure: a failed insert reads as a miss). */
  ackInsert(key: number): void {
    assert(key >= this.readable && key < this.nextInsert, `insert ${key} is not in flight`);
    this.acked[key & this.mask] = 1;
    while (this.readable < this.nextInsert && this.acked[this.readable & this.mask] === 1) {
      this.acked[this.readable & this.mask] = 0;
      this.readable++;
    }
  }
}

/** Chooses existing keys (indices in [0, space.readable)) by a distribution. */
export class KeyChooser {
  private readonly zipfian: ZipfianGenerator | undefined;

  constructor(
    readonly distribution: Distribution,
    private readonly random: Random,
    private readonly space: KeySpace,
    theta: number,
  ) {
    this.zipfian =
      distribution === 'uniform'
        ? undefined
        : new ZipfianGenerator(random, Math.max(1, space.readable), theta);
  }

  next(): number {
    const n = Math.max(1, this.space.readable);
    if (this.zipfian === undefined) return this.random.int(n);
    this.zipfian.resize(n);
    const rank = this.zipfian.next();
    // latest: the newest acknowledged key is the most popular (YCSB's SkewedLatestGenerator).
    return this.distribution === 'latest' ? n - 1 - rank : rank;
  }
}

/** The next operation, filled in by an OpSource (one object per driver, reused). */
export interface OpChoice {
  kind: number;
  key: number;
  /** Keys a scan reads (1 for the other kinds). */
  count: number;
}

/** Where a driver's operations come from. */
export interface OpSource {
  next(choice: OpChoice): void;
  /** The insert of `key` was answered, with success or not. */
  inserted(key: number): void;
}

/** A workload's operations: mix, key distribution, inserts. */
export class WorkloadSource implements OpSource {
  private readonly ops: OpChooser;
  private readonly keys: KeyChooser;

  constructor(
    spec: WorkloadSpec,
    distribution: Distribution,
    private readonly random: Random,
    private readonly space: KeySpace,
    private readonly scanLengthMax: number,
    theta: number,
  ) {
    this.ops = new OpChooser(spec.mix);
    this.keys = new KeyChooser(distribution, random, space, theta);
  }

  next(choice: OpChoice): void {
    const kind = this.ops.next(this.random);
    choice.kind = kind;
    choice.count = 1;
    if (kind === OP_INSERT) {
      choice.key = this.space.takeInsert();
      return;
    }
    const key = this.keys.next();
    choice.key = key;
    if (kind === OP_SCAN) {
      const length = 1 + this.random.int(this.scanLengthMax);
      choice.count = Math.max(1, Math.min(length, this.space.readable - key));
    }
  }

  inserted(key: number): void {
    this.space.ackInsert(key);
  }
}

/** The preload: one insert of each key in [0, keys), in order. */
export class PreloadSource implements OpSource {
  private nextKey = 0;

  next(choice: OpChoice): void {
    choice.kind = OP_INSERT;
    choice.key = this.nextKey++;
    choice.count = 1;
  }

  inserted(_key: number): void {}
}
