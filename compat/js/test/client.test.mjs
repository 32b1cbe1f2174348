// Tests of the Client against a fake WebSocket and a fake clock.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { Client, CloseError, RPCError, Code, SUBPROTOCOL, decodePacket, encodePacket } from '../hotpath.js';

// Test doubles: a WebSocket the test drives by hand and a clock whose time
// moves only when the test says so.

/** fakeSockets returns a WebSocket class whose instances are recorded in
 * `sockets`, newest last. */
function fakeSockets() {
  const sockets = [];
  class FakeWebSocket {
    constructor(url, protocol) {
      this.url = url;
      this.protocol = protocol;
      this.binaryType = 'blob';
      this.readyState = 0;
      this.sent = []; // decoded packets, in order
      this.frames = []; // raw frames, in order
      this.closedWith = null;
      sockets.push(this);
    }

    send(data) {
      if (this.readyState !== 1) throw new Error(`send in readyState ${this.readyState}`);
      const b = new Uint8Array(data).slice();
      this.frames.push(b);
      this.sent.push(decodePacket(b));
    }

    close(code, reason) {
      if (code !== undefined && code !== 1000 && (code < 3000 || code > 4999)) {
        throw new Error(`InvalidAccessError: a browser may not send close code ${code}`);
      }
      this.closedWith = { code, reason };
      this.readyState = 2;
    }

    // The server side, driven by the test. open answers the client's
    // capabilities with the server's, as a server does, unless told not
    // to: nothing but the client's capabilities leaves before them.
    open({ capabilities = true } = {}) {
      this.readyState = 1;
      this.onopen?.({});
      if (capabilities) this.receive({ kind: 'capabilities', pairs: [['codec', 'json'], ['maxMessage', '1048576'], ['maxBatch', '1024']] });
    }
    receive(packet) {
      const b = packet instanceof Uint8Array ? packet : encodePacket(packet);
      this.onmessage?.({ data: b.slice().buffer });
    }
    receiveText(s) { this.onmessage?.({ data: s }); }
    drop(code = 1006, reason = '') { this.readyState = 3; this.onclose?.({ code, reason, wasClean: code !== 1006 }); }
    /** A failed handshake as Node 20's WebSocket reports it: an error
     * event, no close event, readyState left at CONNECTING. */
    failWithoutClose() { this.onerror?.({ type: 'error' }); }
    /** Packets sent after the capabilities that open every connection. */
    get packets() { return this.sent.filter((p) => p.kind !== 'capabilities'); }
  }
  return { FakeWebSocket, sockets, get last() { return sockets[sockets.length - 1]; } };
}

/** fakeClock is a timers object for ClientOptions.timers. */
function fakeClock() {
  let now = 0;
  let seq = 0;
  const timers = new Map();
  return {
    setTimeout(fn, ms) {
      // As Node and browsers do: a delay past 2^31-1 ms, or under 1, is 1.
      if (!(ms >= 1 && ms <= 2 ** 31 - 1)) ms = 1;
      timers.set(++seq, { at: now + ms, fn });
      return seq;
    },
    clearTimeout(id) { timers.delete(id); },
    now: () => now,
    /** Moves time forward by ms, firing due timers in order. */
    advance(ms) {
      const end = now + ms;
      for (;;) {
        let next = null;
        for (const [id, t] of timers) if (t.at <= end && (next === null || t.at < next[1].at)) next = [id, t];
        if (next === null) break;
        timers.delete(next[0]);
        now = next[1].at;
        next[1].fn();
      }
      now = end;
    },
    /** Milliseconds until the next timer, or Infinity. */
    nextIn() {
      let at = Infinity;
      for (const t of timers.values()) at = Math.min(at, t.at);
      return at - now;
    },
  };
}

/** Lets every queued microtask (the client's flush) and promise job run. */
const settle = () => new Promise((resolve) => setImmediate(resolve));

/** What promise settled with by the time settle() returns: its error, its
 * value, or 'pending'. */
async function outcome(promise) {
  let got = 'pending';
  promise.then((v) => { got = v; }, (err) => { got = err; });
  await settle();
  return got;
}

const json = (v) => new TextEncoder().encode(JSON.stringify(v));
const text = (b) => new TextDecoder().decode(b);

/** newClient returns a client on fake sockets and a fake clock, its first
 * socket not yet open. */
function newClient(options = {}) {
  const net = fakeSockets();
  const clock = fakeClock();
  const client = new Client('ws://test.invalid/ws', { WebSocket: net.FakeWebSocket, timers: clock, random: () => 1, ...options });
  return { client, net, clock };
}

function connected(options) {
  const env = newClient(options);
  env.net.last.open();
  return env;
}

/** Records every state change of client. */
function states(client) {
  const seen = [];
  client.onState((s) => seen.push(s));
  return seen;
}

test('connects with the hotpath.v1 subprotocol, binary frames, capabilities first', () => {
  const { client, net } = connected();
  const ws = net.last;
  assert.equal(ws.protocol, SUBPROTOCOL);
  assert.equal(ws.binaryType, 'arraybuffer');
  assert.deepEqual(ws.sent, [{ kind: 'capabilities', pairs: [['codec', 'json'], ['maxMessage', '16777216']] }]);
  assert.equal(client.state, 'open');
  client.close();
});

test('http URLs and paths become WebSocket URLs', () => {
  const net = fakeSockets();
  const c1 = new Client('http://example.test/ws', { WebSocket: net.FakeWebSocket });
  assert.equal(net.last.url, 'ws://example.test/ws');
  const c2 = new Client('https://example.test/ws', { WebSocket: net.FakeWebSocket });
  assert.equal(net.last.url, 'wss://example.test/ws');
  c1.close();
  c2.close();
});

test('one call alone is sent as a Call packet, with its timeout', async () => {
  const { client, net } = connected({ callTimeout: 5000 });
  const ws = net.last;
  const answer = client.call('echo/say', { text: 'hi' });
  assert.equal(ws.packets.length, 0, 'nothing sent before the task ends');
  await settle();
  assert.equal(ws.packets.length, 1);
  const [p] = ws.packets;
  assert.equal(p.kind, 'call');
  assert.equal(p.method, 'echo/say');
  assert.equal(p.timeout, 5000);
  assert.deepEqual(JSON.parse(text(p.payload)), { text: 'hi' });
  ws.receive({ kind: 'result', id: p.id, payload: json({ text: 'hi' }) });
  assert.deepEqual(await answer, { text: 'hi' });
  client.close();
});

test('calls issued in one task leave as one Batch in one microtask (§4.7)', async () => {
  const { client, net } = connected();
  const ws = net.last;
  const answers = [client.call('a/b', 1), client.call('a/b', 2), client.call('a/c')];
  await Promise.resolve(); // one microtask: the flush has run
  assert.equal(ws.frames.length, 2, 'capabilities, then one frame');
  const batch = ws.sent[1];
  assert.equal(batch.kind, 'batch');
  const items = batch.items.map(decodePacket);
  assert.deepEqual(items.map((p) => [p.kind, p.method, text(p.payload)]), [['call', 'a/b', '1'], ['call', 'a/b', '2'], ['call', 'a/c', '']]);
  assert.equal(new Set(items.map((p) => p.id)).size, 3, 'distinct ids');
  // Answers in any order, in one batch, matched by id.
  ws.receive({
    kind: 'batch',
    items: [
      { kind: 'result', id: items[2].id, payload: '' },
      { kind: 'error', id: items[0].id, code: 1001, message: 'quota', data: json({ left: 0 }) },
      { kind: 'result', id: items[1].id, payload: '"two"' },
    ],
  });
  const [first, second, third] = await Promise.allSettled(answers);
  assert.ok(first.reason instanceof RPCError);
  assert.equal(first.reason.code, 1001);
  assert.equal(first.reason.message, 'quota');
  assert.deepEqual(first.reason.data, { left: 0 });
  assert.equal(second.value, 'two');
  assert.equal(third.value, undefined);
  // A call in a later task goes alone.
  client.call('a/d').catch(() => {});
  await settle();
  assert.equal(ws.sent.at(-1).kind, 'call');
  client.close();
});

test('batches respect the server maxBatch from capabilities', async () => {
  const { client, net } = newClient();
  const ws = net.last;
  ws.open({ capabilities: false });
  ws.receive({ kind: 'capabilities', pairs: [['codec', 'json'], ['maxBatch', '2'], ['maxMessage', '1048576'], ['server', 'hotpath/test']] });
  assert.equal(client.capabilities.server, 'hotpath/test');
  for (let i = 0; i < 5; i++) client.call('a/b', i).catch(() => {});
  await settle();
  assert.deepEqual(ws.packets.map((p) => (p.kind === 'batch' ? p.items.length : 1)), [2, 2, 1]);
  client.close();
});

test('a batch\'s items stay within 64 KiB and a larger packet leaves alone (PROTOCOL.md §4.7)', async () => {
  const { client, net } = newClient();
  const ws = net.last;
  ws.open({ capabilities: false });
  ws.receive({ kind: 'capabilities', pairs: [['codec', 'json'], ['maxMessage', String(4 << 20)]] });
  const calls = [];
  for (let i = 0; i < 10; i++) calls.push(client.call('a/b', new Uint8Array(20000), { raw: true }));
  calls.push(client.call('a/b', new Uint8Array(100000), { raw: true }));
  await settle();
  const batches = ws.packets.filter((p) => p.kind === 'batch');
  assert.ok(batches.length >= 3, `${batches.length} batches for 200 KB of calls`);
  for (const b of batches) {
    const size = b.items.reduce((n, item) => n + item.byteLength, 0);
    assert.ok(size <= 64 << 10, `a batch of ${size} bytes of items`);
  }
  assert.equal(ws.packets.flatMap((p) => (p.kind === 'batch' ? p.items.map(decodePacket) : [p])).length, 11);
  assert.ok(ws.packets.some((p) => p.kind === 'call' && p.payload.byteLength === 100000), 'the 100 KB call alone');
  client.close();
  await Promise.allSettled(calls);
});

