// Membership messages on the peer wire: the core's typed objects (core/membership-types.ts) to and
// from their protobuf messages (proto/peer.proto, Member*). Decoding checks everything the core
// would refuse later (ids, incarnations and seqs, states, list lengths, string sizes) and answers
// a malformed message with a reason the mesh logs when it closes the connection. Membership
// messages are a few a second, so protobufjs does the work; nothing here is on the hot path.

import { assert } from '../core/assert.js';
import {
  ERROR_MESSAGE_BYTES_MAX,
  MEMBER_ADDRESS_BYTES_MAX,
  MEMBERSHIP_MEMBERS_MAX,
  MEMBERSHIP_UPDATES_PER_MESSAGE_MAX,
  NODE_ID_BYTES_MAX,
} from '../core/limits.js';
import type { MembershipMessage, MemberUpdate, SelfState } from '../core/membership-types.js';
import { decodeEnvelope, type Envelope, encodeEnvelope } from './peer-messages.js';

/** A uint64 as protobufjs yields it: a number, or a Long (whose toString is its decimal value). */
export type WireUint64 = number | { toString(): string };

/** proto MemberUpdate; `kind` and `state` are the enums' numbers. */
export interface MemberUpdateWire {
  kind: number;
  nodeId: string;
  incarnation: WireUint64;
  address: string;
  state: number;
  reporter: string;
}
/** proto MemberProbe (member_ping, member_ping_req). */
export interface MemberProbeWire {
  from: string;
  seq: WireUint64;
  target: string;
  updates: MemberUpdateWire[];
}
/** proto MemberProbeReply (member_ack, member_nack). */
export interface MemberProbeReplyWire {
  from: string;
  seq: WireUint64;
  updates: MemberUpdateWire[];
}
export interface MemberGossipWire {
  from: string;
  updates: MemberUpdateWire[];
}
export interface MemberSyncWire {
  from: string;
  reply: boolean;
  members: MemberUpdateWire[];
}
export interface MemberJoinRequestWire {
  from: string;
  address: string;
  incarnation: WireUint64;
  /** Absent from a node of an earlier version: false. */
  withoutData?: boolean;
}
export interface MemberJoinAcceptWire {
  from: string;
  members: MemberUpdateWire[];
}
export interface MemberRefuseWire {
  from: string;
  reason: string;
  /** Absent from a node of an earlier version: false. */
  retry?: boolean;
}

/** The decoded message, or why it was refused (for the log line of the closed connection). */
export type MembershipDecoding =
  | { kind: 'message'; message: MembershipMessage }
  | { kind: 'malformed'; reason: string };

/** Wire numbers of MemberUpdateKind, by the core's update kind; 0 is UNKNOWN. */
const UPDATE_KIND_WIRE: Record<MemberUpdate['kind'], number> = {
  alive: 1,
  suspect: 2,
  unreachable: 3,
  down: 4,
  removed: 5,
};
const UPDATE_KIND_BY_WIRE: ReadonlyArray<MemberUpdate['kind'] | undefined> = [
  undefined,
  'alive',
  'suspect',
  'unreachable',
  'down',
  'removed',
];
/** Wire numbers of MemberSelfState; 0 is UNKNOWN. */
const SELF_STATE_WIRE: Record<SelfState, number> = { Joining: 1, Up: 2, Leaving: 3, Exiting: 4 };
const SELF_STATE_BY_WIRE: ReadonlyArray<SelfState | undefined> = [
  undefined,
  'Joining',
  'Up',
  'Leaving',
  'Exiting',
];

/** The Envelope field carrying each message kind. */
const ENVELOPE_FIELD = {
  ping: 'memberPing',
  ack: 'memberAck',
  nack: 'memberNack',
  'ping-req': 'memberPingReq',
  gossip: 'memberGossip',
  sync: 'memberSync',
  'join-request': 'memberJoinRequest',
  'join-accept': 'memberJoinAccept',
  refuse: 'memberRefuse',
} as const satisfies Record<MembershipMessage['kind'], keyof Envelope>;
const MEMBERSHIP_FIELDS = Object.values(ENVELOPE_FIELD);

/** Encodes a message of the core as one Envelope (without the frame's length prefix). */
export function encodeMembershipMessage(message: MembershipMessage): Uint8Array {
  const fault = membershipMessageFault(message);
  assert(fault === undefined, `membership message to encode: ${fault}`);
  return encodeEnvelope(envelopeOf(message));
}

/** Decodes an Envelope that carries a membership message and checks it (see the file header). */
export function decodeMembershipMessage(bytes: Uint8Array): MembershipDecoding {
  let envelope: Envelope;
  try {
    envelope = decodeEnvelope(bytes);
  } catch (err) {
    return malformed(`undecodable envelope: ${(err as Error).message}`);
  }
  let message: MembershipMessage;
  try {
    message = messageOf(envelope);
  } catch (err) {
    if (err instanceof WireFault) return malformed(err.message);
    throw err;
  }
  const fault = membershipMessageFault(message);
  return fault === undefined ? { kind: 'message', message } : malformed(fault);
}

