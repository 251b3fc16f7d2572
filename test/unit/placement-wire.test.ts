// Placement coordinator messages on the peer wire (src/threads/placement-wire.ts, proto
// PlacementMessage, field 25 of Envelope): every kind the machine sends comes back deep-equal, a table
// through the checked decoder that reads the data directory's copy; each malformed message is refused
// with a reason naming what is wrong (hand-built envelopes, as a faulty or hostile peer would send).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { AssignmentTable, encodeTable, type Fence } from '../../src/core/assignment-table.js';
import { CoordinatorMachine, type PlacementMessage } from '../../src/core/coordinator-machine.js';
import { FRAGMENT_COUNT_MAX, NODE_ID_BYTES_MAX, PLACEMENT_TABLE_BYTES_MAX } from '../../src/core/limits.js';
import { type Envelope, encodeEnvelope } from '../../src/threads/peer-messages.js';
import {
  decodePlacementMessage,
  encodePlacementMessage,
  type PlacementMessageWire,
} from '../../src/threads/placement-wire.js';
import { sampleTable } from './fixtures/sample-table.js';

const FRAGMENTS = 8;

/** One message of every kind, both answers of a report, tables full and empty. */
const EXAMPLES: PlacementMessage[] = [
  { kind: 'report-request', from: 'n-a', incarnation: 3, epoch: 6 },
  {
    kind: 'report-request',
    from: 'ñode-é',
    incarnation: Number.MAX_SAFE_INTEGER,
    epoch: Number.MAX_SAFE_INTEGER,
  },
  { kind: 'report', from: 'n-b', epoch: 6, refused: false, table: encodeTable(sampleTable()) },
  {
    kind: 'report',
    from: 'n-c',
    epoch: 9,
    refused: true,
    table: encodeTable(new AssignmentTable(FRAGMENTS)),
  },
  { kind: 'changes', from: 'n-a', table: encodeTable(sampleTable()) },
  { kind: 'digest', from: 'n-a', digest: CoordinatorMachine.digestOf(sampleTable()) },
  { kind: 'pull', from: 'n-b' },
  { kind: 'ready', from: 'n-c', fragment: FRAGMENTS - 1, generation: Number.MAX_SAFE_INTEGER },
  { kind: 'ahead', from: 'n-d', fragment: 0, generation: 7 },
  { kind: 'lost-copies', from: 'n-a', member: 'n-e', incarnation: 1_764_500_000_123 },
];

function decoded(bytes: Uint8Array, fragmentCount = FRAGMENTS) {
  const result = decodePlacementMessage(bytes, fragmentCount);
  assert.equal(result.kind, 'message', result.kind === 'malformed' ? result.reason : '');
  return result as Extract<typeof result, { kind: 'message' }>;
}

function assertRefused(bytes: Uint8Array, reason: RegExp, fragmentCount = FRAGMENTS): void {
  const result = decodePlacementMessage(bytes, fragmentCount);
  assert.equal(result.kind, 'malformed', 'decoded a malformed message');
  const text = (result as { reason: string }).reason;
  assert.match(text, /^malformed placement message: /);
  assert.match(text, reason);
}

/** A hand-built envelope: a pull from n-a with what `patch` changes. */
function wire(patch: Partial<PlacementMessageWire>): Uint8Array {
  const message: PlacementMessageWire = {
    kind: 5,
    from: 'n-a',
    tableJson: new Uint8Array(0),
    digest: '',
    incarnation: 0,
    epoch: 0,
    refused: false,
    fragment: 0,
    generation: 0,
    member: '',
    ...patch,
  };
  return encodeEnvelope({ placement: message });
}

const REPORT = 2;
const CHANGES = 3;
const tableJson = (value: unknown): Uint8Array => Buffer.from(JSON.stringify(value), 'utf8');

