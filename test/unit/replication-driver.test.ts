// The worker's replication driver (src/workers/replication.ts) on its own, message for message
// (spec A §5.3 replication sessions, batches, ACKs and NACKs; §6 anti-entropy): a host that is the
// worker runtime's part in miniature — real fragment actors over in-memory stores, commits carried
// out at once or held — and simulated time whose one timer the test fires. Frames the driver sends
// are read back as text, one line each, prefixed by the peer they go to.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setImmediate as macrotask } from 'node:timers/promises';
import pino from 'pino';
import {
  type CommitAction,
  type FragmentAction,
  type FragmentCore,
  FragmentOp,
} from '../../src/core/fragment.js';
import { Keyspace } from '../../src/core/keyspace.js';
import {
  ANTI_ENTROPY_INTERVAL_SPREAD,
  FLUSH_INTERVAL_MS_DEFAULT,
  MOVE_RATE_BURST_MS,
  QUEUE_OPS_MAX_DEFAULT,
  RECONCILE_PAGE_BYTES_MAX,
  RECONCILE_PAGE_ITEMS_MAX,
} from '../../src/core/limits.js';
import { Durability, OpKind, Priority, REPLY_NAMES, Reply } from '../../src/core/ops.js';
import { EnvelopeField, peekEnvelope } from '../../src/core/peer-frame.js';
import { describeRecord, encodeRecord } from '../../src/core/record.js';
import { AckLevel, SENDER_CONFIG_DEFAULTS } from '../../src/core/replication-sender.js';
import { encodeReplicateBatch, readReplicateBatch } from '../../src/core/replication-wire.js';
import type { KvStore } from '../../src/native-bindings/kv-store.js';
import type { RoundReport } from '../../src/threads/op-codec.js';
import { decodeEnvelope, type Envelope, encodeEnvelope } from '../../src/threads/peer-messages.js';
import {
  answerSpan,
  describeSpan,
  type PageReader,
  type SpanQuery,
} from '../../src/workers/reconcile-span.js';
import { type ReplicationHost, type SenderTuning, WorkerReplication } from '../../src/workers/replication.js';
import { replicatingActor, SimClock, SimStore } from '../sim/sim-world.js';

const START_MS = 1_000_000;
const BATCH_INTERVAL_MS = 10;
const ACK_TIMEOUT_MS = 1_000;
const RETRY_FLOOR_MS = 500;
const RECONCILE_INTERVAL_MS = 60_000;
const LEVEL_NAMES: Record<number, string> = {
  [AckLevel.Memory]: 'memory',
  [AckLevel.Store]: 'store',
  [AckLevel.Stable]: 'stable',
};

const latin1 = (bytes: Uint8Array): string => Buffer.from(bytes).toString('latin1');
const keys = (list: ReadonlyArray<{ key: Uint8Array }>): string => list.map((e) => latin1(e.key)).join(' ');

/** One line per frame: its fragment, kind, correlation ids and the keys it carries. */
function describeFrame(bytes: Uint8Array): string {
  if (peekEnvelope(bytes)?.field === EnvelopeField.ReplicateBatch) {
    const b = readReplicateBatch(bytes)!;
    return `f${b.fragment} batch s=${b.sessionId} #${b.batchSeq} ${LEVEL_NAMES[b.requiredAckLevel]} [${keys(b.ops)}]`;
  }
  const e = decodeEnvelope(bytes);
  if (e.sessionStart) return `f${e.sessionStart.fragment} session-start s=${e.sessionStart.sessionId}`;
  if (e.sessionReset) return `f${e.sessionReset.fragment} session-reset`;
  if (e.fragmentAbsent) return `f${e.fragmentAbsent.fragment} absent s=${e.fragmentAbsent.sessionId}`;
  if (e.batchAck) {
    const a = e.batchAck;
    return `f${a.fragment} ack s=${a.sessionId} #${a.batchSeq} ${LEVEL_NAMES[a.level]}`;
  }
  if (e.batchNack) {
    const n = e.batchNack;
    return `f${n.fragment} nack s=${n.sessionId} #${n.batchSeq}: ${n.error}`;
  }
  if (e.reconcileRequest) {
    const q = e.reconcileRequest;
    return `f${q.fragment} request s=${q.sessionId} r=${q.roundId} page=${q.pageSeq}`;
  }
  if (e.reconcileResponse) {
    const p = e.reconcileResponse;
    const records = p.records.length > 0 ? ` records [${keys(p.records)}]` : '';
    return `f${p.fragment} summaries s=${p.sessionId} r=${p.roundId} page=${p.pageSeq} [${keys(p.summaries)}]${records}${p.done ? ' done' : ''}`;
  }
  if (e.reconcileFetch) {
    const f = e.reconcileFetch;
    return `f${f.fragment} fetch s=${f.sessionId} r=${f.roundId} [${f.keys.map(latin1).join(' ')}]`;
  }
  if (e.reconcileData) {
    const d = e.reconcileData;
    return `f${d.fragment} data s=${d.sessionId} r=${d.roundId} [${keys(d.entries)}]${d.done ? ' done' : ''}`;
  }
  throw new Error('a frame of no kind the driver sends');
}

function describeRound(r: RoundReport): string {
  const under = `${r.continuity === 0 ? '' : ` continuity=${r.continuity}`}${r.whole ? ' whole' : ''}`;
  return r.ok ? `ok pulled=${r.keysPulled}${under}` : `failed (${r.reason})${under}`;
}

/** A record written at `wallMs` by node `n9`. */
function recordAt(wallMs: number, value = 'v'): Buffer {
  return encodeRecord(false, wallMs, 0, 0, Buffer.from('n9'), Buffer.from(value));
}

/** A ReplicateBatch of fragment 0, as a peer sends it. */
function batchFrame(
  sessionId: number,
  batchSeq: number,
  ops: Array<[key: string, record: Buffer]>,
  level: number = AckLevel.Store,
): Uint8Array {
  return encodeReplicateBatch({
    fragment: 0,
    sessionId,
    batchSeq,
    requiredAckLevel: level,
    maxWallMs: 0,
    ops: ops.map(([key, record]) => ({ key: Buffer.from(key), record })),
  });
}

/** A key of fragment `fragment` of `fragmentCount`, named after `prefix`. */
function keyOf(fragment: number, fragmentCount: number, prefix: string): string {
  const keyspace = new Keyspace(fragmentCount);
  for (let i = 0; ; i++)
    if (keyspace.fragmentOf(Buffer.from(`${prefix}${i}`)) === fragment) return `${prefix}${i}`;
}

interface HarnessOptions {
  /** Members n0…n{members-1}; this node is n0 unless `self` says otherwise. */
  members?: number;
  self?: number;
  /** Fragments of the keyspace; this node holds all of them, each replicated on every member. */
  fragmentCount?: number;
  restarted?: boolean;
  /** ClusterInit.pullBytesPerSec (default 0: unlimited). */
  pullBytesPerSec?: number;
  /** ClusterInit.compareKeysPerSec (default 0: unlimited). */
  compareKeysPerSec?: number;
}

/** The worker runtime's part around the driver: its actors, their stores, and where frames go. */
class Harness implements ReplicationHost {
  nowMs = START_MS;
  readonly clock = new SimClock(() => this.nowMs);
  readonly stores: SimStore[] = [];
  readonly cores: FragmentCore[] = [];
  readonly driver: WorkerReplication;
  /** The background pool; none unless a test sets one. */
  pool: ReplicationHost['pool'] = undefined;
  readonly logger = pino({ level: 'silent' });
  readonly store: Pick<KvStore, 'page' | 'fragmentSize'> = {
    page: (fragment, start, end, limit) => this.stores[fragment].page(fragment, start, end, limit),
    fragmentSize: (fragment) => this.stores[fragment].fragmentSize(),
  };
  /** What the driver sent and closed, as text, since the last `frames()`. */
  private readonly lines: string[] = [];
  /** Frames sent, for a peer harness to receive. */
  readonly outbox: Array<{ to: number; bytes: Uint8Array }> = [];
  /** Commits: carried out at once, held until `releaseCommits`, or failed. */
  holdCommits = false;
  failCommits = false;
  private readonly heldCommits: CommitAction[] = [];
  private nextReqId = 1;
  private nextId = 0;

