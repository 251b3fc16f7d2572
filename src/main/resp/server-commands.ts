// Connection and server commands: PING, ECHO, HELLO, AUTH, SELECT, QUIT, RESET, CLIENT, COMMAND,
// CONFIG GET, INFO, TIME, and TESSERA.DURABILITY (this connection's write acknowledgement level).

import { globMatch } from '../../core/glob.js';
import { DURABILITY_NAMES, parseDurability } from '../../core/ops.js';
import type { RespCommand } from '../../core/resp-parser.js';
import type { RespWriter } from '../../core/resp-writer.js';
import {
  answerLater,
  COMMANDS,
  type CommandSpec,
  findCommand,
  integerArg,
  NOT_INTEGER,
  optionName,
  replyError,
  SYNTAX_ERROR,
  unknownSubcommand,
  writeHelp,
} from './commands.js';
import type { RespConnection } from './connection.js';
import { keyFits, ReadMode, readKey } from './key-access.js';
import { REDIS_VERSION } from './server.js';

function ping(_conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  if (cmd.argc > 2) w.error("wrong number of arguments for 'ping' command");
  else if (cmd.argc === 2) w.bulk(cmd.arg(1));
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
  conn.durability = conn.server.node.settings.durability;
  conn.authenticated = !conn.server.requiresAuth;
  w.simple('RESET');
  return true;
}

/** CLIENT SETNAME / GETNAME / ID / INFO / LIST / SETINFO / NO-EVICT / NO-TOUCH / REPLY ON / HELP */
/** Exact argument counts of the CLIENT subcommands that take none or fixed ones. */
const CLIENT_ARITY: Record<string, number> = {
  GETNAME: 2,
  ID: 2,
  INFO: 2,
  'NO-EVICT': 3,
  'NO-TOUCH': 3,
  HELP: 2,
};

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
  'LIST',
  'SETINFO <LIB-NAME|LIB-VER> <value>',
  'SETNAME <name>',
  'HELP',
];

function clientInfo(c: RespConnection): string {
  const now = Date.now();
  return (
    `id=${c.id} addr=${c.remoteAddress} laddr=${c.localAddress} fd=-1 name=${c.name} ` +
    `age=${Math.floor((now - c.createdAtMs) / 1000)} idle=${Math.floor((now - c.lastCommandAtMs) / 1000)} ` +
    `flags=N db=0 sub=0 psub=0 ssub=0 multi=-1 qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 tot-mem=0 ` +
    `rbs=0 rbp=0 obl=0 oll=${c.commandsInFlight} omem=0 events=r cmd=${c.lastCommand.toLowerCase()} ` +
    `user=default redir=-1 resp=${c.protocol} lib-name=${c.libName} lib-ver=${c.libVersion}`
  );
}

function wrongArity(w: RespWriter, name: string): true {
  w.error(`wrong number of arguments for '${name}' command`);
  return true;
}

/** COMMAND, COMMAND COUNT / INFO [name…] / DOCS [name…] / LIST: what redis-cli and clients ask for. */
function command(_conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  if (cmd.argc === 1) {
    w.arrayHeader(COMMANDS.length);
    for (const spec of COMMANDS) commandInfo(w, spec);
    return true;
  }
  const sub = optionName(cmd, 1);
  if ((sub === 'COUNT' || sub === 'LIST') && cmd.argc !== 2)
    return wrongArity(w, `command|${sub.toLowerCase()}`);
  if (sub === 'COUNT') w.integer(COMMANDS.length);
  else if (sub === 'LIST') {
    w.arrayHeader(COMMANDS.length);
    for (const spec of COMMANDS) w.bulk(spec.name.toLowerCase());
  } else if (sub === 'INFO') {
    const specs = cmd.argc === 2 ? COMMANDS : namedSpecs(cmd);
    w.arrayHeader(specs.length);
    for (const spec of specs) {
      if (spec === undefined) w.null();
      else commandInfo(w, spec);
    }
  } else if (sub === 'DOCS') {
    // Documentation is not carried; an empty map tells redis-cli to fall back to its built-in hints.
    w.mapHeader(0);
  } else unknownSubcommand(w, cmd, 'COMMAND');
  return true;
}

function namedSpecs(cmd: RespCommand): Array<CommandSpec | undefined> {
  const specs: Array<CommandSpec | undefined> = [];
  for (let i = 2; i < cmd.argc; i++) specs.push(findCommand(cmd.arg(i)));
  return specs;
}

/** Redis 7's ten-field command description. */
function commandInfo(w: RespWriter, spec: CommandSpec): void {
  w.arrayHeader(10);
  w.bulk(spec.name.toLowerCase());
  w.integer(spec.arity);
  w.setHeader(spec.flags.length);
  for (const flag of spec.flags) w.simple(flag);
  w.integer(spec.keys[0]);
  w.integer(spec.keys[1]);
  w.integer(spec.keys[2]);
  w.setHeader(0);
  w.setHeader(0);
  w.setHeader(0);
  w.setHeader(0);
}

/** CONFIG GET pattern…: a read-only view of the settings Redis tools ask about. */
function config(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  const sub = optionName(cmd, 1);
  if (sub !== 'GET') {
    w.error(`CONFIG ${sub} is not supported: Tessera's settings are fixed at start (see tessera --help)`);
    return true;
  }
  if (cmd.argc < 3) return wrongArity(w, 'config|get');
  const settings = conn.server.configView();
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
  return answerLater(conn, conn.server.info(sections), (out, text) => out.verbatim(text));
}

function time(_conn: RespConnection, _cmd: RespCommand, w: RespWriter): boolean {
  const nowUs = BigInt(Math.round(performance.timeOrigin * 1000 + performance.now() * 1000));
  w.arrayHeader(2);
  w.bulk((nowUs / 1_000_000n).toString());
  w.bulk((nowUs % 1_000_000n).toString());
  return true;
}

/** TESSERA.DURABILITY [memory|store|stable]: this connection's write acknowledgement level. */
function durability(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  if (cmd.argc === 1) {
    w.bulk(DURABILITY_NAMES[conn.durability]);
    return true;
  }
  const level = parseDurability(cmd.arg(1).toString('latin1').toLowerCase());
  if (level === undefined) w.error(`durability must be one of ${DURABILITY_NAMES.join(', ')}`);
  else {
    conn.durability = level;
    w.ok();
  }
  return true;
}

const NONE: readonly [number, number, number] = [0, 0, 0];
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
  { name: 'CONFIG', arity: -2, flags: [], keys: NONE, run: config },
  { name: 'INFO', arity: -1, flags: [], keys: NONE, run: info },
  { name: 'TIME', arity: 1, flags: ['fast'], keys: NONE, run: time },
  { name: 'MEMORY', arity: -2, flags: [], keys: NONE, run: memory },
  { name: 'TESSERA.DURABILITY', arity: -1, flags: ['fast'], keys: NONE, run: durability },
];
