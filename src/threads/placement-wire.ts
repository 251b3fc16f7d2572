// Placement coordinator messages on the peer wire: the core's typed objects
// (core/coordinator-machine.ts) to and from proto PlacementMessage. A table is carried as the JSON
// of its persisted form and decoded by assignment-table.ts's checked decoder, the one that reads
// the data directory's copy; a malformed message comes back with a reason the mesh logs when it
// closes the connection. A few messages a second at most: protobufjs and JSON do the work.

import { type AssignmentTable, decodeTable, encodeTable } from '../core/assignment-table.js';
import type { PlacementMessage } from '../core/coordinator-machine.js';
import { TesseraError } from '../core/errors.js';
import { NODE_ID_BYTES_MAX, PLACEMENT_TABLE_BYTES_MAX } from '../core/limits.js';
import { isValidNodeId } from '../core/membership-types.js';
import type { WireUint64 } from './membership-wire.js';
import { decodeEnvelope, type Envelope, encodeEnvelope } from './peer-messages.js';

/** proto PlacementMessage as protobufjs yields it. */
export interface PlacementMessageWire {
  kind: number;
  from: string;
  tableJson: Uint8Array;
  digest: string;
  incarnation: WireUint64;
  epoch: WireUint64;
  refused: boolean;
  fragment: number;
  generation: WireUint64;
  member: string;
}

const KIND_WIRE: Record<PlacementMessage['kind'], number> = {
  'report-request': 1,
  report: 2,
  changes: 3,
  digest: 4,
  pull: 5,
  ready: 6,
  ahead: 7,
  'lost-copies': 8,
};
const KIND_BY_WIRE: ReadonlyArray<PlacementMessage['kind'] | undefined> = [
  undefined,
  'report-request',
  'report',
  'changes',
  'digest',
  'pull',
  'ready',
  'ahead',
  'lost-copies',
];
/** A digest is `epoch/coordinator@incarnation/entries/generations`. */
const DIGEST_BYTES_MAX = NODE_ID_BYTES_MAX + 80;

export type PlacementDecoding =
  | { kind: 'message'; message: PlacementMessage; table: AssignmentTable | undefined }
  | { kind: 'malformed'; reason: string };

export function encodePlacementMessage(message: PlacementMessage): Uint8Array {
  const wire: PlacementMessageWire = {
    kind: KIND_WIRE[message.kind],
    from: message.from,
    tableJson:
      message.kind === 'report' || message.kind === 'changes'
        ? Buffer.from(JSON.stringify(message.table), 'utf8')
        : new Uint8Array(0),
    digest: message.kind === 'digest' ? message.digest : '',
    incarnation:
      message.kind === 'report-request' || message.kind === 'lost-copies' ? message.incarnation : 0,
    epoch: message.kind === 'report-request' || message.kind === 'report' ? message.epoch : 0,
    refused: message.kind === 'report' && message.refused,
    fragment: message.kind === 'ready' || message.kind === 'ahead' ? message.fragment : 0,
    generation: message.kind === 'ready' || message.kind === 'ahead' ? message.generation : 0,
    member: message.kind === 'lost-copies' ? message.member : '',
  };
  return encodeEnvelope({ placement: wire } as Envelope);
}

/** Decodes an envelope carrying a placement message; a table must be for `fragmentCount` fragments. */
export function decodePlacementMessage(bytes: Uint8Array, fragmentCount: number): PlacementDecoding {
  let wire: PlacementMessageWire | undefined;
  try {
    wire = decodeEnvelope(bytes).placement;
  } catch (err) {
    return malformed(`undecodable envelope: ${(err as Error).message}`);
  }
  if (wire === undefined) return malformed('no placement message');
  const kind = KIND_BY_WIRE[wire.kind];
  if (kind === undefined) return malformed(`unknown kind ${wire.kind}`);
  if (!isValidNodeId(wire.from)) return malformed('sender is not a node id');
  const from = wire.from;
  const incarnation = safeCount(wire.incarnation);
  const epoch = safeCount(wire.epoch);
  if (incarnation === undefined || epoch === undefined)
    return malformed('incarnation or epoch past the safe integers');
  if (kind === 'pull') return { kind: 'message', message: { kind, from }, table: undefined };
  if (kind === 'ready' || kind === 'ahead') {
    const generation = safeCount(wire.generation);
    if (generation === undefined || generation < 1 || wire.fragment >= fragmentCount)
      return malformed(`${kind} names fragment ${wire.fragment} at generation ${generation}`);
    return {
      kind: 'message',
      message: { kind, from, fragment: wire.fragment, generation },
      table: undefined,
    };
  }
  if (kind === 'lost-copies') {
    if (!isValidNodeId(wire.member)) return malformed('lost copies of no node id');
    const message = { kind, from, member: wire.member, incarnation };
    return { kind: 'message', message, table: undefined };
  }
  if (kind === 'report-request') {
    if (epoch < 1) return malformed('a report request proposes no epoch');
    return { kind: 'message', message: { kind, from, incarnation, epoch }, table: undefined };
  }
  if (kind === 'digest') {
    if (wire.digest === '' || Buffer.byteLength(wire.digest) > DIGEST_BYTES_MAX)
      return malformed('bad digest');
    return { kind: 'message', message: { kind, from, digest: wire.digest }, table: undefined };
  }
  if (wire.tableJson.length > PLACEMENT_TABLE_BYTES_MAX) {
    return malformed(
      `table of ${wire.tableJson.length} bytes exceeds PLACEMENT_TABLE_BYTES_MAX (${PLACEMENT_TABLE_BYTES_MAX})`,
    );
  }
  let table: AssignmentTable;
  try {
    table = decodeTable(JSON.parse(Buffer.from(wire.tableJson).toString('utf8')));
  } catch (err) {
    if (err instanceof SyntaxError || err instanceof TesseraError) return malformed(err.message);
    throw err;
  }
  if (table.fragmentCount !== fragmentCount) {
    return malformed(`table of ${table.fragmentCount} fragments; this cluster has ${fragmentCount}`);
  }
  const persisted = encodeTable(table);
  const message: PlacementMessage =
    kind === 'report'
      ? { kind, from, epoch, refused: wire.refused === true, table: persisted }
      : { kind, from, table: persisted };
  return { kind: 'message', message, table };
}

/** A uint64 as protobufjs yields it, as a number when it is a safe integer. */
function safeCount(value: WireUint64): number | undefined {
  const n = typeof value === 'number' ? value : Number(value.toString());
  return Number.isSafeInteger(n) && n >= 0 ? n : undefined;
}

function malformed(reason: string): PlacementDecoding {
  return { kind: 'malformed', reason: `malformed placement message: ${reason}` };
}
