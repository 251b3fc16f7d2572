// The fragment actor (src/core/fragment.ts) against a dumb reference (STYLE.md "Tests"): fast-check
// runs random writes (of several writers, older, equal and newer versions, tombstones, deadlines
// past and future, at each durability, handed over directly or queued), reads, TTL sweeps, passing
// time and failing commits and syncs through the actor and a map-backed store, and holds
// every answer against a map merged by the LWW rule written out here (spec §2.4–2.6): each write's
// exact outcome, each read's record, the freshest record anti-entropy would see, and in the end
// the store itself. Over a store with a write-ahead log the commits also take time (each finishes
// when time next passes) and appends may fail: a `store` write must then be answered only once it
// (or a newer version of its key) is logged or committed.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import {
  type FragmentAction,
  type FragmentConfig,
  FragmentCore,
  FragmentOp,
} from '../../src/core/fragment.js';
import {
  BACKGROUND_OPS_PER_SEC_DEFAULT,
  COMMIT_ATTEMPTS_MAX,
  COMMIT_RETRY_DELAY_MS_MAX,
  FLUSH_PENDING_BYTES_MAX,
  FLUSH_PENDING_WRITES_MAX,
  LOGGED_PENDING_BYTES_MAX,
  QUEUE_OPS_MAX_DEFAULT,
  VALUE_BYTES_MAX_DEFAULT,
} from '../../src/core/limits.js';
import { Durability, OpKind, Priority, REPLY_NAMES, Reply } from '../../src/core/ops.js';
import {
  describeRecord,
  encodeRecord,
  expiresAtOf,
  expiryTombstoneOf,
  isTombstone,
} from '../../src/core/record.js';
import { referenceOrder } from './fixtures/lww-reference.js';

const WRITERS = [Buffer.from('a'), Buffer.from('b'), Buffer.from('c')];
const KEYS = 6;
const START_MS = 1_000;

type Command =
  | {
      kind: 'write';
      key: number;
      wallMs: number;
      logical: number;
      writer: number;
      tombstone: boolean;
      /** Deadline relative to now (0: none). */
      ttlMs: number;
      durability: Durability;
      direct: boolean;
    }
  | { kind: 'read'; key: number }
  | { kind: 'advance'; ms: number }
  | { kind: 'sweep' }
  | { kind: 'fail-next-commit' }
  | { kind: 'fail-next-sync' }
  | { kind: 'fail-next-log' };

const commandArb: fc.Arbitrary<Command> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      kind: fc.constant('write' as const),
      key: fc.nat(KEYS - 1),
      // Around the clock: older, equal and newer versions than what a key holds.
      wallMs: fc.integer({ min: START_MS - 5, max: START_MS + 60 }),
      logical: fc.nat(2),
      writer: fc.nat(WRITERS.length - 1),
      tombstone: fc.boolean(),
      ttlMs: fc.oneof(fc.constant(0), fc.integer({ min: -5, max: 30 })),
      durability: fc.constantFrom(Durability.Memory, Durability.Store, Durability.Stable),
      direct: fc.boolean(),
    }),
  },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('read' as const), key: fc.nat(KEYS - 1) }) },
  {
    weight: 2,
    arbitrary: fc.record({ kind: fc.constant('advance' as const), ms: fc.integer({ min: 1, max: 8 }) }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('sweep' as const) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('fail-next-commit' as const) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('fail-next-sync' as const) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('fail-next-log' as const) }) },
);

const live = (r: Buffer | undefined, nowMs: number): boolean =>
  r !== undefined && !isTombstone(r) && (expiresAtOf(r) === 0 || expiresAtOf(r) > nowMs);

