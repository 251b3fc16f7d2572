// forwardStep (src/core/forwarding.ts): what a node does with a forwarded operation while the nodes'
// tables or serving disagree — the node that is behind waits, the one ahead never does.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { type ForwardNext, type ForwardView, forwardStep } from '../../src/core/forwarding.js';
import { MAX_FORWARD_HOPS } from '../../src/core/limits.js';

const view = (over: Partial<ForwardView>): ForwardView => ({
  serving: false,
  listedFirst: false,
  generation: 3,
  senderGeneration: 0,
  next: 'other',
  hops: 0,
  ...over,
});
const canWait = () => true;
const late = () => false;

test('a node that serves the fragment and routes it to itself serves it', () => {
  assert.equal(forwardStep(view({ serving: true, listedFirst: true, next: 'self' }), canWait), 'serve');
});

test('a node routing by an older generation than its sender waits for it, serving or not, then goes on', () => {
  const behind = view({ serving: true, listedFirst: true, next: 'self', generation: 2, senderGeneration: 3 });
  assert.equal(forwardStep(behind, canWait), 'wait');
  assert.equal(forwardStep(behind, late), 'serve');
  const relaying = view({ generation: 2, senderGeneration: 3, next: 'other' });
  assert.equal(forwardStep(relaying, canWait), 'wait');
  assert.equal(forwardStep(relaying, late), 'relay');
});

test('a node the table puts first that does not serve yet waits to serve, then passes it on', () => {
  const opening = view({ serving: false, listedFirst: true, next: 'other' });
  assert.equal(forwardStep(opening, canWait), 'wait');
  assert.equal(forwardStep(opening, late), 'relay');
});

test('a sender with an older generation is sent the operation back at once', () => {
  for (const senderGeneration of [0, 1, 2]) {
    assert.equal(forwardStep(view({ next: 'sender', senderGeneration, hops: 1 }), canWait), 'relay');
  }
});

test('at the same generation, an operation that would go back waits here, then is refused', () => {
  const back = view({ next: 'sender', senderGeneration: 3, hops: 1 });
  assert.equal(forwardStep(back, canWait), 'wait');
  assert.equal(forwardStep(back, late), 'refuse');
});

test('no reachable replica: it waits, then is refused', () => {
  assert.equal(forwardStep(view({ next: 'none' }), canWait), 'wait');
  assert.equal(forwardStep(view({ next: 'none' }), late), 'refuse');
});

test('the last hop is never passed on, and never waits for a way on', () => {
  const last = MAX_FORWARD_HOPS - 1;
  assert.equal(forwardStep(view({ next: 'other', hops: last }), canWait), 'refuse');
  assert.equal(forwardStep(view({ next: 'none', hops: last }), canWait), 'refuse');
  assert.equal(forwardStep(view({ next: 'other', hops: last - 1 }), canWait), 'relay');
  // Serving ends the chain whatever its length.
  assert.equal(forwardStep(view({ serving: true, next: 'self', hops: last }), canWait), 'serve');
});

/**
 * Three nodes: the one a client wrote through (w) has the move's end (generation 3: d serves);
 * d has not yet (generation 2: c serves, d is the move's target and does not serve), and c has
 * it. The operation goes w → d → c, and c, ahead of d, sends it back; d waits for generation 3,
 * then serves. Under the rule that the node the operation would go back to waits — c here — c
 * waits for a change it already has, and the operation fails.
 */
test('a move end that reached the first and third node but not the second: served within the hop limit', () => {
  interface Node {
    generation: number;
    serving: boolean;
    /** Who it routes to at each generation. */
    routes: (generation: number) => string;
  }
  const nodes: Record<string, Node> = {
    d: { generation: 2, serving: false, routes: (g) => (g >= 3 ? 'd' : 'c') },
    c: { generation: 3, serving: false, routes: (g) => (g >= 3 ? 'd' : 'c') },
  };
  let at = 'd';
  let sender = 'w';
  let senderGeneration = 0; // the first hop carries none
  let hops = 0;
  const path: string[] = [];
  let waits = 0;
  for (;;) {
    const node = nodes[at]!;
    const route = node.routes(node.generation);
    const next: ForwardNext = route === at ? 'self' : route === sender ? 'sender' : 'other';
    const step = forwardStep(
      {
        serving: node.serving,
        listedFirst: route === at,
        generation: node.generation,
        senderGeneration,
        next,
        hops,
      },
      canWait,
    );
    path.push(`${at}:${step}`);
    if (step === 'serve' || step === 'refuse') break;
    if (step === 'wait') {
      assert.equal(at, 'd', 'only the node behind waits');
      waits++;
      // What it waited for arrives: the table, then the copy it opens.
      if (node.generation < 3) node.generation = 3;
      else node.serving = true;
      continue;
    }
    sender = at;
    senderGeneration = node.generation;
    at = route;
    hops++;
  }
  assert.deepEqual(path, ['d:relay', 'c:relay', 'd:wait', 'd:wait', 'd:serve']);
  assert.equal(waits, 2);
  assert.ok(hops < MAX_FORWARD_HOPS);
});
