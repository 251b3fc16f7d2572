// The placement driver's core (src/core/placement-machine.ts; actordb-node-part-a.md §7.2–7.6):
// golden lists of the actions each event gives, for gain, verify, publish, drain, drop, cancel and
// re-add, and the fences that make a result for an earlier generation count for nothing. The
// seed's placement tests that apply to this core (spec part-b §B9): 49, a completed bootstrap
// cannot publish after revocation ("a gain cancelled before it served"); 50, it retries after the
// replica set changed ("a table change mid-verification"); 51, the ABA case ("ABA"); 57 and 58, a
// fragment re-added while Draining is restored ("listed again while Draining"). 47, 48 and 56 (what
// counts as drained, a drain to an absent target retried) are the workers' drainedTo and the
// driver's retry; the rest of §B9 is about the seed's locks and actors, which this design has not.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { type ActiveAssignment, AssignmentTable, type Fence } from '../../src/core/assignment-table.js';
import { PLACEMENT_DRAIN_RETRY_BACKOFF_MAX } from '../../src/core/limits.js';
import {
  type PlacementAction,
  type PlacementEvent,
  PlacementMachine,
  type PlacementStep,
} from '../../src/core/placement-machine.js';

const FRAGMENTS = 4;
const RETRY_MS = 1_000;
const READY_RESEND_MS = 2_000;
const WARN_MS = 10_000;
const FENCE: Fence = { coordinatorId: 'a', incarnation: 1, epoch: 1 };

/** A table whose fragment `f` is at `generation` with `replicas` (the last one a move's target when `target`). */
function tableOf(
  entries: ReadonlyArray<{
    fragment: number;
    generation: number;
    replicas: string[];
    target?: boolean;
    source?: string;
  }>,
): AssignmentTable {
  return AssignmentTable.from(
    FRAGMENTS,
    1,
    { id: 'a', incarnation: 1 },
    entries.map(({ fragment, generation, replicas, target, source }): [number, ActiveAssignment] => [
      fragment,
      {
        kind: 'active',
        generation,
        replicas,
        moving:
          target === true
            ? { source: source ?? null, target: replicas.at(-1) as string, reason: 'join:s' }
            : null,
        pinnedTo: null,
        fence: FENCE,
        history: [],
      },
    ]),
  );
}

function describeAction(a: PlacementAction): string {
  switch (a.kind) {
    case 'hold':
      return `hold ${a.fragment} g${a.generation} [${a.replicas.join(' ')}]`;
    case 'verify':
      return `verify ${a.fragment} g${a.generation} from [${a.sources.join(' ')}]`;
    case 'ready':
      return `ready ${a.fragment} g${a.generation}`;
    case 'serve':
      return `serve ${a.fragment} ${a.serving ? 'on' : 'off'}`;
    case 'drain':
      return `drain ${a.fragment} g${a.generation} to [${a.targets.join(' ')}]`;
    case 'drop':
      return `drop ${a.fragment} g${a.generation}`;
    case 'warn':
      return `warn ${a.fragment}: ${a.message} (${String(a.fields.reason)})`;
  }
}

class Harness {
  nowMs = 1_000;
  readonly machine = new PlacementMachine({
    selfId: 's',
    fragmentCount: FRAGMENTS,
    retryMs: RETRY_MS,
    readyResendMs: READY_RESEND_MS,
    drainWarnIntervalMs: WARN_MS,
  });

  step(event: PlacementEvent): string[] {
    this.machine.step(event);
    const actions: PlacementAction[] = [];
    this.machine.takeActions(actions);
    return actions.map(describeAction);
  }

  table(table: AssignmentTable, fragments = [0, 1, 2, 3]): string[] {
    return this.step({ kind: 'table', table, fragments, nowMs: this.nowMs });
  }

  done(fragment: number, step: PlacementStep, generation: number, ok = true): string[] {
    return this.step({
      kind: 'done',
      fragment,
      step,
      generation,
      ok,
      detail: ok ? '' : 'peer gone',
      nowMs: this.nowMs,
    });
  }

  advance(ms: number): string[] {
    this.nowMs += ms;
    return this.step({ kind: 'tick', nowMs: this.nowMs });
  }

  state(fragment: number): string {
    const f = this.machine.fragment(fragment);
    return f === undefined ? '-' : `${f.state} g${f.generation}${f.step === null ? '' : ` ${f.step}`}`;
  }
}