/** The actor with a map for a store, commits applied at once unless the next one is set to fail. */
class Harness {
  readonly store = new Map<number, Buffer>();
  /** The reference: what each key holds once every write so far is merged. */
  readonly model = new Map<number, Buffer>();
  readonly core: FragmentCore;
  nowMs = START_MS;
  private nextReqId = 1;
  /**
   * The answer each request must get, once its durability is reached; `stable`: a `stable` write
   * that waits for a sync, which a failed sync answers StorageFailed instead (it stays applied).
   */
  private readonly expected = new Map<
    number,
    {
      reply: Reply;
      record?: Buffer;
      stable?: boolean;
      syncFailed?: boolean;
      syncsBefore?: number;
      /** A `store` write applied: its key, and the record that must be logged or committed first. */
      storeKey?: number;
      storeRecord?: Buffer;
    }
  >();
  /** Syncs done: a `stable` write is answered only after one that began after it was admitted. */
  private syncsDone = 0;
  /** Syncs done when each key's reference record was written: a sync after that made it stable. */
  private readonly heldSince = new Map<number, number>();
  private failNext = false;
  private failuresInARow = 0;
  private failNextSync = false;
  private failNextLog = false;
  /** Log mode: the commit in flight, finished when time next passes. */
  private inFlight: Extract<FragmentAction, { kind: 'commit' }> | undefined;
  /** Per key, the newest record logged or committed: what a crash would keep. */
  private readonly durable = new Map<number, Buffer>();
  /** Values with a deadline applied: what the actor counts for the TTL sweep. */
  expiringApplied = 0;

  constructor(
    flushIntervalMs: number,
    private readonly logsWrites = false,
  ) {
    const reader = { get: (_f: number, key: Uint8Array) => this.store.get(key[0]) };
    this.core = new FragmentCore(coreConfig({ flushIntervalMs, logsWrites }), reader, this.nowMs);
  }

  get waiting(): number {
    return this.expected.size;
  }

  apply(c: Command): void {
    switch (c.kind) {
      case 'write':
        return this.write(c);
      case 'read': {
        const reqId = this.nextReqId++;
        const record = this.model.get(c.key);
        this.expected.set(
          reqId,
          live(record, this.nowMs) ? { reply: Reply.Found, record } : { reply: Reply.NotFound },
        );
        this.core.step({
          kind: 'request',
          op: new FragmentOp(OpKind.Read, reqId, Priority.Default, Durability.Memory, key(c.key), EMPTY),
        });
        return this.run();
      }
      case 'advance':
        this.nowMs += c.ms;
        this.finishCommit();
        this.core.step({ kind: 'tick', nowMs: this.nowMs });
        return this.run();
      case 'sweep':
        return this.sweep();
      case 'fail-next-commit':
        // Never a third failure in a row: the actor would then answer StorageFailed, which the
        // reference does not model.
        this.failNext = this.failuresInARow < 2;
        return;
      case 'fail-next-sync':
        this.failNextSync = true;
        return;
      case 'fail-next-log':
        this.failNextLog = this.logsWrites;
        return;
    }
  }

  private write(c: Extract<Command, { kind: 'write' }>): void {
    const expiresAtMs = c.ttlMs === 0 || c.tombstone ? 0 : Math.max(1, this.nowMs + c.ttlMs);
    const value = c.tombstone ? EMPTY : Buffer.from(`v${c.wallMs}.${c.logical}`);
    const record = encodeRecord(c.tombstone, c.wallMs, c.logical, expiresAtMs, WRITERS[c.writer], value);
    const reqId = this.nextReqId++;
    const held = this.model.get(c.key);
    const order = held === undefined ? 1 : referenceOrder(record, held);
    if (order < 0) this.expected.set(reqId, { reply: Reply.Superseded, record: held });
    else if (order === 0) this.expected.set(reqId, { reply: Reply.AlreadyPresent });
    else if (expiresAtMs !== 0 && expiresAtMs <= this.nowMs) {
      this.expected.set(reqId, { reply: Reply.Expired });
      this.hold(c.key, expiryTombstoneOf(record));
    } else {
      this.expected.set(reqId, { reply: Reply.Applied });
      this.hold(c.key, record);
      if (expiresAtMs !== 0) this.expiringApplied++;
    }
    const { durability } = c;
    const want = this.expected.get(reqId)!;
    want.stable =
      durability === Durability.Stable &&
      (want.reply === Reply.Applied || want.reply === Reply.AlreadyPresent);
    // A write the key already holds is stable once the record it repeats is: after a sync that
    // followed that record's write, which may have been before this one.
    want.syncsBefore = want.reply === Reply.AlreadyPresent ? this.heldSince.get(c.key)! : this.syncsDone;
    if (durability === Durability.Store && want.reply === Reply.Applied) {
      want.storeKey = c.key;
      want.storeRecord = record;
    }
    const k = key(c.key);
    if (!(c.direct && this.core.tryDirectWrite(reqId, Priority.Default, durability, k, record, this.nowMs))) {
      this.core.step({
        kind: 'request',
        op: new FragmentOp(OpKind.Write, reqId, Priority.Default, durability, k, record),
      });
    }
    this.run();
  }

