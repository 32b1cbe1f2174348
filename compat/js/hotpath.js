/**
 * hotpath.js is the browser client of the hotpath.v1 protocol
 * (compat/PROTOCOL.md): calls with timeouts, server events, rooms with
 * presence, answers to server asks, batching of calls issued together, and
 * reconnection with capped exponential backoff that rejoins rooms.
 *
 * It is one dependency-free ES module for modern browsers and Node 20.
 * Payloads are JSON. The packet codec (encodePacket, decodePacket) is
 * exported too and is tested against the protocol's golden vectors.
 *
 *   import { Client } from '/hotpath.js';
 *   const client = new Client('/ws');
 *   const { text } = await client.call('echo/say', { text: 'hi' });
 *
 * @module hotpath
 */

/** The WebSocket subprotocol every connection asks for (PROTOCOL.md §1). */
export const SUBPROTOCOL = 'hotpath.v1';

/** Error codes of PROTOCOL.md §4.2; applications use 1000 and above. */
export const Code = Object.freeze({
  BadRequest: 1, InvalidParams: 2, NotFound: 3, Internal: 4, Timeout: 5,
  Canceled: 6, Overloaded: 7, Unauthorized: 8, Unavailable: 9, Application: 1000,
});

// Kind names by kind number (PROTOCOL.md §3); index 0 is no kind.
const KINDS = [undefined, 'call', 'result', 'error', 'event', 'ask', 'answer',
  'batch', 'ping', 'pong', 'join', 'leave', 'emit', 'capabilities'];
const KIND_NUMBER = Object.fromEntries(KINDS.map((name, i) => [name, i]).slice(1));
const COMPRESSED = 0x80;
const BATCH = KIND_NUMBER.batch;
// CLIENT_ONLY are the kinds only a client sends (PROTOCOL.md §3): from a
// server they are unknown kinds.
const CLIENT_ONLY = new Set([KIND_NUMBER.call, KIND_NUMBER.answer, KIND_NUMBER.join, KIND_NUMBER.leave]);
const CAPABILITIES = KIND_NUMBER.capabilities;
const EXCEPT_SENDER = 0x01;
const MAX_NAME = 255; // method, event and room names (§2)
const MAX_VALUE = 4096; // capability values and error messages (§2)
const MAX_U32 = 0xffffffff;
const MAX_CHANNEL_MESSAGE = 256 << 10; // a WebRTC data channel's message limit (§8.2)
const MAX_BATCH_BYTES = 64 << 10; // a batch's items together (§4.7); a larger packet leaves alone
// The largest message received by default: a bound against a broken or
// hostile server, above the 1 MiB a server takes by default, since its
// answers may be larger than the calls (a download, a list).
const MAX_RECEIVE = 16 << 20;
const MAX_BUFFERED = 1 << 20; // bytes a carrier may hold unsent before the queue waits, by default
// The most bytes the queue holds, by default: maxQueue counts packets, and
// 1024 of 1 MiB each would be a gigabyte.
const MAX_QUEUE_BYTES = 16 << 20;
// How often a backlogged WebSocket's bufferedAmount is looked at: it has
// no event for it going down (the other carriers have, see whenDrained).
const DRAIN_POLL = 10;
// setTimeout fires at once for delays past 2^31-1 ms; no timer goes past it.
const MAX_DELAY = 2 ** 31 - 1;
const EMPTY = new Uint8Array(0);

const utf8 = new TextEncoder();
// Strings in packets must be valid UTF-8 (§2): fatal rejects what Go's
// utf8.Valid rejects, and ignoreBOM keeps a leading U+FEFF as a character.
const strictUTF8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
const lenientUTF8 = new TextDecoder();

/** An error answered by the server for a call (or raised locally for a
 * timeout): `code` is one of {@link Code} or an application code. */
export class RPCError extends Error {
  /** @param {number} code @param {string} message @param {*} [data] */
  constructor(code, message, data) {
    super(message);
    this.name = 'RPCError';
    this.code = code;
    this.data = data;
  }
}

/** The connection closed: `code` is the WebSocket close code (1006 when it
 * dropped without one), `reason` the machine-readable reason (§7). */
export class CloseError extends Error {
  /** @param {number} code @param {string} [reason] */
  constructor(code, reason = '') {
    super(`hotpath: connection closed (${code}${reason ? ', ' + reason : ''})`);
    this.name = 'CloseError';
    this.code = code;
    this.reason = reason;
  }
}

/** A packet that does not follow PROTOCOL.md. `code` is a stable machine
 * code: HP_ERR_UNKNOWN_KIND or HP_ERR_MALFORMED_PACKET (an empty packet
 * too, as the Go ends say);
 * `closeCode` is what the receiver closes with (1008). */
export class WireError extends Error {
  /** @param {string} code @param {string} message */
  constructor(code, message) {
    super(message);
    this.name = 'WireError';
    this.code = code;
    this.closeCode = 1008;
  }
}

/** Returns the bytes of an ArrayBuffer, a typed array or a string (UTF-8). */
function toBytes(v) {
  if (v === undefined || v === null) return EMPTY;
  if (v instanceof Uint8Array) return v;
  if (v instanceof ArrayBuffer) return new Uint8Array(v);
  if (ArrayBuffer.isView(v)) return new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
  if (typeof v === 'string') return utf8.encode(v);
  throw new TypeError('hotpath: expected bytes or a string');
}

// Reader reads the fields of one packet body and throws a WireError at the
// first one that breaks PROTOCOL.md, as the Go decoder (compat/wire) does.
class Reader {
  constructor(bytes, kind) { this.b = bytes; this.i = 0; this.kind = kind; }

  fail(reason) {
    throw new WireError('HP_ERR_MALFORMED_PACKET', `hotpath: malformed ${this.kind} packet: ${reason}`);
  }

  u8(field) {
    if (this.i >= this.b.length) this.fail(`${field} missing`);
    return this.b[this.i++];
  }

  // u32 reads a uvarint of a 32-bit field (§2): at most 5 bytes, at most
  // 2^32-1, shortest form.
  u32(field) {
    let v = 0;
    for (let n = 0; ; n++) {
      if (this.i + n >= this.b.length) this.fail(`${field} missing`);
      const c = this.b[this.i + n];
      if (n === 4 && c > 0x0f) this.fail(`${field} out of range`);
      v += (c & 0x7f) * 2 ** (7 * n);
      if (c < 0x80) {
        if (n > 0 && c === 0) this.fail(`${field} not in shortest form`);
        this.i += n + 1;
        return v;
      }
    }
  }

  str(field, max) {
    const n = this.u32(`${field} length`);
    if (n > this.b.length - this.i) this.fail(`${field} truncated`);
    if (n > max) this.fail(`${field} too long`);
    const bytes = this.b.subarray(this.i, this.i + n);
    this.i += n;
    try {
      return strictUTF8.decode(bytes);
    } catch {
      return this.fail(`${field} is not UTF-8`);
    }
  }

  name(field) {
    const s = this.str(field, MAX_NAME);
    if (s === '') this.fail(`${field} empty`);
    return s;
  }

  rest() { const r = this.b.subarray(this.i); this.i = this.b.length; return r; }

  end() { if (this.i !== this.b.length) this.fail('trailing bytes'); }
}

/**
 * Decodes one packet. The result has `kind` (a name: 'call', 'result', ...)
 * and the fields PROTOCOL.md §3 gives that kind, named as in the golden
 * vectors: id, method, timeout, payload (call, ask); id, payload (result);
 * id, code, message, data (error); event, payload (event); id, status and
 * payload or code, message, data (answer); items, the encoded packets, each
 * still to decode (batch); data (ping, pong); id, room (join, leave); room,
 * event, flags, payload (emit); pairs, [key, value] arrays (capabilities).
 * A packet with the compressed bit is returned as {kind, compressed: true,
 * body}. Byte fields are views of the input.
 *
 * @param {Uint8Array|ArrayBuffer} input
 * @returns {object}
 * @throws {WireError} for anything PROTOCOL.md does not allow
 */
export function decodePacket(input) {
  const b = toBytes(input);
  if (b.length === 0) throw new WireError('HP_ERR_MALFORMED_PACKET', 'hotpath: empty packet');
  const kind = KINDS[b[0] & ~COMPRESSED];
  if (kind === undefined) throw new WireError('HP_ERR_UNKNOWN_KIND', `hotpath: unknown packet kind ${b[0] & ~COMPRESSED}`);
  if (b[0] & COMPRESSED) return { kind, compressed: true, body: b.subarray(1) };
  const r = new Reader(b.subarray(1), kind);
  switch (kind) {
    case 'call': case 'ask':
      return { kind, id: r.u32('id'), method: r.name('method'), timeout: r.u32('timeout'), payload: r.rest() };
    case 'result':
      return { kind, id: r.u32('id'), payload: r.rest() };
    case 'error':
      return { kind, id: r.u32('id'), code: r.u32('code'), message: r.str('message', MAX_VALUE), data: r.rest() };
    case 'event':
      return { kind, event: r.name('event'), payload: r.rest() };
    case 'answer': {
      const id = r.u32('id');
      const status = r.u8('status');
      if (status === 0) return { kind, id, status, payload: r.rest() };
      if (status !== 1) r.fail('unknown answer status');
      return { kind, id, status, code: r.u32('code'), message: r.str('message', MAX_VALUE), data: r.rest() };
    }
    case 'batch':
      return { kind, items: readItems(r) };
    case 'ping': case 'pong':
      return { kind, data: r.rest() };
    case 'join': case 'leave': {
      const p = { kind, id: r.u32('id'), room: r.name('room') };
      r.end();
      return p;
    }
    case 'emit':
      return { kind, room: r.name('room'), event: r.name('event'), flags: r.u8('flags'), payload: r.rest() };
    case 'capabilities': {
      const count = r.u32('count');
      const pairs = [];
      for (let i = 0; i < count; i++) pairs.push([r.str('capability key', MAX_NAME), r.str('capability value', MAX_VALUE)]);
      r.end();
      return { kind, pairs };
    }
  }
}

// readItems splits a batch into its items (§4.7): count 1 or more, each
// item length-prefixed, none a batch, capabilities or compressed.
function readItems(r) {
  const count = r.u32('count');
  if (count === 0) r.fail('empty batch');
  const items = [];
  while (r.i < r.b.length) {
    const n = r.u32('item length');
    if (n === 0 || n > r.b.length - r.i) r.fail('item length out of range');
    const item = r.b.subarray(r.i, r.i + n);
    r.i += n;
    const head = item[0];
    if (head & COMPRESSED || head === BATCH || head === CAPABILITIES) r.fail('batch item may not be a batch, capabilities or compressed');
    items.push(item);
  }
  if (items.length !== count) r.fail('batch count does not match its items');
  return items;
}

// decodeItem decodes an item of a server's batch. Its kind is read before
// its body, as the Go ends read it (§3): a kind only clients send is
// unknown whatever follows it, not a malformed packet.
function decodeItem(item) {
  if (CLIENT_ONLY.has(item[0])) throw new WireError('HP_ERR_UNKNOWN_KIND', `hotpath: packet kind ${item[0]} from a server`);
  return decodePacket(item);
}

// Writer builds one packet in a growing buffer and refuses values that the
// peer's decoder would reject, so a bad argument fails here, not as a
// closed connection.
class Writer {
  constructor(capacity) { this.buf = new Uint8Array(capacity); this.len = 0; }

  reserve(n) {
    if (this.len + n <= this.buf.length) return;
    const grown = new Uint8Array(Math.max(2 * this.buf.length, this.len + n));
    grown.set(this.buf.subarray(0, this.len));
    this.buf = grown;
  }

