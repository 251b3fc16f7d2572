// What a node does with an operation another node forwarded to it (DESIGN.md "Placement": any node
// accepts any request and forwards it to the first serving replica). The nodes' tables and serving
// can disagree for a moment — one has a move's end, the other not yet; a node the table puts first
// is still opening its copy — and the node that is behind is the one that must wait: the
// operation would otherwise bounce between two nodes until its hops run out. So a relay carries the
// table generation its sender routed it by, and:
// - a node routing by an older generation than its sender's waits for that generation;
// - a node the table puts first that does not serve yet waits to serve;
// - a node that would send it back to a sender with an older generation sends it back (the sender
//   then waits for this node's generation); at the same generation the two differ on who serves
//   or is up, and it waits here for its own routing to change.
// Every wait is bounded (the caller's deadline); past it the node goes on with what it has.

import { MAX_FORWARD_HOPS } from './limits.js';

/** Where this node's routing would send the operation. */
export type ForwardNext = 'self' | 'sender' | 'other' | 'none';

export interface ForwardView {
  /** This node serves the fragment now. */
  serving: boolean;
  /** The table puts this node first among the replicas that are it or up (serving or not). */
  listedFirst: boolean;
  /** The fragment's table generation this node routes by. */
  generation: number;
  /** The generation the relaying sender routed it by; 0 when unknown (a first hop). */
  senderGeneration: number;
  next: ForwardNext;
  /** Nodes it has passed through. */
  hops: number;
}

export type ForwardStep = 'serve' | 'wait' | 'relay' | 'refuse';

/** The step for the operation; `mayWait` says whether its deadline still allows a wait. */
export function forwardStep(view: ForwardView, mayWait: () => boolean): ForwardStep {
  const behind = view.generation < view.senderGeneration || (!view.serving && view.listedFirst);
  if (behind && mayWait()) return 'wait';
  if (view.serving && view.next === 'self') return 'serve';
  const stuck =
    view.next === 'none' ||
    view.next === 'self' ||
    (view.next === 'sender' && view.generation <= view.senderGeneration);
  const hopsLeft = view.hops + 1 < MAX_FORWARD_HOPS;
  if (stuck && hopsLeft && mayWait()) return 'wait';
  return stuck || !hopsLeft ? 'refuse' : 'relay';
}
