// A health report summed the ways its readers show it — per worker over the fragments it owns,
// per peer over the replication senders toward it — for INFO, the admin face's metrics and status
// page, and `tessera status`.

import { COMMIT_ATTEMPTS_MAX } from '../core/limits.js';
import type { ClusterHealth, Health } from './node.js';

export interface WorkerSummary {
  index: number;
  state: string;
  restarts: number;
  pending: number;
  fragments: number;
  writes: number;
  reads: number;
  expiredSwept: number;
  unflushed: number;
  /** By priority: high, default, background. */
  queued: [number, number, number];
  shed: [number, number, number];
  /** The most commits failed in a row on any of its fragments. */
  commitFailures: number;
}

export interface PeerSummary {
  id: string;
  /** Connected over the peer mesh (TCP). */
  connected: boolean;
  /** Since when requests cannot go to it: disconnected or unreachable to membership (ISO 8601); undefined while up. */
  downSince: string | undefined;
  senders: number;
  /** Writes buffered or in flight toward the peer, over all fragments. */
  backlog: number;
  /** Age of the oldest write the peer has not acknowledged, over all fragments. */
  lagMs: number;
  acked: number;
  resets: number;
  bytesSent: number;
  replicationBytesSent: number;
  antiEntropyBytesSent: number;
}

/** One pass over the fragments. */
export function workerSummaries(health: Health): WorkerSummary[] {
  const byIndex = new Map<number, WorkerSummary>();
  const summaries = health.workers.map((w) => {
    const summary: WorkerSummary = {
      index: w.index,
      state: w.state,
      restarts: w.restarts,
      pending: w.pending,
      fragments: 0,
      writes: 0,
      reads: 0,
      expiredSwept: 0,
      unflushed: 0,
      queued: [0, 0, 0],
      shed: [0, 0, 0],
      commitFailures: 0,
    };
    byIndex.set(w.index, summary);
    return summary;
  });
  for (const f of health.fragments) {
    const s = byIndex.get(f.worker);
    if (s === undefined) continue;
    s.fragments++;
    s.writes += f.writes;
    s.reads += f.reads;
    s.expiredSwept += f.expiredSwept;
    s.unflushed += f.unflushed;
    for (let p = 0; p < 3; p++) {
      s.queued[p] += f.queued[p];
      s.shed[p] += f.shed[p];
    }
    s.commitFailures = Math.max(s.commitFailures, f.commitFailures);
  }
  return summaries;
}

/** One pass over the senders. */
export function peerSummaries(cluster: ClusterHealth): PeerSummary[] {
  const byId = new Map<string, PeerSummary>();
  const summaries = cluster.peers.map((p) => {
    const summary: PeerSummary = {
      id: p.id,
      connected: p.connected,
      downSince: p.downSince,
      senders: 0,
      backlog: 0,
      lagMs: 0,
      acked: 0,
      resets: 0,
      bytesSent: p.bytesSent,
      replicationBytesSent: p.replicationBytesSent,
      antiEntropyBytesSent: p.antiEntropyBytesSent,
    };
    byId.set(p.id, summary);
    return summary;
  });
  for (const s of cluster.senders) {
    const peer = byId.get(s.peer);
    if (peer === undefined) continue;
    peer.senders++;
    peer.backlog += s.buffered + s.inFlight;
    peer.lagMs = Math.max(peer.lagMs, s.lagMs);
    peer.acked += s.opsAcked;
    peer.resets += s.resets;
  }
  return summaries;
}

/** Some fragment refuses writes: COMMIT_ATTEMPTS_MAX commits failed in a row, none succeeded since. */
export function refusesWrites(health: Health): boolean {
  return health.fragments.some((f) => f.commitFailures >= COMMIT_ATTEMPTS_MAX);
}

/** Every worker ready and no fragment refusing writes. */
export function isHealthy(health: Health): boolean {
  return health.workers.every((w) => w.state === 'ready') && !refusesWrites(health);
}

/** A peer requests cannot go to (disconnected, or unreachable to membership) and since when (ISO 8601). */
export interface PeerDown {
  id: string;
  downSince: string;
}

/** The peers this node cannot send requests to, in member order. */
export function peersDown(health: Health): PeerDown[] {
  const out: PeerDown[] = [];
  for (const p of health.cluster?.peers ?? []) {
    if (p.downSince !== undefined) out.push({ id: p.id, downSince: p.downSince });
  }
  return out;
}

/**
 * The node's state as /health, the status page and `tessera status` name it: 'unhealthy' when a
 * worker is not ready or a fragment refuses writes; 'degraded' when the node works but some peer is
 * down — disconnected, or connected but unreachable to membership (a hung process) — so its copies
 * catch up only once it is back, and without a majority CLUSTER INFO says fail; 'healthy' otherwise.
 */
export type HealthState = 'healthy' | 'degraded' | 'unhealthy';

export function healthState(health: Health): HealthState {
  if (!isHealthy(health)) return 'unhealthy';
  return peersDown(health).length > 0 ? 'degraded' : 'healthy';
}

/** One line naming the peers down and since when, for a person. */
export function describePeersDown(down: readonly PeerDown[]): string {
  return `peers down: ${down.map((p) => `${p.id} since ${p.downSince}`).join(', ')}`;
}