  constructor(options: HarnessOptions = {}) {
    const members = options.members ?? 2;
    const self = options.self ?? 0;
    const fragmentCount = options.fragmentCount ?? 1;
    const all = Array.from({ length: members }, (_, i) => i);
    for (let f = 0; f < fragmentCount; f++) {
      this.stores.push(new SimStore());
      this.cores.push(replicatingActor(this.stores[f], f, 0, this.nowMs));
    }
    const tuning: SenderTuning = {
      config: {
        ...SENDER_CONFIG_DEFAULTS,
        batchOpsMax: 4,
        batchIntervalMs: BATCH_INTERVAL_MS,
        ackTimeoutMs: ACK_TIMEOUT_MS,
        retryFloorMs: RETRY_FLOOR_MS,
      },
      // Ids count up from 1 here, so that the lines are easy to read.
      ids: { next: () => ++this.nextId },
    };
    this.driver = new WorkerReplication(
      {
        members: all.map((i) => `n${i}`),
        selfIndex: self,
        replicas: Array.from({ length: fragmentCount }, () => all),
        requiredAck: AckLevel.Store,
        antiEntropyIntervalMs: RECONCILE_INTERVAL_MS,
        maxClockSkewMs: 60_000,
        pullBytesPerSec: options.pullBytesPerSec ?? 0,
        compareKeysPerSec: options.compareKeysPerSec ?? 0,
      },
      Array.from({ length: fragmentCount }, (_, f) => f),
      fragmentCount,
      options.restarted ?? false,
      this,
      tuning,
    );
  }

  // --- ReplicationHost ---------------------------------------------------------------------------

  /** Fragments this node holds no copy of (their actors are not there), though it lists them. */
  readonly missing = new Set<number>();

  core(fragment: number): FragmentCore | undefined {
    return this.missing.has(fragment) ? undefined : this.cores[fragment];
  }

  submit(core: FragmentCore, op: FragmentOp): void {
    core.step({ kind: 'request', op });
  }

  sendFrame(member: number, envelope: Uint8Array): void {
    this.lines.push(`n${member} ${describeFrame(envelope)}`);
    this.outbox.push({ to: member, bytes: envelope });
  }

  closePeer(member: number, reason: string): void {
    this.lines.push(`n${member} closed: ${reason}`);
  }

  /** How rounds ended (RoundReport), and ReconcileNow answers, as text, since the last `roundLines()`. */
  private readonly roundEvents: string[] = [];

  roundEnded(r: RoundReport): void {
    this.roundEvents.push(`n${r.member} f${r.fragment} round #${r.roundSeq} ${describeRound(r)}`);
  }

  roundAnswer(reqId: number, r: RoundReport): void {
    this.roundEvents.push(`answer ${reqId}: #${r.roundSeq} ${describeRound(r)}`);
  }

  roundLines(): string[] {
    return this.roundEvents.splice(0);
  }

  /** Running rounds' reports (RoundProgress), oldest first. */
  readonly progressReports: RoundReport[] = [];

  roundProgress(r: RoundReport): void {
    this.progressReports.push(r);
  }

  // --- what the worker runtime and the main thread do -------------------------------------------

  /** The main thread saw these peers' connections come up (or go down). */
  peers(up: boolean, ...members: number[]): void {
    for (const m of members) this.driver.onPeerState(m, up);
    this.runCores();
  }

  /** A peer's connection came up, the peer taking FragmentAbsent answers. */
  peerTakingAbsent(member: number): void {
    this.driver.onPeerState(member, true, true);
    this.runCores();
  }

  /** A frame from `member`: an envelope, or bytes as they came. */
  receive(member: number, frame: Envelope | Uint8Array): void {
    this.driver.onFrame(member, frame instanceof Uint8Array ? frame : encodeEnvelope(frame));
    this.runCores();
  }

  /** A client write at `store` durability, stamped now, run by the fragment's actor at once. */
  write(key: string, value = 'v', fragment = 0): void {
    const op = new FragmentOp(
      OpKind.Write,
      this.nextReqId++,
      Priority.Default,
      Durability.Store,
      Buffer.from(key),
      recordAt(this.nowMs, value),
    );
    this.cores[fragment].step({ kind: 'request', op });
    this.runCores();
  }

  /** Moves time on 1 ms at a time: the actors tick and run, the driver's timer fires when due. */
  advance(ms: number): void {
    for (const end = this.nowMs + ms; this.nowMs < end; ) {
      this.nowMs++;
      for (const core of this.cores) core.step({ kind: 'tick', nowMs: this.nowMs });
      this.runCores();
      if (this.clock.fireDue()) this.runCores();
    }
  }

  /** Commits held so far reach the store. */
  releaseCommits(): void {
    this.holdCommits = false;
    for (const c of this.heldCommits.splice(0)) this.commit(c);
    this.runCores();
  }

  /** What the driver sent (and closed) since the last call, once its store reads have answered. */
  async frames(): Promise<string[]> {
    await macrotask();
    this.runCores();
    return this.lines.splice(0);
  }

  /** The worker's turn: the actors run, the driver takes what they applied, then their actions. */
  runCores(): void {
    for (const core of this.cores)
      core.step({ kind: 'run', nowMs: this.nowMs, budget: QUEUE_OPS_MAX_DEFAULT });
    this.driver.afterRun(this.cores);
    const actions: FragmentAction[] = [];
    for (const core of this.cores) {
      for (core.takeActions(actions); actions.length > 0; core.takeActions(actions)) {
        for (const action of actions.splice(0)) {
          if (action instanceof FragmentOp) {
            if (action.sink !== undefined) action.sink.onReply(action, action.reply, action.text);
            else this.answer(action.reqId, action.reply);
          } else if (action.kind === 'acks') {
            for (const reqId of action.reqIds) this.answer(reqId, action.reply);
          } else if (action.kind === 'commit') {
            if (this.holdCommits) this.heldCommits.push(action);
            else this.commit(action);
          } else {
            core.step({ kind: 'synced', generation: action.generation });
          }
        }
      }
    }
  }

  private commit(c: CommitAction): void {
    const core = this.cores[c.fragment];
    if (this.failCommits) {
      core.step({ kind: 'commit-failed', generation: c.generation, message: 'disk full' });
      return;
    }
    this.stores[c.fragment].commit(c.puts, c.highWaterWallMs);
    core.step({ kind: 'committed', generation: c.generation });
  }

  /** A client write's answer: the tests' writes all hold. */
  private answer(reqId: number, reply: Reply): void {
    assert.equal(reply, Reply.Applied, `client write ${reqId} answered ${REPLY_NAMES[reply]}`);
  }

  /** The sender report toward `member` of `fragment`. */
  report(member: number, fragment = 0) {
    const r = this.driver.reports().find((x) => x.peer === `n${member}` && x.fragment === fragment);
    assert.ok(r !== undefined, `no sender toward n${member} for fragment ${fragment}`);
    return r;
  }

  /** The record this node's store holds for `key`, as text. */
  stored(key: string, fragment = 0): string {
    return describeRecord(this.stores[fragment].data.get(key));
  }
}

/** A peer's answer to page 0 of a round of fragment 0: it holds nothing that differs, and that is all. */
function emptyLastPage(sessionId: number, roundId: number): Envelope {
  return {
    reconcileResponse: {
      fragment: 0,
      sessionId,
      roundId,
      pageSeq: 0,
      summaries: [],
      done: true,
      nextAfterKey: Buffer.alloc(0),
      records: [],
      maxWallMs: 0,
    },
  };
}

/**
 * A peer up and its first session's round answered (nothing differs: both stores are empty), so
 * that batches are all there is to see. Returns the session id.
 */
async function established(h: Harness, member: number): Promise<number> {
  h.peers(true, member);
  const lines = await h.frames();
  const start = /^n\d+ f0 session-start s=(\d+)$/.exec(lines[0]);
  assert.ok(start !== null, `a session start first: ${lines.join('; ')}`);
  const round = /^n\d+ f0 request s=(\d+) r=(\d+) page=0$/.exec(lines[1]);
  assert.ok(round !== null, `then its round's first page: ${lines.join('; ')}`);
  const sessionId = Number(start[1]);
  const roundId = Number(round[2]);
  h.receive(member, emptyLastPage(sessionId, roundId));
  assert.deepEqual(await h.frames(), []);
  assert.equal(h.report(member).reconcileRounds, 1);
  return sessionId;
}

/** Peer n1 up, and its session `sessionId` toward this node started. */
async function peerSession(h: Harness, sessionId: number): Promise<void> {
  h.peers(true, 1);
  await h.frames();
  h.receive(1, { sessionStart: { fragment: 0, sessionId } });
}

/** Peer n1 established, and a batch of one write, `a`, sent to it. Returns the session id. */
async function batchInFlight(h: Harness): Promise<number> {
  const s = await established(h, 1);
  h.write('a');
  h.advance(BATCH_INTERVAL_MS);
  assert.deepEqual(await h.frames(), [`n1 f0 batch s=${s} #1 store [a]`]);
  return s;
}

