// Tests of the other carriers' framing (PROTOCOL.md §8) and of the
// fallback from WebTransport to WebSocket, against fakes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Client, CloseError, DataChannelSocket, StreamDeframer, WireError, WebTransportSocket, decodePacket, encodePacket, frameStreamPacket } from '../hotpath.js';

test('frameStreamPacket and StreamDeframer round-trip packets split anywhere', () => {
  const packets = [new Uint8Array([8]), new Uint8Array(200).fill(7), new Uint8Array(20000).fill(3)];
  const stream = [];
  for (const p of packets) stream.push(...frameStreamPacket(p));
  // The 200-byte packet's prefix takes two bytes (§2: uvarint).
  assert.deepEqual([...frameStreamPacket(packets[1]).subarray(0, 2)], [0xc8, 0x01]);
  for (const step of [1, 3, 7, 1000, stream.length]) {
    const d = new StreamDeframer();
    const got = [];
    for (let i = 0; i < stream.length; i += step) got.push(...d.push(new Uint8Array(stream.slice(i, i + step))));
    assert.deepEqual(got.map((p) => p.length), packets.map((p) => p.length), `step ${step}`);
  }
});

test('StreamDeframer refuses an overlong prefix (1002) and a packet over the limit (1009)', () => {
  assert.throws(() => new StreamDeframer().push(new Uint8Array([0x80, 0x80, 0x80, 0x80, 0x80, 0x01])),
    (err) => err instanceof WireError && err.closeCode === 1002);
  assert.throws(() => new StreamDeframer(100).push(frameStreamPacket(new Uint8Array(101))),
    (err) => err instanceof WireError && err.closeCode === 1009);
  // PROTOCOL.md §8.1: length is a 32-bit field of §2: a prefix not in
  // shortest form, or over 2^32-1 in five bytes, is a bad prefix (1002).
  for (const prefix of [[0x81, 0x00], [0x80, 0x80, 0x00], [0xff, 0xff, 0xff, 0xff, 0x1f]]) {
    assert.throws(() => new StreamDeframer().push(new Uint8Array([...prefix, 8])),
      (err) => err instanceof WireError && err.closeCode === 1002, `prefix ${prefix}`);
  }
});

/** fakeWebTransport returns a WebTransport class whose sessions the test
 * drives: `fail` rejects ready, else `serverSend` pushes bytes on the
 * control stream, `serverEnd` ends it, `serverOpenStream('bidi' or 'uni')`
 * opens another, `closeSession(info)` and `loseSession(err)` end the
 * session, and `written` collects what the client wrote. With
 * `hold`, a control stream write completes only at `release()`; with
 * `holdDatagrams`, the session takes the first datagram and no more. */
function fakeWebTransport({ fail = false, hold = false, holdDatagrams = false } = {}) {
  const sessions = [];
  class FakeWebTransport {
    constructor(url, options) {
      this.url = url;
      this.options = options;
      this.written = [];
      let closeSession, loseSession;
      this.closed = new Promise((resolve, reject) => { closeSession = resolve; loseSession = reject; });
      this.closeSession = closeSession;
      this.loseSession = loseSession; // closed rejects, as Chromium reports webtransport-go's close
      this.ready = fail ? Promise.reject(new Error('QUIC_TLS_CERTIFICATE_UNKNOWN')) : Promise.resolve();
      this.ready.catch(() => {});
      let push;
      this.readable = new ReadableStream({ start(c) { push = c; } });
      this.serverSend = (bytes) => push.enqueue(bytes);
      this.serverEnd = () => push.close(); // the server ends the control stream (FIN)
      // Streams the server opens (§8.2: it opens none).
      const open = {};
      this.incomingBidirectionalStreams = new ReadableStream({ start(c) { open.bidi = c; } });
      this.incomingUnidirectionalStreams = new ReadableStream({ start(c) { open.uni = c; } });
      this.serverOpenStream = (kind) => {
        const readable = new ReadableStream();
        open[kind].enqueue(kind === 'uni' ? readable : { readable, writable: new WritableStream() });
      };
      this.sentDatagrams = [];
      const self = this;
      let pushDatagram;
      this.serverDatagram = (bytes) => pushDatagram.enqueue(bytes);
      this.datagrams = {
        readable: new ReadableStream({ start(c) { pushDatagram = c; } }),
        writable: new WritableStream({
          write(chunk) {
            self.sentDatagrams.push(chunk);
            if (holdDatagrams) return new Promise(() => {}); // the session takes no more
          },
        }),
        maxDatagramSize: 1200,
      };
      sessions.push(this);
    }
    async createBidirectionalStream() {
      const self = this;
      // With hold, a write completes only when the test calls release():
      // a stream the network drains slower than the page writes.
      const held = [];
      this.release = () => { for (const done of held.splice(0)) done(); };
      return {
        readable: this.readable,
        writable: new WritableStream({
          write(chunk) {
            self.written.push(chunk);
            if (hold) return new Promise((resolve) => held.push(resolve));
          },
        }),
      };
    }
    close(info) { this.closeInfo = info; this.closeSession(info); }
  }
  return { FakeWebTransport, sessions };
}

