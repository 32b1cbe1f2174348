// permessage-deflate as Chromium negotiates it, against hotpath servers
// with and without context takeover: room emits of varied sizes and
// content (random, repetitive, text, 100 KiB and more) compressed by
// Chromium, inflated by the server, relayed compressed by the server and
// inflated by Chromium, compared exactly on every member. The page is
// served through the interop tap (compat/interop/lib/tap.mjs), which
// counts the frames with RSV1 each way: compression is checked on the
// wire, not taken from the negotiated header.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, stopServer, launch, openPage } from './harness.mjs';
import { startTap } from '../interop/lib/tap.mjs';

let browser;
const servers = [];
const taps = [];

before(async () => { browser = await launch(); });
after(async () => {
  await browser?.close();
  for (const t of taps) await t.close();
  for (const s of servers) await stopServer(s.process);
});

// run makes three WebSocket clients in one room on a server started with
// args (and -max-emit 0: the demo's 8 KiB bound on a chat line would drop
// the larger emits); each emits n messages, and every member checks every message it
// receives against what was sent. The messages come from a seeded
// generator in the page, so a failure names its message.
async function run(args, n) {
  const s = await startServer(['-addr', '127.0.0.1:0', '-ticker', '1h', '-max-emit', '0', ...args]);
  servers.push(s);
  const tap = await startTap(new URL(s.urls.http).host);
  taps.push(tap);
  const page = await openPage(browser, { http: `http://${tap.addr}` });
  try {
    const out = await page.evaluate(async (n) => {
      let seed = 12345;
      const rnd = () => { seed = (seed * 1103515245 + 12345) >>> 0; return seed / 2 ** 32; };
      const randomText = (len) => { let s = ''; for (let i = 0; i < len; i++) s += String.fromCharCode(32 + Math.floor(rnd() * 95)); return s; };
      const unicode = (len) => { let s = ''; for (let i = 0; i < len; i++) s += String.fromCodePoint([0x41 + Math.floor(rnd() * 26), 0xe9, 0x4e2d + Math.floor(rnd() * 50), 0x1f600 + Math.floor(rnd() * 40), 0x22, 0x5c, 0x0a][Math.floor(rnd() * 7)]); return s; };
      const sizes = [0, 1, 10, 200, 255, 256, 257, 300, 1000, 4096, 10_000, 65_535, 65_536, 70_000, 100_000, 140_000, 300_000, 700_000];
      const kinds = ['random', 'repeat', 'words', 'unicode', 'mixed'];
      const make = (i) => {
        const size = sizes[i % sizes.length];
        const kind = kinds[Math.floor(i / sizes.length) % kinds.length];
        switch (kind) {
          case 'random': return randomText(size);
          case 'repeat': return 'abcabcabd'.repeat(Math.ceil(size / 9)).slice(0, size);
          case 'words': { const w = ['hotpath', 'room', 'emit', 'call', 'deflate', 'window', 'frame']; let s = ''; while (s.length < size) s += w[Math.floor(rnd() * w.length)] + ' '; return s.slice(0, size); }
          case 'unicode': return unicode(Math.floor(size / 3));
          default: return randomText(Math.floor(size / 2)) + 'z'.repeat(size - Math.floor(size / 2));
        }
      };
      const names = ['a', 'b', 'c'];
      const clients = {};
      const got = {};
      for (const name of names) {
        const c = new window.hp.Client('/ws', { reconnect: false });
        clients[name] = c;
        got[name] = [];
        await new Promise((resolve, reject) => c.onState((st) => { if (st.state === 'open') resolve(); if (st.state === 'closed') reject(new Error(`closed ${st.error?.code} ${st.error?.reason}`)); }));
        c.onRoom('z', 'm', (d) => got[name].push(d));
        await c.join('z');
      }
      const sent = [];
      const closes = [];
      for (const name of names) clients[name].onState((st) => closes.push(`${name} ${st.state} ${st.error?.code} ${st.error?.reason}`));
      for (let i = 0; i < n; i++) {
        const from = names[i % names.length];
        const body = make(i);
        sent.push(body);
        clients[from].emit('z', 'm', { i, from, body });
        // A call between emits makes sure the server keeps up, and
        // exercises the other direction on the sender.
        if (i % 10 === 9) {
          const r = await clients[from].call('echo/upper', { text: body.slice(0, 5000) }, { timeout: 10_000 });
          if (r.text !== body.slice(0, 5000).toUpperCase() && /^[\x20-\x7e]*$/.test(body.slice(0, 5000))) throw new Error(`echo/upper ${i} differs`);
        }
      }
      const end = Date.now() + 20_000;
      while (names.some((m) => got[m].length < n) && Date.now() < end && closes.length === 0) await new Promise((r) => setTimeout(r, 20));
      const bad = [];
      for (const m of names) {
        if (got[m].length !== n) bad.push(`${m} got ${got[m].length} of ${n}`);
        // One lost and one twice would make the count: each index once.
        if (new Set(got[m].map((g) => g.i)).size !== got[m].length) bad.push(`${m} got a message twice`);
        // Emits from one sender arrive in order; compare each with what was sent.
        for (const g of got[m]) if (g.body !== sent[g.i]) bad.push(`${m}: message ${g.i} (${sent[g.i].length} chars) differs`);
      }
      const ended = [...closes];
      for (const name of names) clients[name].close();
      // What Chromium negotiated on a WebSocket of its own to this server.
      const extensions = await new Promise((resolve) => {
        const ws = new WebSocket(new URL('/ws', location.href).href.replace('http', 'ws'), 'hotpath.v1');
        ws.onopen = () => { resolve(ws.extensions); ws.close(); };
        ws.onerror = () => resolve('error');
      });
      return { bad: bad.slice(0, 10), closes: ended, extensions };
    }, n);
    const t = tap.totals();
    console.log(`# ${args.join(' ') || 'no flags'}: browser→server ${t.up.compressed}/${t.up.messages} messages compressed, server→browser ${t.down.compressed}/${t.down.messages}`);
    out.compressed = { up: t.up.compressed > 0, down: t.down.compressed > 0 };
    return out;
  } finally {
    await page.close();
  }
}

test('permessage-deflate without context takeover: every message arrives intact', async () => {
  const out = await run([], 180);
  assert.deepEqual(out, { bad: [], closes: [], extensions: 'permessage-deflate; server_no_context_takeover; client_no_context_takeover', compressed: { up: true, down: true } });
});

test('permessage-deflate with context takeover (-context-takeover): every message arrives intact', async () => {
  const out = await run(['-context-takeover'], 180);
  assert.deepEqual(out, { bad: [], closes: [], extensions: 'permessage-deflate', compressed: { up: true, down: true } });
});
