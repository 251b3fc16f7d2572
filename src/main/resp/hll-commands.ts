// HyperLogLog commands: PFADD, PFCOUNT, PFMERGE, over values in Redis's own HyperLogLog format
// (src/core/hyperloglog.ts). Elements are hashed here, where the command enters, so only their
// registers and counts travel; the fragment actor that owns the key updates it. PFCOUNT and PFMERGE
// of several keys need them in one hash slot, as in Redis Cluster.

import { encodeHllPatterns } from '../../core/hyperloglog.js';
import { encodeKeys, Modifier, PfFlag } from '../../core/modify.js';
import type { RespCommand } from '../../core/resp-parser.js';
import type { RespWriter } from '../../core/resp-writer.js';
import { MODIFY_OPERAND_BYTES_MAX } from '../../threads/op-codec.js';
import type { CommandSpec } from './commands.js';
import type { RespConnection } from './connection.js';
import { keyFits, keysInOneSlot, ModifyMode, modifyKey } from './key-access.js';

/** Elements one PFADD may carry: three operand bytes each (register and count). */
const PFADD_ELEMENTS_MAX = Math.floor(MODIFY_OPERAND_BYTES_MAX / 3);

/** PFADD key [element …] */
function pfadd(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  const key = cmd.arg(1);
  if (!keyFits(key, w)) return true;
  if (cmd.argc - 2 > PFADD_ELEMENTS_MAX) {
    w.error(`PFADD takes at most ${PFADD_ELEMENTS_MAX} elements at once`);
    return true;
  }
  const elements: Uint8Array[] = [];
  for (let i = 2; i < cmd.argc; i++) elements.push(cmd.arg(i));
  modifyKey(conn, key, Modifier.PfAdd, 0, undefined, 0, ModifyMode.Integer, 0, encodeHllPatterns(elements));
  return false;
}

/** The keys after the first, all in its hash slot; undefined (with CROSSSLOT or a key error written) otherwise. */
function otherKeys(cmd: RespCommand, w: RespWriter): Uint8Array[] | undefined {
  return keysInOneSlot(cmd, 1, cmd.argc, w)?.slice(1);
}

/** PFCOUNT key [key …] */
function pfcount(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  const others = otherKeys(cmd, w);
  if (others === undefined) return true;
  const flags = cmd.argc > 2 ? PfFlag.Union : 0;
  modifyKey(
    conn,
    cmd.arg(1),
    Modifier.PfCount,
    flags,
    undefined,
    0,
    ModifyMode.Integer,
    0,
    encodeKeys(others),
  );
  return false;
}

/** PFMERGE destkey [sourcekey …] */
function pfmerge(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  const others = otherKeys(cmd, w);
  if (others === undefined) return true;
  modifyKey(conn, cmd.arg(1), Modifier.PfMerge, 0, undefined, 0, ModifyMode.SetOk, 0, encodeKeys(others));
  return false;
}

export const HLL_COMMANDS: CommandSpec[] = [
  { name: 'PFADD', arity: -2, flags: ['write', 'denyoom', 'fast'], keys: [1, 1, 1], run: pfadd },
  { name: 'PFCOUNT', arity: -2, flags: ['readonly'], keys: [1, -1, 1], run: pfcount },
  { name: 'PFMERGE', arity: -2, flags: ['write', 'denyoom'], keys: [1, -1, 1], run: pfmerge },
];