describe('gain', () => {
  test("a move target verifies against the move's source first, then the others in the table's order", () => {
    const h = new Harness();
    h.table(
      tableOf([{ fragment: 1, generation: 5, replicas: ['a', 'b', 'c', 's'], target: true, source: 'c' }]),
    );
    assert.deepEqual(h.done(1, 'hold', 5), ['verify 1 g5 from [c a b]']);
    // A source that is not listed (Down, or gone) leaves the table's order.
    h.table(
      tableOf([{ fragment: 2, generation: 3, replicas: ['b', 'a', 's'], target: true, source: 'd' }]),
      [2],
    );
    assert.deepEqual(h.done(2, 'hold', 3), ['verify 2 g3 from [b a]']);
  });

  test('a move target holds, verifies against the serving replicas, reports ready until the move finishes, then serves', () => {
    const h = new Harness();
    assert.deepEqual(
      h.table(tableOf([{ fragment: 1, generation: 5, replicas: ['a', 'b', 's'], target: true }])),
      ['hold 1 g5 [a b s]'],
    );
    assert.equal(h.state(1), 'Bootstrapping g5 hold');
    assert.equal(h.machine.serves(1), false);
    assert.deepEqual(h.done(1, 'hold', 5), ['verify 1 g5 from [a b]']);
    assert.deepEqual(h.done(1, 'verify', 5), ['ready 1 g5']);
    assert.equal(h.machine.nextWakeMs(), h.nowMs + READY_RESEND_MS);
    assert.deepEqual(h.advance(READY_RESEND_MS - 1), []);
    assert.deepEqual(h.advance(1), ['ready 1 g5'], 'a lost ready is sent again');
    // The coordinator finishes the move: the target is a serving replica at the next generation.
    assert.deepEqual(h.table(tableOf([{ fragment: 1, generation: 6, replicas: ['a', 's', 'b'] }]), [1]), [
      'hold 1 g6 [a s b]',
      'serve 1 on',
    ]);
    assert.equal(h.state(1), 'Serving g6 hold');
    assert.equal(h.machine.serves(1), true);
    assert.deepEqual(h.done(1, 'hold', 6), []);
    assert.equal(h.machine.counters.published, 1);
    assert.deepEqual(h.advance(READY_RESEND_MS * 3), [], 'nothing more to say');
  });

  test('a fragment the first table lists this node for (bootstrap) is served once it is open', () => {
    const h = new Harness();
    assert.deepEqual(h.table(tableOf([{ fragment: 0, generation: 1, replicas: ['s', 'a'] }])), [
      'hold 0 g1 [s a]',
    ]);
    assert.equal(h.machine.serves(0), false, 'not before it is open');
    assert.deepEqual(h.done(0, 'hold', 1), ['serve 0 on']);
    assert.equal(h.state(0), 'Serving g1');
  });

  test('a failed verification is retried after the retry interval, never published', () => {
    const h = new Harness();
    h.table(tableOf([{ fragment: 2, generation: 3, replicas: ['a', 's'], target: true }]));
    h.done(2, 'hold', 3);
    assert.deepEqual(h.done(2, 'verify', 3, false), []);
    assert.match(h.machine.fragment(2)?.waiting ?? '', /verify failed: peer gone/);
    assert.deepEqual(h.advance(RETRY_MS - 1), []);
    assert.deepEqual(h.advance(1), ['verify 2 g3 from [a]']);
    assert.equal(h.machine.counters.stepsFailed, 1);
  });

  test('ABA: work for generation P counts for nothing at a later P with the same replicas', () => {
    const h = new Harness();
    h.table(tableOf([{ fragment: 1, generation: 5, replicas: ['a', 's'], target: true }]));
    h.done(1, 'hold', 5);
    // The table moves on (another target), then back to this node as the target: a new generation.
    assert.deepEqual(
      h.table(tableOf([{ fragment: 1, generation: 6, replicas: ['a', 'q'], target: true }]), [1]),
      [],
      'the verification in flight reports first',
    );
    assert.deepEqual(h.done(1, 'verify', 5), ['drop 1 g6'], 'the round for generation 5 counts for nothing');
    assert.deepEqual(h.done(1, 'drop', 6), []);
    assert.equal(h.state(1), 'Stopped g6');
    assert.deepEqual(
      h.table(tableOf([{ fragment: 1, generation: 7, replicas: ['a', 's'], target: true }]), [1]),
      ['hold 1 g7 [a s]'],
    );
    // Results for generation 5 reported again, late: ignored.
    assert.deepEqual(h.done(1, 'verify', 5), []);
    assert.deepEqual(h.done(1, 'hold', 5), []);
    assert.equal(h.machine.counters.staleResults, 3);
    assert.equal(h.state(1), 'Bootstrapping g7 hold');
    assert.deepEqual(h.done(1, 'hold', 7), ['verify 1 g7 from [a]']);
  });

  test('a table change mid-verification restarts it at the new generation once the round in flight reports (publish with the entry unchanged)', () => {
    const h = new Harness();
    h.table(tableOf([{ fragment: 0, generation: 2, replicas: ['a', 'b', 's'], target: true }]));
    h.done(0, 'hold', 2);
    assert.equal(h.state(0), 'Bootstrapping g2 verify');
    assert.deepEqual(
      h.table(tableOf([{ fragment: 0, generation: 3, replicas: ['a', 'c', 's'], target: true }]), [0]),
      [],
      'one step at a time',
    );
    assert.deepEqual(
      h.done(0, 'verify', 2),
      ['hold 0 g3 [a c s]'],
      'the round for generation 2 is not this one',
    );
    assert.deepEqual(h.done(0, 'hold', 3), ['verify 0 g3 from [a c]']);
    assert.deepEqual(h.done(0, 'verify', 3), ['ready 0 g3']);
  });
});

