// Node `ws` as a raw WebSocket client of `hotpath -echo` and of the RPC
// endpoint: every permessage-deflate offer ws can make (no_context_takeover
// each way, window bits 8-15 each way, several offers in one header),
// messages from 0 B to 16 MiB, whole and fragmented. A tap proxy between
// client and server counts compressed frames each way on the wire.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import WebSocket from 'ws';
import { start, stop } from './lib/server.mjs';
import { startTap } from './lib/tap.mjs';
import * as proto from './lib/proto.mjs';

const MiB = 1 << 20;
// Every test is bounded: a server that never answers fails it (the
// waits on the RPC endpoint have no timeout of their own) and the rest
// run; the after hook stops the servers.
const bounded = { timeout: 60_000 };
// The largest message is exactly the server's limit, sent compressed too
// (a compressor makes incompressible data a few bytes longer on the wire).
const maxMessage = 16 * MiB;

let echo; // hotpath -echo: no context takeover (the default)
let echoTakeover; // hotpath -echo -context-takeover
let rpc; // hotpath, demo router
const taps = {};

before(async () => {
  [echo, echoTakeover, rpc] = await Promise.all([
    start(['-echo', '-max-message', String(maxMessage)]),
    start(['-echo', '-context-takeover', '-max-message', String(maxMessage)]),
    start(['-ticker', '1h']),
  ]);
  taps.echo = await startTap(echo.addr);
  taps.echoTakeover = await startTap(echoTakeover.addr);
  taps.rpc = await startTap(rpc.addr);
});

after(async () => {
  for (const t of Object.values(taps)) await t.close();
  await Promise.all([echo, echoTakeover, rpc].filter(Boolean).map((s) => stop(s)));
});

/**
 * open connects and resolves with the open socket, or rejects. ws.answered
 * is the server's Sec-WebSocket-Extensions (ws.extensions has only names).
 */
function open(tap, perMessageDeflate, extra = {}, protocols = []) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`ws://${tap.addr}/ws`, protocols, { perMessageDeflate, maxPayload: 64 * MiB, ...extra });
    ws.binaryType = 'nodebuffer';
    ws.answered = '';
    ws.once('upgrade', (res) => { ws.answered = res.headers['sec-websocket-extensions'] ?? ''; });
    ws.once('open', () => resolve(ws));
    ws.once('error', reject);
  });
}

/** nextMessage resolves with the next message {data, isBinary}. */
function nextMessage(ws, timeout = 30_000) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('no message within the timeout')), timeout);
    const onMessage = (data, isBinary) => { done(); resolve({ data, isBinary }); };
    const onClose = (code, reason) => { done(); reject(new Error(`closed ${code} ${reason}`)); };
    const done = () => { clearTimeout(timer); ws.off('message', onMessage); ws.off('close', onClose); };
    ws.on('message', onMessage);
    ws.on('close', onClose);
  });
}

/** send writes data whole, or in the given number of fragments. */
function send(ws, data, { binary, fragments = 1 }) {
  if (fragments <= 1) {
    ws.send(data, { binary });
    return;
  }
  const step = Math.ceil(data.length / fragments);
  for (let i = 0; i < fragments; i++) {
    ws.send(data.subarray(i * step, Math.min((i + 1) * step, data.length)), { binary, fin: i === fragments - 1 });
  }
}

async function roundTrip(ws, data, opts) {
  const got = nextMessage(ws);
  send(ws, data, opts);
  const { data: back, isBinary } = await got;
  assert.equal(isBinary, opts.binary, 'message type');
  assert.equal(back.length, data.length, 'echo length');
  assert.ok(back.equals(data), `echo of ${data.length} bytes differs`);
}

function closeCleanly(ws) {
  return new Promise((resolve, reject) => {
    ws.once('close', (code) => (code === 1000 ? resolve() : reject(new Error(`closed with ${code}`))));
    ws.close(1000);
  });
}

/** text returns n bytes of compressible JSON-like text. */
function text(n) {
  return Buffer.from('{"symbol":"HOT","price":101.25},'.repeat(Math.ceil(n / 32) + 1)).subarray(0, n);
}

/**
 * far returns random blocks of 24 KB down to 300 B, each twice in a row:
 * the repeats compress only by back references as far back as the block,
 * past a 2^8-2^14 byte window. A server that answered server_max_window_bits
 * but compressed with a larger window makes ws's zlib, inflating with the
 * negotiated window, fail on them ("invalid distance too far back").
 */
function far() {
  return Buffer.concat([24000, 6000, 1500, 300].flatMap((n) => { const b = randomBytes(n); return [b, b]; }));
}

