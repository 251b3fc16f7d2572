// The cluster state a node keeps in its data directory, `<dataDir>/cluster-state.json`: its own id
// and incarnation, the members it knows (membership's `persist` action) and the last assignment
// table it accepted (assignment-table.ts's encodeTable). A restarted node rejoins from the member
// list, can route and can take over from the table, and starts at a higher incarnation than any it
// used before, so what it said in its last life cannot be mistaken for what it says now.
//
// A write is atomic and durable: a temp file in the same directory, fsynced, renamed over the old
// file, then the directory fsynced; a power loss leaves the old file or the new one, never a torn
// one. A temp file left by an interrupted write is ignored by a read and removed at the next start.
// Writes to one directory go one at a time (the caller awaits each): two in flight may land in
// either order.

import fs from 'node:fs/promises';
import path from 'node:path';
import { assert } from '../core/assert.js';
import { type AssignmentTable, decodeTable, encodeTable } from '../core/assignment-table.js';
import type { EpochPromise } from '../core/coordinator-machine.js';
import { asStorageError, storageError, TesseraError } from '../core/errors.js';
import { CLUSTER_STATE_BYTES_MAX, CLUSTER_STATE_MEMBERS_MAX } from '../core/limits.js';
import { isIncarnation, isValidNodeId, type MemberRecord, STATE_EVENT } from '../core/membership-types.js';
import { replaceFileDurably, TEMP_FILE_SUFFIX } from './fsync-path.js';

export const CLUSTER_STATE_FILE = 'cluster-state.json';
/** Bumped whenever the file's layout changes incompatibly; a node refuses a format it does not read. */
export const CLUSTER_STATE_FORMAT = 1;
const MEMBER_STATES: ReadonlySet<string> = new Set(Object.keys(STATE_EVENT));
const STATE_KEYS: ReadonlySet<string> = new Set([
  'format',
  'nodeId',
  'incarnation',
  'members',
  'table',
  'promise',
]);
const MEMBER_KEYS: ReadonlySet<string> = new Set(['nodeId', 'address', 'incarnation', 'state']);

export interface ClusterState {
  readonly nodeId: string;
  /** The incarnation this node used last (or uses now, once startIncarnation has written it). */
  readonly incarnation: number;
  /** Every member this node knows, itself included once it has a record; sorted by id as membership gives them. */
  readonly members: readonly MemberRecord[];
  /** The last table this node accepted; null before it accepted any. */
  readonly table: AssignmentTable | null;
  /** The epoch this node last promised a coordinator taking over (coordinator-machine.ts); null before any. */
  readonly promise: EpochPromise | null;
}

/** Whose file this must be: the data directory's node and fragment count (its MANIFEST.json). */
export interface ClusterStateOwner {
  readonly nodeId: string;
  readonly fragmentCount: number;
}

/** The stored state, or undefined when there is none (a fresh node). */
export async function readClusterState(
  dataDir: string,
  owner: ClusterStateOwner,
): Promise<ClusterState | undefined> {
  const file = path.join(dataDir, CLUSTER_STATE_FILE);
  let text: string;
  try {
    const stat = await fs.stat(file);
    if (stat.size > CLUSTER_STATE_BYTES_MAX)
      throw malformed(
        dataDir,
        `${stat.size} bytes, more than CLUSTER_STATE_BYTES_MAX (${CLUSTER_STATE_BYTES_MAX})`,
      );
    text = await fs.readFile(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw asStorageError(err);
  }
  return parseClusterState(dataDir, text, owner);
}

/** Reads the file's text; every field is checked, since a hand-edited or copied file may say anything. */
export function parseClusterState(dataDir: string, text: string, owner: ClusterStateOwner): ClusterState {
  if (Buffer.byteLength(text, 'utf8') > CLUSTER_STATE_BYTES_MAX)
    throw malformed(dataDir, `more than CLUSTER_STATE_BYTES_MAX (${CLUSTER_STATE_BYTES_MAX}) bytes`);
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw malformed(dataDir, `not JSON: ${(err as Error).message}`);
  }
  const obj = record(raw) ?? fail(dataDir, 'not a JSON object');
  const format = obj.format;
  if (!Number.isSafeInteger(format) || (format as number) < 1) fail(dataDir, 'bad "format"');
  if (format !== CLUSTER_STATE_FORMAT) throw laterFormat(dataDir, format as number);
  const unknown = Object.keys(obj).find((k) => !STATE_KEYS.has(k));
  if (unknown !== undefined) fail(dataDir, `unknown field "${unknown}"`);
  if (!isValidNodeId(obj.nodeId)) fail(dataDir, 'bad "nodeId"');
  if (obj.nodeId !== owner.nodeId)
    throw foreign(dataDir, `node ${String(obj.nodeId)}`, `node ${owner.nodeId}`);
  if (!isIncarnation(obj.incarnation)) fail(dataDir, 'bad "incarnation"');
  if (!Array.isArray(obj.members)) fail(dataDir, '"members" is not a list');
  const problem = membersProblem(obj.members as unknown[], owner.nodeId, obj.incarnation as number);
  if (problem !== null) fail(dataDir, problem);
  const members = (obj.members as MemberRecord[]).map(memberRecord);
  const table = obj.table === null ? null : tableFrom(dataDir, obj.table);
  if (table !== null && table.fragmentCount !== owner.fragmentCount) {
    throw foreign(dataDir, `a table of ${table.fragmentCount} fragments`, `${owner.fragmentCount} fragments`);
  }
  // Absent in files written before promises were kept: none made.
  const promise =
    obj.promise === undefined || obj.promise === null ? null : promiseFrom(dataDir, obj.promise);
  return { nodeId: owner.nodeId, incarnation: obj.incarnation as number, members, table, promise };
}

