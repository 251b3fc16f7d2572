// Peer-mesh handshake (spec §4.5), as a pure state machine: no sockets, timers, clock or randomness.
// The driver makes the challenge (crypto.randomBytes), sends the Hello and HelloAuth frames the
// machine asks for, and closes the connection on a 'fail' action with its reason logged.
//
// Both sides send Hello at once. Each then proves knowledge of the cluster secret with an HMAC over a
// transcript that binds both Hellos — both fresh challenges included — and the prover's role, so a
// tag can be neither replayed from an earlier session nor reflected back at its sender. The seed's
// Hello `auth_tag` (an HMAC over the sender's own Hello alone, hence replayable) is retired and must
// arrive empty.

import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import { assert } from './assert.js';
import { NODE_ID_BYTES_MAX } from './limits.js';

/** The only wire version we speak; a peer's [min, max] range must contain it. */
export const WIRE_PROTOCOL_VERSION = 3;

export const CAPABILITY_MUTATION_RESULTS = 1 << 0;
export const CAPABILITY_DURABILITY_ACKS = 1 << 1;
export const CAPABILITY_CORRELATED_RECONCILIATION = 1 << 2;
export const CAPABILITY_CHALLENGE_AUTH = 1 << 3;
export const CAPABILITY_PAGED_ANTI_ENTROPY = 1 << 4;
export const CAPABILITY_BYTE_BOUNDED_BATCHES = 1 << 5;
export const CAPABILITY_STABLE_DURABILITY_ACKS = 1 << 6;
export const CAPABILITY_SCAN = 1 << 7;
export const CAPABILITY_QUERY_PAGES = 1 << 8;
/** Tessera's: the peer takes Pub/Sub messages (PublishBatch) for its subscribers. */
export const CAPABILITY_PUBSUB = 1 << 9;
/** Tessera's: the peer takes the ports its peers' workers serve clients on (ClientPorts). */
export const CAPABILITY_CLIENT_PORTS = 1 << 10;
/** Tessera's: the peer takes FragmentAbsent, the answer of a node that holds no copy of a fragment. */
export const CAPABILITY_FRAGMENT_ABSENT = 1 << 11;
/** Tessera's: the peer, as placement coordinator, takes a seed's PLACEMENT_LOST_COPIES. */
export const CAPABILITY_LOST_COPIES = 1 << 12;

/** Bits 0–6: a peer without any of them cannot take part in replication at wire version 3. */
export const REQUIRED_WIRE_CAPABILITIES = 0x7f;
/** What we advertise. Query pages (bit 8) are not implemented, so they are not claimed. */
export const LOCAL_CAPABILITIES =
  REQUIRED_WIRE_CAPABILITIES |
  CAPABILITY_SCAN |
  CAPABILITY_PUBSUB |
  CAPABILITY_CLIENT_PORTS |
  CAPABILITY_FRAGMENT_ABSENT |
  CAPABILITY_LOST_COPIES;

/** Fresh random bytes per connection per side; 256 bits make a repeat (and so a replay) hopeless. */
export const HANDSHAKE_CHALLENGE_BYTES = 32;
/** HMAC-SHA256 output. */
export const HANDSHAKE_TAG_BYTES = 32;

/** Domain separators; the NUL ends each so no prefix of one is a prefix of another. */
const TRANSCRIPT_LABEL = Buffer.from('actordb-handshake-transcript-v2\0', 'ascii');
const PROOF_LABEL = Buffer.from('actordb-handshake-proof-v2\0', 'ascii');
const ROLE_DIALER = Buffer.from('dialer', 'ascii');
const ROLE_LISTENER = Buffer.from('listener', 'ascii');
const EMPTY = new Uint8Array(0);

assert(TRANSCRIPT_LABEL.length === 32, 'transcript label is 32 bytes with its NUL');
assert((LOCAL_CAPABILITIES & CAPABILITY_QUERY_PAGES) === 0, 'query pages must not be advertised');
assert(
  (REQUIRED_WIRE_CAPABILITIES & ~LOCAL_CAPABILITIES) === 0,
  'we must advertise every capability we require',
);

