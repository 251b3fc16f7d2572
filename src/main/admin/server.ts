// The admin HTTP face (DESIGN.md "Faces"): health, cluster and placement as JSON, Prometheus
// metrics, a small status page, and the cluster changes of admin/cluster-changes.ts (POST, guarded
// by --admin-token). It binds loopback unless told otherwise, and serves a few scrapers and
// operators, so its connections are bounded.
//
//   GET /health     the node's health report with its state: 200 when healthy or degraded (every
//                   worker ready, no fragment refusing writes; degraded: some peer disconnected,
//                   listed with since when), 503 when unhealthy (same body)
//   GET /placement  where every fragment lives and which replica serves it, with its assignment
//                   table generation, fence and history (also GET /cluster/placement)
//   GET /cluster    members, peers and replication senders (404 on a node without peers)
//   GET /cluster/members  membership's view of every member, with connection, health and
//                   reporters, and the failure detector's figures (404 without peers)
//   GET /cluster/moves    replica moves in flight and recent, this node's fragments that are
//                   copying or handing over, and the under-replicated count (404 without peers)
//   GET /cluster/events   cluster events as Server-Sent Events (admin/event-stream.ts; 404
//                   without peers, 503 past CLUSTER_EVENT_READERS_MAX readers)
//   GET /metrics    Prometheus text format (admin/metrics.ts)
//   GET /cluster/metrics  every member's metrics sample, asked over the peer mesh, merged
//                   (admin/cluster-metrics.ts; partial, with per-member errors, when some do not
//                   answer in time; 404 without peers)
//   POST /cluster/plan, /cluster/remove, /cluster/leave, /cluster/move   (admin/cluster-changes.ts;
//                   the coordinator's decisions are forwarded to it)
//   GET /           the status page

import { readdir, stat } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { assert } from '../../core/assert.js';
import { ADMIN_FORWARD_DEADLINE_MS } from '../../core/limits.js';
import {
  describePeersDown,
  type HealthState,
  healthState,
  peerSummaries,
  peersDown,
  type WorkerSummary,
  workerSummaries,
} from '../health-summary.js';
import { listenOn } from '../listen.js';
import type { MemberReport, MovesReport } from '../mesh/cluster.js';
import type { Health, Tessera } from '../node.js';
import type { RespServer } from '../resp/server.js';
import { CLUSTER_CHANGE_PATHS, clusterChange, HTTP_STATUS_OF, servePeerRequests } from './cluster-changes.js';
import { clusterMetrics } from './cluster-metrics.js';
import { ClusterEventStreams } from './event-stream.js';
import { processFigures, prometheusText } from './metrics.js';

export const ADMIN_BIND_DEFAULT = '127.0.0.1';
/** Connections at once; more are refused. */
export const ADMIN_CONNECTIONS_MAX = 64;
/** How long a request may take to arrive whole. */
export const ADMIN_REQUEST_TIMEOUT_MS = 10_000;
assert(
  ADMIN_FORWARD_DEADLINE_MS < ADMIN_REQUEST_TIMEOUT_MS,
  'a forwarded change is answered before a client (the CLI) gives up on it',
);
/** How often the status page reloads itself. */
const STATUS_PAGE_REFRESH_S = 5;

export interface AdminServerOptions {
  port: number;
  bind?: string;
  logger: Logger;
  /** The node's RESP server, for its counters in /metrics and on the status page. */
  resp?: RespServer;
  /** How often event streams get a keepalive comment (default EVENT_STREAM_KEEPALIVE_MS; tests shorten it). */
  eventStreamKeepaliveMs?: number;
  /** The bearer token cluster changes need (`--admin-token`); without one they are refused. */
  token?: string;
}

/** What the status page saw at its last rendering, for the rates it shows the next time. */
interface StatusSample {
  atMs: number;
  /** Writes and reads per worker index. */
  writes: Map<number, number>;
  reads: Map<number, number>;
  snapshotReads: number;
}

export class AdminServer {
  private readonly server: Server;
  private bound = { host: '', port: 0 };
  private lastSample: StatusSample | undefined;
  /** The open `/cluster/events` streams; undefined on a node without peers. */
  private readonly eventStreams: ClusterEventStreams | undefined;

