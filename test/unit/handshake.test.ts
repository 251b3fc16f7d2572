// Peer-mesh handshake (spec §4.5): challenge-bound HelloAuth, Hello validation, connection rank and
// the per-connection state machine.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { test } from 'node:test';
import {
  authTag,
  CAPABILITY_FRAGMENT_ABSENT,
  CAPABILITY_LOST_COPIES,
  CAPABILITY_PUBSUB,
  CAPABILITY_QUERY_PAGES,
  CAPABILITY_SCAN,
  compareRank,
  connectionRank,
  freshHello,
  type HandshakeAction,
  HandshakeMachine,
  type Hello,
  handshakeTranscript,
  LOCAL_CAPABILITIES,
  likelyDifference,
  REQUIRED_WIRE_CAPABILITIES,
  validatePeerHello,
  verifyAuthTag,
  WIRE_PROTOCOL_VERSION,
} from '../../src/core/handshake.js';

const SECRET = Buffer.from('secret', 'utf8');
const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');

function hello(nodeId: string, fill: number, overrides: Partial<Hello> = {}): Hello {
  return {
    nodeId,
    authTag: new Uint8Array(0),
    minProtocolVersion: 3,
    maxProtocolVersion: 3,
    capabilities: 127,
    challenge: new Uint8Array(32).fill(fill),
    ...overrides,
  };
}

// The golden pair of the seed's vectors.
const DIALER = hello('dialer', 0x01);
const LISTENER = hello('listener', 0x02);

test('constants match the seed', () => {
  assert.equal(WIRE_PROTOCOL_VERSION, 3);
  assert.equal(REQUIRED_WIRE_CAPABILITIES, 0x7f);
  assert.equal(LOCAL_CAPABILITIES, 0x1eff);
  assert.equal(LOCAL_CAPABILITIES & CAPABILITY_SCAN, CAPABILITY_SCAN);
  assert.equal(LOCAL_CAPABILITIES & CAPABILITY_FRAGMENT_ABSENT, CAPABILITY_FRAGMENT_ABSENT);
  assert.equal(LOCAL_CAPABILITIES & CAPABILITY_LOST_COPIES, CAPABILITY_LOST_COPIES);
  assert.equal(LOCAL_CAPABILITIES & CAPABILITY_PUBSUB, CAPABILITY_PUBSUB);
  assert.equal(LOCAL_CAPABILITIES & CAPABILITY_QUERY_PAGES, 0);
});

test('golden vectors: both provers’ tags and the transcript hash', () => {
  assert.equal(
    hex(authTag(SECRET, true, DIALER, LISTENER)),
    'bf1f1d4d7d3f00cdb1779c3b07e6d2423e277edf4299f97d76b12a009e30a789',
  );
  assert.equal(
    hex(authTag(SECRET, false, DIALER, LISTENER)),
    '2c559f59039bfd7b1fcff6a3a2485436ceafe30e54dda01976f0ae1064624388',
  );
  const transcriptHash = createHash('sha256').update(handshakeTranscript(DIALER, LISTENER)).digest();
  assert.equal(hex(transcriptHash), '9727cd8af4115a169d5a56bde17a0903425baae9bca3664ca830f3b4cc06728b');
  assert.equal(hex(connectionRank(DIALER, LISTENER).transcriptId), hex(transcriptHash));
});

test('transcript capabilities AND is done over 64 bits', () => {
  // 2^40 | 1 on both sides: a number `&` would drop bit 40.
  const caps = 2 ** 40 + 1;
  const t = handshakeTranscript(hello('a', 1, { capabilities: caps }), hello('b', 2, { capabilities: caps }));
  assert.equal(t.readBigUInt64BE(t.length - 8), BigInt(caps));
  assert.equal(t.readUInt32BE(t.length - 12), 3);
});