const tick = () => new Promise((resolve) => setTimeout(resolve, 5));

/** The server's capabilities on the control stream: the client sends
 * nothing else before them. */
const sendCapabilities = (wt) => wt.serverSend(frameStreamPacket(encodePacket({ kind: 'capabilities', pairs: [['codec', 'json']] })));

test('a Client over WebTransport sends length-prefixed packets and reads answers', async () => {
  const { FakeWebTransport, sessions } = fakeWebTransport();
  const client = new Client('ws://example.test/ws', {
    webTransport: { url: 'https://example.test:4433/wt', serverCertificateHashes: [], WebTransport: FakeWebTransport },
    WebSocket: class { constructor() { throw new Error('no WebSocket expected'); } },
    reconnect: false,
  });
  await tick();
  const wt = sessions[0];
  sendCapabilities(wt);
  assert.equal(wt.url, 'https://example.test:4433/wt');
  assert.equal(client.carrier, 'webtransport');
  const answer = client.call('echo/say', { text: 'hi' });
  await tick();
  const d = new StreamDeframer();
  const sent = wt.written.flatMap((chunk) => d.push(chunk)).map(decodePacket);
  assert.deepEqual(sent.map((p) => p.kind), ['capabilities', 'call']);
  const call = sent[1];
  wt.serverSend(frameStreamPacket(encodePacket({ kind: 'result', id: call.id, payload: new TextEncoder().encode('{"text":"hi"}') })));
  assert.deepEqual(await answer, { text: 'hi' });
  client.close();
});

// wtClient is a Client over a fake WebTransport session (no WebSocket,
// no reconnect) whose server has sent its capabilities.
async function wtClient(options = {}, fake = {}) {
  const { FakeWebTransport, sessions } = fakeWebTransport(fake);
  const client = new Client('ws://example.test/ws', {
    webTransport: { url: 'https://example.test/wt', WebTransport: FakeWebTransport },
    WebSocket: class { constructor() { throw new Error('no WebSocket expected'); } },
    reconnect: false,
    ...options,
  });
  await tick();
  const wt = sessions[0];
  sendCapabilities(wt);
  return { client, wt };
}

// joinOverWebTransport joins room through wtClient's session, answering
// the Join as the server would.
async function joinOverWebTransport(client, wt, room) {
  const joined = client.join(room);
  await tick();
  const d = new StreamDeframer();
  const join = wt.written.flatMap((chunk) => d.push(chunk)).map(decodePacket).find((p) => p.kind === 'join');
  wt.serverSend(frameStreamPacket(encodePacket({ kind: 'result', id: join.id, payload: new TextEncoder().encode('{"members":1}') })));
  await joined;
}

test('emitUnreliable over WebTransport leaves as a datagram, a large one on the stream', async () => {
  const { client, wt } = await wtClient();
  assert.throws(() => client.emitUnreliable('r', 'pos', { x: 1 }), /not a member/);
  await joinOverWebTransport(client, wt, 'r');
  const streamed = wt.written.length;
  client.emitUnreliable('r', 'pos', { x: 1 }, { exceptSelf: true });
  await tick();
  assert.equal(wt.sentDatagrams.length, 1);
  const p = decodePacket(wt.sentDatagrams[0]);
  assert.equal(p.kind, 'emit');
  assert.equal(p.room, 'r');
  assert.equal(p.event, 'pos');
  assert.equal(client.unreliableSent, 1);
  // Larger than maxDatagramSize: it goes reliably, on the control stream.
  client.emitUnreliable('r', 'pos', { blob: 'x'.repeat(2000) });
  await tick();
  assert.equal(wt.sentDatagrams.length, 1);
  assert.equal(client.unreliableSent, 1);
  const later = wt.written.slice(streamed).flatMap((chunk) => new StreamDeframer().push(chunk)).map(decodePacket);
  assert.deepEqual(later.map((q) => q.kind), ['emit']);
  client.close();
});

test('a server close notice is answered and ends the connection with its code', async () => {
  const { FakeWebTransport, sessions } = fakeWebTransport();
  const states = [];
  const client = new Client('ws://example.test/ws', {
    webTransport: { url: 'https://example.test/wt', WebTransport: FakeWebTransport },
    WebSocket: class {}, reconnect: false,
  });
  client.onState((s) => states.push(s));
  await tick();
  const wt = sessions[0];
  const payload = new Uint8Array([0x03, 0xe9, ...new TextEncoder().encode('HP_SHUTTING_DOWN')]); // 1001
  wt.serverSend(frameStreamPacket(encodePacket({ kind: 'event', event: '$close', payload })));
  await tick();
  const d = new StreamDeframer();
  const sent = wt.written.flatMap((chunk) => d.push(chunk)).map(decodePacket);
  const echo = sent.at(-1);
  assert.equal(echo.event, '$close');
  assert.deepEqual([...echo.payload], [0x03, 0xe9]);
  assert.equal(states.at(-1).state, 'closed');
  assert.equal(states.at(-1).error.code, 1001);
});