  u8(v, field) {
    if (!Number.isInteger(v) || v < 0 || v > 0xff) throw new RangeError(`hotpath: ${field} must be a byte, got ${v}`);
    this.reserve(1);
    this.buf[this.len++] = v;
  }

  // u32 writes the shortest uvarint of a 32-bit field (§2).
  u32(v, field) {
    if (!Number.isInteger(v) || v < 0 || v > MAX_U32) throw new RangeError(`hotpath: ${field} must be an integer from 0 to 2^32-1, got ${v}`);
    this.reserve(5);
    while (v >= 0x80) {
      this.buf[this.len++] = (v % 0x80) | 0x80;
      v = Math.floor(v / 0x80);
    }
    this.buf[this.len++] = v;
  }

  bytes(b) { this.reserve(b.length); this.buf.set(b, this.len); this.len += b.length; }

  str(s, field, min, max) {
    if (typeof s !== 'string') throw new TypeError(`hotpath: ${field} must be a string`);
    const b = utf8.encode(s);
    if (b.length < min || b.length > max) throw new RangeError(`hotpath: ${field} must be ${min}-${max} bytes of UTF-8, got ${b.length}`);
    this.u32(b.length, `${field} length`);
    this.bytes(b);
  }

  done() { return this.buf.subarray(0, this.len); }
}

/**
 * Encodes one packet given in the form decodePacket returns. Byte fields
 * (payload, data, body, batch items) take a Uint8Array, an ArrayBuffer or
 * a string (its UTF-8 bytes); a batch item may also be a packet object.
 * Optional fields default to 0 or empty.
 *
 * @param {object} p
 * @returns {Uint8Array}
 * @throws {TypeError|RangeError} when a field cannot be encoded or the peer
 *   would reject it (a name over 255 bytes, an id over 2^32-1, ...)
 */
export function encodePacket(p) {
  const kind = KIND_NUMBER[p.kind];
  if (kind === undefined) throw new TypeError(`hotpath: unknown packet kind ${p.kind}`);
  const rest = toBytes(p.payload ?? p.data ?? p.body);
  const w = new Writer(32 + rest.length);
  if (p.compressed) {
    w.u8(kind | COMPRESSED, 'head');
    w.bytes(toBytes(p.body));
    return w.done();
  }
  w.u8(kind, 'head');
  switch (p.kind) {
    case 'call': case 'ask':
      w.u32(p.id ?? 0, 'id'); w.str(p.method, 'method', 1, MAX_NAME); w.u32(p.timeout ?? 0, 'timeout'); w.bytes(toBytes(p.payload));
      break;
    case 'result':
      w.u32(p.id, 'id'); w.bytes(toBytes(p.payload));
      break;
    case 'error':
      w.u32(p.id, 'id'); w.u32(p.code, 'code'); w.str(p.message ?? '', 'message', 0, MAX_VALUE); w.bytes(toBytes(p.data));
      break;
    case 'event':
      w.str(p.event, 'event', 1, MAX_NAME); w.bytes(toBytes(p.payload));
      break;
    case 'answer':
      w.u32(p.id, 'id'); w.u8(p.status ?? 0, 'status');
      if (p.status === 1) {
        w.u32(p.code, 'code'); w.str(p.message ?? '', 'message', 0, MAX_VALUE); w.bytes(toBytes(p.data));
      } else if (!p.status) {
        w.bytes(toBytes(p.payload));
      } else {
        throw new RangeError(`hotpath: answer status must be 0 or 1, got ${p.status}`);
      }
      break;
    case 'batch': {
      const items = p.items ?? [];
      if (items.length === 0) throw new RangeError('hotpath: a batch needs at least one item');
      w.u32(items.length, 'count');
      for (const item of items) {
        const b = item instanceof Uint8Array ? item : encodePacket(item);
        if (b.length === 0 || b[0] & COMPRESSED || b[0] === BATCH || b[0] === CAPABILITIES) {
          throw new RangeError('hotpath: a batch item may not be empty, a batch, capabilities or compressed');
        }
        w.u32(b.length, 'item length');
        w.bytes(b);
      }
      break;
    }
    case 'ping': case 'pong':
      w.bytes(toBytes(p.data));
      break;
    case 'join': case 'leave':
      w.u32(p.id, 'id'); w.str(p.room, 'room', 1, MAX_NAME);
      break;
    case 'emit':
      w.str(p.room, 'room', 1, MAX_NAME); w.str(p.event, 'event', 1, MAX_NAME); w.u8(p.flags ?? 0, 'flags'); w.bytes(toBytes(p.payload));
      break;
    case 'capabilities': {
      const pairs = p.pairs ?? [];
      w.u32(pairs.length, 'count');
      for (const [key, value] of pairs) {
        w.str(key, 'capability key', 0, MAX_NAME);
        w.str(value, 'capability value', 0, MAX_VALUE);
      }
      break;
    }
  }
  return w.done();
}

/** Encodes a payload as JSON; raw bytes (a Uint8Array, an ArrayBuffer or another view of one) pass untouched (§5). */
function encodeJSON(v) {
  if (v === undefined) return EMPTY;
  if (v instanceof Uint8Array) return v;
  // Other binary data goes as its bytes too: JSON would make it {}.
  if (v instanceof ArrayBuffer) return new Uint8Array(v);
  if (ArrayBuffer.isView(v)) return new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
  const s = JSON.stringify(v);
  if (s === undefined) throw new TypeError('hotpath: payload cannot be encoded as JSON');
  return utf8.encode(s);
}

/** The bytes a queued item holds, as maxQueueBytes counts them: its
 * packet, or a call's payload (a join's or leave's room name is not
 * counted; maxQueue bounds those). */
function queuedBytes(q) {
  return q.packet?.length ?? q.payload?.length ?? 0;
}

/** Decodes a JSON payload; an empty payload is undefined. */
function decodeJSON(bytes) {
  return bytes.length === 0 ? undefined : JSON.parse(lenientUTF8.decode(bytes));
}

/** Cuts s to at most max bytes of UTF-8, at a character boundary. */
function truncateUTF8(s, max) {
  const b = utf8.encode(s);
  if (b.length <= max) return s;
  let n = max;
  while (n > 0 && (b[n] & 0xc0) === 0x80) n--;
  return lenientUTF8.decode(b.subarray(0, n));
}

/** Checks a method, event or room name before it is queued (§2). */
function checkName(name, field) {
  if (typeof name !== 'string') throw new TypeError(`hotpath: ${field} must be a string`);
  const n = utf8.encode(name).length;
  if (n < 1 || n > MAX_NAME) throw new RangeError(`hotpath: ${field} must be 1-255 bytes of UTF-8, got ${n}`);
}

/** Checks a timeout in ms: 0 for none, else at most about 24.8 days. */
function checkTimeout(ms) {
  if (typeof ms !== 'number' || !(ms >= 0 && ms <= MAX_DELAY)) throw new RangeError(`hotpath: timeout must be 0 to ${MAX_DELAY} ms, got ${ms}`);
}

/** Returns an option's value, v, once it is a number from min to max (an
 * integer when int, or Infinity when max is): a bad option fails at
 * construction, naming itself, not later as a timer that fires at once
 * (NaN, a negative delay) or a limit that never holds (NaN compares false). */
function numberOption(name, v, min, max, int = false) {
  if (typeof v !== 'number') throw new TypeError(`hotpath: option ${name} must be a number, got ${typeof v}`);
  if (!(v >= min && v <= max) || (int && !Number.isInteger(v) && v !== Infinity)) {
    throw new RangeError(`hotpath: option ${name} must be ${int ? 'an integer ' : ''}from ${min} to ${max}, got ${v}`);
  }
  return v;
}

/** Resolves a URL against the page. For a WebSocket it maps http(s) to
 * ws(s); with `web` ('http:' or 'https:') it maps ws(s) the other way,
 * for the WebTransport and signalling URLs. */
function resolveURL(url, web) {
  const base = globalThis.location?.href;
  let u;
  try {
    u = base === undefined ? new URL(url) : new URL(url, base);
  } catch {
    // Outside a page (Node) there is nothing to resolve a path against.
    throw new TypeError(`hotpath: ${JSON.stringify(url)} is not a URL${base === undefined ? ' (outside a page, give a full ws:, wss:, http: or https: URL)' : ''}`);
  }
  if (web === undefined) {
    if (u.protocol === 'http:') u.protocol = 'ws:';
    if (u.protocol === 'https:') u.protocol = 'wss:';
  } else {
    if (u.protocol === 'ws:') u.protocol = web;
    if (u.protocol === 'wss:') u.protocol = 'https:';
  }
  return u.href;
}

// Other carriers (PROTOCOL.md §8). Each adapter below looks like a
// WebSocket to the Client: onopen, onmessage with one packet per event
// (an ArrayBuffer), onerror, onclose with a code and a reason, send(bytes)
// and close(code, reason). The closing handshake of §8.3 (a "$close" event
// each way) is the adapter's business: the Client sees only onclose.

const CLOSE_EVENT = '$close';
const CLOSE_TIMEOUT = 3000; // ms an adapter waits for the other end's close notice

/** closeNotice encodes the close notice of §8.3: an event "$close" whose
 * payload is a WebSocket close payload (code, big-endian, then reason). */
function closeNotice(code, reason = '') {
  const r = utf8.encode(truncateUTF8(reason, 123));
  const payload = new Uint8Array(2 + r.length);
  payload[0] = code >> 8; payload[1] = code & 0xff;
  payload.set(r, 2);
  return encodePacket({ kind: 'event', event: CLOSE_EVENT, payload });
}

/** parseCloseNotice returns {code, reason} of a close notice packet, or
 * null when the packet is not one, or {bad: true} for a notice whose
 * payload a close frame could not carry (§8.3, RFC 6455 §5.5.1, §7.4): one
 * byte, over 125, a code no end may send, a reason not UTF-8. Such a
 * notice was read as 1005 or as its code; the Go client closes with 1002. */
function parseCloseNotice(bytes) {
  if (bytes.length < 8 || bytes[0] !== KIND_NUMBER.event || bytes[1] !== CLOSE_EVENT.length) return null;
  for (let i = 0; i < CLOSE_EVENT.length; i++) if (bytes[2 + i] !== CLOSE_EVENT.charCodeAt(i)) return null;
  const p = bytes.subarray(8);
  if (p.length === 0) return { code: 1005, reason: '' };
  if (p.length === 1 || p.length > 125) return { bad: true };
  const code = (p[0] << 8) | p[1];
  const sendable = (code >= 1000 && code <= 1014 && code !== 1004 && code !== 1005 && code !== 1006) || (code >= 3000 && code <= 4999);
  if (!sendable) return { bad: true };
  try {
    return { code, reason: strictUTF8.decode(p.subarray(2)) };
  } catch {
    return { bad: true };
  }
}

/** Appends the uvarint length prefix of §8.1 and the packet. */
export function frameStreamPacket(packet) {
  const prefix = [];
  let n = packet.length;
  while (n >= 0x80) { prefix.push((n & 0x7f) | 0x80); n = Math.floor(n / 128); }
  prefix.push(n);
  const out = new Uint8Array(prefix.length + packet.length);
  out.set(prefix, 0);
  out.set(packet, prefix.length);
  return out;
}

/**
 * StreamDeframer cuts a byte stream into the packets of §8.1. push(bytes)
 * returns the packets completed; a prefix longer than five bytes, not in
 * shortest form or over 2^32-1, or a length over maxMessage throws a
 * WireError (1002, 1009).
 */