const ack = (sessionId: number, batchSeq: number, level: number = AckLevel.Store): Envelope => ({
  batchAck: { fragment: 0, sessionId, batchSeq, level },
});

test('§5.3: a write the actor applied goes to every peer, in one batch each once the batch interval passed', async () => {
  const h = new Harness({ members: 3 });
  h.peers(true, 1, 2);
  assert.deepEqual(await h.frames(), [
    'n1 f0 session-start s=1',
    'n2 f0 session-start s=3',
    // Every session begins with an anti-entropy round; its first page is read from the store.
    'n1 f0 request s=1 r=2 page=0',
    'n2 f0 request s=3 r=4 page=0',
  ]);
  h.write('k1');
  h.write('k2');
  assert.deepEqual(await h.frames(), [], 'a batch that is not full waits for the interval');
  assert.equal(h.clock.timerAtMs, START_MS + BATCH_INTERVAL_MS, 'the timer is set for it');
  h.advance(BATCH_INTERVAL_MS - 1);
  assert.deepEqual(await h.frames(), []);
  h.advance(1);
  assert.deepEqual(await h.frames(), [
    'n1 f0 batch s=1 #1 store [k1 k2]',
    'n2 f0 batch s=3 #1 store [k1 k2]',
  ]);
  assert.equal(h.clock.timerAtMs, h.nowMs + ACK_TIMEOUT_MS, 'then for the ACK timeout');
});

test('§5.3: a full batch goes at once; the next follows in the window, and an ACK retires every batch up to it', async () => {
  const h = new Harness();
  const s = await established(h, 1);
  for (const k of ['a', 'b', 'c', 'd']) h.write(k);
  assert.deepEqual(await h.frames(), [`n1 f0 batch s=${s} #1 store [a b c d]`]);
  h.write('e');
  h.advance(BATCH_INTERVAL_MS);
  assert.deepEqual(await h.frames(), [`n1 f0 batch s=${s} #2 store [e]`], 'without waiting for #1');
  assert.equal(h.report(1).inFlight, 5);
  h.receive(1, ack(s, 2));
  assert.deepEqual(await h.frames(), []);
  const r = h.report(1);
  assert.deepEqual([r.batchesAcked, r.opsAcked, r.inFlight, r.buffered], [2, 5, 0, 0]);
  h.receive(1, ack(s, 1));
  assert.equal(h.report(1).batchesAcked, 2, 'a late ACK of a batch retired already changes nothing');
});

test('§5.3: an ACK of another batch, session or below the level asked for retires nothing', async () => {
  const h = new Harness();
  const s = await batchInFlight(h);
  h.receive(1, ack(s, 2));
  h.receive(1, ack(s + 100, 1));
  h.receive(1, ack(s, 1, AckLevel.Memory));
  h.receive(1, ack(s, 1, 7));
  assert.deepEqual(await h.frames(), []);
  assert.equal(h.report(1).inFlight, 1);
  assert.equal(h.report(1).ackDurabilityMismatch, true);
});

test('§5.3: without an ACK in time, a new session replays the batch', async () => {
  const h = new Harness();
  await batchInFlight(h);
  h.advance(ACK_TIMEOUT_MS - 1);
  assert.deepEqual(await h.frames(), []);
  h.advance(1);
  assert.deepEqual(await h.frames(), ['n1 f0 session-start s=3', 'n1 f0 batch s=3 #1 store [a]']);
});

test('§5.3: a NACK replays the batch in a new session once the retry floor passed', async () => {
  const h = new Harness();
  const s = await batchInFlight(h);
  h.receive(1, { batchNack: { fragment: 0, sessionId: s, batchSeq: 1, error: 'disk full' } });
  assert.deepEqual(await h.frames(), ['n1 f0 session-start s=3']);
  assert.equal(h.clock.timerAtMs, h.nowMs + RETRY_FLOOR_MS);
  h.advance(RETRY_FLOOR_MS - 1);
  assert.deepEqual(await h.frames(), []);
  h.advance(1);
  assert.deepEqual(await h.frames(), ['n1 f0 batch s=3 #1 store [a]']);
});

test('§5.3: nothing goes to a peer that is down; when it is back, a new session replays what it lacks', async () => {
  const h = new Harness({ members: 3 });
  const s1 = await established(h, 1);
  const s2 = await established(h, 2);
  h.write('a');
  h.advance(BATCH_INTERVAL_MS);
  assert.deepEqual(await h.frames(), [
    `n1 f0 batch s=${s1} #1 store [a]`,
    `n2 f0 batch s=${s2} #1 store [a]`,
  ]);
  h.peers(false, 1);
  h.receive(1, ack(s1, 1));
  h.receive(2, ack(s2, 1));
  h.write('b');
  h.advance(BATCH_INTERVAL_MS);
  assert.deepEqual(
    await h.frames(),
    [`n2 f0 batch s=${s2} #2 store [b]`],
    'only n2, and the late ACK is stale',
  );
  h.peers(true, 1);
  // A replay carries what the batch carried; what came after follows in the next batch.
  assert.deepEqual(await h.frames(), [
    'n1 f0 session-start s=5',
    'n1 f0 batch s=5 #1 store [a]',
    'n1 f0 batch s=5 #2 store [b]',
  ]);
  h.receive(1, ack(5, 2));
  assert.deepEqual(await h.frames(), ['n1 f0 request s=5 r=6 page=0'], 'then the round');
});

test('§5.3: a restarted worker tells each peer once, per fragment, that their sessions are gone', async () => {
  const h = new Harness({ members: 3, fragmentCount: 2, restarted: true });
  h.peers(true, 1);
  const first = await h.frames();
  assert.deepEqual(
    first.filter((l) => !l.includes(' request ')),
    ['n1 f0 session-start s=1', 'n1 f1 session-start s=3', 'n1 f0 session-reset', 'n1 f1 session-reset'],
  );
  h.peers(false, 1);
  h.peers(true, 1, 2);
  const again = await h.frames();
  assert.deepEqual(
    again.filter((l) => l.includes('session')),
    [
      'n1 f0 session-start s=5',
      'n1 f1 session-start s=7',
      'n2 f0 session-start s=9',
      'n2 f1 session-start s=11',
      'n2 f0 session-reset',
      'n2 f1 session-reset',
    ],
  );
});

test('§5.3: a peer whose worker restarted asks for a new session: the batch in flight is replayed in it', async () => {
  const h = new Harness();
  await batchInFlight(h);
  h.receive(1, { sessionReset: { fragment: 0 } });
  assert.deepEqual(await h.frames(), ['n1 f0 session-start s=3', 'n1 f0 batch s=3 #1 store [a]']);
  h.receive(1, ack(3, 1));
  // With the replay acknowledged, the new session's round starts.
  assert.deepEqual(await h.frames(), ['n1 f0 request s=3 r=4 page=0']);
});

test('§5.3: a batch of the current session is applied through the actor and acknowledged once its fence is reached', async () => {
  const h = new Harness();
  await peerSession(h, 70);
  h.holdCommits = true;
  h.receive(
    1,
    batchFrame(70, 1, [
      ['x', recordAt(START_MS, 'from n1')],
      ['y', recordAt(START_MS)],
    ]),
  );
  assert.deepEqual(await h.frames(), [], 'no ACK before the commit');
  h.releaseCommits();
  assert.deepEqual(await h.frames(), ['n1 f0 ack s=70 #1 store']);
  assert.equal(h.stored('x'), `value@${START_MS}.0/n9 "from n1"`);
  h.write('z');
  h.advance(BATCH_INTERVAL_MS);
  assert.deepEqual(
    (await h.frames()).filter((l) => l.includes('batch')),
    ['n1 f0 batch s=1 #1 store [z]'],
    'records from a replica are not sent on',
  );
});

test('§5.3: a batch of a session that is not the current one is ignored', async () => {
  const h = new Harness();
  h.peers(true, 1);
  await h.frames();
  const batch = (sessionId: number) => batchFrame(sessionId, 1, [['x', recordAt(START_MS)]]);
  h.receive(1, batch(70));
  h.receive(1, { sessionStart: { fragment: 0, sessionId: 71 } });
  h.receive(1, batch(70));
  // A connection that broke ends the peer's sessions with it.
  h.peers(false, 1);
  h.peers(true, 1);
  h.receive(1, batch(71));
  assert.deepEqual(
    (await h.frames()).filter((l) => !l.includes('session-start') && !l.includes('request')),
    [],
  );
  assert.equal(h.stored('x'), 'none');
});