// PROTOCOL.md §8.2, §8.3: the server closes a session for a violation
// (a pooled session's unidirectional stream: 1002 HP_ERR_UNEXPECTED_STREAM)
// with its close notice, then the session; Chromium reports no code for
// webtransport-go's session close (closed rejects, "Connection lost."), so
// the notice is what tells the page why, and the session's loss after it
// does not turn the close into a 1006.
test('a server close notice followed by a session lost without a code ends with the notice\'s code', async () => {
  const { client, wt } = await wtClient();
  const answer = client.call('echo/say', { text: 'hi' });
  answer.catch(() => {});
  await tick();
  const reason = 'HP_ERR_UNEXPECTED_STREAM';
  wt.serverSend(frameStreamPacket(encodePacket({ kind: 'event', event: '$close', payload: new Uint8Array([0x03, 0xea, ...new TextEncoder().encode(reason)]) })));
  await tick();
  wt.loseSession(new Error('Connection lost.'));
  await assert.rejects(answer, (err) => err instanceof CloseError && err.code === 1002 && err.reason === reason);
  const d = new StreamDeframer();
  const echo = wt.written.flatMap((chunk) => d.push(chunk)).map(decodePacket).at(-1);
  assert.equal(echo.event, '$close');
  assert.deepEqual([...echo.payload], [0x03, 0xea], 'the answer echoes 1002');
  assert.equal(client.state, 'closed');
  client.close();
});

test('a WebTransport that fails to open falls back to WebSocket', async () => {
  const { FakeWebTransport } = fakeWebTransport({ fail: true });
  const opened = [];
  class FakeWebSocket {
    constructor(url) { opened.push(url); setTimeout(() => this.onopen?.({}), 1); }
    send() {}
    close() {}
  }
  const client = new Client('ws://example.test/ws', {
    webTransport: { url: 'https://example.test/wt', WebTransport: FakeWebTransport },
    WebSocket: FakeWebSocket, reconnect: false,
  });
  await tick();
  await tick();
  assert.deepEqual(opened, ['ws://example.test/ws']);
  assert.equal(client.carrier, 'websocket');
  client.close();
});

test('WebTransportSocket reports a session the server closed with its code', async () => {
  const { FakeWebTransport, sessions } = fakeWebTransport();
  const s = new WebTransportSocket('https://example.test/wt', {}, FakeWebTransport);
  const closed = new Promise((resolve) => { s.onclose = resolve; });
  await tick();
  sessions[0].closeSession({ closeCode: 1008, reason: 'HP_ERR_MALFORMED_PACKET' });
  const ev = await closed;
  assert.equal(ev.code, 1008);
  assert.equal(ev.reason, 'HP_ERR_MALFORMED_PACKET');
});

test('WebTransportSocket reads a session closed without a close code as 1005', async () => {
  for (const info of [{ closeCode: 0, reason: '' }, undefined]) {
    const { FakeWebTransport, sessions } = fakeWebTransport();
    const s = new WebTransportSocket('https://example.test/wt', {}, FakeWebTransport);
    const closed = new Promise((resolve) => { s.onclose = resolve; });
    await tick();
    sessions[0].closeSession(info);
    const ev = await closed;
    assert.equal(ev.code, 1005, `closed with ${JSON.stringify(info)}`);
  }
});

// PROTOCOL.md §8.3: a session closed with a code in the close codes' range
// that no end may close with is the server's protocol error, 1002, as the
// Go client reads it; 1006, which a carrier's close may carry, is itself.
test('WebTransportSocket reads a session closed with a code no end may send as 1002', async () => {
  for (const [closeCode, want] of [[1004, 1002], [1015, 1002], [2000, 1002], [2999, 1002], [1006, 1006], [3000, 3000]]) {
    const { FakeWebTransport, sessions } = fakeWebTransport();
    const s = new WebTransportSocket('https://example.test/wt', {}, FakeWebTransport);
    const closed = new Promise((resolve) => { s.onclose = resolve; });
    await tick();
    sessions[0].closeSession({ closeCode, reason: 'r' });
    const ev = await closed;
    assert.equal(ev.code, want, `closed with ${closeCode}`);
    if (want === 1002) assert.match(ev.reason, /^HP_ERR_BAD_CLOSE_CODE/);
  }
});

