// Admin requests and replies on the peer wire (proto AdminMessage, Envelope field 26): a cluster
// change forwarded to the coordinator, a request for a node's metrics sample, a handover of a
// fragment's serving (the node the table put first asks the one before it to hand its writes
// over), an absorb (a node handing over a copy asks each replica to pull it whole, or to name the
// continuity its copy was verified under), and the answer
// to each. Statuses travel as datum's names and are checked against them; bodies and results as JSON
// objects, each under its limit, checked here before anything is parsed. A malformed message comes
// back with a reason the mesh logs when it closes the connection. A few messages a second at most:
// protobufjs and JSON do the work.

import { truncateErrorMessage } from '../core/errors.js';
import {
  ADMIN_BODY_BYTES_MAX,
  ADMIN_PATH_BYTES_MAX,
  ADMIN_RESULT_BYTES_MAX,
  ERROR_MESSAGE_BYTES_MAX,
} from '../core/limits.js';
import { decodeEnvelope, encodeEnvelope } from './peer-messages.js';

/** datum's DCP status names: every admin answer carries one. */
export const ADMIN_STATUSES = [
  'Ok',
  'BadRequest',
  'NotFound',
  'Conflict',
  'Failed',
  'DeadlineExceeded',
  'Unauthorized',
] as const;
export type AdminStatus = (typeof ADMIN_STATUSES)[number];
const STATUS_NAMES: ReadonlySet<string> = new Set(ADMIN_STATUSES);

/** What one node asks of another. */
export type AdminRequest =
  | { kind: 'change'; path: string; body: Record<string, unknown> }
  | { kind: 'metrics' }
  /**
   * The asker serves `fragment` from the table at `generation` on: once this node holds that table
   * too (so it serves the fragment no more), it answers when every write it took for the fragment
   * is acknowledged by the asker; `covered` in the result when its replication to the asker is
   * still in `continuity` (0: the asker's copy was not verified against this node).
   */
  | { kind: 'handover'; fragment: number; generation: number; continuity: number }
  /**
   * The asker hands over its copy of `fragment`, which the table at `generation` no longer lists it
   * for: once this node holds that table or a later one and is a replica there, it runs a complete
   * anti-entropy round against the asker's copy, fences what it pulled at stable, and answers.
   * `verifiedSuffices`: a copy verified against the asker already needs no round; the answer names
   * the continuity it was verified under (`verifiedUnder`), which the asker's drain checks
   * (an asker that does not say so has no such check: the round always runs).
   */
  | { kind: 'absorb'; fragment: number; generation: number; verifiedSuffices: boolean };

/** An answer: its status, a message for a person, and the other fields of the answer. */
export interface AdminAnswer {
  status: AdminStatus;
  message: string;
  result: Record<string, unknown>;
}

export type AdminMessage =
  | { kind: 'request'; id: number; request: AdminRequest }
  | { kind: 'reply'; id: number; answer: AdminAnswer };

/** proto AdminMessage as protobufjs yields it. */
export interface AdminMessageWire {
  kind: number;
  id: number;
  path: string;
  bodyJson: Uint8Array;
  status: string;
  message: string;
  resultJson: Uint8Array;
}

const CHANGE = 1;
const METRICS = 2;
const REPLY = 3;
const HANDOVER = 4;
const ABSORB = 5;
/** The largest envelope an admin message makes: every field at its limit, plus tags and lengths. */
const ADMIN_ENVELOPE_BYTES_MAX =
  ADMIN_PATH_BYTES_MAX + ADMIN_BODY_BYTES_MAX + ERROR_MESSAGE_BYTES_MAX + ADMIN_RESULT_BYTES_MAX + 64;

export type AdminDecoding =
  | { kind: 'message'; message: AdminMessage }
  | { kind: 'malformed'; reason: string };

/** A request's envelope, or why it cannot travel (a path or body over its limit). */
export function encodeAdminRequest(id: number, request: AdminRequest): Uint8Array | string {
  const wire = blankWire(id);
  if (request.kind === 'change') {
    const bodyJson = Buffer.from(JSON.stringify(request.body), 'utf8');
    if (Buffer.byteLength(request.path) > ADMIN_PATH_BYTES_MAX)
      return `path exceeds ADMIN_PATH_BYTES_MAX (${ADMIN_PATH_BYTES_MAX} bytes)`;
    if (bodyJson.length > ADMIN_BODY_BYTES_MAX)
      return `body of ${bodyJson.length} bytes exceeds ADMIN_BODY_BYTES_MAX (${ADMIN_BODY_BYTES_MAX})`;
    wire.kind = CHANGE;
    wire.path = request.path;
    wire.bodyJson = bodyJson;
  } else if (request.kind === 'handover') {
    wire.kind = HANDOVER;
    wire.bodyJson = Buffer.from(
      JSON.stringify({
        fragment: request.fragment,
        generation: request.generation,
        continuity: request.continuity,
      }),
    );
  } else if (request.kind === 'absorb') {
    wire.kind = ABSORB;
    wire.bodyJson = Buffer.from(
      JSON.stringify({
        fragment: request.fragment,
        generation: request.generation,
        verifiedSuffices: request.verifiedSuffices,
      }),
    );
  } else {
    wire.kind = METRICS;
  }
  return encodeEnvelope({ admin: wire });
}

/**
 * A reply's envelope. It always fits: the message is cut to ERROR_MESSAGE_BYTES_MAX, and a result
 * over ADMIN_RESULT_BYTES_MAX is replaced by a `Failed` answer saying so.
 */