function malformed(fault: string): MembershipDecoding {
  return { kind: 'malformed', reason: `malformed membership message: ${fault}` };
}

// ---- Core object to wire ----

function envelopeOf(m: MembershipMessage): Envelope {
  switch (m.kind) {
    case 'ping':
    case 'ping-req':
      return {
        [ENVELOPE_FIELD[m.kind]]: {
          from: m.from,
          seq: m.seq,
          target: m.target,
          updates: m.updates.map(updateWire),
        },
      };
    case 'ack':
    case 'nack':
      return { [ENVELOPE_FIELD[m.kind]]: { from: m.from, seq: m.seq, updates: m.updates.map(updateWire) } };
    case 'gossip':
      return { memberGossip: { from: m.from, updates: m.updates.map(updateWire) } };
    case 'sync':
      return { memberSync: { from: m.from, reply: m.reply, members: m.members.map(updateWire) } };
    case 'join-request':
      return {
        memberJoinRequest: {
          from: m.from,
          address: m.address,
          incarnation: m.incarnation,
          withoutData: m.withoutData,
        },
      };
    case 'join-accept':
      return { memberJoinAccept: { from: m.from, members: m.members.map(updateWire) } };
    case 'refuse':
      return { memberRefuse: { from: m.from, reason: m.reason, retry: m.retry === true } };
  }
}

function updateWire(u: MemberUpdate): MemberUpdateWire {
  const kind = UPDATE_KIND_WIRE[u.kind];
  if (u.kind === 'alive') {
    const state = SELF_STATE_WIRE[u.state];
    return { kind, nodeId: u.nodeId, incarnation: u.incarnation, address: u.address, state, reporter: '' };
  }
  return { kind, nodeId: u.nodeId, incarnation: u.incarnation, address: '', state: 0, reporter: u.reporter };
}

// ---- Wire to core object ----

/** A decoded message that cannot become a core object; its message is the reason. */
class WireFault extends Error {}

function messageOf(e: Envelope): MembershipMessage {
  const present = MEMBERSHIP_FIELDS.filter((field) => e[field] !== undefined);
  if (present.length !== 1) {
    throw new WireFault(
      present.length === 0 ? 'no membership message' : `${present.join(', ')} in one envelope`,
    );
  }
  if (e.memberPing !== undefined) return { kind: 'ping', ...probeOf(e.memberPing, 'ping') };
  if (e.memberPingReq !== undefined) return { kind: 'ping-req', ...probeOf(e.memberPingReq, 'ping-req') };
  if (e.memberAck !== undefined) return { kind: 'ack', ...probeReplyOf(e.memberAck, 'ack') };
  if (e.memberNack !== undefined) return { kind: 'nack', ...probeReplyOf(e.memberNack, 'nack') };
  if (e.memberGossip !== undefined) {
    const w = e.memberGossip;
    return { kind: 'gossip', from: w.from, updates: updatesOf(w.updates, 'gossip.updates') };
  }
  if (e.memberSync !== undefined) {
    const w = e.memberSync;
    return { kind: 'sync', from: w.from, reply: w.reply, members: updatesOf(w.members, 'sync.members') };
  }
  if (e.memberJoinRequest !== undefined) {
    const w = e.memberJoinRequest;
    const incarnation = safeInteger(w.incarnation, 'join-request.incarnation');
    return {
      kind: 'join-request',
      from: w.from,
      address: w.address,
      incarnation,
      withoutData: w.withoutData === true,
    };
  }
  if (e.memberJoinAccept !== undefined) {
    const w = e.memberJoinAccept;
    return { kind: 'join-accept', from: w.from, members: updatesOf(w.members, 'join-accept.members') };
  }
  const w = e.memberRefuse as MemberRefuseWire;
  // `retry` only when set, as the core writes it.
  return w.retry === true
    ? { kind: 'refuse', from: w.from, reason: w.reason, retry: true }
    : { kind: 'refuse', from: w.from, reason: w.reason };
}

function probeOf(w: MemberProbeWire, kind: string) {
  const seq = safeInteger(w.seq, `${kind}.seq`);
  return { from: w.from, seq, target: w.target, updates: updatesOf(w.updates, `${kind}.updates`) };
}

function probeReplyOf(w: MemberProbeReplyWire, kind: string) {
  return {
    from: w.from,
    seq: safeInteger(w.seq, `${kind}.seq`),
    updates: updatesOf(w.updates, `${kind}.updates`),
  };
}