// PROTOCOL.md §8.4: a datagram carries an Emit or an Event; any other kind
// in a datagram closes the connection with 1008 HP_ERR_DATAGRAM_KIND. The
// client delivered every datagram as if it came on the control stream: a
// Result sent as a datagram settled a call.
test('a datagram of a kind other than Emit and Event closes the connection with 1008 HP_ERR_DATAGRAM_KIND (§8.4)', async () => {
  const { client, wt } = await wtClient();
  const got = [];
  client.on('tick', (data) => got.push(data));
  wt.serverDatagram(encodePacket({ kind: 'event', event: 'tick', payload: new TextEncoder().encode('1') }));
  await tick();
  assert.deepEqual(got, [1], 'an Event datagram is delivered');
  const answer = client.call('echo/say', { text: 'hi' });
  answer.catch(() => {});
  await tick();
  const d = new StreamDeframer();
  const call = wt.written.flatMap((chunk) => d.push(chunk)).map(decodePacket).find((p) => p.kind === 'call');
  wt.serverDatagram(encodePacket({ kind: 'result', id: call.id, payload: new TextEncoder().encode('{"text":"hi"}') }));
  await assert.rejects(answer, (err) => err instanceof CloseError && err.code === 1008 && err.reason === 'HP_ERR_DATAGRAM_KIND');
  const notice = wt.written.flatMap((chunk) => d.push(chunk)).map(decodePacket).find((p) => p.kind === 'event' && p.event === '$close');
  assert.ok(notice, 'the client sent a close notice');
  assert.equal((notice.payload[0] << 8) | notice.payload[1], 4008);
  // The server's answering notice ends the handshake (and the close timer).
  wt.serverSend(frameStreamPacket(encodePacket({ kind: 'event', event: '$close', payload: notice.payload })));
  await tick();
  client.close();
});

// PROTOCOL.md §8.3: a close notice's payload is a close frame's (RFC 6455
// §5.5.1): one of one byte, with a code no end may send (1005) or a reason
// that is not UTF-8 is a protocol error, as the Go client finds it (1002
// HP_ERR_BAD_CLOSE_NOTICE; its notice carries 4002, as the browser
// client's other carrier-level violations, and the page sees 1002). The
// browser client read the first as 1005 and the others as their code.
for (const [name, payload] of [
  ['one byte', [0x03]],
  ['code 1005', [0x03, 0xed]],
  ['reason not UTF-8', [0x03, 0xe8, 0xff]],
]) {
  test(`a close notice of ${name} is a protocol error (§8.3)`, async () => {
    const { client, wt } = await wtClient();
    const answer = client.call('echo/say', { text: 'hi' });
    answer.catch(() => {});
    await tick();
    wt.serverSend(frameStreamPacket(encodePacket({ kind: 'event', event: '$close', payload: new Uint8Array(payload) })));
    await tick();
    const d = new StreamDeframer();
    const notice = wt.written.flatMap((chunk) => d.push(chunk)).map(decodePacket).find((p) => p.kind === 'event' && p.event === '$close');
    assert.ok(notice, 'the client sent a close notice');
    assert.equal((notice.payload[0] << 8) | notice.payload[1], 4002);
    assert.equal(new TextDecoder().decode(notice.payload.subarray(2)), 'HP_ERR_BAD_CLOSE_NOTICE');
    wt.serverSend(frameStreamPacket(encodePacket({ kind: 'event', event: '$close', payload: notice.payload })));
    await assert.rejects(answer, (err) => err instanceof CloseError && err.code === 1002 && err.reason === 'HP_ERR_BAD_CLOSE_NOTICE');
    client.close();
  });
}

// close() while the first carrier is still opening closed it, and its
// close event, fired at once, read as a carrier that failed to open: the
// client fell back to a WebSocket that nobody closed, a connection left
// open to the server after close() (and a Node process kept alive).
test('close() while a WebTransport session opens starts no fallback WebSocket', async () => {
  const { FakeWebTransport, sessions } = fakeWebTransport();
  const opened = [];
  class FakeWebSocket {
    constructor(url) { opened.push(url); }
    send() {}
    close() {}
  }
  const client = new Client('ws://example.test/ws', {
    webTransport: { url: 'https://example.test/wt', WebTransport: FakeWebTransport },
    WebSocket: FakeWebSocket,
  });
  client.close();
  await tick();
  assert.equal(client.state, 'closed');
  assert.deepEqual(opened, [], 'a WebSocket was opened after close()');
  assert.ok(sessions[0].closeInfo, 'the session was closed');
});

// bytesCopied returns how many bytes typed arrays' set and slice copied
// while fn ran: a measure of a deframer's work that does not depend on
// the machine's speed.
function bytesCopied(fn) {
  const proto = Object.getPrototypeOf(Uint8Array.prototype);
  const { set, slice } = proto;
  const bufferSlice = ArrayBuffer.prototype.slice;
  let n = 0;
  proto.set = function (src, offset) { n += src.length; return set.call(this, src, offset); };
  proto.slice = function (start, end) { const r = slice.call(this, start, end); n += r.length; return r; };
  ArrayBuffer.prototype.slice = function (start, end) { const r = bufferSlice.call(this, start, end); n += r.byteLength; return r; };
  try {
    fn();
  } finally {
    proto.set = set;
    proto.slice = slice;
    ArrayBuffer.prototype.slice = bufferSlice;
  }
  return n;
}

