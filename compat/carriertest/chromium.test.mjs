// Chromium (Debian's, driven by playwright-core) against one hotpath
// server over WebTransport, a WebRTC data channel and WebSocket, with the
// browser client compat/js/hotpath.js: calls on each carrier, a room whose
// members on the three carriers each receive every emit exactly once,
// unreliable emits sent and relayed as datagrams, and the fallback to
// WebSocket when WebTransport cannot open. Everything stays on 127.0.0.1.
//
// The server is compat/cmd/hotpath, built by run.sh; HOTPATH_BIN names
// the binary.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { chromium } from 'playwright-core';

const bin = process.env.HOTPATH_BIN;
if (!bin) throw new Error('HOTPATH_BIN is not set: run ./run.sh');

let server;
let urls; // {http, webtransport, hash, webrtc}
let browser;
let page;

/** startServer runs the hotpath binary on ephemeral ports and resolves
 * with the URLs it prints. */
function startServer() {
  return new Promise((resolve, reject) => {
    const p = spawn(bin, ['-addr', '127.0.0.1:0', '-quic', '127.0.0.1:0', '-webrtc-loopback', '-ticker', '1h'], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const found = {};
    const timer = setTimeout(() => reject(new Error('server did not print its URLs within 20 s')), 20_000);
    p.on('exit', (code) => reject(new Error(`server exited with ${code}`)));
    createInterface({ input: p.stdout }).on('line', (line) => {
      let m;
      if ((m = line.match(/^hotpath listening on (http:\/\/\S+)/))) found.http = m[1];
      if ((m = line.match(/^webtransport (\S+) sha-256 (\S+)/))) { found.webtransport = m[1]; found.hash = m[2]; }
      if ((m = line.match(/^webrtc (\S+)/))) found.webrtc = m[1];
      if (found.http && found.webtransport && found.webrtc) {
        clearTimeout(timer);
        resolve({ process: p, urls: found });
      }
    });
  });
}

before(async () => {
  ({ process: server, urls } = await startServer());
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
      // WebRTC offers its real address, not an mDNS name multicast on
      // the external interface; the server answers with loopback only.
      '--disable-features=WebRtcHideLocalIpsWithMdns',
    ],
  });
  page = await browser.newPage();
  page.on('console', (m) => { if (m.type() === 'error') console.error('[page]', m.text()); });
  // Any page of the server's origin will do: http://127.0.0.1 is a secure
  // context, where WebTransport and WebRTC are available.
  await page.goto(`${urls.http}/healthz`);
  await page.evaluate(async ({ wtURL, hash, rtcURL }) => {
    const hp = await import('/hotpath.js');
    const bytes = Uint8Array.from(atob(hash), (c) => c.charCodeAt(0));
    window.hp = hp;
    window.opts = {
      webtransport: { webTransport: { url: wtURL, serverCertificateHashes: [{ algorithm: 'sha-256', value: bytes }] } },
      webrtc: { webRTC: { url: rtcURL } },
      websocket: {},
    };
    window.clients = {};
    window.got = {};
  }, { wtURL: urls.webtransport, hash: urls.hash, rtcURL: urls.webrtc });
});

after(async () => {
  await browser?.close();
  server?.kill('SIGTERM');
});

/** connect opens a client on carrier in the page and waits until it is
 * open; it returns the carrier the client reports. */
async function connect(name, carrier) {
  return page.evaluate(async ({ name, carrier }) => {
    const c = new window.hp.Client('/ws', { ...window.opts[carrier], reconnect: false });
    window.clients[name] = c;
    await new Promise((resolve, reject) => {
      const off = c.onState((s) => {
        if (s.state === 'open') { off(); resolve(); }
        if (s.state === 'closed') { off(); reject(new Error(`${carrier} closed: ${s.error?.code} ${s.error?.message}`)); }
      });
    });
    return c.carrier;
  }, { name, carrier });
}

