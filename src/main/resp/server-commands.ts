// Connection and server commands: PING, ECHO, HELLO, AUTH, SELECT, QUIT, RESET, CLIENT, COMMAND,
// CONFIG GET, INFO, TIME, ROLE, WAIT, SHUTDOWN, MONITOR, and Tessera's own TESSERA.DURABILITY (this
// connection's write acknowledgement level) and TESSERA.BACKUP.

import path from 'node:path';
import { globMatch } from '../../core/glob.js';
import { REPLICA_ACKS_MAX, TIMER_DELAY_MS_MAX } from '../../core/limits.js';
import { DURABILITY_NAMES, Durability, Priority, parseDurability } from '../../core/ops.js';
import { SubscriptionKind } from '../../core/pubsub.js';
import { AckLevel } from '../../core/replication-sender.js';
import type { RespCommand } from '../../core/resp-parser.js';
import type { RespWriter } from '../../core/resp-writer.js';
import { forgetAfterWait, type ReplicaWaitAnswer, splitWritten, waitForReplicas } from '../replica-waiter.js';
import { command as commandIntrospection } from './command-introspection.js';
import {
  answerLater,
  type CommandSpec,
  integerArg,
  type KeyRange,
  NOT_INTEGER,
  optionName,
  replyError,
  SYNTAX_ERROR,
  unknownSubcommand,
  writeHelp,
} from './commands.js';
import type { RespConnection } from './connection.js';
import { nodeServer } from './host.js';
import { keyFits, ReadMode, readKey } from './key-access.js';
import { REDIS_VERSION } from './server.js';

function ping(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  if (cmd.argc > 2) w.error("wrong number of arguments for 'ping' command");
  else if (conn.pubsubMode && conn.protocol === 2) {
    // A subscribed RESP2 client reads every reply as a push-shaped array.
    w.arrayHeader(2);
    w.bulk('pong');
    w.bulk(cmd.argc === 2 ? cmd.arg(1) : '');
  } else if (cmd.argc === 2) w.bulk(cmd.arg(1));
  else w.simple('PONG');
  return true;
}

function echo(_conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  w.bulk(cmd.arg(1));
  return true;
}

/** AUTH [username] password — only the default user exists. */
function auth(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  if (cmd.argc > 3) {
    w.error(SYNTAX_ERROR);
    return true;
  }
  const user = cmd.argc === 3 ? cmd.arg(1).toString('utf8') : 'default';
  const password = cmd.arg(cmd.argc - 1);
  // Redis answers the one-argument form this way when no password is set; `AUTH default x` succeeds.
  if (!conn.server.requiresAuth && cmd.argc === 2) {
    w.error(
      'AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?',
    );
    return true;
  }
  if (authenticate(conn, user, password)) w.ok();
  else w.errorCode('WRONGPASS', 'invalid username-password pair or user is disabled.');
  return true;
}

/** Only the default user exists; without a configured password it accepts any password, as Redis's nopass. */
function authenticate(conn: RespConnection, user: string, password: Uint8Array): boolean {
  const ok = user === 'default' && (!conn.server.requiresAuth || conn.server.passwordMatches(password));
  conn.authenticated = ok || conn.authenticated;
  return ok;
}

/** HELLO [protover [AUTH username password] [SETNAME clientname]] */
function hello(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  let protocol = conn.protocol;
  if (cmd.argc >= 2) {
    const version = integerArg(cmd, 1);
    if (version === undefined) {
      w.error('Protocol version is not an integer or out of range');
      return true;
    }
    if (version !== 2 && version !== 3) {
      w.errorCode('NOPROTO', 'unsupported protocol version');
      return true;
    }
    protocol = version;
  }
  let name: string | undefined;
  for (let i = 2; i < cmd.argc; i++) {
    const option = optionName(cmd, i);
    if (option === 'AUTH' && i + 2 < cmd.argc) {
      if (!authenticate(conn, cmd.arg(i + 1).toString('utf8'), cmd.arg(i + 2))) {
        w.errorCode('WRONGPASS', 'invalid username-password pair or user is disabled.');
        return true;
      }
      i += 2;
    } else if (option === 'SETNAME' && i + 1 < cmd.argc) {
      name = cmd.arg(++i).toString('utf8');
      if (!validClientName(name)) {
        w.error('Client names cannot contain spaces, newlines or special characters.');
        return true;
      }
    } else {
      w.error(`Syntax error in HELLO option '${cmd.arg(i).toString('latin1')}'`);
      return true;
    }
  }
  if (!conn.authenticated) {
    w.errorCode(
      'NOAUTH',
      'HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time',
    );
    return true;
  }
  if (name !== undefined) conn.name = name;
  conn.protocol = protocol;
  w.mapHeader(7);
  w.bulk('server');
  w.bulk('redis');
  w.bulk('version');
  w.bulk(REDIS_VERSION);
  w.bulk('proto');
  w.integer(protocol);
  w.bulk('id');
  w.integer(conn.id);
  w.bulk('mode');
  w.bulk('standalone');
  w.bulk('role');
  w.bulk('master');
  w.bulk('modules');
  w.arrayHeader(0);
  return true;
}

