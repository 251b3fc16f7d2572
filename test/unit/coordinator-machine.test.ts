// The placement coordinator as a state machine on every node (src/core/coordinator-machine.ts;
// datum-agent.md §2.2, §3.5, §9.4; DESIGN.md "Placement"): three or five real machines exchange
// their messages through the real wire codec (src/threads/placement-wire.ts), each node's membership
// view given by the test and the interleaving driven message by message. After every step the
// harness checks what must always hold: no table epoch is held by two coordinators, a coordinator
// adopts an epoch only once every live member of its view has promised it that epoch, and a table
// change is persisted before it is announced.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  type AssignmentEntry,
  AssignmentTable,
  type CoordinatorIdentity,
  decodeTable,
  encodeTable,
  type Fence,
} from '../../src/core/assignment-table.js';
import {
  type MemberView,
  MOVE_LIMITS_DEFAULT,
  type MoveLimits,
  planMoves,
  takeoverReporters,
} from '../../src/core/coordinator.js';
import {
  type CoordinatorAction,
  type CoordinatorEvent,
  CoordinatorMachine,
  type EpochPromise,
  type PlacementMessage,
} from '../../src/core/coordinator-machine.js';
import {
  COORDINATOR_DIGEST_INTERVAL_MS,
  COORDINATOR_REPORT_RETRY_MS,
  PLACEMENT_PLAN_INTERVAL_MS,
  RENDEZVOUS_SLICE_PAUSE_MS,
} from '../../src/core/limits.js';
import { decodePlacementMessage, encodePlacementMessage } from '../../src/threads/placement-wire.js';

const FRAGMENTS = 4;
const REPLICAS = 3;
/** The placement three nodes were started with (static `--peers`). */
const PLACEMENT_3 = [
  ['a', 'b', 'c'],
  ['b', 'c', 'a'],
  ['c', 'a', 'b'],
  ['a', 'c', 'b'],
];
/** Five nodes, every one holding a replica: the table's members are all five. */
const PLACEMENT_5 = [
  ['a', 'b', 'c'],
  ['b', 'c', 'd'],
  ['c', 'd', 'e'],
  ['d', 'e', 'a'],
];
const START_MS = 10_000;

/** A view of `ids`: each Up, reachable and at incarnation 1 unless `seen` or `incarnations` says otherwise. */
function viewOf(
  ids: readonly string[],
  seen: Readonly<Record<string, 'unreachable' | 'down'>> = {},
  incarnations: Readonly<Record<string, number>> = {},
): MemberView[] {
  return ids.map((id) => ({
    id,
    state: seen[id] === 'down' ? 'Down' : 'Up',
    reachable: seen[id] === undefined,
    incarnation: incarnations[id] ?? 1,
  }));
}

const who = (c: CoordinatorIdentity | null | undefined): string =>
  c === undefined || c === null ? '-' : `${c.id}@${c.incarnation}`;

function describeMessage(m: PlacementMessage): string {
  switch (m.kind) {
    case 'report-request':
      return `report-request e${m.epoch} by ${m.from}@${m.incarnation}`;
    case 'report':
      return `report e${m.epoch}${m.refused ? ' refused' : ''} table e${m.table.epoch}`;
    case 'changes':
      return `changes e${m.table.epoch} ${who(m.table.epochCoordinator)} entries ${m.table.entries.length}`;
    case 'digest':
      return `digest ${m.digest}`;
    case 'pull':
      return 'pull';
    case 'ready':
      return `ready ${m.fragment} g${m.generation}`;
    case 'ahead':
      return `ahead ${m.fragment} g${m.generation}`;
    case 'lost-copies':
      return `lost-copies ${m.member}@${m.incarnation}`;
  }
}

/** One line per action, for golden lists of what a step did. */
function describeAction(action: CoordinatorAction): string {
  switch (action.kind) {
    case 'send':
      return `send ${action.to} ${describeMessage(action.message)}`;
    case 'persist': {
      const p = action.promise;
      return `persist table e${action.table.epoch} promise ${p === undefined ? '-' : `e${p.epoch} ${who(p.to)}`}`;
    }
    case 'table-changed':
      return `table-changed ${action.fragments.join(',')}`;
    case 'coordinator-changed':
      return `coordinator-changed ${who(action.coordinator)} e${action.epoch}`;
    case 'sync-view':
      return `sync-view ${action.member}`;
    case 'log':
      return `log ${action.level}: ${action.message}`;
  }
}

const copyOf = (table: AssignmentTable): AssignmentTable =>
  decodeTable(JSON.parse(JSON.stringify(encodeTable(table))));

/** The table with every entry re-stamped under `fence` (what a takeover at `fence.epoch` writes). */
function restamped(table: AssignmentTable, fence: Fence): AssignmentTable {
  const owner = { id: fence.coordinatorId, incarnation: fence.incarnation };
  const entries = table.entries().map(([f, e]): [number, AssignmentEntry] => [f, { ...e, fence }]);
  return AssignmentTable.from(table.fragmentCount, fence.epoch, owner, entries);
}

interface Peer {
  readonly id: string;
  machine: CoordinatorMachine;
  view: readonly MemberView[];
  /** What a restart restores: the last persisted table and promise. */
  saved: { table: AssignmentTable | undefined; promise: EpochPromise | undefined };
  /** Every action of this incarnation, in order. */
  readonly actions: CoordinatorAction[];
}

interface InFlight {
  readonly from: string;
  readonly to: string;
  readonly kind: PlacementMessage['kind'];
  readonly bytes: Uint8Array;
}

type Match = Partial<Pick<InFlight, 'from' | 'to' | 'kind'>>;

const matches = (m: InFlight, match: Match): boolean =>
  (match.from === undefined || m.from === match.from) &&
  (match.to === undefined || m.to === match.to) &&
  (match.kind === undefined || m.kind === match.kind);

/** Real machines on a network the test drives: a message waits in flight until delivered or dropped. */
class PlacementCluster {
  nowMs = START_MS;
  readonly inFlight: InFlight[] = [];
  /** Nodes the network does not reach: what they send, or what is sent to them, is lost. */
  readonly cut = new Set<string>();
  private readonly peers = new Map<string, Peer>();
  /** `member>epoch>coordinator@incarnation` for every promise any node persisted. */
  private readonly promisesMade = new Set<string>();
  /** Table epoch → the coordinator that owns it, across every node's table at every step. */
  readonly epochOwners = new Map<number, string>();

  constructor(
    readonly ids: readonly string[],
    private readonly placement: ReadonlyArray<readonly string[]>,
    /** The planner's limits; undefined: the coordinator starts no moves. */
    private readonly moves: MoveLimits | undefined = undefined,
    /** Nodes started with --join: no placement, themselves as the only initial member, no bootstrap. */
    private readonly joiners: readonly string[] = [],
    /** Rendezvous weighs per slice before a plan (the node's default unless given). */
    private readonly weighsPerSlice: number | undefined = undefined,
  ) {
    for (const id of ids) {
      this.peers.set(id, {
        id,
        machine: this.machineFor(id, undefined, undefined),
        view: [],
        saved: { table: undefined, promise: undefined },
        actions: [],
      });
    }
  }

  peer(id: string): Peer {
    const peer = this.peers.get(id);
    assert.ok(peer !== undefined, `no node ${id}`);
    return peer;
  }

  machine(id: string): CoordinatorMachine {
    return this.peer(id).machine;
  }

  /** Steps one node and carries out its actions; returns them described. */
  step(id: string, event: CoordinatorEvent): string[] {
    const peer = this.peer(id);
    const beforeEpoch = peer.machine.current.epoch;
    peer.machine.step(event);
    const actions: CoordinatorAction[] = [];
    peer.machine.takeActions(actions);
    for (const [index, action] of actions.entries()) this.carryOut(peer, action, actions[index - 1]);
    peer.actions.push(...actions);
    this.checkAdoption(peer, beforeEpoch);
    this.checkEpochOwners();
    return actions.map(describeAction);
  }

  view(id: string, view: readonly MemberView[]): string[] {
    this.peer(id).view = view;
    return this.step(id, { kind: 'view', view, nowMs: this.nowMs });
  }

  /** Gives every node in `ids` the same view; returns what each did. */
  views(ids: readonly string[], view: readonly MemberView[]): Record<string, string[]> {
    const done: Record<string, string[]> = {};
    for (const id of ids) done[id] = this.view(id, view);
    return done;
  }

  /** Moves the clock on and ticks every node; returns what the nodes that acted did. */
  advance(ms: number): Record<string, string[]> {
    this.nowMs += ms;
    const done: Record<string, string[]> = {};
    for (const id of this.ids) {
      const lines = this.step(id, { kind: 'tick', nowMs: this.nowMs });
      if (lines.length > 0) done[id] = lines;
    }
    return done;
  }