function promiseFrom(dataDir: string, value: unknown): EpochPromise {
  const p = record(value);
  const to = record(p?.to);
  if (
    p === null ||
    to === null ||
    !isIncarnation(p.epoch) ||
    !isValidNodeId(to.id) ||
    !isIncarnation(to.incarnation)
  )
    fail(dataDir, 'bad "promise"');
  return { epoch: p!.epoch as number, to: { id: to!.id as string, incarnation: to!.incarnation as number } };
}

/** What is wrong with the member list of node `nodeId` at `incarnation`, or null. */
function membersProblem(list: readonly unknown[], nodeId: string, incarnation: number): string | null {
  if (list.length > CLUSTER_STATE_MEMBERS_MAX)
    return `${list.length} members, more than CLUSTER_STATE_MEMBERS_MAX (${CLUSTER_STATE_MEMBERS_MAX})`;
  const seen = new Set<string>();
  for (const [index, item] of list.entries()) {
    const problem = memberProblem(item);
    if (problem !== null) return `members[${index}]: ${problem}`;
    const m = item as MemberRecord;
    if (seen.has(m.nodeId)) return `members[${index}]: node id ${m.nodeId} listed twice`;
    seen.add(m.nodeId);
    if (m.nodeId === nodeId && m.incarnation !== incarnation)
      return `this node's member record is at incarnation ${m.incarnation}, the file at ${incarnation}`;
  }
  return null;
}

/** What is wrong with a member record, or null. An address may be empty: a member heard of only as removed. */
function memberProblem(value: unknown): string | null {
  const m = record(value);
  if (m === null) return 'not an object';
  const unknown = Object.keys(m).find((k) => !MEMBER_KEYS.has(k));
  if (unknown !== undefined) return `unknown field "${unknown}"`;
  if (!isValidNodeId(m.nodeId)) return 'bad "nodeId"';
  if (typeof m.address !== 'string') return 'bad "address"';
  if (!isIncarnation(m.incarnation)) return 'bad "incarnation"';
  if (typeof m.state !== 'string' || !MEMBER_STATES.has(m.state))
    return `unknown state ${JSON.stringify(m.state)}`;
  return null;
}

const memberRecord = ({ nodeId, address, incarnation, state }: MemberRecord): MemberRecord => ({
  nodeId,
  address,
  incarnation,
  state,
});

function tableFrom(dataDir: string, value: unknown): AssignmentTable {
  try {
    return decodeTable(value);
  } catch (err) {
    if (!(err instanceof TesseraError)) throw err;
    throw malformed(dataDir, `bad "table": ${err.message.replace(/^invalid input: /, '')}`);
  }
}

/** Writes the state atomically and durably, replacing the stored one. */
export async function writeClusterState(dataDir: string, state: ClusterState): Promise<void> {
  assert(isValidNodeId(state.nodeId) && isIncarnation(state.incarnation), 'bad cluster state identity');
  // A MemberView carries more than is stored: only the record's fields are written.
  const members = state.members.map(memberRecord);
  // What a restart would refuse is a bug of the caller's, caught here rather than at that restart.
  const problem = membersProblem(members, state.nodeId, state.incarnation);
  assert(problem === null, `cluster state to write: ${problem}`);
  const text = `${JSON.stringify({
    format: CLUSTER_STATE_FORMAT,
    nodeId: state.nodeId,
    incarnation: state.incarnation,
    members,
    table: state.table === null ? null : encodeTable(state.table),
    promise: state.promise,
  })}\n`;
  const bytes = Buffer.byteLength(text, 'utf8');
  // Never write what a restart would refuse to read.
  if (bytes > CLUSTER_STATE_BYTES_MAX) {
    throw storageError(
      `cluster state of ${bytes} bytes is more than CLUSTER_STATE_BYTES_MAX (${CLUSTER_STATE_BYTES_MAX}); ` +
        `${CLUSTER_STATE_FILE} in ${dataDir} keeps the previous state`,
    );
  }
  try {
    await replaceFileDurably(path.join(dataDir, CLUSTER_STATE_FILE), text);
  } catch (err) {
    throw asStorageError(err);
  }
}