function validClientName(name: string): boolean {
  return /^[\x21-\x7e]*$/.test(name);
}

function select(_conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  const index = integerArg(cmd, 1);
  if (index === undefined) w.error(NOT_INTEGER);
  else if (index !== 0) w.error('DB index is out of range');
  else w.ok();
  return true;
}

function quit(conn: RespConnection, _cmd: RespCommand, w: RespWriter): boolean {
  w.ok();
  conn.quitAfterReplies();
  return true;
}

function reset(conn: RespConnection, _cmd: RespCommand, w: RespWriter): boolean {
  conn.protocol = 2;
  conn.name = '';
  // Redis clears OFF and a pending SKIP, not a SKIP already in force for this very command.
  conn.replyOff = false;
  conn.skipNextReply = false;
  conn.durability = conn.server.settings.durability;
  conn.authenticated = !conn.server.requiresAuth;
  conn.monitoring = false;
  conn.server.monitors.delete(conn);
  // Unsubscribed from everything, without a confirmation per name.
  conn.server.unsubscribeAll(conn);
  conn.pubsubMode = false;
  w.simple('RESET');
  return true;
}

/** Exact argument counts of the CLIENT subcommands that take none or fixed ones. */
const CLIENT_ARITY: Record<string, number> = {
  GETNAME: 2,
  ID: 2,
  INFO: 2,
  'NO-EVICT': 3,
  'NO-TOUCH': 3,
  REPLY: 3,
  HELP: 2,
};

/** CLIENT SETNAME / GETNAME / ID / INFO / LIST / KILL / REPLY / SETINFO / NO-EVICT / NO-TOUCH / HELP */
function client(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  const sub = optionName(cmd, 1);
  conn.lastCommand = `CLIENT|${sub}`;
  const arity = CLIENT_ARITY[sub];
  if (arity !== undefined && cmd.argc !== arity) return wrongArity(w, `client|${sub.toLowerCase()}`);
  switch (sub) {
    case 'SETNAME': {
      if (cmd.argc !== 3) return wrongArity(w, 'client|setname');
      const name = cmd.arg(2).toString('utf8');
      if (!validClientName(name))
        w.error('Client names cannot contain spaces, newlines or special characters.');
      else {
        conn.name = name;
        w.ok();
      }
      return true;
    }
    case 'GETNAME':
      if (conn.name === '') w.null();
      else w.bulk(conn.name);
      return true;
    case 'ID':
      w.integer(conn.id);
      return true;
    case 'INFO':
      w.verbatim(`${clientInfo(conn)}\n`);
      return true;
    case 'LIST':
      w.verbatim(
        conn.server
          .connections()
          .map((c) => `${clientInfo(c)}\n`)
          .join(''),
      );
      return true;
    case 'SETINFO': {
      if (cmd.argc !== 4) return wrongArity(w, 'client|setinfo');
      const attribute = optionName(cmd, 2);
      const value = cmd.arg(3).toString('utf8');
      if (!validClientName(value))
        w.error(`${attribute} cannot contain spaces, newlines or special characters.`);
      else if (attribute === 'LIB-NAME') conn.libName = value;
      else if (attribute === 'LIB-VER') conn.libVersion = value;
      else {
        w.error(`Unrecognized option '${cmd.arg(2).toString('latin1')}'`);
        return true;
      }
      w.ok();
      return true;
    }
    case 'NO-EVICT':
    case 'NO-TOUCH':
      w.ok();
      return true;
    case 'KILL':
      if (cmd.argc < 3) return wrongArity(w, 'client|kill');
      return clientKill(conn, cmd, w);
    case 'REPLY':
      return clientReply(conn, cmd, w);
    case 'HELP':
      return writeHelp(w, CLIENT_HELP);
    default:
      return unknownSubcommand(w, cmd, 'CLIENT');
  }
}

const CLIENT_HELP = [
  'CLIENT <subcommand> [<arg> ...]. Subcommands are:',
  'GETNAME',
  'ID',
  'INFO',
  'KILL <ip:port>',
  'KILL <option> <value> [<option> <value> [...]]',
  '    Options: ID <client-id>, ADDR <ip:port>, LADDR <ip:port>, USER <username>,',
  '    TYPE <normal|master|replica|pubsub> (subscribers are pubsub, every other client normal), SKIPME <yes|no>.',
  'LIST',
  'REPLY <ON|OFF|SKIP>',
  'SETINFO <LIB-NAME|LIB-VER> <value>',
  'SETNAME <name>',
  'HELP',
];