describe('placement messages round-trip', () => {
  test('every kind comes back deep-equal, with its table decoded', () => {
    assert.equal(new Set(EXAMPLES.map((m) => m.kind)).size, 8, 'an example of each of the eight kinds');
    for (const message of EXAMPLES) {
      const { message: back, table } = decoded(encodePlacementMessage(message));
      assert.deepEqual(back, message);
      if (message.kind === 'report' || message.kind === 'changes') {
        assert.ok(table !== undefined, `${message.kind} carries its table`);
        assert.deepEqual(encodeTable(table), message.table);
      } else {
        assert.equal(table, undefined, `${message.kind} carries no table`);
      }
    }
  });

  test('the largest digest a table can have fits', () => {
    const owner = { id: 'x'.repeat(NODE_ID_BYTES_MAX), incarnation: Number.MAX_SAFE_INTEGER };
    const fence: Fence = {
      coordinatorId: owner.id,
      incarnation: owner.incarnation,
      epoch: Number.MAX_SAFE_INTEGER,
    };
    const entries = Array.from(
      { length: FRAGMENT_COUNT_MAX },
      (_, f) => [f, { kind: 'tombstone' as const, generation: Number.MAX_SAFE_INTEGER, fence }] as const,
    );
    const digest = CoordinatorMachine.digestOf(
      AssignmentTable.from(FRAGMENT_COUNT_MAX, fence.epoch, owner, entries),
    );
    const message: PlacementMessage = { kind: 'digest', from: owner.id, digest };
    assert.deepEqual(decoded(encodePlacementMessage(message)).message, message);
  });

  test(`a table of PLACEMENT_TABLE_BYTES_MAX (${PLACEMENT_TABLE_BYTES_MAX}) bytes is taken`, () => {
    const json = tableJson(encodeTable(sampleTable()));
    // JSON allows trailing white space: the same table, padded to the limit.
    const padded = Buffer.alloc(PLACEMENT_TABLE_BYTES_MAX, 0x20);
    padded.set(json);
    const { message, table } = decoded(wire({ kind: CHANGES, tableJson: padded }));
    assert.deepEqual(message, { kind: 'changes', from: 'n-a', table: encodeTable(sampleTable()) });
    assert.equal(table?.describe(), sampleTable().describe());
  });
});

