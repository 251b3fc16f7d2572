// Admin requests and replies on the peer wire (src/threads/admin-wire.ts, proto AdminMessage, field
// 26 of Envelope): each kind comes back deep-equal; each malformed or oversized message, hand-built
// as a faulty or hostile peer would send it, is refused with a reason naming what is wrong; what a
// sender cannot fit is refused before it travels (a request) or replaced by a Failed answer (a reply).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  ADMIN_BODY_BYTES_MAX,
  ADMIN_PATH_BYTES_MAX,
  ADMIN_RESULT_BYTES_MAX,
  ERROR_MESSAGE_BYTES_MAX,
} from '../../src/core/limits.js';
import { EnvelopeField, peekEnvelope } from '../../src/core/peer-frame.js';
import {
  ADMIN_STATUSES,
  type AdminMessage,
  type AdminMessageWire,
  decodeAdminMessage,
  encodeAdminReply,
  encodeAdminRequest,
} from '../../src/threads/admin-wire.js';
import { encodeEnvelope } from '../../src/threads/peer-messages.js';

const CHANGE = 1;
const REPLY = 3;

function decoded(bytes: Uint8Array): AdminMessage {
  const result = decodeAdminMessage(bytes);
  assert.equal(result.kind, 'message', result.kind === 'malformed' ? result.reason : '');
  return (result as Extract<typeof result, { kind: 'message' }>).message;
}

function assertRefused(bytes: Uint8Array, reason: RegExp): void {
  const result = decodeAdminMessage(bytes);
  assert.equal(result.kind, 'malformed', 'decoded a malformed message');
  const text = (result as { reason: string }).reason;
  assert.match(text, /^malformed admin message: /);
  assert.match(text, reason);
}

/** A hand-built envelope: an empty reply with id 7, with what `patch` changes. */
function wire(patch: Partial<AdminMessageWire>): Uint8Array {
  return encodeEnvelope({
    admin: {
      kind: REPLY,
      id: 7,
      path: '',
      bodyJson: new Uint8Array(0),
      status: 'Ok',
      message: '',
      resultJson: new Uint8Array(0),
      ...patch,
    },
  });
}

const json = (value: unknown): Uint8Array => Buffer.from(JSON.stringify(value), 'utf8');

function request(id: number, req: Parameters<typeof encodeAdminRequest>[1]): Uint8Array {
  const bytes = encodeAdminRequest(id, req);
  assert.ok(typeof bytes !== 'string', String(bytes));
  return bytes;
}

describe('admin messages round-trip', () => {
  test('a change, a metrics request and a reply come back deep-equal, in envelope field 26', () => {
    const examples: AdminMessage[] = [
      {
        kind: 'request',
        id: 1,
        request: { kind: 'change', path: '/cluster/remove', body: { node: 'ñode-é' } },
      },
      { kind: 'request', id: 0xffff_ffff, request: { kind: 'change', path: '/cluster/plan', body: {} } },
      { kind: 'request', id: 2, request: { kind: 'metrics' } },
      { kind: 'request', id: 5, request: { kind: 'handover', fragment: 0, generation: 1, continuity: 0 } },
      {
        kind: 'request',
        id: 6,
        request: { kind: 'handover', fragment: 16_383, generation: 2 ** 40, continuity: 2 ** 31 - 1 },
      },
      {
        kind: 'request',
        id: 7,
        request: { kind: 'absorb', fragment: 0, generation: 1, verifiedSuffices: false },
      },
      {
        kind: 'request',
        id: 8,
        request: { kind: 'absorb', fragment: 16_383, generation: 2 ** 40, verifiedSuffices: true },
      },
      {
        kind: 'reply',
        id: 3,
        answer: { status: 'NotFound', message: 'no member x', result: { node: 'x', executedBy: 'a' } },
      },
      { kind: 'reply', id: 4, answer: { status: 'DeadlineExceeded', message: '', result: {} } },
    ];
    for (const message of examples) {
      const bytes =
        message.kind === 'request'
          ? request(message.id, message.request)
          : encodeAdminReply(message.id, message.answer);
      assert.equal(peekEnvelope(bytes)?.field, EnvelopeField.Admin);
      assert.deepEqual(decoded(bytes), message);
    }
  });

  test('every status name crosses as itself', () => {
    assert.equal(ADMIN_STATUSES.length, 7);
    for (const status of ADMIN_STATUSES) {
      const back = decoded(encodeAdminReply(9, { status, message: status, result: {} }));
      assert.equal(back.kind === 'reply' && back.answer.status, status);
    }
  });
});