test('§5.3: a batch whose peer went away before its fence was reached is not acknowledged', async () => {
  const h = new Harness();
  await peerSession(h, 70);
  h.holdCommits = true;
  h.receive(1, batchFrame(70, 1, [['x', recordAt(START_MS)]]));
  h.peers(false, 1);
  h.releaseCommits();
  assert.deepEqual(await h.frames(), []);
  assert.equal(h.stored('x'), `value@${START_MS}.0/n9 "v"`, 'though its records were applied');
});

test('§5.3: a batch is refused for a record that breaks the rules, or when its fence fails', async () => {
  const h = new Harness({ fragmentCount: 2 });
  await peerSession(h, 70);
  // A refusal ends the session (its later batches are ignored): the peer replays in a new one.
  const batch = (sessionId: number, key: string, record: Buffer, level?: number) => {
    h.receive(1, { sessionStart: { fragment: 0, sessionId } });
    return batchFrame(sessionId, 1, [[key, record]], level);
  };
  const mine = keyOf(0, 2, 'k');
  h.receive(1, batch(71, keyOf(1, 2, 'k'), recordAt(START_MS)));
  h.receive(1, batch(72, mine, recordAt(START_MS + 120_000)));
  h.receive(1, batch(73, mine, recordAt(START_MS), 0));
  h.receive(1, batch(74, mine, Buffer.from('not a record')));
  assert.deepEqual(await h.frames(), [
    'n1 f0 nack s=71 #1: replicated key does not belong to declared fragment 0',
    "n1 f0 nack s=72 #1: replicated timestamp 1120000 is 120000 ms ahead of this node's clock (max skew 60000 ms)",
    'n1 f0 nack s=73 #1: replication batch omitted a valid ACK requirement',
    'n1 f0 nack s=74 #1: malformed replicated record',
  ]);
  h.failCommits = true;
  h.receive(1, batch(75, mine, recordAt(START_MS)));
  h.advance(1_000);
  assert.deepEqual(await h.frames(), ['n1 f0 nack s=75 #1: disk full']);
  assert.equal(h.stored(mine), 'none');
});

test('a malformed frame closes the connection to its peer', async () => {
  const h = new Harness();
  h.peers(true, 1);
  await h.frames();
  h.receive(1, Uint8Array.of(0x32, 0x02, 0x08, 0x80));
  h.receive(1, Uint8Array.of(0x2a, 0x05, 0x08));
  const lines = await h.frames();
  assert.equal(lines[0], 'n1 closed: malformed replication batch');
  assert.match(lines[1], /^n1 closed: malformed frame: /);
  assert.equal(lines.length, 2);
});

test('§6: an anti-entropy page out of order closes the connection to its peer', async () => {
  const h = new Harness();
  await peerSession(h, 70);
  h.receive(1, {
    reconcileRequest: {
      fragment: 0,
      sessionId: 70,
      roundId: 9,
      pageSeq: 1,
      afterKey: Buffer.from('m'),
      ranges: [],
      openEnd: true,
      horizonMs: START_MS,
      recordsMax: 0,
      rangeKeys: 0,
    },
  });
  assert.deepEqual(await h.frames(), ['n1 closed: unexpected anti-entropy continuation']);
});

test('§6: pages are worked out in the background pool when there is one, in the worker when it cannot take them', async () => {
  const h = new Harness();
  h.stores[0].commit([[Buffer.from('k'), recordAt(START_MS)]], START_MS);
  const asked: string[] = [];
  const busy = (what: string) => async (fragment: number, afterKey: Uint8Array | undefined, q: SpanQuery) => {
    asked.push(
      `${what} f${fragment} after=${afterKey === undefined ? '-' : latin1(afterKey)} open=${q.openEnd}`,
    );
    throw new Error('pool busy');
  };
  h.pool = { describe: busy('describe'), answer: busy('answer') };
  h.peers(true, 1);
  assert.deepEqual(await h.frames(), ['n1 f0 session-start s=1', 'n1 f0 request s=1 r=2 page=0']);
  assert.deepEqual(asked, ['describe f0 after=- open=true']);
  // The store was read instead: the page describes the key it holds.
  const request = decodeEnvelope(h.outbox[1].bytes).reconcileRequest!;
  assert.deepEqual([request.ranges.length, request.openEnd], [1, true]);
});