// StreamDeframer joined what it had buffered with each new chunk, and
// copied the whole again to keep it: a packet of n bytes arriving in
// chunks of c cost about n²/c bytes copied. A server sending a 16 MiB
// message in QUIC-sized reads (1200 bytes) froze the page for minutes.
test('StreamDeframer copies a packet split into small chunks a bounded number of times', () => {
  for (const [size, step] of [[1 << 20, 1000], [1 << 16, 1]]) {
    const stream = frameStreamPacket(new Uint8Array(size).fill(5));
    const tail = frameStreamPacket(new Uint8Array([8]));
    const d = new StreamDeframer();
    const got = [];
    const copied = bytesCopied(() => {
      for (let i = 0; i < stream.length; i += step) got.push(...d.push(stream.subarray(i, i + step)));
      got.push(...d.push(tail));
    });
    assert.deepEqual(got.map((p) => p.length), [size, 1]);
    assert.ok(got[0].every((b) => b === 5));
    assert.ok(copied <= 4 * size, `${copied} bytes copied to reassemble ${size} in chunks of ${step}`);
  }
});

/** callThenServer makes a call over a fake WebTransport session, lets
 * the server do act(wt), and returns the call's promise once the client
 * has closed (closing it anyway, or the call's timer would hold the test). */
async function callThenServer(act) {
  const { client, wt } = await wtClient();
  const answer = client.call('echo/say', { text: 'hi' });
  answer.catch(() => {});
  await tick();
  act(wt);
  await tick();
  try {
    assert.equal(client.state, 'closed');
  } finally {
    client.close();
  }
  return { answer, wt };
}

// PROTOCOL.md §8.3: a carrier that ends without a close notice is an
// abnormal closure (1006), as the Go client reads a control stream's end.
// The client returned from its read loop and went on: its calls waited
// for answers that could no longer come, until their timeouts, and with
// idleTimeout 0 the connection was never given up.
test('a WebTransport control stream the server ends without a close notice is a 1006 closure', async () => {
  const { answer, wt } = await callThenServer((wt) => wt.serverEnd());
  await assert.rejects(answer, (err) => err instanceof CloseError && err.code === 1006);
  assert.ok(wt.closeInfo, 'the session was closed');
});

// What the control stream's reader throws that is not a WireError (a
// buffer it could not allocate; here a chunk that is not bytes) closes
// the connection as this end's failure, 1011: it was read as a WireError,
// and the client closed with code NaN and reported an undefined code.
test('a WebTransport read failure that is not a violation closes with 1011', async () => {
  const { answer } = await callThenServer((wt) => wt.serverSend(null));
  await assert.rejects(answer, (err) => err instanceof CloseError && err.code === 1011 && err.reason === 'HP_ERR_INTERNAL');
});

/** fakeRTC returns an RTCPeerConnection class whose connections are
 * recorded in `pcs`: ICE gathering is complete at once, its data channels
 * never open unless the test says so, and close() closes them. */
function fakeRTC() {
  const pcs = [];
  class FakeDataChannel {
    constructor(label) { this.label = label; this.readyState = 'connecting'; this.sent = []; }
    send(b) { this.sent.push(b); }
  }
  class FakeRTCPeerConnection {
    constructor(config) {
      this.config = config;
      this.channels = [];
      this.iceGatheringState = 'complete';
      this.connectionState = 'new';
      pcs.push(this);
    }
    createDataChannel(label) { const dc = new FakeDataChannel(label); this.channels.push(dc); return dc; }
    async createOffer() { return { type: 'offer', sdp: 'v=0' }; }
    async setLocalDescription(d) { this.localDescription = d; }
    async setRemoteDescription(d) { this.remoteDescription = d; }
    addEventListener() {}
    close() {
      if (this.connectionState === 'closed') return;
      this.connectionState = 'closed';
      for (const dc of this.channels) { dc.readyState = 'closed'; dc.onclose?.(); }
    }
  }
  return { FakeRTCPeerConnection, pcs };
}

// A signalling server that never answers held the client's POST open
// after close(): nothing aborted it, a request (and a Node process) left
// behind until the server gave up.
test('close() while WebRTC signalling waits for the server aborts the request', async () => {
  const { FakeRTCPeerConnection, pcs } = fakeRTC();
  const requests = [];
  const fetch = (url, init) => new Promise((resolve, reject) => {
    requests.push(init);
    init.signal?.addEventListener('abort', () => reject(init.signal.reason));
  });
  const client = new Client('ws://example.test/ws', {
    webRTC: { url: 'http://example.test/rtc', RTCPeerConnection: FakeRTCPeerConnection, fetch },
    WebSocket: class { constructor() { throw new Error('no WebSocket expected'); } },
  });
  await tick();
  assert.equal(requests.length, 1, 'the offer was posted');
  client.close();
  await tick();
  assert.equal(client.state, 'closed');
  assert.equal(pcs[0].connectionState, 'closed');
  assert.equal(requests[0].signal?.aborted, true, 'the signalling request was not aborted');
});