test('verifyAuthTag accepts the right tag and refuses every tampered variant', () => {
  const dialerTag = authTag(SECRET, true, DIALER, LISTENER);
  const listenerTag = authTag(SECRET, false, DIALER, LISTENER);
  assert.equal(verifyAuthTag(SECRET, true, DIALER, LISTENER, dialerTag), true);
  assert.equal(verifyAuthTag(SECRET, false, DIALER, LISTENER, listenerTag), true);

  const cases: [string, boolean][] = [
    ['different secret', verifyAuthTag(Buffer.from('secreT'), true, DIALER, LISTENER, dialerTag)],
    ['31-byte truncated tag', verifyAuthTag(SECRET, true, DIALER, LISTENER, dialerTag.subarray(0, 31))],
    ['33 zero bytes', verifyAuthTag(SECRET, true, DIALER, LISTENER, new Uint8Array(33))],
    ['dialer tag checked as listener', verifyAuthTag(SECRET, false, DIALER, LISTENER, dialerTag)],
  ];
  const flipped = Uint8Array.from(LISTENER.challenge);
  flipped[17] ^= 0x04;
  cases.push([
    'listener challenge with one bit flipped',
    verifyAuthTag(SECRET, true, DIALER, { ...LISTENER, challenge: flipped }, dialerTag),
  ]);
  cases.push([
    'dialer capabilities XOR 1',
    verifyAuthTag(SECRET, true, { ...DIALER, capabilities: DIALER.capabilities ^ 1 }, LISTENER, dialerTag),
  ]);
  // Reflection: a listener-role tag computed with the Hellos swapped is what a dialer would get by
  // bouncing the listener's own challenge back at it.
  const reflected = authTag(SECRET, false, LISTENER, DIALER);
  cases.push(['reflected tag', verifyAuthTag(SECRET, false, DIALER, LISTENER, reflected)]);
  for (const [name, ok] of cases) assert.equal(ok, false, name);
});

test('without a secret the tag is empty, and only an empty tag is accepted', () => {
  const tag = authTag(undefined, true, DIALER, LISTENER);
  assert.equal(tag.length, 0);
  assert.equal(verifyAuthTag(undefined, true, DIALER, LISTENER, tag), true);
  assert.equal(
    verifyAuthTag(undefined, true, DIALER, LISTENER, authTag(SECRET, true, DIALER, LISTENER)),
    false,
  );
  // And a secret holder refuses a peer that sends no proof.
  assert.equal(verifyAuthTag(SECRET, true, DIALER, LISTENER, new Uint8Array(0)), false);
});

test('validatePeerHello reports the first failing rule, in the seed’s order', () => {
  const ok = hello('peer', 0x07);
  assert.equal(validatePeerHello('local', 'peer', ok), undefined);
  assert.equal(validatePeerHello('local', undefined, ok), undefined);
  // Extra capabilities beyond the required set are fine, and so is a range around version 3.
  const wide = { ...ok, minProtocolVersion: 1, maxProtocolVersion: 9, capabilities: 0x1ff };
  assert.equal(validatePeerHello('local', 'peer', wide), undefined);

  // Each row also breaks every later rule, so the expected reason proves the order.
  const broken = {
    authTag: new Uint8Array(1),
    challenge: new Uint8Array(32),
    minProtocolVersion: 0,
    capabilities: 0,
  };
  const rows: [string, string | undefined, Hello, string][] = [
    ['local', undefined, { ...ok, ...broken, nodeId: '' }, 'peer node_id is empty or exceeds 255 bytes'],
    [
      'local',
      undefined,
      { ...ok, ...broken, nodeId: 'é'.repeat(128) },
      'peer node_id is empty or exceeds 255 bytes',
    ],
    ['local', 'other', { ...ok, ...broken, nodeId: 'local' }, 'peer claimed the local node_id'],
    ['local', 'other', { ...ok, ...broken }, 'peer identity did not match the configured member'],
    ['local', 'peer', { ...ok, ...broken }, 'peer used the retired replayable Hello auth_tag'],
    [
      'local',
      'peer',
      { ...ok, ...broken, authTag: new Uint8Array(0) },
      'peer challenge is missing, invalid, or all-zero',
    ],
    [
      'local',
      'peer',
      { ...ok, minProtocolVersion: 0, capabilities: 0, challenge: new Uint8Array(31).fill(1) },
      'peer challenge is missing, invalid, or all-zero',
    ],
    [
      'local',
      'peer',
      { ...ok, minProtocolVersion: 0, capabilities: 0 },
      'peer wire-version range is incompatible',
    ],
    [
      'local',
      'peer',
      { ...ok, minProtocolVersion: 4, maxProtocolVersion: 4 },
      'peer wire-version range is incompatible',
    ],
    [
      'local',
      'peer',
      { ...ok, minProtocolVersion: 1, maxProtocolVersion: 2 },
      'peer wire-version range is incompatible',
    ],
    ['local', 'peer', { ...ok, capabilities: 0x7e }, 'peer omitted required wire capabilities'],
    ['local', 'peer', { ...ok, capabilities: 0x80 }, 'peer omitted required wire capabilities'],
  ];
  for (const [localId, expectedPeerId, h, reason] of rows) {
    assert.equal(validatePeerHello(localId, expectedPeerId, h), reason, `${reason} (${h.nodeId})`);
  }
  // 255 bytes exactly is allowed.
  assert.equal(validatePeerHello('local', undefined, { ...ok, nodeId: 'x'.repeat(255) }), undefined);
});