/** Client types CLIENT KILL TYPE accepts: a RESP client of a node is `pubsub` while subscribed, else `normal`. */
const CLIENT_TYPES = new Set(['normal', 'master', 'replica', 'slave', 'pubsub']);

/**
 * CLIENT KILL ip:port (answers OK, or an error when no client has that address), or CLIENT KILL
 * with filters (answers how many were closed; the caller itself only with SKIPME no). A killed
 * connection closes at once; the caller's own closes after this reply.
 */
function clientKill(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  let id: number | undefined;
  let addr: string | undefined;
  let laddr: string | undefined;
  let type: string | undefined;
  let skipMe = true;
  const legacy = cmd.argc === 3;
  if (legacy) addr = cmd.arg(2).toString('latin1');
  else {
    for (let i = 2; i < cmd.argc; i += 2) {
      const option = optionName(cmd, i);
      if (i + 1 >= cmd.argc) return replyError(w, SYNTAX_ERROR);
      const value = cmd.arg(i + 1).toString('latin1');
      if (option === 'ID') {
        const n = integerArg(cmd, i + 1);
        if (n === undefined || n < 1) return replyError(w, 'client-id should be greater than 0');
        id = n;
      } else if (option === 'ADDR') addr = value;
      else if (option === 'LADDR') laddr = value;
      else if (option === 'TYPE') {
        type = value.toLowerCase();
        if (!CLIENT_TYPES.has(type)) return replyError(w, `Unknown client type '${value}'`);
      } else if (option === 'USER') {
        if (value !== 'default') return replyError(w, `No such user '${value}'`);
      } else if (option === 'SKIPME') {
        const answer = value.toLowerCase();
        if (answer !== 'yes' && answer !== 'no') return replyError(w, SYNTAX_ERROR);
        skipMe = answer === 'yes';
      } else return replyError(w, SYNTAX_ERROR);
    }
  }
  let killed = 0;
  let self = false;
  for (const c of conn.server.connections()) {
    if (id !== undefined && c.id !== id) continue;
    if (addr !== undefined && c.remoteAddress !== addr) continue;
    if (laddr !== undefined && c.localAddress !== laddr) continue;
    if (type !== undefined && type !== (c.pubsubMode ? 'pubsub' : 'normal')) continue;
    if (c === conn) {
      if (!legacy && skipMe) continue;
      self = true;
    } else c.close();
    killed++;
  }
  if (self) conn.quitAfterReplies();
  if (!legacy) w.integer(killed);
  else if (killed === 0) w.error('No such client');
  else w.ok();
  return true;
}

/** CLIENT REPLY ON | OFF | SKIP: ON answers OK; OFF and SKIP answer nothing (RespConnection.execute). */
function clientReply(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  const mode = optionName(cmd, 2);
  if (mode === 'ON') {
    conn.replyOff = false;
    conn.replySkipped = false;
    w.ok();
  } else if (mode === 'OFF') conn.replyOff = true;
  else if (mode === 'SKIP') conn.skipNextReply = true;
  else w.error(SYNTAX_ERROR);
  return true;
}

/** CLIENT LIST's flags: O for a monitor, b for a client blocked in WAIT, P for a subscriber, N for none. */
function clientFlags(c: RespConnection): string {
  const flags = `${c.monitoring ? 'O' : ''}${c.isBlocked ? 'b' : ''}${c.pubsubMode ? 'P' : ''}`;
  return flags === '' ? 'N' : flags;
}

/**
 * A CLIENT LIST / CLIENT INFO line, its fields in Redis 7's order. The buffers are Tessera's own:
 * qbuf the bytes received and not yet run, qbuf-free what the parser holds beyond them, obl the
 * reply bytes not yet given to the socket, oll the commands not yet answered, omem the replies
 * waiting for earlier ones; argv-mem is 0 (a command's arguments are views of the received bytes).
 */
