// The RESP command table and what every command shares: lookup by name without building strings,
// arity and authentication checks with Redis's error texts, argument parsing, and the submission
// of reads and writes through the dispatcher with module-level result handlers (no closure or
// promise per command).

import { ErrorKind, TesseraError } from '../../core/errors.js';
import { CommandTable, commandNameKey, type RespCommand } from '../../core/resp-parser.js';
import type { RespWriter } from '../../core/resp-writer.js';
import { BIT_COMMANDS } from './bit-commands.js';
import { CLUSTER_COMMANDS } from './cluster-commands.js';
import { CommandStats } from './command-stats.js';
import type { RespConnection } from './connection.js';
import { HLL_COMMANDS } from './hll-commands.js';
import { KEY_COMMANDS } from './key-commands.js';
import { ALLOWED_WHILE_SUBSCRIBED, PUBSUB_COMMANDS, refuseWhileSubscribed } from './pubsub-commands.js';
import { SERVER_COMMANDS } from './server-commands.js';
import { STRING_COMMANDS } from './string-commands.js';
import { UNSUPPORTED_COMMANDS } from './unsupported-commands.js';

/** Where a command's keys are: first and last argument index (last -1: to the end), and the step. */
export type KeyRange = readonly [first: number, last: number, step: number];

/** The index of a command's last key argument, for `argc` arguments (below `first` when there is none). */
export function lastKeyIndex(range: KeyRange, argc: number): number {
  const last = range[1];
  return last < 0 ? argc + last : Math.min(last, argc - 1);
}

/**
 * The key arguments `cmd` has, as `[first, last, step]` by its spec (a container's per subcommand);
 * undefined when it has none.
 */
export function keyArguments(spec: CommandSpec, cmd: RespCommand): KeyRange | undefined {
  const range = (cmd.argc > 1 ? spec.subcommandKeys?.[optionName(cmd, 1)] : undefined) ?? spec.keys;
  const first = range[0];
  if (first === 0) return undefined;
  const last = lastKeyIndex(range, cmd.argc);
  return first > last ? undefined : [first, last, range[2]];
}