test('calls over WebTransport, a WebRTC data channel and WebSocket', async () => {
  for (const carrier of ['webtransport', 'webrtc', 'websocket']) {
    assert.equal(await connect(carrier, carrier), carrier);
    const out = await page.evaluate(async (name) => {
      const c = window.clients[name];
      const one = await c.call('echo/say', { text: `hello over ${name}` });
      // Calls issued together leave as one batch and come back together.
      const many = await Promise.all(Array.from({ length: 20 }, (_, i) => c.call('echo/upper', { text: `x${i}` })));
      return { one: one.text, many: many.map((r) => r.text) };
    }, carrier);
    assert.equal(out.one, `hello over ${carrier}`);
    assert.deepEqual(out.many, Array.from({ length: 20 }, (_, i) => `X${i}`));
  }
});

// Twenty calls of 20 KB issued together make a 400 KB batch: over a WebRTC
// data channel (256 KiB) it must leave cut in pieces the channel carries;
// the channel refused it whole, and every call was lost.
test('a batch larger than a data channel message leaves in pieces, on each carrier', async () => {
  for (const carrier of ['webtransport', 'webrtc', 'websocket']) {
    const got = await page.evaluate(async (name) => {
      const c = window.clients[name];
      const text = 'y'.repeat(20_000);
      const many = await Promise.all(Array.from({ length: 20 }, () => c.call('echo/upper', { text }, { timeout: 10_000 })));
      // Each answer whole: its length, or where it differs.
      return many.map((r) => (r.text === text.toUpperCase() ? r.text.length : `differs: ${r.text.length} chars`));
    }, carrier);
    assert.deepEqual(got, Array(20).fill(20_000), carrier);
  }
});

// Past maxBuffered the queue waits for the carrier to drain: on a data
// channel until its bufferedamountlow event, on WebTransport until its
// writes complete, on WebSocket by a 10 ms poll. 100 calls of 20 KB
// issued together (2 MB) against a 16 KiB maxBuffered wait for it about
// 30 times; a drain signal that never came would leave them to time out.
test('calls past maxBuffered wait for the carrier to drain and all arrive, on each carrier', async () => {
  for (const carrier of ['webtransport', 'webrtc', 'websocket']) {
    const got = await page.evaluate(async (carrier) => {
      const c = new window.hp.Client('/ws', { ...window.opts[carrier], reconnect: false, maxBuffered: 16 << 10 });
      await new Promise((resolve) => { const off = c.onState((s) => { if (s.state === 'open') { off(); resolve(); } }); });
      const text = 'z'.repeat(20_000);
      const many = await Promise.allSettled(Array.from({ length: 100 }, () => c.call('echo/upper', { text }, { timeout: 20_000 })));
      const on = c.carrier;
      c.close();
      const want = text.toUpperCase();
      return { carrier: on, lengths: many.map((r) => (r.status !== 'fulfilled' ? String(r.reason) : r.value.text === want ? r.value.text.length : `differs: ${r.value.text.length} chars`)) };
    }, carrier);
    assert.equal(got.carrier, carrier);
    assert.deepEqual(got.lengths, Array(100).fill(20_000), carrier);
  }
});

test('a room with a member on each carrier receives every emit once', async () => {
  const members = ['webtransport', 'webrtc', 'websocket'];
  const counts = await page.evaluate(async (members) => {
    for (const name of members) {
      const c = window.clients[name];
      window.got[name] = [];
      c.onRoom('mix', 'msg', (data) => window.got[name].push(data.n));
      await c.join('mix');
    }
    const n = 60;
    for (let i = 0; i < n; i++) window.clients[members[i % members.length]].emit('mix', 'msg', { n: i });
    const end = Date.now() + 10_000;
    while (members.some((m) => window.got[m].length < n) && Date.now() < end) {
      await new Promise((r) => setTimeout(r, 20));
    }
    await new Promise((r) => setTimeout(r, 200)); // time for any duplicate to show
    return Object.fromEntries(members.map((m) => [m, window.got[m]]));
  }, members);
  for (const m of members) {
    const sorted = [...counts[m]].sort((a, b) => a - b);
    assert.deepEqual(sorted, Array.from({ length: 60 }, (_, i) => i), `${m} got ${counts[m].length} emits`);
  }
  // Emits from one sender arrive in the order it sent them.
  for (const m of members) {
    const fromWT = counts[m].filter((n) => n % 3 === 0);
    assert.deepEqual(fromWT, [...fromWT].sort((a, b) => a - b), `${m}: order of one sender`);
  }
});