test('§6: a round whose pages the pool works out sends what one worked out in the worker sends', async () => {
  /** Two nodes that differ in ways each page kind shows: a range that differs, and keys past the other's last. */
  const run = async (withPool: boolean) => {
    const a = new Harness();
    const b = new Harness({ self: 1 });
    for (let i = 0; i < 700; i++) {
      const key = Buffer.from(`k${String(i).padStart(3, '0')}`);
      if (i < 400)
        a.stores[0].commit([[key, recordAt(START_MS - 30, i % 50 === 0 ? 'a-old' : 'same')]], START_MS - 30);
      b.stores[0].commit(
        [[key, recordAt(i % 50 === 0 ? START_MS - 20 : START_MS - 30, i % 50 === 0 ? 'b-new' : 'same')]],
        START_MS - 20,
      );
    }
    const asked: string[] = [];
    if (withPool) {
      for (const h of [a, b]) {
        // The pool thread's work (src/workers/scan-task.ts) over the same store.
        const read: PageReader = (start, limit) => h.store.page(0, start, undefined, limit, true);
        h.pool = {
          describe: async (_f, afterKey, q, horizonMs) => {
            asked.push('describe');
            return describeSpan(read, afterKey, q, horizonMs);
          },
          answer: async (_f, afterKey, q, work) => {
            asked.push('answer');
            return answerSpan(read, afterKey, q, work);
          },
        };
      }
    }
    a.peers(true, 1);
    b.peers(true, 0);
    const lines = await exchange(a, b);
    a.advance(FLUSH_INTERVAL_MS_DEFAULT);
    return { lines, asked, rounds: a.roundLines(), k000: a.stored('k000'), k699: a.stored('k699') };
  };
  const inWorker = await run(false);
  const inPool = await run(true);
  assert.deepEqual(inPool.lines, inWorker.lines);
  assert.deepEqual(inPool.rounds, inWorker.rounds);
  assert.ok(
    inWorker.lines.some((l) => /^b→f0 summaries .*\[k288 .* records \[k400 /.test(l)),
    "b lists the range that differs and sends the keys past a's last",
  );
  assert.equal(inPool.k000, `value@${START_MS - 20}.0/n9 "b-new"`);
  assert.equal(inPool.k699, `value@${START_MS - 30}.0/n9 "same"`);
  assert.ok(inPool.asked.includes('describe') && inPool.asked.includes('answer'));
});

test('close cancels the timer', async () => {
  const h = new Harness();
  await established(h, 1);
  h.write('a');
  assert.equal(h.clock.timerAtMs, h.nowMs + BATCH_INTERVAL_MS);
  h.driver.close();
  assert.equal(h.clock.timerAtMs, Number.POSITIVE_INFINITY);
});

/** Two nodes' drivers wired back to back: every frame either sends reaches the other. */
async function exchange(a: Harness, b: Harness): Promise<string[]> {
  const lines: string[] = [];
  while (await hop(a, b, lines));
  return lines;
}

/** What a and b sent, as text, into `lines`, and then to each other: false when neither sent any. */
async function hop(a: Harness, b: Harness, lines: string[]): Promise<boolean> {
  for (const l of await a.frames()) lines.push(`a→${l.slice(3)}`);
  for (const l of await b.frames()) lines.push(`b→${l.slice(3)}`);
  if (a.outbox.length === 0 && b.outbox.length === 0) return false;
  const fromA = a.outbox.splice(0);
  const fromB = b.outbox.splice(0);
  for (const { bytes } of fromA) b.receive(0, bytes);
  for (const { bytes } of fromB) a.receive(1, bytes);
  return true;
}

test('§6: a round pulls the records the peer holds newer, and the next one starts about an interval later', async () => {
  const a = new Harness();
  const b = new Harness({ self: 1 });
  // What each store held before the nodes met: nothing of it is in a sender's backlog.
  const put = (h: Harness, key: string, wallMs: number, value: string) =>
    h.stores[0].commit([[Buffer.from(key), recordAt(wallMs, value)]], wallMs);
  put(a, 'both', START_MS - 8, 'a-older');
  put(a, 'only-a', START_MS - 7, 'a1');
  put(b, 'both', START_MS - 5, 'b-newer');
  put(b, 'only-b', START_MS - 6, 'b1');
  a.peers(true, 1);
  b.peers(true, 0);
  assert.deepEqual(await exchange(a, b), [
    'a→f0 session-start s=1',
    'a→f0 request s=1 r=2 page=0',
    'b→f0 session-start s=1',
    'b→f0 request s=1 r=2 page=0',
    // Each lists the keys of the ranges whose digests differ…
    // (and sends whole the records past the requester's last key, which it lacks for certain)…
    'a→f0 summaries s=1 r=2 page=0 [both only-a] done',
    'b→f0 summaries s=1 r=2 page=0 [both] records [only-b] done',
    // …and each fetches those the other holds newer.
    'a→f0 fetch s=1 r=2 [both]',
    'b→f0 fetch s=1 r=2 [only-a]',
    'a→f0 data s=1 r=2 [only-a] done',
    'b→f0 data s=1 r=2 [both] done',
  ]);
  const doneAtMs = a.nowMs;
  a.advance(FLUSH_INTERVAL_MS_DEFAULT);
  b.advance(FLUSH_INTERVAL_MS_DEFAULT);
  for (const h of [a, b]) {
    assert.deepEqual(
      ['both', 'only-a', 'only-b'].map((k) => h.stored(k)),
      [
        `value@${START_MS - 5}.0/n9 "b-newer"`,
        `value@${START_MS - 7}.0/n9 "a1"`,
        `value@${START_MS - 6}.0/n9 "b1"`,
      ],
    );
    assert.equal(h.report(h === a ? 1 : 0).reconcileRounds, 1);
  }
  assert.deepEqual(await exchange(a, b), [], 'records merged from a round are not sent on');
  // The timer set for the round's progress deadline is not moved later when the round ends: it
  // fires for nothing, and is set again for the next round.
  const roundTimeoutAtMs = a.clock.timerAtMs;
  const earliestMs = doneAtMs + RECONCILE_INTERVAL_MS * (1 - ANTI_ENTROPY_INTERVAL_SPREAD / 2);
  const latestMs = doneAtMs + RECONCILE_INTERVAL_MS * (1 + ANTI_ENTROPY_INTERVAL_SPREAD / 2);
  assert.ok(roundTimeoutAtMs < earliestMs);
  a.advance(roundTimeoutAtMs - a.nowMs);
  assert.deepEqual(await a.frames(), []);
  // The next round's time is spread around the interval (replication-sender.test.ts checks how).
  const nextAtMs = a.clock.timerAtMs;
  assert.ok(nextAtMs >= earliestMs && nextAtMs <= latestMs, `next round at ${nextAtMs - doneAtMs} ms`);
  a.advance(nextAtMs - 1 - a.nowMs);
  assert.deepEqual(await a.frames(), []);
  a.advance(1);
  assert.deepEqual(await a.frames(), ['n1 f0 request s=1 r=3 page=0']);
});

/**
 * a pulls 600 keys of `valueBytes` that b holds newer (a holding older `aHolds`) under --move-rate
 * `rateBytesPerSec`, both clocks moving on to a's timer while a step is held. Checks what holds for
 * any such round: one round, never abandoned while it waited; b's size in every report; every byte
 * pulled; and a pace the rate sets. Returns the reports' (round, keys pulled) and the frames.
 */
async function pullUnderMoveRate(
  rateBytesPerSec: number,
  valueBytes: number,
  aHolds: readonly string[],
): Promise<{ progress: Array<[number, number]>; lines: string[] }> {
  const burstBytes = (rateBytesPerSec * MOVE_RATE_BURST_MS) / 1000;
  const a = new Harness({ pullBytesPerSec: rateBytesPerSec });
  const b = new Harness({ self: 1 });
  const held: Array<[Buffer, Buffer]> = [];
  for (let i = 0; i < 600; i++)
    held.push([
      Buffer.from(`k${String(i).padStart(3, '0')}`),
      recordAt(START_MS - 10, 'x'.repeat(valueBytes)),
    ]);
  b.stores[0].commit(held, START_MS - 10);
  for (const key of aHolds)
    a.stores[0].commit([[Buffer.from(key), recordAt(START_MS - 20, 'old')]], START_MS - 20);
  const heldBytes = held.reduce((sum, [key, record]) => sum + key.length + record.length, 0);

  a.peers(true, 1);
  b.peers(true, 0);
  const startMs = a.nowMs;
  const ended: string[] = [];
  const lines: string[] = [];
  while (ended.length === 0) {
    lines.push(...(await exchange(a, b)));
    ended.push(...a.roundLines());
    if (ended.length > 0) break;
    const stepMs = a.clock.timerAtMs - a.nowMs;
    assert.ok(
      stepMs > 0 && stepMs <= SENDER_CONFIG_DEFAULTS.reconcileTimeoutMs,
      `a's timer ${stepMs} ms ahead`,
    );
    a.advance(stepMs);
    b.advance(stepMs);
  }
  const elapsedMs = a.nowMs - startMs;
  assert.deepEqual(ended, ['n1 f0 round #1 ok pulled=600'], 'one round, never abandoned while it waited');
  // Each report with b's copy as it said (exact: the sim's store).
  for (const r of a.progressReports) assert.deepEqual(r.sourceSize, { keys: 600, bytes: heldBytes });
  assert.equal(a.progressReports.at(-1)!.bytesPulled, heldBytes);
  // The bytes before the last step were waited off (less the burst saved up); the last one's are
  // owed by whatever pulls next.
  const waitedBytes = a.progressReports.at(-2)!.bytesPulled - burstBytes;
  const leastMs = (waitedBytes * 1000) / rateBytesPerSec;
  assert.ok(elapsedMs >= leastMs, `${elapsedMs} ms for ${waitedBytes} bytes at ${rateBytesPerSec} B/s`);
  assert.ok(elapsedMs <= leastMs + 50, `${elapsedMs} ms: no longer than the rate needs (${leastMs} ms)`);
  a.advance(FLUSH_INTERVAL_MS_DEFAULT);
  assert.equal(a.stored('k599'), `value@${START_MS - 10}.0/n9 "${'x'.repeat(valueBytes)}"`);
  return { progress: a.progressReports.map((r) => [r.roundSeq, r.keysPulled]), lines };
}

test('§6 --move-rate: each fetch waits off the bytes pulled before it, and the round lives through the wait', async () => {
  // 16 KiB/s: the first fetch's ~260 KB take longer to wait off than the sender's round timeout.
  const rateBytesPerSec = 16 * 1024;
  assert.ok((256 * 1000) / rateBytesPerSec > SENDER_CONFIG_DEFAULTS.reconcileTimeoutMs / 1000);
  // a holds the first and the last key, older, so every key falls inside its ranges: three summary
  // pages (256, 256, 88 keys), a fetch each.
  const { progress, lines } = await pullUnderMoveRate(rateBytesPerSec, 1000, ['k000', 'k599']);
  // A report when b's first page said its size (nothing pulled yet), then one after each fetch
  // merged, its round's counts so far.
  assert.deepEqual(progress, [
    [1, 0],
    [1, 256],
    [1, 512],
    [1, 600],
  ]);
  assert.equal(lines.filter((l) => l.includes(' fetch ')).length, 3);
});

test('§6 --move-rate: each page of records waits off the bytes pulled before it, and the round lives through the wait', async () => {
  // 64 KiB/s: a page of records (about RECONCILE_PAGE_BYTES_MAX) takes longer to wait off than the
  // sender's round timeout.
  const rateBytesPerSec = 64 * 1024;
  assert.ok(RECONCILE_PAGE_BYTES_MAX / rateBytesPerSec > SENDER_CONFIG_DEFAULTS.reconcileTimeoutMs / 1000);
  // a holds nothing: b's 600 keys of 4 000 bytes (2.4 MB) come as records, cut at about a MiB a page.
  const { progress, lines } = await pullUnderMoveRate(rateBytesPerSec, 4000, []);
  const perPage = Math.floor(
    RECONCILE_PAGE_BYTES_MAX / ('k000'.length + recordAt(0, 'x'.repeat(4000)).length),
  );
  // A report when b's first page said its size (before its records merged), then one after each
  // page merged.
  assert.deepEqual(progress, [
    [1, 0],
    [1, perPage],
    [1, 2 * perPage],
    [1, 600],
  ]);
  assert.ok(!lines.some((l) => l.includes(' fetch ')), 'no fetch: the records came in the pages');
});

test('§6 --anti-entropy-rate: a routine round waits off the keys its pages compared; a session’s first round does not', async () => {
  const rate = 500;
  const a = new Harness({ compareKeysPerSec: rate });
  const b = new Harness({ self: 1 });
  // The same 3 000 keys on both: pages of 256, 512, 1 024 and the last 1 208 (of 2 048), all agreeing.
  const same: Array<[Buffer, Buffer]> = [];
  for (let i = 0; i < 3000; i++)
    same.push([Buffer.from(`k${String(i).padStart(4, '0')}`), recordAt(START_MS - 10)]);
  for (const h of [a, b]) h.stores[0].commit(same, START_MS - 10);
  a.peers(true, 1);
  b.peers(true, 0);
  // The session's first round runs at once, though its 3 000 keys are six seconds of the rate.
  await exchange(a, b);
  assert.deepEqual(a.roundLines(), ['n1 f0 round #1 ok pulled=0']);
  // The routine round after it: a's page requests, each with the time it was sent.
  const pages: Array<[number, number]> = [];
  while (a.roundLines().length === 0 || pages.length === 0) {
    const stepMs = Math.min(a.clock.timerAtMs, b.clock.timerAtMs) - a.nowMs;
    assert.ok(stepMs > 0 && stepMs <= RECONCILE_INTERVAL_MS * 2, `next timer ${stepMs} ms ahead`);
    a.advance(stepMs);
    b.advance(stepMs);
    for (const line of await exchange(a, b)) {
      const page = /^a→f0 request s=1 r=\d+ page=(\d+)$/.exec(line);
      if (page !== null && a.nowMs > START_MS) pages.push([Number(page[1]), a.nowMs]);
    }
  }
  assert.deepEqual(
    pages.map(([page]) => page),
    [0, 1, 2, 3],
  );
  const at = (page: number) => pages[page][1];
  // The bucket starts a second's worth full (500): 256 keys, then 512 into debt; each page after
  // waits until the debt is paid: 268 keys (536 ms), then 1 024 (2 048 ms).
  assert.equal(at(1), at(0), 'the burst covers the second page');
  assert.ok(at(2) - at(1) >= 536 && at(2) - at(1) <= 536 + 10, `page 2 after ${at(2) - at(1)} ms`);
  assert.ok(at(3) - at(2) >= 2048 && at(3) - at(2) <= 2048 + 10, `page 3 after ${at(3) - at(2)} ms`);
});

test('§6: a round whose pages all agree lives while each page is answered within the round timeout', async () => {
  const timeoutMs = SENDER_CONFIG_DEFAULTS.reconcileTimeoutMs;
  const a = new Harness();
  const b = new Harness({ self: 1 });
  // Both hold the same eight pages of keys: the round fetches nothing, page after page (of 256 keys,
  // 512 and 1 024, as each page that found nothing doubles the next, then the last 256).
  const same: Array<[Buffer, Buffer]> = [];
  for (let i = 0; i < 8 * RECONCILE_PAGE_ITEMS_MAX; i++)
    same.push([Buffer.from(`k${String(i).padStart(4, '0')}`), recordAt(START_MS - 10)]);
  for (const h of [a, b]) h.stores[0].commit(same, START_MS - 10);
  a.peers(true, 1);
  b.peers(true, 0);
  // Each message takes 0.4 of the timeout to arrive: a page's round trip 0.8, the round 3.2.
  const hopMs = 0.4 * timeoutMs;
  const startMs = a.nowMs;
  const lines: string[] = [];
  const ended: string[] = [];
  while (ended.length === 0 && (await hop(a, b, lines))) {
    a.advance(hopMs);
    b.advance(hopMs);
    ended.push(...a.roundLines());
  }
  assert.deepEqual(ended, ['n1 f0 round #1 ok pulled=0']);
  assert.ok(a.nowMs - startMs > 2 * timeoutMs, `the round took ${a.nowMs - startMs} ms`);
  assert.deepEqual(
    lines.filter((l) => /^a→f0 (session-start|request)/.test(l)),
    ['a→f0 session-start s=1', ...[0, 1, 2, 3].map((page) => `a→f0 request s=1 r=2 page=${page}`)],
    'one session, its round paged through, never abandoned',
  );
});

test('replica lists change at runtime: a sender opens toward a listed member and closes toward one removed', async () => {
  const h = new Harness({ members: 3 });
  h.peers(true, 1, 2);
  await h.frames();
  assert.deepEqual(
    h.driver.reports().map((r) => r.peer),
    ['n1', 'n2'],
  );
  // n2 leaves the list: its sender closes, its running round ends failed.
  h.driver.setReplicas(0, [0, 1], false);
  assert.deepEqual(
    h.driver.reports().map((r) => r.peer),
    ['n1'],
  );
  assert.deepEqual(h.roundLines(), ['n2 f0 round #1 failed (sender closed: replica removed from the list)']);
  assert.equal(h.driver.drainedTo(0, 2), undefined, 'no sender toward n2 any more');
  assert.deepEqual(await h.frames(), []);
  // The same list again changes nothing.
  const sessionId = h.report(1).sessionId;
  h.driver.setReplicas(0, [1, 0], false);
  assert.equal(h.report(1).sessionId, sessionId);
  assert.deepEqual(await h.frames(), []);

  // A member slot appended (n3) and connected: listed, it gets a sender, a session and a round at once.
  h.driver.addMembers(3, ['n3']);
  h.peers(true, 3);
  h.driver.setReplicas(0, [0, 1, 3], false);
  assert.deepEqual(
    h.driver.reports().map((r) => r.peer),
    ['n1', 'n3'],
  );
  const lines = await h.frames();
  assert.match(lines[0], /^n3 f0 session-start s=\d+$/);
  // The round's first page follows its store read.
  assert.match(lines[1], /^n3 f0 request s=\d+ r=\d+ page=0$/);
  assert.equal(lines.length, 2);

  // Dropped: every sender closes.
  h.driver.removeFragment(0);
  assert.deepEqual(h.driver.reports(), []);
  assert.deepEqual(h.roundLines(), [
    'n1 f0 round #1 failed (sender closed: fragment dropped)',
    'n3 f0 round #1 failed (sender closed: fragment dropped)',
  ]);

  // Gained again: a session toward each replica, each peer asked to reopen its own toward this node,
  // and no round until one is asked for (a copy's verification asks one source at a time).
  h.driver.setReplicas(0, [0, 1, 3], true);
  const gained = await h.frames();
  assert.equal(gained.length, 4, gained.join('\n'));
  assert.match(gained[0], /^n1 f0 session-start s=\d+$/);
  assert.match(gained[1], /^n3 f0 session-start s=\d+$/);
  assert.deepEqual(gained.slice(2), ['n1 f0 session-reset', 'n3 f0 session-reset']);
  assert.equal(h.driver.reconcileNow(9, 0, 1, 60_000), true);
  const asked = await h.frames();
  assert.equal(asked.length, 1, asked.join('\n'));
  assert.match(asked[0], /^n1 f0 request s=\d+ r=\d+ page=0$/);
});

test('§6: a round asked for now is answered by the first round that starts after it, complete or not', async () => {
  const h = new Harness();
  assert.equal(h.driver.reconcileNow(1, 0, 2, 60_000), false, 'no sender toward n2');
  const sessionId = await established(h, 1);
  assert.deepEqual(h.roundLines(), ['n1 f0 round #1 ok pulled=0']);

  assert.equal(h.driver.reconcileNow(7, 0, 1, 60_000), true);
  const [request] = await h.frames();
  const round = /^n1 f0 request s=(\d+) r=(\d+) page=0$/.exec(request);
  assert.ok(round !== null, request);
  assert.equal(Number(round[1]), sessionId);
  // Asked again while that round runs: this request waits for the round after it.
  assert.equal(h.driver.reconcileNow(8, 0, 1, 60_000), true);
  h.receive(1, emptyLastPage(sessionId, Number(round[2])));
  assert.deepEqual(h.roundLines(), ['n1 f0 round #2 ok pulled=0', 'answer 7: #2 ok pulled=0']);
  // Round #3 starts at once (asked for), and the peer goes away while it runs.
  assert.match((await h.frames())[0], /^n1 f0 request /);
  h.peers(false, 1);
  assert.deepEqual(h.roundLines(), [
    'n1 f0 round #3 failed (peer disconnected)',
    'answer 8: #3 failed (peer disconnected)',
  ]);
});

test('§6: a verifying round starts once the peer replicates the fragment here, compares everything, and names the continuity it started under', async () => {
  const h = new Harness();
  await established(h, 1);
  assert.deepEqual(h.roundLines(), ['n1 f0 round #1 ok pulled=0']);
  // n1 has not opened a session toward this node: the verifying round waits for it.
  assert.equal(h.driver.reconcileNow(9, 0, 1, 60_000, true), true);
  assert.deepEqual(await h.frames(), []);
  h.advance(5);
  h.receive(1, { sessionStart: { fragment: 0, sessionId: 500, continuity: 77 } });
  const [request] = await h.frames();
  const round = /^n1 f0 request s=(\d+) r=(\d+) page=0$/.exec(request);
  assert.ok(round !== null, request);
  const sent = decodeEnvelope(h.outbox.at(-1)!.bytes).reconcileRequest!;
  assert.equal(sent.horizonMs, 0, 'no horizon: what n1 took before it replicated here is compared too');
  h.receive(1, emptyLastPage(Number(round[1]), Number(round[2])));
  assert.deepEqual(h.roundLines(), [
    'n1 f0 round #2 ok pulled=0 continuity=77 whole',
    'answer 9: #2 ok pulled=0 continuity=77 whole',
  ]);
  // Once n1 replicates here, a verifying round starts at once; a plain one keeps its horizon.
  assert.equal(h.driver.reconcileNow(10, 0, 1, 60_000), true);
  assert.match((await h.frames())[0], /^n1 f0 request /);
  assert.equal(decodeEnvelope(h.outbox.at(-1)!.bytes).reconcileRequest!.horizonMs, h.nowMs);
});

test('§6: a verifying round toward a peer that never replicates here fails at its deadline, saying so; dropping the fragment forgets the peer’s sessions', async () => {
  const h = new Harness();
  await established(h, 1);
  h.roundLines();
  assert.equal(h.driver.reconcileNow(11, 0, 1, 20, true), true);
  const deadline = Date.now() + 10_000;
  let lines: string[] = [];
  while (lines.length === 0 && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 5));
    lines = h.roundLines();
  }
  assert.deepEqual(lines, [
    'answer 11: #0 failed (the peer did not replicate the fragment here within 20 ms)',
  ]);
  assert.deepEqual(await h.frames(), [], 'no round started');
  // Heard once, then the fragment dropped and held again: the next verifying round waits anew.
  h.receive(1, { sessionStart: { fragment: 0, sessionId: 600, continuity: 5 } });
  h.driver.removeFragment(0);
  h.roundLines();
  h.driver.setReplicas(0, [0, 1], true);
  await h.frames();
  h.roundLines();
  assert.equal(h.driver.reconcileNow(12, 0, 1, 60_000, true), true);
  assert.deepEqual(
    (await h.frames()).filter((line) => line.includes('request')),
    [],
    'waits for a session after the fragment came back',
  );
  h.driver.close();
});