  /** Delivers the first message in flight that matches; returns what its receiver did. */
  deliver(match: Match): string[] {
    const index = this.inFlight.findIndex((m) => matches(m, match));
    assert.ok(index >= 0, `no message in flight matches ${JSON.stringify(match)}`);
    const [message] = this.inFlight.splice(index, 1);
    return this.receiveBytes(message.to, message.bytes);
  }

  /** Delivers messages in the order sent until none is in flight. */
  deliverAll(): void {
    for (let steps = 0; this.inFlight.length > 0; steps++) {
      assert.ok(steps < 1_000, 'messages still flowing after 1000 deliveries');
      const message = this.inFlight.shift() as InFlight;
      this.receiveBytes(message.to, message.bytes);
    }
  }

  /** Loses every message in flight that matches; returns how many. */
  drop(match: Match): number {
    const kept = this.inFlight.filter((m) => !matches(m, match));
    const dropped = this.inFlight.length - kept.length;
    this.inFlight.splice(0, this.inFlight.length, ...kept);
    return dropped;
  }

  /** A message from a node outside the harness (or one the test forges), through the wire. */
  receive(to: string, message: PlacementMessage): string[] {
    return this.receiveBytes(to, encodePlacementMessage(message));
  }

  /**
   * The node restarts from what it persisted; what was in flight to or from it is lost. Its new
   * incarnation reaches it, as every node, through the views the test gives next.
   */
  restart(id: string): void {
    const old = this.peer(id);
    this.drop({ from: id });
    this.drop({ to: id });
    this.peers.set(id, {
      id,
      machine: this.machineFor(id, old.saved.table && copyOf(old.saved.table), old.saved.promise),
      view: [],
      saved: old.saved,
      actions: [],
    });
  }

  digests(): string[] {
    return this.ids.map((id) => CoordinatorMachine.digestOf(this.machine(id).current));
  }

  /** The warn lines a node logged. */
  warnings(id: string): string[] {
    return this.peer(id)
      .actions.filter((a) => a.kind === 'log' && a.level === 'warn')
      .map(describeAction);
  }

  private machineFor(
    id: string,
    restored: AssignmentTable | undefined,
    restoredPromise: EpochPromise | undefined,
  ): CoordinatorMachine {
    const joiner = this.joiners.includes(id);
    return new CoordinatorMachine({
      selfId: id,
      fragmentCount: FRAGMENTS,
      replicas: REPLICAS,
      initialPlacement: joiner ? [] : this.placement,
      initialMembers: joiner ? [id] : this.ids,
      mayBootstrap: !joiner,
      restored,
      restoredPromise,
      reportRetryMs: COORDINATOR_REPORT_RETRY_MS,
      digestIntervalMs: COORDINATOR_DIGEST_INTERVAL_MS,
      moves: this.moves,
      planIntervalMs: PLACEMENT_PLAN_INTERVAL_MS,
      weighsPerSlice: this.weighsPerSlice,
    });
  }

  private receiveBytes(to: string, bytes: Uint8Array): string[] {
    const decoded = decodePlacementMessage(bytes, FRAGMENTS);
    assert.equal(decoded.kind, 'message', decoded.kind === 'malformed' ? decoded.reason : '');
    if (decoded.kind !== 'message') return [];
    const { message, table } = decoded;
    return this.step(to, { kind: 'message', message, table, nowMs: this.nowMs });
  }

  private carryOut(peer: Peer, action: CoordinatorAction, previous: CoordinatorAction | undefined): void {
    switch (action.kind) {
      case 'send':
        // A member outside the harness (one that joined the view only) hears nothing.
        if (!this.cut.has(peer.id) && !this.cut.has(action.to) && this.peers.has(action.to)) {
          const bytes = encodePlacementMessage(action.message);
          this.inFlight.push({ from: peer.id, to: action.to, kind: action.message.kind, bytes });
        }
        return;
      case 'persist':
        peer.saved = { table: copyOf(action.table), promise: action.promise };
        if (action.promise !== undefined)
          this.promisesMade.add(`${peer.id}>${action.promise.epoch}>${who(action.promise.to)}`);
        return;
      case 'table-changed':
        // The driver routes by a table only once the persist just before has landed.
        assert.equal(previous?.kind, 'persist', `${peer.id}: table-changed without a persist before it`);
        assert.equal(
          previous?.kind === 'persist' ? previous.table : undefined,
          peer.machine.current,
          `${peer.id}: the table persisted is not the table announced`,
        );
        return;
      default:
        return;
    }
  }

  /** A node that has just opened an epoch as coordinator holds a promise of it from every live member of its view. */
  private checkAdoption(peer: Peer, beforeEpoch: number): void {
    const table = peer.machine.current;
    const owner = table.epochCoordinator;
    if (owner?.id !== peer.id || table.epoch === beforeEpoch || peer.machine.role !== 'coordinator') return;
    for (const member of takeoverReporters(peer.view)) {
      assert.ok(
        this.promisesMade.has(`${member}>${table.epoch}>${who(owner)}`),
        `${who(owner)} adopted epoch ${table.epoch} without a promise of it from ${member}`,
      );
    }
  }

  private checkEpochOwners(): void {
    for (const peer of this.peers.values()) {
      const table = peer.machine.current;
      if (table.epoch === 0) continue;
      const owner = who(table.epochCoordinator);
      const known = this.epochOwners.get(table.epoch);
      assert.ok(
        known === undefined || known === owner,
        `table epoch ${table.epoch} held by ${known} and by ${owner} (at ${peer.id})`,
      );
      this.epochOwners.set(table.epoch, owner);
    }
  }
}

/** A cluster whose lowest id bootstrapped the table at epoch 1, every member holding it. */
function bootstrapped(
  ids: readonly string[],
  placement: ReadonlyArray<readonly string[]>,
  moves: MoveLimits | undefined = undefined,
): PlacementCluster {
  const cluster = new PlacementCluster(ids, placement, moves);
  cluster.views(ids, viewOf(ids));
  cluster.deliverAll();
  // With moves, a placement the planner would change starts moving at once (generations past 1).
  if (moves === undefined)
    assert.deepEqual(
      cluster.digests(),
      ids.map(() => `1/a@1/${FRAGMENTS}/${FRAGMENTS}`),
    );
  else assert.equal(new Set(cluster.digests()).size, 1, 'every member holds the table');
  return cluster;
}

describe('bootstrap', () => {
  test('the lowest id takes over at epoch 1, bootstraps the initial placement, and every member holds it', () => {
    const cluster = new PlacementCluster(['a', 'b', 'c'], PLACEMENT_3);
    const all = viewOf(['a', 'b', 'c']);
    // a promises itself epoch 1 (persisted first) and asks every live member.
    assert.deepEqual(cluster.view('a', all), [
      'coordinator-changed a@1 e0',
      'persist table e0 promise e1 a@1',
      'send b report-request e1 by a@1',
      'send c report-request e1 by a@1',
    ]);
    assert.deepEqual(cluster.views(['b', 'c'], all), {
      b: ['coordinator-changed a@1 e0'],
      c: ['coordinator-changed a@1 e0'],
    });
    // A member persists its promise before it answers.
    assert.deepEqual(cluster.deliver({ to: 'b' }), [
      'persist table e0 promise e1 a@1',
      'send a report e1 table e0',
    ]);
    assert.deepEqual(cluster.deliver({ to: 'c' }), [
      'persist table e0 promise e1 a@1',
      'send a report e1 table e0',
    ]);
    assert.deepEqual(cluster.deliver({ from: 'b', to: 'a' }), [], 'c has not reported yet');
    assert.equal(cluster.machine('a').role, 'taking-over');
    assert.deepEqual(cluster.deliver({ from: 'c', to: 'a' }), [
      'log info: coordinator a@1 at table epoch 1: bootstrapped the table',
      'coordinator-changed a@1 e1',
      'persist table e1 promise e1 a@1',
      'table-changed 0,1,2,3',
      'send b changes e1 a@1 entries 4',
      'send c changes e1 a@1 entries 4',
    ]);
    for (const id of ['b', 'c'])
      assert.deepEqual(cluster.deliver({ to: id }), [
        'persist table e1 promise e1 a@1',
        'table-changed 0,1,2,3',
      ]);
    assert.equal(cluster.inFlight.length, 0);

    const fence: Fence = { coordinatorId: 'a', incarnation: 1, epoch: 1 };
    const expected = PLACEMENT_3.map((replicas, fragment) => [
      fragment,
      {
        kind: 'active',
        generation: 1,
        replicas,
        moving: null,
        pinnedTo: null,
        fence,
        history: [{ generation: 1, from: [], to: replicas, reason: 'bootstrap', timestampMs: START_MS }],
      },
    ]);
    for (const id of cluster.ids) {
      const table = cluster.machine(id).current;
      assert.equal(table.epoch, 1);
      assert.deepEqual(table.epochCoordinator, { id: 'a', incarnation: 1 });
      assert.deepEqual(table.entries(), expected, `${id}'s table`);
    }
    assert.deepEqual(cluster.digests(), ['1/a@1/4/4', '1/a@1/4/4', '1/a@1/4/4']);
    assert.deepEqual(
      cluster.ids.map((id) => cluster.machine(id).role),
      ['coordinator', 'follower', 'follower'],
    );
    // Nothing changed on a digest: members whose table matches do not pull.
    assert.deepEqual(cluster.advance(COORDINATOR_DIGEST_INTERVAL_MS), {
      a: ['send b digest 1/a@1/4/4', 'send c digest 1/a@1/4/4'],
    });
    cluster.deliverAll();
    assert.equal(cluster.machine('a').counters.pulls, 0);
  });
});