test('unreliable emits leave as datagrams and reach every carrier at most once', async () => {
  const members = ['webtransport', 'webrtc', 'websocket'];
  const n = 40;
  const out = await page.evaluate(async ({ members, n }) => {
    // Count what each carrier delivers as a datagram (or on the WebRTC
    // unreliable channel): the relays must come so, not on the stream.
    const datagrams = { webtransport: 0, webrtc: 0 };
    const carrierSocket = Object.getPrototypeOf(window.hp.WebTransportSocket.prototype);
    const deliver = carrierSocket.deliverDatagram;
    carrierSocket.deliverDatagram = function (packet) {
      datagrams[this instanceof window.hp.WebTransportSocket ? 'webtransport' : 'webrtc']++;
      return deliver.call(this, packet);
    };
    const got = {};
    for (const name of members) {
      const c = window.clients[name];
      got[name] = [];
      c.onRoom('loose', 'tick', (data) => got[name].push(data.n));
      await c.join('loose');
    }
    const sent = {};
    for (const name of ['webtransport', 'webrtc']) {
      const c = window.clients[name];
      const before = c.unreliableSent;
      for (let i = 0; i < n; i++) c.emitUnreliable('loose', 'tick', { n: name === 'webtransport' ? i : n + i });
      sent[name] = c.unreliableSent - before;
    }
    // A lost datagram never comes: wait for all, but not long.
    const end = Date.now() + 2_000;
    while (members.some((m) => got[m].length < 2 * n) && Date.now() < end) {
      await new Promise((r) => setTimeout(r, 20));
    }
    await new Promise((r) => setTimeout(r, 200)); // time for any duplicate to show
    carrierSocket.deliverDatagram = deliver;
    return { got, sent, datagrams };
  }, { members, n });
  // Both senders took the datagram path, not the reliable one.
  assert.deepEqual(out.sent, { webtransport: n, webrtc: n });
  // And the server relayed them so to the members whose carrier has
  // datagrams (each got at least n, below, all as datagrams).
  for (const m of ['webtransport', 'webrtc']) {
    assert.ok(out.datagrams[m] >= n, `${m} received ${out.datagrams[m]} datagrams, ${out.got[m].length} ticks`);
  }
  for (const m of members) {
    const got = out.got[m];
    assert.equal(new Set(got).size, got.length, `${m} received a datagram twice`);
    assert.ok(got.every((v) => Number.isInteger(v) && v >= 0 && v < 2 * n), `${m} received what nobody sent`);
    // Loss is allowed (Chromium drops datagrams of a burst its send queue
    // cannot hold: 8 of 80 in one run here), but most arrive.
    assert.ok(got.length >= n, `${m} received only ${got.length} of ${2 * n}`);
  }
});

test('a client that closes ends with 1000 after its last call, on each carrier', async () => {
  const codes = await page.evaluate(async () => {
    const out = {};
    for (const name of ['webtransport', 'webrtc']) {
      const c = window.clients[name];
      out[name] = await new Promise((resolve) => {
        const off = c.onState((s) => { if (s.state === 'closed') { off(); resolve(s.error?.code); } });
        c.call('echo/say', { text: 'before' }).catch(() => {});
        c.leave('mix').catch(() => {});
        c.close();
      });
    }
    return out;
  });
  assert.equal(codes.webtransport, 1000);
  assert.equal(codes.webrtc, 1000);
});

test('WebTransport that cannot open (a wrong certificate hash) falls back to WebSocket', async () => {
  const carrier = await page.evaluate(async ({ wtURL }) => {
    const wrong = new Uint8Array(32); // no certificate hashes to zeros
    const c = new window.hp.Client('/ws', {
      webTransport: { url: wtURL, serverCertificateHashes: [{ algorithm: 'sha-256', value: wrong }] },
      reconnect: false,
    });
    await new Promise((resolve, reject) => {
      c.onState((s) => { if (s.state === 'open') resolve(); if (s.state === 'closed') reject(new Error('closed')); });
    });
    const r = await c.call('echo/say', { text: 'fell back' });
    const used = c.carrier;
    c.close();
    return [used, r.text];
  }, { wtURL: urls.webtransport });
  assert.deepEqual(carrier, ['websocket', 'fell back']);
});