  private constructor(
    private readonly node: Tessera,
    private readonly options: AdminServerOptions,
  ) {
    // Peers asking this node for its sample get the RESP server's counters too.
    servePeerRequests(node, options.resp);
    this.eventStreams =
      node.cluster === undefined
        ? undefined
        : new ClusterEventStreams(node.cluster.events, options.eventStreamKeepaliveMs);
    this.server = createServer((req, res) => {
      this.handle(req, res).catch((err: Error) => {
        options.logger.warn({ err: err.message, path: req.url }, 'admin request failed');
        if (!res.headersSent) send(res, req, 500, JSON_TYPE, json({ error: err.message }));
        else res.destroy();
      });
    });
    this.server.maxConnections = ADMIN_CONNECTIONS_MAX;
    // Both bound the request's arrival only: an event stream, its request long received, runs on.
    this.server.requestTimeout = ADMIN_REQUEST_TIMEOUT_MS;
    this.server.headersTimeout = ADMIN_REQUEST_TIMEOUT_MS;
  }

  static async listen(node: Tessera, options: AdminServerOptions): Promise<AdminServer> {
    const admin = new AdminServer(node, options);
    admin.bound = await listenOn(admin.server, options.port, options.bind ?? ADMIN_BIND_DEFAULT);
    return admin;
  }

  get address(): { host: string; port: number } {
    return { ...this.bound };
  }

  /** Stops listening and ends every connection, idle or not, event streams included. */
  close(): Promise<void> {
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    this.eventStreams?.closeAll();
    this.server.closeAllConnections();
    return closed;
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://admin');
    const path = url.pathname;
    if (req.method === 'POST' && CLUSTER_CHANGE_PATHS.has(path)) {
      const answer = await clusterChange(this.node, path, req, this.options.token);
      if (answer.status !== 'Ok') this.options.logger.warn({ path, ...answer }, 'admin change refused');
      // A body left unread (refused before or while reading it) cannot be followed by another request.
      if (!req.readableEnded) res.setHeader('Connection', 'close');
      return send(res, req, HTTP_STATUS_OF[answer.status], JSON_TYPE, json(answer));
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.setHeader('Allow', CLUSTER_CHANGE_PATHS.has(path) ? 'POST' : 'GET, HEAD');
      return send(
        res,
        req,
        405,
        JSON_TYPE,
        json({
          error: `${req.method} is not allowed here: changes are POST /cluster/{plan,remove,leave,move}, the rest is read-only`,
        }),
      );
    }
    switch (path) {
      case '/health': {
        const health = await this.health(res, req);
        if (health === undefined) return;
        const state = healthState(health);
        const body = { state, healthy: state !== 'unhealthy', peersDown: peersDown(health), ...health };
        // A degraded node still serves every key with a reachable copy, so a probe keeps routing to
        // it: draining degraded nodes would drain a whole partitioned cluster at once.
        return send(res, req, state === 'unhealthy' ? 503 : 200, JSON_TYPE, json(body));
      }
      case '/placement':
      case '/cluster/placement':
        return send(res, req, 200, JSON_TYPE, json(this.node.placementReport()));
      case '/cluster': {
        const health = await this.health(res, req);
        if (health === undefined) return;
        if (health.cluster === undefined)
          return send(res, req, 404, JSON_TYPE, json({ error: 'this node has no peers' }));
        return send(res, req, 200, JSON_TYPE, json(health.cluster));
      }
      case '/cluster/members': {
        const report = this.node.cluster?.membershipReport();
        if (report === undefined)
          return send(res, req, 404, JSON_TYPE, json({ error: 'this node has no peers' }));
        return send(res, req, 200, JSON_TYPE, json({ nodeId: this.node.nodeId, ...report }));
      }
      case '/cluster/events':
        return this.streamEvents(req, res, url);
      case '/cluster/moves': {
        const report = this.node.cluster?.movesReport();
        if (report === undefined)
          return send(res, req, 404, JSON_TYPE, json({ error: 'this node has no peers' }));
        return send(res, req, 200, JSON_TYPE, json({ nodeId: this.node.nodeId, ...report }));
      }
      case '/cluster/metrics':
        if (this.node.cluster === undefined)
          return send(res, req, 404, JSON_TYPE, json({ error: 'this node has no peers' }));
        return send(res, req, 200, JSON_TYPE, json(await clusterMetrics(this.node, this.options.resp)));
      case '/metrics': {
        const health = await this.health(res, req);
        if (health === undefined) return;
        const text = prometheusText({
          health,
          resp: this.options.resp?.statsSnapshot(),
          process: processFigures(),
        });
        return send(res, req, 200, METRICS_TYPE, text);
      }
      case '/': {
        const health = await this.health(res, req);
        if (health === undefined) return;
        const sample = sampleOf(health);
        const page = statusPage(health, this.options.resp, {
          previous: this.lastSample,
          now: sample,
          dataDirBytes: await dataDirBytes(this.node.settings),
          moves: this.node.cluster?.movesReport(),
        });
        this.lastSample = sample;
        return send(res, req, 200, HTML_TYPE, page);
      }
      default:
        return send(res, req, 404, JSON_TYPE, json({ error: `no such page: ${path}` }));
    }
  }