describe('the majority gate', () => {
  test('a node that reaches no majority of the initial members asks no one for a report', () => {
    const cluster = new PlacementCluster(['a', 'b', 'c'], PLACEMENT_3);
    assert.deepEqual(cluster.view('a', viewOf(['a', 'b', 'c'], { b: 'unreachable', c: 'unreachable' })), [
      'coordinator-changed a@1 e0',
    ]);
    assert.equal(cluster.machine('a').role, 'follower');
    assert.equal(cluster.machine('a').nextWakeMs(), Number.POSITIVE_INFINITY);
    assert.deepEqual(cluster.advance(60_000), {});
    assert.equal(cluster.inFlight.length, 0);
  });

  test("the gate counts the table's members once there is a table, not the view's", () => {
    const cluster = bootstrapped(['a', 'b', 'c'], PLACEMENT_3);
    cluster.restart('a');
    // d and e (reachable, holding no replica) make three of five in the view, but a reaches one of
    // the table's three members.
    const view = viewOf(['a', 'b', 'c', 'd', 'e'], { b: 'unreachable', c: 'unreachable' }, { a: 2 });
    assert.deepEqual(cluster.view('a', view), ['coordinator-changed a@2 e1']);
    assert.equal(cluster.machine('a').role, 'follower');
    assert.deepEqual(cluster.advance(60_000), {});
  });

  test('an acting coordinator that loses its majority stops, and sends no digest', () => {
    const cluster = bootstrapped(['a', 'b', 'c'], PLACEMENT_3);
    assert.deepEqual(cluster.view('a', viewOf(['a', 'b', 'c'], { b: 'unreachable', c: 'unreachable' })), [
      "log info: no longer acting as coordinator: the coordinator reaches no majority of the table's 3 members; placement is frozen",
    ]);
    assert.equal(cluster.machine('a').role, 'follower');
    assert.deepEqual(cluster.advance(COORDINATOR_DIGEST_INTERVAL_MS * 3), {});
  });
});

describe('takeover', () => {
  test('fail-closed: an Up member that does not report defers adoption until it is Down', () => {
    const ids = ['a', 'b', 'c', 'd', 'e'];
    const cluster = bootstrapped(ids, PLACEMENT_5);
    cluster.cut.add('a').add('e');
    // b reaches b, c and d: three of the table's five members. e is Up but unreachable: it may hold
    // the only copy of a's last change, so b needs its report.
    assert.deepEqual(cluster.view('b', viewOf(ids, { a: 'down', e: 'unreachable' })), [
      'coordinator-changed b@1 e1',
      'persist table e1 promise e2 b@1',
      'send c report-request e2 by b@1',
      'send d report-request e2 by b@1',
      'send e report-request e2 by b@1',
    ]);
    cluster.views(['c', 'd'], viewOf(ids, { a: 'down' }));
    cluster.deliverAll();
    assert.equal(cluster.machine('b').role, 'taking-over');
    assert.equal(cluster.machine('b').current.epoch, 1);
    // The retry asks only the member whose report is missing.
    assert.deepEqual(cluster.advance(COORDINATOR_REPORT_RETRY_MS), {
      b: ['send e report-request e2 by b@1'],
    });
    assert.equal(cluster.machine('b').role, 'taking-over');
    assert.deepEqual(
      cluster.digests(),
      ids.map(() => '1/a@1/4/4'),
    );

    assert.deepEqual(cluster.view('b', viewOf(ids, { a: 'down', e: 'down' })), [
      'log info: coordinator b@1 at table epoch 2: adopted the table of 3 member(s)',
      'coordinator-changed b@1 e2',
      'persist table e2 promise e2 b@1',
      'table-changed 0,1,2,3',
      'send c changes e2 b@1 entries 4',
      'send d changes e2 b@1 entries 4',
    ]);
    cluster.deliverAll();
    assert.deepEqual(cluster.digests(), ['1/a@1/4/4', '2/b@1/4/4', '2/b@1/4/4', '2/b@1/4/4', '1/a@1/4/4']);
  });

  test('a new coordinator after the old one is Down re-stamps every entry with its fence at the next epoch', () => {
    const cluster = bootstrapped(['a', 'b', 'c'], PLACEMENT_3);
    const before = cluster.machine('a').current;
    cluster.cut.add('a');
    const withoutA = viewOf(['a', 'b', 'c'], { a: 'down' });
    assert.deepEqual(cluster.view('b', withoutA), [
      'coordinator-changed b@1 e1',
      'persist table e1 promise e2 b@1',
      'send c report-request e2 by b@1',
    ]);
    assert.deepEqual(cluster.view('c', withoutA), ['coordinator-changed b@1 e1']);
    cluster.deliverAll();
    const fence: Fence = { coordinatorId: 'b', incarnation: 1, epoch: 2 };
    // Generations, replicas and histories stay; only the fence is b's.
    assert.deepEqual(cluster.machine('b').current.entries(), restamped(before, fence).entries());
    assert.equal(
      cluster.machine('b').current.describe(),
      [
        'epoch 2 coordinator b@1',
        '0: g1 [a b c] by b@1 e2',
        '1: g1 [b c a] by b@1 e2',
        '2: g1 [c a b] by b@1 e2',
        '3: g1 [a c b] by b@1 e2',
      ].join('\n'),
    );
    assert.equal(cluster.machine('c').current.describe(), cluster.machine('b').current.describe());
    assert.equal(cluster.machine('c').counters.changesApplied, 2 * FRAGMENTS);
    assert.equal(cluster.machine('a').current.epoch, 1, 'a heard nothing');
  });

  test('a coordinator whose incarnation changes mid-takeover starts a new proposal as its new self', () => {
    const ids = ['a', 'b', 'c'];
    const cluster = new PlacementCluster(ids, PLACEMENT_3);
    cluster.views(ids, viewOf(ids));
    cluster.deliver({ to: 'b' });
    cluster.deliver({ to: 'c' });
    cluster.deliver({ from: 'b', to: 'a' });
    // c's promise of epoch 1 to a@1 is in flight when a refutes a suspicion at incarnation 2.
    const refuted = viewOf(ids, {}, { a: 2 });
    assert.deepEqual(cluster.view('a', refuted), [
      'coordinator-changed a@2 e0',
      'persist table e0 promise e2 a@2',
      'send b report-request e2 by a@2',
      'send c report-request e2 by a@2',
    ]);
    cluster.views(['b', 'c'], refuted);
    assert.deepEqual(cluster.deliver({ from: 'c', to: 'a' }), [], 'a promise to a@1 is not one to a@2');
    assert.equal(cluster.machine('a').role, 'taking-over');
    cluster.deliverAll();
    assert.equal(cluster.machine('a').counters.takeovers, 2);
    assert.deepEqual(cluster.digests(), ['2/a@2/4/4', '2/a@2/4/4', '2/a@2/4/4']);
    assert.equal(cluster.epochOwners.has(1), false, 'no table was ever at the abandoned epoch');
  });

  test('a refusal mid-takeover voids the promises in hand: the coordinator asks again before it adopts', () => {
    const ids = ['a', 'b', 'c'];
    const cluster = new PlacementCluster(ids, PLACEMENT_3);
    cluster.views(ids, viewOf(ids));
    cluster.deliver({ to: 'b' });
    assert.deepEqual(cluster.deliver({ from: 'b', to: 'a' }), [], 'b promised epoch 1; c has not');
    // b, seeing a Down, takes over at epoch 2, and c promises it that.
    assert.deepEqual(cluster.view('b', viewOf(ids, { a: 'down' })), [
      'coordinator-changed b@1 e0',
      'persist table e0 promise e2 b@1',
      'send c report-request e2 by b@1',
    ]);
    assert.deepEqual(cluster.deliver({ from: 'b', to: 'c' }), [
      'persist table e0 promise e2 b@1',
      'send b report e2 table e0',
    ]);
    assert.deepEqual(cluster.deliver({ from: 'a', to: 'c' }), ['send a report e2 refused table e0']);
    assert.deepEqual(cluster.deliver({ from: 'c', to: 'a' }), []);
    // c is Down in a's view now: b's promise is all a would need, but b promised epoch 1, not the
    // epoch a must now propose above c's.
    assert.deepEqual(cluster.view('a', viewOf(ids, { c: 'down' })), []);
    assert.equal(cluster.machine('a').role, 'taking-over');
    assert.equal(cluster.machine('a').current.epoch, 0);
    assert.deepEqual(cluster.advance(COORDINATOR_REPORT_RETRY_MS), {
      a: ['persist table e0 promise e3 a@1', 'send b report-request e3 by a@1'],
      b: ['send c report-request e2 by b@1'],
    });
    assert.deepEqual(cluster.deliver({ from: 'a', to: 'b' }), [
      'persist table e0 promise e3 a@1',
      'send a report e3 table e0',
    ]);
    assert.deepEqual(cluster.deliver({ from: 'b', to: 'a' }).slice(0, 2), [
      'log info: coordinator a@1 at table epoch 3: bootstrapped the table',
      'coordinator-changed a@1 e3',
    ]);
    // b adopts the epoch c and b itself promised it; then the views heal and everyone converges on a's.
    cluster.deliverAll();
    assert.equal(cluster.machine('b').current.epoch, 2);
    cluster.views(ids, viewOf(ids));
    cluster.advance(COORDINATOR_DIGEST_INTERVAL_MS);
    cluster.deliverAll();
    assert.deepEqual(cluster.digests(), ['3/a@1/4/4', '3/a@1/4/4', '3/a@1/4/4']);
  });
});