function clientInfo(c: RespConnection): string {
  const now = Date.now();
  const subs = c.subscriptions;
  const qbuf = c.queryBufferBytes;
  const retained = c.queryBufferRetainedBytes;
  const totalMem = retained + c.outputBufferBytes + c.parkedReplyBytes;
  const events = c.outputBufferBytes > 0 ? 'rw' : 'r';
  return (
    `id=${c.id} addr=${c.remoteAddress} laddr=${c.localAddress} fd=${c.fd} name=${c.name} ` +
    `age=${Math.floor((now - c.createdAtMs) / 1000)} idle=${Math.floor((now - c.lastCommandAtMs) / 1000)} ` +
    `flags=${clientFlags(c)} db=0 sub=${subs.names[SubscriptionKind.Channel].size} psub=${subs.names[SubscriptionKind.Pattern].size} ssub=${subs.shardCount} multi=-1 ` +
    `qbuf=${qbuf} qbuf-free=${Math.max(0, retained - qbuf)} argv-mem=0 multi-mem=0 ` +
    `rbs=${retained} rbp=${retained} obl=${c.outputBufferBytes} oll=${c.commandsInFlight} omem=${c.parkedReplyBytes} ` +
    `tot-mem=${totalMem} events=${events} cmd=${c.lastCommand.toLowerCase()} ` +
    `user=default redir=-1 resp=${c.protocol} lib-name=${c.libName} lib-ver=${c.libVersion}`
  );
}

function wrongArity(w: RespWriter, name: string): true {
  w.error(`wrong number of arguments for '${name}' command`);
  return true;
}

/** COMMAND and its subcommands (command-introspection.ts). */
function command(_conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  return commandIntrospection(cmd, w);
}

/** CONFIG GET pattern…: a read-only view of the settings Redis tools ask about. */
function config(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  const sub = optionName(cmd, 1);
  switch (sub) {
    case 'GET':
      return configGet(conn, cmd, w);
    case 'SET':
    case 'REWRITE':
      return replyError(
        w,
        `CONFIG ${sub} is not supported: Tessera's settings are fixed at start (see tessera --help)`,
      );
    case 'RESETSTAT':
      return replyError(
        w,
        "CONFIG RESETSTAT is not supported: the counters INFO shows run from the node's start",
      );
    case 'HELP':
      return writeHelp(w, CONFIG_HELP);
    default:
      return unknownSubcommand(w, cmd, 'CONFIG');
  }
}

/** SLOWLOG GET [count] | LEN | RESET | HELP (src/main/resp/slowlog.ts). */
function slowlog(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  const log = conn.server.slowlog;
  const sub = optionName(cmd, 1);
  if (sub === 'GET' && cmd.argc <= 3) {
    let count = SLOWLOG_GET_COUNT_DEFAULT;
    if (cmd.argc === 3) {
      const n = integerArg(cmd, 2);
      // Redis says so for a count that is not a number too.
      if (n === undefined || n < -1) return replyError(w, 'count should be greater than or equal to -1');
      count = n;
    }
    log.write(w, count);
    return true;
  }
  if (sub === 'LEN' && cmd.argc === 2) {
    w.integer(log.length);
    return true;
  }
  if (sub === 'RESET' && cmd.argc === 2) {
    log.reset();
    w.ok();
    return true;
  }
  if (sub === 'HELP' && cmd.argc === 2) return writeHelp(w, SLOWLOG_HELP);
  if (sub === 'GET' || sub === 'LEN' || sub === 'RESET' || sub === 'HELP') {
    return wrongArity(w, `slowlog|${sub.toLowerCase()}`);
  }
  return unknownSubcommand(w, cmd, 'SLOWLOG');
}

/** LATENCY LATEST | HISTORY event | RESET [event…] | DOCTOR | HELP (src/main/resp/latency-monitor.ts). */
function latency(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  const monitor = conn.server.latencyMonitor;
  const sub = optionName(cmd, 1);
  if (sub === 'LATEST' && cmd.argc === 2) monitor.writeLatest(w);
  else if (sub === 'HISTORY' && cmd.argc === 3) monitor.writeHistory(w, cmd.arg(2).toString('latin1'));
  else if (sub === 'RESET') {
    const events: string[] = [];
    for (let i = 2; i < cmd.argc; i++) events.push(cmd.arg(i).toString('latin1'));
    w.integer(monitor.reset(events));
  } else if (sub === 'DOCTOR' && cmd.argc === 2) w.verbatim(monitor.doctor());
  else if (sub === 'HELP' && cmd.argc === 2) return writeHelp(w, LATENCY_HELP);
  else if (sub === 'LATEST' || sub === 'HISTORY' || sub === 'DOCTOR' || sub === 'HELP')
    return wrongArity(w, `latency|${sub.toLowerCase()}`);
  else if (sub === 'GRAPH' || sub === 'HISTOGRAM')
    return replyError(
      w,
      `LATENCY ${sub} is not supported: use LATENCY HISTORY, or INFO latencystats for percentiles`,
    );
  else return unknownSubcommand(w, cmd, 'LATENCY');
  return true;
}

const LATENCY_HELP = [
  'LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:',
  'DOCTOR',
  '    Return a human readable latency analysis report.',
  'HISTORY <event>',
  '    Return time-latency samples for the <event> class.',
  'LATEST',
  '    Return the latest latency samples for all events.',
  'RESET [<event> ...]',
  '    Reset latency data of one or more <event> classes.',
  '    (default: reset all data for all event classes)',
  'HELP',
  '    Prints this help.',
];