/** The messages every offer variant echoes. */
const messages = [
  [Buffer.alloc(0), { binary: false }],
  [text(1), { binary: false }],
  [randomBytes(125), { binary: true }],
  [randomBytes(126), { binary: true }],
  [text(4096), { binary: false }],
  [randomBytes(65536), { binary: true }],
  [text(65536), { binary: false, fragments: 4 }],
  [text(MiB), { binary: true, fragments: 16 }],
  [randomBytes(3000), { binary: true, fragments: 3 }],
  [far(), { binary: true }],
];

/** The permessage-deflate options of ws, one variant per case. */
const offers = [
  ['no extension', false, ''],
  ['ws default (client_max_window_bits)', {}, 'permessage-deflate'],
  ['threshold 0: every message compressed', { threshold: 0 }, 'permessage-deflate'],
  ['server_no_context_takeover', { serverNoContextTakeover: true }, 'permessage-deflate'],
  ['client_no_context_takeover', { clientNoContextTakeover: true }, 'permessage-deflate'],
  ['no_context_takeover both ways', { serverNoContextTakeover: true, clientNoContextTakeover: true }, 'permessage-deflate'],
];
for (let bits = 8; bits <= 15; bits++) {
  offers.push([`server_max_window_bits=${bits}`, { serverMaxWindowBits: bits }, `server_max_window_bits=${bits}`]);
  offers.push([`client_max_window_bits=${bits}`, { clientMaxWindowBits: bits }, 'permessage-deflate']);
  offers.push([`both windows ${bits} bits`, { serverMaxWindowBits: bits, clientMaxWindowBits: bits, threshold: 0 }, `server_max_window_bits=${bits}`]);
}

/** checkWire asserts the tap saw compressed messages both ways, or none. */
function checkWire(tap, compressed, what) {
  const t = tap.totals();
  if (compressed) {
    assert.ok(t.up.compressed > 0, `${what}: no compressed message client→server (${JSON.stringify(t)})`);
    assert.ok(t.down.compressed > 0, `${what}: no compressed message server→client (${JSON.stringify(t)})`);
  } else {
    assert.equal(t.up.compressed + t.down.compressed, 0, `${what}: RSV1 without the extension`);
  }
}

for (const [server, tapName] of [['echo', 'echo'], ['echo -context-takeover', 'echoTakeover']]) {
  for (const [name, pmd, mustContain] of offers) {
    test(`ws → hotpath ${server}: ${name}`, bounded, async () => {
      const tap = taps[tapName];
      tap.reset();
      const ws = await open(tap, pmd);
      try {
        if (pmd === false) assert.equal(ws.answered, '');
        else assert.match(ws.answered, new RegExp(mustContain));
        for (const [data, opts] of messages) await roundTrip(ws, data, opts);
        await closeCleanly(ws);
      } finally {
        ws.terminate();
      }
      checkWire(tap, pmd !== false, name);
    });
  }
}

// ws refuses a response with client_no_context_takeover when it was told
// clientNoContextTakeover: false explicitly (its offer is the same as the
// default one). hotpath without -context-takeover always answers it (RFC
// 7692 §7.1.1.2: "A server MAY include" it), so that configuration needs a
// server with context takeover.
test('ws clientNoContextTakeover: false explicitly', bounded, async () => {
  const plain = await open(taps.echo, {});
  assert.match(plain.answered, /client_no_context_takeover/);
  await closeCleanly(plain);
  await assert.rejects(open(taps.echo, { clientNoContextTakeover: false }), /Invalid Sec-WebSocket-Extensions header/);
  const ws = await open(taps.echoTakeover, { clientNoContextTakeover: false });
  assert.equal(ws.answered, 'permessage-deflate');
  await roundTrip(ws, text(5000), { binary: false });
  await closeCleanly(ws);
});

// Several offers in one header, written by finishRequest (ws itself sends
// one). The server takes the first it can accept (RFC 7692 §5); ws then
// checks the answer against its own configuration.
const multiOffers = [
  ['invalid first offer skipped', 'permessage-deflate; server_max_window_bits=7, permessage-deflate; client_max_window_bits=10',
    { clientMaxWindowBits: 10 }, /^permessage-deflate/],
  ['first valid offer preferred', 'permessage-deflate; server_no_context_takeover; server_max_window_bits=10, permessage-deflate',
    { serverNoContextTakeover: true, serverMaxWindowBits: 10 }, /server_max_window_bits=10/],
  ['unknown extension before it', 'x-webkit-deflate-frame, permessage-deflate; client_max_window_bits', {}, /^permessage-deflate/],
  ['unknown parameter in the first', 'permessage-deflate; mystery, permessage-deflate; client_max_window_bits=12',
    { clientMaxWindowBits: 12 }, /^permessage-deflate/],
];
for (const [name, header, pmd, want] of multiOffers) {
  test(`ws → hotpath echo: several offers: ${name}`, bounded, async () => {
    taps.echo.reset();
    const ws = await open(taps.echo, pmd, {
      finishRequest(req) {
        req.setHeader('Sec-WebSocket-Extensions', header);
        req.end();
      },
    });
    try {
      assert.match(ws.answered, want);
      for (const [data, opts] of messages.slice(4)) await roundTrip(ws, data, opts);
      await closeCleanly(ws);
    } finally {
      ws.terminate();
    }
    checkWire(taps.echo, true, name);
  });
}