test('§6: a round asked for replaces a routine round in flight; the peer serves it, and the old round’s answers are dropped', async () => {
  const a = new Harness();
  const b = new Harness({ self: 1 });
  for (let i = 0; i < 600; i++) {
    const key = Buffer.from(`k${String(i).padStart(3, '0')}`);
    a.stores[0].commit([[key, recordAt(START_MS - 10)]], START_MS - 10);
    b.stores[0].commit([[key, recordAt(START_MS - 10)]], START_MS - 10);
  }
  b.stores[0].commit([[Buffer.from('k599'), recordAt(START_MS - 5, 'newer')]], START_MS - 5);
  a.peers(true, 1);
  b.peers(true, 0);
  // The sessions' first rounds (nobody asked for them) are under way: one hop each.
  const lines: string[] = [];
  await hop(a, b, lines);
  assert.deepEqual(
    lines.filter((l) => l.startsWith('a→')),
    ['a→f0 session-start s=1', 'a→f0 request s=1 r=2 page=0'],
  );
  a.roundLines();
  assert.equal(a.driver.reconcileNow(30, 0, 1, 60_000), true);
  lines.length = 0;
  while (await hop(a, b, lines));
  assert.ok(lines.includes('a→f0 request s=1 r=3 page=0'), 'the round asked for starts at once');
  assert.ok(!lines.some((l) => l.includes('closed')), `no connection closed: ${lines.join('; ')}`);
  assert.deepEqual(a.roundLines(), [
    'n1 f0 round #1 failed (superseded by a new round)',
    'n1 f0 round #2 ok pulled=1 continuity=1 whole',
    'answer 30: #2 ok pulled=1 continuity=1 whole',
  ]);
  a.advance(FLUSH_INTERVAL_MS_DEFAULT);
  assert.equal(a.stored('k599'), `value@${START_MS - 5}.0/n9 "newer"`);
});