describe('loss and handoff', () => {
  /** A harness serving fragment 0 at generation 1 with replicas s, a. */
  function serving(): Harness {
    const h = new Harness();
    h.table(tableOf([{ fragment: 0, generation: 1, replicas: ['s', 'a'] }]));
    h.done(0, 'hold', 1);
    assert.equal(h.state(0), 'Serving g1');
    return h;
  }

  test('a served fragment the table drops stops serving, drains to the new replicas, then is dropped', () => {
    const h = serving();
    assert.deepEqual(h.table(tableOf([{ fragment: 0, generation: 3, replicas: ['a', 'b'] }]), [0]), [
      'serve 0 off',
      'drain 0 g3 to [a b]',
    ]);
    assert.equal(h.state(0), 'Draining g3 drain');
    assert.deepEqual(h.done(0, 'drain', 3), ['drop 0 g3']);
    assert.deepEqual(h.done(0, 'drop', 3), []);
    assert.equal(h.state(0), 'Stopped g3');
    assert.deepEqual(h.machine.fragments(), [], 'a stopped fragment is not listed');
    assert.deepEqual([h.machine.counters.handedOver, h.machine.counters.dropped], [1, 1]);
  });

  test('a drain that does not complete keeps the fragment Draining, warned about, never dropped on a timer', () => {
    const h = serving();
    h.table(tableOf([{ fragment: 0, generation: 2, replicas: ['a', 'b'] }]), [0]);
    assert.deepEqual(h.done(0, 'drain', 2, false), [
      'warn 0: fragment remains Draining: its handoff is not certified yet (drain failed: peer gone)',
    ]);
    assert.deepEqual(h.advance(RETRY_MS), ['drain 0 g2 to [a b]']);
    for (let i = 0; i < 5; i++) {
      const lines = h.advance(WARN_MS);
      assert.ok(!lines.some((l) => l.startsWith('drop')), `no drop on a timer: ${lines}`);
      assert.ok(lines.some((l) => l.startsWith('warn 0: fragment remains Draining')));
    }
    assert.equal(h.state(0), 'Draining g2 drain');
  });

  test('a handoff that fails again waits longer each time, up to a bound; a new generation starts over', () => {
    const h = serving();
    h.table(tableOf([{ fragment: 0, generation: 2, replicas: ['a', 'b'] }]), [0]);
    const waits: number[] = [];
    for (let i = 0; i < 6; i++) {
      h.done(0, 'drain', 2, false);
      let waited = 0;
      for (;;) {
        waited += RETRY_MS;
        if (h.advance(RETRY_MS).includes('drain 0 g2 to [a b]')) break;
        assert.ok(waited < 100 * RETRY_MS, 'the handoff is tried again');
      }
      waits.push(waited / RETRY_MS);
    }
    assert.deepEqual(waits, [
      1,
      2,
      4,
      PLACEMENT_DRAIN_RETRY_BACKOFF_MAX,
      PLACEMENT_DRAIN_RETRY_BACKOFF_MAX,
      PLACEMENT_DRAIN_RETRY_BACKOFF_MAX,
    ]);
    assert.equal(PLACEMENT_DRAIN_RETRY_BACKOFF_MAX, 8);
    // The table moves on: the handoff to the new replicas is tried after the retry interval again.
    h.done(0, 'drain', 2, false);
    assert.deepEqual(h.table(tableOf([{ fragment: 0, generation: 3, replicas: ['a', 'c'] }]), [0]), [
      'drain 0 g3 to [a c]',
    ]);
    h.done(0, 'drain', 3, false);
    assert.deepEqual(h.advance(RETRY_MS), ['drain 0 g3 to [a c]']);
    // A handoff that completes is not held back by the failures before it.
    assert.deepEqual(h.done(0, 'drain', 3), ['drop 0 g3']);
  });

  test('a fragment the table ends (no replica left to hand to) waits, warning, and is not dropped', () => {
    const h = serving();
    assert.deepEqual(
      h.table(
        AssignmentTable.from(FRAGMENTS, 1, { id: 'a', incarnation: 1 }, [
          [0, { kind: 'tombstone', generation: 4, fence: FENCE }],
        ]),
        [0],
      ),
      ['serve 0 off'],
    );
    assert.equal(h.machine.fragment(0)?.waiting, 'no replacement replica can certify the handoff');
    assert.deepEqual(h.advance(WARN_MS), [
      'warn 0: fragment remains Draining: its handoff is not certified yet (no replacement replica can certify the handoff)',
    ]);
    assert.equal(h.state(0), 'Draining g4');
  });

  test('a gain cancelled before it served is dropped without a handoff: it holds nothing only it has', () => {
    const h = new Harness();
    h.table(tableOf([{ fragment: 3, generation: 2, replicas: ['a', 'b', 's'], target: true }]));
    h.done(3, 'hold', 2);
    assert.deepEqual(h.table(tableOf([{ fragment: 3, generation: 3, replicas: ['a', 'b'] }]), [3]), []);
    assert.deepEqual(h.done(3, 'verify', 2), ['drop 3 g3'], 'once the verification in flight reports');
    assert.deepEqual(h.done(3, 'drop', 3), []);
    assert.equal(h.state(3), 'Stopped g3');
  });

  test('listed again while Draining: the handoff is cancelled and the copy is verified anew before it serves', () => {
    const h = serving();
    h.table(tableOf([{ fragment: 0, generation: 2, replicas: ['a', 'b'] }]), [0]);
    assert.deepEqual(
      h.table(tableOf([{ fragment: 0, generation: 3, replicas: ['a', 'b', 's'], target: true }]), [0]),
      [],
      'the drain in flight reports first',
    );
    assert.deepEqual(
      h.done(0, 'drain', 2),
      ['hold 0 g3 [a b s]'],
      'the drain for generation 2 no longer counts',
    );
    assert.deepEqual(h.done(0, 'hold', 3), ['verify 0 g3 from [a b]']);
    assert.deepEqual(h.done(0, 'verify', 3), ['ready 0 g3']);
    assert.deepEqual(h.table(tableOf([{ fragment: 0, generation: 4, replicas: ['a', 'b', 's'] }]), [0]), [
      'hold 0 g4 [a b s]',
      'serve 0 on',
    ]);
  });
});