  /** `GET /cluster/events`: resumes after Last-Event-ID (or `?after=`), else from the oldest kept event. */
  private streamEvents(req: IncomingMessage, res: ServerResponse, url: URL): void {
    const streams = this.eventStreams;
    if (streams === undefined)
      return send(res, req, 404, JSON_TYPE, json({ error: 'this node has no peers' }));
    const header = req.headers['last-event-id'];
    const query = url.searchParams.get('after');
    const [from, text] =
      typeof header === 'string' ? ['Last-Event-ID', header.trim()] : ['after', query ?? undefined];
    if (text !== undefined && !/^[0-9]{1,15}$/.test(text)) {
      const error = `${from} must be an event sequence number, got "${text}"`;
      return send(res, req, 400, JSON_TYPE, json({ error }));
    }
    const after = text === undefined ? undefined : Number(text);
    if (streams.full) {
      const error = `${streams.count} event streams are open, the most this node serves; try again later`;
      return send(res, req, 503, JSON_TYPE, json({ error }));
    }
    if (req.method === 'HEAD') return send(res, req, 200, 'text/event-stream; charset=utf-8', '');
    streams.open(res, after);
  }

  /** The node's health, or undefined after answering 503 when it cannot give one (closing). */
  private async health(res: ServerResponse, req: IncomingMessage): Promise<Health | undefined> {
    try {
      return await this.node.health();
    } catch (err) {
      send(res, req, 503, JSON_TYPE, json({ healthy: false, error: (err as Error).message }));
      return undefined;
    }
  }
}

const JSON_TYPE = 'application/json; charset=utf-8';
const HTML_TYPE = 'text/html; charset=utf-8';
/** Prometheus's text exposition format. */
const METRICS_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

const json = (value: unknown): string => `${JSON.stringify(value, null, 2)}\n`;

function send(res: ServerResponse, req: IncomingMessage, status: number, type: string, body: string): void {
  res.statusCode = status;
  res.setHeader('Content-Type', type);
  res.setHeader('Content-Length', Buffer.byteLength(body));
  res.setHeader('Cache-Control', 'no-store');
  res.end(req.method === 'HEAD' ? undefined : body);
}

