// Membership messages on the peer wire (src/threads/membership-wire.ts): every message kind the
// core sends comes back deep-equal after encoding and decoding, the decoded objects pass the core's
// own input checks, and each malformed message is refused with a reason naming what is wrong.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import protobuf from 'protobufjs';
import {
  ERROR_MESSAGE_BYTES_MAX,
  MEMBER_ADDRESS_BYTES_MAX,
  MEMBERSHIP_MEMBERS_MAX,
  MEMBERSHIP_UPDATES_PER_MESSAGE_MAX,
  NODE_ID_BYTES_MAX,
} from '../../src/core/limits.js';
import {
  isIncarnation,
  isValidNodeId,
  isValidUpdate,
  type MembershipMessage,
  type MemberUpdate,
} from '../../src/core/membership-types.js';
import {
  decodeMembershipMessage,
  encodeMembershipMessage,
  type MemberUpdateWire,
} from '../../src/threads/membership-wire.js';
import { type Envelope, encodeEnvelope } from '../../src/threads/peer-messages.js';

const alive = (nodeId: string, incarnation = 1): Extract<MemberUpdate, { kind: 'alive' }> => ({
  kind: 'alive',
  nodeId,
  address: `${nodeId}.example:7000`,
  incarnation,
  state: 'Up',
});
const suspect = (nodeId: string, reporter: string): MemberUpdate => ({
  kind: 'suspect',
  nodeId,
  incarnation: 3,
  reporter,
});

/** One message of every kind, with every update kind and every self state among them. */
const EXAMPLES: MembershipMessage[] = [
  { kind: 'ping', from: 'a', seq: 1, target: 'b', updates: [alive('a'), suspect('c', 'a')] },
  { kind: 'ping', from: 'a', seq: 0, target: 'b', updates: [] },
  {
    kind: 'ack',
    from: 'b',
    seq: 1,
    updates: [{ kind: 'unreachable', nodeId: 'c', incarnation: 0, reporter: 'b' }],
  },
  { kind: 'nack', from: 'c', seq: 2 ** 32 + 5, updates: [] },
  { kind: 'ping-req', from: 'a', seq: 17, target: 'd', updates: [{ ...alive('a'), state: 'Joining' }] },
  {
    kind: 'gossip',
    from: 'ñode-é',
    updates: [
      { kind: 'down', nodeId: 'd', incarnation: 9, reporter: 'ñode-é' },
      { kind: 'removed', nodeId: 'e', incarnation: Number.MAX_SAFE_INTEGER, reporter: 'a' },
      { ...alive('f', 2), state: 'Leaving' },
      { ...alive('g', 4), state: 'Exiting', address: '' },
    ],
  },
  { kind: 'sync', from: 'a', reply: true, members: [alive('a'), alive('b', 2)] },
  { kind: 'sync', from: 'b', reply: false, members: [] },
  { kind: 'join-request', from: 'new', address: '[::1]:7001', incarnation: 0, withoutData: false },
  { kind: 'join-request', from: 'new', address: 'new.example:7001', incarnation: 12, withoutData: true },
  { kind: 'join-accept', from: 'seed', members: [alive('seed'), suspect('x', 'seed')] },
  { kind: 'refuse', from: 'seed', reason: 'removed from the cluster' },
  { kind: 'refuse', from: 'seed', reason: 'its lost copies are dropped first', retry: true },
];

function roundTrip(message: MembershipMessage): MembershipMessage {
  const decoded = decodeMembershipMessage(encodeMembershipMessage(message));
  assert.equal(decoded.kind, 'message', decoded.kind === 'malformed' ? decoded.reason : '');
  return (decoded as { message: MembershipMessage }).message;
}

/** The checks the core runs on what arrives (membership-types.ts), applied to a decoded message. */
function assertPassesCoreChecks(m: MembershipMessage): void {
  assert.ok(isValidNodeId(m.from));
  if ('seq' in m) assert.ok(isIncarnation(m.seq));
  if ('target' in m) assert.ok(isValidNodeId(m.target));
  if (m.kind === 'join-request') assert.ok(isIncarnation(m.incarnation) && typeof m.address === 'string');
  const updates = 'updates' in m ? m.updates : 'members' in m ? m.members : [];
  for (const u of updates) assert.ok(isValidUpdate(u), JSON.stringify(u));
}