/** The list is converted whole only when its length is within the bound checked afterwards. */
function updatesOf(list: MemberUpdateWire[], where: string): MemberUpdate[] {
  if (list.length > MEMBERSHIP_MEMBERS_MAX) {
    throw new WireFault(
      `${where} holds ${list.length}, over MEMBERSHIP_MEMBERS_MAX (${MEMBERSHIP_MEMBERS_MAX})`,
    );
  }
  return list.map((u, i) => updateOf(u, `${where}[${i}]`));
}

function updateOf(w: MemberUpdateWire, where: string): MemberUpdate {
  const kind = UPDATE_KIND_BY_WIRE[w.kind];
  if (kind === undefined) throw new WireFault(`${where}.kind ${w.kind} is not a member update kind`);
  const incarnation = safeInteger(w.incarnation, `${where}.incarnation`);
  if (kind === 'alive') {
    const state = SELF_STATE_BY_WIRE[w.state];
    if (state === undefined) throw new WireFault(`${where}.state ${w.state} is not a member's own state`);
    if (w.reporter !== '') throw new WireFault(`${where} is alive but names a reporter`);
    return { kind, nodeId: w.nodeId, incarnation, address: w.address, state };
  }
  if (w.address !== '' || w.state !== 0)
    throw new WireFault(`${where} is ${kind} but carries an address or state`);
  return { kind, nodeId: w.nodeId, incarnation, reporter: w.reporter };
}

/** A uint64 the core can hold: protobufjs gives a Long or a number, either way its decimal text. */
function safeInteger(value: WireUint64, where: string): number {
  const text = String(value);
  const n = Number(text);
  if (!Number.isSafeInteger(n) || n < 0 || String(n) !== text) {
    throw new WireFault(`${where} ${text} is not a safe integer`);
  }
  return n;
}

// ---- Checks of the core object, before encode and after decode ----

/** Why the message is not one the core could have sent or would accept; undefined when it is. */
export function membershipMessageFault(m: MembershipMessage): string | undefined {
  const fault = nodeIdFault(m.from, `${m.kind}.from`);
  if (fault !== undefined) return fault;
  switch (m.kind) {
    case 'ping':
    case 'ping-req':
      return (
        countFault(m.seq, `${m.kind}.seq`) ??
        nodeIdFault(m.target, `${m.kind}.target`) ??
        updatesFault(m.updates, MEMBERSHIP_UPDATES_PER_MESSAGE_MAX, `${m.kind}.updates`)
      );
    case 'ack':
    case 'nack':
      return (
        countFault(m.seq, `${m.kind}.seq`) ??
        updatesFault(m.updates, MEMBERSHIP_UPDATES_PER_MESSAGE_MAX, `${m.kind}.updates`)
      );
    case 'gossip':
      return updatesFault(m.updates, MEMBERSHIP_UPDATES_PER_MESSAGE_MAX, 'gossip.updates');
    case 'sync':
    case 'join-accept':
      return updatesFault(m.members, MEMBERSHIP_MEMBERS_MAX, `${m.kind}.members`);
    case 'join-request':
      return (
        countFault(m.incarnation, 'join-request.incarnation') ??
        bytesFault(m.address, MEMBER_ADDRESS_BYTES_MAX, 'join-request.address')
      );
    case 'refuse':
      return bytesFault(m.reason, ERROR_MESSAGE_BYTES_MAX, 'refuse.reason');
  }
}

function updatesFault(updates: readonly MemberUpdate[], max: number, where: string): string | undefined {
  if (updates.length > max) return `${where} holds ${updates.length}, over ${max}`;
  for (let i = 0; i < updates.length; i++) {
    const fault = updateFault(updates[i] as MemberUpdate, `${where}[${i}]`);
    if (fault !== undefined) return fault;
  }
  return undefined;
}

function updateFault(u: MemberUpdate, where: string): string | undefined {
  const fault = nodeIdFault(u.nodeId, `${where}.nodeId`) ?? countFault(u.incarnation, `${where}.incarnation`);
  if (fault !== undefined) return fault;
  if (u.kind === 'alive') {
    if (!(u.state in SELF_STATE_WIRE)) return `${where}.state ${u.state} is not a member's own state`;
    return bytesFault(u.address, MEMBER_ADDRESS_BYTES_MAX, `${where}.address`);
  }
  return nodeIdFault(u.reporter, `${where}.reporter`);
}

function nodeIdFault(nodeId: string, where: string): string | undefined {
  if (nodeId === '') return `${where} is empty`;
  return bytesFault(nodeId, NODE_ID_BYTES_MAX, where);
}

function bytesFault(text: string, max: number, where: string): string | undefined {
  const bytes = Buffer.byteLength(text, 'utf8');
  return bytes > max ? `${where} is ${bytes} bytes, over ${max}` : undefined;
}

function countFault(n: number, where: string): string | undefined {
  return Number.isSafeInteger(n) && n >= 0 ? undefined : `${where} ${n} is not a safe integer ≥ 0`;
}