test('freshHello advertises version 3 and local capabilities with no legacy tag', () => {
  const challenge = new Uint8Array(32).fill(9);
  const h = freshHello('n1', challenge);
  assert.deepEqual(h, {
    nodeId: 'n1',
    authTag: new Uint8Array(0),
    minProtocolVersion: 3,
    maxProtocolVersion: 3,
    capabilities: LOCAL_CAPABILITIES,
    challenge,
  });
  assert.equal(validatePeerHello('n2', 'n1', h), undefined);
  // A bad challenge is a driver bug, not a peer fault.
  assert.throws(() => freshHello('n1', new Uint8Array(32)), /AssertionFailure|challenge/);
  assert.throws(() => freshHello('n1', new Uint8Array(16).fill(1)), /AssertionFailure|challenge/);
});

test('rank prefers the smaller id dialing; the transcript id depends on the challenges', () => {
  const a = hello('a', 0x01);
  const b = hello('b', 0x02);
  const aToB = connectionRank(a, b);
  const bToA = connectionRank(b, a);
  assert.equal(aToB.preferredDirection, true);
  assert.equal(bToA.preferredDirection, false);
  assert.ok(compareRank(aToB, bToA) > 0);
  assert.ok(compareRank(bToA, aToB) < 0);
  assert.equal(compareRank(aToB, connectionRank(a, b)), 0);

  const again = connectionRank(a, { ...b, challenge: new Uint8Array(32).fill(0x03) });
  assert.notEqual(hex(again.transcriptId), hex(aToB.transcriptId));
  // Same direction: the transcript id alone decides, and the order is strict.
  assert.notEqual(compareRank(again, aToB), 0);
  assert.equal(Math.sign(compareRank(again, aToB)), -Math.sign(compareRank(aToB, again)));
  // Byte-wise UTF-8 order, not UTF-16: U+FF61 (EF BD A1) sorts before U+1F600 (F0 9F 98 80), though
  // its UTF-16 code unit is larger than the surrogate 0xD83D.
  assert.equal(connectionRank(hello('\uff61', 1), hello('\u{1f600}', 2)).preferredDirection, true);
});

// --- the state machine --------------------------------------------------------------------------

interface Pair {
  dialer: HandshakeMachine;
  listener: HandshakeMachine;
}

interface PairOptions {
  secret: Uint8Array | undefined;
  expectedPeerId?: string;
  dialerHello?: Hello;
  listenerHello?: Hello;
}