export interface Hello {
  nodeId: string;
  /** Retired (replayable); must be empty. Kept so a seed peer that still fills it is refused by name. */
  authTag: Uint8Array;
  minProtocolVersion: number;
  maxProtocolVersion: number;
  /** A bit set; fits in 2^53 and travels as a u64. */
  capabilities: number;
  challenge: Uint8Array;
}

/** Orders duplicate connections between one pair of nodes; both ends compute the same value. */
export interface ConnectionRank {
  /** The connection dialed by the smaller node id (byte-wise UTF-8) is preferred. */
  preferredDirection: boolean;
  /** SHA-256 of the transcript: breaks ties between connections in the same direction. */
  transcriptId: Uint8Array;
}

export type HandshakeState = 'awaiting-hello' | 'awaiting-auth' | 'established' | 'failed';

export type HandshakeAction =
  | { kind: 'send-hello'; hello: Hello }
  | { kind: 'send-auth'; authTag: Uint8Array }
  | { kind: 'established'; peerId: string; rank: ConnectionRank; peerCapabilities: number }
  | { kind: 'fail'; reason: string; differs: string };

export interface HandshakeConfig {
  localId: string;
  /** The cluster secret; undefined runs an unauthenticated mesh (tags are empty). */
  secret: Uint8Array | undefined;
  weDialed: boolean;
  /** Set when dialing a configured member: the peer must claim exactly this id. */
  expectedPeerId: string | undefined;
  localHello: Hello;
}

/** The proof check's failure: the peer holds another cluster secret (or none, or we have none). */
export const PROOF_FAILED = 'challenge-bound handshake proof failed';

const PEER_CLAIMED_LOCAL_ID = 'peer claimed the local node_id';
const PEER_IDENTITY_MISMATCH = 'peer identity did not match the configured member';

/**
 * What most likely differs between the two nodes when a handshake fails for `reason`, in an
 * operator's words: a failed proof is a cluster secret that differs, a refused identity a
 * --peers list that names another node at that address, anything else a peer that does not speak
 * this release's protocol.
 */
export function likelyDifference(reason: string): string {
  if (reason === PROOF_FAILED) return 'cluster secret differs';
  if (reason === PEER_CLAIMED_LOCAL_ID || reason === PEER_IDENTITY_MISMATCH) {
    return 'node id differs from what --peers names for this address';
  }
  return 'release or protocol differs (the peer is not a compatible Tessera node)';
}

/** Our Hello for one connection. `challenge` comes from the driver's crypto.randomBytes. */
export function freshHello(nodeId: string, challenge: Uint8Array): Hello {
  assert(isValidNodeId(nodeId), 'local node id must be 1–255 UTF-8 bytes');
  assert(isValidChallenge(challenge), 'challenge must be 32 random bytes, not all zero');
  return {
    nodeId,
    authTag: EMPTY,
    minProtocolVersion: WIRE_PROTOCOL_VERSION,
    maxProtocolVersion: WIRE_PROTOCOL_VERSION,
    capabilities: LOCAL_CAPABILITIES,
    challenge,
  };
}

/**
 * The first reason to refuse a peer's Hello, or undefined when it is acceptable. Version fields that
 * are not u32, and capabilities that are not a non-negative safe integer, count as incompatible: the
 * transcript cannot encode them, and a peer's bytes must never reach an assertion.
 */
export function validatePeerHello(
  localId: string,
  expectedPeerId: string | undefined,
  hello: Hello,
): string | undefined {
  if (!isValidNodeId(hello.nodeId)) return 'peer node_id is empty or exceeds 255 bytes';
  if (hello.nodeId === localId) return PEER_CLAIMED_LOCAL_ID;
  if (expectedPeerId !== undefined && hello.nodeId !== expectedPeerId) {
    return PEER_IDENTITY_MISMATCH;
  }
  if (hello.authTag.length !== 0) return 'peer used the retired replayable Hello auth_tag';
  if (!isValidChallenge(hello.challenge)) return 'peer challenge is missing, invalid, or all-zero';
  const min = hello.minProtocolVersion;
  const max = hello.maxProtocolVersion;
  if (!isU32(min) || !isU32(max) || min === 0 || min > WIRE_PROTOCOL_VERSION || max < WIRE_PROTOCOL_VERSION) {
    return 'peer wire-version range is incompatible';
  }
  const caps = hello.capabilities;
  if (!isCapabilitySet(caps) || (BigInt(REQUIRED_WIRE_CAPABILITIES) & ~BigInt(caps)) !== 0n) {
    return 'peer omitted required wire capabilities';
  }
  return undefined;
}

