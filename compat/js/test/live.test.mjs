// End-to-end tests of the client against the real server command,
// `go run ./compat/cmd/hotpath`, over loopback, with Node's own WebSocket
// (global from Node 22; Node 20 needs --experimental-websocket).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client, RPCError, CloseError, Code } from '../hotpath.js';

const repo = fileURLToPath(new URL('../../..', import.meta.url));
const skip = typeof WebSocket === 'undefined'
  ? 'no global WebSocket: run node with --experimental-websocket on Node 20'
  : false;

let dir;
let binary;
let server; // {child, addr}

/** startServer runs the built command on addr and resolves once it listens. */
function startServer(addr) {
  return new Promise((resolve, reject) => {
    const child = spawn(binary, ['-addr', addr, '-ticker', '100ms'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let errOut = '';
    child.stderr.on('data', (b) => { errOut += b; });
    child.stdout.on('data', (b) => {
      out += b;
      const m = out.match(/http:\/\/([0-9.]+:[0-9]+)/);
      if (m) resolve({ child, addr: m[1] });
    });
    child.on('exit', (code) => reject(new Error(`server exited with ${code}: ${out}${errOut}`)));
  });
}

function stopServer(s) {
  return new Promise((resolve) => {
    if (s.child.exitCode !== null) return resolve();
    s.child.once('exit', resolve);
    s.child.kill('SIGTERM');
  });
}

/** until resolves once fn() is truthy, checking every 10 ms. */
async function until(fn, what, ms = 5000) {
  const end = Date.now() + ms;
  while (!fn()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

function connect() {
  return new Client(`ws://${server.addr}/ws`, { reconnect: { minDelay: 50, maxDelay: 200 } });
}

// HOTPATH_BIN names a built ./compat/cmd/hotpath to use instead of
// building one.
before(async () => {
  if (skip) return;
  binary = process.env.HOTPATH_BIN;
  if (!binary) {
    dir = mkdtempSync(join(tmpdir(), 'hotpath-js-'));
    binary = join(dir, 'hotpath');
    execFileSync('go', ['build', '-o', binary, './compat/cmd/hotpath'], { cwd: repo, stdio: 'inherit' });
  }
  server = await startServer('127.0.0.1:0');
}, { timeout: 300_000 });

after(async () => {
  if (server) await stopServer(server);
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test('calls: time/now, echo/say, batches, errors', { skip }, async () => {
  const c = connect();
  try {
    const { now } = await c.call('time/now');
    assert.ok(!Number.isNaN(Date.parse(now)), `time/now answered ${now}`);
    assert.match(c.capabilities.server, /^hotpath\//);
    assert.deepEqual(await c.call('echo/say', { text: 'héllo' }), { text: 'héllo' });
    // 50 calls in one task: one Batch each way, every answer matched by id.
    const answers = await Promise.all(Array.from({ length: 50 }, (_, i) => c.call('echo/say', { text: `#${i}` })));
    assert.deepEqual(answers.map((a) => a.text), Array.from({ length: 50 }, (_, i) => `#${i}`));
    await assert.rejects(c.call('no/such'), (err) => err instanceof RPCError && err.code === Code.NotFound);
    await assert.rejects(c.call('echo/say', { text: 42 }), (err) => err instanceof RPCError && err.code === Code.InvalidParams);
  } finally {
    c.close();
  }
});

test('rooms: presence, emits to all and to all but the sender, ticker', { skip }, async () => {
  const a = connect();
  const b = connect();
  try {
    const atB = [];
    b.onRoom('lobby', 'message', (d) => atB.push(d.text));
    b.onRoom('lobby', '$join', (d) => atB.push(`$join ${d.members}`));
    b.onRoom('lobby', '$leave', (d) => atB.push(`$leave ${d.members}`));
    const atA = [];
    a.onRoom('lobby', 'message', (d) => atA.push(d.text));
    assert.deepEqual(await b.join('lobby'), { room: 'lobby', members: 1 });
    assert.deepEqual(await a.join('lobby'), { room: 'lobby', members: 2 });
    // Presence is coalesced (100 ms by default): b learns the count 2,
    // perhaps after a count 1 if the two joins fell into two intervals.
    await until(() => atB.at(-1) === '$join 2', 'presence at b');
    a.emit('lobby', 'message', { name: 'a', text: 'to all', at: Date.now() });
    a.emit('lobby', 'message', { name: 'a', text: 'to others', at: Date.now() }, { exceptSelf: true });
    await until(() => atB.includes('to others'), 'the emits at b');
    assert.deepEqual(await a.leave('lobby'), { room: 'lobby', members: 1 });
    await until(() => atB.at(-1) === '$leave 1', 'presence at b');
    assert.deepEqual(atB.filter((x) => !x.startsWith('$')), ['to all', 'to others']);
    assert.deepEqual(atA, ['to all']);
    assert.throws(() => a.emit('lobby', 'message', {}), /not a member/);

    const ticks = [];
    a.onRoom('ticker', 'tick', (t) => ticks.push(t));
    await a.join('ticker');
    // The ticker room takes no client emits (the demo's AllowEmit): a
    // made-up tick reaches nobody, a's own listener included.
    a.emit('ticker', 'tick', { symbol: 'FAKE', price: -1, at: 0 });
    const after = ticks.length;
    await until(() => ticks.length >= after + 3, 'ticks');
    assert.ok(!ticks.some((t) => t.symbol === 'FAKE'), 'a client emit reached the ticker room');
    for (const t of ticks) {
      assert.equal(typeof t.symbol, 'string');
      assert.equal(typeof t.price, 'number');
      assert.equal(typeof t.at, 'number');
    }
  } finally {
    a.close();
    b.close();
  }
});

test('keepalive: the server answers the client\'s Ping packets, so a quiet connection stays up', { skip }, async () => {
  // A Pong may take most of 550 ms on a loaded machine.
  const c = new Client(`ws://${server.addr}/ws`, { keepaliveInterval: 50, idleTimeout: 600, reconnect: false });
  try {
    const states = [];
    c.onState((s) => states.push(s));
    await c.call('time/now');
    await new Promise((r) => setTimeout(r, 2000)); // three idle timeouts, nothing but Pings
    await c.call('time/now');
    assert.deepEqual(states.map((s) => s.state), ['open'], 'the connection never dropped');
  } finally {
    c.close();
  }
});

test('reconnect after the server restarts: close code surfaced, rooms rejoined', { skip }, async () => {
  const watcher = connect();
  const c = connect();
  try {
    const states = [];
    c.onState((s) => states.push(s));
    await c.join('lobby');
    await watcher.join('lobby');
    const addr = server.addr;
    await stopServer(server);
    await until(() => states.some((s) => s.state === 'reconnecting'), 'reconnecting');
    // A graceful Shutdown closes every peer with 1001 (PROTOCOL.md §7).
    const dropped = states.find((s) => s.state === 'reconnecting');
    assert.ok(dropped.error instanceof CloseError);
    assert.equal(dropped.error.code, 1001);
    server = await startServer(addr);
    await until(() => c.state === 'open' && watcher.state === 'open', 'both reconnected', 10_000);
    const atWatcher = [];
    watcher.onRoom('lobby', 'message', (d) => atWatcher.push(d.text));
    // c emits at once: the emit waits for c's rejoin, which went first.
    // The watcher's rejoin is done once a call sent after it is answered
    // (the server serves a connection's packets in order); without that
    // wait the emit could reach the room before the watcher was back in it.
    await until(() => c.rooms.includes('lobby'), 'room kept');
    await watcher.call('time/now');
    await c.call('time/now');
    c.emit('lobby', 'message', { text: 'back' });
    await until(() => atWatcher.includes('back'), 'the emit after rejoin');
  } finally {
    c.close();
    watcher.close();
  }
});
