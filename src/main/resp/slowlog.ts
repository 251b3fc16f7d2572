// SLOWLOG, as Redis keeps it: each command whose main-thread time reached
// `--slowlog-log-slower-than` µs (negative: none; 0: every command) is kept with its arguments
// (at most SLOWLOG_ENTRY_ARGS_MAX, each cut at SLOWLOG_ENTRY_ARG_BYTES_MAX bytes, passwords
// redacted), the client's address and name, newest first, up to `--slowlog-max-len` entries. The
// time is what INFO commandstats counts: a reply that waits for a worker does not count its wait.

import { SLOWLOG_ENTRY_ARG_BYTES_MAX, SLOWLOG_ENTRY_ARGS_MAX } from '../../core/limits.js';
import type { RespCommand } from '../../core/resp-parser.js';
import type { RespWriter } from '../../core/resp-writer.js';
import type { CommandSpec } from './commands.js';
import { redactedArgument } from './monitor.js';

interface SlowLogEntry {
  id: number;
  /** Unix time in seconds when the command ran. */
  timeS: number;
  durationUs: number;
  args: Buffer[];
  client: string;
  clientName: string;
}

const REDACTED = Buffer.from('(redacted)');

export class SlowLog {
  /** Newest last (the reply lists newest first). */
  private entries: SlowLogEntry[] = [];
  private nextId = 0;

  constructor(
    /** µs a command must take to be kept; negative keeps none. */
    readonly slowerThanUs: number,
    readonly maxLen: number,
  ) {}

  /** Keeps `cmd` if it took at least the threshold. */
  consider(
    spec: CommandSpec,
    cmd: RespCommand,
    durationUs: number,
    client: { remoteAddress: string; name: string },
  ): void {
    if (this.slowerThanUs < 0 || durationUs < this.slowerThanUs || this.maxLen === 0) return;
    const shown = Math.min(cmd.argc, SLOWLOG_ENTRY_ARGS_MAX);
    const args: Buffer[] = [];
    for (let i = 0; i < shown; i++) {
      // As Redis: the last argument shown says how many more there were.
      if (i === shown - 1 && cmd.argc > SLOWLOG_ENTRY_ARGS_MAX) {
        args.push(Buffer.from(`... (${cmd.argc - SLOWLOG_ENTRY_ARGS_MAX + 1} more arguments)`));
        break;
      }
      args.push(redactedArgument(spec, cmd, i) ? REDACTED : argumentShown(cmd.arg(i)));
    }
    this.entries.push({
      id: this.nextId++,
      timeS: Math.floor(Date.now() / 1000),
      durationUs: Math.round(durationUs),
      args,
      client: client.remoteAddress,
      clientName: client.name,
    });
    if (this.entries.length > this.maxLen) this.entries.shift();
  }

  get length(): number {
    return this.entries.length;
  }

  reset(): void {
    this.entries = [];
  }

  /** SLOWLOG GET's reply: the newest `count` entries (all when negative), newest first. */
  write(w: RespWriter, count: number): void {
    const n = count < 0 ? this.entries.length : Math.min(count, this.entries.length);
    w.arrayHeader(n);
    for (let i = 0; i < n; i++) {
      const e = this.entries[this.entries.length - 1 - i];
      w.arrayHeader(6);
      w.integer(e.id);
      w.integer(e.timeS);
      w.integer(e.durationUs);
      w.arrayHeader(e.args.length);
      for (const a of e.args) w.bulk(a);
      w.bulk(e.client);
      w.bulk(e.clientName);
    }
  }
}

/** An argument as kept: cut at SLOWLOG_ENTRY_ARG_BYTES_MAX bytes, saying how many more there were. */
function argumentShown(arg: Buffer): Buffer {
  if (arg.length <= SLOWLOG_ENTRY_ARG_BYTES_MAX) return Buffer.from(arg);
  const more = Buffer.from(`... (${arg.length - SLOWLOG_ENTRY_ARG_BYTES_MAX} more bytes)`);
  return Buffer.concat([arg.subarray(0, SLOWLOG_ENTRY_ARG_BYTES_MAX), more]);
}