test('§6: a round asked for is answered when it ends, however long it runs past the deadline for its start; one that never starts fails at it', async () => {
  const h = new Harness();
  const s = await established(h, 1);
  h.roundLines();
  const deadlineMs = 20;
  assert.equal(h.driver.reconcileNow(20, 0, 1, deadlineMs), true);
  const round = /^n1 f0 request s=\d+ r=(\d+) page=0$/.exec((await h.frames())[0]);
  assert.ok(round !== null, 'the round starts at once');
  // The round runs on past the deadline (a large copy, page after page)…
  await new Promise((resolve) => setTimeout(resolve, 3 * deadlineMs));
  assert.deepEqual(h.roundLines(), [], 'nothing answered while the round runs');
  // …and its end answers.
  h.receive(1, emptyLastPage(s, Number(round[1])));
  assert.deepEqual(h.roundLines(), ['n1 f0 round #2 ok pulled=0', 'answer 20: #2 ok pulled=0']);
  // With the peer away no round starts: the deadline answers.
  h.peers(false, 1);
  assert.equal(h.driver.reconcileNow(21, 0, 1, deadlineMs), true);
  const giveUpMs = Date.now() + 10_000;
  let lines: string[] = [];
  while (lines.length === 0 && Date.now() < giveUpMs) {
    await new Promise((resolve) => setTimeout(resolve, 5));
    lines = h.roundLines();
  }
  assert.deepEqual(lines, [`answer 21: #0 failed (no round started within ${deadlineMs} ms)`]);
});

test('§6: the first page of a round with no horizon (a copy being verified) waits until what was applied before it is committed', async () => {
  const h = new Harness();
  await peerSession(h, 70);
  h.holdCommits = true;
  h.write('late');
  await h.frames();
  const page = (horizonMs: number, roundId: number) => ({
    reconcileRequest: {
      fragment: 0,
      sessionId: 70,
      roundId,
      pageSeq: 0,
      afterKey: Buffer.alloc(0),
      ranges: [],
      openEnd: true,
      horizonMs,
      recordsMax: 0,
      rangeKeys: 0,
    },
  });
  h.receive(1, page(0, 9));
  assert.deepEqual(await h.frames(), [], 'not answered while `late` is not in the store');
  h.releaseCommits();
  assert.deepEqual(await h.frames(), ['n1 f0 summaries s=70 r=9 page=0 [late] done']);
  // A round with a horizon is answered from the store as it is.
  h.holdCommits = true;
  h.write('later');
  await h.frames();
  h.receive(1, page(h.nowMs + 1, 10));
  assert.deepEqual(await h.frames(), ['n1 f0 summaries s=70 r=10 page=0 [late] done']);
  h.releaseCommits();
});

test('§6: until a round completed in the peer’s current run of replication here, each round compares everything; the report says so', async () => {
  const h = new Harness();
  await established(h, 1);
  assert.deepEqual(h.roundLines(), ['n1 f0 round #1 ok pulled=0'], 'no run heard: a horizon');
  /** Asks for a round (not a verifying one), answers its one page, returns its horizon. */
  const round = async (reqId: number, ok = true): Promise<number> => {
    assert.equal(h.driver.reconcileNow(reqId, 0, 1, 60_000), true);
    const [line] = await h.frames();
    const started = /^n1 f0 request s=(\d+) r=(\d+) page=0$/.exec(line);
    assert.ok(started !== null, line);
    const { horizonMs } = decodeEnvelope(h.outbox.at(-1)!.bytes).reconcileRequest!;
    if (ok) h.receive(1, emptyLastPage(Number(started[1]), Number(started[2])));
    else h.peers(false, 1);
    return horizonMs;
  };
  h.advance(5);
  h.receive(1, { sessionStart: { fragment: 0, sessionId: 700, continuity: 41 } });
  assert.equal(await round(20), 0, 'run 41 heard, no round completed in it: no horizon');
  assert.deepEqual(h.roundLines(), [
    'n1 f0 round #2 ok pulled=0 continuity=41 whole',
    'answer 20: #2 ok pulled=0 continuity=41 whole',
  ]);
  h.advance(5);
  assert.equal(await round(21), h.nowMs, 'verified in run 41: rounds have their horizon again');
  assert.deepEqual(h.roundLines(), [
    'n1 f0 round #3 ok pulled=0 continuity=41',
    'answer 21: #3 ok pulled=0 continuity=41',
  ]);
  // A new run (the peer restarted, or dropped its backlog): whole again until a round completes.
  h.receive(1, { sessionStart: { fragment: 0, sessionId: 701, continuity: 42 } });
  assert.equal(await round(22, false), 0);
  assert.deepEqual(h.roundLines(), [
    'n1 f0 round #4 failed (peer disconnected) continuity=42 whole',
    'answer 22: #4 failed (peer disconnected) continuity=42 whole',
  ]);
  h.peers(true, 1);
  const [start, request] = await h.frames();
  const session = /^n1 f0 session-start s=(\d+)$/.exec(start);
  const first = /^n1 f0 request s=\d+ r=(\d+) page=0$/.exec(request);
  assert.ok(session !== null && first !== null, `${start}; ${request}`);
  assert.equal(decodeEnvelope(h.outbox.at(-1)!.bytes).reconcileRequest!.horizonMs, 0);
  h.receive(1, emptyLastPage(Number(session[1]), Number(first[1])));
  assert.deepEqual(
    h.roundLines(),
    ['n1 f0 round #5 ok pulled=0 continuity=42 whole'],
    'a failed round verified nothing: the next, the new session’s first, compares everything',
  );
  assert.equal(await round(23), h.nowMs);
  h.roundLines();
  // Dropping the fragment forgets what was verified with the copy.
  h.driver.removeFragment(0);
  h.driver.setReplicas(0, [0, 1], true);
  await h.frames();
  h.receive(1, { sessionStart: { fragment: 0, sessionId: 702, continuity: 42 } });
  assert.equal(await round(24), 0);
  h.driver.close();
});

