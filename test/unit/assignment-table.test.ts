// The assignment table's fencing rules (datum-agent.md §3.4), with datum's tests (§8, #4–#12) ported
// one for one under their names, then Tessera's additions: the epoch fence (§9.4 split brain), the
// check at the point of effect, and the persisted form.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  type ActiveAssignment,
  type AssignmentEntry,
  AssignmentTable,
  type AssignmentTombstone,
  acceptsActive,
  type CoordinatorIdentity,
  decodeTable,
  encodeTable,
  type Fence,
  type HostedReplica,
  localReplicaActions,
  observationIsTombstoned,
  restartIsBlocked,
  withHistory,
} from '../../src/core/assignment-table.js';
import { TesseraError } from '../../src/core/errors.js';
import { ASSIGNMENT_HISTORY_ENTRIES_MAX } from '../../src/core/limits.js';

// datum's fixtures: "coordinator" wrote the first assignments; "old-coordinator" is a predecessor of
// "new-coordinator", which is current. Each coordinator has its own table epoch, in that order.
const EPOCHS: Record<string, number> = { 'old-coordinator': 1, coordinator: 1, 'new-coordinator': 2 };

function fence(coordinatorId: string, incarnation = 0): Fence {
  return { coordinatorId, incarnation, epoch: EPOCHS[coordinatorId] ?? 1 };
}

function who(id: string, incarnation = 0): CoordinatorIdentity {
  return { id, incarnation };
}

/** datum's `assignment(generation, node)`: written by "coordinator". */
function assignment(generation: number, node: string, coordinator = 'coordinator'): ActiveAssignment {
  return {
    kind: 'active',
    generation,
    replicas: [node],
    moving: null,
    pinnedTo: null,
    fence: fence(coordinator),
    history: [],
  };
}

function tombstone(generation: number, coordinator: string): AssignmentTombstone {
  return { kind: 'tombstone', generation, fence: fence(coordinator) };
}

/** A table on node-a holding `entries`, as datum's actor with assignments inserted directly. */
function tableWith(entries: Array<[number, AssignmentEntry]>, epochOwner = 'coordinator'): AssignmentTable {
  return AssignmentTable.from(4, EPOCHS[epochOwner], who(epochOwner), entries);
}

function running(generation: number, node: string, coordinator: string, isRunning = true): HostedReplica {
  return { fragment: 0, generation, replicas: [node], fence: fence(coordinator), running: isRunning };
}

const CURRENT = who('new-coordinator');

/** datum's `remember_assignment` over a map, with the table's acceptance rule. */
function remember(
  assignments: Map<string, ActiveAssignment>,
  name: string,
  candidate: ActiveAssignment,
  current: CoordinatorIdentity,
): boolean {
  const accept = acceptsActive(assignments.get(name), candidate, current);
  if (accept) assignments.set(name, candidate);
  return accept;
}

test('remembered_assignment_generation_is_monotonic (datum §8 #4)', () => {
  const assignments = new Map<string, ActiveAssignment>();
  assert.ok(remember(assignments, 'job', assignment(2, 'current-owner'), who('coordinator')));

  assert.ok(!remember(assignments, 'job', assignment(1, 'stale-owner'), who('coordinator')));
  assert.deepEqual(assignments.get('job')?.replicas, ['current-owner']);
  assert.equal(assignments.get('job')?.generation, 2);

  assert.ok(!remember(assignments, 'job', assignment(2, 'equal-generation-owner'), who('coordinator')));
  assert.deepEqual(assignments.get('job')?.replicas, ['current-owner']);

  const staleSameOwner = assignment(2, 'current-owner', 'old-coordinator');
  assert.ok(!remember(assignments, 'job', staleSameOwner, CURRENT));
  assert.equal(assignments.get('job')?.fence.coordinatorId, 'coordinator');

  const sameOwnerRefresh = assignment(2, 'current-owner', 'new-coordinator');
  assert.ok(remember(assignments, 'job', sameOwnerRefresh, CURRENT));
  assert.deepEqual(assignments.get('job')?.replicas, ['current-owner']);
  assert.equal(assignments.get('job')?.fence.coordinatorId, 'new-coordinator');

  assert.ok(remember(assignments, 'job', assignment(3, 'new-owner', 'new-coordinator'), CURRENT));
  assert.deepEqual(assignments.get('job')?.replicas, ['new-owner']);
  assert.equal(assignments.get('job')?.generation, 3);
});