// A violation the carrier socket itself finds (a text message on the data
// channel, a bad length prefix, a bad close notice) was reported only when
// the closing handshake ended: with the code the server echoed (4003, not
// the protocol's 1003 a page sees over WebSocket, README "Protocol
// violations"), or as 1006 "data channel closed" when the server closed
// without echoing, the reason lost. It is now reported at once, with the
// protocol's code and reason, while the handshake goes on.
test('a text message on the data channel fails the connection at once with 1003 HP_ERR_TEXT_MESSAGE', async () => {
  const { FakeRTCPeerConnection, pcs } = fakeRTC();
  const fetch = async () => ({ ok: true, json: async () => ({ type: 'answer', sdp: 'v=0' }) });
  const client = new Client('ws://example.test/ws', {
    webRTC: { url: 'http://example.test/rtc', RTCPeerConnection: FakeRTCPeerConnection, fetch },
    WebSocket: class { constructor() { throw new Error('no WebSocket expected'); } },
    reconnect: false,
  });
  await tick();
  const pc = pcs[0];
  const dc = pc.channels[0];
  dc.readyState = 'open';
  dc.onopen();
  dc.onmessage({ data: encodePacket({ kind: 'capabilities', pairs: [['codec', 'json']] }).slice().buffer });
  const answer = client.call('echo/say', { text: 'hi' });
  answer.catch(() => {});
  await tick();
  dc.onmessage({ data: 'not a packet' });
  const notice = decodePacket(dc.sent.at(-1));
  assert.equal(notice.event, '$close');
  assert.equal((notice.payload[0] << 8) | notice.payload[1], 4003);
  pc.close(); // the server closes without answering the notice
  await assert.rejects(answer, (err) => err instanceof CloseError && err.code === 1003 && err.reason === 'HP_ERR_TEXT_MESSAGE');
  assert.equal(client.state, 'closed');
});

// A peer connection that failed, or whose control channel the server
// closed, was reported gone but never closed: a browser keeps an open
// RTCPeerConnection (its ICE agent, its ports) until close(), and a
// client reconnecting over a flapping network piled them up.
test('a DataChannelSocket whose peer connection failed or whose channel closed closes its peer connection', async () => {
  for (const end of ['failed', 'channel closed']) {
    const { FakeRTCPeerConnection, pcs } = fakeRTC();
    const fetch = async () => ({ ok: true, json: async () => ({ type: 'answer', sdp: 'v=0' }) });
    const s = new DataChannelSocket('http://example.test/rtc', { RTCPeerConnection: FakeRTCPeerConnection, fetch });
    const closed = [];
    s.onclose = (ev) => closed.push(ev.code);
    await tick();
    const pc = pcs[0];
    pc.channels[0].readyState = 'open';
    pc.channels[0].onopen();
    if (end === 'failed') {
      pc.connectionState = 'failed';
      pc.onconnectionstatechange();
    } else {
      pc.channels[0].readyState = 'closed';
      pc.channels[0].onclose();
    }
    assert.deepEqual(closed, [1006], end);
    assert.equal(pc.connectionState, 'closed', `${end}: the peer connection was left open`);
  }
});

// A close notice's reason is at most 123 bytes (RFC 6455 §5.5.1): one
// that was longer was cut at byte 123, inside a character when it was not
// ASCII, and a reason that is not UTF-8 makes the notice a protocol error
// for the other end (§8.3).
test('a long reason is cut to 123 bytes at a character boundary in a close notice', async () => {
  const { FakeWebTransport, sessions } = fakeWebTransport();
  const s = new WebTransportSocket('https://example.test/wt', {}, FakeWebTransport);
  await tick();
  assert.equal(s.readyState, 1);
  s.close(4000, 'é'.repeat(100));
  await tick();
  const d = new StreamDeframer();
  const notice = sessions[0].written.flatMap((chunk) => d.push(chunk)).map(decodePacket).at(-1);
  assert.equal(notice.event, '$close');
  const reason = notice.payload.subarray(2);
  assert.ok(reason.length <= 123);
  assert.equal(new TextDecoder('utf-8', { fatal: true }).decode(reason), 'é'.repeat(61));
  // The server's answer ends the handshake (and its timer).
  sessions[0].serverSend(frameStreamPacket(encodePacket({ kind: 'event', event: '$close', payload: notice.payload.subarray(0, 2) })));
  await tick();
  assert.equal(s.readyState, 3);
});

// PROTOCOL.md §8.2: a server opens no stream, and an end that sees another
// stream or channel opened closes with 1002 HP_ERR_UNEXPECTED_STREAM. The
// client never read the streams a server opened: each held its flow
// control window of data for the life of the connection (the Go client
// refuses them likewise).
for (const kind of ['bidi', 'uni']) {
  test(`a stream the server opens (${kind}) closes the connection with 1002 HP_ERR_UNEXPECTED_STREAM`, async () => {
    const { answer, wt } = await callThenServer((wt) => wt.serverOpenStream(kind));
    await assert.rejects(answer, (err) => err instanceof CloseError && err.code === 1002 && err.reason === 'HP_ERR_UNEXPECTED_STREAM');
    const d = new StreamDeframer();
    const notice = wt.written.flatMap((chunk) => d.push(chunk)).map(decodePacket).find((p) => p.kind === 'event' && p.event === '$close');
    assert.ok(notice, 'the client sent a close notice');
    assert.equal((notice.payload[0] << 8) | notice.payload[1], 4002);
    wt.serverSend(frameStreamPacket(encodePacket({ kind: 'event', event: '$close', payload: notice.payload })));
    await tick();
  });
}