describe('one step at a time (found by the placement simulator)', () => {
  /** A harness serving fragment 0 at generation 1 with replicas s, a. */
  function serving(): Harness {
    const h = new Harness();
    h.table(tableOf([{ fragment: 0, generation: 1, replicas: ['s', 'a'] }]));
    h.done(0, 'hold', 1);
    return h;
  }

  test('a drop in flight when the table moves on still stops the fragment, which can then be gained again', () => {
    const h = serving();
    h.table(tableOf([{ fragment: 0, generation: 2, replicas: ['a', 'b'] }]), [0]);
    assert.deepEqual(h.done(0, 'drain', 2), ['drop 0 g2']);
    assert.deepEqual(h.table(tableOf([{ fragment: 0, generation: 3, replicas: ['a', 'c'] }]), [0]), []);
    // Before, the drop's result (for generation 2) was ignored: Draining with a drop in flight forever.
    assert.deepEqual(h.done(0, 'drop', 2), []);
    assert.equal(h.state(0), 'Stopped g3');
    assert.deepEqual(h.table(tableOf([{ fragment: 0, generation: 4, replicas: ['a', 'c', 's'] }]), [0]), [
      'hold 0 g4 [a c s]',
    ]);
  });

  test('a table change while a drain runs waits for it: no second drain, and no drop, while it still runs', () => {
    const h = serving();
    assert.deepEqual(h.table(tableOf([{ fragment: 0, generation: 2, replicas: ['a', 'b'] }]), [0]), [
      'serve 0 off',
      'drain 0 g2 to [a b]',
    ]);
    // Before, the drain to [a c] started at once, and its end dropped the copy the first drain still read.
    assert.deepEqual(h.table(tableOf([{ fragment: 0, generation: 3, replicas: ['a', 'c'] }]), [0]), []);
    assert.equal(h.state(0), 'Draining g3 drain');
    assert.deepEqual(
      h.done(0, 'drain', 2),
      ['drain 0 g3 to [a c]'],
      'the handoff to [a b] does not count for [a c]',
    );
    assert.deepEqual(h.done(0, 'drain', 3), ['drop 0 g3']);
  });

  test('a hold for an earlier generation lands before the next hold starts', () => {
    const h = new Harness();
    assert.deepEqual(h.table(tableOf([{ fragment: 0, generation: 1, replicas: ['s', 'a'] }])), [
      'hold 0 g1 [s a]',
    ]);
    assert.deepEqual(h.table(tableOf([{ fragment: 0, generation: 2, replicas: ['s', 'b'] }]), [0]), []);
    assert.deepEqual(h.done(0, 'hold', 1), ['hold 0 g2 [s b]', 'serve 0 on']);
    assert.deepEqual(h.done(0, 'hold', 2), []);
    assert.equal(h.state(0), 'Serving g2');
  });
});