function assertRefused(bytes: Uint8Array, reason: RegExp): void {
  const decoded = decodeMembershipMessage(bytes);
  assert.equal(decoded.kind, 'malformed');
  assert.match((decoded as { reason: string }).reason, /^malformed membership message: /);
  assert.match((decoded as { reason: string }).reason, reason);
}

/** A wire update for hand-built envelopes, with what `patch` changes. */
function wireUpdate(patch: Partial<MemberUpdateWire>): MemberUpdateWire {
  return { kind: 1, nodeId: 'b', incarnation: 1, address: 'b:7000', state: 2, reporter: '', ...patch };
}
const gossipOf = (updates: MemberUpdateWire[]): Uint8Array =>
  encodeEnvelope({ memberGossip: { from: 'a', updates } });

describe('membership messages round-trip', () => {
  test('every kind comes back deep-equal and passes the core input checks', () => {
    const kinds = new Set(EXAMPLES.map((m) => m.kind));
    assert.equal(kinds.size, 9, 'an example of each of the nine message kinds');
    for (const message of EXAMPLES) {
      const decoded = roundTrip(message);
      assert.deepEqual(decoded, message);
      assertPassesCoreChecks(decoded);
    }
  });

  test('values at their limits come back unchanged', () => {
    const longId = `${'é'.repeat(127)}x`; // 255 UTF-8 bytes
    assert.equal(Buffer.byteLength(longId), NODE_ID_BYTES_MAX);
    const updates = Array.from({ length: MEMBERSHIP_UPDATES_PER_MESSAGE_MAX }, (_, i) => ({
      ...alive(`${longId.slice(1)}${i}`),
      address: 'h'.repeat(MEMBER_ADDRESS_BYTES_MAX),
    }));
    const members = Array.from({ length: MEMBERSHIP_MEMBERS_MAX }, (_, i) => alive(`m${i}`, i));
    const atLimits: MembershipMessage[] = [
      { kind: 'ping', from: longId, seq: Number.MAX_SAFE_INTEGER, target: longId, updates },
      { kind: 'sync', from: longId, reply: true, members },
      { kind: 'join-accept', from: 'seed', members },
      {
        kind: 'join-request',
        from: longId,
        address: 'h'.repeat(MEMBER_ADDRESS_BYTES_MAX),
        incarnation: 2 ** 53 - 1,
        withoutData: true,
      },
      { kind: 'refuse', from: 'seed', reason: 'r'.repeat(ERROR_MESSAGE_BYTES_MAX) },
    ];
    for (const message of atLimits) assert.deepEqual(roundTrip(message), message);
  });

  test('arbitrary valid messages round-trip (fast-check, seed printed on failure)', () => {
    // Plain objects, as the decoder builds, so deep equality compares prototypes too.
    const plain = { noNullPrototype: true } as const;
    const nodeId = fc.string({ minLength: 1, maxLength: 40, unit: 'binary' });
    const count = fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER });
    const update: fc.Arbitrary<MemberUpdate> = fc.oneof(
      fc.record(
        {
          kind: fc.constant('alive' as const),
          nodeId,
          address: fc.string({ maxLength: 40 }),
          incarnation: count,
          state: fc.constantFrom('Joining' as const, 'Up' as const, 'Leaving' as const, 'Exiting' as const),
        },
        plain,
      ),
      fc.record(
        {
          kind: fc.constantFrom(
            'suspect' as const,
            'unreachable' as const,
            'down' as const,
            'removed' as const,
          ),
          nodeId,
          incarnation: count,
          reporter: nodeId,
        },
        plain,
      ),
    );
    const updates = fc.array(update, { maxLength: MEMBERSHIP_UPDATES_PER_MESSAGE_MAX });
    const message: fc.Arbitrary<MembershipMessage> = fc.oneof(
      fc.record(
        {
          kind: fc.constantFrom('ping' as const, 'ping-req' as const),
          from: nodeId,
          seq: count,
          target: nodeId,
          updates,
        },
        plain,
      ),
      fc.record(
        { kind: fc.constantFrom('ack' as const, 'nack' as const), from: nodeId, seq: count, updates },
        plain,
      ),
      fc.record({ kind: fc.constant('gossip' as const), from: nodeId, updates }, plain),
      fc.record(
        { kind: fc.constant('sync' as const), from: nodeId, reply: fc.boolean(), members: fc.array(update) },
        plain,
      ),
      fc.record(
        {
          kind: fc.constant('join-request' as const),
          from: nodeId,
          address: fc.string(),
          incarnation: count,
          withoutData: fc.boolean(),
        },
        plain,
      ),
      fc.record(
        { kind: fc.constant('join-accept' as const), from: nodeId, members: fc.array(update) },
        plain,
      ),
      fc.record({ kind: fc.constant('refuse' as const), from: nodeId, reason: fc.string() }, plain),
      fc.record(
        { kind: fc.constant('refuse' as const), from: nodeId, reason: fc.string(), retry: fc.constant(true) },
        plain,
      ),
    );
    fc.assert(
      fc.property(message, (m) => {
        const decoded = roundTrip(m);
        assert.deepEqual(decoded, m);
        assertPassesCoreChecks(decoded);
      }),
      { numRuns: 500 },
    );
  });

  test('encoding a message the core could not have sent is a bug, caught by an assertion', () => {
    assert.throws(
      () => encodeMembershipMessage({ kind: 'ack', from: 'a', seq: -1, updates: [] }),
      /AssertionFailure|ack\.seq -1 is not a safe integer/,
    );
    assert.throws(
      () => encodeMembershipMessage({ kind: 'gossip', from: '', updates: [] }),
      /gossip\.from is empty/,
    );
  });
});

