// Chromium (Debian's, driven by playwright-core) end to end against the
// `hotpath` demo server: the demo page and a test page make calls, join
// the lobby, receive each other's room emits and those of a Node client,
// over permessage-deflate as Chromium negotiates it, and reconnect after
// the server process is restarted. A tap proxy between Chromium and the
// server parses the frames and counts the compressed ones each way.
// A screenshot of the demo page goes to artifacts/chromium-demo.png.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import WebSocket from 'ws';
import { start, stop, restart } from './lib/server.mjs';
import { startTap } from './lib/tap.mjs';
import * as proto from './lib/proto.mjs';

const here = (p) => fileURLToPath(new URL(p, import.meta.url));
const artifacts = process.env.ARTIFACTS ?? here('../../artifacts/');
const testPage = readFileSync(here('web/test.html'));

let server;
let tap;
let browser;
let demo; // the demo page
let page; // the test page
let base; // http://127.0.0.1:<tap port>

// Every test is bounded: a wait with no timeout of its own (the bulk
// emit coming back) fails its test instead of hanging the run.
const bounded = { timeout: 90_000 };

/** until resolves once fn() resolves truthy, polling every 50 ms. */
async function until(fn, what, ms = 15_000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const demoState = () => demo.evaluate(() => JSON.parse(JSON.stringify(window.hotpathDemo.state)));
const testLog = () => page.evaluate(() => JSON.parse(JSON.stringify(window.hp.log)));

before(async () => {
  server = await start(['-ticker', '200ms']);
  // The tap forwards to the server's address, which a restart keeps, and
  // serves the test page itself from the same origin (the server allows
  // same-origin upgrades only).
  tap = await startTap(() => server.addr, { '/interop-test.html': testPage });
  base = `http://127.0.0.1:${tap.port}`;
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      // Every name resolves nowhere but 127.0.0.1: nothing leaves loopback.
      '--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1',
    ],
  });
  const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
  demo = await context.newPage();
  page = await context.newPage();
  for (const p of [demo, page]) p.on('pageerror', (err) => console.error('page error:', err));
});

after(async () => {
  await browser?.close();
  await tap?.close();
  if (server) await stop(server);
});

test('the demo page connects, calls, joins rooms and receives the ticker', bounded, async () => {
  await demo.goto(`${base}/`);
  await until(async () => (await demoState()).connection === 'open', 'the demo page to connect');
  const s = await until(async () => {
    const st = await demoState();
    return st.serverTime && st.members !== null && st.tickCount >= 3 && st;
  }, 'time/now, the lobby join and three ticks');
  assert.ok(!Number.isNaN(Date.parse(s.serverTime.now)));
  assert.equal(s.members, 1);
  assert.deepEqual(Object.keys(s.ticks).sort(), ['HOT', 'PATH', 'WS']);

  const text = 'hello from Chromium, κόσμε';
  await demo.fill('#echo-text', text);
  await demo.click('#echo-send');
  const echo = await until(async () => (await demoState()).echo, 'the echo/say answer');
  assert.equal(echo.text, text);
  await demo.click('#echo-batch');
  const batch = await until(async () => (await demoState()).batch, 'the batch');
  assert.deepEqual([batch.calls, batch.inOrder], [20, true]);
});

