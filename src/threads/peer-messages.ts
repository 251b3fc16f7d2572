// The peer protocol's messages (proto/peer.proto), compiled at load time by protobufjs. The main
// thread encodes handshakes and forwarded operations; workers encode and decode replication and
// anti-entropy messages. The interfaces mirror the .proto file (protobufjs yields these shapes).

import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import protobuf from 'protobufjs';
import type { Hello } from '../core/handshake.js';
import type { AdminMessageWire } from './admin-wire.js';
import type {
  MemberGossipWire,
  MemberJoinAcceptWire,
  MemberJoinRequestWire,
  MemberProbeReplyWire,
  MemberProbeWire,
  MemberRefuseWire,
  MemberSyncWire,
} from './membership-wire.js';
import type { PlacementMessageWire } from './placement-wire.js';

/** Finds proto/peer.proto from here, whether running from dist/ or from the test build. */
function protoPath(): string {
  for (const up of ['../../proto/peer.proto', '../../../proto/peer.proto']) {
    const path = fileURLToPath(new URL(up, import.meta.url));
    if (existsSync(path)) return path;
  }
  throw new Error('proto/peer.proto not found next to the package');
}

const root = protobuf.loadSync(protoPath());
const EnvelopeType = root.lookupType('tessera.peer.v1.Envelope');

/** A Hello as it travels: the handshake's fields and the client port (outside the proof). */
export interface HelloMessage extends Hello {
  clientPort: number;
}
export interface ReplicatedOpMessage {
  key: Uint8Array;
  record: Uint8Array;
}
export interface ReplicateBatchMessage {
  fragment: number;
  sessionId: number;
  batchSeq: number;
  requiredAckLevel: number;
  maxWallMs: number;
  ops: readonly ReplicatedOpMessage[];
}
export interface KeySummaryMessage {
  key: Uint8Array;
  stamp: Uint8Array;
}

export interface PublishedMessage {
  channel: Uint8Array;
  message: Uint8Array;
  shard: boolean;
}

/** One decoded envelope: exactly one field set, named as in the .proto (camelCase). */
export interface Envelope {
  hello?: HelloMessage;
  helloAuth?: { authTag: Uint8Array };
  forwardedOps?: { hops: number; ops: readonly Uint8Array[] };
  forwardedResults?: { results: readonly Uint8Array[] };
  sessionStart?: { fragment: number; sessionId: number; continuity?: number };
  replicateBatch?: ReplicateBatchMessage;
  batchAck?: { fragment: number; sessionId: number; batchSeq: number; level: number };
  batchNack?: { fragment: number; sessionId: number; batchSeq: number; error: string };
  sessionReset?: { fragment: number };
  fragmentAbsent?: { fragment: number; sessionId: number };
  reconcileRequest?: {
    fragment: number;
    sessionId: number;
    roundId: number;
    pageSeq: number;
    afterKey: Uint8Array;
    ranges: ReadonlyArray<{ lastKey: Uint8Array; digest: Uint8Array }>;
    openEnd: boolean;
    horizonMs: number;
    /** 0 as decoded from a version that does not say (summaries only). */
    recordsMax: number;
    /** 0 as decoded from a version that does not say (DIGEST_RANGE_KEYS). */
    rangeKeys: number;
    /** False as decoded from a version that does not say (optional when encoding). */
    urgent?: boolean;
  };
  reconcileResponse?: {
    fragment: number;
    sessionId: number;
    roundId: number;
    pageSeq: number;
    summaries: readonly KeySummaryMessage[];
    done: boolean;
    nextAfterKey: Uint8Array;
    /** Null as decoded when the responder did not say. */
    sourceSize?: { keys: number; bytes: number } | null;
    /** Empty as decoded from a version that sends none. */
    records: readonly ReplicatedOpMessage[];
    maxWallMs: number;
  };
  reconcileFetch?: {
    fragment: number;
    sessionId: number;
    roundId: number;
    chunkSeq: number;
    keys: Uint8Array[];
  };
  reconcileData?: {
    fragment: number;
    sessionId: number;
    roundId: number;
    chunkSeq: number;
    pageSeq: number;
    entries: readonly ReplicatedOpMessage[];
    done: boolean;
    maxWallMs: number;
  };
  publishBatch?: { messages: readonly PublishedMessage[] };
  // Membership: encoded and checked by membership-wire.ts.
  memberPing?: MemberProbeWire;
  memberAck?: MemberProbeReplyWire;
  memberNack?: MemberProbeReplyWire;
  memberPingReq?: MemberProbeWire;
  memberGossip?: MemberGossipWire;
  memberSync?: MemberSyncWire;
  memberJoinRequest?: MemberJoinRequestWire;
  memberJoinAccept?: MemberJoinAcceptWire;
  memberRefuse?: MemberRefuseWire;
  placement?: PlacementMessageWire;
  admin?: AdminMessageWire;
  clientPorts?: ClientPortsMessage;
}

/** The ports a node's workers serve clients on (proto/peer.proto ClientPorts). */
export interface ClientPortsMessage {
  workerPorts: number[];
  workerGroups: number;
}

/** Encodes an envelope (without the frame's length prefix). */
export function encodeEnvelope(envelope: Envelope): Uint8Array {
  return EnvelopeType.encode(EnvelopeType.fromObject(envelope)).finish();
}

/**
 * Decodes an envelope; throws on malformed input (the caller closes the connection). Missing
 * scalar fields read as their defaults, repeated fields as empty arrays.
 */
export function decodeEnvelope(bytes: Uint8Array): Envelope {
  const message = EnvelopeType.decode(bytes);
  return EnvelopeType.toObject(message, { defaults: true, arrays: true, oneofs: false }) as Envelope;
}
