// `tessera cluster status|members|events|placement|moves|metrics`: the cluster as a running node
// sees it, asked through its admin port (GET /health, /cluster/members, /cluster/events,
// /cluster/placement, /cluster/moves, /cluster/metrics); and
// `plan|remove|leave|move`: changes, POSTed with the admin token (admin/cluster-changes.ts).

import type { MemberState, MemberView } from '../core/membership-types.js';
import { sortMembers } from '../core/placement.js';
import type { ClusterMetrics } from './admin/cluster-metrics.js';
import { ADMIN_REQUEST_TIMEOUT_MS, mib } from './admin/server.js';
import { parseCliArgs } from './cli-args.js';
import { describePeersDown, type HealthState, type PeerDown } from './health-summary.js';
import type { MemberReport, MembershipReport, MovesReport } from './mesh/cluster.js';
import type { FragmentPlacement, Health } from './node.js';

export function clusterHelpText(): string {
  return [
    'Usage: tessera cluster <command> --admin-port <port> [--admin-bind <host>]',
    '',
    "Asks a running node, through its admin port, how it sees the cluster's members. The port may",
    'also come from TESSERA_ADMIN_PORT (and the host from TESSERA_ADMIN_BIND).',
    '',
    '  status                       the cluster state and one line per member',
    '                               (exit 1 if the node is degraded or unhealthy)',
    '  members [--json]             every member: state, flags (self, unreachable, suspect,',
    '                               disconnected, reported by), incarnation, address; --json: the',
    "                               node's /cluster/members as it is (exit 1 if any member is not",
    '                               Up and reachable)',
    '  events [--json] [--after N]  follows the cluster events, one line each (--json: one JSON',
    '                               object each); --after N resumes after event N. Ctrl-C stops',
    '                               (exit 0); exit 1 if the node ends the stream.',
    '  placement [--json]           every fragment: replicas, serving replica, table generation;',
    '                               then per member the replicas it holds and the fragments it serves',
    "  moves [--json]               replica moves in flight, what blocks the planner, this node's",
    '                               fragments copying or handing over, recent moves (exit 1 while',
    '                               fragments are under-replicated or the planner is blocked)',
    "  metrics [--json]             every member's latest metrics sample, one line each, and the",
    '                               members that did not answer in time (exit 1 if any did not)',
    '',
    'Changes need the admin token (--admin-token or TESSERA_ADMIN_TOKEN); any node forwards plan,',
    'remove and move to the coordinator, and says which node executed them; exit 1 when refused:',
    '  plan [join|leave|remove NODE] [--json]   the moves the planner would make (dry run)',
    '  remove NODE                  removes a Down member (it is refused until wiped)',
    '  leave                        this node hands every replica over, then exits the cluster',
    "  leave cancel                 cancels this node's leave while it is Leaving: Up again",
    '  move FRAGMENT NODE           pins the fragment to NODE: the planner moves a replica there',
  ].join('\n');
}

type ClusterCommand =
  | 'status'
  | 'members'
  | 'events'
  | 'placement'
  | 'moves'
  | 'metrics'
  | 'plan'
  | 'remove'
  | 'leave'
  | 'move';

const COMMANDS: Record<ClusterCommand, (args: ClusterArgs) => Promise<number>> = {
  status: clusterStatus,
  members: clusterMembers,
  events: clusterEvents,
  placement: clusterPlacement,
  moves: clusterMoves,
  metrics: clusterMetrics,
  plan: (args) => {
    const [action, node] = args.positional;
    return postChange(args, '/cluster/plan', action === undefined ? { action: 'now' } : { action, node });
  },
  remove: (args) => postChange(args, '/cluster/remove', { node: args.positional[0] }),
  leave: (args) => {
    const [word] = args.positional;
    if (word !== undefined && word !== 'cancel') {
      process.stderr.write(`tessera cluster leave: unknown argument "${word}" (only "cancel")\n`);
      return Promise.resolve(2);
    }
    return postChange(args, '/cluster/leave', word === 'cancel' ? { cancel: true } : {});
  },
  move: (args) =>
    postChange(args, '/cluster/move', { fragment: Number(args.positional[0]), to: args.positional[1] }),
};