/** Entries SLOWLOG GET lists without a count (Redis's). */
const SLOWLOG_GET_COUNT_DEFAULT = 10;

const SLOWLOG_HELP = [
  'SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:',
  'GET [<count>]',
  '    Return top <count> entries from the slowlog (default: 10, -1 mean all).',
  '    Entries are made of:',
  '    id, timestamp, time in microseconds, arguments array, client IP and port,',
  '    client name',
  'LEN',
  '    Return the length of the slowlog.',
  'RESET',
  '    Reset the slowlog.',
  'HELP',
  '    Prints this help.',
];

const CONFIG_HELP = [
  'CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:',
  'GET <pattern>',
  '    Return parameters matching the glob-like <pattern> and their values.',
  'SET <directive> <value>',
  "    Not supported: Tessera's settings are fixed at start.",
  'RESETSTAT',
  "    Not supported: INFO's counters run from the node's start.",
  'REWRITE',
  '    Not supported: there is no configuration file.',
  'HELP',
  '    Print this help.',
];

/** CONFIG GET pattern …: the settings whose names match, as Redis names them. */
function configGet(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  if (cmd.argc < 3) return wrongArity(w, 'config|get');
  const settings = nodeServer(conn).configView();
  const matched = new Map<string, string>();
  for (let i = 2; i < cmd.argc; i++) {
    const pattern = Buffer.from(cmd.arg(i).toString('latin1').toLowerCase(), 'latin1');
    for (const [name, value] of settings) if (globMatch(pattern, Buffer.from(name))) matched.set(name, value);
  }
  w.mapHeader(matched.size);
  for (const [name, value] of matched) {
    w.bulk(name);
    w.bulk(value);
  }
  return true;
}

/** INFO [section …]: server clients memory stats keyspace tessera (default: all of them). */
function info(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  const sections: string[] = [];
  for (let i = 1; i < cmd.argc; i++) sections.push(cmd.arg(i).toString('latin1').toLowerCase());
  void w;
  return answerLater(conn, nodeServer(conn).info(sections), (out, text) => out.verbatim(text));
}

function time(_conn: RespConnection, _cmd: RespCommand, w: RespWriter): boolean {
  const nowUs = BigInt(Math.round(performance.timeOrigin * 1000 + performance.now() * 1000));
  w.arrayHeader(2);
  w.bulk((nowUs / 1_000_000n).toString());
  w.bulk((nowUs % 1_000_000n).toString());
  return true;
}

/**
 * TESSERA.DURABILITY [memory|store|stable [REPLICAS n]]: this connection's write acknowledgement
 * level, and how many other replicas each of its writes waits for (NOREPLICAS past
 * `--replica-ack-timeout`).
 */
function durability(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  if (cmd.argc === 1) {
    w.bulk(DURABILITY_NAMES[conn.durability]);
    return true;
  }
  const level = parseDurability(cmd.arg(1).toString('latin1').toLowerCase());
  if (level === undefined) return replyError(w, `durability must be one of ${DURABILITY_NAMES.join(', ')}`);
  let replicaAcks = conn.replicaAcks;
  if (cmd.argc > 2) {
    if (cmd.argc !== 4 || optionName(cmd, 2) !== 'REPLICAS') return replyError(w, SYNTAX_ERROR);
    const n = integerArg(cmd, 3);
    if (n === undefined || n < 0 || n > REPLICA_ACKS_MAX)
      return replyError(w, `REPLICAS must be an integer in 0..${REPLICA_ACKS_MAX}`);
    replicaAcks = n;
  }
  conn.durability = level;
  conn.replicaAcks = replicaAcks;
  w.ok();
  return true;
}

const NONE: KeyRange = [0, 0, 0];
const CONN = ['fast', 'no-auth'] as const;

/**
 * MEMORY USAGE key [SAMPLES n] and MEMORY HELP. USAGE answers the bytes a key and its stored record
 * take (the key, the record's version header and node id, the value), before the store's own
 * per-entry overhead: not Redis's allocator figure, but of its order, so `redis-cli --memkeys` ranks
 * keys sensibly. The subcommands about Redis's allocator answer why they are missing.
 */