export class StreamDeframer {
  // The bytes of a packet not yet complete, in a buffer that doubles as
  // they come, up to the #need bytes that complete it: joining the
  // buffered bytes with each new chunk copied a large packet once per
  // chunk (quadratic in its size), and keeping the chunks apart would cost
  // an object per chunk, however small (tiny chunks are an attack too).
  #buf = EMPTY; #len = 0; #need = 1; #max;
  constructor(maxMessage = 64 << 20) { this.#max = maxMessage; }
  push(chunk) {
    if (chunk.length === 0) return [];
    if (this.#len + chunk.length < this.#need) {
      this.#append(chunk);
      return [];
    }
    let b = chunk;
    if (this.#len > 0) {
      this.#append(chunk);
      b = this.#buf.subarray(0, this.#len);
    }
    const out = [];
    for (;;) {
      let length = 0; let scale = 1; let i = 0; let done = false;
      for (; i < b.length && i < 5; i++) {
        length += (b[i] & 0x7f) * scale;
        scale *= 128;
        if (b[i] < 0x80) { done = true; i++; break; }
      }
      if (!done) {
        if (b.length >= 5) throw wireError('HP_ERR_BAD_LENGTH_PREFIX', 'a length prefix is longer than five bytes', 1002);
        this.#need = b.length + 1;
        break;
      }
      // length is a 32-bit field (§2): one encoding, the shortest, and
      // at most 2^32-1.
      if ((i > 1 && b[i - 1] === 0) || length > MAX_U32) throw wireError('HP_ERR_BAD_LENGTH_PREFIX', 'a length prefix not in shortest form or over 32 bits', 1002);
      if (length > this.#max) throw wireError('HP_ERR_MESSAGE_TOO_BIG', `a packet of ${length} bytes is over the limit`, 1009);
      if (b.length < i + length) { this.#need = i + length; break; }
      out.push(b.slice(i, i + length));
      b = b.subarray(i + length);
    }
    // What is left is less than one packet, all of it from the last chunk.
    this.#buf = b.length === 0 ? EMPTY : b.slice();
    this.#len = b.length;
    return out;
  }

  #append(chunk) {
    const n = this.#len + chunk.length;
    if (n > this.#buf.length) {
      const grown = new Uint8Array(Math.max(n, Math.min(2 * this.#buf.length, this.#need)));
      grown.set(this.#buf.subarray(0, this.#len));
      this.#buf = grown;
    }
    this.#buf.set(chunk, this.#len);
    this.#len = n;
  }
}

function wireError(code, message, closeCode) {
  const err = new WireError(code, message);
  err.closeCode = closeCode;
  return err;
}

/** The ArrayBuffer of packet, a copy only when the view covers part of
 * its buffer: the packets a carrier delivers (the deframer's, a data
 * channel's message) are whole buffers already, and were copied once more
 * each, up to maxReceive bytes. */
function ownBuffer(packet) {
  const { buffer, byteOffset, byteLength } = packet;
  return byteOffset === 0 && byteLength === buffer.byteLength ? buffer : buffer.slice(byteOffset, byteOffset + byteLength);
}

/** The base of the adapters: the WebSocket-like surface and the closing
 * handshake; subclasses provide #transmit and #shutdown. */
class CarrierSocket {
  onopen = null; onmessage = null; onerror = null; onclose = null;
  binaryType = 'arraybuffer';
  readyState = 0; // 0 connecting, 1 open, 2 closing, 3 closed
  #closeTimer = null;

  /** Called by subclasses with each packet received. */
  deliver(packet) {
    if (this.readyState === 3) return;
    const notice = parseCloseNotice(packet);
    if (notice === null) {
      if (this.readyState === 1) this.onmessage?.({ data: ownBuffer(packet) });
      return;
    }
    if (notice.bad) {
      this.violate(1002, 'HP_ERR_BAD_CLOSE_NOTICE');
      return;
    }
    if (this.readyState === 1) {
      // The other end closes: answer with its code (§8.3), and let it
      // close the carrier, within CLOSE_TIMEOUT.
      this.transmit(closeNotice(notice.code === 1005 ? 1000 : notice.code));
      this.readyState = 2;
      this.#closeTimer = setTimeout(() => this.shutdown(notice.code, notice.reason), CLOSE_TIMEOUT);
      this.ended(notice.code, notice.reason);
      return;
    }
    // The answer to our own notice: the handshake is done, we close.
    this.shutdown(notice.code, notice.reason);
  }

  /** Called by subclasses with each datagram received (§8.4). The Client
   * checks its kind: only an Emit or an Event may travel so. */
  deliverDatagram(packet) {
    if (this.readyState !== 1) return;
    this.onmessage?.({ data: ownBuffer(packet), datagram: true });
  }

  /** Closes for a protocol violation this end found (§7): the notice
   * carries 4000 + code, as a browser's close frame would (4002 for
   * 1002), and onclose fires at once with the protocol's code and reason,
   * as the Client reports a violation on WebSocket, while the handshake
   * goes on (the other end may close without answering: 1006, the reason
   * lost). */
  violate(code, reason) {
    this.ended(code, reason);
    if (this.readyState === 1) this.close(4000 + (code - 1000), reason);
    else this.shutdown(4000 + (code - 1000), reason);
  }

  opened() {
    if (this.readyState !== 0) return;
    this.readyState = 1;
    this.onopen?.({});
  }

  /** Fires onclose once; the carrier is closed separately. */
  ended(code, reason) {
    if (this.closeFired) return;
    this.closeFired = true;
    this.onclose?.({ code, reason, wasClean: code !== 1006 });
  }

  /** The carrier is gone (closed by the other end, or failed). */
  gone(code, reason) {
    clearTimeout(this.#closeTimer);
    this.readyState = 3;
    this.ended(code, reason);
  }

  send(data) {
    if (this.readyState !== 1) throw new Error(`hotpath: send in readyState ${this.readyState}`);
    this.transmit(toBytes(data));
  }

  close(code = 1000, reason = '') {
    if (this.readyState >= 2) return;
    if (this.readyState === 0) {
      this.readyState = 3;
      this.shutdown(code, reason);
      return;
    }
    this.readyState = 2;
    this.transmit(closeNotice(code, reason));
    this.#closeTimer = setTimeout(() => this.shutdown(code, reason), CLOSE_TIMEOUT);
  }

  shutdown(code, reason) {
    clearTimeout(this.#closeTimer);
    this.readyState = 3;
    this.closeCarrier(code, reason);
    this.ended(code, reason);
  }
}

/** The close code and reason of a WebTransport session's close, as the Go
 * client reads them (PROTOCOL.md §8.3): a code outside the close codes'
 * range (0, from a close() without one) is none, 1005; one in it that no
 * end may close with (1004, 1015, the unassigned 1016-2999) is the
 * server's protocol error, 1002 HP_ERR_BAD_CLOSE_CODE. */
function sessionClose(info) {
  const code = info?.closeCode, reason = info?.reason ?? '';
  if (!(code >= 1000 && code <= 4999)) return [1005, reason];
  if (code === 1004 || (code >= 1015 && code <= 2999)) return [1002, `HP_ERR_BAD_CLOSE_CODE (${code})`];
  return [code, reason];
}

/**
 * WebTransportSocket carries a Client over WebTransport (§8.2): the
 * session's first bidirectional stream is the control stream, packets are
 * length-prefixed on it (§8.1), and datagrams bring unreliable emits.
 * `options` is passed to the WebTransport constructor
 * ({serverCertificateHashes} for a development certificate).
 */
export class WebTransportSocket extends CarrierSocket {
  #wt; #writer = null; #dgWriter = null; #maxMessage;
  #buffered = 0; // bytes written to the control stream whose write has not completed
  #drained = null; // {below, fn} of whenDrained, until the writes fall to below
  #dgBuffered = 0; // the same for datagrams
  /** maxMessage bounds a packet received on the control stream, checked
   * on its length prefix, before a byte of it is kept (§8.1): 1009. */
  constructor(url, options = {}, WebTransportImpl = globalThis.WebTransport, { maxMessage = MAX_RECEIVE } = {}) {
    super();
    this.url = url;
    this.#maxMessage = maxMessage;
    this.#wt = new WebTransportImpl(url, options);
    this.#wt.closed.then(
      (info) => this.gone(...sessionClose(info)),
      (err) => { this.onerror?.({ error: err }); this.gone(1006, String(err?.message ?? err)); });
    this.#start().catch((err) => {
      if (this.readyState === 3) return;
      this.onerror?.({ error: err });
      this.shutdown(1006, String(err?.message ?? err));
    });
  }

  async #start() {
    await this.#wt.ready;
    const stream = await this.#wt.createBidirectionalStream();
    this.#writer = stream.writable.getWriter();
    this.opened();
    this.#readDatagrams();
    this.#refuseStreams(this.#wt.incomingBidirectionalStreams);
    this.#refuseStreams(this.#wt.incomingUnidirectionalStreams);
    const deframer = new StreamDeframer(this.#maxMessage);
    const reader = stream.readable.getReader();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) {
        // A carrier that ends without a close notice is an abnormal
        // closure (§8.3); while closing, the handshake's bound ends it.
        if (this.readyState === 1) this.shutdown(1006, 'connection closed without a close notice');
        return;
      }
      let packets;
      try {
        packets = deframer.push(value);
      } catch (err) {
        // A WireError names its close; anything else (a buffer that could
        // not be allocated) is this end's failure.
        if (err instanceof WireError) this.violate(err.closeCode, err.code);
        else this.violate(1011, 'HP_ERR_INTERNAL');
        return;
      }
      for (const p of packets) this.deliver(p);
    }
  }

  async #readDatagrams() {
    try {
      const reader = this.#wt.datagrams.readable.getReader();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        this.deliverDatagram(value);
      }
    } catch { /* the session closed */ }
  }

  // refuseStreams watches for a stream the server opens: it opens none
  // (§8.2), and one left unread would hold its flow control window of
  // data for the life of the session. The first closes the connection.
  async #refuseStreams(streams) {
    try {
      const { value, done } = await streams.getReader().read();
      if (done) return;
      (value.readable ?? value).cancel().catch(() => {});
      if (this.readyState === 1) this.violate(1002, 'HP_ERR_UNEXPECTED_STREAM');
    } catch { /* the session closed, or has no such streams */ }
  }