test('registry_rebuild_preserves_tombstone_against_stale_running_observations (datum §8 #5)', () => {
  const t = tombstone(2, 'new-coordinator');
  assert.ok(observationIsTombstoned(t, assignment(1, 'stale-owner', 'old-coordinator')));
  assert.ok(observationIsTombstoned(t, assignment(2, 'stale-owner', 'new-coordinator')));
  assert.ok(!observationIsTombstoned(t, assignment(3, 'new-owner', 'new-coordinator')));
});

test('stale_tombstone_does_not_stop_newer_local_owner (datum §8 #6)', () => {
  const current = assignment(2, 'node-a', 'new-coordinator');
  const table = tableWith([[0, current]], 'new-coordinator');
  const hosted = [running(2, 'node-a', 'new-coordinator')];

  const stale = table.apply(
    { fence: fence('old-coordinator'), fragment: 0, entry: tombstone(1, 'old-coordinator') },
    CURRENT,
  );
  // A non-current coordinator's tombstone must not be falsely acknowledged.
  assert.equal(stale.outcome, 'refused');
  assert.equal(stale.outcome === 'refused' && stale.status, 'Conflict');
  assert.deepEqual(localReplicaActions(table, 'node-a', hosted, CURRENT), []);
  assert.equal(table.active(0), current);

  const applied = table.apply(
    { fence: fence('new-coordinator'), fragment: 0, entry: tombstone(2, 'new-coordinator') },
    CURRENT,
  );
  assert.equal(applied.outcome, 'applied');
  assert.deepEqual(localReplicaActions(table, 'node-a', hosted, CURRENT), [
    { kind: 'stop', fragment: 0, generation: 2 },
  ]);
  assert.equal(table.active(0), undefined);
});

test('delayed_active_after_recorded_tombstone_is_rejected (datum §8 #7)', () => {
  const table = new AssignmentTable(4);
  const recorded = table.apply(
    { fence: fence('new-coordinator'), fragment: 0, entry: tombstone(2, 'new-coordinator') },
    CURRENT,
  );
  assert.equal(recorded.outcome, 'applied', 'a valid tombstone with no assignment is retained');
  const held = table.entry(0);
  assert.equal(held?.kind, 'tombstone');
  assert.deepEqual([held?.generation, held?.fence.coordinatorId], [2, 'new-coordinator']);

  const stale = table.apply(
    { fence: fence('new-coordinator'), fragment: 0, entry: assignment(2, 'node-b', 'new-coordinator') },
    CURRENT,
  );
  assert.equal(stale.outcome, 'refused');
  assert.equal(stale.outcome === 'refused' && stale.reason, 'superseded-by-tombstone');
  assert.equal(stale.outcome === 'refused' && stale.status, 'Conflict');
  assert.equal(table.active(0), undefined);
  assert.equal(table.entry(0)?.kind, 'tombstone');

  const newer = table.apply(
    { fence: fence('new-coordinator'), fragment: 0, entry: assignment(3, 'node-b', 'new-coordinator') },
    CURRENT,
  );
  assert.equal(newer.outcome, 'applied', 'a strictly newer assignment supersedes the tombstone');
  assert.equal(table.active(0)?.generation, 3);
});