function memory(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  const sub = optionName(cmd, 1);
  conn.lastCommand = `MEMORY|${sub}`;
  switch (sub) {
    case 'USAGE': {
      if (cmd.argc < 3) return wrongArity(w, 'memory|usage');
      for (let i = 3; i < cmd.argc; i++) {
        // SAMPLES bounds how many elements of a collection Redis samples; a string has none.
        if (optionName(cmd, i) !== 'SAMPLES' || i + 1 >= cmd.argc) return replyError(w, SYNTAX_ERROR);
        const samples = integerArg(cmd, ++i);
        if (samples === undefined) {
          w.error(NOT_INTEGER);
          return true;
        }
        if (samples < 0) return replyError(w, SYNTAX_ERROR);
      }
      const key = cmd.arg(2);
      if (!keyFits(key, w)) return true;
      return readKey(conn, key, ReadMode.MemoryUsage, w, key.length);
    }
    case 'DOCTOR':
    case 'STATS':
    case 'MALLOC-STATS':
    case 'PURGE':
      w.error(`MEMORY ${sub} is not supported: it reports Redis's allocator, and Tessera has none`);
      return true;
    case 'HELP':
      return writeHelp(w, MEMORY_HELP);
    default:
      return unknownSubcommand(w, cmd, 'MEMORY');
  }
}

/** OBJECT ENCODING / REFCOUNT / FREQ / IDLETIME key, and OBJECT HELP (`formatRead` answers them). */
function object(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  const sub = optionName(cmd, 1);
  conn.lastCommand = `OBJECT|${sub}`;
  const mode = OBJECT_READ_MODES[sub];
  if (mode !== undefined) {
    if (cmd.argc !== 3) return wrongArity(w, `object|${sub.toLowerCase()}`);
    const key = cmd.arg(2);
    if (!keyFits(key, w)) return true;
    return readKey(conn, key, mode, w);
  }
  if (sub === 'HELP') return writeHelp(w, OBJECT_HELP);
  return unknownSubcommand(w, cmd, 'OBJECT');
}

const OBJECT_READ_MODES: Record<string, ReadMode | undefined> = {
  ENCODING: ReadMode.ObjectEncoding,
  REFCOUNT: ReadMode.ObjectRefcount,
  FREQ: ReadMode.ObjectFreq,
  IDLETIME: ReadMode.ObjectIdletime,
};

const OBJECT_HELP = [
  'OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:',
  'ENCODING <key>',
  '    Return the kind of internal representation Redis would use for the value stored at <key>.',
  'FREQ <key>',
  '    Return the access frequency index of the <key> (needs an LFU policy: refused here).',
  'IDLETIME <key>',
  '    Return the idle time of the <key> (not kept by Tessera: refused).',
  'REFCOUNT <key>',
  '    Return the number of references of the value associated with the specified <key>.',
  'HELP',
  '    Print this help.',
];

/**
 * MONITOR: from now on this connection is shown every command the node's RESP server runs (those
 * of other nodes' clients are theirs to show). It may still run commands that do not touch keys.
 * A second MONITOR is ignored without a reply, as in Redis; RESET ends it.
 */
function monitor(conn: RespConnection, _cmd: RespCommand, w: RespWriter): boolean {
  if (conn.monitoring) return true;
  conn.monitoring = true;
  conn.server.monitors.add(conn);
  w.ok();
  return true;
}

/**
 * TESSERA.BACKUP: backs the node's data up into a new directory under `--backup-dir`, named after
 * the node and the time, and answers its path once the copy is on disk. The path is never taken
 * from the client, so the command cannot write anywhere the operator did not choose.
 */
function backup(conn: RespConnection, _cmd: RespCommand, w: RespWriter): boolean {
  const server = nodeServer(conn);
  const root = server.backupDir;
  if (root === undefined) {
    return replyError(w, 'TESSERA.BACKUP needs a backup directory: start the node with --backup-dir');
  }
  const node = server.node;
  const stamp = new Date().toISOString().replace(/[-:]/g, '').replace('.', '');
  const target = path.join(root, `${node.nodeId}-${stamp}-${server.nextBackupNumber()}`);
  return answerLater(conn, node.backup(target), (out, report) => out.bulk(report.path));
}

/** ROLE: every node answers as a primary (each serves some fragments first); replicas are not listed. */
function role(_conn: RespConnection, _cmd: RespCommand, w: RespWriter): boolean {
  w.arrayHeader(3);
  w.bulk('master');
  w.integer(0);
  w.arrayHeader(0);
  return true;
}

/**
 * WAIT numreplicas timeout, as Redis's: blocks this connection until every write it sent before is
 * acknowledged (at `--replication-ack`) by `numreplicas` replicas besides the serving one, or the
 * timeout passes (0: never), and answers the number reached — the fewest over the fragments it
 * wrote, forwarded writes included. On a node without peers no replica exists: it answers 0, at
 * once when fewer than one replica is asked for, else when the timeout passes, as Redis without
 * replicas does. The connection's later commands run after the answer.
 */