describe('two nodes that both believe they coordinate never adopt one epoch', () => {
  for (const first of ['a', 'b']) {
    const second = first === 'a' ? 'b' : 'a';
    test(`c promises ${first} first; ${second} is refused and outbids it`, () => {
      const ids = ['a', 'b', 'c'];
      const cluster = new PlacementCluster(ids, PLACEMENT_3);
      // a sees b Down and b sees a Down: each names itself, reaches two of three, and needs only c.
      cluster.view('a', viewOf(ids, { b: 'down' }));
      cluster.view('b', viewOf(ids, { a: 'down' }));
      cluster.view('c', viewOf(ids));
      assert.deepEqual(
        cluster.inFlight.map((m) => `${m.from}>${m.to} ${m.kind}`),
        ['a>c report-request', 'b>c report-request'],
      );
      assert.deepEqual(cluster.deliver({ from: first, to: 'c' }), [
        `persist table e0 promise e1 ${first}@1`,
        `send ${first} report e1 table e0`,
      ]);
      assert.deepEqual(cluster.deliver({ from: second, to: 'c' }), [
        `send ${second} report e1 refused table e0`,
      ]);
      assert.equal(
        cluster.deliver({ from: 'c', to: first })[0],
        `log info: coordinator ${first}@1 at table epoch 1: bootstrapped the table`,
      );
      assert.deepEqual(cluster.deliver({ from: 'c', to: second }), []);
      assert.equal(cluster.machine(second).role, 'taking-over');
      cluster.deliverAll();
      // The retry outbids the epoch c holds.
      assert.deepEqual(cluster.advance(COORDINATOR_REPORT_RETRY_MS), {
        [second]: [`persist table e0 promise e2 ${second}@1`, `send c report-request e2 by ${second}@1`],
      });
      cluster.deliverAll();
      assert.deepEqual(cluster.machine(first).current.epochCoordinator, { id: first, incarnation: 1 });
      assert.equal(cluster.machine(first).current.epoch, 1);
      assert.deepEqual(cluster.machine(second).current.epochCoordinator, { id: second, incarnation: 1 });
      assert.equal(cluster.machine(second).current.epoch, 2);
      assert.deepEqual(
        [...cluster.epochOwners].sort(([x], [y]) => x - y),
        [
          [1, `${first}@1`],
          [2, `${second}@1`],
        ],
      );

      // The views heal: a coordinates, and digests, pulls and refused reports bring every table to one.
      cluster.views(ids, viewOf(ids));
      for (let round = 0; round < 3; round++) {
        cluster.advance(COORDINATOR_DIGEST_INTERVAL_MS);
        cluster.deliverAll();
      }
      const digests = cluster.digests();
      assert.equal(new Set(digests).size, 1, digests.join(' '));
      assert.equal(cluster.machine('a').role, 'coordinator');
      assert.deepEqual(cluster.machine('a').current.epochCoordinator, { id: 'a', incarnation: 1 });
    });
  }
});

describe('followers', () => {
  test('refuse changes from a coordinator their view does not name, logging each distinct refusal once', () => {
    const cluster = bootstrapped(['a', 'b', 'c'], PLACEMENT_3);
    const staleA = copyOf(cluster.machine('a').current);
    cluster.cut.add('a');
    // b sees a Down; c does not yet, and still names a. c promises b all the same (a promise needs no
    // view), so b adopts epoch 2, but c refuses its changes.
    cluster.view('b', viewOf(['a', 'b', 'c'], { a: 'down' }));
    assert.deepEqual(cluster.deliver({ to: 'c' }), [
      'persist table e1 promise e2 b@1',
      'send b report e2 table e1',
    ]);
    assert.equal(
      cluster.deliver({ to: 'b' })[0],
      'log info: coordinator b@1 at table epoch 2: adopted the table of 2 member(s)',
    );
    const refusal =
      'log warn: assignment changes from b refused (4): assignment change from non-current coordinator: change=b@1 current=a@1';
    // One of the two views is behind: c asks to exchange its membership view with b at once.
    assert.deepEqual(cluster.deliver({ to: 'c' }), ['sync-view b', refusal]);
    assert.equal(cluster.machine('c').counters.changesRefused, FRAGMENTS);
    assert.equal(cluster.machine('c').current.epoch, 1);
    // The same changes again within COORDINATOR_VIEW_SYNC_INTERVAL_MS: refused, no second exchange.
    const fromB = encodeTable(cluster.machine('b').current);
    assert.deepEqual(cluster.receive('c', { kind: 'changes', from: 'b', table: fromB }), []);
    assert.equal(cluster.machine('c').counters.changesRefused, 2 * FRAGMENTS);

    // b's digest makes c pull and refuse the same changes again: counted, not logged again. (a, cut
    // off, still sends its own digests; the network loses them.)
    assert.deepEqual(cluster.advance(COORDINATOR_DIGEST_INTERVAL_MS), {
      a: ['send b digest 1/a@1/4/4', 'send c digest 1/a@1/4/4'],
      b: ['send c digest 2/b@1/4/4'],
    });
    assert.deepEqual(cluster.deliver({ to: 'c' }), ['send b pull']);
    assert.deepEqual(cluster.deliver({ to: 'b' }), ['send c changes e2 b@1 entries 4']);
    assert.deepEqual(cluster.deliver({ to: 'c' }), ['sync-view b'], 'a digest interval later: again');
    assert.equal(cluster.machine('c').counters.changesRefused, 3 * FRAGMENTS);

    // A different refusal is logged: a's epoch-1 table, which c's promise to b now forbids.
    assert.deepEqual(cluster.receive('c', { kind: 'changes', from: 'a', table: encodeTable(staleA) }), [
      'send a report e2 refused table e1',
      'log warn: assignment changes from a refused (4): epoch 2 is promised to b@1; change from a@1 at epoch 1',
    ]);
    assert.deepEqual(cluster.warnings('c'), [
      refusal,
      'log warn: assignment changes from a refused (4): epoch 2 is promised to b@1; change from a@1 at epoch 1',
    ]);
    assert.equal(cluster.machine('c').counters.changesRefused, 4 * FRAGMENTS);

    // Once c's view names b too, c pulls b's table at once.
    assert.deepEqual(cluster.view('c', viewOf(['a', 'b', 'c'], { a: 'down' })), [
      'coordinator-changed b@1 e1',
      'send b pull',
    ]);
    cluster.deliverAll();
    assert.deepEqual(cluster.digests(), ['1/a@1/4/4', '2/b@1/4/4', '2/b@1/4/4']);
    assert.equal(cluster.machine('c').counters.changesApplied, 2 * FRAGMENTS);
  });

  test("a member that refused the first table, naming the coordinator's earlier incarnation, pulls it once its view names the new one, before any digest", () => {
    const ids = ['a', 'b', 'c'];
    const cluster = new PlacementCluster(ids, PLACEMENT_3);
    // a restarted (incarnation 2) and takes over before b and c hear of it: they promise a@2 (a
    // promise needs no view) but refuse its changes, as their views name a@1.
    cluster.view('a', viewOf(ids, {}, { a: 2 }));
    cluster.views(['b', 'c'], viewOf(ids));
    for (let i = 0; i < 4; i++) cluster.deliver({ kind: i < 2 ? 'report-request' : 'report' });
    assert.equal(cluster.machine('a').role, 'coordinator');
    const refusal =
      'log warn: assignment changes from a refused (4): assignment change from non-current coordinator: change=a@2 current=a@1';
    assert.deepEqual(cluster.deliver({ to: 'b', kind: 'changes' }), ['sync-view a', refusal]);
    assert.deepEqual(cluster.deliver({ to: 'c', kind: 'changes' }), ['sync-view a', refusal]);
    assert.deepEqual(cluster.digests(), ['1/a@2/4/4', '0/-/0/0', '0/-/0/0']);

    // b's view names a@2 now: it pulls the table then, not at a's digest 5 s later.
    assert.deepEqual(cluster.view('b', viewOf(ids, {}, { a: 2 })), [
      'coordinator-changed a@2 e0',
      'send a pull',
    ]);
    assert.deepEqual(cluster.deliver({ to: 'a' }), ['send b changes e1 a@2 entries 4']);
    assert.deepEqual(cluster.deliver({ to: 'b' }), [
      'persist table e1 promise e1 a@2',
      'table-changed 0,1,2,3',
    ]);
    assert.deepEqual(cluster.digests(), ['1/a@2/4/4', '1/a@2/4/4', '0/-/0/0']);
    assert.deepEqual(cluster.view('c', viewOf(ids, {}, { a: 2 })), [
      'coordinator-changed a@2 e0',
      'send a pull',
    ]);
    cluster.deliverAll();
    assert.deepEqual(cluster.digests(), ['1/a@2/4/4', '1/a@2/4/4', '1/a@2/4/4']);
    assert.equal(cluster.machine('a').counters.pulls, 2);
  });

  test('a member that missed the changes pulls the table on the next digest', () => {
    const ids = ['a', 'b', 'c'];
    const cluster = new PlacementCluster(ids, PLACEMENT_3);
    cluster.views(ids, viewOf(ids));
    for (let i = 0; i < 4; i++) cluster.deliver({ kind: i < 2 ? 'report-request' : 'report' });
    assert.equal(cluster.drop({ to: 'c', kind: 'changes' }), 1);
    cluster.deliverAll();
    assert.deepEqual(cluster.digests(), ['1/a@1/4/4', '1/a@1/4/4', '0/-/0/0']);

    assert.deepEqual(cluster.advance(COORDINATOR_DIGEST_INTERVAL_MS), {
      a: ['send b digest 1/a@1/4/4', 'send c digest 1/a@1/4/4'],
    });
    assert.deepEqual(cluster.deliver({ to: 'b' }), [], 'b holds the table: no pull');
    assert.deepEqual(cluster.deliver({ to: 'c' }), ['send a pull']);
    assert.deepEqual(cluster.deliver({ to: 'a' }), ['send c changes e1 a@1 entries 4']);
    assert.deepEqual(cluster.deliver({ to: 'c' }), [
      'persist table e1 promise e1 a@1',
      'table-changed 0,1,2,3',
    ]);
    assert.equal(cluster.machine('a').counters.pulls, 1);
    assert.deepEqual(cluster.digests(), ['1/a@1/4/4', '1/a@1/4/4', '1/a@1/4/4']);
  });
  test('a member holding a generation from an older epoch that no majority took is brought back by a reissue above it', () => {
    const ids = ['a', 'b', 'c', 'd', 'e'];
    const cluster = bootstrapped(ids, PLACEMENT_5);
    // a pins fragment 0 (generation 2); the change reaches e alone, then a is Down.
    cluster.step('a', { kind: 'pin', fragment: 0, node: 'b', nowMs: cluster.nowMs });
    for (const to of ['b', 'c', 'd']) assert.equal(cluster.drop({ from: 'a', to, kind: 'changes' }), 1);
    cluster.deliverAll();
    assert.equal(cluster.machine('e').current.active(0)?.generation, 2);
    cluster.cut.add('a');
    // b takes over while e is away, from reports that never saw generation 2.
    cluster.views(['b', 'c', 'd'], viewOf(ids, { a: 'down', e: 'down' }));
    cluster.deliverAll();
    assert.equal(cluster.machine('b').current.active(0)?.generation, 1);
    // e is back: it ignores b's lower generation, says so, and b goes above it.
    cluster.views(['b', 'c', 'd', 'e'], viewOf(ids, { a: 'down' }));
    cluster.deliverAll();
    cluster.advance(COORDINATOR_DIGEST_INTERVAL_MS);
    cluster.deliverAll();
    const [, ...others] = cluster.digests();
    assert.equal(new Set(others).size, 1, `b..e hold one table: ${others}`);
    assert.equal(cluster.machine('b').counters.reissues, 1);
    const entry = cluster.machine('e').current.active(0);
    assert.equal(entry?.generation, 3);
    assert.equal(entry?.pinnedTo, null, "the coordinator's entry, not the change no majority took");
    assert.match(entry?.history.at(-1)?.reason ?? '', /^reissue$/);
  });
});