describe('what a sender cannot fit', () => {
  test('a request whose path or body is over its limit is refused before it travels', () => {
    const long = encodeAdminRequest(1, {
      kind: 'change',
      path: `/${'p'.repeat(ADMIN_PATH_BYTES_MAX)}`,
      body: {},
    });
    assert.match(String(long), /ADMIN_PATH_BYTES_MAX/);
    const big = encodeAdminRequest(1, {
      kind: 'change',
      path: '/cluster/plan',
      body: { pad: 'x'.repeat(ADMIN_BODY_BYTES_MAX) },
    });
    assert.match(String(big), /exceeds ADMIN_BODY_BYTES_MAX/);
  });

  test('a reply cuts its message to ERROR_MESSAGE_BYTES_MAX and answers Failed for a result over ADMIN_RESULT_BYTES_MAX', () => {
    const cut = decoded(
      encodeAdminReply(1, { status: 'Conflict', message: 'é'.repeat(ERROR_MESSAGE_BYTES_MAX), result: {} }),
    );
    assert.ok(cut.kind === 'reply');
    assert.equal(cut.answer.status, 'Conflict');
    assert.ok(Buffer.byteLength(cut.answer.message) <= ERROR_MESSAGE_BYTES_MAX);
    assert.ok(cut.answer.message.startsWith('éé'));

    const huge = decoded(
      encodeAdminReply(2, {
        status: 'Ok',
        message: 'plan',
        result: { pad: 'x'.repeat(ADMIN_RESULT_BYTES_MAX) },
      }),
    );
    assert.ok(huge.kind === 'reply');
    assert.equal(huge.id, 2);
    assert.equal(huge.answer.status, 'Failed');
    assert.match(
      huge.answer.message,
      /^the answer \(Ok\) has \d+ bytes of result, more than ADMIN_RESULT_BYTES_MAX/,
    );
    assert.deepEqual(huge.answer.result, {});
  });
});