test('new_coordinator_tombstone_applies_before_same_generation_refresh (datum §8 #8)', () => {
  const table = tableWith([[0, assignment(2, 'node-a', 'old-coordinator')]], 'old-coordinator');
  const hosted = [running(2, 'node-a', 'old-coordinator')];

  const applied = table.apply(
    { fence: fence('new-coordinator'), fragment: 0, entry: tombstone(2, 'new-coordinator') },
    CURRENT,
  );
  assert.equal(applied.outcome, 'applied', 'the current coordinator’s tombstone applies across the handoff');
  const actions = localReplicaActions(table, 'node-a', hosted, CURRENT);
  assert.ok(actions.some((a) => a.kind === 'stop'));
  assert.equal(table.active(0), undefined);
  assert.equal(table.entry(0)?.kind, 'tombstone');

  const refresh = table.apply(
    { fence: fence('new-coordinator'), fragment: 0, entry: assignment(2, 'node-a', 'new-coordinator') },
    CURRENT,
  );
  assert.equal(refresh.outcome, 'refused');
  assert.equal(refresh.outcome === 'refused' && refresh.status, 'Conflict');
  assert.equal(table.active(0), undefined);
  assert.equal(table.entry(0)?.kind, 'tombstone');
});

test('current_tombstone_refreshes_terminal_local_metadata (datum §8 #9)', () => {
  const table = new AssignmentTable(4);
  const stopped = [running(2, 'node-a', 'old-coordinator', false)];

  const applied = table.apply(
    { fence: fence('new-coordinator'), fragment: 0, entry: tombstone(2, 'new-coordinator') },
    CURRENT,
  );
  assert.equal(applied.outcome, 'applied');
  // The stopped replica's metadata is rewritten to the tombstone's generation and coordinator; nothing to stop.
  assert.deepEqual(localReplicaActions(table, 'node-a', stopped, CURRENT), [
    { kind: 'refresh', fragment: 0, generation: 2, fence: fence('new-coordinator') },
  ]);
  assert.equal(table.active(0), undefined);
  assert.equal(table.entry(0)?.kind, 'tombstone');
});

test('delayed_active_replacement_stops_stale_local_owner (datum §8 #10)', () => {
  const table = tableWith([[0, assignment(1, 'node-a', 'old-coordinator')]], 'old-coordinator');
  const hosted = [running(1, 'node-a', 'old-coordinator')];

  const applied = table.apply(
    { fence: fence('new-coordinator'), fragment: 0, entry: assignment(2, 'node-b', 'new-coordinator') },
    CURRENT,
  );
  assert.equal(applied.outcome, 'applied', 'the delayed replacement is accepted');
  assert.deepEqual(localReplicaActions(table, 'node-a', hosted, CURRENT), [
    { kind: 'stop', fragment: 0, generation: 2 },
  ]);
  assert.deepEqual(table.active(0)?.replicas, ['node-b']);
  assert.equal(table.active(0)?.generation, 2);
});

test('register_restarted_rejects_stale_local_restart_over_active_assignment (datum §8 #11)', () => {
  // "higher-job" (fragment 0): the table has generation 2 on node-b, node-a restarted generation 1.
  // "equal-job" (fragment 1): the table has generation 2 on node-b, node-a restarted generation 2.
  const table = tableWith(
    [
      [0, assignment(2, 'node-b', 'new-coordinator')],
      [1, assignment(2, 'node-b', 'new-coordinator')],
    ],
    'new-coordinator',
  );
  const higher: HostedReplica = running(1, 'node-a', 'new-coordinator');
  const equal: HostedReplica = { ...running(2, 'node-a', 'new-coordinator'), fragment: 1 };
  assert.ok(restartIsBlocked(higher, table.active(0) as ActiveAssignment));
  assert.ok(restartIsBlocked(equal, table.active(1) as ActiveAssignment));
  assert.deepEqual(localReplicaActions(table, 'node-a', [higher, equal], CURRENT), [
    { kind: 'stop', fragment: 0, generation: 2 },
    { kind: 'stop', fragment: 1, generation: 2 },
  ]);
  for (const fragment of [0, 1]) {
    assert.deepEqual(table.active(fragment)?.replicas, ['node-b']);
    assert.equal(table.active(fragment)?.generation, 2);
  }
});