export interface CommandSpec {
  /** Upper-case name. */
  name: string;
  /** Redis arity: n > 0 exactly n arguments (name included), n < 0 at least -n. */
  arity: number;
  /** Redis command flags, for COMMAND INFO (e.g. 'write', 'readonly', 'fast', 'no-auth'). */
  flags: readonly string[];
  /** Key positions, for COMMAND INFO and cluster clients: first, last (-1: to the end), step. */
  keys: KeyRange;
  /** A container command's key positions per subcommand (COMMAND GETKEYS MEMORY USAGE k). */
  subcommandKeys?: Readonly<Record<string, KeyRange>>;
  /**
   * What the command needs besides its keys, that only the main thread has: `node`, the whole node
   * (INFO, CONFIG, CLUSTER, a scan of every fragment, WAIT) — a worker port has it run there;
   * `session`, subscriptions, which the node delivers on the main thread — a worker port runs it
   * there on a connection kept for its client, whose pushes come back to the client (MONITOR's
   * feed too).
   */
  needs?: 'node' | 'session';
  /** Runs the command: true when it answered into `w` now, false when it deferred a reply slot. */
  run(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean;
}

export const COMMANDS: readonly CommandSpec[] = [
  ...SERVER_COMMANDS,
  ...STRING_COMMANDS,
  ...BIT_COMMANDS,
  ...HLL_COMMANDS,
  ...KEY_COMMANDS,
  ...CLUSTER_COMMANDS,
  ...PUBSUB_COMMANDS,
  ...UNSUPPORTED_COMMANDS,
];
const TABLE = new CommandTable(COMMANDS.map((c) => c.name));
/** By command id: the command adds data, so it is refused while the memory store is over its bound. */
const DENY_OOM = COMMANDS.map((c) => c.flags.includes('denyoom'));
/** By command id: Redis flags it fast (its LATENCY samples are `fast-command`). */
const FAST = COMMANDS.map((c) => c.flags.includes('fast'));
/** Bytes of each argument an unknown-command error quotes, at most (Redis's 128). */
const UNKNOWN_ARGS_QUOTED_BYTES_MAX = 128;

/** The per-command counters of INFO commandstats and latencystats, for this command table. */
export function commandStatsOfTable(): CommandStats {
  const containers = new Set<number>();
  COMMANDS.forEach((c, id) => {
    if (CONTAINER_COMMANDS.has(c.name)) containers.add(id);
  });
  return new CommandStats(
    COMMANDS.map((c) => c.name),
    containers,
  );
}

export function findCommand(name: Uint8Array): CommandSpec | undefined {
  const id = TABLE.lookup(name);
  return id === -1 ? undefined : COMMANDS[id];
}

/** Executes one parsed command for `conn`; true when answered into `w` now. */
export function executeCommand(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  conn.commandRan = undefined;
  const id = TABLE.lookupCommand(cmd);
  if (id === -1) {
    unknownCommand(cmd, w);
    return true;
  }
  const spec = COMMANDS[id];
  conn.lastCommand = spec.name;
  const stats = conn.server.commandStats;
  const stat = stats.statOf(id, cmd);
  if (refusedBeforeRunning(conn, id, spec, cmd, w)) {
    stats.reject(stat);
    return true;
  }
  // A command a worker port hands to the main thread is counted (and shown to MONITOR) there, where
  // it runs: not twice.
  if (!conn.server.runsHere(conn, spec)) {
    const answeredNow = conn.server.runElsewhere(conn, spec, cmd, w);
    conn.commandClockMs = performance.now();
    return answeredNow;
  }
  // As Redis counts: commands that ran, not those refused before (unknown, arity, NOAUTH, OOM).
  conn.server.stats.commandsProcessed++;
  conn.commandRan = spec;
  conn.runningStat = stat;
  const errorsBefore = w.errorReplies;
  const answeredNow = spec.run(conn, cmd, w);
  // One clock read per command: its end is the next command's start (RespConnection.commandClockMs).
  const endMs = performance.now();
  const tookMs = endMs - conn.commandClockMs;
  conn.commandClockMs = endMs;
  stats.ran(stat, tookMs);
  const slowlog = conn.server.slowlog;
  if (tookMs * 1000 >= slowlog.slowerThanUs) slowlog.consider(spec, cmd, tookMs * 1000, conn);
  const latency = conn.server.latencyMonitor;
  if (latency.thresholdMs !== 0 && tookMs >= latency.thresholdMs) {
    latency.record(FAST[id] ? 'fast-command' : 'command', Math.round(tookMs), Math.floor(Date.now() / 1000));
  }
  conn.runningStat = -1;
  // A reply answered later is judged when it is written (RespConnection.endReply).
  if (answeredNow && w.errorReplies !== errorsBefore) stats.fail(stat);
  return answeredNow;
}

/** Writes the refusal of a command that may not run now (Redis's rejected calls); false when it may. */
function refusedBeforeRunning(
  conn: RespConnection,
  id: number,
  spec: CommandSpec,
  cmd: RespCommand,
  w: RespWriter,
): boolean {
  if (!arityHolds(spec.arity, cmd.argc)) {
    w.error(`wrong number of arguments for '${spec.name.toLowerCase()}' command`);
    return true;
  }
  if (!conn.authenticated && !spec.flags.includes('no-auth')) {
    w.errorCode('NOAUTH', 'Authentication required.');
    return true;
  }
  if (conn.pubsubMode && conn.protocol === 2 && !ALLOWED_WHILE_SUBSCRIBED.has(spec.name)) {
    return refuseWhileSubscribed(w, fullName(spec, cmd));
  }
  if (conn.monitoring && (spec.flags.includes('write') || spec.flags.includes('readonly'))) {
    w.error("Replica can't interact with the keyspace");
    return true;
  }
  if (conn.server.redirected(conn, spec, cmd, w)) return true;
  if (DENY_OOM[id] && conn.server.memoryFull()) {
    writeErrorText(w, OUT_OF_MEMORY);
    return true;
  }
  return false;
}

/** Redis commands with subcommands: their full name is `container|subcommand`. */
const CONTAINER_COMMANDS = new Set([
  'ACL',
  'CLIENT',
  'CLUSTER',
  'COMMAND',
  'CONFIG',
  'FUNCTION',
  'LATENCY',
  'MEMORY',
  'MODULE',
  'OBJECT',
  'PUBSUB',
  'SCRIPT',
  'SLOWLOG',
  'XGROUP',
  'XINFO',
]);

/** A command's name as Redis's errors write it: lower case, with its subcommand (`client|list`). */
export function fullName(spec: CommandSpec, cmd: RespCommand): string {
  const name = spec.name.toLowerCase();
  if (cmd.argc < 2 || !CONTAINER_COMMANDS.has(spec.name)) return name;
  return `${name}|${cmd.arg(1).toString('latin1').toLowerCase()}`;
}

export function arityHolds(arity: number, argc: number): boolean {
  return arity >= 0 ? argc === arity : argc >= -arity;
}

function unknownCommand(cmd: RespCommand, w: RespWriter): void {
  let args = '';
  for (let i = 1; i < cmd.argc && args.length < UNKNOWN_ARGS_QUOTED_BYTES_MAX; i++) {
    const text = cmd.arg(i).toString('latin1');
    args += `'${text.slice(0, UNKNOWN_ARGS_QUOTED_BYTES_MAX - args.length)}' `;
  }
  const name = cmd.arg(0).toString('latin1').slice(0, UNKNOWN_ARGS_QUOTED_BYTES_MAX);
  w.error(`unknown command '${name}', with args beginning with: ${args}`);
}

/**
 * Answers a command whose result comes later (a scan, a count, INFO) in its place in the reply
 * order: `write` gets the value; a failure is written as an error.
 */
export function answerLater<T>(
  conn: RespConnection,
  result: Promise<T>,
  write: (w: RespWriter, value: T) => void,
): false {
  const slot = conn.defer();
  result.then(
    (value) => {
      write(slot.conn.beginReply(slot), value);
      slot.conn.endReply(slot);
    },
    (err: unknown) => {
      const w = slot.conn.beginReply(slot);
      if (err instanceof TesseraError) writeFailure(w, err);
      else w.error(err instanceof Error ? err.message : String(err));
      slot.conn.endReply(slot);
    },
  );
  return false;
}

/** The reply for an error a Tessera operation failed with. */
export function writeFailure(w: RespWriter, error: TesseraError): void {
  writeErrorText(w, failureText(error));
}

/** The RESP error text, code first, for an error a Tessera operation failed with. */
export function failureText(error: TesseraError): string {
  switch (error.kind) {
    case ErrorKind.Backpressure:
      // Clients (ioredis in cluster mode among them) retry TRYAGAIN after a pause.
      return `TRYAGAIN ${error.message}`;
    case ErrorKind.InvalidInput:
      return `ERR ${error.message.replace(/^invalid input: /, '')}`;
    case ErrorKind.OutOfMemory:
      return OUT_OF_MEMORY;
    case ErrorKind.ReplicaTimeout:
      // As Redis words a write refused for want of replicas (min-replicas-to-write).
      return `NOREPLICAS ${error.message}`;
    case ErrorKind.Unavailable:
      // As Redis Cluster words a slot no node serves; cluster clients refresh their map and retry.
      return `${SLOT_NOT_SERVED} (${error.message})`;
    default:
      return `ERR ${error.message}`;
  }
}

/** Redis Cluster's answer for a hash slot no reachable node serves. */
export const SLOT_NOT_SERVED = 'CLUSTERDOWN Hash slot not served';

/** Redis's answer to a command that adds data while used memory is over `maxmemory`. */
const OUT_OF_MEMORY = "OOM command not allowed when used memory > 'maxmemory'.";

/** Redis Cluster's answer to a command whose keys span hash slots. */
export function crossSlot(w: RespWriter): true {
  w.errorCode('CROSSSLOT', "Keys in request don't hash to the same slot");
  return true;
}

/** An error whose text already starts with its code (`ERR …`, `WRONGTYPE …`). */
export function writeErrorText(w: RespWriter, text: string): void {
  const space = text.indexOf(' ');
  const code = space === -1 ? '' : text.slice(0, space);
  if (/^[A-Z][A-Z0-9_]*$/.test(code)) w.errorCode(code, text.slice(space + 1));
  else w.error(text);
}

/** Answers `-ERR <message>` now; true, for a command's return. */
export function replyError(w: RespWriter, message: string): true {
  w.error(message);
  return true;
}

/** A container command's HELP: its lines as an array of simple strings, as Redis answers it. */
export function writeHelp(w: RespWriter, lines: readonly string[]): true {
  w.arrayHeader(lines.length);
  for (const line of lines) w.simple(line);
  return true;
}

/** A container command's reply to a subcommand it does not have, in Redis's words. */
export function unknownSubcommand(w: RespWriter, cmd: RespCommand, container: string): true {
  w.error(`unknown subcommand '${cmd.arg(1).toString('latin1')}'. Try ${container} HELP.`);
  return true;
}

export const SYNTAX_ERROR = 'syntax error';
export const NOT_INTEGER = 'value is not an integer or out of range';

const INT64_MAX = 2n ** 63n - 1n;
const INT64_MIN = -(2n ** 63n);

/**
 * Argument `i` as Redis's string2ll reads a signed 64-bit integer (canonical digits only), clamped to
 * JavaScript's safe range — every caller treats magnitudes that large as out of its own range
 * anyway (deadlines, offsets, counts). Undefined when it is not an int64.
 */
export function integerArg(cmd: RespCommand, i: number): number | undefined {
  const n = cmd.argLength(i);
  if (n === 0 || n > 20) return undefined;
  const text = cmd.arg(i).toString('latin1');
  if (!/^-?(0|[1-9][0-9]*)$/.test(text) || text === '-0') return undefined;
  if (text.length < 16) return Number(text);
  const big = BigInt(text);
  if (big > INT64_MAX || big < INT64_MIN) return undefined;
  return big > BigInt(Number.MAX_SAFE_INTEGER)
    ? Number.MAX_SAFE_INTEGER
    : big < BigInt(Number.MIN_SAFE_INTEGER)
      ? Number.MIN_SAFE_INTEGER
      : Number(big);
}

/** Upper-case name of argument `i`, for option parsing (the slow path). */
export function optionName(cmd: RespCommand, i: number): string {
  return commandNameKey(cmd.arg(i));
}