  /** `record` becomes what the reference holds for key `k`. */
  private hold(k: number, record: Buffer): void {
    this.model.set(k, record);
    this.heldSince.set(k, this.syncsDone);
  }

  /** The cleaner's pass, offered only when the store holds everything (as the model then does). */
  private sweep(): void {
    if (this.core.hasUncommitted()) return;
    const entries: Array<{ key: Buffer; record: Buffer }> = [];
    for (const [k, record] of this.store) {
      if (isTombstone(record) || live(record, this.nowMs)) continue;
      entries.push({ key: key(k), record });
      this.hold(k, expiryTombstoneOf(record));
    }
    this.core.step({ kind: 'sweep', nowMs: this.nowMs, entries });
    this.run();
  }

  /** A turn: runs the queue, then carries out every action until none is left. */
  run(): void {
    this.core.step({ kind: 'run', nowMs: this.nowMs, budget: QUEUE_OPS_MAX_DEFAULT });
    const actions: FragmentAction[] = [];
    for (this.core.takeActions(actions); actions.length > 0; this.core.takeActions(actions)) {
      for (const action of actions.splice(0)) {
        if (action instanceof FragmentOp) this.answered(action.reqId, action.reply, action.replyRecord);
        else if (action.kind === 'acks')
          for (const reqId of action.reqIds) this.answered(reqId, action.reply, undefined);
        else if (action.kind === 'commit') {
          if (this.logsWrites) {
            assert.equal(this.inFlight, undefined, 'one commit in flight');
            this.inFlight = action;
          } else this.commit(action);
        } else if (action.kind === 'log') this.log(action);
        else this.sync(action.generation);
      }
    }
  }

  /** A sync: done, or failed — then every `stable` write waiting may be answered StorageFailed. */
  private sync(generation: number): void {
    if (!this.failNextSync) {
      this.syncsDone++;
      return this.core.step({ kind: 'synced', generation });
    }
    this.failNextSync = false;
    for (const want of this.expected.values()) if (want.stable) want.syncFailed = true;
    this.core.step({ kind: 'sync-failed', generation, message: 'refused' });
  }

  /** Log mode: the commit in flight finishes (time passed), and the turn's actions are carried out. */
  private finishCommit(): void {
    const action = this.inFlight;
    if (action === undefined) return;
    this.inFlight = undefined;
    this.commit(action);
    this.run();
  }

  private log(action: Extract<FragmentAction, { kind: 'log' }>): void {
    if (this.failNextLog) {
      this.failNextLog = false;
      return this.core.step({ kind: 'log-failed', generation: action.generation });
    }
    for (const [k, record] of action.puts) this.keepDurable(k[0], Buffer.from(record));
    this.core.step({ kind: 'logged', generation: action.generation });
  }

  private keepDurable(k: number, record: Buffer): void {
    const held = this.durable.get(k);
    if (held === undefined || referenceOrder(record, held) > 0) this.durable.set(k, record);
  }

  private commit(action: Extract<FragmentAction, { kind: 'commit' }>): void {
    if (this.failNext) {
      this.failNext = false;
      this.failuresInARow++;
      return this.core.step({ kind: 'commit-failed', generation: action.generation, message: 'refused' });
    }
    this.failuresInARow = 0;
    for (const [k, record] of action.puts) {
      this.store.set(k[0], Buffer.from(record));
      this.keepDurable(k[0], Buffer.from(record));
    }
    this.core.step({ kind: 'committed', generation: action.generation });
  }

  private answered(reqId: number, reply: Reply, record: Uint8Array | undefined): void {
    const want = this.expected.get(reqId);
    assert.ok(want !== undefined, `an answer to request ${reqId}, which is not waiting`);
    this.expected.delete(reqId);
    if (reply === Reply.StorageFailed && want.syncFailed === true) return;
    assert.equal(REPLY_NAMES[reply], REPLY_NAMES[want.reply], `request ${reqId}`);
    if (want.stable === true)
      assert.ok(this.syncsDone > want.syncsBefore!, `stable request ${reqId} answered before a sync`);
    if (want.storeRecord !== undefined && reply === Reply.Applied) {
      const kept = this.durable.get(want.storeKey!);
      assert.ok(
        kept !== undefined && referenceOrder(want.storeRecord, kept) <= 0,
        `store request ${reqId} answered before it was logged or committed`,
      );
    }
    if (want.record !== undefined) {
      assert.equal(describeRecord(record), describeRecord(want.record), `request ${reqId}'s record`);
    }
  }