test('tombstone_stop_error_keeps_assignment_for_retry (datum §8 #12)', () => {
  // datum kept the assignment so the next retry would stop the job; here the stop is derived from the
  // table each time, so a stop that failed (the hosted replica still running) is asked for again.
  const table = tableWith([[0, assignment(2, 'node-a', 'new-coordinator')]], 'new-coordinator');
  const hosted = [running(2, 'node-a', 'new-coordinator')];
  table.apply(
    { fence: fence('new-coordinator'), fragment: 0, entry: tombstone(2, 'new-coordinator') },
    CURRENT,
  );
  const first = localReplicaActions(table, 'node-a', hosted, CURRENT);
  assert.deepEqual(first, [{ kind: 'stop', fragment: 0, generation: 2 }]);
  assert.deepEqual(
    localReplicaActions(table, 'node-a', hosted, CURRENT),
    first,
    'failed cleanup must be retried',
  );
});

// ---- Tessera's fence: coordinator incarnation and table epoch ----

function active(generation: number, replicas: string[], f: Fence): ActiveAssignment {
  return { kind: 'active', generation, replicas, moving: null, pinnedTo: null, fence: f, history: [] };
}

test('a change without a coordinator fence is refused', () => {
  const table = new AssignmentTable(4);
  const blank: Fence = { coordinatorId: '', incarnation: 0, epoch: 1 };
  const result = table.apply({ fence: blank, fragment: 0, entry: active(1, ['a'], blank) }, who('a'));
  assert.equal(result.outcome === 'refused' && result.reason, 'missing-fence');
});

test('a restarted coordinator is a different coordinator: the old incarnation is refused', () => {
  const table = new AssignmentTable(4);
  const before: Fence = { coordinatorId: 'a', incarnation: 1, epoch: 1 };
  const result = table.apply({ fence: before, fragment: 0, entry: active(1, ['a'], before) }, who('a', 2));
  assert.equal(result.outcome === 'refused' && result.reason, 'non-current-coordinator');
  assert.match(result.outcome === 'refused' ? result.message : '', /change=a@1 current=a@2/);
});

test('a coordinator whose epoch a successor replaced is refused even when a view still names it (split brain)', () => {
  const table = new AssignmentTable(4);
  const successor: Fence = { coordinatorId: 'b', incarnation: 0, epoch: 3 };
  assert.equal(
    table.apply({ fence: successor, fragment: 0, entry: active(4, ['b', 'c'], successor) }, who('b')).outcome,
    'applied',
  );
  // The view flips back to a (a partition heals in a's favour) while a still acts under its epoch 2.
  const stale: Fence = { coordinatorId: 'a', incarnation: 0, epoch: 2 };
  const result = table.apply({ fence: stale, fragment: 1, entry: active(5, ['a'], stale) }, who('a'));
  assert.equal(result.outcome === 'refused' && result.reason, 'stale-epoch');
  assert.equal(table.entry(1), undefined);
  assert.equal(table.epoch, 3);
});

test('two coordinators under one epoch: the second is refused', () => {
  const table = new AssignmentTable(4);
  const first: Fence = { coordinatorId: 'b', incarnation: 0, epoch: 3 };
  table.apply({ fence: first, fragment: 0, entry: active(1, ['b'], first) }, who('b'));
  const second: Fence = { coordinatorId: 'a', incarnation: 0, epoch: 3 };
  const result = table.apply({ fence: second, fragment: 1, entry: active(1, ['a'], second) }, who('a'));
  assert.equal(result.outcome === 'refused' && result.reason, 'epoch-conflict');
  assert.equal(result.outcome === 'refused' && result.status, 'Conflict');
});

