import assert from 'node:assert/strict';
import { test } from 'node:test';
import { PubSubRegistry, type Subscriber, SubscriptionKind, Subscriptions } from '../../src/core/pubsub.js';

const { Channel, Pattern, Shard } = SubscriptionKind;

class Client implements Subscriber {
  readonly subscriptions = new Subscriptions();
  constructor(readonly name: string) {}
}

/** Who receives a message on `channel`: `name` or `name<pattern>` per visit, in visit order. */
function receivers(registry: PubSubRegistry<Client>, channel: string, shard = false): string[] {
  const seen: string[] = [];
  const count = registry.forEachReceiver(shard, Buffer.from(channel, 'latin1'), (c, pattern) =>
    seen.push(pattern === undefined ? c.name : `${c.name}<${pattern.toString('latin1')}>`),
  );
  assert.equal(count, seen.length, 'the count is the number of visits');
  return seen;
}

test('channels, patterns and shard channels count apart as Redis answers them', () => {
  const registry = new PubSubRegistry<Client>();
  const a = new Client('a');
  assert.equal(registry.subscribe(a, Channel, 'news'), true);
  assert.equal(registry.subscribe(a, Channel, 'news'), false, 'a second subscribe changes nothing');
  registry.subscribe(a, Pattern, 'n*');
  registry.subscribe(a, Shard, 'news');
  assert.equal(a.subscriptions.count, 2, 'channels and patterns');
  assert.equal(a.subscriptions.shardCount, 1);
  assert.equal(a.subscriptions.total, 3);
  assert.equal(registry.channelCount, 1);
  assert.equal(registry.patternCount, 1);
  assert.equal(registry.shardChannelCount, 1);
  assert.equal(registry.unsubscribe(a, Channel, 'other'), false);
  assert.equal(registry.unsubscribe(a, Channel, 'news'), true);
  assert.equal(registry.channelCount, 0, 'a channel without subscribers is not active');
  assert.equal(registry.shardChannelCount, 1, 'the shard channel of the same name is apart');
});

test('a message reaches channel subscribers, then each matching pattern’s, once per subscription', () => {
  const registry = new PubSubRegistry<Client>();
  const a = new Client('a');
  const b = new Client('b');
  const c = new Client('c');
  registry.subscribe(a, Channel, 'news.tech');
  registry.subscribe(b, Channel, 'news.tech');
  registry.subscribe(a, Pattern, 'news.*');
  registry.subscribe(c, Pattern, 'news.*');
  registry.subscribe(c, Pattern, '*.tech');
  registry.subscribe(b, Pattern, 'sport.*');
  assert.deepEqual(receivers(registry, 'news.tech'), ['a', 'b', 'a<news.*>', 'c<news.*>', 'c<*.tech>']);
  assert.deepEqual(receivers(registry, 'sport.tech'), ['c<*.tech>', 'b<sport.*>']);
  assert.deepEqual(receivers(registry, 'weather'), []);
  assert.equal(registry.patternCount, 3, 'distinct patterns');
});

test('shard channels reach their own subscribers only; patterns never match them', () => {
  const registry = new PubSubRegistry<Client>();
  const a = new Client('a');
  const b = new Client('b');
  registry.subscribe(a, Shard, 'orders');
  registry.subscribe(b, Channel, 'orders');
  registry.subscribe(b, Pattern, '*');
  assert.deepEqual(receivers(registry, 'orders', true), ['a']);
  assert.deepEqual(receivers(registry, 'orders'), ['b', 'b<*>']);
  assert.equal(registry.subscriberCount(Shard, 'orders'), 1);
  assert.equal(registry.subscriberCount(Channel, 'orders'), 1, 'patterns are not counted');
});

test('names are bytes: binary and empty names are kept exactly, and match patterns as bytes', () => {
  const registry = new PubSubRegistry<Client>();
  const a = new Client('a');
  const binary = Buffer.from([0x00, 0xff, 0x80, 0x0a]).toString('latin1');
  registry.subscribe(a, Channel, binary);
  registry.subscribe(a, Channel, '');
  registry.subscribe(a, Pattern, Buffer.from([0x00, 0x2a]).toString('latin1'));
  assert.deepEqual(registry.activeChannels(Channel, undefined).sort(), ['', binary].sort());
  assert.deepEqual(receivers(registry, binary), ['a', `a<${Buffer.from([0x00, 0x2a]).toString('latin1')}>`]);
  assert.deepEqual(receivers(registry, ''), ['a']);
});

test('active channels are listed, filtered by a glob when one is given', () => {
  const registry = new PubSubRegistry<Client>();
  const a = new Client('a');
  const b = new Client('b');
  for (const name of ['news.tech', 'news.art', 'sport']) registry.subscribe(a, Channel, name);
  registry.subscribe(b, Channel, 'news.tech');
  registry.subscribe(b, Shard, 'news.shard');
  assert.deepEqual(registry.activeChannels(Channel, undefined), ['news.tech', 'news.art', 'sport']);
  assert.deepEqual(registry.activeChannels(Channel, Buffer.from('news.*')), ['news.tech', 'news.art']);
  assert.deepEqual(registry.activeChannels(Shard, Buffer.from('news.*')), ['news.shard']);
  assert.equal(registry.subscriberCount(Channel, 'news.tech'), 2);
});

test('unsubscribeAll leaves no trace of the subscriber, and others keep theirs', () => {
  const registry = new PubSubRegistry<Client>();
  const a = new Client('a');
  const b = new Client('b');
  for (const kind of [Channel, Pattern, Shard] as const) {
    registry.subscribe(a, kind, 'x');
    registry.subscribe(a, kind, 'y');
    registry.subscribe(b, kind, 'y');
  }
  registry.unsubscribeAll(a);
  assert.equal(a.subscriptions.total, 0);
  assert.equal(registry.channelCount, 1);
  assert.equal(registry.patternCount, 1);
  assert.equal(registry.shardChannelCount, 1);
  assert.deepEqual(receivers(registry, 'y'), ['b', 'b<y>']);
  assert.deepEqual(receivers(registry, 'x'), []);
  registry.unsubscribeAll(b);
  assert.equal(registry.channelCount + registry.patternCount + registry.shardChannelCount, 0);
});

test('a subscriber’s names keep subscription order (an UNSUBSCRIBE without names walks it)', () => {
  const registry = new PubSubRegistry<Client>();
  const a = new Client('a');
  for (const name of ['c', 'a', 'b']) registry.subscribe(a, Channel, name);
  registry.unsubscribe(a, Channel, 'a');
  registry.subscribe(a, Channel, 'a');
  assert.deepEqual([...a.subscriptions.names[Channel]], ['c', 'b', 'a']);
});