export function encodeAdminReply(id: number, answer: AdminAnswer): Uint8Array {
  const wire = blankWire(id);
  wire.kind = REPLY;
  const resultJson = Buffer.from(JSON.stringify(answer.result), 'utf8');
  if (resultJson.length > ADMIN_RESULT_BYTES_MAX) {
    wire.status = 'Failed';
    wire.message = `the answer (${answer.status}) has ${resultJson.length} bytes of result, more than ADMIN_RESULT_BYTES_MAX (${ADMIN_RESULT_BYTES_MAX}) crosses the peer wire; ask this node's admin port directly`;
    return encodeEnvelope({ admin: wire });
  }
  wire.status = answer.status;
  wire.message = truncateErrorMessage(answer.message);
  wire.resultJson = resultJson;
  return encodeEnvelope({ admin: wire });
}

/** Decodes an envelope carrying an admin message, checking every field against its limit. */
export function decodeAdminMessage(bytes: Uint8Array): AdminDecoding {
  if (bytes.length > ADMIN_ENVELOPE_BYTES_MAX)
    return malformed(
      `${bytes.length} bytes exceed the ${ADMIN_ENVELOPE_BYTES_MAX} an admin message may take`,
    );
  let wire: AdminMessageWire | undefined;
  try {
    wire = decodeEnvelope(bytes).admin;
  } catch (err) {
    return malformed(`undecodable envelope: ${(err as Error).message}`);
  }
  if (wire === undefined) return malformed('no admin message');
  const id = wire.id;
  if (!Number.isInteger(id) || id < 1) return malformed('a request id must be at least 1');
  if (wire.kind === METRICS)
    return { kind: 'message', message: { kind: 'request', id, request: { kind: 'metrics' } } };
  if (wire.kind === CHANGE) {
    const path = wire.path;
    if (!path.startsWith('/') || Buffer.byteLength(path) > ADMIN_PATH_BYTES_MAX)
      return malformed(
        `path must start with / and take at most ADMIN_PATH_BYTES_MAX (${ADMIN_PATH_BYTES_MAX}) bytes`,
      );
    const body = jsonObject(wire.bodyJson, ADMIN_BODY_BYTES_MAX, 'body');
    if (typeof body === 'string') return malformed(body);
    return { kind: 'message', message: { kind: 'request', id, request: { kind: 'change', path, body } } };
  }
  if (wire.kind === HANDOVER) {
    const body = jsonObject(wire.bodyJson, ADMIN_BODY_BYTES_MAX, 'body');
    if (typeof body === 'string') return malformed(body);
    const { fragment, generation, continuity = 0 } = body;
    if (!isCount(fragment) || !isCount(generation) || generation < 1 || !isCount(continuity))
      return malformed('a handover names a fragment, a generation of at least 1 and a continuity');
    return {
      kind: 'message',
      message: { kind: 'request', id, request: { kind: 'handover', fragment, generation, continuity } },
    };
  }
  if (wire.kind === ABSORB) {
    const body = jsonObject(wire.bodyJson, ADMIN_BODY_BYTES_MAX, 'body');
    if (typeof body === 'string') return malformed(body);
    const { fragment, generation, verifiedSuffices = false } = body;
    if (!isCount(fragment) || !isCount(generation) || generation < 1 || typeof verifiedSuffices !== 'boolean')
      return malformed(
        'an absorb names a fragment and a generation of at least 1, and whether a verified copy suffices',
      );
    return {
      kind: 'message',
      message: { kind: 'request', id, request: { kind: 'absorb', fragment, generation, verifiedSuffices } },
    };
  }
  if (wire.kind !== REPLY) return malformed(`unknown kind ${wire.kind}`);
  if (!STATUS_NAMES.has(wire.status)) return malformed(`unknown status "${wire.status.slice(0, 32)}"`);
  if (Buffer.byteLength(wire.message) > ERROR_MESSAGE_BYTES_MAX)
    return malformed(`message exceeds ERROR_MESSAGE_BYTES_MAX (${ERROR_MESSAGE_BYTES_MAX} bytes)`);
  const result = jsonObject(wire.resultJson, ADMIN_RESULT_BYTES_MAX, 'result');
  if (typeof result === 'string') return malformed(result);
  const answer: AdminAnswer = { status: wire.status as AdminStatus, message: wire.message, result };
  return { kind: 'message', message: { kind: 'reply', id, answer } };
}

function blankWire(id: number): AdminMessageWire {
  return {
    kind: 0,
    id,
    path: '',
    bodyJson: new Uint8Array(0),
    status: '',
    message: '',
    resultJson: new Uint8Array(0),
  };
}

/** The JSON object in `bytes` (none: {}), or what is wrong with it. */
function jsonObject(bytes: Uint8Array, bytesMax: number, what: string): Record<string, unknown> | string {
  if (bytes.length > bytesMax) return `${what} of ${bytes.length} bytes exceeds ${bytesMax}`;
  if (bytes.length === 0) return {};
  let value: unknown;
  try {
    value = JSON.parse(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length).toString('utf8'));
  } catch (err) {
    return `${what} is not JSON: ${(err as Error).message}`;
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    return `${what} is not a JSON object`;
  return value as Record<string, unknown>;
}

function isCount(value: unknown): value is number {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;
}

function malformed(reason: string): AdminDecoding {
  return { kind: 'malformed', reason: `malformed admin message: ${reason}` };
}