test('at an equal generation the later epoch wins: a successor reused the number its predecessor’s lost write had', () => {
  const old: Fence = { coordinatorId: 'a', incarnation: 0, epoch: 1 };
  const table = AssignmentTable.from(4, 1, who('a'), [[0, active(5, ['a', 'b'], old)]]);
  const successor: Fence = { coordinatorId: 'b', incarnation: 0, epoch: 2 };
  assert.equal(
    table.apply({ fence: successor, fragment: 0, entry: active(5, ['b', 'c'], successor) }, who('b')).outcome,
    'applied',
  );
  assert.deepEqual(table.active(0)?.replicas, ['b', 'c']);
});

test('an older or duplicate change is acknowledged without effect', () => {
  const f: Fence = { coordinatorId: 'a', incarnation: 0, epoch: 1 };
  const table = new AssignmentTable(4);
  table.apply({ fence: f, fragment: 0, entry: active(3, ['a', 'b'], f) }, who('a'));
  assert.equal(
    table.apply({ fence: f, fragment: 0, entry: active(2, ['c'], f) }, who('a')).outcome,
    'ignored',
  );
  assert.equal(
    table.apply({ fence: f, fragment: 0, entry: active(3, ['a', 'c'], f) }, who('a')).outcome,
    'ignored',
  );
  assert.deepEqual(table.active(0)?.replicas, ['a', 'b']);
});

test('malformed changes are refused as BadRequest', () => {
  const f: Fence = { coordinatorId: 'a', incarnation: 0, epoch: 1 };
  const table = new AssignmentTable(4);
  const outside = table.apply({ fence: f, fragment: 4, entry: active(1, ['a'], f) }, who('a'));
  assert.equal(outside.outcome === 'refused' && outside.status, 'BadRequest');
  const other: Fence = { ...f, coordinatorId: 'b' };
  const forged = table.apply({ fence: f, fragment: 0, entry: active(1, ['a'], other) }, who('a'));
  assert.equal(forged.outcome === 'refused' && forged.reason, 'malformed');
  const repeated = table.apply({ fence: f, fragment: 0, entry: active(1, ['a', 'a'], f) }, who('a'));
  assert.equal(repeated.outcome === 'refused' && repeated.reason, 'malformed');
  assert.equal(table.epoch, 0, 'a refused change leaves the table as it was');
});

test('the fence is checked again where the change takes effect', () => {
  const first: Fence = { coordinatorId: 'a', incarnation: 0, epoch: 1 };
  const table = new AssignmentTable(4);
  table.apply({ fence: first, fragment: 0, entry: active(1, ['a'], first) }, who('a'));
  assert.ok(table.isCurrent(0, 1, first));
  table.apply({ fence: first, fragment: 0, entry: active(2, ['b'], first) }, who('a'));
  assert.ok(!table.isCurrent(0, 1, first), 'a newer generation arrived between receipt and effect');
  const successor: Fence = { coordinatorId: 'b', incarnation: 0, epoch: 2 };
  table.apply({ fence: successor, fragment: 1, entry: active(1, ['b'], successor) }, who('b'));
  assert.ok(!table.isCurrent(0, 2, first), 'a successor opened a new epoch');
});

test('history keeps the newest ASSIGNMENT_HISTORY_ENTRIES_MAX entries', () => {
  let history: ReturnType<typeof withHistory> = [];
  for (let g = 1; g <= ASSIGNMENT_HISTORY_ENTRIES_MAX + 5; g++) {
    history = withHistory(history, {
      generation: g,
      from: [],
      to: ['a'],
      reason: 'rebalance',
      timestampMs: g,
    });
  }
  assert.equal(history.length, ASSIGNMENT_HISTORY_ENTRIES_MAX);
  assert.equal(history[0].generation, 6);
  assert.equal(history.at(-1)?.generation, ASSIGNMENT_HISTORY_ENTRIES_MAX + 5);
});

// ---- Persistence ----

