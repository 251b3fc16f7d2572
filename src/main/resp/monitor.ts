// MONITOR's lines, as Redis 7.0 writes them: the time in seconds with microseconds, the database
// and the client's address, then every argument quoted, with `"` and `\` escaped, control bytes
// as \n \r \t \a \b, other unprintable bytes as \xHH. Passwords are shown as "(redacted)", and
// administrative commands (Redis's `admin` flag) are not shown at all.

import type { RespCommand } from '../../core/resp-parser.js';
import type { CommandSpec } from './commands.js';
import { optionName } from './commands.js';

/** Commands, or COMMAND|SUBCOMMAND, that Redis marks `admin` and so keeps out of MONITOR. */
const ADMIN_COMMANDS = new Set([
  'CONFIG',
  'SHUTDOWN',
  'MONITOR',
  'TESSERA.BACKUP',
  'CLIENT|KILL',
  'CLIENT|LIST',
  'CLIENT|NO-EVICT',
  'SAVE',
  'BGSAVE',
  'BGREWRITEAOF',
  'DEBUG',
  'ACL',
  'MODULE',
  'SLOWLOG',
  'LATENCY',
  'FAILOVER',
  'REPLICAOF',
  'SLAVEOF',
  'SYNC',
  'PSYNC',
]);

const REDACTED = '"(redacted)"';

/** The feed line for `cmd` (without the `+` and line end), or undefined when it is not shown. */
export function monitorLine(address: string, cmd: RespCommand, spec: CommandSpec): string | undefined {
  if (ADMIN_COMMANDS.has(spec.name)) return undefined;
  if (cmd.argc > 1 && ADMIN_COMMANDS.has(`${spec.name}|${optionName(cmd, 1)}`)) return undefined;
  const micros = Math.round((performance.timeOrigin + performance.now()) * 1000);
  let line = `${Math.floor(micros / 1e6)}.${String(micros % 1e6).padStart(6, '0')} [0 ${address}]`;
  for (let i = 0; i < cmd.argc; i++)
    line += ` ${redactedArgument(spec, cmd, i) ? REDACTED : quote(cmd.arg(i))}`;
  return line;
}

/** Whether argument `i` is a secret shown as (redacted): AUTH's arguments, and HELLO's two after AUTH. */
export function redactedArgument(spec: CommandSpec, cmd: RespCommand, i: number): boolean {
  if (spec.name === 'AUTH') return i > 0;
  if (spec.name !== 'HELLO') return false;
  for (let j = 2; j < cmd.argc; j++) {
    if (optionName(cmd, j) === 'AUTH') return i === j + 1 || i === j + 2;
  }
  return false;
}

/** Redis's sdscatrepr: a double-quoted, escaped copy of the bytes. */
export function quote(bytes: Uint8Array): string {
  let out = '"';
  for (const b of bytes) {
    if (b === 0x5c) out += '\\\\';
    else if (b === 0x22) out += '\\"';
    else if (b === 0x0a) out += '\\n';
    else if (b === 0x0d) out += '\\r';
    else if (b === 0x09) out += '\\t';
    else if (b === 0x07) out += '\\a';
    else if (b === 0x08) out += '\\b';
    else if (b >= 0x20 && b <= 0x7e) out += String.fromCharCode(b);
    else out += `\\x${b.toString(16).padStart(2, '0')}`;
  }
  return `${out}"`;
}