/**
 * Canonical transcript of one handshake (hand-laid bytes, not protobuf, so both ends agree exactly):
 *
 *   "actordb-handshake-transcript-v2\0"            32 bytes
 *   section("dialer", dialer)
 *   section("listener", listener)
 *   u32_be(WIRE_PROTOCOL_VERSION)
 *   u64_be(dialer.capabilities & listener.capabilities)
 *
 *   section(role, h) = u64_be(len role) role u64_be(len nodeId) nodeId
 *                      u32_be(h.min) u32_be(h.max) u64_be(h.capabilities) u64_be(len challenge) challenge
 */
export function handshakeTranscript(dialer: Hello, listener: Hello): Buffer {
  const dialerSection = section(ROLE_DIALER, dialer);
  const listenerSection = section(ROLE_LISTENER, listener);
  const tail = Buffer.alloc(4 + 8);
  tail.writeUInt32BE(WIRE_PROTOCOL_VERSION, 0);
  // Capabilities may pass 32 bits, where the number `&` would truncate them.
  tail.writeBigUInt64BE(BigInt(dialer.capabilities) & BigInt(listener.capabilities), 4);
  return Buffer.concat([TRANSCRIPT_LABEL, dialerSection, listenerSection, tail]);
}

function section(role: Buffer, h: Hello): Buffer {
  assert(isU32(h.minProtocolVersion) && isU32(h.maxProtocolVersion), 'protocol versions must be u32');
  assert(isCapabilitySet(h.capabilities), 'capabilities must be a non-negative safe integer');
  const nodeId = Buffer.from(h.nodeId, 'utf8');
  const out = Buffer.alloc(8 + role.length + 8 + nodeId.length + 4 + 4 + 8 + 8 + h.challenge.length);
  let at = out.writeBigUInt64BE(BigInt(role.length), 0);
  at += role.copy(out, at);
  at = out.writeBigUInt64BE(BigInt(nodeId.length), at);
  at += nodeId.copy(out, at);
  at = out.writeUInt32BE(h.minProtocolVersion, at);
  at = out.writeUInt32BE(h.maxProtocolVersion, at);
  at = out.writeBigUInt64BE(BigInt(h.capabilities), at);
  at = out.writeBigUInt64BE(BigInt(h.challenge.length), at);
  out.set(h.challenge, at);
  assert(at + h.challenge.length === out.length, 'transcript section length');
  return out;
}

/**
 * The prover's HelloAuth tag: HMAC-SHA256(secret, proof label || role || transcript). The role keeps a
 * dialer's tag from being reflected as the listener's. Without a secret the tag is empty.
 */
export function authTag(
  secret: Uint8Array | undefined,
  proverIsDialer: boolean,
  dialer: Hello,
  listener: Hello,
): Uint8Array {
  if (secret === undefined) return EMPTY;
  const hmac = createHmac('sha256', secret);
  hmac.update(PROOF_LABEL);
  hmac.update(proverIsDialer ? ROLE_DIALER : ROLE_LISTENER);
  hmac.update(handshakeTranscript(dialer, listener));
  const tag = new Uint8Array(hmac.digest());
  assert(tag.length === HANDSHAKE_TAG_BYTES, 'HMAC-SHA256 is 32 bytes');
  return tag;
}

/** Checks a peer's tag in constant time; without a secret only an empty tag is accepted. */
export function verifyAuthTag(
  secret: Uint8Array | undefined,
  proverIsDialer: boolean,
  dialer: Hello,
  listener: Hello,
  tag: Uint8Array,
): boolean {
  if (secret === undefined) return tag.length === 0;
  // timingSafeEqual throws on unequal lengths; the length is no secret, so check it first.
  if (tag.length !== HANDSHAKE_TAG_BYTES) return false;
  return timingSafeEqual(authTag(secret, proverIsDialer, dialer, listener), tag);
}