function html(text: string | number): string {
  return String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** A table of escaped cells; `rowClass` names a row's class (none when it gives ''). */
function table(
  head: string[],
  rows: Array<Array<string | number>>,
  rowClass: (index: number) => string = () => '',
): string {
  const cells = (tag: string, row: Array<string | number>) =>
    row.map((c) => `<${tag}>${html(c)}</${tag}>`).join('');
  const tr = (index: number) => (rowClass(index) === '' ? '<tr>' : `<tr class="${rowClass(index)}">`);
  return `<table><tr>${cells('th', head)}</tr>${rows.map((r, i) => `${tr(i)}${cells('td', r)}</tr>`).join('')}</table>`;
}

/** Membership's view of each member; the section is highlighted while any is not ok. */
function membersSection(members: readonly MemberReport[]): string {
  const notOk = members.filter((m) => m.health !== 'ok');
  const rows = members.map((m) => [
    m.self ? `${m.nodeId} (this node)` : m.nodeId,
    m.state,
    [m.unreachable ? 'unreachable' : 'reachable', ...(m.suspect ? ['suspect'] : [])].join(', '),
    m.incarnation,
    m.health,
  ]);
  const summary =
    notOk.length === 0
      ? ''
      : `<p><strong>Not ok</strong>: ${html(notOk.map((m) => `${m.nodeId} (${m.health})`).join(', '))}</p>`;
  return (
    `<div id="members"${notOk.length === 0 ? '' : ' class="degraded"'}><h2>Members</h2>${summary}` +
    `${table(['member', 'state', 'reachability', 'incarnation', 'health'], rows, (i) => (members[i].health === 'ok' ? '' : 'not-ok'))}</div>`
  );
}

/** The coordinator, moves in flight and this node's fragments in transition; highlighted while any fragment is short. */
function placementSection(
  coordinator: NonNullable<Health['cluster']>['coordinator'],
  moves: MovesReport,
): string {
  const who =
    coordinator.id === null
      ? 'none (no Up, reachable member)'
      : `${coordinator.id}@${coordinator.incarnation}`;
  const lines = [
    `<p>Coordinator ${html(who)} · this node: ${html(coordinator.role)} · table epoch ${moves.tableEpoch} · ` +
      `${moves.inFlight.length} moves in flight · ${moves.underReplicated} fragments under-replicated · ` +
      '<a href="/cluster/moves">moves</a> · <a href="/cluster/placement">placement</a></p>',
  ];
  if (moves.inFlight.length > 0)
    lines.push(
      table(
        ['fragment', 'source', 'target', 'reason', 'since'],
        moves.inFlight.map((m) => [m.fragment, m.source ?? '-', m.target, m.reason, m.since ?? '']),
      ),
    );
  if (moves.here.length > 0)
    lines.push(
      table(
        ['fragment', 'here', 'step', 'since', 'waiting for'],
        moves.here.map((f) => [f.fragment, f.state, f.step ?? '', f.since, f.waiting]),
      ),
    );
  const short = moves.underReplicated > 0;
  return `<div id="placement"${short ? ' class="degraded"' : ''}><h2>Placement</h2>${lines.join('')}</div>`;
}

const STATE_LABELS: Record<HealthState, string> = {
  healthy: 'Healthy',
  degraded: '<strong>Degraded</strong>',
  unhealthy: '<strong>Not healthy</strong>',
};

function sampleOf(health: Health): StatusSample {
  const workers = workerSummaries(health);
  return {
    atMs: Date.now(),
    writes: new Map(workers.map((w) => [w.index, w.writes])),
    reads: new Map(workers.map((w) => [w.index, w.reads])),
    snapshotReads: health.snapshotReads,
  };
}

/** Bytes the data directory takes on disk (its files' allocated blocks); undefined for the memory store. */
async function dataDirBytes(settings: { store: string; dataDir: string }): Promise<number | undefined> {
  if (settings.store === 'memory') return undefined;
  let total = 0;
  const walk = async (dir: string): Promise<void> => {
    for (const entry of await readdir(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) await walk(path);
      else if (entry.isFile()) total += (await stat(path)).blocks * 512;
    }
  };
  try {
    await walk(settings.dataDir);
  } catch {
    // A file removed while walking (a LevelDB compaction): the figure is a moment's, not exact.
  }
  return total;
}

/** A counter's rate between two status samples, or '' for the first page. */
function rate(now: number, before: number | undefined, seconds: number | undefined): string {
  if (before === undefined || seconds === undefined || seconds <= 0) return '';
  return `${Math.max(0, Math.round((now - before) / seconds))}/s`;
}

/** Bytes in MiB for a person, one decimal. */
export const mib = (bytes: number): string => `${(bytes / 1048576).toFixed(1)} MiB`;

interface StatusFigures {
  previous: StatusSample | undefined;
  now: StatusSample;
  dataDirBytes: number | undefined;
  /** The cluster's moves (undefined without peers). */
  moves: MovesReport | undefined;
}

function statusPage(health: Health, resp: RespServer | undefined, figures: StatusFigures): string {
  const workers = workerSummaries(health);
  const sum = (pick: (w: WorkerSummary) => number) => workers.reduce((n, w) => n + pick(w), 0);
  const stats = resp?.statsSnapshot();
  const { previous, now } = figures;
  const seconds = previous === undefined ? undefined : (now.atMs - previous.atMs) / 1000;
  const processMemory = process.memoryUsage();
  const workerHeap = health.workers.reduce((n, w) => n + (w.heapUsedBytes ?? 0), 0);
  const keyCount = resp?.lastKeyCount;
  const state = healthState(health);
  const cluster = health.cluster;
  const sections = [
    `<h1>Tessera node ${html(health.nodeId)}</h1>`,
    // Degraded: said first, where an operator looks, with the way to the cluster's view.
    state !== 'degraded'
      ? ''
      : `<p id="degraded" class="degraded"><strong>Degraded</strong>: ${html(describePeersDown(peersDown(health)))}; ` +
        `cluster state ${html(cluster?.state ?? '')} · <a href="/cluster">cluster</a></p>`,
    `<p>${STATE_LABELS[state]} · store ${html(health.store)} · ` +
      `durability ${html(health.durability)} · ${health.fragmentCount} fragments · up ${Math.floor(process.uptime())} s</p>`,
    '<h2>Workers</h2>',
    table(
      ['worker', 'state', 'restarts', 'pending', 'fragments', 'writes', 'writes/s', 'reads', 'reads/s'],
      workers.map((w) => [
        w.index,
        w.state,
        w.restarts,
        w.pending,
        w.fragments,
        w.writes,
        rate(w.writes, previous?.writes.get(w.index), seconds),
        w.reads,
        rate(w.reads, previous?.reads.get(w.index), seconds),
      ]),
    ),
    // With lmdb, most GETs never reach a worker: the main thread answers them from its snapshot.
    `<p>Reads served on the main thread from its read snapshot: ${health.snapshotReads}` +
      `${previous === undefined ? '' : ` (${rate(health.snapshotReads, previous.snapshotReads, seconds)})`}` +
      `${previous === undefined ? ' · rates from the next refresh' : ` · rates over the last ${Math.round(seconds!)} s`}</p>`,
    '<h2>Memory, disk and keys</h2>',
    table(
      ['resident', 'main heap', 'workers heap', 'store memory', 'data directory on disk', 'keys'],
      [
        [
          mib(processMemory.rss),
          mib(processMemory.heapUsed),
          mib(workerHeap),
          health.memory.maxBytes > 0
            ? `${mib(health.memory.usedBytes)} of ${mib(health.memory.maxBytes)}`
            : mib(health.memory.usedBytes),
          figures.dataDirBytes === undefined ? 'none (memory store)' : mib(figures.dataDirBytes),
          keyCount === undefined
            ? 'not counted yet (DBSIZE or INFO keyspace counts)'
            : `${keyCount.keys} (counted ${Math.round((Date.now() - keyCount.atMs) / 1000)} s ago)`,
        ],
      ],
    ),
    '<h2>Fragments</h2>',
    table(
      ['queued (high / default / background)', 'shed', 'unflushed', 'commit failures in a row (most)'],
      [
        [
          `${sum((w) => w.queued[0])} / ${sum((w) => w.queued[1])} / ${sum((w) => w.queued[2])}`,
          sum((w) => w.shed[0] + w.shed[1] + w.shed[2]),
          sum((w) => w.unflushed),
          workers.reduce((n, w) => Math.max(n, w.commitFailures), 0),
        ],
      ],
    ),
  ];
  if (stats !== undefined) {
    sections.push(
      '<h2>Clients</h2>',
      table(
        ['connected', 'blocked', 'commands', 'key hits', 'key misses', 'error replies'],
        [
          [
            stats.connectedClients,
            stats.blockedClients,
            stats.commandsProcessed,
            stats.keyspaceHits,
            stats.keyspaceMisses,
            stats.errorReplies,
          ],
        ],
      ),
    );
  }
  if (cluster?.membership !== undefined) sections.push(membersSection(cluster.membership.members));
  if (cluster !== undefined && figures.moves !== undefined)
    sections.push(placementSection(cluster.coordinator, figures.moves));
  if (cluster !== undefined) {
    sections.push(
      '<h2>Peers</h2>',
      table(
        ['peer', 'connected', 'down since', 'replication backlog', 'lag ms', 'acknowledged writes'],
        peerSummaries(cluster).map((p) => [
          p.id,
          p.connected ? 'yes' : 'no',
          p.downSince ?? '',
          p.backlog,
          p.lagMs,
          p.acked,
        ]),
      ),
    );
  }
  sections.push(
    `<p><a href="/health">health</a> · <a href="/placement">placement</a>${cluster === undefined ? '' : ' · <a href="/cluster">cluster</a> · <a href="/cluster/members">members</a>'} · <a href="/metrics">metrics</a></p>`,
  );
  return (
    `<!doctype html><html><head><meta charset="utf-8"><meta http-equiv="refresh" content="${STATUS_PAGE_REFRESH_S}">` +
    `<title>Tessera ${html(health.nodeId)}</title><style>body{font-family:sans-serif;margin:2em}` +
    'table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .6em;text-align:right}' +
    '.degraded{background:#fff3cd;border:2px solid #e0a800;padding:.5em 1em}.not-ok td{font-weight:bold;color:#a00}</style>' +
    `</head><body>${sections.filter((x) => x !== '').join('\n')}</body></html>\n`
  );
}