// Messages from 0 B to 16 MiB, whole and fragmented, with and without
// compression.
for (const [name, pmd] of [['no extension', false], ['permessage-deflate', {}]]) {
  test(`ws → hotpath echo: 0 B to 16 MiB, ${name}`, { timeout: 120_000 }, async () => {
    taps.echo.reset();
    const ws = await open(taps.echo, pmd);
    try {
      for (const n of [0, 1, 125, 126, 127, 65535, 65536, MiB]) {
        await roundTrip(ws, randomBytes(n), { binary: true });
        await roundTrip(ws, text(n), { binary: false, fragments: n > 8 ? 8 : 1 });
      }
      await roundTrip(ws, text(16 * MiB), { binary: false });
      await roundTrip(ws, randomBytes(16 * MiB), { binary: true, fragments: 16 });
      await closeCleanly(ws);
    } finally {
      ws.terminate();
    }
    checkWire(taps.echo, pmd !== false, name);
  });
}

// Context takeover both ways: each message compresses against the ones
// before it, on both sides, for a run of messages.
test('ws → hotpath echo -context-takeover: a run of 40 messages with takeover both ways', bounded, async () => {
  taps.echoTakeover.reset();
  const ws = await open(taps.echoTakeover, { threshold: 0 });
  assert.equal(ws.answered, 'permessage-deflate');
  const base = randomBytes(40000);
  try {
    for (let i = 0; i < 40; i++) {
      const msg = Buffer.concat([text(300 + 50 * i), base.subarray(0, ((i % 7) + 1) * 5000)]);
      await roundTrip(ws, msg, { binary: true });
    }
    await closeCleanly(ws);
  } finally {
    ws.terminate();
  }
  checkWire(taps.echoTakeover, true, 'takeover run');
});

// The RPC endpoint (subprotocol hotpath.v1): calls, errors, a room shared
// by two ws clients, with and without compression.
for (const [name, pmd] of [['no extension', false], ['permessage-deflate', {}]]) {
  test(`ws → hotpath RPC: calls, errors, room emits, ${name}`, bounded, async () => {
    taps.rpc.reset();
    const a = await open(taps.rpc, pmd, {}, ['hotpath.v1']);
    const b = await open(taps.rpc, pmd);
    assert.equal(a.protocol, 'hotpath.v1');
    const packets = (ws) => {
      const queue = [];
      const waiters = [];
      ws.on('message', (data) => {
        const p = proto.decode(data);
        const w = waiters.findIndex(([pred]) => pred(p));
        if (w >= 0) waiters.splice(w, 1)[0][1](p);
        else queue.push(p);
      });
      return (pred) => {
        const i = queue.findIndex(pred);
        if (i >= 0) return Promise.resolve(queue.splice(i, 1)[0]);
        return new Promise((resolve) => waiters.push([pred, resolve]));
      };
    };
    const fromA = packets(a);
    const fromB = packets(b);
    try {
      const long = 'hotpath '.repeat(400);
      a.send(proto.call(1, 'echo/say', { text: long }));
      assert.deepEqual((await fromA((p) => p.id === 1)).data, { text: long });
      a.send(proto.call(2, 'time/now'));
      assert.ok(!Number.isNaN(Date.parse((await fromA((p) => p.id === 2)).data.now)));
      a.send(proto.call(3, 'no/such'));
      const e = await fromA((p) => p.id === 3);
      assert.equal(e.kind, proto.Kind.Error);
      assert.equal(e.code, 3);

      a.send(proto.join(4, 'lobby'));
      await fromA((p) => p.id === 4);
      b.send(proto.join(5, 'lobby'));
      assert.deepEqual((await fromB((p) => p.id === 5)).data, { room: 'lobby', members: 2 });
      const msg = { name: 'ws-a', text: long, at: Date.now() };
      a.send(proto.emit('lobby', 'message', msg));
      const got = await fromB((p) => p.kind === proto.Kind.Emit && p.event === 'message');
      assert.equal(got.room, 'lobby');
      assert.deepEqual(got.data, msg);
      await Promise.all([closeCleanly(a), closeCleanly(b)]);
    } finally {
      a.terminate();
      b.terminate();
    }
    checkWire(taps.rpc, pmd !== false, name);
  });
}
