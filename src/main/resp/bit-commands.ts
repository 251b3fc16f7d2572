// Bit commands on string values: SETBIT, GETBIT, BITCOUNT, BITPOS, BITOP. Each runs in the fragment actor
// that owns the key (src/core/modify.ts, src/core/bits.ts), so it orders with every other command on
// that key and a count over a large value never runs on the main thread. Arguments Redis checks
// before it looks the key up are checked here; the rest travel with the operation.

import { BIT_OFFSET_MAX, BIT_OPERATION_NAMES, BitOperation, encodeBitArgs } from '../../core/bits.js';
import { slotOf } from '../../core/keyspace.js';
import { encodeKeys, Modifier } from '../../core/modify.js';
import type { RespCommand } from '../../core/resp-parser.js';
import type { RespWriter } from '../../core/resp-writer.js';
import { MODIFY_OPERAND_BYTES_MAX } from '../../threads/op-codec.js';
import { type CommandSpec, crossSlot, integerArg, optionName, SYNTAX_ERROR } from './commands.js';
import type { RespConnection } from './connection.js';
import { keyFits, ModifyMode, modifyKey } from './key-access.js';

const BAD_OFFSET = 'bit offset is not an integer or out of range';
const BAD_BIT = 'bit is not an integer or out of range';

/** The bit offset in argument `i`, or undefined (with Redis's error written) when it is not one. */
function offsetArg(cmd: RespCommand, i: number, w: RespWriter): number | undefined {
  const offset = integerArg(cmd, i);
  if (offset !== undefined && offset >= 0 && offset <= BIT_OFFSET_MAX) return offset;
  w.error(BAD_OFFSET);
  return undefined;
}

/** SETBIT key offset 0|1: answers the bit's old value. */
function setbit(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  const key = cmd.arg(1);
  if (!keyFits(key, w)) return true;
  const offset = offsetArg(cmd, 2, w);
  if (offset === undefined) return true;
  const bit = integerArg(cmd, 3);
  if (bit !== 0 && bit !== 1) {
    w.error(BAD_BIT);
    return true;
  }
  modifyKey(conn, key, Modifier.SetBit, bit, undefined, 0, ModifyMode.Integer, offset);
  return false;
}

/** GETBIT key offset */
function getbit(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  const key = cmd.arg(1);
  if (!keyFits(key, w)) return true;
  const offset = offsetArg(cmd, 2, w);
  if (offset === undefined) return true;
  modifyKey(conn, key, Modifier.GetBit, 0, undefined, 0, ModifyMode.Integer, offset);
  return false;
}

/** BITCOUNT key [start end [BYTE | BIT]] and BITPOS key bit [start [end [BYTE | BIT]]]. */
function withRange(modifier: typeof Modifier.BitCount | typeof Modifier.BitPos) {
  return (conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean => {
    const key = cmd.arg(1);
    if (!keyFits(key, w)) return true;
    const args: Uint8Array[] = [];
    for (let i = 2; i < cmd.argc; i++) args.push(cmd.arg(i));
    modifyKey(conn, key, modifier, 0, undefined, 0, ModifyMode.Integer, 0, encodeBitArgs(args));
    return false;
  };
}

/**
 * BITOP AND | OR | XOR | NOT destkey key [key …]: every key in one hash slot, so the destination's
 * fragment actor reads the sources and writes the result in one step.
 */
function bitop(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  const destination = cmd.arg(2);
  const slot = slotOf(destination);
  const sources: Uint8Array[] = [];
  for (let i = 2; i < cmd.argc; i++) {
    if (!keyFits(cmd.arg(i), w)) return true;
    if (slotOf(cmd.arg(i)) !== slot) return crossSlot(w);
    if (i > 2) sources.push(cmd.arg(i));
  }
  const operation = BIT_OPERATION_NAMES[optionName(cmd, 1)];
  if (operation === undefined) {
    w.error(SYNTAX_ERROR);
    return true;
  }
  if (operation === BitOperation.Not && sources.length !== 1) {
    w.error('BITOP NOT must be called with a single source key.');
    return true;
  }
  const operand = encodeKeys(sources);
  if (operand.length > MODIFY_OPERAND_BYTES_MAX) {
    w.error(`BITOP takes at most ${MODIFY_OPERAND_BYTES_MAX} bytes of source keys`);
    return true;
  }
  modifyKey(conn, destination, Modifier.BitOp, operation, undefined, 0, ModifyMode.Integer, 0, operand);
  return false;
}

const FIRST: readonly [number, number, number] = [1, 1, 1];

export const BIT_COMMANDS: CommandSpec[] = [
  { name: 'SETBIT', arity: 4, flags: ['write', 'denyoom'], keys: FIRST, run: setbit },
  { name: 'GETBIT', arity: 3, flags: ['readonly', 'fast'], keys: FIRST, run: getbit },
  { name: 'BITCOUNT', arity: -2, flags: ['readonly'], keys: FIRST, run: withRange(Modifier.BitCount) },
  { name: 'BITPOS', arity: -3, flags: ['readonly'], keys: FIRST, run: withRange(Modifier.BitPos) },
  { name: 'BITOP', arity: -4, flags: ['write', 'denyoom'], keys: [2, -1, 1], run: bitop },
];