test('a data channel the server opens closes the connection with 1002 HP_ERR_UNEXPECTED_STREAM', async () => {
  const { FakeRTCPeerConnection, pcs } = fakeRTC();
  const fetch = async () => ({ ok: true, json: async () => ({ type: 'answer', sdp: 'v=0' }) });
  const s = new DataChannelSocket('http://example.test/rtc', { RTCPeerConnection: FakeRTCPeerConnection, fetch });
  const closed = [];
  s.onclose = (ev) => closed.push([ev.code, ev.reason]);
  await tick();
  const pc = pcs[0];
  pc.channels[0].readyState = 'open';
  pc.channels[0].onopen();
  pc.ondatachannel?.({ channel: { label: 'other' } });
  assert.deepEqual(closed, [[1002, 'HP_ERR_UNEXPECTED_STREAM']]);
  const notice = decodePacket(pc.channels[0].sent.at(-1));
  assert.equal(notice.event, '$close');
  pc.close();
});

// A WebTransport packet was collected whole, up to 64 MiB, before anything
// looked at its size. The client's maxReceive now bounds the control
// stream's deframer, which refuses a packet on its length prefix (§8.1):
// here the prefix alone, no byte of the packet, ends the connection.
test('a WebTransport packet over maxReceive is refused on its length prefix with 1009', async () => {
  const { client, wt } = await wtClient({ maxReceive: 1000 });
  const answer = client.call('echo/say', { text: 'hi' });
  answer.catch(() => {});
  await tick();
  wt.serverSend(frameStreamPacket(new Uint8Array(1001)).subarray(0, 2));
  await assert.rejects(answer, (err) => err instanceof CloseError && err.code === 1009 && err.reason === 'HP_ERR_MESSAGE_TOO_BIG');
  const d = new StreamDeframer();
  const notice = wt.written.flatMap((chunk) => d.push(chunk)).map(decodePacket).find((p) => p.kind === 'event' && p.event === '$close');
  assert.equal((notice.payload[0] << 8) | notice.payload[1], 4009);
  client.close();
  wt.close({ closeCode: 4009, reason: '' }); // the server closes the session, ending the handshake's timer
});

// WebTransportSocket's bufferedAmount was the writer's negative desiredSize,
// which counts chunks, not bytes (a high water mark of 1 in Chromium):
// megabytes of writes waiting on a slow stream read as a handful, and the
// client's maxBuffered never held. It now counts the bytes of writes not
// completed, as a WebSocket's bufferedAmount does.
test('WebTransportSocket.bufferedAmount counts the bytes of writes not yet completed', async () => {
  const { FakeWebTransport, sessions } = fakeWebTransport({ hold: true });
  const s = new WebTransportSocket('https://example.test/wt', {}, FakeWebTransport);
  await tick();
  assert.equal(s.readyState, 1);
  for (let i = 0; i < 4; i++) s.send(new Uint8Array(1000));
  assert.equal(s.bufferedAmount, 4 * 1002);
  for (let i = 0; i < 100 && s.bufferedAmount > 0; i++) {
    sessions[0].release();
    await tick();
  }
  assert.equal(s.bufferedAmount, 0);
  assert.equal(sessions[0].written.length, 4);
  s.onclose = () => {};
  sessions[0].closeSession({ closeCode: 1000, reason: '' });
});

// A backlogged connection looked at its carrier's bufferedAmount every
// 10 ms, and a hidden tab's timers run a second or a minute late: it
// drained as slowly. A WebTransport write completing and a data channel's
// bufferedamountlow now flush the queue, with no timer (the clock here
// never fires one).
const frozenClock = { setTimeout: () => 0, clearTimeout: () => {}, now: () => 0 };

test('a backlogged WebTransport flushes its queue when its writes complete, not on a timer', async () => {
  const { client, wt } = await wtClient({ maxBuffered: 1000, timers: frozenClock }, { hold: true });
  client.event('big', 'x'.repeat(2000));
  await tick();
  client.event('small', 1); // waits: the stream holds over 2000 bytes
  await tick();
  const events = () => {
    const d = new StreamDeframer();
    return wt.written.flatMap((chunk) => d.push(chunk)).map(decodePacket).filter((p) => p.kind === 'event').map((p) => p.event);
  };
  for (let i = 0; i < 20 && events().length < 2; i++) {
    wt.release();
    await tick();
  }
  assert.deepEqual(events(), ['big', 'small']);
  wt.release();
  client.close();
});