interface ClusterArgs {
  /** Words after the command that are not flags (`remove NODE`). */
  positional: string[];
  /** The admin token, for changes. */
  token: string | undefined;
  json: boolean;
  /** `events`: the sequence to resume after. */
  after: number | undefined;
  /** The admin port's base URL. */
  base: string;
}

/** `tessera cluster …` (argv after `cluster`): the exit status. */
export async function clusterCommand(argv: readonly string[]): Promise<number> {
  const [command, ...rest] = argv;
  if (command === '--help' || command === '-h' || rest.includes('--help')) {
    process.stdout.write(`${clusterHelpText()}\n`);
    return 0;
  }
  if (!Object.hasOwn(COMMANDS, command ?? '')) {
    const said = command === undefined ? 'a command is needed' : `unknown command "${command}"`;
    process.stderr.write(`tessera cluster: ${said}\n\n${clusterHelpText()}\n`);
    return 2;
  }
  const args = clusterArgs(command as ClusterCommand, rest);
  return args === undefined ? 2 : COMMANDS[command as ClusterCommand](args);
}

/** Takes this command's own flags out and the admin port from the rest; undefined after saying what is wrong. */
function clusterArgs(command: ClusterCommand, argv: readonly string[]): ClusterArgs | undefined {
  const rest: string[] = [];
  const positional: string[] = [];
  let json = false;
  let after: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (
      !arg.startsWith('--') &&
      (rest.length === 0 || !rest[rest.length - 1].startsWith('--') || rest[rest.length - 1].includes('='))
    )
      positional.push(arg);
    else if (arg === '--json' && command !== 'status') json = true;
    else if (arg === '--after' && command === 'events') after = argv[++i] ?? '';
    else if (arg.startsWith('--after=') && command === 'events') after = arg.slice('--after='.length);
    else rest.push(arg);
  }
  if (after !== undefined && !/^[0-9]{1,15}$/.test(after)) {
    process.stderr.write(`tessera cluster events: --after needs an event sequence number, got "${after}"\n`);
    return undefined;
  }
  const base = adminBaseUrl(`cluster ${command}`, rest);
  if (base === undefined) return undefined;
  let token: string | undefined;
  try {
    token = parseCliArgs(rest, process.env).admin?.token;
  } catch {
    token = undefined; // adminBaseUrl has said what is wrong with the flags
  }
  return { positional, token, json, after: after === undefined ? undefined : Number(after), base };
}

/**
 * The base URL of the admin port a subcommand names (`--admin-port`, `--admin-bind` or their
 * environment variables); undefined after saying what is wrong (exit 2).
 */
export function adminBaseUrl(command: string, argv: readonly string[]): string | undefined {
  let admin: { port: number; bind: string } | undefined;
  try {
    admin = parseCliArgs(argv, process.env).admin;
  } catch (err) {
    process.stderr.write(`tessera: ${(err as Error).message}\n`);
    return undefined;
  }
  if (admin === undefined) {
    process.stderr.write(
      `tessera ${command}: give the node's admin port (--admin-port or TESSERA_ADMIN_PORT)\n`,
    );
    return undefined;
  }
  const host = admin.bind.includes(':') ? `[${admin.bind}]` : admin.bind;
  return `http://${host}:${admin.port}`;
}

/** GET `url` as JSON; undefined after saying it could not be reached. */
async function getJson(command: string, url: string): Promise<{ status: number; body: unknown } | undefined> {
  try {
    const response = await fetch(url, { signal: AbortSignal.timeout(ADMIN_REQUEST_TIMEOUT_MS) });
    return { status: response.status, body: await response.json() };
  } catch (err) {
    process.stderr.write(`tessera ${command}: cannot reach ${url}: ${(err as Error).message}\n`);
    return undefined;
  }
}

