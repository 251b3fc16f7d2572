// `GET /cluster/metrics`: the latest metrics sample of every member, merged, as datum's cluster
// listing — this node's own, and each other member's asked over the peer mesh in parallel within
// CLUSTER_METRICS_DEADLINE_MS. A member that is not reachable (disconnected, or unreachable to
// membership) is reported in `errors` at once, one that does not answer in time as
// `DeadlineExceeded`; either makes the listing `partial`.

import { CLUSTER_METRICS_DEADLINE_MS } from '../../core/limits.js';
import type { AdminAnswer, AdminStatus } from '../../threads/admin-wire.js';
import type { Tessera } from '../node.js';
import type { RespServer } from '../resp/server.js';
import { type MetricsSample, metricsSample, processFigures } from './metrics.js';

export interface ClusterMetrics {
  /** Each member's sample, by member id. */
  nodes: Record<string, MetricsSample>;
  /** Some member's sample is missing: see `errors`. */
  partial: boolean;
  /** Why a member's sample is missing, by member id. */
  errors: Record<string, { status: AdminStatus; message: string }>;
}

/** This node's sample, as a peer's request for it is answered. */
export async function localSample(node: Tessera, resp: RespServer | undefined): Promise<AdminAnswer> {
  try {
    const health = await node.health();
    const sample = metricsSample({ health, resp: resp?.statsSnapshot(), process: processFigures() });
    return { status: 'Ok', message: `the metrics of node ${node.nodeId}`, result: { ...sample } };
  } catch (err) {
    return {
      status: 'Failed',
      message: `node ${node.nodeId} has no sample: ${(err as Error).message}`,
      result: {},
    };
  }
}

/** Every member's sample (the caller checked that the node has peers). */
export async function clusterMetrics(node: Tessera, resp: RespServer | undefined): Promise<ClusterMetrics> {
  const cluster = node.cluster!;
  const { members, selfIndex } = cluster.config;
  const answers = new Map<string, AdminAnswer>();
  const asked: Array<Promise<void>> = [];
  for (let m = 0; m < members.length; m++) {
    if (!cluster.isMember(m)) continue;
    const id = members[m];
    if (m !== selfIndex && !cluster.isUp(m)) {
      const why = cluster.mesh.isUp(m) ? 'unreachable to membership' : 'not connected';
      answers.set(id, { status: 'Failed', message: `member ${id} is ${why}`, result: {} });
      continue;
    }
    const answer =
      m === selfIndex
        ? localSample(node, resp)
        : cluster.admin.ask(id, { kind: 'metrics' }, CLUSTER_METRICS_DEADLINE_MS, `member ${id}`);
    asked.push(answer.then((a) => void answers.set(id, a)));
  }
  await Promise.all(asked);
  const listing: ClusterMetrics = { nodes: {}, partial: false, errors: {} };
  for (const id of [...answers.keys()].sort()) {
    const answer = answers.get(id)!;
    if (answer.status === 'Ok') listing.nodes[id] = answer.result as unknown as MetricsSample;
    else listing.errors[id] = { status: answer.status, message: answer.message };
  }
  listing.partial = Object.keys(listing.errors).length > 0;
  return listing;
}