function pair(o: PairOptions = { secret: SECRET }): Pair {
  const dialer = new HandshakeMachine({
    localId: 'dialer',
    secret: o.secret,
    weDialed: true,
    expectedPeerId: o.expectedPeerId ?? 'listener',
    localHello: o.dialerHello ?? freshHello('dialer', new Uint8Array(32).fill(0x01)),
  });
  const listener = new HandshakeMachine({
    localId: 'listener',
    secret: o.secret,
    weDialed: false,
    expectedPeerId: undefined,
    localHello: o.listenerHello ?? freshHello('listener', new Uint8Array(32).fill(0x02)),
  });
  return { dialer, listener };
}

/** Delivers each action that carries a frame to `to`, returning what `to` answers. */
function deliver(actions: HandshakeAction[], to: HandshakeMachine): HandshakeAction[] {
  const out: HandshakeAction[] = [];
  for (const a of actions) {
    if (a.kind === 'send-hello') out.push(...to.onHello(a.hello));
    else if (a.kind === 'send-auth') out.push(...to.onHelloAuth(a.authTag));
  }
  return out;
}

function only<K extends HandshakeAction['kind']>(
  actions: HandshakeAction[],
  kind: K,
): Extract<HandshakeAction, { kind: K }> {
  assert.equal(actions.length, 1, JSON.stringify(actions));
  assert.equal(actions[0].kind, kind);
  return actions[0] as Extract<HandshakeAction, { kind: K }>;
}

function handshake(p: Pair): [HandshakeAction[], HandshakeAction[]] {
  // Both send Hello at once; each answers the other's Hello with its HelloAuth.
  const fromListener = deliver(p.dialer.start(), p.listener);
  const fromDialer = deliver(p.listener.start(), p.dialer);
  only(fromListener, 'send-auth');
  only(fromDialer, 'send-auth');
  assert.equal(p.dialer.state, 'awaiting-auth');
  assert.equal(p.listener.state, 'awaiting-auth');
  return [deliver(fromDialer, p.listener), deliver(fromListener, p.dialer)];
}

for (const secret of [SECRET, undefined]) {
  test(`two machines establish with the same rank (${secret ? 'secret' : 'no secret'})`, () => {
    const p = pair({ secret });
    const [atListener, atDialer] = handshake(p);
    const l = only(atListener, 'established');
    const d = only(atDialer, 'established');
    assert.equal(d.peerId, 'listener');
    assert.equal(l.peerId, 'dialer');
    assert.equal(d.peerCapabilities, LOCAL_CAPABILITIES);
    assert.equal(compareRank(d.rank, l.rank), 0);
    assert.equal(d.rank.preferredDirection, true); // "dialer" < "listener"
    assert.equal(p.dialer.state, 'established');
    assert.equal(p.listener.state, 'established');
    assert.equal(p.dialer.peerId, 'listener');
    assert.equal(p.listener.peerId, 'dialer');
    // Application frames now pass; a late Hello is refused.
    assert.deepEqual(p.dialer.onOtherFrame(), []);
    assert.equal(
      only(p.dialer.onHello(hello('listener', 2)), 'fail').reason,
      'duplicate or post-handshake Hello',
    );
  });
}

test('the machine sends the golden tags', () => {
  const p = pair({ secret: SECRET, dialerHello: DIALER, listenerHello: LISTENER });
  const fromListener = only(p.listener.onHello(only(p.dialer.start(), 'send-hello').hello), 'send-auth');
  const fromDialer = only(p.dialer.onHello(only(p.listener.start(), 'send-hello').hello), 'send-auth');
  assert.equal(hex(fromListener.authTag), '2c559f59039bfd7b1fcff6a3a2485436ceafe30e54dda01976f0ae1064624388');
  assert.equal(hex(fromDialer.authTag), 'bf1f1d4d7d3f00cdb1779c3b07e6d2423e277edf4299f97d76b12a009e30a789');
});

test('a duplicate Hello fails the connection, and later events do nothing', () => {
  const p = pair();
  const peerHello = only(p.listener.start(), 'send-hello').hello;
  p.dialer.start();
  only(p.dialer.onHello(peerHello), 'send-auth');
  assert.equal(only(p.dialer.onHello(peerHello), 'fail').reason, 'duplicate or post-handshake Hello');
  assert.equal(p.dialer.state, 'failed');
  assert.equal(p.dialer.peerId, undefined);
  assert.deepEqual(p.dialer.onHello(peerHello), []);
  assert.deepEqual(p.dialer.onHelloAuth(new Uint8Array(32)), []);
  assert.deepEqual(p.dialer.onOtherFrame(), []);
});