test('a node that holds no copy of a fragment says so to a peer that takes it, for a session start, a page request and a fetch', async () => {
  const h = new Harness({ members: 3 });
  h.missing.add(0);
  h.peerTakingAbsent(1);
  h.peers(true, 2);
  await h.frames();
  h.receive(1, { sessionStart: { fragment: 0, sessionId: 41 } });
  h.receive(2, { sessionStart: { fragment: 0, sessionId: 42 } });
  h.receive(1, {
    reconcileRequest: {
      fragment: 0,
      sessionId: 43,
      roundId: 7,
      pageSeq: 0,
      afterKey: Buffer.alloc(0),
      ranges: [],
      openEnd: true,
      horizonMs: 0,
      recordsMax: 0,
      rangeKeys: 0,
    },
  });
  h.receive(1, { reconcileFetch: { fragment: 0, sessionId: 44, roundId: 7, chunkSeq: 0, keys: [] } });
  assert.deepEqual(
    await h.frames(),
    ['n1 f0 absent s=41', 'n1 f0 absent s=43', 'n1 f0 absent s=44'],
    'n2 does not take the answer: it hears nothing, as from a version without it',
  );
});

test('a round the peer answers FragmentAbsent ends at once, failed, with no retry; verifying rounds fail at once until the peer resets the session', async () => {
  const h = new Harness();
  h.peerTakingAbsent(1);
  assert.deepEqual(await h.frames(), ['n1 f0 session-start s=1', 'n1 f0 request s=1 r=2 page=0']);
  h.receive(1, { fragmentAbsent: { fragment: 0, sessionId: 99 } });
  assert.deepEqual(h.roundLines(), [], 'another session’s answer is ignored');
  h.receive(1, { fragmentAbsent: { fragment: 0, sessionId: 1 } });
  assert.deepEqual(h.roundLines(), ['n1 f0 round #1 failed (n1 holds no copy of fragment 0)']);
  h.advance(RETRY_FLOOR_MS * 2);
  assert.deepEqual(await h.frames(), [], 'no new session, no round retried after the floor');
  // A verifying round asked for now could only wait for its deadline: it fails at once.
  assert.equal(h.driver.reconcileNow(9, 0, 1, 60_000, true), true);
  assert.deepEqual(h.roundLines(), ['answer 9: #0 failed (n1 holds no copy of fragment 0)']);
  assert.deepEqual(await h.frames(), []);
  // A plain round asked for runs, and ends on the peer's answer.
  assert.equal(h.driver.reconcileNow(10, 0, 1, 60_000), true);
  assert.deepEqual(await h.frames(), ['n1 f0 request s=1 r=3 page=0']);
  h.receive(1, { fragmentAbsent: { fragment: 0, sessionId: 1 } });
  assert.deepEqual(h.roundLines(), [
    'n1 f0 round #2 failed (n1 holds no copy of fragment 0)',
    'answer 10: #2 failed (n1 holds no copy of fragment 0)',
  ]);
  // n1 opened the fragment: it asks for a new session, and a verifying round waits for it again.
  h.receive(1, { sessionReset: { fragment: 0 } });
  assert.deepEqual(await h.frames(), ['n1 f0 session-start s=4', 'n1 f0 request s=4 r=5 page=0']);
  assert.equal(h.driver.reconcileNow(11, 0, 1, 60_000, true), true);
  assert.deepEqual(h.roundLines(), []);
  h.driver.close();
});

test('a verifying round waiting for a peer that turns out to hold no copy fails when it says so', async () => {
  const a = new Harness();
  const b = new Harness({ self: 1 });
  b.missing.add(0);
  b.driver.removeFragment(0);
  a.peerTakingAbsent(1);
  b.peerTakingAbsent(0);
  assert.equal(a.driver.reconcileNow(12, 0, 1, 60_000, true), true);
  assert.deepEqual(await exchange(a, b), [
    'a→f0 session-start s=1',
    'a→f0 request s=1 r=2 page=0',
    'b→f0 absent s=1',
    'b→f0 absent s=1',
  ]);
  assert.deepEqual(a.roundLines(), [
    'answer 12: #0 failed (n1 holds no copy of fragment 0)',
    'n1 f0 round #1 failed (n1 holds no copy of fragment 0)',
  ]);
  a.driver.close();
  b.driver.close();
});

test('a node that gains a fragment resets the sessions of the members it told it held no copy, listed or not', async () => {
  const h = new Harness({ members: 3 });
  h.missing.add(0);
  h.driver.removeFragment(0);
  h.peerTakingAbsent(1);
  h.peerTakingAbsent(2);
  h.receive(2, { sessionStart: { fragment: 0, sessionId: 41 } });
  assert.deepEqual(await h.frames(), ['n2 f0 absent s=41']);
  h.missing.delete(0);
  h.driver.setReplicas(0, [0, 1], true);
  const gained = await h.frames();
  assert.deepEqual(gained.slice(-2), ['n1 f0 session-reset', 'n2 f0 session-reset']);
  // Told once: the next gain resets only the members listed.
  h.driver.removeFragment(0);
  h.driver.setReplicas(0, [0, 1], true);
  assert.deepEqual((await h.frames()).slice(-1), ['n1 f0 session-reset']);
  h.driver.close();
});

test('§6: a round clients wait for reads its pages in the worker, and asks the peer to read its own there too', async () => {
  const a = new Harness();
  const b = new Harness({ self: 1 });
  const pooled: string[] = [];
  for (const [name, h] of [
    ['a', a],
    ['b', b],
  ] as const) {
    h.stores[0].commit([[Buffer.from('k'), recordAt(START_MS)]], START_MS);
    const read: PageReader = (start, limit) => h.store.page(0, start, undefined, limit, true);
    h.pool = {
      describe: async (_f, afterKey, q, horizonMs) => {
        pooled.push(`${name} describe`);
        return describeSpan(read, afterKey, q, horizonMs);
      },
      answer: async (_f, afterKey, q, work) => {
        pooled.push(`${name} answer`);
        return answerSpan(read, afterKey, q, work);
      },
    };
  }
  a.peers(true, 1);
  b.peers(true, 0);
  await exchange(a, b);
  assert.deepEqual(
    pooled.sort(),
    ['a answer', 'a describe', 'b answer', 'b describe'],
    'first rounds in the pools',
  );
  pooled.length = 0;
  a.roundLines();
  assert.equal(a.driver.reconcileNow(7, 0, 1, 60_000, false, true), true);
  assert.match((await a.frames()).join(), /^n1 f0 request /);
  assert.equal(decodeEnvelope(a.outbox.at(-1)!.bytes).reconcileRequest!.urgent, true);
  await exchange(a, b);
  assert.deepEqual(pooled, [], 'neither node used its pool');
  assert.deepEqual(a.roundLines(), [
    'n1 f0 round #2 ok pulled=0 continuity=1 whole',
    'answer 7: #2 ok pulled=0 continuity=1 whole',
  ]);
  // The next round is not urgent: in the pools again.
  assert.equal(a.driver.reconcileNow(8, 0, 1, 60_000), true);
  assert.match((await a.frames()).join(), /^n1 f0 request /);
  assert.equal(decodeEnvelope(a.outbox.at(-1)!.bytes).reconcileRequest!.urgent, false);
  await exchange(a, b);
  assert.deepEqual(pooled.sort(), ['a describe', 'b answer']);
  a.driver.close();
  b.driver.close();
});