/**
 * The writes of one node's cluster state, one at a time: membership updates its incarnation and
 * members, the coordinator its table, and each write holds the latest of both. An update made while
 * a write is in flight is coalesced into the next write; its promise settles when a write that
 * holds it has landed (or failed).
 */
export class ClusterStateWriter {
  private state: ClusterState;
  private writing = false;
  private waiting: Array<{ resolve: () => void; reject: (err: unknown) => void }> = [];

  constructor(
    private readonly dataDir: string,
    initial: ClusterState,
  ) {
    this.state = initial;
  }

  /** The state as the last update left it (written or about to be). */
  get latest(): ClusterState {
    return this.state;
  }

  update(part: Partial<Pick<ClusterState, 'incarnation' | 'members' | 'table' | 'promise'>>): Promise<void> {
    this.state = { ...this.state, ...part };
    const written = new Promise<void>((resolve, reject) => this.waiting.push({ resolve, reject }));
    if (!this.writing) void this.writeLoop();
    return written;
  }

  private async writeLoop(): Promise<void> {
    this.writing = true;
    while (this.waiting.length > 0) {
      const batch = this.waiting;
      this.waiting = [];
      try {
        await writeClusterState(this.dataDir, this.state);
        for (const w of batch) w.resolve();
      } catch (err) {
        for (const w of batch) w.reject(err);
      }
    }
    this.writing = false;
  }
}

/**
 * A start: removes temp files of interrupted writes, reads the stored state (none for a fresh node),
 * bumps this node's incarnation (its own member record's with it) and writes that durably before
 * returning it, so the node speaks to no one at an incarnation a previous run may have used. A
 * fresh node starts at the wall clock's milliseconds (`nowMs`), above what an earlier run of its id
 * on a data directory since lost used, so its members can tell the two runs apart (`firstStart`).
 * Runs under the data directory's lock (data-dir-lock.ts): no other process writes the file.
 */
export async function startIncarnation(
  dataDir: string,
  owner: ClusterStateOwner,
  nowMs: number = Date.now(),
): Promise<ClusterState & { firstStart: boolean }> {
  await removeInterruptedWrites(dataDir);
  const stored = await readClusterState(dataDir, owner);
  const incarnation = stored === undefined ? Math.max(1, Math.floor(nowMs)) : stored.incarnation + 1;
  assert(isIncarnation(incarnation), 'incarnation past the safe integers');
  const started: ClusterState = {
    nodeId: owner.nodeId,
    incarnation,
    members: (stored?.members ?? []).map((m) => (m.nodeId === owner.nodeId ? { ...m, incarnation } : m)),
    table: stored?.table ?? null,
    promise: stored?.promise ?? null,
  };
  await writeClusterState(dataDir, started);
  return { ...started, firstStart: stored === undefined };
}

/** Temp files are this process's until renamed; at a start, any found are from a run that died writing. */
async function removeInterruptedWrites(dataDir: string): Promise<void> {
  let names: string[];
  try {
    names = await fs.readdir(dataDir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw asStorageError(err);
  }
  for (const name of names) {
    if (name.startsWith(`${CLUSTER_STATE_FILE}.`) && name.endsWith(TEMP_FILE_SUFFIX))
      await fs.rm(path.join(dataDir, name), { force: true });
  }
}

function record(value: unknown): Record<string, unknown> | null {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : null;
}

function fail(dataDir: string, why: string): never {
  throw malformed(dataDir, why);
}

const malformed = (dataDir: string, why: string): TesseraError =>
  storageError(
    `data directory ${dataDir} has a malformed ${CLUSTER_STATE_FILE} (${why}). Restore it from a backup, or ` +
      'remove it: the node then starts as a new member (with --join or --peers) and outbids its old record',
  );

const foreign = (dataDir: string, holds: string, expected: string): TesseraError =>
  storageError(
    `${CLUSTER_STATE_FILE} in data directory ${dataDir} holds the state of ${holds}, but the directory's ` +
      `MANIFEST.json is for ${expected}: it was copied from another node. Put back this node's own file, or ` +
      'remove it: the node then starts as a new member (with --join or --peers)',
  );

const laterFormat = (dataDir: string, format: number): TesseraError =>
  storageError(
    `data directory ${dataDir} has a ${CLUSTER_STATE_FILE} in format ${format}; this version of Tessera reads ` +
      `format ${CLUSTER_STATE_FORMAT}. Start a Tessera release that reads format ${format}, or remove the file ` +
      'to start the node as a new member',
  );
