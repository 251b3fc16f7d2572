// Keyspace commands: DEL / UNLINK / EXISTS / TYPE, the expiry family, RENAME / RENAMENX / COPY,
// SCAN, KEYS, DBSIZE and FLUSHALL / FLUSHDB.

import { restoreValue } from '../../core/dump-payload.js';
import { SAME_OBJECT } from '../../core/fragment.js';
import { slotOf } from '../../core/keyspace.js';
import {
  EXPIRES_AT_MS_MAX,
  KEY_COUNT_PAGE_KEYS,
  SCAN_EXAMINED_KEYS_MAX,
  SCAN_PAGE_KEYS_MAX,
} from '../../core/limits.js';
import { Modifier, ModifyFlag } from '../../core/modify.js';
import { DURABILITY_NAMES } from '../../core/ops.js';
import type { RespCommand } from '../../core/resp-parser.js';
import type { RespWriter } from '../../core/resp-writer.js';
import {
  answerLater,
  type CommandSpec,
  crossSlot,
  integerArg,
  NOT_INTEGER,
  optionName,
  replyError,
  SYNTAX_ERROR,
  writeErrorText,
} from './commands.js';
import type { RespConnection } from './connection.js';
import { nodeServer } from './host.js';
import {
  finishParts,
  keyFits,
  keyOnlyModify,
  ModifyMode,
  modifyKey,
  ReadMode,
  readKey,
  readPart,
  WriteMode,
  writeKey,
  writePart,
} from './key-access.js';

/** Keys KEYS may return; past it the command is refused rather than stalling the node. */
export const KEYS_RESULTS_MAX = 100_000;
/** Keys a SCAN page returns when COUNT is not given (Redis's default COUNT). */
export const SCAN_COUNT_DEFAULT = 10;
/**
 * Keys a SCAN page examines per key it may return: like Redis's COUNT, the work of one call is
 * bounded whatever the pattern, so a sparse MATCH answers quickly with few keys and a cursor.
 */
const SCAN_EXAMINED_PER_COUNT = 10;

/** DEL / UNLINK: one tombstone per key; the answer counts the keys that held a live value. */
function del(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  for (let i = 1; i < cmd.argc; i++) if (!keyFits(cmd.arg(i), w)) return true;
  if (cmd.argc === 2) {
    writeKey(conn, cmd.arg(1), undefined, 0, WriteMode.CountPrior, true);
    return false;
  }
  const slot = conn.defer();
  slot.mode = WriteMode.CountPrior;
  for (let i = 1; i < cmd.argc; i++) writePart(conn, slot, cmd.arg(i), undefined, true);
  finishParts(slot);
  return false;
}

/** EXISTS counts every key given, repeats included, as Redis does. */
function exists(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  for (let i = 1; i < cmd.argc; i++) if (!keyFits(cmd.arg(i), w)) return true;
  if (cmd.argc === 2) return readKey(conn, cmd.arg(1), ReadMode.Exists, w);
  const slot = conn.defer();
  for (let i = 1; i < cmd.argc; i++) readPart(conn, slot, cmd.arg(i), ReadMode.ExistsPart, i - 1);
  finishParts(slot);
  return false;
}