test('a HelloAuth before Hello fails', () => {
  const p = pair();
  p.dialer.start();
  const tag = authTag(SECRET, false, DIALER, LISTENER);
  assert.equal(only(p.dialer.onHelloAuth(tag), 'fail').reason, 'out-of-order or duplicate HelloAuth');
  assert.equal(p.dialer.state, 'failed');
});

test('an application frame before establishment fails, in either pre-established state', () => {
  const p = pair();
  p.dialer.start();
  assert.equal(
    only(p.dialer.onOtherFrame(), 'fail').reason,
    'rejecting application frame before handshake completion',
  );
  const q = pair();
  q.listener.start();
  only(q.listener.onHello(hello('dialer', 1)), 'send-auth');
  assert.equal(
    only(q.listener.onOtherFrame(), 'fail').reason,
    'rejecting application frame before handshake completion',
  );
});

test('a HelloAuth replayed from an earlier session fails', () => {
  // An attacker recorded the listener's proof from a session with other challenges and replays it
  // against a dialer whose fresh challenge differs.
  const earlier = authTag(SECRET, false, hello('dialer', 0x0a), hello('listener', 0x0b));
  const p = pair();
  p.dialer.start();
  only(p.dialer.onHello(hello('listener', 0x0b)), 'send-auth');
  assert.equal(only(p.dialer.onHelloAuth(earlier), 'fail').reason, 'challenge-bound handshake proof failed');
  assert.equal(p.dialer.state, 'failed');
  assert.equal(p.dialer.peerId, undefined);
});

test('a reflected HelloAuth (our own tag bounced back) fails', () => {
  const p = pair();
  p.dialer.start();
  const ours = only(p.dialer.onHello(hello('listener', 0x02)), 'send-auth');
  assert.equal(
    only(p.dialer.onHelloAuth(ours.authTag), 'fail').reason,
    'challenge-bound handshake proof failed',
  );
});

test('a peer without the secret is refused by a secret holder, and vice versa', () => {
  const d = pair({ secret: SECRET }).dialer;
  const l = pair({ secret: undefined }).listener;
  const [atListener, atDialer] = handshake({ dialer: d, listener: l });
  assert.equal(only(atListener, 'fail').reason, 'challenge-bound handshake proof failed');
  assert.equal(only(atDialer, 'fail').reason, 'challenge-bound handshake proof failed');
  // The log says what to look at.
  assert.equal(only(atListener, 'fail').differs, 'cluster secret differs');
  assert.equal(only(atDialer, 'fail').differs, 'cluster secret differs');
});

test('a failed handshake names what most likely differs between the two nodes', () => {
  assert.equal(likelyDifference('challenge-bound handshake proof failed'), 'cluster secret differs');
  for (const reason of [
    'peer identity did not match the configured member',
    'peer claimed the local node_id',
  ]) {
    assert.equal(likelyDifference(reason), 'node id differs from what --peers names for this address');
  }
  for (const reason of [
    'peer wire-version range is incompatible',
    'peer omitted required wire capabilities',
  ]) {
    assert.match(likelyDifference(reason), /^release or protocol differs/);
  }
});

test('an invalid peer Hello fails with its validation reason', () => {
  const p = pair({ secret: SECRET, expectedPeerId: 'listener' });
  p.dialer.start();
  assert.equal(
    only(p.dialer.onHello(hello('impostor', 2)), 'fail').reason,
    'peer identity did not match the configured member',
  );
  const q = pair();
  q.listener.start();
  assert.equal(
    only(q.listener.onHello(hello('dialer', 1, { authTag: new Uint8Array(32).fill(1) })), 'fail').reason,
    'peer used the retired replayable Hello auth_tag',
  );
});
