// Node ws as a slow reader of a room, with permessage-deflate context
// takeover from the server: the server's window must stay the one ws
// inflates with when the slow client's outbox overflows and room emits are
// dropped (compat/transport.go takeoverRoom; compat/pmd_takeover_test.go
// checks it with our own inflater, this with ws's, which is zlib's).
//
// A reader joins `lobby` and pauses its socket (ws.pause(): TCP
// backpressure); a sender emits room messages in rounds until the server's
// hotpath_emit_drops_total shows that the reader's full outbox (4 MiB, no
// flag) dropped some. Each message is half repetitive text (it shrinks, so
// it is compressed and joins the server's window) and half random text of
// its own. A room message is compressed from an empty window, but an
// answer is compressed against the connection's window: once the reader
// resumed and caught up, it calls echo/say with the random half of the
// last dropped message. Before the fix that message had joined the
// server's window, the answer referred back into it, and ws inflated
// other bytes without an error. The reader must also receive every room
// message as sent, in order, each one it did not get counted by the server
// as dropped, then a further run of 40 whole, with its connection up
// throughout; and, so the case cannot pass without takeover, an echo of a
// received message's random half must be compressed against the window.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import WebSocket from 'ws';
import { start, stop } from './lib/server.mjs';
import * as proto from './lib/proto.mjs';

const BODY = 8000; // characters of text per message
const ROUND = 100; // messages per round while overflowing
const MAX_PHASE1 = 8000; // give up (and fail) if the outbox never overflowed
const WANT_DROPS = 50; // overflow until at least this many were dropped
const AFTER = 40; // messages once the reader caught up

// A message's text: a repetitive half, which makes the message shrink
// alone (and so join the server's window), and a random half unique to it,
// which only a back reference into that message compresses.
const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';

/** random returns BODY/2 random characters, the same for the same k. */
function random(k) {
  let x = (k * 2654435761 + 0x9e3779b9) >>> 0 || 1;
  const out = Buffer.alloc(BODY / 2);
  for (let i = 0; i < out.length; i++) {
    x ^= x << 13; x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5; x >>>= 0;
    out[i] = alphabet.charCodeAt(x & 63);
  }
  return out.toString('latin1');
}

/** body returns message k's BODY characters. */
const body = (k) => `line ${k} of the room, `.repeat(BODY).slice(0, BODY / 2) + random(k);

/** payload is message seq's JSON. */
const payload = (seq) => Buffer.from(JSON.stringify({ seq, body: body(seq) }));

/** emitExcept encodes an Emit (§4.6) with flags 0x01: not to the sender. */
function emitExcept(room, event, data) {
  const str = (s) => { const b = Buffer.from(s); return Buffer.concat([Buffer.from([b.length]), b]); };
  return Buffer.concat([Buffer.from([proto.Kind.Emit]), str(room), str(event), Buffer.from([1]), data]);
}

/** rawEmit splits an Emit packet into its event name and payload bytes. */
function rawEmit(b) {
  let i = 1;
  const n1 = b[i]; const room = b.subarray(i + 1, i + 1 + n1).toString(); i += 1 + n1;
  const n2 = b[i]; const event = b.subarray(i + 1, i + 1 + n2).toString(); i += 1 + n2;
  return { room, event, data: b.subarray(i + 1) };
}

function open(addr, perMessageDeflate) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`ws://${addr}/ws`, ['hotpath.v1'], { perMessageDeflate });
    ws.binaryType = 'nodebuffer';
    ws.answered = '';
    ws.once('upgrade', (res) => { ws.answered = res.headers['sec-websocket-extensions'] ?? ''; });
    ws.once('open', () => resolve(ws));
    ws.once('error', reject);
  });
}

/** within rejects after ms, naming what did not happen. */
function within(ms, what, promise) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`timed out: ${what}`)), ms); }),
  ]).finally(() => clearTimeout(timer));
}

/** answers resolves the Result or Error of a call id on ws. */
function answers(ws) {
  const waiting = new Map();
  ws.on('message', (b) => {
    if (b[0] !== proto.Kind.Result && b[0] !== proto.Kind.Error) return;
    const p = proto.decode(b);
    waiting.get(p.id)?.(p);
    waiting.delete(p.id);
  });
  return (id, packet) => new Promise((resolve) => { waiting.set(id, resolve); ws.send(packet); });
}

async function drops(addr) {
  const res = await within(5000, 'GET /metrics', fetch(`http://${addr}/metrics`));
  const m = (await res.text()).match(/^hotpath_emit_drops_total (\d+)$/m);
  assert.ok(m, 'hotpath_emit_drops_total in /metrics');
  return Number(m[1]);
}