test('nothing but the capabilities leaves before the server\'s; then its limits hold', async () => {
  const { client, net } = newClient();
  const ws = net.last;
  ws.open({ capabilities: false });
  const small = client.call('a/b', 'x');
  const big = client.call('a/b', 'y'.repeat(2000)); // within the default 1 MiB, over this server's limit
  for (let i = 0; i < 4; i++) client.call('a/c', i).catch(() => {});
  await settle();
  assert.deepEqual(ws.sent.map((p) => p.kind), ['capabilities'], 'packets left before the server\'s limits were known');
  ws.receive({ kind: 'capabilities', pairs: [['codec', 'json'], ['maxBatch', '2'], ['maxMessage', '1024']] });
  await assert.rejects(big, (err) => err instanceof RangeError && /over the server's limit of 1024/.test(err.message));
  // The rest leave within the limits: batches of at most 2, no packet over 1024 bytes.
  assert.deepEqual(ws.packets.map((p) => (p.kind === 'batch' ? p.items.length : 1)), [2, 2, 1]);
  assert.ok(ws.frames.every((f) => f.byteLength <= 1024));
  const first = ws.packets[0].items.map(decodePacket)[0];
  ws.receive({ kind: 'result', id: first.id, payload: json('ok') });
  assert.equal(await small, 'ok');
  client.close();
});

test('a raw call sends and returns bytes untouched (§5)', async () => {
  const { client, net } = connected();
  const ws = net.last;
  const answer = client.call('echo/raw', new Uint8Array([0, 255]), { raw: true });
  await settle();
  const [p] = ws.packets;
  assert.deepEqual([...p.payload], [0, 255]);
  ws.receive({ kind: 'result', id: p.id, payload: new Uint8Array([7]) });
  assert.deepEqual([...(await answer)], [7]);
  client.close();
});

test('an ArrayBuffer or another view of one is sent as its bytes, not as JSON {}', async () => {
  const { client, net } = connected();
  const ws = net.last;
  const bytes = new Uint8Array([9, 0, 1, 2, 3]);
  for (const params of [bytes.buffer, new DataView(bytes.buffer, 1, 3), new Uint16Array(bytes.buffer.slice(0, 4))]) {
    client.notify('echo/raw', params);
    await settle();
    const view = ArrayBuffer.isView(params) ? params : new DataView(params);
    assert.deepEqual([...ws.packets.at(-1).payload], [...new Uint8Array(view.buffer, view.byteOffset, view.byteLength)]);
  }
  client.close();
});

test('calls made before the connection opens wait and then leave together', async () => {
  const { client, net } = newClient();
  const ws = net.last;
  const a = client.call('time/now');
  const b = client.call('echo/say', { text: 'x' });
  await settle();
  assert.equal(ws.frames.length, 0);
  ws.open();
  assert.equal(ws.sent[0].kind, 'capabilities');
  assert.equal(ws.sent[1].kind, 'batch');
  const ids = ws.sent[1].items.map((i) => decodePacket(i).id);
  ws.receive({ kind: 'result', id: ids[0], payload: json({ now: 'T' }) });
  ws.receive({ kind: 'result', id: ids[1], payload: json({ text: 'x' }) });
  assert.deepEqual(await a, { now: 'T' });
  assert.deepEqual(await b, { text: 'x' });
  client.close();
});

test('a call times out with RPCError code 5; a late answer is ignored', async () => {
  const { client, net, clock } = connected();
  const ws = net.last;
  const answer = client.call('slow/op', null, { timeout: 100 });
  await settle();
  const [p] = ws.packets;
  assert.equal(p.timeout, 100);
  clock.advance(99);
  let done = false;
  answer.then(() => { done = true; }, () => { done = true; });
  await settle();
  assert.equal(done, false, 'still pending at 99 ms');
  clock.advance(1);
  await assert.rejects(answer, (err) => err instanceof RPCError && err.code === Code.Timeout);
  ws.receive({ kind: 'result', id: p.id, payload: '1' }); // ignored, no throw
  client.close();
});

test('a call that times out while queued is never sent; the server gets what is left of a deadline', async () => {
  const { client, net, clock } = newClient({ connectTimeout: 60_000 });
  const ws = net.last;
  const gone = client.call('a/b', null, { timeout: 100 });
  const kept = client.call('a/c', null, { timeout: 1000 });
  clock.advance(400);
  await assert.rejects(gone, (err) => err.code === Code.Timeout);
  ws.open();
  assert.equal(ws.packets.length, 1);
  assert.equal(ws.packets[0].method, 'a/c');
  assert.equal(ws.packets[0].timeout, 600);
  ws.receive({ kind: 'result', id: ws.packets[0].id, payload: '' });
  await kept;
  client.close();
});

// Call, join and leave ids are 32-bit fields (PROTOCOL.md §2), 0 is a
// notification (§4.1), and an id may not be reused while its call is in
// flight. Taking the allocator across its wrap takes 2^32 calls, so this
// test imports a copy of hotpath.js whose Client has one more method,
// setLastId, which sets the last id given; the allocator is the module's own.
async function clientWithIdHook() {
  const src = await readFile(new URL('../hotpath.js', import.meta.url), 'utf8');
  const anchor = '\n  #nextId = 0;\n';
  assert.ok(src.includes(anchor), 'hotpath.js no longer declares #nextId as this test expects');
  const patched = src.replace(anchor, `${anchor}  setLastId(id) { this.#nextId = id; }\n`);
  return import(`data:text/javascript;base64,${Buffer.from(patched).toString('base64')}`);
}

test('call ids wrap from 2^32-1 to 1, never 0, and skip the ids still in flight', async () => {
  const hp = await clientWithIdHook();
  const net = fakeSockets();
  const client = new hp.Client('ws://test.invalid/ws', { WebSocket: net.FakeWebSocket, timers: fakeClock(), random: () => 1, callTimeout: 0 });
  const ws = net.last;
  ws.open();
  const MAX = 2 ** 32 - 1;
  const pending = new Map(); // id → promise of the call sent with it
  const sent = []; // ids on the wire, in order
  const issue = async (label) => {
    const promise = label === 'join' ? client.join('r') : client.call('a/b', label);
    await settle();
    const p = ws.packets.flatMap((q) => (q.kind === 'batch' ? q.items.map(decodePacket) : [q])).at(-1);
    assert.ok(Number.isInteger(p.id) && p.id >= 1 && p.id <= MAX, `id ${p.id} out of 1..2^32-1`);
    assert.ok(!pending.has(p.id), `id ${p.id} given again while its call is in flight`);
    pending.set(p.id, { promise, label });
    sent.push(p.id);
    return p.id;
  };
  // answer answers id with its label, and checks that its own call got it.
  const answer = async (id) => {
    const { promise, label } = pending.get(id);
    pending.delete(id);
    ws.receive({ kind: 'result', id, payload: json(label === 'join' ? { room: 'r', members: 1 } : label) });
    assert.deepEqual(await outcome(promise), label === 'join' ? { room: 'r', members: 1 } : label, `the answer to id ${id}`);
  };

  await issue('a1'); await issue('a2'); await issue('a3'); await issue('join'); // 1..4
  await answer(2); // in flight: 1, 3, 4
  client.setLastId(MAX - 2);
  await issue('b1'); await issue('b2'); // 2^32-2, 2^32-1
  await answer(MAX - 1); // in flight: 1, 3, 4, 2^32-1
  await issue('c1'); // 0 and 1 skipped: 2
  await issue('c2'); // 3 and 4 skipped: 5
  client.setLastId(MAX - 1); // 2^32-1, 0 and 1..5 are all taken
  await issue('d1');
  assert.deepEqual(sent, [1, 2, 3, 4, MAX - 1, MAX, 2, 5, 6]);
  for (const id of [...pending.keys()]) await answer(id);
  client.close();
});

test('calls in flight fail with a CloseError carrying the close code', async () => {
  const { client, net } = connected();
  const answer = client.call('a/b');
  await settle();
  net.last.drop(1001, 'HP_ERR_SHUTDOWN');
  await assert.rejects(answer, (err) => err instanceof CloseError && err.code === 1001 && err.reason === 'HP_ERR_SHUTDOWN');
  client.close();
});

test('reconnect backoff: capped exponential, jitter from the upper half of the step', async () => {
  for (const [jitter, want] of [
    [1, [250, 500, 1000, 2000, 4000, 8000, 10000, 10000]],
    [0, [125, 250, 500, 1000, 2000, 4000, 5000, 5000]],
  ]) {
    const { client, net, clock } = newClient({ random: () => jitter });
    const seen = states(client);
    const delays = [];
    for (let i = 0; i < want.length; i++) {
      net.last.drop(); // the handshake fails
      const s = seen.at(-1);
      assert.equal(s.state, 'reconnecting');
      assert.equal(s.attempt, i + 1);
      assert.ok(s.error instanceof CloseError && s.error.code === 1006);
      delays.push(s.delay);
      const sockets = net.sockets.length;
      clock.advance(s.delay - 1);
      assert.equal(net.sockets.length, sockets, 'no attempt before the delay');
      clock.advance(1);
      assert.equal(net.sockets.length, sockets + 1, 'an attempt at the delay');
    }
    assert.deepEqual(delays, want);
    client.close();
    assert.equal(client.state, 'closed');
  }
});

test('a connection that stayed open resets the backoff; a short one does not', async () => {
  const { client, net, clock } = newClient();
  const seen = states(client);
  net.last.drop();
  clock.advance(250);
  net.last.drop();
  assert.equal(seen.at(-1).delay, 500);
  clock.advance(500);
  net.last.open();
  clock.advance(100);
  net.last.drop(1006); // open for 100 ms: still failing
  assert.equal(seen.at(-1).delay, 1000);
  clock.advance(1000);
  net.last.open();
  clock.advance(5000);
  net.last.drop(1001); // open for 5 s: healthy again
  assert.equal(seen.at(-1).delay, 250);
  assert.equal(seen.at(-1).attempt, 1);
  assert.deepEqual(seen.map((s) => s.state), ['reconnecting', 'reconnecting', 'open', 'reconnecting', 'open', 'reconnecting']);
  client.close();
});

test('a handshake that fails with an error event and no close event is retried', () => {
  const { client, net, clock } = newClient();
  const seen = states(client);
  net.last.failWithoutClose();
  assert.equal(seen.at(-1).state, 'reconnecting');
  assert.equal(seen.at(-1).error.code, 1006);
  assert.equal(seen.at(-1).delay, 250, 'not the connect timeout');
  clock.advance(250);
  assert.equal(net.sockets.length, 2);
  // A browser: an error event, then a close event that adds nothing.
  net.last.onerror?.({ type: 'error' });
  net.last.drop();
  assert.equal(seen.filter((s) => s.state === 'reconnecting').length, 2);
  client.close();
});

test('a connect timeout says so where closing a connecting socket fires error at once (Node 20)', () => {
  const { client, net, clock } = newClient({ connectTimeout: 3000 });
  const seen = states(client);
  const ws = net.last;
  const close = ws.close.bind(ws);
  ws.close = (code, reason) => {
    close(code, reason);
    ws.failWithoutClose(); // as Node's WebSocket does while connecting
  };
  clock.advance(3000);
  assert.ok(ws.closedWith, 'the hung socket is closed');
  assert.equal(seen.at(-1).error.reason, 'HP_ERR_CONNECT_TIMEOUT');
  client.close();
});

test('a handshake that hangs times out and is retried', () => {
  const { client, net, clock } = newClient({ connectTimeout: 3000 });
  const seen = states(client);
  const first = net.last;
  clock.advance(3000);
  assert.ok(first.closedWith, 'the hung socket is closed');
  assert.equal(seen.at(-1).state, 'reconnecting');
  assert.equal(seen.at(-1).error.reason, 'HP_ERR_CONNECT_TIMEOUT');
  clock.advance(seen.at(-1).delay);
  assert.notEqual(net.last, first);
  client.close();
});

test('options out of range are refused', () => {
  const net = fakeSockets();
  const make = (options) => () => new Client('ws://test.invalid/ws', { WebSocket: net.FakeWebSocket, ...options });
  assert.throws(make({ reconnect: { minDelay: 0 } }), RangeError);
  assert.throws(make({ reconnect: { minDelay: 500, maxDelay: 100 } }), RangeError);
  assert.throws(make({ callTimeout: -5 }), RangeError);
  assert.throws(make({ connectTimeout: 2 ** 40 }), RangeError);
  assert.equal(net.sockets.length, 0);
});

// A negative, NaN or non-number timeout or limit was taken as given: NaN
// and '5000' passed the range checks (NaN compares false, a string was
// never checked), and maxQueue NaN, maxMessage -1 or stableAfter 'x' were
// never checked at all, so the limit never held or every packet was
// refused, far from the option that caused it.
test('a bad timeout or limit fails at construction, naming the option', () => {
  const net = fakeSockets();
  const make = (options) => () => new Client('ws://test.invalid/ws', { WebSocket: net.FakeWebSocket, ...options });
  const names = ['callTimeout', 'connectTimeout', 'idleTimeout', 'keepaliveInterval', 'maxBatch', 'maxMessage', 'maxQueue', 'maxAsks'];
  for (const name of names) {
    for (const bad of name === 'maxQueue' || name === 'maxAsks' ? [-1, NaN] : [-1, NaN, 2 ** 53]) {
      assert.throws(make({ [name]: bad }), (err) => err instanceof RangeError && err.message.includes(`option ${name} `), `${name}: ${bad}`);
    }
    assert.throws(make({ [name]: '5000' }), (err) => err instanceof TypeError && err.message.includes(`option ${name} `), `${name}: '5000'`);
  }
  for (const name of ['maxBatch', 'maxMessage', 'maxQueue', 'maxAsks']) {
    assert.throws(make({ [name]: 1.5 }), (err) => err instanceof RangeError && err.message.includes(`option ${name} `), `${name}: 1.5`);
  }
  for (const name of ['minDelay', 'maxDelay', 'stableAfter']) {
    assert.throws(make({ reconnect: { [name]: NaN } }), (err) => err instanceof RangeError && err.message.includes(`option reconnect.${name} `), `reconnect.${name}: NaN`);
    assert.throws(make({ reconnect: { [name]: 'x' } }), (err) => err instanceof TypeError && err.message.includes(`option reconnect.${name} `), `reconnect.${name}: 'x'`);
  }
  assert.throws(make({ reconnect: 5 }), (err) => err instanceof TypeError && /option reconnect /.test(err.message));
  assert.equal(net.sockets.length, 0);
  // Their bounds are allowed.
  for (const options of [{ callTimeout: 0, connectTimeout: 2 ** 31 - 1, maxQueue: 0, maxAsks: Infinity }, { idleTimeout: 0, keepaliveInterval: 0 }, { reconnect: true }]) {
    make(options)().close();
  }
});

test('connectTimeout 0 waits for the handshake as long as it takes', () => {
  const { client, net, clock } = newClient({ connectTimeout: 0 });
  clock.advance(3_600_000);
  assert.equal(net.sockets.length, 1);
  assert.equal(net.last.closedWith, null);
  net.last.open();
  assert.equal(client.state, 'open');
  client.close();
});

test('rooms: join resolves {room, members}; rejoined after a reconnect; left rooms are not', async () => {
  const { client, net, clock } = connected();
  let ws = net.last;
  const joined = [client.join('lobby'), client.join('ticker')];
  await settle();
  const ids = ws.packets[0].items.map((i) => decodePacket(i));
  assert.deepEqual(ids.map((p) => [p.kind, p.room]), [['join', 'lobby'], ['join', 'ticker']]);
  ws.receive({ kind: 'result', id: ids[0].id, payload: json({ room: 'lobby', members: 3 }) });
  ws.receive({ kind: 'result', id: ids[1].id, payload: json({ room: 'ticker', members: 1 }) });
  assert.deepEqual(await joined[0], { room: 'lobby', members: 3 });
  await joined[1];
  const left = client.leave('ticker');
  await settle();
  ws.receive({ kind: 'result', id: ws.packets.at(-1).id, payload: json({ room: 'ticker', members: 0 }) });
  assert.deepEqual(await left, { room: 'ticker', members: 0 });
  assert.deepEqual(client.rooms, ['lobby']);

  ws.drop(1006);
  clock.advance(250);
  ws = net.last;
  ws.open();
  assert.deepEqual(ws.packets.map((p) => [p.kind, p.room]), [['join', 'lobby']]);
  client.close();
});

test('a join in flight when the connection drops is sent again and resolves', async () => {
  const { client, net, clock } = connected();
  const joined = client.join('lobby');
  await settle();
  net.last.drop(1006);
  clock.advance(250);
  const ws = net.last;
  ws.open();
  assert.deepEqual(ws.packets.map((p) => [p.kind, p.room]), [['join', 'lobby']], 'once, not twice');
  ws.receive({ kind: 'result', id: ws.packets[0].id, payload: json({ room: 'lobby', members: 1 }) });
  assert.deepEqual(await joined, { room: 'lobby', members: 1 });
  client.close();
});

test('rejoins go before emits queued while reconnecting', async () => {
  const { client, net, clock } = connected();
  const joined = client.join('lobby');
  await settle();
  net.last.receive({ kind: 'result', id: net.last.packets[0].id, payload: json({ room: 'lobby', members: 1 }) });
  await joined;
  net.last.drop(1006);
  client.emit('lobby', 'message', { text: 'while away' });
  clock.advance(250);
  const ws = net.last;
  ws.open();
  const items = ws.packets[0].items.map((i) => decodePacket(i));
  assert.deepEqual(items.map((p) => [p.kind, p.room]), [['join', 'lobby'], ['emit', 'lobby']]);
  client.close();
});

test('a refused join forgets its room', async () => {
  const { client, net } = connected();
  const joined = client.join('full');
  await settle();
  net.last.receive({ kind: 'error', id: net.last.packets[0].id, code: Code.BadRequest, message: 'too many rooms' });
  await assert.rejects(joined, (err) => err instanceof RPCError && err.code === Code.BadRequest);
  assert.deepEqual(client.rooms, []);
  assert.throws(() => client.emit('full', 'x', 1), /not a member/);
  client.close();
});

test('a rejoin that fails but is not refused keeps its room for the next reconnect; a refused one forgets it', async () => {
  const { client, net, clock } = connected();
  client.onError(() => {}); // the failed rejoins are reported
  const joined = client.join('lobby');
  await settle();
  net.last.receive({ kind: 'result', id: net.last.packets[0].id, payload: json({ room: 'lobby', members: 1 }) });
  await joined;
  for (const [code, kept] of [[Code.Overloaded, true], [Code.Unauthorized, false]]) {
    net.last.drop(1006);
    clock.advance(10_000);
    const ws = net.last;
    ws.open();
    assert.deepEqual(ws.packets.map((p) => [p.kind, p.room]), [['join', 'lobby']]);
    ws.receive({ kind: 'error', id: ws.packets[0].id, code, message: 'no' });
    await settle();
    assert.deepEqual(client.rooms, kept ? ['lobby'] : [], `after a rejoin answered ${code}`);
  }
  client.close();
});

test('a packet exactly at the server\'s limit leaves; one byte more is refused', async () => {
  const { client, net } = newClient();
  const ws = net.last;
  ws.open({ capabilities: false });
  ws.receive({ kind: 'capabilities', pairs: [['codec', 'json'], ['maxMessage', '1024']] });
  // head, id, name length, "a/b", timeout: 7 bytes before the payload.
  const fits = client.call('a/b', new Uint8Array(1024 - 7), { timeout: 0, raw: true });
  await settle();
  assert.equal(ws.frames.at(-1).byteLength, 1024);
  await assert.rejects(client.call('a/b', new Uint8Array(1024 - 6), { timeout: 0 }), RangeError);
  ws.receive({ kind: 'result', id: ws.packets.at(-1).id, payload: new Uint8Array(0) });
  await fits;
  client.close();
});

test('a call over the default limit waits for the server\'s: a server that takes it gets it', async () => {
  const { client, net } = newClient();
  const ws = net.last;
  ws.open({ capabilities: false });
  const big = client.call('a/b', new Uint8Array(2 << 20), { raw: true }); // over the default 1 MiB
  await settle();
  ws.receive({ kind: 'capabilities', pairs: [['codec', 'json'], ['maxMessage', String(4 << 20)]] });
  assert.equal(ws.packets.length, 1, 'the 2 MiB call left once the server\'s 4 MiB limit was known');
  ws.receive({ kind: 'result', id: ws.packets[0].id, payload: json('ok') });
  assert.deepEqual(new Uint8Array(await big), json('ok'));
  client.close();
});

// While reconnecting, a call, event or emit over the last server's
// maxMessage was refused at once (RangeError), though the next server may
// take it; the Go client checks a packet against the new server's limit.
test('while reconnecting, a packet is not held to the last server\'s maxMessage (§4.9)', async () => {
  const { client, net, clock } = newClient();
  let ws = net.last;
  ws.open({ capabilities: false });
  ws.receive({ kind: 'capabilities', pairs: [['codec', 'json'], ['maxMessage', '1024']] });
  await assert.rejects(client.call('a/b', new Uint8Array(2000), { raw: true }), RangeError);
  assert.throws(() => client.event('e', 'x'.repeat(2000)), RangeError);
  ws.drop(1006);
  const big = client.call('a/b', new Uint8Array(2000), { raw: true });
  assert.doesNotThrow(() => client.event('e', 'x'.repeat(2000)), 'held to the last server\'s maxMessage');
  clock.advance(250);
  ws = net.last;
  ws.open({ capabilities: false });
  ws.receive({ kind: 'capabilities', pairs: [['codec', 'json'], ['maxMessage', '4096']] });
  await settle();
  const sent = ws.packets.flatMap((p) => (p.kind === 'batch' ? p.items.map((i) => decodePacket(i)) : [p]));
  assert.deepEqual(sent.map((p) => p.kind), ['call', 'event']);
  ws.receive({ kind: 'result', id: sent[0].id, payload: json('ok') });
  assert.deepEqual(new Uint8Array(await big), json('ok'));
  client.close();
});

test('batches and packets stay within the carrier\'s message limit (a WebRTC data channel\'s)', async () => {
  const { client, net } = newClient();
  const ws = net.last;
  ws.maxMessageSize = 4096; // as DataChannelSocket reports it
  ws.open();
  const calls = [];
  for (let i = 0; i < 10; i++) calls.push(client.call('a/b', new Uint8Array(1000), { raw: true }));
  await settle();
  assert.ok(ws.frames.every((f) => f.byteLength <= 4096), `frames of ${ws.frames.map((f) => f.byteLength)} bytes`);
  assert.equal(ws.packets.flatMap((p) => (p.kind === 'batch' ? p.items : [p])).length, 10);
  await assert.rejects(client.call('a/b', new Uint8Array(5000), { raw: true }), (err) => err instanceof RangeError && /carrier's limit of 4096/.test(err.message));
  client.close();
  await Promise.allSettled(calls);
});

test('a carrier that refuses a write fails the calls it carried at once', async () => {
  const { client, net } = connected();
  const ws = net.last;
  ws.send = () => { throw new Error('Trying to send message larger than max-message-size'); };
  const calls = await Promise.allSettled([client.call('a/b', 1), client.call('a/b', 2)]);
  for (const c of calls) assert.match(c.reason?.message ?? '', /the carrier refused a packet: Trying to send/);
  client.close();
});

test('emit sends room, event, flags and JSON payload (§4.6)', async () => {
  const { client, net } = connected();
  client.join('lobby').catch(() => {});
  client.emit('lobby', 'message', { name: 'a', text: 'hi', at: 1 });
  client.emit('lobby', 'typing', true, { exceptSelf: true });
  await settle();
  const items = net.last.packets[0].items.map((i) => decodePacket(i));
  assert.equal(items[1].kind, 'emit');
  assert.equal(items[1].flags, 0);
  assert.deepEqual(JSON.parse(text(items[1].payload)), { name: 'a', text: 'hi', at: 1 });
  assert.equal(items[2].event, 'typing');
  assert.equal(items[2].flags, 1);
  assert.throws(() => client.emit('lobby', '$join', {}), RangeError);
  assert.throws(() => client.emit('elsewhere', 'x', {}), /not a member/);
  client.close();
});

// PROTOCOL.md §4.9: a server drops, unseen, an emit whose payload is over
// its maxEmit, so the client refuses it itself, measuring the payload as
// the server does (the JSON bytes, not the packet). emit returned as if
// it were sent.
test('an emit whose payload is over the server\'s maxEmit throws; one at it leaves; emitUnreliable too (§4.9)', async () => {
  const { client, net } = newClient();
  const ws = net.last;
  const datagrams = [];
  ws.transmitUnreliable = (packet) => { datagrams.push(decodePacket(packet)); return true; };
  ws.open({ capabilities: false });
  ws.receive({ kind: 'capabilities', pairs: [['codec', 'json'], ['maxMessage', '1024'], ['maxEmit', '16']] });
  const joined = client.join('r');
  await settle();
  ws.receive({ kind: 'result', id: ws.packets[0].id, payload: json({ room: 'r', members: 1 }) });
  await joined;
  const over = 'x'.repeat(15); // "xxx…": 17 bytes of JSON
  const refused = (err) => err instanceof RangeError && /payload of 17 bytes is over the server's emit limit \(maxEmit\) of 16/.test(err.message);
  assert.throws(() => client.emit('r', 'e', over), refused);
  assert.throws(() => client.emitUnreliable('r', 'e', over), refused);
  assert.throws(() => client.emit('r', 'e', new Uint8Array(17)), RangeError);
  client.emit('r', 'e', 'x'.repeat(14));
  client.emit('r', 'e', new Uint8Array(16));
  client.emitUnreliable('r', 'e', 'y'.repeat(14));
  await settle();
  const sent = ws.packets.slice(1).flatMap((p) => (p.kind === 'batch' ? p.items.map((i) => decodePacket(i)) : [p]));
  assert.deepEqual(sent.map((p) => [p.kind, p.payload.length]), [['emit', 16], ['emit', 16]]);
  assert.deepEqual(datagrams.map((p) => text(p.payload)), [JSON.stringify('y'.repeat(14))]);
  client.close();
});

test('an emit queued before the server\'s capabilities is held to its maxEmit; each connection takes its server\'s (§4.9)', async () => {
  const { client, net, clock } = connected(); // a server that announces no maxEmit
  const reported = [];
  client.onError((err) => reported.push(err));
  const joined = client.join('r');
  await settle();
  net.last.receive({ kind: 'result', id: net.last.packets[0].id, payload: json({ room: 'r', members: 1 }) });
  await joined;
  const over = 'x'.repeat(15); // 17 bytes of JSON
  net.last.drop(1006);
  client.emit('r', 'e', over); // the next server's limit is not known yet
  clock.advance(250);
  let ws = net.last;
  ws.open({ capabilities: false });
  ws.receive({ kind: 'capabilities', pairs: [['codec', 'json'], ['maxEmit', '16']] });
  await settle();
  assert.deepEqual(ws.packets.map((p) => [p.kind, p.room]), [['join', 'r']], 'the emit over maxEmit is not sent');
  assert.equal(reported.length, 1);
  assert.match(reported[0].message, /over the server's emit limit \(maxEmit\) of 16/);
  assert.throws(() => client.emit('r', 'e', over), RangeError);

  ws.drop(1006);
  clock.advance(10_000);
  ws = net.last;
  ws.open(); // a server that announces none again
  client.emit('r', 'e', over);
  await settle();
  const sent = ws.packets.flatMap((p) => (p.kind === 'batch' ? p.items.map((i) => decodePacket(i)) : [p]));
  assert.deepEqual(sent.map((p) => [p.kind, p.payload?.length]), [['join', undefined], ['emit', 17]]);
  client.close();
});

// A maxEmit is its connection's: after a drop, emits made while
// reconnecting were still held to the last server's, and refused with a
// RangeError though the next server might take them. The Go client waits
// for the new server's capabilities before it checks an emit.
test('while reconnecting, an emit is not held to the last server\'s maxEmit (§4.9)', async () => {
  const { client, net, clock } = newClient();
  const reported = [];
  client.onError((err) => reported.push(err));
  let ws = net.last;
  ws.open({ capabilities: false });
  ws.receive({ kind: 'capabilities', pairs: [['codec', 'json'], ['maxEmit', '16']] });
  const joined = client.join('r');
  await settle();
  ws.receive({ kind: 'result', id: ws.packets[0].id, payload: json({ room: 'r', members: 1 }) });
  await joined;
  const over = 'x'.repeat(15); // 17 bytes of JSON
  assert.throws(() => client.emit('r', 'e', over), RangeError);
  ws.drop(1006);
  assert.doesNotThrow(() => client.emit('r', 'e', over), 'held to the last server\'s maxEmit while disconnected');
  clock.advance(250);
  ws = net.last;
  ws.open({ capabilities: false });
  assert.doesNotThrow(() => client.emitUnreliable('r', 'e', over), 'held to the last server\'s maxEmit before the new one\'s capabilities');
  ws.receive({ kind: 'capabilities', pairs: [['codec', 'json']] }); // a server that sets no maxEmit
  await settle();
  const sent = ws.packets.flatMap((p) => (p.kind === 'batch' ? p.items.map((i) => decodePacket(i)) : [p]));
  assert.deepEqual(sent.map((p) => [p.kind, p.payload?.length]), [['join', undefined], ['emit', 17], ['emit', 17]]);
  assert.deepEqual(reported, []);
  client.close();
});

test('room emits, presence and server events reach their listeners; off stops them', () => {
  const { client, net } = connected();
  const ws = net.last;
  const got = [];
  const off = client.onRoom('lobby', 'message', (data, meta) => got.push(['message', data, meta]));
  client.onRoom('lobby', '$join', (data) => got.push(['$join', data]));
  client.onRoom('lobby', '$leave', (data) => got.push(['$leave', data]));
  client.on('notice', (data, meta) => got.push(['notice', data, meta]));
  ws.receive({ kind: 'emit', room: 'lobby', event: '$join', flags: 0, payload: json({ members: 2 }) });
  ws.receive({ kind: 'emit', room: 'lobby', event: 'message', flags: 0, payload: json({ text: 'hi' }) });
  ws.receive({ kind: 'emit', room: 'other', event: 'message', flags: 0, payload: json({ text: 'no' }) });
  ws.receive({ kind: 'event', event: 'notice', payload: json('up') });
  ws.receive({ kind: 'emit', room: 'lobby', event: '$leave', flags: 0, payload: json({ members: 1 }) });
  off();
  ws.receive({ kind: 'emit', room: 'lobby', event: 'message', flags: 0, payload: json({ text: 'after off' }) });
  assert.deepEqual(got, [
    ['$join', { members: 2 }],
    ['message', { text: 'hi' }, { room: 'lobby', event: 'message' }],
    ['notice', 'up', { event: 'notice' }],
    ['$leave', { members: 1 }],
  ]);
  client.close();
});

test('a listener that throws is reported and does not stop the others', () => {
  const { client, net } = connected();
  const errors = [];
  client.onError((err) => errors.push(err.message));
  let second = 0;
  client.on('e', () => { throw new Error('boom'); });
  client.on('e', () => { second++; });
  net.last.receive({ kind: 'event', event: 'e', payload: '' });
  assert.deepEqual(errors, ['boom']);
  assert.equal(second, 1);
  assert.equal(client.state, 'open');
  client.close();
});

test('asks are answered: result, RPCError, unexpected error, unknown method, reserved code (§4.4, §4.2)', async () => {
  const { client, net } = connected();
  const ws = net.last;
  const reported = [];
  client.onError((err) => reported.push(err.message));
  client.handle('ui/confirm', async (params, { method, signal }) => {
    assert.equal(method, 'ui/confirm');
    assert.equal(signal.aborted, false);
    return { ok: params.q === 'ok?' };
  });
  client.handle('ui/deny', () => { throw new RPCError(1000, 'denied', { why: 'no' }); });
  client.handle('ui/bug', () => { throw new Error('secret detail'); });
  client.handle('ui/reserved', () => { throw new RPCError(42, 'reserved code'); });
  // PROTOCOL.md §4.2 (through §4.4): code 0 is sent as Internal, its
  // message and data kept, as a reserved code is.
  client.handle('ui/zero', () => { throw new RPCError(0, 'zero code', { n: 1 }); });
  ws.receive({ kind: 'ask', id: 6, method: 'ui/zero', timeout: 0, payload: '' });
  ws.receive({ kind: 'ask', id: 5, method: 'ui/reserved', timeout: 0, payload: '' });
  ws.receive({ kind: 'ask', id: 1, method: 'ui/confirm', timeout: 0, payload: json({ q: 'ok?' }) });
  ws.receive({ kind: 'ask', id: 2, method: 'ui/deny', timeout: 0, payload: '' });
  ws.receive({ kind: 'ask', id: 3, method: 'ui/bug', timeout: 0, payload: '' });
  ws.receive({ kind: 'ask', id: 4, method: 'ui/none', timeout: 0, payload: '' });
  await settle();
  const answers = ws.packets.flatMap((p) => (p.kind === 'batch' ? p.items.map((i) => decodePacket(i)) : [p]));
  const byId = Object.fromEntries(answers.map((a) => [a.id, a]));
  assert.deepEqual([byId[1].status, JSON.parse(text(byId[1].payload))], [0, { ok: true }]);
  assert.deepEqual([byId[2].status, byId[2].code, byId[2].message, text(byId[2].data)], [1, 1000, 'denied', '{"why":"no"}']);
  assert.deepEqual([byId[3].status, byId[3].code, byId[3].message], [1, Code.Internal, 'internal error']);
  assert.deepEqual([byId[4].status, byId[4].code], [1, Code.NotFound]);
  assert.deepEqual([byId[5].status, byId[5].code, byId[5].message], [1, Code.Internal, 'reserved code']); // §4.2 keeps 10-999
  assert.deepEqual([byId[6].status, byId[6].code, byId[6].message, text(byId[6].data)], [1, Code.Internal, 'zero code', '{"n":1}']);
  assert.deepEqual(reported, ['secret detail']);
  client.close();
});

test('asks beyond maxAsks running at once are answered Overloaded', async () => {
  const { client, net } = connected({ maxAsks: 2 });
  const ws = net.last;
  const finish = [];
  client.handle('slow', () => new Promise((r) => { finish.push(r); }));
  for (let id = 1; id <= 4; id++) ws.receive({ kind: 'ask', id, method: 'slow', timeout: 0, payload: '' });
  await settle();
  const answers = () => ws.packets.flatMap((p) => (p.kind === 'batch' ? p.items.map((i) => decodePacket(i)) : [p]));
  assert.deepEqual(answers().map((a) => [a.id, a.status, a.code]), [[3, 1, Code.Overloaded], [4, 1, Code.Overloaded]]);
  assert.equal(finish.length, 2);
  for (const f of finish) f('done');
  await settle();
  assert.deepEqual(answers().filter((a) => a.status === 0).map((a) => a.id).sort(), [1, 2]);
  ws.receive({ kind: 'ask', id: 5, method: 'slow', timeout: 0, payload: '' }); // room again
  await settle();
  assert.equal(finish.length, 3);
  client.close();
});

// An ask's answer went into the send queue like any packet: when maxQueue
// packets waited (the carrier over maxBuffered), it was dropped without a
// word, and the server's Ask waited for its timeout. An answer now keeps
// its ask's place under maxAsks until it leaves, and is queued past
// maxQueue; an Overloaded answer the queue has no room for is reported.
test('an ask\'s answer is queued past maxQueue, holding its place under maxAsks; one dropped is reported', async () => {
  const { client, net, clock } = connected({ maxBuffered: 1000, maxQueue: 2, maxAsks: 2 });
  const ws = net.last;
  const reported = [];
  client.onError((err) => reported.push(err));
  client.handle('q', (n) => n * 10);
  ws.bufferedAmount = 1001; // the link is slower than the page
  client.event('e', 1);
  client.event('e', 2); // the queue is full
  for (let id = 1; id <= 3; id++) ws.receive({ kind: 'ask', id, method: 'q', timeout: 0, payload: json(id) });
  await settle();
  assert.deepEqual(ws.packets, [], 'sent past maxBuffered');
  assert.equal(reported.length, 1, 'the Overloaded answer to ask 3 was dropped without a word');
  assert.ok(reported[0] instanceof RPCError && reported[0].code === Code.Overloaded && /ask 3 was dropped/.test(reported[0].message), reported[0].message);
  ws.bufferedAmount = 0;
  clock.advance(10);
  await settle();
  const sent = () => ws.packets.flatMap((p) => (p.kind === 'batch' ? p.items.map((i) => decodePacket(i)) : [p]));
  assert.deepEqual(sent().map((p) => [p.kind, p.id, p.status, p.payload && text(p.payload)]),
    [['event', undefined, undefined, '1'], ['event', undefined, undefined, '2'], ['answer', 1, 0, '10'], ['answer', 2, 0, '20']]);
  ws.receive({ kind: 'ask', id: 4, method: 'q', timeout: 0, payload: json(4) }); // their places are free again
  await settle();
  assert.deepEqual([sent().at(-1).id, sent().at(-1).status, text(sent().at(-1).payload)], [4, 0, '40']);
  client.close();
});

test('an ask past its timeout is aborted and not answered', async () => {
  const { client, net, clock } = connected();
  const ws = net.last;
  let signal;
  let finish;
  client.handle('slow', (params, meta) => { signal = meta.signal; return new Promise((r) => { finish = r; }); });
  ws.receive({ kind: 'ask', id: 9, method: 'slow', timeout: 50, payload: '' });
  clock.advance(50);
  assert.equal(signal.aborted, true);
  assert.equal(signal.reason.code, Code.Timeout);
  finish('late');
  await settle();
  assert.equal(ws.packets.length, 0);
  client.close();
});

test('an ask with the longest timeout a server sends is not aborted at once', async () => {
  const { client, net, clock } = connected();
  let signal;
  client.handle('slow', (params, meta) => { signal = meta.signal; return 'done'; });
  // The Go server caps an ask's timeout at 2^31 ms, one past setTimeout's limit.
  net.last.receive({ kind: 'ask', id: 1, method: 'slow', timeout: 2 ** 31, payload: '' });
  clock.advance(1000);
  await settle();
  assert.equal(signal.aborted, false);
  assert.equal(net.last.packets[0].status, 0);
  client.close();
});

test('ping is answered with pong carrying the same data (§4.8)', async () => {
  const { client, net } = connected();
  net.last.receive({ kind: 'ping', data: 'abc' });
  await settle();
  assert.equal(net.last.packets[0].kind, 'pong');
  assert.equal(text(net.last.packets[0].data), 'abc');
  client.close();
});

// PROTOCOL.md §4.8: a Pong is as long as its Ping, so a Ping whose Pong
// would be over the server's maxMessage closes the connection with 4009
// HP_ERR_MESSAGE_TOO_BIG instead of being answered with a Pong the server
// would close on, as the server does on a client's such Ping.
test('a server Ping whose Pong would be over the server\'s maxMessage closes with 4009 (§4.8)', async () => {
  const { client, net } = newClient();
  const ws = net.last;
  ws.open({ capabilities: false });
  ws.receive({ kind: 'capabilities', pairs: [['codec', 'json'], ['maxMessage', '100']] });
  const data = 'p'.repeat(99); // a Pong of exactly the limit
  ws.receive({ kind: 'ping', data });
  await settle();
  assert.deepEqual(ws.packets.map((p) => [p.kind, text(p.data)]), [['pong', data]]);
  assert.equal(ws.closedWith, null);
  const answer = client.call('a/b');
  await settle();
  ws.receive({ kind: 'ping', data: data + 'p' });
  assert.deepEqual(ws.closedWith, { code: 4009, reason: 'HP_ERR_MESSAGE_TOO_BIG' });
  assert.equal(ws.packets.filter((p) => p.kind === 'pong').length, 1, 'the Ping over the limit was answered');
  await assert.rejects(answer, (err) => err instanceof CloseError && err.code === 1009 && err.reason === 'HP_ERR_MESSAGE_TOO_BIG');
  client.close();
});

// PROTOCOL.md §4.9: a server that announces no maxMessage sets no limit
// of its own, as a client that announces none; only the carrier's holds
// a Pong. This client took its own maxMessage option (1 MiB by default)
// for the server's and closed with 4009 on a larger Ping, which the Go
// client answers.
test('a server that announced no maxMessage gets a Pong of any size within the carrier\'s limit (§4.8, §4.9)', async () => {
  for (const options of [{}, { maxMessage: 100 }]) {
    const { client, net } = newClient(options);
    const ws = net.last;
    ws.open({ capabilities: false });
    ws.receive({ kind: 'capabilities', pairs: [['codec', 'json']] });
    const data = 'p'.repeat(1 << 20); // a Pong over the option's limit
    ws.receive({ kind: 'ping', data });
    await settle();
    assert.equal(ws.closedWith, null, `maxMessage option ${options.maxMessage}: the Ping closed the connection`);
    assert.deepEqual(ws.packets.map((p) => [p.kind, p.data.length]), [['pong', data.length]]);
    // The carrier's limit (a data channel's) still holds.
    ws.maxMessageSize = data.length;
    ws.receive({ kind: 'ping', data });
    assert.deepEqual(ws.closedWith, { code: 4009, reason: 'HP_ERR_MESSAGE_TOO_BIG' });
    client.close();
  }
});

// A Ping before the server's capabilities (a conforming server sends
// none) had its Pong queued: at flush one over this client's maxMessage
// option or the server's later maxMessage was dropped and reported, and
// one over the carrier's limit never closed with 1009. The Go client
// answers at once within the carrier's limit, and closes past it.
test('a server Ping before its capabilities is answered at once within the carrier\'s limit, and closes with 4009 past it (§4.8)', async () => {
  const { client, net, clock } = newClient();
  const reported = [];
  client.onError((err) => reported.push(err));
  let ws = net.last;
  ws.open({ capabilities: false });
  const data = 'p'.repeat(1 << 20); // a Pong over the default maxMessage option
  ws.receive({ kind: 'ping', data });
  assert.deepEqual(ws.packets.map((p) => [p.kind, p.data.length]), [['pong', data.length]], 'the Pong waited for the capabilities');
  ws.receive({ kind: 'capabilities', pairs: [['codec', 'json'], ['maxMessage', '50']] });
  await settle();
  assert.deepEqual(ws.packets.map((p) => p.kind), ['pong']);
  assert.deepEqual(reported, []);
  assert.equal(ws.closedWith, null);

  // The next connection: the last server's maxMessage (50) is not its
  // server's, and a data channel's limit holds from the start.
  ws.drop(1006);
  clock.advance(250);
  ws = net.last;
  ws.maxMessageSize = 100;
  ws.open({ capabilities: false });
  ws.receive({ kind: 'ping', data: 'q'.repeat(99) });
  assert.deepEqual(ws.packets.map((p) => [p.kind, p.data.length]), [['pong', 99]]);
  ws.receive({ kind: 'ping', data: 'q'.repeat(100) });
  assert.deepEqual(ws.closedWith, { code: 4009, reason: 'HP_ERR_MESSAGE_TOO_BIG' });
  assert.equal(ws.packets.length, 1, 'the Ping over the carrier\'s limit was answered');
  await settle();
  assert.deepEqual(reported, []);
  client.close();
});

test('protocol violations close the connection, then it reconnects (§7)', async () => {
  for (const [send, code, reason, wire, capabilities = true] of [
    [(ws) => ws.receiveText('hi'), 1003, 'HP_ERR_TEXT_MESSAGE', 4003],
    [(ws) => ws.receive(new Uint8Array([2])), 1008, 'HP_ERR_MALFORMED_PACKET', 4008], // a Result without its id
    [(ws) => ws.receive(new Uint8Array([0x7f])), 1008, 'HP_ERR_UNKNOWN_KIND', 4008],
    [(ws) => ws.receive(new Uint8Array([0x82, 0])), 1008, 'HP_ERR_UNNEGOTIATED_COMPRESSION', 4008],
    [(ws) => ws.receive({ kind: 'join', id: 1, room: 'r' }), 1008, 'HP_ERR_UNKNOWN_KIND', 4008],
    // The server's first capabilities: a call waits for them, unsent.
    [(ws) => ws.receive({ kind: 'capabilities', pairs: [['codec', 'cbor']] }), 1008, 'HP_ERR_UNSUPPORTED_CODEC', 4008, false],
    // §4.9: a server sends its capabilities once per connection.
    [(ws) => ws.receive({ kind: 'capabilities', pairs: [['codec', 'json'], ['maxMessage', '64']] }), 1008, 'HP_ERR_REPEATED_CAPABILITIES', 4008],
  ]) {
    const { client, net } = newClient();
    net.last.open({ capabilities });
    const seen = states(client);
    const answer = capabilities ? client.call('a/b') : null;
    await settle();
    send(net.last);
    // Browsers may only send 1000 and 3000-4999: the frame carries 4000+.
    assert.deepEqual(net.last.closedWith, { code: wire, reason });
    if (answer) await assert.rejects(answer, (err) => err instanceof CloseError && err.code === code && err.reason === reason);
    assert.equal(seen.at(-1).state, 'reconnecting');
    assert.equal(seen.at(-1).error.code, code);
    client.close();
  }
});

// PROTOCOL.md §3: a kind only clients send is an unknown kind from a
// server, alone or in a batch; §4.7: a batch holds no batch and no
// compressed item.
test('kinds only clients send, and batches holding what no batch may, close with 4008 (§3, §4.7)', async () => {
  const batch = (...items) => {
    const out = [0x07, items.length];
    for (const it of items) out.push(it.length, ...it);
    return new Uint8Array(out);
  };
  const result = [...encodePacket({ kind: 'result', id: 9, payload: new Uint8Array() })];
  for (const [name, packet, reason] of [
    ['a call', { kind: 'call', id: 1, method: 'a/b', timeout: 0, payload: '' }, 'HP_ERR_UNKNOWN_KIND'],
    ['an answer', { kind: 'answer', id: 1, status: 0, payload: '' }, 'HP_ERR_UNKNOWN_KIND'],
    ['a leave', { kind: 'leave', id: 1, room: 'r' }, 'HP_ERR_UNKNOWN_KIND'],
    ['kind 0', new Uint8Array([0]), 'HP_ERR_UNKNOWN_KIND'],
    // The kind and its direction are read before the body, as at the Go
    // ends: whatever follows the head byte.
    ['a compressed call', new Uint8Array([0x81, 0xde, 0xad, 0xbe, 0xef]), 'HP_ERR_UNKNOWN_KIND'],
    ['a call without its id', new Uint8Array([1]), 'HP_ERR_UNKNOWN_KIND'],
    ['a call in a batch', batch(result, [...encodePacket({ kind: 'call', id: 1, method: 'a/b', timeout: 0, payload: '' })]), 'HP_ERR_UNKNOWN_KIND'],
    // An item's kind too is read before its body, as at the Go ends.
    ['a call without its id in a batch', batch(result, [1]), 'HP_ERR_UNKNOWN_KIND'],
    ['an answer without its id in a batch', batch([6]), 'HP_ERR_UNKNOWN_KIND'],
    ['an unknown kind in a batch', batch([0x7f]), 'HP_ERR_UNKNOWN_KIND'],
    ['a malformed item', batch([2]), 'HP_ERR_MALFORMED_PACKET'], // a Result without its id
    ['a batch in a batch', batch([...batch(result)]), 'HP_ERR_MALFORMED_PACKET'],
    ['a compressed item', batch([0x82, 0]), 'HP_ERR_MALFORMED_PACKET'],
    ['a batch of count 0', new Uint8Array([0x07, 0]), 'HP_ERR_MALFORMED_PACKET'],
  ]) {
    const { client, net } = connected();
    const answer = client.call('a/b');
    await settle();
    net.last.receive(packet);
    assert.deepEqual(net.last.closedWith, { code: 4008, reason }, name);
    await assert.rejects(answer, (err) => err instanceof CloseError && err.code === 1008 && err.reason === reason);
    client.close();
  }
});

// PROTOCOL.md §4.7: a batch's framing is checked whole, then its items
// are handled one at a time, in order, as the server and the Go client
// handle them: a Result before a bad item is delivered, and the bad item
// closes the connection. This client decoded every item first, so the
// Result was lost here where the Go client delivered it. A batch whose
// framing is bad is refused before any item.
test('a batch\'s items are handled in order up to a bad one; bad framing refuses it whole (§4.7)', async () => {
  const batch = (...items) => {
    const out = [0x07, items.length];
    for (const it of items) out.push(it.length, ...it);
    return new Uint8Array(out);
  };
  for (const [name, bad, reason, delivered] of [
    ['an unknown kind', [0x7f], 'HP_ERR_UNKNOWN_KIND', true],
    ['a call', [...encodePacket({ kind: 'call', id: 1, method: 'a/b', timeout: 0, payload: '' })], 'HP_ERR_UNKNOWN_KIND', true],
    ['a result without its id', [2], 'HP_ERR_MALFORMED_PACKET', true],
    ['an event without its name', [4], 'HP_ERR_MALFORMED_PACKET', true],
    ['a batch', [...batch([4, 1, 0x65])], 'HP_ERR_MALFORMED_PACKET', false],
    ['a compressed item', [0x84, 0], 'HP_ERR_MALFORMED_PACKET', false],
  ]) {
    const { client, net } = connected();
    const first = client.call('a/b');
    const second = client.call('a/b');
    await settle();
    const [one, two] = net.last.packets[0].items.map(decodePacket);
    net.last.receive(batch([...encodePacket({ kind: 'result', id: one.id, payload: json('ok') })], bad,
      [...encodePacket({ kind: 'result', id: two.id, payload: json('late') })]));
    assert.deepEqual(net.last.closedWith, { code: 4008, reason }, name);
    if (delivered) assert.equal(await first, 'ok', name);
    else await assert.rejects(first, (err) => err instanceof CloseError && err.reason === reason, name);
    await assert.rejects(second, (err) => err instanceof CloseError && err.code === 1008 && err.reason === reason, name);
    client.close();
  }
});

// PROTOCOL.md §4.9: a server sends its capabilities once per connection;
// a repeat closes it with 4008 HP_ERR_REPEATED_CAPABILITIES (it took the
// repeat's limits). The next connection takes its own first ones.
test('capabilities sent again close the connection; the next connection takes its own (§4.9)', async () => {
  const { client, net, clock } = connected();
  const answer = client.call('a/b');
  await settle();
  net.last.receive({ kind: 'capabilities', pairs: [['codec', 'json'], ['maxMessage', '64']] });
  assert.deepEqual(net.last.closedWith, { code: 4008, reason: 'HP_ERR_REPEATED_CAPABILITIES' });
  await assert.rejects(answer, (err) => err instanceof CloseError && err.code === 1008 && err.reason === 'HP_ERR_REPEATED_CAPABILITIES');
  net.last.drop(1006);
  clock.advance(250);
  const ws = net.last;
  assert.equal(net.sockets.length, 2);
  ws.open({ capabilities: false });
  ws.receive({ kind: 'capabilities', pairs: [['codec', 'json'], ['maxMessage', '1024']] });
  await assert.rejects(client.call('a/b', 'x'.repeat(2000)), (err) => err instanceof RangeError && /limit of 1024/.test(err.message));
  const small = client.call('a/b', 'x'.repeat(100)); // over the repeat's 64
  await settle();
  assert.equal(ws.closedWith, null);
  ws.receive({ kind: 'result', id: ws.packets.at(-1).id, payload: json('ok') });
  assert.equal(await small, 'ok');
  client.close();
});

// PROTOCOL.md §4.9: unknown capability keys are ignored.
test('unknown capability keys are ignored (§4.9)', async () => {
  const { client, net } = newClient();
  net.last.open({ capabilities: false });
  net.last.receive({ kind: 'capabilities', pairs: [['future', 'x'], ['codec', 'json'], ['', '']] });
  const answer = client.call('a/b');
  await settle();
  assert.equal(net.last.closedWith, null);
  net.last.receive({ kind: 'result', id: net.last.packets[0].id, payload: json('ok') });
  assert.equal(await answer, 'ok');
  client.close();
});

test('close flushes what is queued, closes with 1000, fails what waits, stops reconnecting', async () => {
  const { client, net, clock } = connected();
  const ws = net.last;
  const seen = states(client);
  client.join('lobby').catch(() => {});
  const answer = client.call('a/b');
  client.close();
  assert.equal(ws.packets[0].kind, 'batch', 'queued packets were sent first');
  assert.equal(ws.closedWith.code, 1000);
  await assert.rejects(answer, (err) => err instanceof CloseError && err.code === 1000);
  assert.deepEqual(seen.map((s) => s.state), ['closed']);
  clock.advance(60_000);
  assert.equal(net.sockets.length, 1);
  await assert.rejects(client.call('a/b'), CloseError);
});

test('with reconnect off, a drop closes the client', async () => {
  const { client, net } = connected({ reconnect: false });
  const seen = states(client);
  net.last.drop(1001);
  assert.equal(client.state, 'closed');
  assert.equal(seen[0].error.code, 1001);
  await assert.rejects(client.call('a/b'), CloseError);
});

test('the queue is bounded while disconnected, and while the server\'s capabilities are awaited', async () => {
  for (const awaiting of [false, true]) {
    const { client, net } = newClient({ maxQueue: 2 });
    if (awaiting) net.last.open({ capabilities: false });
    const a = client.call('a/b');
    const b = client.call('a/b');
    await assert.rejects(client.call('a/b'), (err) => err instanceof RPCError && err.code === Code.Overloaded);
    client.close();
    await assert.rejects(a, CloseError);
    await assert.rejects(b, CloseError);
  }
});

// maxQueue counts packets: 1024 queued packets of 1 MiB each held a
// gigabyte. maxQueueBytes (16 MiB by default) bounds their bytes too.
test('the queue is bounded in bytes too: maxQueueBytes, 16 MiB by default', async () => {
  {
    const { client, net } = newClient();
    const mib = new Uint8Array(1 << 20);
    const calls = [];
    for (let i = 0; i < 16; i++) calls.push(client.call('a/b', mib, { raw: true }));
    const refused = await outcome(client.call('a/b', mib, { raw: true }));
    assert.ok(refused instanceof RPCError && refused.code === Code.Overloaded && /16777216 bytes/.test(refused.message), `the 17th MiB: ${refused}`);
    assert.throws(() => client.event('e', 1), (err) => err instanceof RPCError && err.code === Code.Overloaded);
    net.last.open({ capabilities: false });
    net.last.receive({ kind: 'capabilities', pairs: [['codec', 'json'], ['maxMessage', String(2 << 20)]] });
    assert.equal(net.last.packets.length, 16, 'what fitted left once connected');
    client.close();
    for (const c of calls) await assert.rejects(c, CloseError);
  }
  const { client, net, clock } = newClient({ maxQueueBytes: 3000 });
  const first = client.call('a/b', new Uint8Array(2000), { raw: true, timeout: 100 });
  const refused = await outcome(client.call('a/b', new Uint8Array(1001), { raw: true }));
  assert.ok(refused instanceof RPCError && refused.code === Code.Overloaded, `over 3000 bytes: ${refused}`);
  client.event('e', 'x'.repeat(900)); // 905 bytes: it fits
  clock.advance(100);
  await assert.rejects(first, (err) => err instanceof RPCError && err.code === Code.Timeout);
  const later = client.call('a/b', new Uint8Array(2000), { raw: true }); // the timed-out call left room
  net.last.open();
  await settle();
  assert.deepEqual(net.last.packets[0].items.map((b) => decodePacket(b).kind), ['event', 'call']);
  client.close();
  await assert.rejects(later, CloseError);
  assert.throws(() => new Client('ws://test.invalid/ws', { WebSocket: fakeSockets().FakeWebSocket, maxQueueBytes: -1 }), /maxQueueBytes/);
});

// A packet larger than maxQueueBytes cannot wait in the queue, however
// empty: it was refused as Overloaded with "0 packets of 0 bytes already
// wait for the connection", as though others filled the queue. It says
// what it is now, fails at once, and what fits still waits and leaves.
test('a packet over maxQueueBytes alone fails at once, saying so; what fits still waits', async () => {
  const over = (bytes, limit) => (err) => err instanceof RPCError && err.code === Code.Overloaded &&
    err.message.includes(`${bytes} bytes`) && err.message.includes(`maxQueueBytes (${limit})`);
  {
    const { client } = newClient(); // the default: 16 MiB
    await assert.rejects(client.call('a/b', new Uint8Array((16 << 20) + 1), { raw: true }), over((16 << 20) + 1, 16 << 20));
    client.close();
  }
  const { client, net } = newClient({ maxQueueBytes: 1000, maxBuffered: 5000 });
  const kept = client.call('a/b', 'x');
  const event = encodePacket({ kind: 'event', event: 'e', payload: json('y'.repeat(1000)) }).length;
  await assert.rejects(client.call('a/b', new Uint8Array(1001), { raw: true }), over(1001, 1000));
  assert.throws(() => client.event('e', 'y'.repeat(1000)), over(event, 1000));
  const ws = net.last;
  ws.open();
  await settle();
  assert.deepEqual(ws.packets.map((p) => [p.kind, text(p.payload)]), [['call', '"x"']], 'what fitted left');
  ws.receive({ kind: 'result', id: ws.packets[0].id, payload: json('ok') });
  assert.equal(await kept, 'ok');
  // Connected and not backlogged, it waits for nothing and leaves.
  client.event('e', 'y'.repeat(1000));
  await settle();
  assert.equal(ws.packets.length, 2);
  // Backlogged, it would wait: refused again.
  ws.bufferedAmount = 5001;
  assert.throws(() => client.event('e', 'y'.repeat(1000)), over(event, 1000));
  client.close();
});

test('a client without a URL it can resolve says so', () => {
  // Node has no page to resolve a path against.
  for (const url of [undefined, '/ws']) {
    assert.throws(() => new Client(url, { WebSocket: class {} }), (err) => err instanceof TypeError && /is not a URL \(outside a page/.test(err.message));
  }
});

test('arguments that cannot be sent are refused at once', async () => {
  const { client } = connected();
  await assert.rejects(client.call(''), RangeError);
  await assert.rejects(client.call('x'.repeat(256)), RangeError);
  await assert.rejects(client.call('a/b', () => {}), TypeError);
  await assert.rejects(client.call('a/b', 'x'.repeat(2 << 20)), RangeError);
  await assert.rejects(client.join(''), RangeError);
  await assert.rejects(client.call('a/b', null, { timeout: 2 ** 31 }), RangeError);
  await assert.rejects(client.call('a/b', null, { timeout: -1 }), RangeError);
  assert.throws(() => client.handle('a/b', 'not a function'), TypeError);
  client.close();
});

test('keepalive: a silent server is pinged, then given up with 1001 HP_IDLE_TIMEOUT, and the client reconnects', async () => {
  const { client, net, clock } = connected({ keepaliveInterval: 1000, idleTimeout: 3000 });
  const ws = net.last;
  const seen = states(client);
  const answer = client.call('a/b', null, { timeout: 0 });
  await settle();
  clock.advance(999);
  await settle();
  assert.deepEqual(ws.packets.map((p) => p.kind), ['call']);
  clock.advance(1);
  await settle();
  assert.deepEqual(ws.packets.map((p) => p.kind), ['call', 'ping']);
  clock.advance(1999);
  assert.equal(ws.closedWith, null, 'given up before the Ping had idleTimeout - keepaliveInterval');
  clock.advance(1);
  assert.deepEqual(ws.closedWith, { code: 4001, reason: 'HP_IDLE_TIMEOUT' });
  await assert.rejects(answer, (err) => err instanceof CloseError && err.code === 1001 && err.reason === 'HP_IDLE_TIMEOUT');
  assert.equal(seen[0].state, 'reconnecting');
  assert.equal(seen[0].error.code, 1001);
  clock.advance(seen[0].delay);
  assert.equal(net.sockets.length, 2, 'reconnected');
  client.close();
});

test('keepalive: an answered Ping and any other message count as life', async () => {
  const { client, net, clock } = connected({ keepaliveInterval: 1000, idleTimeout: 3000 });
  const ws = net.last;
  for (let i = 0; i < 10; i++) {
    clock.advance(1000);
    await settle();
    assert.equal(ws.packets.at(-1).kind, 'ping');
    clock.advance(500);
    ws.receive({ kind: 'pong', data: new Uint8Array(0) });
  }
  const pings = ws.packets.length;
  for (let i = 0; i < 10; i++) {
    clock.advance(900);
    ws.receive({ kind: 'event', event: 'tick', payload: json(i) });
  }
  await settle();
  assert.equal(ws.packets.length, pings, 'no Ping while the server talks');
  assert.equal(ws.closedWith, null);
  assert.equal(client.state, 'open');
  client.close();
});

test('keepalive: a page whose timers run a minute late still pings before it gives up', async () => {
  // Chrome aligns the timers of a long-hidden tab to the minute.
  const env = newClient({ keepaliveInterval: 25_000, idleTimeout: 60_000 });
  const { client, net, clock } = env;
  const setTimeout = clock.setTimeout;
  clock.setTimeout = (fn, ms) => setTimeout(fn, Math.ceil(ms / 60_000) * 60_000);
  net.last.open();
  const ws = net.last;
  for (let i = 0; i < 5; i++) {
    clock.advance(60_000);
    await settle();
    assert.equal(ws.packets.at(-1)?.kind, 'ping', `minute ${i + 1}: a Ping, not a timeout`);
    assert.equal(ws.closedWith, null);
    ws.receive({ kind: 'pong', data: new Uint8Array(0) });
  }
  clock.advance(120_000); // the last Ping goes unanswered
  assert.deepEqual(ws.closedWith, { code: 4001, reason: 'HP_IDLE_TIMEOUT' });
  client.close();
});

// A keepalive Ping went through the send queue: behind a backlog (the
// carrier over maxBuffered, packets waiting for it to drain) it waited,
// or was dropped when maxQueue packets waited, and a live server that
// read at the link's pace but had nothing to say was given up at
// idleTimeout. Pings and Pongs now go ahead of the queue.
test('keepalive: a Ping goes ahead of a backlog, and a server that answers it is kept', async () => {
  const { client, net, clock } = connected({ keepaliveInterval: 1000, idleTimeout: 3000, maxBuffered: 1000, maxQueue: 2 });
  const ws = net.last;
  ws.bufferedAmount = 1001; // the link is slower than the page
  client.event('e', 1);
  client.event('e', 2); // the queue is full
  for (let i = 0; i < 5; i++) {
    clock.advance(2000); // a Ping within, answered at the end
    await settle();
    assert.deepEqual(ws.packets.map((p) => p.kind), Array(i + 1).fill('ping'), `round ${i + 1}`);
    ws.receive({ kind: 'pong', data: new Uint8Array(0) });
  }
  assert.equal(ws.closedWith, null, 'a server that answers every Ping was given up');
  assert.equal(client.state, 'open');
  // A Pong goes ahead of the queue too, but not past maxBuffered.
  ws.receive({ kind: 'ping', data: 'a' });
  ws.bufferedAmount = 0;
  ws.receive({ kind: 'ping', data: 'b' });
  assert.deepEqual(ws.packets.filter((p) => p.kind === 'pong').map((p) => text(p.data)), ['b']);
  clock.advance(10);
  await settle();
  assert.deepEqual(decodePacket(ws.packets.at(-1).items[1]).kind, 'event', 'the queue left once the carrier drained');
  client.close();
});

test('keepalive: idleTimeout 0 sends no Ping and never times out; bad values are refused', async () => {
  const { client, net, clock } = connected({ idleTimeout: 0 });
  clock.advance(3_600_000);
  await settle();
  assert.deepEqual(net.last.packets, []);
  assert.equal(client.state, 'open');
  client.close();
  const make = (options) => () => new Client('ws://test.invalid/ws', { WebSocket: fakeSockets().FakeWebSocket, ...options });
  assert.throws(make({ keepaliveInterval: 60_000, idleTimeout: 60_000 }), RangeError);
  assert.throws(make({ keepaliveInterval: 0 }), RangeError);
  assert.throws(make({ idleTimeout: -1 }), RangeError);
});

// Reconnect audit of the browser client (the Go client's findings 2-6 and
// what else its reconnect, close and queue paths got wrong).

test('a server that closes at once after the upgrade is never reported open, and the backoff keeps growing', () => {
  // A refused reconnect (over quota, authentication refused after the
  // handshake): 'open' was reported at every attempt.
  const { client, net, clock } = newClient();
  const seen = states(client);
  const delays = [];
  for (let i = 0; i < 5; i++) {
    net.last.open({ capabilities: false });
    net.last.drop(1008, 'HP_UNAUTHORIZED');
    delays.push(seen.at(-1).delay);
    clock.advance(seen.at(-1).delay);
  }
  assert.deepEqual(delays, [250, 500, 1000, 2000, 4000]);
  assert.deepEqual(seen.filter((s) => s.state === 'open'), [], 'open without the server\'s capabilities');
  client.close();
});

test('a server that hangs after the upgrade is given up at connectTimeout, and the backoff keeps growing', async () => {
  // The connect timeout ended at the upgrade: a call queued for a server
  // that never sent its capabilities waited until idleTimeout (60 s)
  // instead of connectTimeout (10 s).
  const { client, net, clock } = newClient();
  const seen = states(client);
  const answer = client.call('a/b', null, { timeout: 0 });
  const delays = [];
  for (let i = 0; i < 4; i++) {
    const ws = net.last;
    ws.open({ capabilities: false });
    clock.advance(9_999);
    assert.equal(net.sockets.length, i + 1, 'not given up before connectTimeout');
    clock.advance(1);
    assert.ok(ws.closedWith, 'the hung socket is closed at connectTimeout');
    assert.equal(ws.closedWith.code, 1000, 'the server is told the client gave up (1000, as the Go client\'s Dial does), not left to read 1005');
    assert.equal(seen.at(-1).state, 'reconnecting');
    assert.equal(seen.at(-1).error.reason, 'HP_ERR_CONNECT_TIMEOUT');
    delays.push(seen.at(-1).delay);
    clock.advance(seen.at(-1).delay);
  }
  // Waiting 10 s for capabilities is not 10 s of service.
  assert.deepEqual(delays, [250, 500, 1000, 2000]);
  assert.deepEqual(seen.filter((s) => s.state === 'open'), []);
  const ws = net.last;
  ws.open();
  await settle();
  assert.equal(ws.packets[0].method, 'a/b', 'the queued call leaves on the connection that serves');
  ws.receive({ kind: 'result', id: ws.packets[0].id, payload: json(7) });
  assert.equal(await answer, 7);
  assert.equal(seen.at(-1).state, 'open');
  client.close();
});

test('a keepalive Ping or a Pong that finds the queue full before the server\'s capabilities does not throw', async () => {
  // #add threw the queue-full RPCError out of the liveness timer (an
  // uncaught exception; the liveness watch stopped) and out of onmessage.
  const { client, net, clock } = newClient({ connectTimeout: 0, keepaliveInterval: 1000, idleTimeout: 3000, maxQueue: 2 });
  const seen = states(client);
  net.last.open({ capabilities: false });
  const calls = [client.call('a/b'), client.call('a/b')];
  for (const c of calls) c.catch(() => {});
  assert.doesNotThrow(() => net.last.receive({ kind: 'ping', data: 'x' }));
  assert.doesNotThrow(() => clock.advance(1000));
  clock.advance(2000);
  assert.equal(seen.at(-1).state, 'reconnecting', 'the silent server is given up at idleTimeout');
  assert.equal(seen.at(-1).error.reason, 'HP_IDLE_TIMEOUT');
  client.close();
});

test('an ask handler that rejects with its signal\'s reason when the connection ends is not reported as an error', async () => {
  for (const [end, how] of [['close', 'reason'], ['drop', 'reason'], ['close', 'AbortError']]) {
    const { client, net } = connected();
    const reported = [];
    client.onError((err) => reported.push(err));
    let signal;
    client.handle('slow', (params, meta) => {
      signal = meta.signal;
      return new Promise((resolve, reject) => meta.signal.addEventListener('abort', () => {
        reject(how === 'reason' ? meta.signal.reason : new DOMException('The operation was aborted', 'AbortError'));
      }));
    });
    net.last.receive({ kind: 'ask', id: 1, method: 'slow', timeout: 0, payload: '' });
    await settle();
    if (end === 'close') client.close(); else net.last.drop(1006);
    await settle();
    assert.equal(signal.aborted, true);
    assert.deepEqual(reported.map((e) => e.message), [], `after ${end}, rejected with ${how}`);
    client.close();
  }
});

test('a join that fails does not forget its room when a later join of it is in flight or done', async () => {
  // Two joins of one room: the first timing out deleted the room the
  // second joined, so emits were refused and no reconnect rejoined it.
  const { client, net, clock } = connected();
  const first = client.join('lobby', { timeout: 100 });
  await settle();
  const second = client.join('lobby');
  await settle();
  const ids = net.last.packets.map((p) => p.id);
  assert.equal(ids.length, 2);
  clock.advance(100);
  await assert.rejects(first, (err) => err instanceof RPCError && err.code === Code.Timeout);
  net.last.receive({ kind: 'result', id: ids[1], payload: json({ room: 'lobby', members: 1 }) });
  await second;
  assert.deepEqual(client.rooms, ['lobby']);
  assert.doesNotThrow(() => client.emit('lobby', 'x', 1));
  await settle();
  net.last.drop(1006);
  clock.advance(250);
  net.last.open();
  assert.deepEqual(net.last.packets.map((p) => [p.kind, p.room]), [['join', 'lobby']], 'rejoined');
  client.close();
});

test('a join or leave refused for its arguments leaves the rooms as they were', async () => {
  // join added the room before its timeout was checked: a join refused
  // at once was rejoined at every reconnect, and emits to it were sent.
  const { client, net, clock } = connected();
  await assert.rejects(client.join('lobby', { timeout: -1 }), RangeError);
  assert.deepEqual(client.rooms, []);
  assert.throws(() => client.emit('lobby', 'x', 1), /not a member/);
  const joined = client.join('hall');
  await settle();
  net.last.receive({ kind: 'result', id: net.last.packets[0].id, payload: json({ room: 'hall', members: 1 }) });
  await joined;
  await assert.rejects(client.leave('hall', { timeout: 2 ** 40 }), RangeError);
  assert.deepEqual(client.rooms, ['hall']);
  net.last.drop(1006);
  clock.advance(250);
  net.last.open();
  assert.deepEqual(net.last.packets.map((p) => [p.kind, p.room]), [['join', 'hall']]);
  client.close();
});

test('an ask\'s timeout timer ends with its connection, even when the handler never settles', async () => {
  // It was cleared only when the handler settled: under Node, a closed
  // client's process stayed alive until the ask's timeout (up to 24.8 days).
  for (const end of ['close', 'drop']) {
    const { client, net, clock } = connected({ reconnect: false });
    let signal;
    client.handle('stuck', (params, meta) => { signal = meta.signal; return new Promise(() => {}); });
    net.last.receive({ kind: 'ask', id: 1, method: 'stuck', timeout: 60_000, payload: '' });
    await settle();
    if (end === 'close') client.close(); else net.last.drop(1006);
    assert.equal(signal.aborted, true);
    assert.equal(clock.nextIn(), Infinity, `a timer left after ${end}`);
  }
});

test('emitUnreliable sends no datagram before the server\'s capabilities; the emit waits behind the rejoin', async () => {
  // It went out as soon as the carrier opened: before the server's
  // capabilities (PROTOCOL.md §4.9) and before the rejoin, so a server
  // dropped it as a non-member's.
  const { client, net, clock } = connected();
  const joined = client.join('r');
  await settle();
  net.last.receive({ kind: 'result', id: net.last.packets[0].id, payload: json({ room: 'r', members: 1 }) });
  await joined;
  net.last.drop(1006);
  clock.advance(250);
  const ws = net.last;
  const datagrams = [];
  ws.transmitUnreliable = (packet) => { datagrams.push(packet); return true; };
  ws.open({ capabilities: false });
  client.emitUnreliable('r', 'pos', { x: 1 });
  await settle();
  assert.deepEqual(datagrams, []);
  assert.equal(client.unreliableSent, 0);
  ws.receive({ kind: 'capabilities', pairs: [['codec', 'json']] });
  await settle();
  const items = ws.packets[0].items.map((i) => decodePacket(i));
  assert.deepEqual(items.map((p) => [p.kind, p.room]), [['join', 'r'], ['emit', 'r']]);
  client.emitUnreliable('r', 'pos', { x: 2 });
  assert.equal(datagrams.length, 1, 'once open, a datagram');
  client.close();
});

test('a leave issued while a join of the room is in flight sticks across a reconnect', async () => {
  // The Go client's finding 3: the join's later answer recorded the room.
  const { client, net, clock } = connected();
  const joined = client.join('lobby');
  await settle();
  const left = client.leave('lobby');
  await settle();
  const [join, leave] = net.last.packets;
  net.last.receive({ kind: 'result', id: join.id, payload: json({ room: 'lobby', members: 1 }) });
  net.last.receive({ kind: 'result', id: leave.id, payload: json({ room: 'lobby', members: 0 }) });
  await joined;
  await left;
  assert.deepEqual(client.rooms, []);
  net.last.drop(1006);
  clock.advance(250);
  net.last.open();
  assert.deepEqual(net.last.packets, [], 'nothing rejoined');
  client.close();
});

test('a call issued in the task whose connection drops leaves on the next connection', async () => {
  // The Go client's finding 1 (a call registered after the drop had
  // failed the table waited for ever): here it waits in the queue.
  const { client, net, clock } = connected();
  const answer = client.call('a/b', null, { timeout: 0 });
  net.last.drop(1006);
  await settle();
  clock.advance(250);
  net.last.open();
  await settle();
  assert.equal(net.last.packets[0].method, 'a/b');
  net.last.receive({ kind: 'result', id: net.last.packets[0].id, payload: json(1) });
  assert.equal(await answer, 1);
  client.close();
});

test('no rejoin error is reported after close, with rejoins in flight', async () => {
  // The Go client's finding 5.
  const { client, net, clock } = connected();
  const reported = [];
  client.onError((err) => reported.push(err));
  const joined = [client.join('a'), client.join('b')];
  await settle();
  for (const p of net.last.packets[0].items.map((i) => decodePacket(i))) net.last.receive({ kind: 'result', id: p.id, payload: json({}) });
  await Promise.all(joined);
  net.last.drop(1006);
  clock.advance(250);
  net.last.open();
  await settle();
  assert.equal(net.last.packets[0].kind, 'batch', 'the rejoins are in flight');
  client.close();
  clock.advance(120_000);
  await settle();
  assert.deepEqual(reported, []);
});

// A WebSocket constructor that throws (a URL it refuses) dropped the
// connection inside #connect, which then armed the connect timeout for
// the connection already dropped: a timer left behind after the client
// closed, which kept a Node process alive for connectTimeout.
test('a WebSocket constructor that throws leaves no timer behind once the client is closed', () => {
  class Refusing { constructor() { throw new SyntaxError('bad URL'); } }
  for (const reconnect of [false, undefined]) {
    const clock = fakeClock();
    const client = new Client('ws://test.invalid/ws', { WebSocket: Refusing, timers: clock, random: () => 1, reconnect });
    client.close();
    assert.equal(client.state, 'closed');
    assert.equal(clock.nextIn(), Infinity, `a timer is left (reconnect ${reconnect})`);
  }
});

// A call that timed out while queued stayed in the queue until the next
// connection and counted against maxQueue: a page whose server was down
// for a while had every new call refused as Overloaded ("2 packets
// already wait"), though nothing waited.
test('calls that timed out while queued no longer count against maxQueue', async () => {
  const { client, net, clock } = newClient({ maxQueue: 2, connectTimeout: 0 });
  const expired = [client.call('a/b', 1, { timeout: 100 }), client.call('a/b', 2, { timeout: 100 })];
  clock.advance(100);
  for (const p of expired) await assert.rejects(p, (err) => err instanceof RPCError && err.code === Code.Timeout);
  const later = client.call('a/b', 3);
  const full = client.call('a/b', 4);
  await assert.rejects(client.call('a/b', 5), (err) => err instanceof RPCError && err.code === Code.Overloaded);
  net.last.open();
  await settle();
  const sent = net.last.packets.flatMap((p) => (p.kind === 'batch' ? p.items.map(decodePacket) : [p]));
  assert.deepEqual(sent.map((p) => text(p.payload)), ['3', '4']);
  client.close();
  await assert.rejects(later, CloseError);
  await assert.rejects(full, CloseError);
});

// The server's maxBatch only ever lowered the client's for good, and a
// server that announced no maxMessage inherited the last one's: a server
// that once said maxBatch 1 left every later connection unbatched, and
// one that said 16 MiB let packets over the default 1 MiB go to the next
// server, which closed the connection for them (1009).
test('the server\'s maxBatch and maxMessage hold for its connection only', async () => {
  const { client, net, clock } = newClient();
  net.last.open({ capabilities: false });
  net.last.receive({ kind: 'capabilities', pairs: [['codec', 'json'], ['maxBatch', '1'], ['maxMessage', String(16 << 20)]] });
  net.last.drop();
  clock.advance(250);
  const ws = net.last;
  ws.open({ capabilities: false });
  ws.receive({ kind: 'capabilities', pairs: [['codec', 'json']] });
  const calls = [client.call('a/b', 1), client.call('a/b', 2), client.call('a/b', 3)];
  const big = client.call('a/b', new Uint8Array(2 << 20));
  big.catch(() => {});
  await settle();
  assert.deepEqual(ws.packets.map((p) => (p.kind === 'batch' ? p.items.length : 1)), [3], 'the 2 MiB call was sent, or the rest unbatched');
  await assert.rejects(big, (err) => err instanceof RangeError && /limit of 1048576/.test(err.message));
  client.close();
  await Promise.allSettled(calls);
});

// Pongs (and ask answers) queued for a connection whose server's
// capabilities had not come stayed queued after it dropped, counting
// against maxQueue: a server that pinged before its capabilities and then
// dropped left calls refused as Overloaded while reconnecting.
test('packets queued for a connection that dropped no longer count against maxQueue', async () => {
  const { client, net, clock } = newClient({ maxQueue: 2 });
  net.last.open({ capabilities: false });
  net.last.receive({ kind: 'ping', data: 'a' });
  net.last.receive({ kind: 'ping', data: 'b' });
  net.last.drop();
  const calls = [client.call('a/b', 1), client.call('a/b', 2)];
  clock.advance(250);
  net.last.open();
  await settle();
  const sent = net.last.packets.flatMap((p) => (p.kind === 'batch' ? p.items.map(decodePacket) : [p]));
  assert.deepEqual(sent.map((p) => p.kind), ['call', 'call']);
  client.close();
  await Promise.allSettled(calls);
});

// Errors nobody else would see go to reportError, or to console.error
// where there is none (Node): an onError listener that threw went to
// reportError only, so in Node its error vanished without a trace.
test('an onError listener that throws is reported where there is no reportError', () => {
  const { client, net } = connected();
  const logged = [];
  const { error } = console;
  const { reportError } = globalThis;
  console.error = (err) => logged.push(err?.message);
  globalThis.reportError = undefined;
  try {
    client.onError(() => { throw new Error('listener failed'); });
    client.on('e', () => { throw new Error('boom'); });
    net.last.receive({ kind: 'event', event: 'e', payload: '' });
  } finally {
    console.error = error;
    globalThis.reportError = reportError;
  }
  assert.deepEqual(logged, ['listener failed']);
  client.close();
});

// An answer over the server's maxMessage was refused at the flush and
// only reported: the server's Ask waited for its timeout, and its caller
// never learnt why. The Go client answers Internal "answer over the
// message limit" instead, and so does this one now.
test('an answer over the server\'s limit is replaced by an Internal error answer', async () => {
  const { client, net } = newClient();
  const ws = net.last;
  ws.open({ capabilities: false });
  ws.receive({ kind: 'capabilities', pairs: [['codec', 'json'], ['maxMessage', '1024']] });
  const reported = [];
  client.onError((err) => reported.push(err));
  client.handle('big', () => 'x'.repeat(2000));
  ws.receive({ kind: 'ask', id: 7, method: 'big', timeout: 0, payload: '' });
  await settle();
  const answers = ws.packets.filter((p) => p.kind === 'answer');
  assert.deepEqual(answers.map((a) => [a.id, a.status, a.code, a.message]), [[7, 1, Code.Internal, 'answer over the message limit']]);
  assert.equal(reported.length, 1);
  assert.ok(reported[0] instanceof RangeError && /over the server's limit of 1024/.test(reported[0].message));
  client.close();
});

// The client had no receive limit of its own: a WebSocket or data channel
// message of any size was decoded, and a WebTransport packet of up to
// 64 MiB was collected before anything looked at it. maxReceive bounds
// them (1009, PROTOCOL.md §7), and the capabilities announce it (§4.9), so
// that a server answers a result over it with an error instead.
test('a message over maxReceive closes the connection with 1009 HP_ERR_MESSAGE_TOO_BIG', async () => {
  const { client, net } = connected({ maxReceive: 1000, reconnect: false });
  const ws = net.last;
  assert.deepEqual(ws.sent[0].pairs, [['codec', 'json'], ['maxMessage', '1000']]);
  const answer = client.call('a/b');
  answer.catch(() => {});
  await settle();
  const call = ws.packets[0];
  ws.receive({ kind: 'event', event: 'tick', payload: new Uint8Array(1000 - 6) }); // 1000 bytes: taken
  assert.equal(client.state, 'open');
  ws.receive({ kind: 'result', id: call.id, payload: new Uint8Array(1000) });
  await assert.rejects(answer, (err) => err instanceof CloseError && err.code === 1009 && err.reason === 'HP_ERR_MESSAGE_TOO_BIG');
  assert.deepEqual(ws.closedWith, { code: 4009, reason: 'HP_ERR_MESSAGE_TOO_BIG' });
  assert.equal(client.state, 'closed');
});

// Nothing watched the carrier's bufferedAmount: a page sending faster than
// its link (emits in a loop, calls it does not wait for) grew the
// browser's send buffer without bound. Past maxBuffered, packets now wait
// in the queue, which maxQueue bounds as while disconnected: calls wait
// (their timeouts running), and past maxQueue everything fails with
// Overloaded (7), thrown by the sends that return nothing.
test('past maxBuffered, packets wait in the queue; past maxQueue they fail with Overloaded', async () => {
  const { client, net, clock } = connected({ maxBuffered: 1000, maxQueue: 3 });
  const ws = net.last;
  ws.bufferedAmount = 1001; // the link is slower than the page
  client.event('e', 1);
  const answer = client.call('a/b', 1);
  client.notify('n/n', 3);
  await settle();
  assert.deepEqual(ws.packets, [], 'sent past maxBuffered');
  assert.throws(() => client.event('e', 4), (err) => err instanceof RPCError && err.code === Code.Overloaded);
  await assert.rejects(client.call('a/b', 5), (err) => err instanceof RPCError && err.code === Code.Overloaded);
  clock.advance(1000);
  await settle();
  assert.deepEqual(ws.packets, [], 'sent while still over maxBuffered');
  ws.bufferedAmount = 1000;
  clock.advance(1000);
  await settle();
  const batch = ws.packets;
  assert.equal(batch.length, 1);
  assert.deepEqual(batch[0].items.map((b) => decodePacket(b).kind), ['event', 'call', 'call']);
  const call = decodePacket(batch[0].items[1]);
  ws.receive({ kind: 'result', id: call.id, payload: json('ok') });
  assert.equal(await answer, 'ok');
  client.close();
});

// A flush of many packets stops as soon as the carrier is over
// maxBuffered, so that one task's burst does not fill the browser's buffer
// either: the rest waits its turn.
test('a flush stops sending once the carrier is over maxBuffered; close() sends the rest', async () => {
  const { client, net } = connected({ maxBuffered: 50_000 });
  const ws = net.last;
  ws.bufferedAmount = 0;
  const send = ws.send.bind(ws);
  ws.send = (data) => { send(data); ws.bufferedAmount += data.length; };
  const calls = [1, 2, 3].map((n) => client.call('a/b', new Uint8Array(40_000).fill(n), { raw: true }));
  for (const c of calls) c.catch(() => {});
  await settle();
  assert.equal(ws.packets.length, 2, 'a 40 KB call after 80 KB buffered was sent');
  client.close();
  assert.equal(ws.packets.length, 3, 'close() left a queued call unsent');
  await assert.rejects(calls[2], (err) => err instanceof CloseError && err.code === 1000);
});

// With a connectTimeout under about 4 s, a WebTransport whose UDP port a
// firewall drops never fell back to WebSocket: Chromium gives up on it
// only after about 4 s, the connect timeout ended the attempt first, and
// the next attempt tried WebTransport again. A carrier that neither opens
// nor fails now gets only its share of the connect timeout.
test('a WebTransport that hangs gives way to WebSocket within a short connectTimeout', () => {
  const sessions = [];
  class HungWebTransport {
    constructor() {
      this.ready = new Promise(() => {}); // a silent UDP port
      this.closed = new Promise((resolve) => { this.end = resolve; });
      sessions.push(this);
    }
    close(info) { this.closeInfo = info; this.end(info); }
  }
  const { client, net, clock } = newClient({
    connectTimeout: 3000,
    webTransport: { url: 'https://test.invalid/wt', WebTransport: HungWebTransport },
  });
  assert.equal(sessions.length, 1);
  assert.equal(net.sockets.length, 0);
  clock.advance(3000 - 1);
  assert.equal(net.sockets.length, 1, 'no WebSocket within connectTimeout');
  assert.ok(sessions[0].closeInfo, 'the hung session was left open');
  net.last.open();
  assert.equal(client.state, 'open');
  assert.equal(client.carrier, 'websocket');
  client.close();
});