test('a backlogged data channel flushes its queue on bufferedamountlow, not on a timer', async () => {
  const { FakeRTCPeerConnection, pcs } = fakeRTC();
  const fetch = async () => ({ ok: true, json: async () => ({ type: 'answer', sdp: 'v=0' }) });
  const client = new Client('ws://example.test/ws', {
    webRTC: { url: 'http://example.test/rtc', RTCPeerConnection: FakeRTCPeerConnection, fetch },
    WebSocket: class { constructor() { throw new Error('no WebSocket expected'); } },
    reconnect: false, maxBuffered: 1000, timers: frozenClock,
  });
  await tick();
  const dc = pcs[0].channels[0];
  dc.readyState = 'open';
  dc.bufferedAmount = 0;
  dc.onopen();
  dc.onmessage({ data: encodePacket({ kind: 'capabilities', pairs: [['codec', 'json']] }).slice().buffer });
  dc.bufferedAmount = 1001;
  client.event('e', 1);
  await tick();
  const events = () => dc.sent.map(decodePacket).filter((p) => p.kind === 'event');
  assert.equal(events().length, 0, 'sent past maxBuffered');
  assert.equal(dc.bufferedAmountLowThreshold, 1000);
  dc.bufferedAmount = 1000;
  dc.onbufferedamountlow?.({});
  await tick();
  assert.equal(events().length, 1, 'still waiting once the channel drained');
  client.close();
  pcs[0].close();
});

// Datagram writes were not waited for: when the session took them slower
// than the page wrote (a congested path), they piled up in the datagram
// stream's queue without bound, however stale. Past maxBuffered bytes
// not yet taken, emitUnreliable now drops them, as the network would.
test('emitUnreliable drops a datagram when those not yet taken are over maxBuffered', async () => {
  const { client, wt } = await wtClient({ maxBuffered: 2000 }, { holdDatagrams: true });
  await joinOverWebTransport(client, wt, 'r');
  const streamed = wt.written.length;
  const pos = { x: 'x'.repeat(980) }; // an emit of 1000 bytes
  for (let i = 0; i < 4; i++) client.emitUnreliable('r', 'pos', pos);
  await tick();
  assert.equal(client.unreliableSent, 3);
  assert.equal(client.unreliableDropped, 1);
  assert.equal(wt.written.length, streamed, 'a dropped datagram was sent on the control stream');
  client.close();
});

// The same over WebRTC: the unreliable channel's bufferedAmount grew
// without bound, and a send it refused (a channel closing under it)
// threw out of emitUnreliable, an error no caller expects of an emit.
test('emitUnreliable over a data channel drops past maxBuffered and goes reliably when the channel refuses', async () => {
  const { FakeRTCPeerConnection, pcs } = fakeRTC();
  const fetch = async () => ({ ok: true, json: async () => ({ type: 'answer', sdp: 'v=0' }) });
  const client = new Client('ws://example.test/ws', {
    webRTC: { url: 'http://example.test/rtc', RTCPeerConnection: FakeRTCPeerConnection, fetch },
    WebSocket: class { constructor() { throw new Error('no WebSocket expected'); } },
    reconnect: false, maxBuffered: 2000,
  });
  await tick();
  const [dc, udc] = pcs[0].channels;
  dc.readyState = 'open';
  udc.readyState = 'open';
  udc.bufferedAmount = 0;
  dc.onopen();
  const receive = (p) => dc.onmessage({ data: encodePacket(p).slice().buffer });
  receive({ kind: 'capabilities', pairs: [['codec', 'json']] });
  const joined = client.join('r');
  await tick();
  const join = dc.sent.map(decodePacket).find((p) => p.kind === 'join');
  receive({ kind: 'result', id: join.id, payload: new TextEncoder().encode('{"members":1}') });
  await joined;
  client.emitUnreliable('r', 'pos', 1);
  assert.equal(client.unreliableSent, 1);
  udc.bufferedAmount = 2001;
  client.emitUnreliable('r', 'pos', 2);
  assert.equal(client.unreliableDropped, 1);
  udc.bufferedAmount = 0;
  udc.send = () => { throw new Error('OperationError'); };
  client.emitUnreliable('r', 'pos', 3);
  await tick();
  assert.deepEqual(dc.sent.map(decodePacket).filter((p) => p.kind === 'emit').map((p) => new TextDecoder().decode(p.payload)), ['3']);
  assert.equal(client.unreliableSent, 1);
  client.close();
  pcs[0].close();
});

// Every packet a carrier delivered was copied into a new ArrayBuffer,
// though it was one already (a data channel's message, a packet the
// deframer cut out): one more copy of each message, up to maxReceive.
test('a data channel message is delivered without a copy', async () => {
  const { FakeRTCPeerConnection, pcs } = fakeRTC();
  const fetch = async () => ({ ok: true, json: async () => ({ type: 'answer', sdp: 'v=0' }) });
  const s = new DataChannelSocket('http://example.test/rtc', { RTCPeerConnection: FakeRTCPeerConnection, fetch });
  await tick();
  const dc = pcs[0].channels[0];
  dc.readyState = 'open';
  dc.onopen();
  const got = [];
  s.onmessage = (ev) => got.push(ev.data);
  const message = encodePacket({ kind: 'event', event: 'big', payload: new Uint8Array(1 << 20) }).slice().buffer;
  const copied = bytesCopied(() => dc.onmessage({ data: message }));
  assert.equal(got.length, 1);
  assert.equal(got[0].byteLength, message.byteLength);
  assert.ok(copied < 1024, `${copied} bytes copied to deliver a message of ${message.byteLength}`);
  pcs[0].close();
});