export function connectionRank(dialer: Hello, listener: Hello): ConnectionRank {
  const preferredDirection =
    Buffer.compare(Buffer.from(dialer.nodeId, 'utf8'), Buffer.from(listener.nodeId, 'utf8')) < 0;
  const transcriptId = new Uint8Array(
    createHash('sha256').update(handshakeTranscript(dialer, listener)).digest(),
  );
  return { preferredDirection, transcriptId };
}

/** Positive when `a` outranks `b`: the preferred direction first, then the larger transcript id. */
export function compareRank(a: ConnectionRank, b: ConnectionRank): number {
  if (a.preferredDirection !== b.preferredDirection) return a.preferredDirection ? 1 : -1;
  return Buffer.compare(a.transcriptId, b.transcriptId);
}

/** One connection's handshake. Every method returns the actions the driver must carry out, in order. */
export class HandshakeMachine {
  state: HandshakeState = 'awaiting-hello';
  /** Set once established, never before: until then the peer's claimed id is unproven. */
  peerId: string | undefined = undefined;
  private readonly config: HandshakeConfig;
  /** Held between Hello and HelloAuth: the peer's tag is checked against the same transcript. */
  private peerHello: Hello | undefined = undefined;
  private started = false;

  constructor(config: HandshakeConfig) {
    assert(config.localHello.nodeId === config.localId, 'local Hello must carry the local node id');
    this.config = config;
  }

  start(): HandshakeAction[] {
    assert(!this.started, 'handshake started twice');
    this.started = true;
    if (this.state === 'failed') return [];
    return [{ kind: 'send-hello', hello: this.config.localHello }];
  }

  onHello(hello: Hello): HandshakeAction[] {
    if (this.state === 'failed') return [];
    if (this.state !== 'awaiting-hello') return this.fail('duplicate or post-handshake Hello');
    const { localId, expectedPeerId, secret, weDialed, localHello } = this.config;
    const reason = validatePeerHello(localId, expectedPeerId, hello);
    if (reason !== undefined) return this.fail(reason);
    this.peerHello = hello;
    const [dialer, listener] = weDialed ? [localHello, hello] : [hello, localHello];
    this.state = 'awaiting-auth';
    return [{ kind: 'send-auth', authTag: authTag(secret, weDialed, dialer, listener) }];
  }

  onHelloAuth(tag: Uint8Array): HandshakeAction[] {
    if (this.state === 'failed') return [];
    if (this.state !== 'awaiting-auth') return this.fail('out-of-order or duplicate HelloAuth');
    const peerHello = this.peerHello!;
    const { secret, weDialed, localHello } = this.config;
    const [dialer, listener] = weDialed ? [localHello, peerHello] : [peerHello, localHello];
    // The peer proves in the other role: a tag reflected from our own send-auth fails here.
    if (!verifyAuthTag(secret, !weDialed, dialer, listener, tag)) {
      return this.fail(PROOF_FAILED);
    }
    this.state = 'established';
    this.peerId = peerHello.nodeId;
    return [
      {
        kind: 'established',
        peerId: peerHello.nodeId,
        rank: connectionRank(dialer, listener),
        peerCapabilities: peerHello.capabilities,
      },
    ];
  }

  /** Any application frame; allowed only once the peer has proven itself. */
  onOtherFrame(): HandshakeAction[] {
    if (this.state === 'established' || this.state === 'failed') return [];
    return this.fail('rejecting application frame before handshake completion');
  }

  private fail(reason: string): HandshakeAction[] {
    this.state = 'failed';
    this.peerHello = undefined;
    return [{ kind: 'fail', reason, differs: likelyDifference(reason) }];
  }
}

function isValidNodeId(nodeId: string): boolean {
  return nodeId.length > 0 && Buffer.byteLength(nodeId, 'utf8') <= NODE_ID_BYTES_MAX;
}

function isValidChallenge(challenge: Uint8Array): boolean {
  if (challenge.length !== HANDSHAKE_CHALLENGE_BYTES) return false;
  for (let i = 0; i < challenge.length; i++) if (challenge[i] !== 0) return true;
  return false;
}

function isU32(n: number): boolean {
  return Number.isInteger(n) && n >= 0 && n <= 0xffff_ffff;
}

function isCapabilitySet(n: number): boolean {
  return Number.isSafeInteger(n) && n >= 0;
}