function wait(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  const replicas = integerArg(cmd, 1);
  if (replicas === undefined) return replyError(w, NOT_INTEGER);
  const timeout = timeoutArg(cmd, 2, w);
  if (timeout === undefined) return true;
  if (nodeServer(conn).node.cluster === undefined) {
    if (replicas <= 0) {
      w.integer(0);
      return true;
    }
    return blockWith(conn, afterTimeout(timeout, 0), (out, n) => out.integer(n));
  }
  const answered = waitForWrites(conn, replicas, false, timeout).then((a) => a.reached);
  return blockWith(conn, answered, (out, n) => out.integer(n));
}

/**
 * WAITAOF numlocal numreplicas timeout (Redis 7.2): blocks until this connection's writes are at
 * `stable` (fsync) on their serving replicas (numlocal 1) and acknowledged at `stable` by
 * `numreplicas` other replicas (which acknowledge at `stable` under `--replication-ack stable`),
 * or the timeout passes; answers [local, replicas]: 1 when every write is on the serving replica's
 * disk, and the fewest replicas reached. Without peers the replica count is 0 (reached at once
 * when none is asked for, else when the timeout passes, as Redis without replicas).
 */
function waitaof(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  const local = integerArg(cmd, 1);
  const replicas = integerArg(cmd, 2);
  if (local === undefined || replicas === undefined) return replyError(w, NOT_INTEGER);
  if (local < 0 || replicas < 0) return replyError(w, 'value is out of range, must be positive');
  const timeout = timeoutArg(cmd, 3, w);
  if (timeout === undefined) return true;
  if (local > 1)
    return replyError(
      w,
      'WAITAOF cannot wait for more than one local fsync: a write has one serving replica',
    );
  const answered = waitForWrites(conn, replicas, true, timeout).then(async (a) => {
    // Without peers no replica will ever count: the wait lasts its timeout, as Redis's.
    if (nodeServer(conn).node.cluster === undefined && replicas > 0) await afterTimeout(timeout, 0);
    return a;
  });
  return blockWith(conn, answered, (out, a) => {
    out.arrayHeader(2);
    out.integer(a.local ? 1 : 0);
    out.integer(a.reached);
  });
}

/** The timeout argument of WAIT / WAITAOF in ms (0: none), or undefined after an error reply. */
function timeoutArg(cmd: RespCommand, index: number, w: RespWriter): number | undefined {
  const timeout = integerArg(cmd, index);
  if (timeout === undefined) replyError(w, 'timeout is not an integer or out of range');
  else if (timeout < 0) replyError(w, 'timeout is negative');
  else return timeout;
  return undefined;
}

/**
 * Waits for `replicas` acknowledgements of every fragment the connection wrote (and, `stable`, for
 * each at `stable` on its serving replica and its replicas); what it then forgets: replica-waiter.ts
 * splitWritten and forgetAfterWait.
 */
function waitForWrites(
  conn: RespConnection,
  replicas: number,
  stable: boolean,
  timeoutMs: number,
): Promise<ReplicaWaitAnswer> {
  const dispatcher = nodeServer(conn).node.dispatcher;
  const written = conn.writtenFragments;
  const startStamp = dispatcher.servingStamp;
  const { fragments, unconfirmable } = splitWritten(written.toArray(), conn.writtenSinceStamp, (f) =>
    dispatcher.servingChangedAt(f),
  );
  const others = dispatcher.otherReplicas;
  return waitForReplicas(dispatcher, {
    fragments,
    unconfirmable: unconfirmable.length,
    replicas: Math.max(0, Math.min(replicas, REPLICA_ACKS_MAX)),
    level: stable ? AckLevel.Stable : dispatcher.replicationAck,
    durability: stable ? Durability.Stable : Durability.Memory,
    priority: Priority.Default,
    timeoutMs,
    idleReached: others,
  }).then((answer) => {
    const confirmedAll = answer.reached >= others && answer.local;
    conn.writtenSinceStamp = forgetAfterWait(written, unconfirmable, confirmedAll, startStamp);
    return answer;
  });
}

/** Answers the command when `answered` settles, and holds the connection's later commands until then. */
function blockWith<T>(
  conn: RespConnection,
  answered: Promise<T>,
  write: (out: RespWriter, value: T) => void,
): false {
  answerLater(conn, answered, write);
  conn.blockUntil(answered);
  return false;
}

/** Resolves to `value` after `timeoutMs` (never, for 0). */
function afterTimeout<T>(timeoutMs: number, value: T): Promise<T> {
  return new Promise<T>((resolve) => {
    if (timeoutMs === 0) return;
    // Longer than one timer can wait: in steps. Unreferenced: a waiting client does not keep a
    // closing node alive.
    const waitFor = (leftMs: number): void => {
      setTimeout(
        () => (leftMs > TIMER_DELAY_MS_MAX ? waitFor(leftMs - TIMER_DELAY_MS_MAX) : resolve(value)),
        Math.min(leftMs, TIMER_DELAY_MS_MAX),
      ).unref();
    };
    waitFor(timeoutMs);
  });
}