function sampleTable(): AssignmentTable {
  const f: Fence = { coordinatorId: 'node-a', incarnation: 3, epoch: 2 };
  return AssignmentTable.from(8, 2, who('node-a', 3), [
    [
      0,
      {
        kind: 'active',
        generation: 4,
        replicas: ['node-a', 'node-b', 'node-c'],
        moving: { source: 'node-b', target: 'node-c', reason: 'node_down:node-b' },
        pinnedTo: 'node-a',
        fence: f,
        history: [
          {
            generation: 4,
            from: ['node-a', 'node-b'],
            to: ['node-a', 'node-b', 'node-c'],
            reason: 'node_down:node-b',
            timestampMs: 1000,
          },
        ],
      },
    ],
    [5, { kind: 'tombstone', generation: 2, fence: f }],
  ]);
}

test('the table survives encode, JSON and decode unchanged', () => {
  const table = sampleTable();
  const decoded = decodeTable(JSON.parse(JSON.stringify(encodeTable(table))));
  assert.deepEqual(encodeTable(decoded), encodeTable(table));
  assert.equal(decoded.describe(), table.describe());
});

test('a malformed persisted table is refused with an error naming what is wrong', () => {
  const good = encodeTable(sampleTable());
  const cases: Array<[string, unknown, RegExp]> = [
    ['not an object', [], /not an object/],
    ['format', { ...good, format: 2 }, /format 2/],
    ['fragment count', { ...good, fragmentCount: 0 }, /fragmentCount 0/],
    ['epoch', { ...good, epoch: -1 }, /epoch/],
    ['epoch owner', { ...good, epochCoordinator: { id: '', incarnation: 0 } }, /epochCoordinator/],
    ['fragment range', { ...good, entries: [{ ...good.entries[0], fragment: 8 }] }, /fragment 8/],
    ['repeated fragment', { ...good, entries: [good.entries[0], good.entries[0]] }, /repeated/],
    [
      'replicas',
      { ...good, entries: [{ ...good.entries[0], replicas: ['node-a', 'node-a'] }] },
      /entries\[0\]/,
    ],
    [
      'move target',
      {
        ...good,
        entries: [
          { ...good.entries[0], moving: { source: 'node-b', target: 'node-z', reason: 'rebalance' } },
        ],
      },
      /move target/,
    ],
    [
      'reason',
      {
        ...good,
        entries: [
          {
            ...good.entries[0],
            history: [{ ...(good.entries[0] as ActiveAssignment).history[0], reason: 'because' }],
          },
        ],
      },
      /entries\[0\]/,
    ],
    ['generation', { ...good, entries: [{ ...good.entries[1], generation: 0 }] }, /generation 0/],
  ];
  for (const [name, value, message] of cases) {
    assert.throws(
      () => decodeTable(value),
      (err: unknown) =>
        err instanceof TesseraError && err.code === 'TESSERA_INVALID_INPUT' && message.test(err.message),
      name,
    );
  }
});

test('listsServing: a listed replica serves, a move’s target and an unlisted member do not, nor a tombstoned fragment', () => {
  const moving: ActiveAssignment = {
    ...assignment(2, 'node-a'),
    replicas: ['node-a', 'node-b'],
    moving: { source: 'node-a', target: 'node-b', reason: 'rebalance' },
  };
  const table = tableWith([
    [0, assignment(1, 'node-a')],
    [1, moving],
    [2, tombstone(1, 'coordinator')],
  ]);
  assert.equal(table.listsServing(0, 'node-a'), true);
  assert.equal(table.listsServing(0, 'node-b'), false);
  assert.equal(table.listsServing(1, 'node-a'), true);
  assert.equal(table.listsServing(1, 'node-b'), false, 'the move’s target copies, it does not serve yet');
  assert.equal(table.listsServing(2, 'node-a'), false);
  assert.equal(table.listsServing(3, 'node-a'), false);
});