test('ws slow reader, server context takeover: emits dropped by a full outbox leave the window intact', { timeout: 60_000 }, async () => {
  const server = await start(['-context-takeover', '-metrics', '-ticker', '1h']);
  let reader; let sender;
  try {
    // ws offers takeover both ways; the answer without
    // server_no_context_takeover is the server keeping its window.
    reader = await open(server.addr, { clientNoContextTakeover: false });
    assert.equal(reader.answered, 'permessage-deflate', 'takeover negotiated both ways');
    sender = await open(server.addr, false);

    const got = []; // room messages received: {seq, ok}
    let lineBytes = 0; // their packets' bytes, inflated
    const errors = []; let closed = null;
    reader.on('error', (e) => errors.push(e.message));
    reader.on('close', (code, reason) => { closed = { code, reason: String(reason) }; });
    reader.on('message', (b) => {
      if (b[0] !== proto.Kind.Emit) return;
      const e = rawEmit(b);
      if (e.event !== 'line') return; // presence
      lineBytes += b.length;
      let seq = -1;
      try { seq = JSON.parse(e.data.toString()).seq; } catch { /* not what was sent */ }
      got.push({ seq, ok: Number.isInteger(seq) && seq >= 0 && e.data.equals(payload(seq)) });
    });
    const readerCall = answers(reader);
    const senderCall = answers(sender);
    let id = 1;
    const call = async (who, method, params) => {
      const n = id++;
      return within(10_000, `${method} answered`, who(n, proto.call(n, method, params)));
    };
    // echo checks an echo/say answer to the reader, compressed against the
    // reader's window: what it inflated to, and its size on the wire.
    const echo = async (text) => {
      const wire0 = reader._socket.bytesRead;
      let p;
      try { p = await call(readerCall, 'echo/say', { text }); } catch (e) { return { ok: false, why: e.message, wire: 0 }; }
      const ok = p.kind === proto.Kind.Result && p.data?.text === text;
      return { ok, why: ok ? '' : `answered ${JSON.stringify(p).slice(0, 80)}`, wire: reader._socket.bytesRead - wire0 };
    };
    assert.equal((await within(5000, 'join', readerCall(id, proto.join(id++, 'lobby')))).kind, proto.Kind.Result);
    assert.equal((await within(5000, 'join', senderCall(id, proto.join(id++, 'lobby')))).kind, proto.Kind.Result);

    // Phase 1: the reader stops reading; the sender emits rounds until the
    // reader's full outbox has dropped enough of them.
    reader.pause();
    const before = await drops(server.addr);
    let seq = 0; let dropped = 0;
    while (dropped < WANT_DROPS && seq < MAX_PHASE1) {
      for (let i = 0; i < ROUND; i++) sender.send(emitExcept('lobby', 'line', payload(seq++)));
      await call(senderCall, 'echo/say', { text: 'sync' }); // the server has fanned every emit out
      dropped = (await drops(server.addr)) - before;
    }
    const sent1 = seq;
    assert.ok(dropped > 0, `no emit dropped after ${sent1} messages: the outbox never overflowed, nothing was tested`);

    // The reader resumes and catches up: its call's answer comes after
    // everything queued for it.
    reader.resume();
    const sync = await echo('sync');
    const received1 = got.length;
    const have = new Set(got.map((g) => g.seq));
    let lastDropped = sent1 - 1;
    while (lastDropped >= 0 && have.has(lastDropped)) lastDropped--;

    // An answer whose text is a run of the last dropped message: the
    // server compresses it against its window, which must not hold that
    // message (the reader's does not).
    const afterDrop = closed ? { ok: false, why: 'closed', wire: 0 } : await echo(random(lastDropped));

    // Phase 2: it reads; a further run must arrive whole, and an answer
    // repeating the last of them must be a back reference (takeover in use).
    for (let i = 0; i < AFTER; i++) sender.send(emitExcept('lobby', 'line', payload(seq++)));
    await call(senderCall, 'echo/say', { text: 'sync' }).catch(() => {});
    await within(10_000, `the last of ${AFTER} messages after the resume`, new Promise((r) => {
      const t = setInterval(() => (got.at(-1)?.seq === seq - 1 || closed) && (clearInterval(t), r()), 5);
    })).catch(() => {});
    const control = closed ? { ok: false, why: 'closed', wire: 0 } : await echo(random(seq - 1));
    const dropped2 = (await drops(server.addr)) - before - dropped;
    const wire = reader._socket.bytesRead;

    const bad = got.filter((g) => !g.ok);
    const seqs = got.map((g) => g.seq);
    const summary = `sent ${seq} room messages (${sent1} while paused, ${AFTER} after), received ${got.length} ` +
      `(${received1} by the resume), ${bad.length} not as sent, dropped ${dropped} + ${dropped2} (server's count); ` +
      `echo after the drops (text of dropped #${lastDropped}): ${afterDrop.ok ? 'intact' : `NOT INTACT (${afterDrop.why})`}, ${afterDrop.wire} wire bytes; ` +
      `echo of the last received: ${control.ok ? 'intact' : `NOT INTACT (${control.why})`}, ${control.wire} wire bytes; ` +
      `close ${closed ? `${closed.code} ${closed.reason}` : 'none'}; errors ${JSON.stringify(errors)}; ` +
      `${wire} wire bytes for ${lineBytes} bytes of room packets`;
    console.log(`# ${summary}`);
    assert.ok(sync.ok, `the reader's call after the resume: ${summary}`);
    assert.deepEqual(errors, [], `reader errors: ${summary}`);
    assert.equal(closed, null, `the reader's connection closed: ${summary}`);
    assert.ok(afterDrop.ok, `the answer after the drops: ${summary}`);
    assert.equal(bad.length, 0, `room messages not as sent, first at seq ${bad[0]?.seq}: ${summary}`);
    assert.ok(seqs.every((s, i) => i === 0 || s > seqs[i - 1]), `out of order: ${summary}`);
    assert.equal(received1 + dropped, sent1, `every message received or counted dropped: ${summary}`);
    assert.equal(dropped2, 0, `drops after the resume: ${summary}`);
    assert.deepEqual(seqs.slice(-AFTER), Array.from({ length: AFTER }, (_, i) => sent1 + i), `the run after the resume: ${summary}`);
    // Positive controls: the room messages were compressed (so they joined
    // the server's window), and the echo of a received message's random
    // half was compressed against the window (about 2300 bytes for 4000
    // random characters, which alone take about 4020), so takeover was in use.
    assert.ok(wire < 0.8 * lineBytes, `room messages compressed: ${summary}`);
    assert.ok(control.ok && control.wire < 3200, `the echo of a received run compressed against the window: ${summary}`);
  } finally {
    reader?.terminate();
    sender?.terminate();
    await stop(server);
  }
});