describe('malformed membership messages are refused with their reason', () => {
  test('oversized update and member lists', () => {
    const updates = Array.from({ length: MEMBERSHIP_UPDATES_PER_MESSAGE_MAX + 1 }, () => wireUpdate({}));
    assertRefused(gossipOf(updates), /gossip\.updates holds 17, over 16/);
    assertRefused(
      encodeEnvelope({ memberPing: { from: 'a', seq: 1, target: 'b', updates } }),
      /ping\.updates holds 17, over 16/,
    );
    const members = Array.from({ length: MEMBERSHIP_MEMBERS_MAX + 1 }, (_, i) =>
      wireUpdate({ nodeId: `m${i}` }),
    );
    assertRefused(
      encodeEnvelope({ memberSync: { from: 'a', reply: false, members } }),
      /sync\.members holds 1025, over MEMBERSHIP_MEMBERS_MAX \(1024\)/,
    );
    assertRefused(
      encodeEnvelope({ memberJoinAccept: { from: 'a', members } }),
      /join-accept\.members holds 1025/,
    );
  });

  test('a bad or missing state, an unknown update kind, fields of another kind', () => {
    assertRefused(
      gossipOf([wireUpdate({ state: 0 })]),
      /gossip\.updates\[0\]\.state 0 is not a member's own state/,
    );
    assertRefused(gossipOf([wireUpdate({ state: 7 })]), /gossip\.updates\[0\]\.state 7/);
    assertRefused(
      gossipOf([wireUpdate({}), wireUpdate({ kind: 9 })]),
      /gossip\.updates\[1\]\.kind 9 is not a member update kind/,
    );
    assertRefused(gossipOf([wireUpdate({ kind: 0 })]), /\.kind 0 is not a member update kind/);
    assertRefused(gossipOf([wireUpdate({ reporter: 'c' })]), /updates\[0\] is alive but names a reporter/);
    assertRefused(
      gossipOf([wireUpdate({ kind: 2, reporter: 'c' })]),
      /updates\[0\] is suspect but carries an address or state/,
    );
    assertRefused(
      gossipOf([wireUpdate({ kind: 4, address: '', state: 0 })]),
      /updates\[0\]\.reporter is empty/,
    );
  });

  test('empty and overlong ids, addresses and reasons', () => {
    const overlong = 'x'.repeat(NODE_ID_BYTES_MAX + 1);
    assertRefused(
      gossipOf([wireUpdate({ nodeId: overlong })]),
      /updates\[0\]\.nodeId is 256 bytes, over 255/,
    );
    assertRefused(
      gossipOf([wireUpdate({ kind: 5, address: '', state: 0, reporter: overlong })]),
      /updates\[0\]\.reporter is 256 bytes/,
    );
    assertRefused(
      encodeEnvelope({ memberAck: { from: overlong, seq: 1, updates: [] } }),
      /ack\.from is 256 bytes/,
    );
    assertRefused(encodeEnvelope({ memberNack: { from: '', seq: 1, updates: [] } }), /nack\.from is empty/);
    assertRefused(
      encodeEnvelope({ memberPingReq: { from: 'a', seq: 1, target: overlong, updates: [] } }),
      /ping-req\.target is 256 bytes/,
    );
    assertRefused(
      encodeEnvelope({ memberPing: { from: 'a', seq: 1, target: '', updates: [] } }),
      /ping\.target is empty/,
    );
    const address = 'h'.repeat(MEMBER_ADDRESS_BYTES_MAX + 1);
    assertRefused(gossipOf([wireUpdate({ address })]), /updates\[0\]\.address is 262 bytes, over 261/);
    assertRefused(
      encodeEnvelope({ memberJoinRequest: { from: 'n', address, incarnation: 1 } }),
      /join-request\.address is 262 bytes/,
    );
    assertRefused(
      encodeEnvelope({ memberRefuse: { from: 'a', reason: 'r'.repeat(ERROR_MESSAGE_BYTES_MAX + 1) } }),
      /refuse\.reason is 1025 bytes, over 1024/,
    );
  });

  test('incarnations and seqs past 2^53 or negative on the wire', () => {
    assertRefused(
      gossipOf([wireUpdate({ incarnation: '9007199254740992' })]),
      /updates\[0\]\.incarnation 9007199254740992 is not a safe integer/,
    );
    assertRefused(
      encodeEnvelope({ memberAck: { from: 'a', seq: '18446744073709551615', updates: [] } }),
      /ack\.seq 18446744073709551615 is not a safe integer/,
    );
    // A peer writing -1 as an int64 sends ten bytes of ones: as a uint64 that is 2^64 − 1.
    const joinRequest = protobuf.Writer.create()
      .uint32((1 << 3) | 2)
      .string('n');
    joinRequest.uint32((3 << 3) | 0).int64(-1);
    const envelope = protobuf.Writer.create()
      .uint32((22 << 3) | 2)
      .bytes(joinRequest.finish())
      .finish();
    assertRefused(envelope, /join-request\.incarnation 18446744073709551615 is not a safe integer/);
  });

  test('every truncation of a valid message is refused', () => {
    for (const message of EXAMPLES) {
      const bytes = encodeMembershipMessage(message);
      for (let length = 0; length < bytes.length; length++) {
        const decoded = decodeMembershipMessage(bytes.subarray(0, length));
        assert.equal(decoded.kind, 'malformed', `${message.kind} cut to ${length} of ${bytes.length} bytes`);
      }
    }
    const ping = encodeMembershipMessage(EXAMPLES[0] as MembershipMessage);
    assertRefused(ping.subarray(0, ping.length - 3), /undecodable envelope: /);
    assertRefused(new Uint8Array(0), /no membership message/);
  });

  test('an envelope without a membership message, or with two', () => {
    assertRefused(encodeEnvelope({ sessionReset: { fragment: 3 } } as Envelope), /no membership message/);
    const two = Buffer.concat([
      encodeEnvelope({ memberGossip: { from: 'a', updates: [] } }),
      encodeEnvelope({ memberRefuse: { from: 'a', reason: 'r' } }),
    ]);
    assertRefused(two, /memberGossip, memberRefuse in one envelope/);
  });
});