describe('malformed placement messages are refused with a reason', () => {
  test('an envelope that does not decode, or carries no placement message', () => {
    const bytes = encodePlacementMessage(EXAMPLES[2] as PlacementMessage);
    assertRefused(bytes.subarray(0, bytes.length - 3), /undecodable envelope: /);
    assertRefused(encodeEnvelope({ sessionReset: { fragment: 3 } } as Envelope), /no placement message/);
  });

  test('an unknown kind', () => {
    assertRefused(wire({ kind: 0 }), /unknown kind 0$/);
    assertRefused(wire({ kind: 9 }), /unknown kind 9$/);
  });

  test('a sender that is not a node id', () => {
    assertRefused(wire({ from: '' }), /sender is not a node id/);
    assertRefused(wire({ from: 'x'.repeat(NODE_ID_BYTES_MAX + 1) }), /sender is not a node id/);
    decoded(wire({ from: 'x'.repeat(NODE_ID_BYTES_MAX) }));
  });

  test('an epoch or incarnation past the safe integers', () => {
    const past = /incarnation or epoch past the safe integers/;
    assertRefused(wire({ kind: 1, epoch: '9007199254740992', incarnation: 1 }), past);
    assertRefused(wire({ kind: 1, epoch: 2, incarnation: '18446744073709551615' }), past);
    assertRefused(
      wire({ kind: REPORT, epoch: '9007199254740992', tableJson: tableJson(encodeTable(sampleTable())) }),
      past,
    );
    decoded(wire({ kind: 1, epoch: '9007199254740991', incarnation: '9007199254740991' }));
  });

  test('a report request that proposes no epoch', () => {
    assertRefused(wire({ kind: 1, epoch: 0, incarnation: 1 }), /a report request proposes no epoch/);
  });

  test('a ready for a fragment the cluster does not have, or at no generation', () => {
    assertRefused(
      wire({ kind: 6, fragment: FRAGMENTS, generation: 2 }),
      /ready names fragment 8 at generation 2/,
    );
    assertRefused(wire({ kind: 6, fragment: 1, generation: 0 }), /ready names fragment 1 at generation 0/);
    assertRefused(
      wire({ kind: 6, fragment: 1, generation: '9007199254740992' }),
      /past the safe integers|ready names/,
    );
    decoded(wire({ kind: 6, fragment: 1, generation: 1 }));
  });

  test('an ahead for a fragment the cluster does not have, or at no generation', () => {
    assertRefused(
      wire({ kind: 7, fragment: FRAGMENTS, generation: 2 }),
      /ahead names fragment 8 at generation 2/,
    );
    assertRefused(wire({ kind: 7, fragment: 1, generation: 0 }), /ahead names fragment 1 at generation 0/);
    decoded(wire({ kind: 7, fragment: 1, generation: 1 }));
  });

  test('lost copies of no node id', () => {
    assertRefused(wire({ kind: 8, incarnation: 5 }), /lost copies of no node id/);
    assertRefused(
      wire({ kind: 8, member: 'x'.repeat(NODE_ID_BYTES_MAX + 1), incarnation: 5 }),
      /lost copies of no node id/,
    );
    decoded(wire({ kind: 8, member: 'n-e', incarnation: 5 }));
  });

  test('an empty or overlong digest', () => {
    assertRefused(wire({ kind: 4, digest: '' }), /bad digest/);
    assertRefused(wire({ kind: 4, digest: 'x'.repeat(NODE_ID_BYTES_MAX + 81) }), /bad digest/);
  });

  test('a table that is not JSON', () => {
    for (const kind of [REPORT, CHANGES]) {
      assertRefused(wire({ kind, tableJson: Buffer.from('{"format": 1, ', 'utf8') }), /JSON/);
      assertRefused(wire({ kind }), /JSON/);
    }
  });

  test('a table the checked decoder refuses', () => {
    const table = encodeTable(sampleTable());
    assertRefused(
      wire({ kind: REPORT, tableJson: tableJson({ ...table, format: 99 }) }),
      /assignment table: format 99 is not 1/,
    );
    const outOfRange = { ...table, entries: [{ ...table.entries[0], fragment: FRAGMENTS }] };
    assertRefused(
      wire({ kind: CHANGES, tableJson: tableJson(outOfRange) }),
      new RegExp(`assignment table: entries\\[0\\]\\.fragment ${FRAGMENTS} is out of range`),
    );
    assertRefused(wire({ kind: CHANGES, tableJson: tableJson([1, 2]) }), /assignment table: not an object/);
  });

  test('a table of another fragment count than the cluster', () => {
    const bytes = encodePlacementMessage({
      kind: 'changes',
      from: 'n-a',
      table: encodeTable(sampleTable(16)),
    });
    assertRefused(bytes, /table of 16 fragments; this cluster has 8/);
    assert.equal(decoded(bytes, 16).table?.fragmentCount, 16);
  });

  test(`a table over PLACEMENT_TABLE_BYTES_MAX, before it is parsed`, () => {
    const json = tableJson(encodeTable(sampleTable()));
    // Valid JSON of a valid table, padded one byte past the limit: only the bound refuses it.
    const padded = Buffer.alloc(PLACEMENT_TABLE_BYTES_MAX + 1, 0x20);
    padded.set(json);
    for (const kind of [REPORT, CHANGES]) {
      assertRefused(
        wire({ kind, tableJson: padded }),
        new RegExp(
          `table of ${PLACEMENT_TABLE_BYTES_MAX + 1} bytes exceeds PLACEMENT_TABLE_BYTES_MAX \\(${PLACEMENT_TABLE_BYTES_MAX}\\)`,
        ),
      );
    }
  });
});