test('the test page runs calls and batches and sees the errors', bounded, async () => {
  await page.goto(`${base}/interop-test.html`);
  await until(() => page.evaluate(() => window.hp?.client.state === 'open'), 'the test page to connect');
  const long = 'κόσμε, hotpath! '.repeat(150); // echo/say takes up to 4096 characters
  const r = await page.evaluate((l) => window.hp.calls(l), long);
  assert.ok(!Number.isNaN(Date.parse(r.now)));
  assert.equal(r.echo, long);
  assert.equal(r.upper, 'HÉLLO');
  assert.equal(r.batchInOrder, true);
  assert.equal(r.notFound, 3, 'no/such answers NotFound (3)');
  assert.equal(r.invalidParams, 2, 'a number for text answers InvalidParams (2)');
  assert.match(r.server, /^hotpath\//);
});

/** nodeClient is a raw ws client of the lobby (hotpath.v1 by hand). */
async function nodeClient() {
  const ws = new WebSocket(`ws://${tap.addr}/ws`, ['hotpath.v1']);
  const got = [];
  ws.on('message', (d) => got.push(proto.decode(d)));
  await new Promise((resolve, reject) => { ws.once('open', resolve); ws.once('error', reject); });
  ws.send(proto.join(1, 'lobby'));
  await until(() => got.some((p) => p.id === 1), 'the Node client to join');
  return { ws, got };
}

test('room emits travel between the demo page, the test page and a Node client', bounded, async () => {
  const joined = await page.evaluate(() => window.hp.join());
  assert.deepEqual(joined, { room: 'lobby', members: 2 });
  await until(async () => (await demoState()).members === 2, 'the demo page to see two members');

  // The demo page's chat form emits to the lobby.
  await demo.fill('#name', 'chromium');
  await demo.fill('#message', 'hello from the demo page');
  await demo.click('#send');
  await until(async () => (await testLog()).emits.some((m) => m.text === 'hello from the demo page'), 'the test page to get the chat line');

  await page.evaluate(() => window.hp.emit('hello from the test page'));
  await until(async () => (await demoState()).messages.some((m) => m.text === 'hello from the test page'), 'the demo page to get the test page emit');
  // A long emit to a room of its own comes back to the test page
  // compressed (the server compresses past 256 bytes).
  const long = 'room emit long enough to compress, '.repeat(40);
  assert.deepEqual(await page.evaluate((t) => window.hp.bulk(t), long), long);

  // A Node client in the same room: both pages receive its emit, and it
  // receives theirs.
  const node = await nodeClient();
  try {
    node.ws.send(proto.emit('lobby', 'message', { name: 'node', text: 'hello from Node ws', at: Date.now() }));
    await until(async () => (await demoState()).messages.some((m) => m.name === 'node'), 'the demo page to get the Node emit');
    await until(async () => (await testLog()).emits.some((m) => m.name === 'node'), 'the test page to get the Node emit');
    // A line longer than the page's input allows, from a client that is
    // not the page: over the demo's 8 KiB emit limit the server drops it;
    // within it, the demo page cuts it to the input's maxlength.
    node.ws.send(proto.emit('lobby', 'message', { name: 'flood-dropped', text: 'x'.repeat(100_000), at: Date.now() }));
    node.ws.send(proto.emit('lobby', 'message', { name: 'flood', text: 'x'.repeat(5_000), at: Date.now() }));
    const flood = await until(async () => (await demoState()).messages.find((m) => m.name === 'flood'), 'the demo page to get the long Node emit');
    assert.equal(flood.text.length, 1000);
    assert.ok(!(await demoState()).messages.some((m) => m.name === 'flood-dropped'), 'the server dropped the emit over 8 KiB');
    assert.equal(await demo.evaluate(() => [...document.querySelectorAll('#messages li')].find((li) => li.querySelector('.who')?.textContent === 'flood').children[1].textContent.length), 1000);
    await page.evaluate(() => window.hp.emit('hello Node, from Chromium'));
    await until(() => node.got.some((p) => p.event === 'message' && p.data.text === 'hello Node, from Chromium'), 'the Node client to get the page emit');
  } finally {
    node.ws.close();
  }
});

test('Chromium negotiates permessage-deflate and both ends compress on the wire', bounded, () => {
  const ws = tap.connections;
  assert.ok(ws.length >= 2, 'two pages, two WebSocket connections');
  for (const c of ws) {
    assert.match(c.offered, /^permessage-deflate/, 'Chromium offers permessage-deflate');
    assert.match(c.answered, /^permessage-deflate/, 'the server accepts it');
  }
  const t = tap.totals();
  console.log(`Chromium offered ${JSON.stringify(ws[0].offered)}, the server answered ${JSON.stringify(ws[0].answered)}; ` +
    `on the wire: browser→server ${t.up.compressed}/${t.up.messages} messages compressed, server→browser ${t.down.compressed}/${t.down.messages}`);
  assert.ok(t.up.compressed > 0, 'Chromium sent compressed frames');
  assert.ok(t.down.compressed > 0, 'the server sent compressed frames');
});

// A graceful stop closes every connection with 1001 (going away) before
// the process exits (PROTOCOL.md §7); a crash leaves the browser 1006.
for (const [how, signal, code] of [['a graceful stop (SIGTERM)', 'SIGTERM', 1001], ['a crash (SIGKILL)', 'SIGKILL', 1006]]) {
  test(`both pages reconnect and rejoin after ${how} and restart of the server`, bounded, async () => {
    const opensBefore = (await testLog()).opens;
    const demoLogBefore = (await demoState()).log.length;
    server = await restart(server, signal);
    await until(async () => (await testLog()).opens > opensBefore, 'the test page to reconnect');
    await until(async () => {
      const s = await demoState();
      return s.connection === 'open' && s.log.length > demoLogBefore;
    }, 'the demo page to reconnect');
    const states = (await testLog()).states.slice(-3);
    assert.ok(states.includes(`reconnecting ${code}`), `the test page went through reconnecting after close ${code}: ${states}`);
    // Rooms were rejoined: the lobby has both pages again, calls work, and
    // emits flow between them on the new connections.
    await until(async () => (await demoState()).members === 2, 'the lobby to have both pages again');
    const r = await page.evaluate(() => window.hp.calls('after the restart'));
    assert.equal(r.echo, 'after the restart');
    const text = `after ${signal}`;
    await page.evaluate((t) => window.hp.emit(t), text);
    await until(async () => (await demoState()).messages.some((m) => m.text === text), 'the emit after the restart');
  });
}

test('the demo page after the restarts: screenshot artifact', bounded, async () => {
  await demo.fill('#message', 'screenshots are taken by the interop test');
  await demo.click('#send');
  await until(async () => (await demoState()).tickCount >= 60, 'a sparkline of ticks', 20_000);
  mkdirSync(artifacts, { recursive: true });
  const path = `${artifacts}/chromium-demo.png`;
  await demo.screenshot({ path });
  console.log(`screenshot: ${path}`);
});
