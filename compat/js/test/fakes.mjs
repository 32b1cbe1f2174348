// Test doubles for the client: a WebSocket the test drives by hand and a
// clock whose time moves only when the test says so.
import { decodePacket, encodePacket } from '../hotpath.js';

/** fakeSockets returns a WebSocket class whose instances are recorded in
 * `sockets`, newest last. */
export function fakeSockets() {
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

    // The server side, driven by the test.
    open() { this.readyState = 1; this.onopen?.({}); }
    receive(packet) {
      const b = packet instanceof Uint8Array ? packet : encodePacket(packet);
      this.onmessage?.({ data: b.slice().buffer });
    }
    receiveText(s) { this.onmessage?.({ data: s }); }
    drop(code = 1006, reason = '') { this.readyState = 3; this.onclose?.({ code, reason, wasClean: code !== 1006 }); }
    /** Packets sent after the capabilities that open every connection. */
    get packets() { return this.sent.filter((p) => p.kind !== 'capabilities'); }
  }
  return { FakeWebSocket, sockets, get last() { return sockets[sockets.length - 1]; } };
}

/** fakeClock is a timers object for ClientOptions.timers. */
export function fakeClock() {
  let now = 0;
  let seq = 0;
  const timers = new Map();
  return {
    setTimeout(fn, ms) { timers.set(++seq, { at: now + ms, fn }); return seq; },
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
export const settle = () => new Promise((resolve) => setImmediate(resolve));

export const json = (v) => new TextEncoder().encode(JSON.stringify(v));
export const text = (b) => new TextDecoder().decode(b);