function readOne(mode: number) {
  return (conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean => {
    const key = cmd.arg(1);
    if (!keyFits(key, w)) return true;
    return readKey(conn, key, mode as Parameters<typeof readKey>[2], w);
  };
}

/** EXPIRE / PEXPIRE / EXPIREAT / PEXPIREAT key n [NX | XX | GT | LT] */
function expire(unit: 'EX' | 'PX' | 'EXAT' | 'PXAT', command: string) {
  return (conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean => {
    const key = cmd.arg(1);
    if (!keyFits(key, w)) return true;
    let flags = 0;
    for (let i = 3; i < cmd.argc; i++) {
      const option = optionName(cmd, i);
      if (option === 'NX') flags |= ModifyFlag.Nx;
      else if (option === 'XX') flags |= ModifyFlag.Xx;
      else if (option === 'GT') flags |= ModifyFlag.Gt;
      else if (option === 'LT') flags |= ModifyFlag.Lt;
      else {
        w.error(`Unsupported option ${cmd.arg(i).toString('latin1')}`);
        return true;
      }
    }
    if (flags & ModifyFlag.Nx && flags & (ModifyFlag.Xx | ModifyFlag.Gt | ModifyFlag.Lt)) {
      w.error('NX and XX, GT or LT options at the same time are not compatible');
      return true;
    }
    if (flags & ModifyFlag.Gt && flags & ModifyFlag.Lt) {
      w.error('GT and LT options at the same time are not compatible');
      return true;
    }
    // Redis reads the number only once the options are good: a bad option wins over a bad number.
    const n = integerArg(cmd, 2);
    if (n === undefined) {
      w.error(NOT_INTEGER);
      return true;
    }
    const ms = unit === 'EX' || unit === 'EXAT' ? n * 1000 : n;
    // A deadline at or before now deletes the key, as in Redis; keep it positive for the record.
    const deadline = unit === 'EX' || unit === 'PX' ? conn.nowMs() + ms : ms;
    if (!Number.isSafeInteger(ms) || deadline > EXPIRES_AT_MS_MAX) {
      w.error(`invalid expire time in '${command}' command`);
      return true;
    }
    modifyKey(conn, key, Modifier.Expire, flags, undefined, Math.max(1, deadline), ModifyMode.Integer);
    return false;
  };
}

/** SCAN cursor [MATCH pattern] [COUNT n] [TYPE type]: pages through the scanner, cursors via the table. */
function scan(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  const cursorText = cmd.arg(1).toString('latin1');
  if (!/^(0|[1-9][0-9]{0,19})$/.test(cursorText)) {
    w.error('invalid cursor');
    return true;
  }
  let match: Buffer | undefined;
  let count = SCAN_COUNT_DEFAULT;
  let type: string | undefined;
  for (let i = 2; i < cmd.argc; i += 2) {
    const option = optionName(cmd, i);
    if (i + 1 >= cmd.argc) return syntaxError(w);
    if (option === 'MATCH') match = Buffer.from(cmd.arg(i + 1));
    else if (option === 'COUNT') {
      const n = integerArg(cmd, i + 1);
      if (n === undefined) return notInteger(w);
      if (n < 1) return syntaxError(w);
      count = Math.min(n, SCAN_PAGE_KEYS_MAX);
    } else if (option === 'TYPE')
      type = cmd
        .arg(i + 1)
        .toString('latin1')
        .toLowerCase();
    else return syntaxError(w);
  }
  const server = nodeServer(conn);
  let cursor: string | undefined;
  if (cursorText !== '0') {
    cursor = server.cursors.find(Number(cursorText));
    if (cursor === undefined) {
      w.error('invalid cursor: it has expired or was never issued; restart the iteration from 0');
      return true;
    }
  }
  if (type !== undefined && type !== 'string') {
    // Tessera stores strings only: no key has any other type.
    writeScanReply(w, '0', []);
    return true;
  }
  const examineLimit = Math.min(SCAN_EXAMINED_KEYS_MAX, count * SCAN_EXAMINED_PER_COUNT);
  const page = server.node.scan({ cursor, match, limit: count, keysOnly: true, examineLimit });
  return answerLater(conn, page, (out, p) =>
    writeScanReply(
      out,
      p.cursor === undefined ? '0' : String(server.cursors.open(p.cursor)),
      p.entries.map((e) => e.key),
    ),
  );
}

function writeScanReply(w: RespWriter, cursor: string, keys: Buffer[]): void {
  w.arrayHeader(2);
  w.bulk(cursor);
  w.arrayHeader(keys.length);
  for (const key of keys) w.bulk(key);
}

/** KEYS pattern: every matching key, refused once more than KEYS_RESULTS_MAX would be returned. */
function keys(conn: RespConnection, cmd: RespCommand): boolean {
  return answerLater(conn, collectKeys(conn, Buffer.from(cmd.arg(1))), (w, found) => {
    if (found === undefined) {
      w.error(`KEYS would return more than ${KEYS_RESULTS_MAX} keys; iterate with SCAN instead`);
    } else {
      w.arrayHeader(found.length);
      for (const key of found) w.bulk(key);
    }
  });
}

async function collectKeys(conn: RespConnection, match: Buffer): Promise<Buffer[] | undefined> {
  const found: Buffer[] = [];
  let cursor: string | undefined;
  do {
    const page = await nodeServer(conn).node.scan({
      cursor,
      match,
      limit: KEY_COUNT_PAGE_KEYS,
      keysOnly: true,
    });
    for (const e of page.entries) found.push(e.key);
    if (found.length > KEYS_RESULTS_MAX) return undefined;
    cursor = page.cursor;
  } while (cursor !== undefined);
  return found;
}

/** DBSIZE counts live keys by reading every fragment: O(keys), paged, never blocking the node. */
function dbsize(conn: RespConnection): boolean {
  return answerLater(conn, nodeServer(conn).countKeys(), (w, n) => w.integer(n));
}

/**
 * FLUSHALL / FLUSHDB [ASYNC | SYNC]: deletes every key (one database here, so both are the same).
 * Answers once every key live at the start holds a tombstone at the connection's durability, ASYNC
 * included: a client that flushes expects an empty keyspace after the reply. Not atomic like
 * Redis's: a key written while it runs may survive.
 */
function flushAll(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  if (cmd.argc > 2) return syntaxError(w);
  if (cmd.argc === 2) {
    const mode = optionName(cmd, 1);
    if (mode !== 'ASYNC' && mode !== 'SYNC') return syntaxError(w);
  }
  const done = nodeServer(conn).node.deleteAll({ durability: DURABILITY_NAMES[conn.durability] });
  return answerLater(conn, done, (reply) => reply.simple('OK'));
}

/** Both keys fit and share a hash slot; otherwise writes Redis's error and answers false. */
function inOneSlot(key: Uint8Array, target: Uint8Array, w: RespWriter): boolean {
  if (!keyFits(key, w) || !keyFits(target, w)) return false;
  return slotOf(key) === slotOf(target) || !crossSlot(w);
}

/**
 * RENAME / RENAMENX key newkey: both keys must share a hash slot (as in Redis Cluster), so the one
 * fragment actor that owns them moves the value, its deadline included, and deletes the old key in
 * one step.
 */
function rename(onlyIfNone: boolean) {
  return (conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean => {
    const key = cmd.arg(1);
    const target = cmd.arg(2);
    if (!inOneSlot(key, target, w)) return true;
    const mode = onlyIfNone ? ModifyMode.SetFlag : ModifyMode.SetOk;
    const flags = onlyIfNone ? ModifyFlag.Nx : 0;
    modifyKey(conn, key, Modifier.Rename, flags, undefined, 0, mode, 0, target);
    return false;
  };
}

/** COPY source destination [DB 0] [REPLACE]: :1 when copied, :0 when not (absent source, or a live target without REPLACE). */
function copy(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  const key = cmd.arg(1);
  const target = cmd.arg(2);
  let replace = false;
  for (let i = 3; i < cmd.argc; i++) {
    const option = optionName(cmd, i);
    if (option === 'REPLACE') replace = true;
    else if (option === 'DB' && i + 1 < cmd.argc) {
      const db = integerArg(cmd, ++i);
      if (db === undefined) return notInteger(w);
      if (db !== 0) {
        w.error('DB index is out of range');
        return true;
      }
    } else return syntaxError(w);
  }
  // Redis refuses this before it looks the key up, so a missing key gets the error too.
  if (key.equals(target)) {
    writeErrorText(w, SAME_OBJECT);
    return true;
  }
  if (!inOneSlot(key, target, w)) return true;
  modifyKey(
    conn,
    key,
    Modifier.Copy,
    replace ? 0 : ModifyFlag.Nx,
    undefined,
    0,
    ModifyMode.SetFlag,
    0,
    target,
  );
  return false;
}

function syntaxError(w: RespWriter): true {
  w.error(SYNTAX_ERROR);
  return true;
}

function notInteger(w: RespWriter): true {
  w.error(NOT_INTEGER);
  return true;
}

const FIRST: readonly [number, number, number] = [1, 1, 1];
const NONE: readonly [number, number, number] = [0, 0, 0];

/**
 * RESTORE key ttl payload [REPLACE] [ABSTTL] [IDLETIME s | FREQ f]: the options are checked here;
 * an error in the TTL or the payload travels with the operation, since Redis reports a key that
 * already exists (BUSYKEY) first. IDLETIME and FREQ are checked and then have nothing to set: there
 * is no eviction here.
 */
function restore(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  const key = cmd.arg(1);
  if (!keyFits(key, w)) return true;
  let replace = false;
  let absolute = false;
  let idle = false;
  let frequency = false;
  for (let i = 4; i < cmd.argc; i++) {
    const option = optionName(cmd, i);
    const more = i + 1 < cmd.argc;
    if (option === 'REPLACE') replace = true;
    else if (option === 'ABSTTL') absolute = true;
    else if (option === 'IDLETIME' && more && !frequency) {
      const n = integerArg(cmd, ++i);
      if (n === undefined) return notInteger(w);
      if (n < 0) return replyError(w, 'Invalid IDLETIME value, must be >= 0');
      idle = true;
    } else if (option === 'FREQ' && more && !idle) {
      const n = integerArg(cmd, ++i);
      if (n === undefined) return notInteger(w);
      if (n < 0 || n > 255) return replyError(w, 'Invalid FREQ value, must be >= 0 and <= 255');
      frequency = true;
    } else return syntaxError(w);
  }
  let error: string | undefined;
  let value: Buffer | undefined;
  let expiresAtMs = 0;
  const ttl = integerArg(cmd, 2);
  if (ttl === undefined) error = `ERR ${NOT_INTEGER}`;
  else if (ttl < 0) error = 'ERR Invalid TTL value, must be >= 0';
  else {
    const restored = restoreValue(cmd.arg(3), conn.server.settings.valueBytesMax);
    if (typeof restored === 'string') error = restored;
    else value = restored;
    if (ttl > 0) expiresAtMs = absolute ? ttl : conn.nowMs() + ttl;
    if (expiresAtMs > EXPIRES_AT_MS_MAX) error ??= "ERR invalid expire time in 'restore' command";
  }
  const flags = replace ? 0 : ModifyFlag.Nx;
  const operand = error === undefined ? undefined : Buffer.from(error);
  modifyKey(
    conn,
    key,
    Modifier.Restore,
    flags,
    error === undefined ? value : undefined,
    expiresAtMs,
    ModifyMode.SetOk,
    0,
    operand,
  );
  return false;
}

export const KEY_COMMANDS: CommandSpec[] = [
  { name: 'DEL', arity: -2, flags: ['write'], keys: [1, -1, 1], run: del },
  { name: 'UNLINK', arity: -2, flags: ['write', 'fast'], keys: [1, -1, 1], run: del },
  { name: 'EXISTS', arity: -2, flags: ['readonly', 'fast'], keys: [1, -1, 1], run: exists },
  // No eviction here, so there is no access time to refresh: TOUCH only counts the keys that exist.
  { name: 'TOUCH', arity: -2, flags: ['readonly', 'fast'], keys: [1, -1, 1], run: exists },
  { name: 'TYPE', arity: 2, flags: ['readonly', 'fast'], keys: FIRST, run: readOne(ReadMode.Type) },
  { name: 'TTL', arity: 2, flags: ['readonly', 'fast'], keys: FIRST, run: readOne(ReadMode.Ttl) },
  { name: 'PTTL', arity: 2, flags: ['readonly', 'fast'], keys: FIRST, run: readOne(ReadMode.Pttl) },
  {
    name: 'EXPIRETIME',
    arity: 2,
    flags: ['readonly', 'fast'],
    keys: FIRST,
    run: readOne(ReadMode.ExpireTime),
  },
  {
    name: 'PEXPIRETIME',
    arity: 2,
    flags: ['readonly', 'fast'],
    keys: FIRST,
    run: readOne(ReadMode.PexpireTime),
  },
  { name: 'EXPIRE', arity: -3, flags: ['write', 'fast'], keys: FIRST, run: expire('EX', 'expire') },
  { name: 'PEXPIRE', arity: -3, flags: ['write', 'fast'], keys: FIRST, run: expire('PX', 'pexpire') },
  { name: 'EXPIREAT', arity: -3, flags: ['write', 'fast'], keys: FIRST, run: expire('EXAT', 'expireat') },
  { name: 'PEXPIREAT', arity: -3, flags: ['write', 'fast'], keys: FIRST, run: expire('PXAT', 'pexpireat') },
  {
    name: 'PERSIST',
    arity: 2,
    flags: ['write', 'fast'],
    keys: FIRST,
    run: keyOnlyModify(Modifier.Persist, ModifyMode.Integer),
  },
  { name: 'SCAN', arity: -2, flags: ['readonly'], keys: NONE, needs: 'node', run: scan },
  { name: 'KEYS', arity: 2, flags: ['readonly'], keys: NONE, needs: 'node', run: keys },
  { name: 'DBSIZE', arity: 1, flags: ['readonly', 'fast'], keys: NONE, needs: 'node', run: dbsize },
  { name: 'FLUSHALL', arity: -1, flags: ['write'], keys: NONE, needs: 'node', run: flushAll },
  { name: 'RENAME', arity: 3, flags: ['write'], keys: [1, 2, 1], run: rename(false) },
  { name: 'RENAMENX', arity: 3, flags: ['write', 'fast'], keys: [1, 2, 1], run: rename(true) },
  { name: 'COPY', arity: -3, flags: ['write', 'denyoom'], keys: [1, 2, 1], run: copy },
  // DUMP key: the value's payload in Redis's DUMP format, or null.
  {
    name: 'DUMP',
    arity: 2,
    flags: ['readonly'],
    keys: FIRST,
    run: keyOnlyModify(Modifier.Dump, ModifyMode.Value),
  },
  { name: 'RESTORE', arity: -4, flags: ['write', 'denyoom'], keys: FIRST, run: restore },
  { name: 'FLUSHDB', arity: -1, flags: ['write'], keys: NONE, needs: 'node', run: flushAll },
];