/** The error a refusal's JSON names, or its status. */
function refusal(url: string, status: number, body: unknown): string {
  const error = (body as { error?: unknown } | null)?.error;
  return `${url} answered ${status}${typeof error === 'string' ? `: ${error}` : ''}`;
}

/** A member's flags for a person: self, unreachable, suspect, disconnected, who reports it. */
function memberFlags(m: MemberReport): string {
  const flags = [
    ...(m.self ? ['self'] : []),
    ...(m.unreachable ? ['unreachable'] : []),
    ...(m.suspect ? ['suspect'] : []),
    ...(m.connected ? [] : ['disconnected']),
    ...(m.reporters.length === 0 ? [] : [`reported by ${m.reporters.join(',')}`]),
  ];
  return flags.length === 0 ? '-' : flags.join(', ');
}

/** Up and not unreachable: what `members` exits 0 for. */
const isUpAndReachable = (m: { state: MemberState; unreachable: boolean }): boolean =>
  m.state === 'Up' && !m.unreachable;

/** Rows as columns padded to their widest cell. */
function columns(rows: string[][]): string {
  const widths = rows[0].map((_, c) => Math.max(...rows.map((r) => r[c].length)));
  return rows
    .map((r) =>
      r
        .map((cell, c) => cell.padEnd(widths[c]))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

function formatMembers(report: MembershipReport): string {
  const rows = [
    ['member', 'state', 'flags', 'incarnation', 'address'],
    ...report.members.map((m) => [m.nodeId, m.state, memberFlags(m), String(m.incarnation), m.address]),
  ];
  return `${columns(rows)}\nlocal health ×${report.localHealth}`;
}

async function clusterMembers(args: ClusterArgs): Promise<number> {
  const url = `${args.base}/cluster/members`;
  const answer = await getJson('cluster members', url);
  if (answer === undefined) return 1;
  if (answer.status !== 200) {
    process.stderr.write(`tessera cluster members: ${refusal(url, answer.status, answer.body)}\n`);
    return 1;
  }
  const report = answer.body as MembershipReport;
  process.stdout.write(args.json ? `${JSON.stringify(report, null, 2)}\n` : `${formatMembers(report)}\n`);
  return report.members.every(isUpAndReachable) ? 0 : 1;
}

type HealthBody = Health & { state: HealthState; peersDown: PeerDown[] };

function formatClusterStatus(health: HealthBody): string {
  const cluster = health.cluster!;
  const lines = [
    `cluster state ${cluster.state}; node ${health.nodeId} ${health.state}` +
      (health.peersDown.length === 0 ? '' : ` (${describePeersDown(health.peersDown)})`),
  ];
  const downSince = new Map(cluster.peers.map((p) => [p.id, p.downSince]));
  const members = cluster.membership?.members ?? [];
  const rows = members.map((m) => {
    const since = downSince.get(m.nodeId);
    return [
      `  ${m.nodeId}`,
      m.state,
      m.unreachable ? 'unreachable' : m.suspect ? 'suspect' : 'reachable',
      `incarnation ${m.incarnation}`,
      m.health,
      m.self ? '(this node)' : since === undefined ? '' : `down since ${since}`,
    ];
  });
  if (rows.length > 0) lines.push(columns(rows));
  return lines.join('\n');
}

async function clusterStatus(args: ClusterArgs): Promise<number> {
  const url = `${args.base}/health`;
  const answer = await getJson('cluster status', url);
  if (answer === undefined) return 1;
  const body = answer.body as HealthBody & { error?: string };
  if (body.cluster === undefined) {
    const why =
      body.error === undefined ? `node ${body.nodeId} has no peers` : refusal(url, answer.status, body);
    process.stderr.write(`tessera cluster status: ${why}\n`);
    return 1;
  }
  process.stdout.write(`${formatClusterStatus(body)}\n`);
  return answer.status === 200 && body.state === 'healthy' ? 0 : 1;
}

/** One event as `/cluster/events` sends it (event-stream.ts). */
interface StreamEvent {
  type: string;
  data: Record<string, unknown>;
}

/** One event for a person: when, its sequence, its kind, and the member as it then was. */
function formatEvent(event: StreamEvent): string {
  const d = event.data;
  if (event.type === 'overflow') {
    const resumeFrom = Number(d.resumeFrom);
    return `overflow (${d.reason}): ${d.lost} events lost; next is #${resumeFrom} (resume with --after ${resumeFrom - 1})`;
  }
  const m = d.member as MemberView | undefined;
  const member =
    m === undefined
      ? ''
      : ` ${m.nodeId} ${m.state}${m.unreachable ? ' unreachable' : ''}${m.suspect ? ' suspect' : ''} incarnation ${m.incarnation}`;
  return `${d.at} #${d.sequence} ${event.type}${member}`;
}

/**
 * Follows the stream until the node ends it (exit 1, saying where to resume) or SIGINT (exit 0).
 * Connecting has ADMIN_REQUEST_TIMEOUT_MS; the stream itself has none.
 */
async function clusterEvents(args: ClusterArgs): Promise<number> {
  const url = `${args.base}/cluster/events`;
  const controller = new AbortController();
  let interrupted = false;
  const interrupt = (): void => {
    interrupted = true;
    controller.abort();
  };
  process.once('SIGINT', interrupt);
  const connecting = setTimeout(() => controller.abort(), ADMIN_REQUEST_TIMEOUT_MS);
  let lastSequence = args.after;
  try {
    const headers = args.after === undefined ? undefined : { 'Last-Event-ID': String(args.after) };
    const response = await fetch(url, { headers, signal: controller.signal });
    clearTimeout(connecting);
    if (response.status !== 200 || response.body === null) {
      const body = await response.json().catch(() => undefined);
      process.stderr.write(`tessera cluster events: ${refusal(url, response.status, body)}\n`);
      return 1;
    }
    for await (const event of streamEvents(response.body)) {
      if (event.type === 'overflow') lastSequence = Number(event.data.resumeFrom) - 1;
      else lastSequence = Number(event.data.sequence);
      const line = args.json
        ? JSON.stringify(event.type === 'overflow' ? { kind: 'overflow', ...event.data } : event.data)
        : formatEvent(event);
      process.stdout.write(`${line}\n`);
    }
    const resume = lastSequence === undefined ? '' : `; resume with --after ${lastSequence}`;
    process.stderr.write(`tessera cluster events: the node ended the stream${resume}\n`);
    return 1;
  } catch (err) {
    if (interrupted) return 0;
    process.stderr.write(`tessera cluster events: cannot follow ${url}: ${(err as Error).message}\n`);
    return 1;
  } finally {
    clearTimeout(connecting);
    process.off('SIGINT', interrupt);
  }
}

/** The events of a Server-Sent Events body (comments skipped), as the SSE format frames them. */
async function* streamEvents(body: ReadableStream<Uint8Array>): AsyncGenerator<StreamEvent> {
  const decoder = new TextDecoder();
  let pending = '';
  let type = 'message';
  let data: string[] = [];
  for await (const chunk of body) {
    pending += decoder.decode(chunk, { stream: true });
    let end = pending.indexOf('\n');
    while (end !== -1) {
      const line = pending.slice(0, end).replace(/\r$/, '');
      pending = pending.slice(end + 1);
      end = pending.indexOf('\n');
      if (line === '') {
        if (data.length > 0) yield { type, data: JSON.parse(data.join('\n')) as Record<string, unknown> };
        type = 'message';
        data = [];
      } else if (line.startsWith('event:')) {
        type = line.slice('event:'.length).trim();
      } else if (line.startsWith('data:')) {
        data.push(line.slice('data:'.length).trimStart());
      }
    }
  }
}

/** `placement`: one line per fragment (or the JSON as it is). */
async function clusterPlacement(args: ClusterArgs): Promise<number> {
  const url = `${args.base}/cluster/placement`;
  const answer = await getJson('cluster placement', url);
  if (answer === undefined) return 1;
  if (answer.status !== 200) {
    process.stderr.write(`tessera cluster placement: ${refusal(url, answer.status, answer.body)}\n`);
    return 1;
  }
  if (args.json) {
    process.stdout.write(`${JSON.stringify(answer.body, null, 2)}\n`);
    return 0;
  }
  const rows = [['fragment', 'slots', 'replicas', 'serving', 'generation', 'epoch']];
  // Per member: the replicas it holds and the fragments it serves, so an uneven spread shows.
  const members = new Map<string, { replicas: number; serving: number }>();
  const tally = (id: string) => {
    let counts = members.get(id);
    if (counts === undefined) members.set(id, (counts = { replicas: 0, serving: 0 }));
    return counts;
  };
  for (const f of answer.body as FragmentPlacement[]) {
    rows.push([
      String(f.fragment),
      `${f.slots[0]}-${f.slots[1]}`,
      f.replicas.join(','),
      f.serving ?? '(none)',
      f.generation === undefined ? '-' : String(f.generation),
      f.fence === undefined ? '-' : String(f.fence.epoch),
    ]);
    for (const id of f.replicas) tally(id).replicas++;
    if (f.serving !== undefined) tally(f.serving).serving++;
  }
  const perMember = [['member', 'replicas', 'serving']];
  for (const id of sortMembers(members.keys())) {
    const counts = tally(id);
    perMember.push([id, String(counts.replicas), String(counts.serving)]);
  }
  process.stdout.write(`${columns(rows)}\n\n${columns(perMember)}\n`);
  return 0;
}

/**
 * `moves`: moves in flight, what blocks the planner, and this node's fragments in transition; exit 1
 * while some fragment is under-replicated or the planner is blocked.
 */
async function clusterMoves(args: ClusterArgs): Promise<number> {
  const url = `${args.base}/cluster/moves`;
  const answer = await getJson('cluster moves', url);
  if (answer === undefined) return 1;
  if (answer.status !== 200) {
    process.stderr.write(`tessera cluster moves: ${refusal(url, answer.status, answer.body)}\n`);
    return 1;
  }
  const report = answer.body as MovesReport;
  // A node of an earlier version says nothing of what blocks its planner.
  const blocked = report.blocked ?? [];
  const status = report.underReplicated > 0 || blocked.length > 0 ? 1 : 0;
  if (args.json) {
    process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
    return status;
  }
  const rate = report.moveRateBytesPerSec === 0 ? 'unlimited' : `${mib(report.moveRateBytesPerSec)}/s`;
  const lines = [
    `table epoch ${report.tableEpoch}: ${report.inFlight.length} moves in flight, ${report.underReplicated} fragments under-replicated, move rate ${rate}`,
  ];
  for (const reason of blocked) lines.push(`blocked: ${reason}`);
  if (report.inFlight.length > 0) {
    const rows = [['fragment', 'source', 'target', 'reason', 'generation', 'since']];
    for (const m of report.inFlight)
      rows.push([
        String(m.fragment),
        m.source ?? '-',
        m.target,
        m.reason,
        String(m.generation),
        m.since ?? '-',
      ]);
    lines.push(columns(rows));
  }
  if (report.here.length > 0) {
    const rows = [['fragment', 'here', 'generation', 'step', 'copied', 'left', 'since', 'waiting']];
    for (const f of report.here)
      rows.push([
        String(f.fragment),
        f.state,
        String(f.generation),
        f.step ?? '-',
        f.bytesDone === null ? '-' : `${mib(f.bytesDone)} (${f.keysDone} keys)`,
        // An estimate (Cluster.movesReport), marked as one.
        f.bytesLeft === null ? '-' : `~${mib(f.bytesLeft)} (~${f.keysLeft} keys)`,
        f.since,
        f.waiting || '-',
      ]);
    lines.push(columns(rows));
  }
  process.stdout.write(`${lines.join('\n')}\n`);
  return status;
}

/** One line per member that answered, then one per member that did not. */
function formatMetrics(listing: ClusterMetrics): string {
  const rows = [['node', 'state', 'up', 'resident', 'workers', 'writes', 'reads', 'commands', 'clients']];
  for (const [id, s] of Object.entries(listing.nodes)) {
    const sum = (pick: (w: (typeof s.workers)[number]) => number) =>
      s.workers.reduce((n, w) => n + pick(w), 0);
    rows.push([
      id,
      s.state,
      `${s.process.uptimeSeconds} s`,
      mib(s.process.residentBytes),
      `${s.workers.filter((w) => w.state === 'ready').length}/${s.workers.length} ready`,
      String(sum((w) => w.writes)),
      String(sum((w) => w.reads) + s.snapshotReads),
      s.resp === undefined ? '-' : String(s.resp.commandsProcessed),
      s.resp === undefined ? '-' : String(s.resp.connectedClients),
    ]);
  }
  const lines = [columns(rows)];
  for (const [id, e] of Object.entries(listing.errors))
    lines.push(`${id}: no sample (${e.status}: ${e.message})`);
  return lines.join('\n');
}

/** `metrics`: every member's sample; exit 1 when some member's is missing (partial). */
async function clusterMetrics(args: ClusterArgs): Promise<number> {
  const url = `${args.base}/cluster/metrics`;
  const answer = await getJson('cluster metrics', url);
  if (answer === undefined) return 1;
  if (answer.status !== 200) {
    process.stderr.write(`tessera cluster metrics: ${refusal(url, answer.status, answer.body)}\n`);
    return 1;
  }
  const listing = answer.body as ClusterMetrics;
  process.stdout.write(args.json ? `${JSON.stringify(listing, null, 2)}\n` : `${formatMetrics(listing)}\n`);
  return listing.partial ? 1 : 0;
}

/** A change: POSTs `body` with the token and prints the node's answer; exit 0 only when it is Ok. */
async function postChange(args: ClusterArgs, path: string, body: Record<string, unknown>): Promise<number> {
  const url = `${args.base}${path}`;
  let status: number;
  let answer: {
    status?: string;
    message?: string;
    executedBy?: string;
    changes?: Array<{ fragment: number; from: string[]; to: string[] }>;
  };
  try {
    const response = await fetch(url, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        ...(args.token === undefined ? {} : { authorization: `Bearer ${args.token}` }),
      },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(ADMIN_REQUEST_TIMEOUT_MS),
    });
    status = response.status;
    answer = (await response.json()) as typeof answer;
  } catch (err) {
    process.stderr.write(`tessera cluster: cannot reach ${url}: ${(err as Error).message}\n`);
    return 1;
  }
  if (args.json) process.stdout.write(`${JSON.stringify(answer, null, 2)}\n`);
  else {
    const by = answer.executedBy === undefined ? '' : ` (executed by ${answer.executedBy})`;
    const lines = [`${answer.status ?? status}: ${answer.message ?? ''}${by}`];
    for (const c of answer.changes ?? [])
      lines.push(`  fragment ${c.fragment}: [${c.from.join(' ')}] -> [${c.to.join(' ')}]`);
    (answer.status === 'Ok' ? process.stdout : process.stderr).write(`${lines.join('\n')}\n`);
  }
  return answer.status === 'Ok' ? 0 : 1;
}