describe('promises', () => {
  /** c promises epoch 2 to b@1 (as b would when its view saw a Down); b's copy of the answer is lost. */
  function promisedToB(cluster: PlacementCluster, cTableEpoch: number): void {
    assert.deepEqual(cluster.receive('c', { kind: 'report-request', from: 'b', incarnation: 1, epoch: 2 }), [
      `persist table e${cTableEpoch} promise e2 b@1`,
      `send b report e2 table e${cTableEpoch}`,
    ]);
    assert.equal(cluster.drop({ from: 'c', to: 'b' }), 1);
  }

  test('a change below the promised epoch is refused, and the refused report makes the acting coordinator take over above it', () => {
    const ids = ['a', 'b', 'c'];
    const cluster = new PlacementCluster(ids, PLACEMENT_3);
    cluster.views(ids, viewOf(ids));
    for (let i = 0; i < 4; i++) cluster.deliver({ kind: i < 2 ? 'report-request' : 'report' });
    cluster.deliver({ to: 'b', kind: 'changes' });
    // a's bootstrap is still on its way to c when c promises epoch 2 to b.
    promisedToB(cluster, 0);
    assert.deepEqual(cluster.deliver({ to: 'c', kind: 'changes' }), [
      'send a report e2 refused table e0',
      'log warn: assignment changes from a refused (4): epoch 2 is promised to b@1; change from a@1 at epoch 1',
    ]);
    assert.equal(cluster.machine('c').current.epoch, 0);
    assert.equal(cluster.machine('c').counters.changesRefused, FRAGMENTS);

    const retake = cluster.deliver({ to: 'a' });
    const proposed = Number(/^send b report-request e(\d+) by a@1$/.exec(retake[2] ?? '')?.[1]);
    assert.ok(proposed > 2, `a proposes above c's epoch 2: ${retake.join(' | ')}`);
    assert.deepEqual(retake, [
      'log info: c holds epoch 2: taking over again above it',
      `persist table e1 promise e${proposed} a@1`,
      `send b report-request e${proposed} by a@1`,
      `send c report-request e${proposed} by a@1`,
    ]);
    assert.equal(cluster.machine('a').counters.takeovers, 2);
    cluster.deliverAll();
    const digest = `${proposed}/a@1/4/4`;
    assert.deepEqual(cluster.digests(), [digest, digest, digest]);
    assert.deepEqual(cluster.peer('c').saved.promise, { epoch: proposed, to: { id: 'a', incarnation: 1 } });
  });

  test('a second refusal of an epoch already outbid does not cost the coordinator taking over again its own promise', () => {
    const ids = ['a', 'b', 'c', 'd'];
    const placement = [
      ['a', 'b', 'c'],
      ['b', 'c', 'd'],
      ['c', 'd', 'a'],
      ['d', 'a', 'b'],
    ];
    const cluster = new PlacementCluster(ids, placement);
    cluster.views(ids, viewOf(ids));
    for (let i = 0; i < 6; i++) cluster.deliver({ kind: i < 3 ? 'report-request' : 'report' });
    cluster.deliver({ to: 'b', kind: 'changes' });
    // a's bootstrap is on its way to c and d when both promise epoch 2 to b; b's answers are lost.
    for (const member of ['c', 'd']) {
      cluster.receive(member, { kind: 'report-request', from: 'b', incarnation: 1, epoch: 2 });
      assert.equal(cluster.drop({ from: member, to: 'b' }), 1);
      assert.deepEqual(cluster.deliver({ to: member, kind: 'changes' }).slice(0, 1), [
        'send a report e2 refused table e0',
      ]);
    }
    assert.deepEqual(cluster.deliver({ from: 'c', to: 'a' }).slice(0, 1), [
      'log info: c holds epoch 2: taking over again above it',
    ]);
    // d's refusal names the epoch a has already proposed above: a's proposal and its own promise stand.
    assert.deepEqual(cluster.deliver({ from: 'd', to: 'a' }), []);
    cluster.deliverAll();
    assert.equal(cluster.machine('a').role, 'coordinator');
    const epoch = cluster.machine('a').current.epoch;
    assert.ok(epoch > 2, `a coordinates above the epoch promised to b: ${epoch}`);
    assert.deepEqual(
      cluster.digests(),
      ids.map(() => `${epoch}/a@1/4/4`),
    );
  });

  test('a change at the promised epoch from another coordinator is refused, even from the one the view names', () => {
    const cluster = bootstrapped(['a', 'b', 'c'], PLACEMENT_3);
    promisedToB(cluster, 1);
    const atTwo = restamped(cluster.machine('a').current, { coordinatorId: 'a', incarnation: 1, epoch: 2 });
    // Without the promise, c's table would take it: a is the coordinator c's view names.
    assert.equal(
      copyOf(cluster.machine('c').current).apply(
        { fence: atTwo.entries()[0][1].fence, fragment: 0, entry: atTwo.entries()[0][1] },
        { id: 'a', incarnation: 1 },
      ).outcome,
      'applied',
    );
    assert.deepEqual(cluster.receive('c', { kind: 'changes', from: 'a', table: encodeTable(atTwo) }), [
      'send a report e2 refused table e1',
      'log warn: assignment changes from a refused (4): epoch 2 is promised to b@1; change from a@1 at epoch 2',
    ]);
    assert.equal(cluster.machine('c').current.epoch, 1);
    cluster.deliverAll();
    assert.ok(cluster.machine('a').current.epoch > 2, 'a took over again above the promise');
    assert.equal(new Set(cluster.digests()).size, 1);
  });

  test('a restarted member honours the promise it persisted', () => {
    const cluster = bootstrapped(['a', 'b', 'c'], PLACEMENT_3);
    promisedToB(cluster, 1);
    cluster.restart('c');
    assert.deepEqual(cluster.view('c', viewOf(['a', 'b', 'c'], {}, { c: 2 })), [
      'coordinator-changed a@1 e1',
    ]);
    // a restarts too and takes over as a@2, proposing the epoch after the one it knows.
    cluster.restart('a');
    const restarted = viewOf(['a', 'b', 'c'], {}, { a: 2, c: 2 });
    assert.deepEqual(cluster.view('a', restarted), [
      'coordinator-changed a@2 e1',
      'persist table e1 promise e2 a@2',
      'send b report-request e2 by a@2',
      'send c report-request e2 by a@2',
    ]);
    cluster.views(['b', 'c'], restarted);
    assert.deepEqual(cluster.deliver({ to: 'b' }), [
      'persist table e1 promise e2 a@2',
      'send a report e2 table e1',
    ]);
    assert.deepEqual(cluster.deliver({ to: 'c' }), ['send a report e2 refused table e1']);
    cluster.deliverAll();
    assert.equal(cluster.machine('a').role, 'taking-over');
    assert.deepEqual(cluster.advance(COORDINATOR_REPORT_RETRY_MS), {
      a: [
        'persist table e1 promise e3 a@2',
        'send b report-request e3 by a@2',
        'send c report-request e3 by a@2',
      ],
    });
    cluster.deliverAll();
    assert.deepEqual(cluster.digests(), ['3/a@2/4/4', '3/a@2/4/4', '3/a@2/4/4']);
    assert.equal(cluster.epochOwners.has(2), false, 'no table was ever at the epoch c promised to b');
  });
});

