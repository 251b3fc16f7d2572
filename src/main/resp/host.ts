// What a RESP connection and its commands are served by: the node's RESP server on the main thread,
// or a worker's RESP port (src/workers/resp-port.ts). The commands are written once against this;
// the few that need the whole node (INFO, CONFIG, CLUSTER, a scan of every fragment) reach it
// through `nodeServer`, and a worker port has them run on the main thread (CommandSpec.needs).

import { createHash, timingSafeEqual } from 'node:crypto';
import type { Logger } from 'pino';
import { assert } from '../../core/assert.js';
import type { Durability } from '../../core/ops.js';
import type { RespCommand } from '../../core/resp-parser.js';
import type { RespWriter } from '../../core/resp-writer.js';
import type { KeyRouter } from '../key-router.js';
import type { CommandStats } from './command-stats.js';
import type { CommandSpec } from './commands.js';
import type { RespConnection } from './connection.js';
import type { LatencyMonitor } from './latency-monitor.js';
import type { RespServer, RespStats } from './server.js';
import type { SlowLog } from './slowlog.js';

/** The node's settings a connection and its key commands read. */
export interface RespSettings {
  /** The durability a new connection's writes get. */
  readonly durability: Durability;
  /** Other replicas a new connection's writes wait for. */
  readonly replicaAcks: number;
  readonly fragments: number;
  readonly valueBytesMax: number;
}

export interface RespHost {
  readonly stats: RespStats;
  readonly commandStats: CommandStats;
  /** Error replies by code, every connection's writers counting here (INFO errorstats). */
  readonly errorCodes: Map<string, number>;
  readonly slowlog: SlowLog;
  readonly latencyMonitor: LatencyMonitor;
  /** Connections in MONITOR mode (only the main thread has them: a worker port's run in a session there). */
  readonly monitors: Set<RespConnection>;
  /** Whether some client of the node is a MONITOR: each command run is then shown (`showToMonitors`). */
  readonly monitored: boolean;
  readonly logger: Logger;
  readonly requiresAuth: boolean;
  readonly settings: RespSettings;
  /** Where key commands read and write. */
  readonly keys: KeyRouter;
  /** The node's RESP server, when this is it (the main port); undefined on a worker port. */
  readonly main: RespServer | undefined;
  passwordMatches(password: Uint8Array): boolean;
  /** True while the memory store is over its bound: commands that add data are refused. */
  memoryFull(): boolean;
  /** This face's clients (CLIENT LIST, CLIENT KILL). */
  connections(): RespConnection[];
  /** Sends `conn`'s replies at the end of this event-loop turn, with every other connection's. */
  flushSoon(conn: RespConnection): void;
  forget(conn: RespConnection): void;
  showToMonitors(from: RespConnection, cmd: RespCommand, spec: CommandSpec): void;
  /** Drops every subscription of `conn` (RESET). */
  unsubscribeAll(conn: RespConnection): void;
  /**
   * Answers a command whose keys this face does not serve (`-MOVED`, `-CROSSSLOT`) and writes true;
   * false when it runs here.
   */
  redirected(conn: RespConnection, spec: CommandSpec, cmd: RespCommand, w: RespWriter): boolean;
  /** Whether `spec` runs on this face for `conn` (else `runElsewhere`). */
  runsHere(conn: RespConnection, spec: CommandSpec): boolean;
  /**
   * Runs a command that needs what only the main thread has (`spec.needs`) on a face that is not
   * the main port: relayed there, or refused. True when it answered into `w` now.
   */
  runElsewhere(conn: RespConnection, spec: CommandSpec, cmd: RespCommand, w: RespWriter): boolean;
}

/** The node's RESP server, for a command that only runs there (CommandSpec.needs). */
export function nodeServer(conn: RespConnection): RespServer {
  const main = conn.server.main;
  assert(main !== undefined, `${conn.lastCommand} ran on a face that is not the node's RESP server`);
  return main;
}

/** A RESP password (Redis `requirepass`), compared in constant time: both sides hashed to equal length. */
export class RespPassword {
  private readonly digest: Buffer;

  constructor(password: string) {
    this.digest = sha256(Buffer.from(password, 'utf8'));
  }

  matches(password: Uint8Array): boolean {
    return timingSafeEqual(sha256(password), this.digest);
  }
}

function sha256(bytes: Uint8Array): Buffer {
  return createHash('sha256').update(bytes).digest();
}