/**
 * SHUTDOWN [NOSAVE | SAVE] [NOW] [FORCE] [ABORT]: closes the node as SIGTERM does — stop admitting,
 * finish admitted work, commit and fsync every fragment (so SAVE and NOSAVE alike), and, in a
 * cluster, wait for replicas to acknowledge (`--drain-timeout`) unless NOW. As in Redis, a shutdown
 * that starts answers nothing: the connections close. FORCE is accepted; nothing here stops a
 * shutdown that has started. ABORT has nothing to cancel.
 */
function shutdown(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  const given = new Set<string>();
  for (let i = 1; i < cmd.argc; i++) {
    const option = optionName(cmd, i);
    if (!SHUTDOWN_OPTIONS.has(option)) return replyError(w, SYNTAX_ERROR);
    given.add(option);
  }
  if ((given.has('ABORT') && given.size > 1) || (given.has('SAVE') && given.has('NOSAVE')))
    return replyError(w, SYNTAX_ERROR);
  if (given.has('ABORT')) return replyError(w, 'No shutdown in progress.');
  if (!nodeServer(conn).shutdown({ now: given.has('NOW') })) {
    return replyError(w, 'SHUTDOWN is not supported here: an embedded node is closed by its application');
  }
  return true;
}

const SHUTDOWN_OPTIONS = new Set(['NOSAVE', 'SAVE', 'NOW', 'FORCE', 'ABORT']);

const MEMORY_HELP = [
  'MEMORY <subcommand> [<arg> ...]. Subcommands are:',
  'USAGE <key> [SAMPLES <count>]',
  '    Return the bytes the key and its stored record take.',
  'HELP',
  '    Print this help.',
];

export const SERVER_COMMANDS: CommandSpec[] = [
  { name: 'PING', arity: -1, flags: ['fast'], keys: NONE, run: ping },
  { name: 'ECHO', arity: 2, flags: ['fast'], keys: NONE, run: echo },
  { name: 'AUTH', arity: -2, flags: ['no-auth', 'fast'], keys: NONE, run: auth },
  { name: 'HELLO', arity: -1, flags: ['no-auth', 'fast'], keys: NONE, run: hello },
  { name: 'SELECT', arity: 2, flags: ['fast'], keys: NONE, run: select },
  { name: 'QUIT', arity: -1, flags: CONN, keys: NONE, run: quit },
  { name: 'RESET', arity: 1, flags: CONN, keys: NONE, run: reset },
  { name: 'CLIENT', arity: -2, flags: [], keys: NONE, run: client },
  { name: 'COMMAND', arity: -1, flags: [], keys: NONE, run: command },
  { name: 'CONFIG', arity: -2, flags: [], keys: NONE, needs: 'node', run: config },
  { name: 'SLOWLOG', arity: -2, flags: ['admin', 'loading', 'stale'], keys: NONE, run: slowlog },
  { name: 'LATENCY', arity: -2, flags: ['admin', 'loading', 'stale'], keys: NONE, run: latency },
  { name: 'INFO', arity: -1, flags: [], keys: NONE, needs: 'node', run: info },
  { name: 'TIME', arity: 1, flags: ['fast'], keys: NONE, run: time },
  { name: 'MEMORY', arity: -2, flags: [], keys: NONE, subcommandKeys: { USAGE: [2, 2, 1] }, run: memory },
  {
    name: 'OBJECT',
    arity: -2,
    flags: [],
    keys: NONE,
    subcommandKeys: { ENCODING: [2, 2, 1], REFCOUNT: [2, 2, 1], FREQ: [2, 2, 1], IDLETIME: [2, 2, 1] },
    run: object,
  },
  { name: 'ROLE', arity: 1, flags: ['fast'], keys: NONE, run: role },
  { name: 'WAIT', arity: 3, flags: [], keys: NONE, needs: 'node', run: wait },
  { name: 'WAITAOF', arity: 4, flags: [], keys: NONE, needs: 'node', run: waitaof },
  { name: 'SHUTDOWN', arity: -1, flags: [], keys: NONE, needs: 'node', run: shutdown },
  { name: 'MONITOR', arity: 1, flags: [], keys: NONE, needs: 'session', run: monitor },
  { name: 'TESSERA.BACKUP', arity: 1, flags: [], keys: NONE, needs: 'node', run: backup },
  { name: 'TESSERA.DURABILITY', arity: -1, flags: ['fast'], keys: NONE, run: durability },
];