describe('moves', () => {
  /** The fragments with a move in flight at `id`'s table, as `fragment:source->target`. */
  const inFlight = (cluster: PlacementCluster, id: string): string[] =>
    cluster
      .machine(id)
      .current.entries()
      .flatMap(([f, e]) =>
        e.kind === 'active' && e.moving !== null
          ? [`${f}:${e.moving.source ?? '-'}->${e.moving.target}`]
          : [],
      );

  /** Every target of a move in flight tells the coordinator it is ready, until no move is left. */
  function settle(cluster: PlacementCluster, coordinator: string): number {
    let finished = 0;
    for (let round = 0; round < 100; round++) {
      cluster.deliverAll();
      const table = cluster.machine(coordinator).current;
      const moving = table.entries().filter(([, e]) => e.kind === 'active' && e.moving !== null);
      if (moving.length === 0) return finished;
      for (const [fragment, entry] of moving) {
        if (entry.kind !== 'active' || entry.moving === null) continue;
        cluster.receive(coordinator, {
          kind: 'ready',
          from: entry.moving.target,
          fragment,
          generation: entry.generation,
        });
        finished++;
      }
    }
    assert.fail('moves still in flight after 100 rounds');
  }

  test('a joiner that hears only the changes made since it joined pulls the whole table at once', () => {
    const founders = ['a', 'b', 'c'];
    const ids = [...founders, 'd'];
    const cluster = new PlacementCluster(ids, PLACEMENT_3, MOVE_LIMITS_DEFAULT, ['d']);
    cluster.views(founders, viewOf(founders));
    cluster.deliverAll();
    assert.equal(new Set(cluster.digests().slice(0, 3)).size, 1, 'the founders hold one table');
    cluster.views(ids, viewOf(ids));
    const moved = inFlight(cluster, 'a');
    assert.ok(moved.length > 0 && moved.length < FRAGMENTS, `a join moves some fragments: ${moved}`);
    // d hears the moves (their entries alone) and asks for the rest before any digest.
    assert.ok(cluster.deliver({ to: 'd', kind: 'changes' }).includes('send a pull'));
    cluster.deliverAll();
    assert.equal(cluster.machine('d').current.entries().length, FRAGMENTS);
    assert.equal(new Set(cluster.digests()).size, 1, 'd holds the table the others hold');
    assert.equal(cluster.machine('a').counters.pulls, 1);
  });

  test('a member that joins gets its share: moves start within the per-node limit, add before remove, and finish on ready', () => {
    const ids = ['a', 'b', 'c', 'd'];
    const cluster = bootstrapped(['a', 'b', 'c'], PLACEMENT_3, MOVE_LIMITS_DEFAULT);
    cluster.views(ids.slice(0, 3), viewOf(ids));
    const started = inFlight(cluster, 'a');
    assert.ok(started.length > 0, 'a join moves something');
    assert.ok(started.length <= MOVE_LIMITS_DEFAULT.movesInPerNode, `at most the limit into d: ${started}`);
    for (const move of started) assert.match(move, /->d$/);
    for (const [, entry] of cluster.machine('a').current.entries()) {
      if (entry.kind !== 'active' || entry.moving === null) continue;
      assert.equal(entry.replicas.length, REPLICAS + 1, 'the target is added before the source leaves');
      assert.equal(entry.replicas.at(-1), 'd', 'the target is listed last');
      assert.match(entry.history.at(-1)?.reason ?? '', /^join:d$/);
    }
    cluster.deliverAll();
    assert.deepEqual(inFlight(cluster, 'b'), started, 'members hold the moves in flight');
    const finished = settle(cluster, 'a');
    const table = cluster.machine('a').current;
    const view = viewOf(ids);
    assert.deepEqual(
      planMoves(table, view, REPLICAS).moves,
      [],
      'the table settled where the planner wants it',
    );
    assert.equal(
      finished,
      planMoves(bootstrapped(['a', 'b', 'c'], PLACEMENT_3).machine('a').current, view, REPLICAS, {
        movesInPerNode: 99,
        movesOutPerNode: 99,
      }).moves.length,
      'exactly the moves planned at once without limits',
    );
    for (const [, entry] of table.entries()) {
      assert.equal(entry.kind, 'active');
      if (entry.kind === 'active') assert.equal(entry.replicas.length, REPLICAS);
    }
    assert.ok(table.members().includes('d'));
    assert.deepEqual(new Set(cluster.digests()).size, 1, 'every member holds the same table');
  });

  test('a settled table hands serving over to even it out, a plan interval after it settled, so the members it goes to verify their copies first', () => {
    // a is first in every list: it serves all four fragments.
    const skewed = [
      ['a', 'b', 'c'],
      ['a', 'b', 'c'],
      ['a', 'c', 'b'],
      ['a', 'c', 'b'],
    ];
    const cluster = bootstrapped(['a', 'b', 'c'], skewed, MOVE_LIMITS_DEFAULT);
    const a = cluster.machine('a');
    const serving = (id: string) =>
      cluster
        .machine(id)
        .current.entries()
        .map(([, e]) => (e.kind === 'active' ? e.replicas[0] : '-'))
        .join(',');
    assert.equal(a.counters.servingTransfers, 0, 'nothing handed over as the table settles');
    cluster.advance(PLACEMENT_PLAN_INTERVAL_MS - 1);
    assert.equal(a.counters.servingTransfers, 0, 'nor before a plan interval passed');
    cluster.advance(1);
    assert.equal(a.counters.servingTransfers, 2);
    cluster.deliverAll();
    for (const id of ['a', 'b', 'c']) assert.equal(serving(id), 'b,c,a,a', `${id}'s table`);
    for (const [, entry] of a.current.entries())
      if (entry.kind === 'active' && entry.replicas[0] !== 'a')
        assert.equal(entry.history.at(-1)?.reason, 'rebalance');
    // Even now (2, 1, 1): no more, however long.
    cluster.advance(10 * PLACEMENT_PLAN_INTERVAL_MS);
    assert.equal(a.counters.servingTransfers, 2);

    // None while a member the lists name is unreachable, however uneven.
    const other = bootstrapped(['a', 'b', 'c'], skewed, MOVE_LIMITS_DEFAULT);
    other.views(['a', 'b', 'c'], viewOf(['a', 'b', 'c'], { c: 'unreachable' }));
    other.advance(10 * PLACEMENT_PLAN_INTERVAL_MS);
    assert.equal(other.machine('a').counters.servingTransfers, 0);
  });

  test('a ready for another generation, or from a node that is not the target, changes nothing', () => {
    const ids = ['a', 'b', 'c', 'd'];
    const cluster = bootstrapped(['a', 'b', 'c'], PLACEMENT_3, MOVE_LIMITS_DEFAULT);
    cluster.views(ids.slice(0, 3), viewOf(ids));
    cluster.deliverAll();
    const [fragment, entry] = cluster
      .machine('a')
      .current.entries()
      .find(([, e]) => e.kind === 'active' && e.moving !== null) as [number, AssignmentEntry];
    const digest = cluster.digests()[0];
    assert.deepEqual(
      cluster.receive('a', { kind: 'ready', from: 'd', fragment, generation: entry.generation - 1 }),
      [],
    );
    assert.deepEqual(
      cluster.receive('a', { kind: 'ready', from: 'b', fragment, generation: entry.generation }),
      [],
    );
    assert.deepEqual(
      cluster.receive('b', { kind: 'ready', from: 'd', fragment, generation: entry.generation }),
      [],
    );
    assert.equal(cluster.digests()[0], digest);
    const done = cluster.receive('a', { kind: 'ready', from: 'd', fragment, generation: entry.generation });
    assert.ok(
      done.includes(
        `log info: move of fragment ${fragment} finished: ${(entry as { moving: { source: string } }).moving.source} -> d`,
      ),
      done.join('\n'),
    );
  });

  test('a Down member is replaced in every fragment it held, from the survivors; a coordinator without a majority moves nothing', () => {
    const ids = ['a', 'b', 'c', 'd', 'e'];
    const cluster = bootstrapped(ids, PLACEMENT_5, MOVE_LIMITS_DEFAULT);
    // The initial placement is not balanced for five: let it settle first.
    settle(cluster, 'a');
    const before = cluster.machine('a').current;
    const held = before.entries().filter(([, e]) => e.kind === 'active' && e.replicas.includes('e')).length;
    assert.ok(held > 0);
    cluster.views(['a', 'b', 'c', 'd'], viewOf(ids, { e: 'down' }));
    for (const move of inFlight(cluster, 'a')) assert.match(move, /^\d+:e->/);
    settle(cluster, 'a');
    const after = cluster.machine('a').current;
    for (const [, entry] of after.entries()) {
      assert.ok(
        entry.kind === 'active' && !entry.replicas.includes('e') && entry.replicas.length === REPLICAS,
      );
    }
    const reasons = after
      .entries()
      .flatMap(([, e]) => (e.kind === 'active' ? e.history.map((h) => h.reason) : []));
    assert.equal(
      reasons.filter((r) => r === 'node_down:e').length,
      held * 2,
      'an add and a remove per fragment e held',
    );

    // a alone (b, c, d unreachable) is still the lowest id but reaches no majority: no move starts.
    const lonely = bootstrapped(['a', 'b', 'c'], PLACEMENT_3, MOVE_LIMITS_DEFAULT);
    const digest = lonely.digests()[0];
    lonely.view('a', viewOf(['a', 'b', 'c', 'd'], { b: 'unreachable', c: 'unreachable' }));
    lonely.advance(PLACEMENT_PLAN_INTERVAL_MS * 3);
    assert.equal(lonely.digests()[0], digest);
    assert.deepEqual(inFlight(lonely, 'a'), []);
  });

  test('a member back without its data is dropped from every list on its seed’s word, and moves restore R', () => {
    const ids = ['a', 'b', 'c', 'd', 'e'];
    const cluster = bootstrapped(ids, PLACEMENT_5, MOVE_LIMITS_DEFAULT);
    settle(cluster, 'a');
    const listsE = () =>
      cluster
        .machine('a')
        .current.entries()
        .filter(([, e]) => e.kind === 'active' && e.replicas.includes('e')).length;
    assert.ok(listsE() > 0);
    // e restarted on an empty store; its join reaches seed b. Its old run's death is not detected
    // yet: the view holds it Up and reachable at its old incarnation.
    const away = viewOf(ids, {}, { e: 7 });
    cluster.views(['a', 'b', 'c', 'd'], away);
    const ask = { kind: 'lost-copies', from: 'b', member: 'e', incarnation: 9 } as const;
    // A question that is stale (its new run is here already) or from a node that does not act changes nothing.
    const digest = cluster.digests()[0];
    cluster.receive('a', { ...ask, incarnation: 7 });
    cluster.receive('b', ask);
    assert.equal(cluster.digests()[0], digest);
    assert.ok(
      cluster
        .receive('a', ask)
        .some((line) =>
          /e is back without its data \(joining through b\): dropped from the replicas of \d+ fragments/.test(
            line,
          ),
        ),
    );
    cluster.deliverAll();
    assert.equal(listsE(), 0);
    // No copy is planned onto it before its new run is admitted, however long that takes.
    cluster.advance(PLACEMENT_PLAN_INTERVAL_MS * 3);
    cluster.deliverAll();
    assert.equal(listsE(), 0);
    for (const id of ['b', 'c', 'd'])
      assert.equal(cluster.machine(id).current.describe(), cluster.machine('a').current.describe());
    // Admitted at its new incarnation, it takes copies again; every fragment has R replicas.
    cluster.views(['a', 'b', 'c', 'd'], viewOf(ids, {}, { e: 9 }));
    settle(cluster, 'a');
    for (const [, entry] of cluster.machine('a').current.entries())
      assert.equal(entry.kind === 'active' && entry.replicas.length, REPLICAS);
    assert.ok(listsE() > 0, 'e holds copies again');
    // The same question again, late: its new run is a member, so nothing is dropped.
    const settled = cluster.digests()[0];
    cluster.receive('a', ask);
    assert.equal(cluster.digests()[0], settled);
  });

  test('a planner blocked by too few eligible members says so once, and once more when it is not', () => {
    const ids = ['a', 'b', 'c'];
    const cluster = bootstrapped(ids, PLACEMENT_3, MOVE_LIMITS_DEFAULT);
    const logged = () =>
      cluster
        .peer('a')
        .actions.filter((x) => x.kind === 'log' && /placement (no longer )?blocked/.test(x.message))
        .map(describeAction);
    assert.deepEqual(logged(), []);
    // c is Down: its replicas can go nowhere with two members left for three replicas.
    cluster.views(['a', 'b'], viewOf(ids, { c: 'down' }));
    cluster.advance(PLACEMENT_PLAN_INTERVAL_MS * 5);
    assert.deepEqual(logged(), [
      'log warn: placement blocked: 2 eligible members cannot hold 3 replicas of each fragment; ' +
        [0, 1, 2, 3].map((f) => `fragment ${f}: no eligible member to replace c`).join('; '),
    ]);
    cluster.views(['a', 'b', 'c'], viewOf(ids));
    cluster.advance(PLACEMENT_PLAN_INTERVAL_MS * 5);
    assert.deepEqual(logged().slice(1), ['log info: placement no longer blocked']);
  });

  test('a move whose target goes Down is cancelled: the list returns to what it was', () => {
    const ids = ['a', 'b', 'c', 'd'];
    const cluster = bootstrapped(['a', 'b', 'c'], PLACEMENT_3, MOVE_LIMITS_DEFAULT);
    cluster.views(ids.slice(0, 3), viewOf(ids));
    cluster.deliverAll();
    const moving = inFlight(cluster, 'a');
    assert.ok(moving.length > 0);
    cluster.views(ids.slice(0, 3), viewOf(ids, { d: 'down' }));
    cluster.deliverAll();
    assert.deepEqual(inFlight(cluster, 'a'), []);
    for (const [, entry] of cluster.machine('a').current.entries()) {
      assert.ok(entry.kind === 'active' && !entry.replicas.includes('d'));
    }
    assert.equal(cluster.machine('a').counters.movesCancelled, moving.length);
  });

  test("a move that would take a reached member's last replica out of a bare majority waits until the coordinator reaches more", () => {
    const ids = ['a', 'b', 'c', 'd', 'e'];
    const cluster = bootstrapped(ids, PLACEMENT_5, MOVE_LIMITS_DEFAULT);
    settle(cluster, 'a');
    const holdsD = (): number[] =>
      cluster
        .machine('a')
        .current.entries()
        .filter(([, e]) => e.kind === 'active' && e.replicas.includes('d'))
        .map(([f]) => f);
    assert.ok(holdsD().length >= 2, `d holds replicas once settled: ${holdsD()}`);
    const leaving = (seen: Parameters<typeof viewOf>[1]): MemberView[] =>
      viewOf(ids, seen).map((m) => (m.id === 'd' ? { ...m, state: 'Leaving' } : m));
    const ready = (fragment: number): string[] => {
      const entry = cluster.machine('a').current.active(fragment);
      return cluster.receive('a', {
        kind: 'ready',
        from: entry?.moving?.target ?? '',
        fragment,
        generation: entry?.generation ?? 0,
      });
    };
    // d leaves; each move out of it but the last finishes: d, still holding a replica, stays a member.
    cluster.views(ids, leaving({}));
    cluster.deliverAll();
    for (let round = 0; holdsD().length > 1; round++) {
      assert.ok(round < 10, `d's moves finish: ${inFlight(cluster, 'a')}`);
      const moves = inFlight(cluster, 'a');
      assert.ok(moves.length > 0 && moves.every((m) => m.includes(':d->')), moves.join(' '));
      ready(Number(moves[0].split(':')[0]));
      cluster.deliverAll();
    }
    const [fragment] = holdsD();
    assert.match(inFlight(cluster, 'a').join(' '), new RegExp(`^${fragment}:d->[abce]$`));
    // c and e are cut off: a reaches a, b and d, three of the table's five members.
    cluster.views(['a', 'b', 'd'], leaving({ c: 'unreachable', e: 'unreachable' }));
    cluster.deliverAll();
    // Without d the table's four members would have only a and b reached: the move waits.
    const waited = ready(fragment);
    assert.ok(
      waited.some((line) =>
        /would leave the table's members without a majority reached here: waiting/.test(line),
      ),
      waited.join('\n'),
    );
    assert.deepEqual(holdsD(), [fragment]);
    assert.equal(cluster.machine('a').role, 'coordinator', 'still acting: it kept its majority');
    // c is back: a reaches three of the four members left, and the ready (resent) finishes the move.
    cluster.views(['a', 'b', 'c', 'd'], leaving({ e: 'unreachable' }));
    ready(fragment);
    assert.deepEqual(inFlight(cluster, 'a'), []);
    assert.deepEqual(cluster.machine('a').current.members(), ['a', 'b', 'c', 'e']);
    assert.equal(cluster.machine('a').role, 'coordinator');
  });

  test('a coordinator that must rank cold ranks a slice at a time, the event loop free between, and plans once done', () => {
    // Members no other test ranked: the kept ranking starts over for them.
    const ids = ['rank-a', 'rank-b', 'rank-c', 'rank-d'];
    const placement = PLACEMENT_3.map((list) => list.map((id) => `rank-${id}`));
    // One fragment's ranking per slice: four slices for the four fragments.
    const cluster = new PlacementCluster(ids, placement, MOVE_LIMITS_DEFAULT, [], 1);
    cluster.views(ids, viewOf(ids));
    cluster.deliverAll();
    const logged = cluster.peer('rank-a').actions.map(describeAction);
    assert.ok(
      logged.some((line) => line.includes('ranking the members for every fragment before planning')),
      logged.join('\n'),
    );
    assert.deepEqual(inFlight(cluster, 'rank-a'), [], 'no move before the ranking is done');
    for (let slice = 2; slice <= 3; slice++) {
      const done = cluster.advance(RENDEZVOUS_SLICE_PAUSE_MS);
      assert.ok(!JSON.stringify(done).includes('planning'), `slice ${slice} of 4 plans nothing`);
      assert.deepEqual(inFlight(cluster, 'rank-a'), []);
    }
    const done = cluster.advance(RENDEZVOUS_SLICE_PAUSE_MS)['rank-a'] ?? [];
    assert.ok(
      done.some((line) => line.includes('ranked the members for every fragment: planning')),
      done.join('\n'),
    );
    const moves = inFlight(cluster, 'rank-a');
    assert.ok(moves.length > 0 && moves.every((m) => m.endsWith('->rank-d')), moves.join(' '));
  });

  test('a pin moves a replica to the pinned node and is refused where it cannot apply', () => {
    const ids = ['a', 'b', 'c', 'd'];
    const cluster = bootstrapped(['a', 'b', 'c'], PLACEMENT_3, MOVE_LIMITS_DEFAULT);
    cluster.views(ids.slice(0, 3), viewOf(ids));
    settle(cluster, 'a');
    const fragment = cluster
      .machine('a')
      .current.entries()
      .find(([, e]) => e.kind === 'active' && !e.replicas.includes('d'))?.[0];
    assert.ok(fragment !== undefined, 'some fragment has no replica on d');
    const pin = (id: string, f: number, node: string) => {
      cluster.step(id, { kind: 'pin', fragment: f, node, nowMs: cluster.nowMs });
      return cluster.machine(id).lastAnswer;
    };
    assert.equal(pin('b', fragment, 'd').status, 'Conflict', 'only the coordinator pins');
    assert.equal(pin('a', FRAGMENTS, 'd').status, 'BadRequest');
    assert.equal(pin('a', fragment, 'x').status, 'NotFound');
    assert.equal(pin('a', fragment, 'd').status, 'Ok');
    // One move of the fragment, to the pinned node (the member it leaves may take one of d's others).
    const pinned = inFlight(cluster, 'a').filter((m) => m.startsWith(`${fragment}:`));
    assert.equal(pinned.length, 1, `one move of fragment ${fragment}, to the pinned node: ${pinned}`);
    assert.match(pinned[0], new RegExp(`^${fragment}:[abc]->d$`));
    assert.match(cluster.machine('a').current.active(fragment)?.history.at(-1)?.reason ?? '', /^move$/);
    settle(cluster, 'a');
    const entry = cluster.machine('a').current.active(fragment);
    assert.ok(entry?.replicas.includes('d') && entry.pinnedTo === 'd');
  });
});