describe('a restart', () => {
  test('fragments the store holds are served at once, held again by the table, and handed over when the table moved them away', () => {
    const h = new Harness();
    assert.deepEqual(h.step({ kind: 'start', held: [0, 1], nowMs: h.nowMs }), []);
    assert.equal(h.machine.serves(0), true);
    assert.equal(h.machine.serves(1), true);
    assert.deepEqual(
      h.table(
        tableOf([
          { fragment: 0, generation: 4, replicas: ['s', 'a'] },
          { fragment: 1, generation: 6, replicas: ['a', 'b'] },
        ]),
        [0, 1],
      ),
      ['hold 0 g4 [s a]', 'serve 1 off', 'drain 1 g6 to [a b]'],
    );
    assert.equal(h.state(0), 'Serving g4 hold');
  });
});

test('a node that exits the cluster declines a move a stale coordinator names it the target of, once per generation', () => {
  const h = new Harness();
  h.table(tableOf([{ fragment: 0, generation: 3, replicas: ['a', 'b', 'c'] }]), [0]);
  assert.deepEqual(h.step({ kind: 'exit', nowMs: h.nowMs }), []);
  assert.deepEqual(
    h.table(tableOf([{ fragment: 0, generation: 4, replicas: ['a', 'b', 'c', 's'], target: true }]), [0]),
    [
      'warn 0: declined a fragment copy: this node exits the cluster (this node exits the cluster: it takes no new copy)',
    ],
  );
  assert.equal(h.state(0), 'Stopped g4');
  assert.deepEqual(h.machine.fragments(), [], 'it holds nothing, so its leave can finish');
  assert.deepEqual(h.advance(READY_RESEND_MS * 3), [], 'no hold, no retry');
  assert.deepEqual(
    h.table(tableOf([{ fragment: 0, generation: 4, replicas: ['a', 'b', 'c', 's'], target: true }]), [0]),
    [],
    'the same entry again says nothing more',
  );
  assert.deepEqual(
    h.table(tableOf([{ fragment: 0, generation: 6, replicas: ['a', 's', 'b'] }]), [0]),
    [
      'warn 0: declined a fragment copy: this node exits the cluster (this node exits the cluster: it takes no new copy)',
    ],
    'nor is it a serving replica without a copy',
  );
  assert.equal(h.machine.counters.declined, 2);
  assert.equal(h.machine.counters.gained, 0);
});

test('a table without an entry for a fragment (no table yet) leaves what the node does with it', () => {
  const h = new Harness();
  h.step({ kind: 'start', held: [0, 1], nowMs: h.nowMs });
  assert.deepEqual(h.table(new AssignmentTable(FRAGMENTS), [0, 1, 2, 3]), []);
  assert.equal(h.machine.serves(0), true);
  assert.equal(h.machine.serves(1), true);
  assert.equal(h.state(0), 'Serving g0');
});