  /** What anti-entropy and read-modify-writes see of every key equals the reference. */
  checkCurrent(): void {
    for (let k = 0; k < KEYS; k++) {
      assert.equal(describeRecord(this.core.current(key(k))), describeRecord(this.model.get(k)), `key ${k}`);
    }
  }
}

const EMPTY = Buffer.alloc(0);
const key = (k: number): Buffer => Buffer.from([k]);

/** Fragment 0's configuration with the default limits, flushed at once unless `overrides` say otherwise. */
function coreConfig(overrides: Partial<FragmentConfig>): FragmentConfig {
  return {
    fragment: 0,
    valueBytesMax: VALUE_BYTES_MAX_DEFAULT,
    storedHighWaterWallMs: 0,
    queueOpsMax: QUEUE_OPS_MAX_DEFAULT,
    backgroundOpsPerSec: BACKGROUND_OPS_PER_SEC_DEFAULT,
    flushIntervalMs: 0,
    flushWritesMax: FLUSH_PENDING_WRITES_MAX,
    flushBytesMax: FLUSH_PENDING_BYTES_MAX,
    ...overrides,
  };
}

test('§2.4–2.6 fast-check: the actor answers and stores as an LWW map does, through queues, expiry, sweeps, failed commits and syncs, with and without a write-ahead log', () => {
  fc.assert(
    fc.property(
      fc.array(commandArb, { minLength: 1, maxLength: 120, size: 'max' }),
      fc.constantFrom(0, 5),
      fc.boolean(),
      (commands, flushIntervalMs, logsWrites) => {
        const h = new Harness(flushIntervalMs, logsWrites);
        for (const c of commands) {
          h.apply(c);
          h.checkCurrent();
        }
        // Let every retry and deferred commit happen: then every request is answered and the store is the reference.
        for (let i = 0; i < 50 && (h.waiting > 0 || h.core.hasUncommitted()); i++)
          h.apply({ kind: 'advance', ms: 10 });
        assert.equal(h.waiting, 0, 'every request answered');
        assert.equal(h.core.expiringWritten, h.expiringApplied, 'values with a deadline counted as written');
        for (let k = 0; k < KEYS; k++) {
          assert.equal(describeRecord(h.store.get(k)), describeRecord(h.model.get(k)), `stored key ${k}`);
        }
      },
    ),
    { numRuns: 400 },
  );
});

test('over a write-ahead log, no generation is logged while LOGGED_PENDING_BYTES_MAX wait for the store, until a commit takes them', () => {
  const store = new Map<string, Buffer>();
  const core = new FragmentCore(
    coreConfig({ valueBytesMax: LOGGED_PENDING_BYTES_MAX, logsWrites: true }),
    { get: (_f, k) => store.get(Buffer.from(k).toString('latin1')) },
    START_MS,
  );
  const half = Buffer.alloc(LOGGED_PENDING_BYTES_MAX / 2 + 1, 1);
  let reqId = 0;
  const actions: FragmentAction[] = [];
  /** A store write of `value` to a key of its own, then a turn; the kinds of what it asked for. */
  const write = (value: Buffer): string[] => {
    reqId++;
    const record = encodeRecord(false, START_MS + reqId, 0, 0, WRITERS[0], value);
    core.step({
      kind: 'request',
      op: new FragmentOp(OpKind.Write, reqId, Priority.Default, Durability.Store, key(reqId), record),
    });
    core.step({ kind: 'run', nowMs: START_MS, budget: QUEUE_OPS_MAX_DEFAULT });
    return kinds();
  };
  const kinds = (): string[] => {
    core.takeActions(actions);
    return actions.splice(0).map((a) => (a instanceof FragmentOp ? `reply ${a.reqId}` : a.kind));
  };
  assert.deepEqual(write(half), ['log', 'commit']);
  core.step({ kind: 'logged', generation: 1 });
  assert.deepEqual(kinds(), ['reply 1']);
  // Commit 1 runs; the next two generations are logged and wait for it, over the bound together.
  assert.deepEqual(write(half), ['log']);
  core.step({ kind: 'logged', generation: 2 });
  assert.deepEqual(kinds(), ['reply 2']);
  assert.deepEqual(write(half), ['log']);
  core.step({ kind: 'logged', generation: 3 });
  assert.deepEqual(kinds(), ['reply 3']);
  // Not logged: its store reply waits.
  assert.deepEqual(write(Buffer.from('small')), []);
  assert.equal(core.nextWakeMs(START_MS), Number.POSITIVE_INFINITY, 'no wake-up while the store is behind');
  // The commit takes generations 2 and 3, and the waiting one is logged.
  core.step({ kind: 'committed', generation: 1 });
  assert.deepEqual(kinds(), ['commit', 'log']);
  core.step({ kind: 'logged', generation: 4 });
  assert.deepEqual(kinds(), ['reply 4']);
});