  /** Bytes written that the stream has not taken yet, as a WebSocket's
   * bufferedAmount counts them. The writer's desiredSize counts chunks
   * in Chromium (a high water mark of 1), not bytes. */
  get bufferedAmount() { return this.#buffered; }

  transmit(packet) {
    const framed = frameStreamPacket(packet);
    this.#buffered += framed.length;
    const done = () => {
      this.#buffered -= framed.length;
      const d = this.#drained;
      if (d !== null && this.#buffered <= d.below) {
        this.#drained = null;
        d.fn();
      }
    };
    this.#writer.write(framed).then(done, done);
  }

  /** Calls fn once bufferedAmount is at most below: from the write that
   * brings it there, no timer (see the Client's #awaitDrain). */
  whenDrained(below, fn) {
    if (this.#buffered <= below) queueMicrotask(fn);
    else this.#drained = { below, fn };
  }

  /** Sends packet as one session datagram (§8.4) and reports whether it
   * went: not before the session is open, nor when it is larger than a
   * datagram. */
  transmitUnreliable(packet) {
    const dg = this.#wt.datagrams;
    if (this.readyState !== 1 || !dg?.writable || packet.length > (dg.maxDatagramSize ?? 0)) return false;
    this.#dgWriter ??= dg.writable.getWriter();
    this.#dgBuffered += packet.length;
    const done = () => { this.#dgBuffered -= packet.length; };
    this.#dgWriter.write(packet).then(done, done);
    return true;
  }

  /** Bytes of datagrams written and not yet taken by the session. */
  get unreliableBufferedAmount() { return this.#dgBuffered; }

  closeCarrier(code, reason) {
    try { this.#wt.close({ closeCode: code, reason }); } catch { /* closed already */ }
  }
}

/**
 * DataChannelSocket carries a Client over a WebRTC data channel (§8.2):
 * it offers two channels, "hotpath.v1" (ordered, reliable; one packet per
 * message) and "hotpath.v1/unreliable" (unordered, no retransmission), to
 * the server's signalling endpoint at `url` with one POST, and opens when
 * the control channel does.
 */
export class DataChannelSocket extends CarrierSocket {
  #pc; #dc; #udc;
  #signalling = new AbortController(); // the offer's POST, aborted with the carrier
  constructor(url, { iceServers = [], fetch: fetchImpl = globalThis.fetch, RTCPeerConnection: PC = globalThis.RTCPeerConnection } = {}) {
    super();
    this.url = url;
    this.#pc = new PC({ iceServers });
    this.#dc = this.#pc.createDataChannel(SUBPROTOCOL);
    this.#dc.binaryType = 'arraybuffer';
    const udc = this.#pc.createDataChannel(SUBPROTOCOL + '/unreliable', { ordered: false, maxRetransmits: 0 });
    this.#udc = udc;
    udc.binaryType = 'arraybuffer';
    udc.onmessage = (ev) => { if (typeof ev.data !== 'string') this.deliverDatagram(new Uint8Array(ev.data)); };
    this.#dc.onopen = () => this.opened();
    this.#dc.onmessage = (ev) => {
      if (typeof ev.data === 'string') { this.violate(1003, 'HP_ERR_TEXT_MESSAGE'); return; }
      this.deliver(new Uint8Array(ev.data));
    };
    // Gone without a notice (1006, §8.3): the peer connection is closed
    // too, as a browser keeps an open one (its ICE agent, its ports) until
    // close(), however dead.
    const lost = (reason) => { if (this.readyState !== 3) this.shutdown(1006, reason); };
    this.#dc.onclose = () => lost('data channel closed');
    this.#pc.onconnectionstatechange = () => {
      if (this.#pc.connectionState === 'failed') lost('peer connection failed');
    };
    // A server opens no channel (§8.2): the first closes the connection.
    this.#pc.ondatachannel = (ev) => {
      ev.channel?.close?.();
      if (this.readyState < 2) this.violate(1002, 'HP_ERR_UNEXPECTED_STREAM');
    };
    this.#signal(fetchImpl).catch((err) => {
      if (this.readyState === 3) return;
      this.onerror?.({ error: err });
      this.shutdown(1006, String(err?.message ?? err));
    });
  }

  async #signal(fetchImpl) {
    const pc = this.#pc;
    await pc.setLocalDescription(await pc.createOffer());
    // One request, one answer: wait until every candidate is in the offer.
    if (pc.iceGatheringState !== 'complete') {
      await new Promise((resolve) => {
        pc.addEventListener('icegatheringstatechange', () => { if (pc.iceGatheringState === 'complete') resolve(); });
      });
    }
    const rsp = await fetchImpl(this.url, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ type: pc.localDescription.type, sdp: pc.localDescription.sdp }),
      signal: this.#signalling.signal,
    });
    if (!rsp.ok) throw new Error(`hotpath: signalling answered ${rsp.status}`);
    await pc.setRemoteDescription(await rsp.json());
  }

  get bufferedAmount() { return this.#dc.bufferedAmount; }

  /** Calls fn once bufferedAmount is at most below: on the channel's
   * bufferedamountlow event, no timer (see the Client's #awaitDrain). */
  whenDrained(below, fn) {
    const dc = this.#dc;
    if (!(dc.bufferedAmount > below)) {
      queueMicrotask(fn);
      return;
    }
    // An unsigned long: a larger value would wrap.
    dc.bufferedAmountLowThreshold = Math.min(Math.floor(below), MAX_U32);
    dc.onbufferedamountlow = () => {
      dc.onbufferedamountlow = null;
      fn();
    };
  }

  /** The largest message the channel carries: the SCTP transport's
   * max-message-size, at most 256 KiB (PROTOCOL.md §8.1); the browser
   * refuses to send a larger one. */
  get maxMessageSize() {
    const n = this.#pc.sctp?.maxMessageSize;
    return n > 0 ? Math.min(n, MAX_CHANNEL_MESSAGE) : MAX_CHANNEL_MESSAGE;
  }

  transmit(packet) {
    if (this.#dc.readyState === 'open') this.#dc.send(packet);
  }

  /** Sends packet on the unreliable channel (§8.4) and reports whether it
   * went: not before that channel is open. */
  transmitUnreliable(packet) {
    if (this.readyState !== 1 || this.#udc.readyState !== 'open') return false;
    try {
      this.#udc.send(packet);
    } catch {
      return false; // closing under us: the control channel says why
    }
    return true;
  }

  get unreliableBufferedAmount() { return this.#udc.bufferedAmount; }

  closeCarrier() {
    // A signalling server that never answers must not hold the request
    // open after the carrier is given up (a close(), the connect timeout).
    this.#signalling.abort();
    this.#pc.close();
  }
}

/** Reports an error no listener took: to reportError (the console, and
 * the page's error event) in a browser, to console.error where there is
 * none (Node). */
function reportUnheard(err) {
  if (globalThis.reportError) globalThis.reportError(err);
  else console.error(err);
}

const defaultTimers = {
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (handle) => clearTimeout(handle),
  now: () => Date.now(),
};

/**
 * @typedef {object} ReconnectOptions
 * @property {number} [minDelay=250] first backoff step, ms
 * @property {number} [maxDelay=10000] largest backoff step, ms
 * @property {number} [stableAfter=5000] a connection that served this long
 *   (from the server's capabilities) resets the backoff to minDelay when it
 *   drops
 */

/**
 * @typedef {object} ClientOptions
 * @property {Function} [WebSocket] the WebSocket constructor; globalThis.WebSocket by default
 * @property {{url: string, serverCertificateHashes?: Array, WebTransport?: Function}} [webTransport]
 *   try WebTransport at url first (§8.2), falling back to WebSocket when it
 *   fails to open or the browser has none; the rest is passed to the
 *   WebTransport constructor
 * @property {{url: string, iceServers?: Array}} [webRTC] try a WebRTC data
 *   channel through the signalling endpoint at url (after WebTransport,
 *   before WebSocket)
 * @property {number} [callTimeout=30000] timeout of calls, joins and leaves that give none, ms; 0: none
 * @property {number} [connectTimeout=10000] how long an opening handshake may
 *   take, through the server's capabilities, ms; 0: no limit
 * @property {number} [keepaliveInterval=25000] silence from the server, ms,
 *   after which the client sends it a Ping packet (§4.8)
 * @property {number} [idleTimeout=60000] silence, ms, after which the
 *   connection is given up (CloseError 1001 HP_IDLE_TIMEOUT) and the client
 *   reconnects; the Ping must have gone unanswered for idleTimeout -
 *   keepaliveInterval. 0: no pings, no timeout
 * @property {ReconnectOptions|false} [reconnect] backoff; false: do not reconnect
 * @property {number} [maxBatch=1024] most packets in one Batch; lowered to the server's maxBatch
 * @property {number} [maxMessage=1048576] largest message sent, bytes; set to the server's maxMessage
 *   when its capabilities arrive (nothing but the client's own and a Pong
 *   leaves before them, so no packet goes out over a limit not yet known),
 *   kept when the server names none: such a server, or a proxy before it,
 *   may still have a limit, and a message over it would close the
 *   connection with every call in flight instead of failing alone (a Pong,
 *   the server's own Ping echoed, is held to the carrier's limit only);
 *   2^32-1: no cap
 * @property {number} [maxQueue=1024] most packets queued while not connected,
 *   or while the carrier holds more than maxBuffered bytes unsent
 * @property {number} [maxQueueBytes=16777216] most bytes those packets hold
 *   (calls' payloads, other packets whole); past either bound a packet
 *   fails with Overloaded (7)
 * @property {number} [maxBuffered=1048576] bytes the carrier may hold unsent
 *   (its bufferedAmount) before packets wait in the queue instead
 * @property {number} [maxReceive=16777216] largest message received, bytes,
 *   announced to the server (§4.9); a larger one closes the connection
 *   (CloseError 1009 HP_ERR_MESSAGE_TOO_BIG)
 * @property {number} [maxAsks=128] most server asks whose handlers run, or
 *   whose answers wait in the queue (past maxQueue and maxQueueBytes), at
 *   once; more are answered Overloaded (7) at once
 * @property {() => number} [random=Math.random] jitter source, for tests
 * @property {{setTimeout: Function, clearTimeout: Function, now: () => number}} [timers] clock, for tests
 */

/**
 * Client is one logical connection to a hotpath server. It connects at
 * once and stays connected: when the WebSocket drops it reconnects with
 * capped exponential backoff and jitter, and rejoins its rooms.
 *
 * Calls and other packets issued in one task are queued and leave together
 * in a microtask: one packet alone as itself, several as one Batch (§4.7).
 * While disconnected they wait in the queue (bounded by maxQueue and
 * maxQueueBytes) and leave on the next connection, unless their timeout
 * passes first. Calls already sent when the connection drops fail with a
 * CloseError: the server may or may not have run them. Joins and leaves
 * are idempotent, so they are sent again instead.
 *
 * Call timeouts use one setTimeout per call: browsers keep timers in a
 * priority queue, so a timer armed and cleared per call is cheap, exact, and
 * costs nothing when no call is in flight, where one interval timer would
 * wake the page at a fixed rate and fire up to a period late.
 */
export class Client {
  #url; #WebSocket; #timers; #random; #carriers;
  #callTimeout; #connectTimeout; #keepaliveInterval; #idleTimeout; #reconnect; #maxBatch; #maxMessage; #maxQueue; #maxQueueBytes; #maxAsks; #maxReceive; #maxBuffered;
  #options; // maxBatch and maxMessage as given, before a server's capabilities
  #maxEmit = Infinity; // the server's maxEmit (§4.9): largest emit payload it relays
  #state = 'connecting';
  #closed = false;
  #conn = null; // {ws, carrier, openedAt, ready, servedAt, timer, asks, lastRead, pingedAt, liveTimer, draining, drainTimer, shareTimer, startedAt, answering: answers queued}; null while disconnected
  #unreliableSent = 0; #unreliableDropped = 0;
  #queueBytes = 0; // what the queue's items hold (queuedBytes), kept by #add and #requeue
  #queue = []; // pending entries and {packet, conn?, answers?, held?, emitted?} items (answers: the id of the ask answered; held: counted in conn.answering; emitted: an emit's payload bytes), in order
  #flushScheduled = false;
  #pending = new Map(); // id → entry of a call, join or leave
  #nextId = 0;
  #rooms = new Set(); // rooms to be in, rejoined after a reconnect
  #roomIntent = new Map(); // room → its latest join, leave or rejoin entry, while pending
  #listeners = new Map(); // key → Set of listeners
  #handlers = new Map(); // ask method → handler
  #capabilities = null;
  #step; #attempt = 0; #retryTimer = null;

  /**
   * @param {string} [url='/ws'] ws:, wss:, http: or https: URL, or a path
   *   resolved against the page's location
   * @param {ClientOptions} [options]
   */
  constructor(url = '/ws', options = {}) {
    this.#url = resolveURL(url);
    this.#WebSocket = options.WebSocket ?? globalThis.WebSocket;
    if (typeof this.#WebSocket !== 'function') throw new TypeError('hotpath: no WebSocket implementation; pass options.WebSocket');
    this.#carriers = [];
    const wt = options.webTransport;
    if (wt) {
      const { url: wtURL, WebTransport: WT = globalThis.WebTransport, ...wtOptions } = wt;
      if (typeof WT === 'function') {
        const u = resolveURL(wtURL, 'https:');
        this.#carriers.push(['webtransport', () => new WebTransportSocket(u, wtOptions, WT, { maxMessage: this.#maxReceive })]);
      }
    }
    const rtc = options.webRTC;
    if (rtc && typeof (rtc.RTCPeerConnection ?? globalThis.RTCPeerConnection) === 'function') {
      const u = resolveURL(rtc.url, 'http:');
      this.#carriers.push(['webrtc', () => new DataChannelSocket(u, rtc)]);
    }
    this.#carriers.push(['websocket', () => new this.#WebSocket(this.#url, SUBPROTOCOL)]);
    this.#timers = options.timers ?? defaultTimers;
    this.#random = options.random ?? Math.random;
    this.#callTimeout = numberOption('callTimeout', options.callTimeout ?? 30_000, 0, MAX_DELAY);
    this.#connectTimeout = numberOption('connectTimeout', options.connectTimeout ?? 10_000, 0, MAX_DELAY);
    this.#idleTimeout = numberOption('idleTimeout', options.idleTimeout ?? 60_000, 0, MAX_DELAY);
    // Used only with an idleTimeout, and then under it.
    this.#keepaliveInterval = numberOption('keepaliveInterval', options.keepaliveInterval ?? 25_000, 0, MAX_DELAY);
    if (this.#idleTimeout > 0 && !(this.#keepaliveInterval >= 1 && this.#keepaliveInterval < this.#idleTimeout)) {
      throw new RangeError('hotpath: option keepaliveInterval must be at least 1 and under idleTimeout');
    }
    const r = options.reconnect ?? true;
    if (r !== false && r !== true && typeof r !== 'object') throw new TypeError('hotpath: option reconnect must be an object or false');
    this.#reconnect = r === false ? null : { minDelay: 250, maxDelay: 10_000, stableAfter: 5_000, ...r };
    if (this.#reconnect !== null) {
      const { minDelay, maxDelay, stableAfter } = this.#reconnect;
      numberOption('reconnect.maxDelay', maxDelay, 1, MAX_DELAY);
      numberOption('reconnect.minDelay', minDelay, 1, maxDelay);
      numberOption('reconnect.stableAfter', stableAfter, 0, Infinity);
    }
    this.#step = this.#reconnect?.minDelay;
    this.#maxBatch = numberOption('maxBatch', options.maxBatch ?? 1024, 1, MAX_U32, true);
    this.#maxMessage = numberOption('maxMessage', options.maxMessage ?? 1 << 20, 1, MAX_U32, true);
    this.#options = { maxBatch: this.#maxBatch, maxMessage: this.#maxMessage };
    this.#maxQueue = numberOption('maxQueue', options.maxQueue ?? 1024, 0, Infinity, true);
    this.#maxQueueBytes = numberOption('maxQueueBytes', options.maxQueueBytes ?? MAX_QUEUE_BYTES, 0, Infinity);
    this.#maxAsks = numberOption('maxAsks', options.maxAsks ?? 128, 0, Infinity, true);
    this.#maxReceive = numberOption('maxReceive', options.maxReceive ?? MAX_RECEIVE, 1, MAX_U32, true);
    this.#maxBuffered = numberOption('maxBuffered', options.maxBuffered ?? MAX_BUFFERED, 0, Infinity);
    this.#connect();
  }

  /** 'connecting', 'open', 'reconnecting' or 'closed'. */
  get state() { return this.#state; }

  /** What the connection runs over: 'webtransport', 'webrtc' or
   * 'websocket', from the moment its carrier opens (before the server's
   * capabilities, and so before state is 'open'); null until then. */
  get carrier() { return this.#conn?.openedAt >= 0 ? this.#conn.carrier : null; }

  /** The server's capabilities (§4.9) as an object, once it sent them. */
  get capabilities() { return this.#capabilities; }

  /** The rooms the client is in or joining, rejoined after a reconnect. */
  get rooms() { return [...this.#rooms]; }

  /**
   * Calls method with params and resolves with the decoded result. It
   * rejects with an RPCError (the server's, or code 5 when `timeout` ms
   * pass first), a CloseError when the connection drops after the call was
   * sent, or a TypeError/RangeError for arguments that cannot be sent.
   *
   * @param {string} method
   * @param {*} [params] JSON-encodable, or bytes sent as they are (a Uint8Array, an ArrayBuffer, a DataView or typed array)
   * @param {{timeout?: number, raw?: boolean}} [options] raw: resolve with
   *   the result's bytes instead of decoding JSON
   * @returns {Promise<*>}
   */
  call(method, params, { timeout = this.#callTimeout, raw = false } = {}) {
    return new Promise((resolve, reject) => {
      checkName(method, 'method');
      const payload = encodeJSON(params);
      // The packet is encoded when it leaves (its timeout is what is left
      // then): refuse now only what is over the limit however it is
      // encoded (a 1-byte id, timeout and name length); the flush checks
      // the packet itself.
      this.#checkSize(4 + utf8.encode(method).length + payload.length);
      this.#add(this.#entry('call', { method, payload, raw, timeout, resolve, reject }));
    });
  }

  /** Calls method without waiting for an answer: the server sends none
   * (a notification, id 0, §4.1). */
  notify(method, params) {
    const packet = encodePacket({ kind: 'call', id: 0, method, timeout: 0, payload: encodeJSON(params) });
    this.#checkSize(packet.length);
    this.#add({ packet });
  }

  /** Sends a fire-and-forget event to the server's event handlers (§4.3). */
  event(name, data) {
    checkName(name, 'event');
    if (name.startsWith('$')) throw new RangeError('hotpath: event names starting with $ are reserved');
    const packet = encodePacket({ kind: 'event', event: name, payload: encodeJSON(data) });
    this.#checkSize(packet.length);
    this.#add({ packet });
  }

  /**
   * Listens to the server's events named `event`.
   * @param {string} event
   * @param {(data: *, meta: {event: string}) => void} fn
   * @returns {() => void} off
   */
  on(event, fn) { return this.#listen(`event:${event}`, fn); }

  /**
   * Joins room and resolves with {room, members} (§4.5). The client
   * rejoins the room after every reconnect until leave(room).
   * @param {string} room
   * @param {{timeout?: number}} [options]
   * @returns {Promise<{room: string, members: number}>}
   */
  join(room, { timeout = this.#callTimeout } = {}) {
    return new Promise((resolve, reject) => {
      checkName(room, 'room');
      const e = this.#entry('join', { room, timeout, resolve, reject });
      this.#rooms.add(room);
      this.#roomIntent.set(room, e);
      this.#add(e);
    });
  }

  /**
   * Leaves room and resolves with {room, members}.
   * @param {string} room
   * @param {{timeout?: number}} [options]
   * @returns {Promise<{room: string, members: number}>}
   */
  leave(room, { timeout = this.#callTimeout } = {}) {
    return new Promise((resolve, reject) => {
      checkName(room, 'room');
      const e = this.#entry('leave', { room, timeout, resolve, reject });
      this.#rooms.delete(room);
      this.#roomIntent.set(room, e);
      this.#add(e);
    });
  }

  /**
   * Sends event with data to every member of room, this client included
   * unless exceptSelf (§4.6). The client must have joined room: the server
   * drops emits from non-members, so this throws instead. It throws a
   * RangeError likewise for data whose encoding is over the server's
   * maxEmit (§4.9), which the server would drop; one made before the
   * server's capabilities (on a reconnection too: the limit is each
   * connection's) is checked once they arrive, and one found over it then
   * is reported (onError) instead of sent.
   * @param {string} room
   * @param {string} event
   * @param {*} [data]
   * @param {{exceptSelf?: boolean}} [options]
   */
  emit(room, event, data, { exceptSelf = false } = {}) {
    this.#add(this.#emitPacket(room, event, data, exceptSelf));
  }

  // emitPacket checks and encodes an Emit of this client, as a queue item.
  #emitPacket(room, event, data, exceptSelf) {
    if (!this.#rooms.has(room)) throw new Error(`hotpath: not a member of room ${JSON.stringify(room)}; join it first`);
    checkName(event, 'event');
    if (event.startsWith('$')) throw new RangeError('hotpath: event names starting with $ are reserved');
    const flags = exceptSelf ? EXCEPT_SENDER : 0;
    const payload = encodeJSON(data);
    // A maxEmit is its connection's (§4.9): until this connection's server
    // sent its own, the last server's held a reconnection's emits to a
    // limit the next server may not have. #flush checks them then.
    if (this.#conn?.ready) this.#checkEmit(payload.length);
    const packet = encodePacket({ kind: 'emit', room, event, flags, payload });
    this.#checkSize(packet.length);
    return { packet, emitted: payload.length };
  }

  // checkEmit refuses an emit whose payload, n bytes as encoded, is over
  // the server's maxEmit (§4.9): the server would drop it unseen, since
  // an emit has no answer.
  #checkEmit(n) {
    if (n > this.#maxEmit) throw new RangeError(`hotpath: an emit's payload of ${n} bytes is over the server's emit limit (maxEmit) of ${this.#maxEmit}`);
  }

  /**
   * emit for events the room may miss without harm (§8.4): over
   * WebTransport it leaves as a datagram, over WebRTC on the unordered,
   * never retransmitted channel, and the server relays it to the members
   * the same way where it can. On WebSocket, before the connection is
   * open, or when it does not fit a datagram, it is sent as emit sends it.
   * When the unreliable path holds more than maxBuffered bytes unsent, it
   * is dropped (counted in unreliableDropped), as the network would drop
   * it: queued, it would arrive late behind the emits that made it wait,
   * and sent reliably, it would delay everything else.
   * @param {string} room
   * @param {string} event
   * @param {*} [data]
   * @param {{exceptSelf?: boolean}} [options]
   */
  emitUnreliable(room, event, data, { exceptSelf = false } = {}) {
    const item = this.#emitPacket(room, event, data, exceptSelf);
    const { packet } = item;
    const ws = this.#conn?.ready ? this.#conn.ws : null;
    if (ws?.transmitUnreliable !== undefined) {
      // Datagram writes nobody waited for piled up in the stream's queue
      // without bound, as did a data channel's bufferedAmount.
      if (ws.unreliableBufferedAmount > this.#maxBuffered) {
        this.#unreliableDropped++;
        return;
      }
      if (ws.transmitUnreliable(packet)) {
        this.#unreliableSent++;
        return;
      }
    }
    this.#add(item);
  }

  /** How many emitUnreliable calls left unreliably (as datagrams or on the
   * unreliable channel) rather than as emit sends them. */
  get unreliableSent() { return this.#unreliableSent; }

  /** How many emitUnreliable calls were dropped because the unreliable
   * path held more than maxBuffered bytes unsent. */
  get unreliableDropped() { return this.#unreliableDropped; }

  /**
   * Listens to the emits of event in room, including the presence events
   * '$join' and '$leave' whose data is {members}.
   * @param {string} room
   * @param {string} event
   * @param {(data: *, meta: {room: string, event: string}) => void} fn
   * @returns {() => void} off
   */
  onRoom(room, event, fn) { return this.#listen(JSON.stringify([room, event]), fn); }

  /**
   * Answers the server's asks of method (§4.4) with what fn returns. An
   * RPCError thrown by fn is answered as is; any other error is answered
   * as Internal and reported to onError listeners. The signal aborts when
   * the ask's timeout passes or the connection drops.
   * @param {string} method
   * @param {(params: *, meta: {method: string, signal: AbortSignal}) => *} fn
   * @returns {() => void} off
   */
  handle(method, fn) {
    checkName(method, 'method');
    if (typeof fn !== 'function') throw new TypeError('hotpath: a handler must be a function');
    this.#handlers.set(method, fn);
    return () => { if (this.#handlers.get(method) === fn) this.#handlers.delete(method); };
  }

  /**
   * Listens to connection state changes: {state: 'open'} (once the
   * server's capabilities arrived), {state:
   * 'reconnecting', error, delay, attempt} (error is the CloseError that
   * ended the last connection, delay the ms until the next attempt), and
   * {state: 'closed', error} after close() or when reconnecting is off.
   * @param {(change: {state: string, error?: CloseError, delay?: number, attempt?: number}) => void} fn
   * @returns {() => void} off
   */
  onState(fn) { return this.#listen('state', fn); }

  /** Listens to errors nobody else would see: a listener that threw, a
   * failed rejoin, an ask handler's unexpected error. Without listeners
   * they go to reportError (the console). @returns {() => void} off */
  onError(fn) { return this.#listen('error', fn); }

  /** Sends what is queued, closes the connection with 1000 and stops
   * reconnecting. Calls still waiting fail with CloseError 1000. */
  close() {
    if (this.#closed) return;
    this.#flush(true);
    this.#closed = true;
    this.#timers.clearTimeout(this.#retryTimer);
    const err = new CloseError(1000, 'closed by client');
    const conn = this.#conn;
    if (conn === null) {
      this.#shutdown(err);
      return;
    }
    // Dropped before the socket is closed: a carrier still opening (a
    // WebTransport session, a data channel) fires its close event at once,
    // which would read as a failure to open and start the next carrier.
    this.#drop(conn, err);
    conn.ws?.close(1000);
  }

  #connect() {
    this.#retryTimer = null;
    const conn = { ws: null, carrier: null, openedAt: -1, ready: false, servedAt: -1, timer: null, asks: new Set(), lastRead: 0, pingedAt: -1, liveTimer: null, draining: false, drainTimer: null, shareTimer: null, startedAt: this.#timers.now(), answering: 0 };
    this.#conn = conn;
    this.#open(conn, 0);
    // A carrier that threw at once dropped conn already: no timer for it.
    if (this.#connectTimeout === 0 || conn !== this.#conn) return;
    conn.timer = this.#timers.setTimeout(() => {
      // Dropped before the socket is closed: Node's WebSocket fires its
      // error event at once when closed while connecting, and that
      // dropped the connection first, as HP_ERR_CONNECT_FAILED. Closed
      // with 1000, as the Go client closes a connection it gives up: a
      // server that upgraded and sent no capabilities reads why the
      // client left, where a bare close() read 1005.
      this.#drop(conn, new CloseError(1006, 'HP_ERR_CONNECT_TIMEOUT'));
      conn.ws?.close(1000);
    }, this.#connectTimeout);
  }

  // open tries the carriers from the i-th on: one that fails before it
  // opens gives way to the next (WebTransport, then a data channel, then
  // WebSocket), within the same connect attempt and its timeout. One that
  // neither opens nor fails is given up once it has had its share of the
  // connect timeout (see below).
  #open(conn, i) {
    this.#timers.clearTimeout(conn.shareTimer);
    const [name, make] = this.#carriers[i];
    const fallBack = i + 1 < this.#carriers.length
      ? () => { if (conn === this.#conn && conn.openedAt < 0) this.#open(conn, i + 1); }
      : null;
    let ws;
    try {
      ws = make();
    } catch (err) {
      if (fallBack !== null) { fallBack(); return; }
      this.#drop(conn, new CloseError(1006, String(err?.message ?? err)));
      return;
    }
    conn.ws = ws;
    conn.carrier = name;
    const giveUp = () => {
      conn.ws = null;
      try { ws.close(); } catch { /* never opened */ }
      fallBack();
    };
    // A carrier that hangs would take the whole connect timeout, and the
    // next attempt would try it again: Chromium gives up on a silent UDP
    // port (WebTransport, WebRTC) only after about 4 s, so with a shorter
    // connectTimeout a firewalled WebTransport never fell back at all.
    // Each carrier but the last gets what is left of the timeout divided
    // by the carriers left to try: with the default 10 s, WebTransport 5 s
    // before WebSocket, or 3.3 s before WebRTC. Without a connect timeout
    // a carrier has as long as the browser gives it.
    if (fallBack !== null && this.#connectTimeout > 0) {
      const left = this.#connectTimeout - (this.#timers.now() - conn.startedAt);
      conn.shareTimer = this.#timers.setTimeout(() => {
        if (conn.ws === ws && conn.openedAt < 0) giveUp();
      }, left / (this.#carriers.length - i));
    }
    ws.binaryType = 'arraybuffer';
    ws.onopen = () => { if (conn.ws === ws) this.#onOpen(conn); };
    ws.onmessage = (ev) => { if (conn.ws === ws) this.#onMessage(conn, ev.data, ev.datagram === true); };
    ws.onclose = (ev) => {
      if (conn.ws !== ws) return;
      if (conn.openedAt < 0 && fallBack !== null) { fallBack(); return; }
      this.#drop(conn, new CloseError(ev.code ?? 1006, ev.reason ?? ''));
    };
    // Browsers follow every error event with a close event; Node 20's
    // WebSocket does not when the handshake fails, so one that fails
    // before opening ends here (a close event after it is ignored).
    ws.onerror = () => {
      if (conn.ws !== ws || conn.openedAt >= 0) return;
      if (fallBack !== null) {
        giveUp();
        return;
      }
      this.#drop(conn, new CloseError(1006, 'HP_ERR_CONNECT_FAILED'));
    };
  }

  // onOpen: the carrier is open. The connect timeout runs on until the
  // server's capabilities arrive (#onReady): a server that hung after its
  // upgrade kept what was queued waiting until idleTimeout.
  #onOpen(conn) {
    if (conn !== this.#conn) return;
    this.#timers.clearTimeout(conn.shareTimer);
    conn.openedAt = this.#timers.now();
    conn.lastRead = conn.openedAt;
    this.#watchLiveness(conn);
    // Capabilities first, alone: it may not be a batch item (§4.7). They
    // announce maxReceive, so that a server following §4.9 answers a
    // result over it with an error instead of one this client refuses.
    conn.ws.send(encodePacket({ kind: 'capabilities', pairs: [['codec', 'json'], ['maxMessage', String(this.#maxReceive)]] }));
  }

  // onReady: the server's first capabilities arrived on conn. Only now is
  // the connection open: a server that closes at once after the upgrade
  // (over a quota, or refusing the client) was reported open at every
  // attempt. The rejoins go first, so that queued emits find the rooms
  // joined; then the queue leaves.
  #onReady(conn) {
    this.#timers.clearTimeout(conn.timer);
    conn.ready = true;
    conn.servedAt = this.#timers.now();
    const joining = new Set();
    for (const e of this.#pending.values()) if (e.kind === 'join') joining.add(e.room);
    const rejoins = [];
    for (const room of this.#rooms) {
      if (joining.has(room)) continue;
      const e = this.#entry('join', {
        room,
        rejoin: true,
        timeout: this.#callTimeout,
        resolve() {},
        reject: (err) => {
          if (err instanceof CloseError) return; // closed by its owner
          this.#report(new Error(`hotpath: rejoining room ${JSON.stringify(room)} failed: ${err.message}`, { cause: err }));
        },
      });
      this.#roomIntent.set(room, e);
      rejoins.push(e);
    }
    this.#queue.unshift(...rejoins);
    this.#setState('open');
    this.#flush();
  }

  // watchLiveness is the keepalive of conn (§4.8): the server's WebSocket
  // pings do not reach a page, so the page pings when the server has been
  // silent for keepaliveInterval and gives up once its Ping has gone
  // unanswered for idleTimeout - keepaliveInterval. Counting from the Ping,
  // not from the silence, keeps a page whose timers the browser throttles
  // (a hidden tab's may fire a minute late) from giving up a live server
  // before asking it.
  #watchLiveness(conn) {
    if (this.#idleTimeout === 0 || conn !== this.#conn) return;
    const now = this.#timers.now();
    const grace = this.#idleTimeout - this.#keepaliveInterval;
    let next;
    if (conn.pingedAt >= 0) {
      if (now - conn.pingedAt >= grace) {
        conn.ws.close(4001, 'HP_IDLE_TIMEOUT');
        this.#drop(conn, new CloseError(1001, 'HP_IDLE_TIMEOUT'));
        return;
      }
      next = conn.pingedAt + grace;
    } else if (now - conn.lastRead >= this.#keepaliveInterval) {
      conn.pingedAt = now;
      this.#control(conn, encodePacket({ kind: 'ping', data: EMPTY }));
      next = now + grace;
    } else {
      next = conn.lastRead + this.#keepaliveInterval;
    }
    conn.liveTimer = this.#timers.setTimeout(() => this.#watchLiveness(conn), next - now);
  }

  #onMessage(conn, data, datagram = false) {
    if (conn !== this.#conn) return;
    conn.lastRead = this.#timers.now();
    conn.pingedAt = -1;
    if (typeof data === 'string') {
      this.#violate(conn, 1003, 'HP_ERR_TEXT_MESSAGE');
      return;
    }
    const b = toBytes(data);
    // Over maxReceive (§7: 1009). A WebSocket or data channel has the
    // whole message by now, but nothing keeps it; on WebTransport the
    // control stream's deframer refused it on its length prefix.
    if (b.length > this.#maxReceive) {
      this.#violate(conn, 1009, 'HP_ERR_MESSAGE_TOO_BIG');
      return;
    }
    // A datagram carries an Emit or an Event, nothing else (PROTOCOL.md
    // §8.4): a server that sent a Result or an Ask so broke the protocol.
    if (datagram) {
      const kind = b.length > 0 ? b[0] & ~COMPRESSED : 0;
      if (b.length > 0 && kind !== KIND_NUMBER.emit && kind !== KIND_NUMBER.event) {
        this.#violate(conn, 1008, 'HP_ERR_DATAGRAM_KIND');
        return;
      }
    }
    // The kind and its direction are read from the head byte before the
    // body (§3): a kind only clients send is unknown whatever its body,
    // malformed or compressed, as at the Go ends (a compressed one was
    // HP_ERR_UNNEGOTIATED_COMPRESSION here).
    if (b.length > 0 && CLIENT_ONLY.has(b[0] & ~COMPRESSED)) {
      this.#violate(conn, 1008, 'HP_ERR_UNKNOWN_KIND');
      return;
    }
    const p = this.#decode(conn, decodePacket, b);
    if (p === undefined) return;
    if (p.kind !== 'batch') {
      this.#onPacket(conn, p);
      return;
    }
    // A batch's framing was checked whole by decodePacket; its items are
    // decoded and handled one at a time, in order, as the Go ends handle
    // them (§4.7): a bad item closes the connection, and the items before
    // it have been handled. (This end decoded every item first, so a
    // Result before a bad item was lost here and delivered in Go.)
    for (const item of p.items) {
      if (conn !== this.#conn) return; // a listener closed the client, or an item broke the protocol
      const ip = this.#decode(conn, decodeItem, item);
      if (ip !== undefined) this.#onPacket(conn, ip);
    }
  }

  // decode returns decoder(b), or undefined when it throws a WireError,
  // having closed conn with its code.
  #decode(conn, decoder, b) {
    try {
      return decoder(b);
    } catch (err) {
      if (!(err instanceof WireError)) throw err;
      this.#violate(conn, err.closeCode, err.code);
      return undefined;
    }
  }

  #onPacket(conn, p) {
    if (p.compressed) {
      this.#violate(conn, 1008, 'HP_ERR_UNNEGOTIATED_COMPRESSION');
      return;
    }
    switch (p.kind) {
      case 'result': case 'error': {
        const e = this.#pending.get(p.id);
        if (e === undefined || e.conn !== conn) return; // answered after its timeout
        if (p.kind === 'error') {
          let data;
          try { data = decodeJSON(p.data); } catch { data = p.data; }
          this.#settle(e, new RPCError(p.code, p.message, data));
          return;
        }
        let value;
        try {
          value = e.raw ? p.payload : decodeJSON(p.payload);
        } catch (err) {
          this.#settle(e, err);
          return;
        }
        this.#settle(e, null, value);
        return;
      }
      case 'event':
        this.#deliver(`event:${p.event}`, p.payload, { event: p.event });
        return;
      case 'emit':
        this.#deliver(JSON.stringify([p.room, p.event]), p.payload, { room: p.room, event: p.event });
        return;
      case 'ask':
        this.#runAsk(conn, p);
        return;
      case 'ping':
        // A Pong is as long as its Ping (§4.8): one over the server's
        // maxMessage would have it close with 1009, so this end closes so
        // instead, as the server does on a client's such Ping. Before the
        // server's capabilities only the carrier's limit is known, and the
        // Pong leaves at once (see #control), as the Go client's does.
        if (1 + p.data.length > this.#pongLimit(conn)) {
          this.#violate(conn, 1009, 'HP_ERR_MESSAGE_TOO_BIG');
          return;
        }
        this.#control(conn, encodePacket({ kind: 'pong', data: p.data }));
        return;
      case 'pong':
        return;
      case 'capabilities': {
        // A server sends its capabilities once per connection (§4.9), as a
        // client does: a repeat could change the limits that what is queued
        // was checked against. The server closes on a client's repeat alike.
        if (conn.ready) {
          this.#violate(conn, 1008, 'HP_ERR_REPEATED_CAPABILITIES');
          return;
        }
        const caps = Object.fromEntries(p.pairs);
        // This client speaks JSON only (§4.9): a server that chose another
        // codec would answer in bytes it cannot decode.
        if (caps.codec !== undefined && caps.codec !== 'json') {
          this.#violate(conn, 1008, 'HP_ERR_UNSUPPORTED_CODEC');
          return;
        }
        this.#capabilities = caps;
        const maxBatch = Number(this.#capabilities.maxBatch);
        const maxMessage = Number(this.#capabilities.maxMessage);
        const maxEmit = Number(this.#capabilities.maxEmit);
        // Each server's limits hold for its connection only: another
        // server (a restart, the next one behind a balancer) has its own.
        const options = this.#options;
        this.#maxBatch = Number.isInteger(maxBatch) && maxBatch > 0 ? Math.min(options.maxBatch, maxBatch) : options.maxBatch;
        this.#maxMessage = Number.isInteger(maxMessage) && maxMessage > 0 ? maxMessage : options.maxMessage;
        this.#maxEmit = Number.isInteger(maxEmit) && maxEmit > 0 ? maxEmit : Infinity;
        // What waited for the server's limits leaves now (see #flush).
        this.#onReady(conn);
        return;
      }
      default: // a kind only clients send
        this.#violate(conn, 1008, 'HP_ERR_UNKNOWN_KIND');
    }
  }

  // control sends a Ping or a Pong on conn ahead of the queue: there a
  // keepalive Ping waited out a backlog, or was dropped with the queue
  // full, and a live server reading slowly was given up at idleTimeout.
  // It waits only behind what the carrier holds (about maxBuffered), as
  // the Go client's behind its outbox. A Ping of the client's own waits
  // for the server's capabilities; a Pong leaves at once, as the Go
  // client's does, checked by #pongLimit against the limit known then:
  // queued, it was held at flush to limits that do not bound a Pong (this
  // client's maxMessage option), and one over them was dropped without
  // the 1009 that a Ping over the server's limit gets. A Pong is dropped
  // while the carrier is over maxBuffered: a server pinging without
  // reading would grow it, and one that reads sees life in what it reads
  // (§4.8).
  #control(conn, packet) {
    if (!conn.ready && packet[0] !== KIND_NUMBER.pong) {
      this.#add({ packet, conn });
      return;
    }
    if (packet[0] === KIND_NUMBER.pong && this.#backlogged(conn)) return;
    try {
      conn.ws.send(packet);
    } catch { /* the carrier is closing: its close event says why */ }
  }

  // violate closes a connection whose server broke the protocol (§7).
  // Browsers may send only 1000 and 3000-4999, so the frame carries 4000 +
  // the protocol's code (4008 for 1008); the error keeps the protocol's.
  #violate(conn, code, reason) {
    conn.ws.close(4000 + (code - 1000), reason);
    this.#drop(conn, new CloseError(code, reason));
  }

  async #runAsk(conn, p) {
    if (conn.asks.size + conn.answering >= this.#maxAsks) {
      // A server asking faster than the handlers answer, or than the
      // carrier takes the answers, must not grow them (and their timers)
      // without bound.
      this.#add({ packet: this.#errorAnswer(p.id, new RPCError(Code.Overloaded, 'too many asks in flight')), conn, answers: p.id });
      return;
    }
    const ac = new AbortController();
    conn.asks.add(ac);
    const timer = p.timeout > 0
      ? this.#timers.setTimeout(() => ac.abort(new RPCError(Code.Timeout, 'ask timed out')), Math.min(p.timeout, MAX_DELAY))
      : null;
    // Aborted with its connection, the ask needs its timer no more: a
    // handler that never settles kept it (and a Node process) alive.
    ac.signal.addEventListener('abort', () => this.#timers.clearTimeout(timer), { once: true });
    let answer;
    try {
      const fn = this.#handlers.get(p.method);
      if (fn === undefined) throw new RPCError(Code.NotFound, `method not found: ${p.method}`);
      let params;
      try { params = decodeJSON(p.payload); } catch { throw new RPCError(Code.InvalidParams, 'params are not valid JSON'); }
      const result = await fn(params, { method: p.method, signal: ac.signal });
      answer = encodePacket({ kind: 'answer', id: p.id, status: 0, payload: encodeJSON(result) });
    } catch (err) {
      // A handler that gave up for its signal (the ask's timeout, or the
      // connection's end: a drop, close()) answers nobody, and that is no
      // unexpected error: onError heard of each such handler, even after
      // close() had returned.
      if (ac.signal.aborted && (err === ac.signal.reason || err?.name === 'AbortError')) return;
      answer = this.#errorAnswer(p.id, err);
    } finally {
      this.#timers.clearTimeout(timer);
      conn.asks.delete(ac);
    }
    // After the timeout or on another connection nobody waits for it.
    // Queued, it keeps the ask's place under maxAsks until it leaves
    // (held), so maxQueue need not bound it: refused by it, it was lost
    // and the server's Ask waited for its timeout.
    if (!ac.signal.aborted && conn === this.#conn) {
      conn.answering++;
      this.#add({ packet: answer, conn, answers: p.id, held: true });
    }
  }

  #errorAnswer(id, err) {
    if (err instanceof RPCError && Number.isInteger(err.code) && err.code >= 0 && err.code <= MAX_U32) {
      try {
        const message = truncateUTF8(String(err.message), MAX_VALUE);
        // Code 0 and codes 10-999, kept for later versions of the protocol
        // (PROTOCOL.md §4.2), are sent as Internal, message and data kept.
        const code = err.code === 0 || (err.code > Code.Unavailable && err.code < Code.Application) ? Code.Internal : err.code;
        return encodePacket({ kind: 'answer', id, status: 1, code, message, data: encodeJSON(err.data) });
      } catch (encodeErr) {
        err = encodeErr;
      }
    }
    this.#report(err);
    return encodePacket({ kind: 'answer', id, status: 1, code: Code.Internal, message: 'internal error' });
  }

  // drop ends conn, once: calls sent on it fail, joins and leaves sent on
  // it go back to the queue, and a reconnect is scheduled.
  #drop(conn, err) {
    if (conn !== this.#conn) return;
    this.#conn = null;
    this.#timers.clearTimeout(conn.timer);
    this.#timers.clearTimeout(conn.liveTimer);
    this.#timers.clearTimeout(conn.drainTimer);
    this.#timers.clearTimeout(conn.shareTimer);
    for (const ac of conn.asks) ac.abort(err);
    const resend = [];
    for (const e of this.#pending.values()) {
      if (e.conn !== conn) continue;
      if (e.kind === 'call') {
        this.#settle(e, err);
      } else {
        e.conn = null;
        resend.push(e);
      }
    }
    this.#queue.unshift(...resend);
    if (this.#closed || this.#reconnect === null) {
      this.#shutdown(err);
      return;
    }
    const { minDelay, maxDelay, stableAfter } = this.#reconnect;
    // Served, not open: waiting for capabilities that never came is no
    // service.
    if (conn.servedAt >= 0 && this.#timers.now() - conn.servedAt >= stableAfter) {
      this.#step = minDelay;
      this.#attempt = 0;
    }
    // Capped exponential backoff; the delay is drawn from the upper half of
    // the step, so that clients dropped together do not return together.
    const step = this.#step;
    const delay = Math.round(step / 2 + this.#random() * step / 2);
    this.#step = Math.min(2 * step, maxDelay);
    this.#attempt++;
    this.#retryTimer = this.#timers.setTimeout(() => this.#connect(), delay);
    this.#setState('reconnecting', { error: err, delay, attempt: this.#attempt });
  }

  #shutdown(err) {
    this.#closed = true;
    for (const e of this.#pending.values()) this.#settle(e, err);
    this.#requeue([]);
    this.#setState('closed', { error: err });
  }

  #entry(kind, fields) {
    checkTimeout(fields.timeout);
    do this.#nextId = this.#nextId === MAX_U32 ? 1 : this.#nextId + 1;
    while (this.#pending.has(this.#nextId));
    const e = { id: this.#nextId, kind, conn: null, deadline: 0, timer: null, ...fields };
    if (e.timeout > 0) {
      e.deadline = this.#timers.now() + e.timeout;
      e.timer = this.#timers.setTimeout(() => this.#settle(e, new RPCError(Code.Timeout, `timeout after ${e.timeout} ms`)), e.timeout);
    }
    this.#pending.set(e.id, e);
    return e;
  }

  // settle completes a pending entry once. A failed join forgets its
  // room; a failed rejoin after a reconnect only when the server refused
  // it (Unauthorized), as the Go client does: one that timed out or found
  // the server overloaded is tried again at the next reconnect. Only the
  // latest join or leave of a room decides: a join that fails after
  // another join or a leave of its room was issued forgets nothing (the
  // first of two joins timing out forgot the room the second joined).
  #settle(e, err, value) {
    if (this.#pending.get(e.id) !== e) return;
    this.#pending.delete(e.id);
    this.#timers.clearTimeout(e.timer);
    if (e.kind !== 'call' && this.#roomIntent.get(e.room) === e) {
      this.#roomIntent.delete(e.room);
      if (err !== null && e.kind === 'join' && (!e.rejoin || (err instanceof RPCError && err.code === Code.Unauthorized))) this.#rooms.delete(e.room);
    }
    if (err === null) {
      e.resolve(value);
      return;
    }
    e.reject(err);
  }

  // checkSize refuses a packet of at least n bytes over the limit of the
  // current connection. Before its server's capabilities the limit is not
  // known (on a reconnection the last server's is no guide: the next one
  // may take more): the flush checks the packet once it is.
  #checkSize(n) {
    if (!this.#conn?.ready) return;
    const limit = this.#packetLimit(this.#conn);
    if (n > limit) throw new RangeError(`hotpath: a packet of ${n} bytes is over ${this.#limitOwner(this.#conn)} limit of ${limit}`);
  }

  // packetLimit is the largest packet conn takes: the server's maxMessage,
  // or the carrier's message limit when lower (a WebRTC data channel's).
  #packetLimit(conn) {
    return Math.min(this.#maxMessage, conn?.ws.maxMessageSize ?? Infinity);
  }

  // pongLimit is the largest Pong conn takes (§4.8): the maxMessage the
  // server announced, or the carrier's message limit when lower. A server
  // that announced none set no limit of its own (§4.9), as the Go client
  // reads it: this client's maxMessage option, which caps what it sends
  // of its own accord, said nothing of what that server takes, and a
  // Ping over 1 MiB (the option's default) closed the connection here
  // where the Go client answered it. Before conn's server sent its
  // capabilities only the carrier's limit holds (#capabilities may still
  // be the previous server's).
  #pongLimit(conn) {
    const announced = conn.ready ? Number(this.#capabilities?.maxMessage) : NaN;
    const server = Number.isInteger(announced) && announced > 0 ? announced : Infinity;
    return Math.min(server, conn?.ws.maxMessageSize ?? Infinity);
  }

  #limitOwner(conn) {
    return (conn?.ws.maxMessageSize ?? Infinity) < this.#maxMessage ? 'the carrier\'s' : 'the server\'s';
  }

  // add queues a pending entry or a {packet, conn} item and schedules a
  // flush at the end of the current task.
  #add(item) {
    // Until the server's capabilities, and while the carrier holds more
    // than maxBuffered unsent, the queue waits (see #flush), so it is
    // bounded as while disconnected.
    const open = item.held === true || (this.#conn !== null && this.#conn.ready && !this.#backlogged(this.#conn));
    const bytes = queuedBytes(item);
    const full = () => this.#queue.length >= this.#maxQueue || this.#queueBytes + bytes > this.#maxQueueBytes;
    if (!open && full()) {
      // Calls, joins and leaves settled while queued (their timeout
      // passed), and packets for a connection that dropped (a Ping, an
      // answer), wait no more: they leave room before anything is refused.
      this.#requeue(this.#queue.filter((q) => (q.packet !== undefined
        ? q.conn === undefined || q.conn === this.#conn
        : this.#pending.get(q.id) === q)));
    }
    let err = null;
    if (this.#closed) {
      err = new CloseError(1000, 'closed by client');
    } else if (!open && bytes > this.#maxQueueBytes) {
      // It could never wait, however empty the queue: blaming the
      // packets there (often none) sent its caller looking elsewhere.
      err = new RPCError(Code.Overloaded, `hotpath: ${bytes} bytes are over maxQueueBytes (${this.#maxQueueBytes}): they cannot wait for the connection`);
    } else if (!open && full()) {
      err = new RPCError(Code.Overloaded, `hotpath: ${this.#queue.length} packets of ${this.#queueBytes} bytes already wait for the connection`);
    }
    if (err !== null) {
      // A packet of the client's own for one connection (a Ping before
      // the server's capabilities, an Overloaded answer) has no
      // caller to throw to: it was thrown out of the liveness timer or the
      // message handler, an uncaught exception that also stopped the
      // liveness watch. It is dropped: the server that sent no
      // capabilities is given up at idleTimeout as it is. A dropped answer
      // is reported: the server's Ask waits for its timeout.
      if (item.packet !== undefined && item.conn !== undefined) {
        if (item.answers !== undefined && !this.#closed) this.#report(new RPCError(Code.Overloaded, `hotpath: the answer to the server's ask ${item.answers} was dropped: ${this.#queue.length} packets of ${this.#queueBytes} bytes already wait for the connection`));
        return;
      }
      if (item.packet === undefined) this.#settle(item, err);
      throw err;
    }
    this.#queue.push(item);
    this.#queueBytes += bytes;
    if (!this.#flushScheduled) {
      this.#flushScheduled = true;
      queueMicrotask(() => this.#flush());
    }
  }

  // flush sends the queue: one packet as itself, several as Batches of at
  // most maxBatch items and 64 KiB, or maxMessage when lower; a larger
  // packet leaves alone (PROTOCOL.md §4.7). Nothing leaves before the
  // server's capabilities, which carry those limits: a packet sent over a
  // limit not yet known would make the server close the connection (1009)
  // instead of failing alone. One that turns out to be over it fails then.
  // Nor does anything leave while the carrier holds more than maxBuffered
  // unsent (unless force, for close()): the rest waits in the queue, where
  // maxQueue bounds it and calls' timeouts run, and flush looks again
  // every DRAIN_POLL ms.
  #flush(force = false) {
    this.#flushScheduled = false;
    const conn = this.#conn;
    if (conn === null || !conn.ready || this.#queue.length === 0) return;
    if (!force && this.#backlogged(conn)) {
      this.#awaitDrain(conn);
      return;
    }
    const queue = this.#queue;
    this.#requeue([]);
    const now = this.#timers.now();
    const limit = this.#packetLimit(conn);
    const batchLimit = Math.min(limit, MAX_BATCH_BYTES);
    let items = [];
    let sources = [];
    let size = 0;
    for (let i = 0; i < queue.length; i++) {
      const q = queue[i];
      let packet = this.#packetOf(q, conn, now);
      if (packet === null) continue;
      if (q.emitted !== undefined) {
        // An emit made before this server's maxEmit was known.
        try { this.#checkEmit(q.emitted); } catch (err) { this.#fail(q, err); continue; }
      }
      if (packet.length > limit) {
        const err = new RangeError(`hotpath: a packet of ${packet.length} bytes is over ${this.#limitOwner(conn)} limit of ${limit}`);
        if (q.answers === undefined) {
          this.#fail(q, err);
          continue;
        }
        // An ask's answer: the server still gets one, and its asker a
        // reason, instead of waiting for the ask's timeout. Kept in q, in
        // case q waits for the carrier below.
        this.#report(err);
        packet = q.packet = encodePacket({ kind: 'answer', id: q.answers, status: 1, code: Code.Internal, message: 'answer over the message limit' });
      }
      if (items.length > 0 && (items.length >= this.#maxBatch || size + packet.length + 5 > batchLimit - 6)) {
        this.#send(conn, items, sources);
        items = [];
        sources = [];
        size = 0;
        if (!force && this.#backlogged(conn)) {
          // q and what follows wait; a call is not on conn until sent.
          if (q.packet === undefined) q.conn = null;
          this.#requeue(queue.slice(i).concat(this.#queue));
          this.#awaitDrain(conn);
          return;
        }
      }
      if (q.held) conn.answering--;
      items.push(packet);
      sources.push(q);
      size += packet.length + 5;
    }
    if (items.length > 0) this.#send(conn, items, sources);
  }

  // requeue replaces the queue with items and counts their bytes. The
  // entries put back at its head (joins and leaves, #onReady, #drop) hold
  // none.
  #requeue(items) {
    this.#queue = items;
    this.#queueBytes = 0;
    for (const q of items) this.#queueBytes += queuedBytes(q);
  }

  // backlogged reports whether conn's carrier holds more than maxBuffered
  // bytes it has not sent yet. A page sending faster than its link grew
  // the browser's buffer without bound (and a data channel's past its
  // send queue, which then closes it in some browsers).
  #backlogged(conn) {
    return conn.ws.bufferedAmount > this.#maxBuffered;
  }

  // awaitDrain flushes again once conn's carrier is back under
  // maxBuffered: told so by a carrier that can (whenDrained), since a
  // hidden tab's timers run a second or a minute late; looked at every
  // DRAIN_POLL ms on a WebSocket, which cannot.
  #awaitDrain(conn) {
    if (conn.draining) return;
    conn.draining = true;
    const drained = () => {
      conn.draining = false;
      conn.drainTimer = null;
      if (conn === this.#conn) this.#flush();
    };
    if (conn.ws.whenDrained !== undefined) conn.ws.whenDrained(this.#maxBuffered, drained);
    else conn.drainTimer = this.#timers.setTimeout(drained, DRAIN_POLL);
  }

  // fail settles a queued item that cannot leave with err, or reports err
  // for a packet nobody waits for.
  #fail(q, err) {
    if (q.packet === undefined) this.#settle(q, err); else this.#report(err);
  }

  // packetOf encodes a queued item for conn, or returns null for a call
  // settled while it waited and for an answer meant for an older connection.
  #packetOf(q, conn, now) {
    if (q.packet !== undefined) return q.conn === undefined || q.conn === conn ? q.packet : null;
    if (this.#pending.get(q.id) !== q) return null;
    q.conn = conn;
    if (q.kind !== 'call') return encodePacket({ kind: q.kind, id: q.id, room: q.room });
    // The server's deadline is what is left of the caller's.
    const timeout = q.deadline > 0 ? Math.max(1, Math.ceil(q.deadline - now)) : 0;
    return encodePacket({ kind: 'call', id: q.id, method: q.method, timeout, payload: q.payload });
  }

  // send writes items, one packet or a Batch, on conn. A carrier that
  // refuses the write (a channel closing under it) fails the items it
  // carried at once instead of leaving their calls to time out.
  #send(conn, items, sources) {
    try {
      conn.ws.send(items.length === 1 ? items[0] : encodePacket({ kind: 'batch', items }));
    } catch (err) {
      const failure = new Error(`hotpath: the carrier refused a packet: ${err?.message ?? err}`, { cause: err });
      for (const q of sources) this.#fail(q, failure);
    }
  }

  #listen(key, fn) {
    if (typeof fn !== 'function') throw new TypeError('hotpath: a listener must be a function');
    let set = this.#listeners.get(key);
    if (set === undefined) this.#listeners.set(key, set = new Set());
    const entry = (...args) => fn(...args); // one entry per registration
    set.add(entry);
    return () => {
      set.delete(entry);
      if (set.size === 0 && this.#listeners.get(key) === set) this.#listeners.delete(key);
    };
  }

  // emit calls the listeners of key; one that throws does not stop the
  // others, nor the connection's read loop.
  #emit(key, ...args) {
    const set = this.#listeners.get(key);
    if (set === undefined) return false;
    for (const fn of [...set]) {
      try {
        fn(...args);
      } catch (err) {
        if (key === 'error') reportUnheard(err); else this.#report(err);
      }
    }
    return true;
  }

  #deliver(key, payload, meta) {
    if (!this.#listeners.has(key)) return;
    let data;
    try {
      data = decodeJSON(payload);
    } catch (err) {
      this.#report(new Error(`hotpath: ${meta.event} payload is not JSON`, { cause: err }));
      return;
    }
    this.#emit(key, data, meta);
  }

  #setState(state, detail = {}) {
    this.#state = state;
    this.#emit('state', { state, ...detail });
  }

  #report(err) {
    if (!this.#emit('error', err)) reportUnheard(err);
  }
}