describe('malformed admin messages are refused', () => {
  test('bytes that are no envelope, and an envelope without an admin message', () => {
    assertRefused(Buffer.from([0xd2, 0x01, 0x05, 0x08]), /undecodable envelope/);
    assertRefused(encodeEnvelope({ sessionReset: { fragment: 1 } }), /no admin message/);
  });

  test('an unknown kind, and a request id of 0', () => {
    assertRefused(wire({ kind: 0 }), /unknown kind 0/);
    assertRefused(wire({ kind: 6 }), /unknown kind 6/);
    assertRefused(wire({ kind: 9 }), /unknown kind 9/);
    assertRefused(wire({ id: 0 }), /request id must be at least 1/);
  });

  test('an absorb without a fragment, at no generation, or saying whether a verified copy suffices with no boolean', () => {
    const ABSORB = 5;
    for (const body of [
      {},
      { fragment: 1 },
      { fragment: -1, generation: 2 },
      { fragment: 1, generation: 0 },
      { fragment: 1, generation: 2, verifiedSuffices: 1 },
      { fragment: 1, generation: 2, verifiedSuffices: 'true' },
    ])
      assertRefused(
        wire({ kind: ABSORB, bodyJson: json(body) }),
        /an absorb names a fragment and a generation of at least 1, and whether a verified copy suffices/,
      );
    // A peer that does not say (an earlier version) asks for the whole copy: it checks no continuity.
    assert.deepEqual(decoded(wire({ kind: ABSORB, bodyJson: json({ fragment: 1, generation: 2 }) })), {
      kind: 'request',
      id: 7,
      request: { kind: 'absorb', fragment: 1, generation: 2, verifiedSuffices: false },
    });
    assertRefused(wire({ kind: ABSORB, bodyJson: Buffer.from('"x"') }), /body is not a JSON object/);
  });

  test('a handover without a fragment, at no generation, or with a continuity that is no count', () => {
    const HANDOVER = 4;
    for (const body of [
      {},
      { fragment: 1 },
      { fragment: -1, generation: 2 },
      { fragment: 1, generation: 0 },
      { fragment: 1.5, generation: 2 },
      { fragment: 1, generation: 2, continuity: -1 },
      { fragment: 1, generation: 2, continuity: '7' },
    ])
      assertRefused(
        wire({ kind: HANDOVER, bodyJson: json(body) }),
        /a handover names a fragment, a generation of at least 1 and a continuity/,
      );
    // A peer that names no continuity (an earlier version) asks for a plain handover.
    assert.deepEqual(decoded(wire({ kind: HANDOVER, bodyJson: json({ fragment: 1, generation: 2 }) })), {
      kind: 'request',
      id: 7,
      request: { kind: 'handover', fragment: 1, generation: 2, continuity: 0 },
    });
    assertRefused(wire({ kind: HANDOVER, bodyJson: Buffer.from('[1]') }), /body is not a JSON object/);
  });

  test('a change whose path is not a path or too long, or whose body is no JSON object or too large', () => {
    assertRefused(wire({ kind: CHANGE, path: 'cluster/plan' }), /path must start with \//);
    assertRefused(
      wire({ kind: CHANGE, path: `/${'p'.repeat(ADMIN_PATH_BYTES_MAX)}` }),
      /ADMIN_PATH_BYTES_MAX/,
    );
    assertRefused(
      wire({ kind: CHANGE, path: '/cluster/plan', bodyJson: Buffer.from('{"node":') }),
      /body is not JSON/,
    );
    assertRefused(
      wire({ kind: CHANGE, path: '/cluster/plan', bodyJson: json(['a']) }),
      /body is not a JSON object/,
    );
    assertRefused(
      wire({ kind: CHANGE, path: '/cluster/plan', bodyJson: json(null) }),
      /body is not a JSON object/,
    );
    const big = json({ pad: 'x'.repeat(ADMIN_BODY_BYTES_MAX) });
    assertRefused(
      wire({ kind: CHANGE, path: '/cluster/plan', bodyJson: big }),
      new RegExp(`body of ${big.length} bytes exceeds`),
    );
  });

  test('a reply with a status that is no status name, a message too long, or a result that is no JSON object', () => {
    assertRefused(wire({ status: 'ok' }), /unknown status "ok"/);
    assertRefused(wire({ status: '' }), /unknown status ""/);
    assertRefused(wire({ status: 'Failed: 500' }), /unknown status/);
    assertRefused(wire({ message: 'm'.repeat(ERROR_MESSAGE_BYTES_MAX + 1) }), /ERROR_MESSAGE_BYTES_MAX/);
    assertRefused(wire({ resultJson: json(3) }), /result is not a JSON object/);
    assertRefused(wire({ resultJson: Buffer.from('nope') }), /result is not JSON/);
  });

  test('a result over ADMIN_RESULT_BYTES_MAX, and an envelope over the largest an admin message takes', () => {
    const over = Buffer.alloc(ADMIN_RESULT_BYTES_MAX + 1, 0x20);
    assertRefused(wire({ resultJson: over }), new RegExp(`result of ${over.length} bytes exceeds`));
    const far = Buffer.alloc(ADMIN_RESULT_BYTES_MAX + ADMIN_BODY_BYTES_MAX + 4096, 0x20);
    assertRefused(wire({ resultJson: far }), /bytes exceed the \d+ an admin message may take/);
  });
});