test("a joiner named coordinator adopts no reported table until it reaches a majority of that table's members", () => {
  const founders = ['b', 'c', 'd', 'e', 'f'];
  const placement = [
    ['b', 'c', 'd'],
    ['c', 'd', 'e'],
    ['d', 'e', 'f'],
    ['e', 'f', 'b'],
  ];
  const cluster = new PlacementCluster(['a', ...founders], placement, undefined, ['a']);
  cluster.views(founders, viewOf(founders));
  cluster.deliverAll();
  const founded = CoordinatorMachine.digestOf(cluster.machine('b').current);
  // a joined; c, d, e and f are Down. a, the lowest id, is named coordinator: its own (empty) table
  // passes its gate, but b's report names five members of which a reaches one.
  const all = ['a', ...founders];
  cluster.views(['a', 'b'], viewOf(all, { c: 'down', d: 'down', e: 'down', f: 'down' }));
  cluster.deliverAll();
  cluster.advance(COORDINATOR_REPORT_RETRY_MS);
  cluster.deliverAll();
  assert.notEqual(cluster.machine('a').role, 'coordinator');
  assert.equal(cluster.machine('a').current.epoch, 0, 'nothing adopted');
  assert.equal(CoordinatorMachine.digestOf(cluster.machine('b').current), founded, "b's table unchanged");
  assert.ok(
    cluster
      .peer('a')
      .actions.some(
        (x) =>
          x.kind === 'log' && /the reported table's 5 members are not reached by a majority/.test(x.message),
      ),
  );
  // c and d back: a reaches b, c and d, three of the five, and adopts the table above its epoch.
  cluster.views(['a', 'b', 'c', 'd'], viewOf(all, { e: 'down', f: 'down' }));
  cluster.deliverAll();
  cluster.advance(COORDINATOR_REPORT_RETRY_MS);
  cluster.deliverAll();
  assert.equal(cluster.machine('a').role, 'coordinator');
  assert.deepEqual(cluster.machine('a').current.members(), founders);
});

test('a joining node that sees only itself takes over but bootstraps no table of its own', () => {
  const machine = new CoordinatorMachine({
    selfId: 'j',
    fragmentCount: FRAGMENTS,
    replicas: REPLICAS,
    initialPlacement: [],
    initialMembers: ['j'],
    mayBootstrap: false,
    restored: undefined,
    restoredPromise: undefined,
    reportRetryMs: COORDINATOR_REPORT_RETRY_MS,
    digestIntervalMs: COORDINATOR_DIGEST_INTERVAL_MS,
    moves: MOVE_LIMITS_DEFAULT,
    planIntervalMs: PLACEMENT_PLAN_INTERVAL_MS,
  });
  machine.step({ kind: 'view', view: viewOf(['j']), nowMs: START_MS });
  const actions: CoordinatorAction[] = [];
  machine.takeActions(actions);
  assert.equal(machine.current.entries().length, 0, 'no table');
  assert.equal(machine.current.epoch, 0);
  assert.notEqual(machine.role, 'coordinator');
  assert.ok(actions.some((a) => a.kind === 'log' && /a joining node does not bootstrap/.test(a.message)));
});