test("while the store keeps failing, a scan's fence is answered StorageFailed at once; a plain fence waits for the next commit", () => {
  const core = new FragmentCore(coreConfig({}), { get: () => undefined }, START_MS);
  const actions: FragmentAction[] = [];
  let nowMs = START_MS;
  const run = (): FragmentAction[] => {
    core.step({ kind: 'run', nowMs, budget: QUEUE_OPS_MAX_DEFAULT });
    core.takeActions(actions);
    return actions.splice(0);
  };
  const record = encodeRecord(false, START_MS, 0, 0, WRITERS[0], Buffer.from('v'));
  core.step({
    kind: 'request',
    op: new FragmentOp(OpKind.Write, 1, Priority.Default, Durability.Store, key(1), record),
  });
  let pending = run();
  // Every commit fails until the store counts as failing.
  for (let failures = 0; failures < COMMIT_ATTEMPTS_MAX; failures++) {
    const commit = pending.find((a) => !(a instanceof FragmentOp) && a.kind === 'commit');
    assert.ok(commit !== undefined && !(commit instanceof FragmentOp) && commit.kind === 'commit');
    core.step({ kind: 'commit-failed', generation: commit.generation, message: 'disk full' });
    core.takeActions(actions);
    actions.splice(0);
    nowMs += COMMIT_RETRY_DELAY_MS_MAX;
    pending = failures + 1 < COMMIT_ATTEMPTS_MAX ? run() : [];
  }
  const scanFence = new FragmentOp(OpKind.Fence, 2, Priority.Default, Durability.Store, EMPTY, EMPTY);
  scanFence.answersWhileFailing = true;
  const plainFence = new FragmentOp(OpKind.Fence, 3, Priority.Default, Durability.Store, EMPTY, EMPTY);
  core.step({ kind: 'request', op: scanFence });
  core.step({ kind: 'request', op: plainFence });
  const replies = run().filter((a): a is FragmentOp => a instanceof FragmentOp);
  assert.deepEqual(
    replies.map((op) => [op.reqId, REPLY_NAMES[op.reply]]),
    [[2, REPLY_NAMES[Reply.StorageFailed]]],
  );
  assert.match(replies[0].text, /store is failing: disk full/);
  assert.ok(core.hasUncommitted(), 'the write it could not commit is still pending, for the scan to read');
});

test('a fence at Default priority passes writes queued at Background; one at Background is answered after them (a handover fences there)', () => {
  const core = new FragmentCore(coreConfig({}), { get: () => undefined }, START_MS);
  const actions: FragmentAction[] = [];
  const record = encodeRecord(false, START_MS, 0, 0, WRITERS[0], Buffer.from('v'));
  const requests = [
    new FragmentOp(OpKind.Write, 1, Priority.Background, Durability.Memory, key(1), record),
    new FragmentOp(OpKind.Fence, 2, Priority.Default, Durability.Memory, EMPTY, EMPTY),
    new FragmentOp(OpKind.Fence, 3, Priority.Background, Durability.Memory, EMPTY, EMPTY),
  ];
  for (const op of requests) core.step({ kind: 'request', op });
  core.step({ kind: 'run', nowMs: START_MS, budget: QUEUE_OPS_MAX_DEFAULT });
  core.takeActions(actions);
  const replies = actions.filter((a): a is FragmentOp => a instanceof FragmentOp);
  assert.deepEqual(
    replies.map((op) => [op.reqId, REPLY_NAMES[op.reply]]),
    [
      [2, REPLY_NAMES[Reply.FenceReached]],
      [1, REPLY_NAMES[Reply.Applied]],
      [3, REPLY_NAMES[Reply.FenceReached]],
    ],
  );
});
