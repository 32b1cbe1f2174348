// A TCP proxy that parses the WebSocket frames crossing it in each
// direction and counts data messages and how many of them carry RSV1 (the
// "Per-Message Compressed" bit, RFC 7692 §6): the on-the-wire proof that
// both ends compressed. It forwards everything unchanged; a connection
// that is not a WebSocket upgrade is forwarded without being parsed.
import net from 'node:net';

/** Counter parses one direction: the HTTP head, then frame headers. */
class Counter {
  constructor() {
    this.upgraded = false;
    this.head = Buffer.alloc(0);
    this.skip = 0;
    this.messages = 0; // first frames of text and binary messages
    this.compressed = 0; // of those, with RSV1
    this.frames = 0;
  }

  feed(b) {
    while (b.length > 0) {
      if (!this.upgraded) {
        this.head = Buffer.concat([this.head, b]);
        const i = this.head.indexOf('\r\n\r\n');
        if (i < 0) return;
        b = this.head.subarray(i + 4);
        this.upgraded = true;
        this.head = Buffer.alloc(0);
      } else if (this.skip > 0) {
        const n = Math.min(this.skip, b.length);
        this.skip -= n;
        b = b.subarray(n);
      } else {
        this.head = Buffer.concat([this.head, b.subarray(0, 1)]);
        b = b.subarray(1);
        const len = frameLength(this.head);
        if (len !== null) {
          this.count(this.head[0]);
          this.skip = len;
          this.head = Buffer.alloc(0);
        }
      }
    }
  }

  count(b0) {
    this.frames++;
    const op = b0 & 0x0f;
    if (op === 1 || op === 2) {
      this.messages++;
      if (b0 & 0x40) this.compressed++;
    }
  }
}

/** frameLength returns the payload length once h holds a whole header. */
function frameLength(h) {
  if (h.length < 2) return null;
  const l7 = h[1] & 0x7f;
  const need = 2 + (l7 === 126 ? 2 : l7 === 127 ? 8 : 0) + (h[1] & 0x80 ? 4 : 0);
  if (h.length < need) return null;
  if (l7 === 126) return h.readUInt16BE(2);
  if (l7 === 127) return Number(h.readBigUInt64BE(2));
  return l7;
}

/**
 * startTap listens on a free loopback port and forwards to target
 * (host:port, or a function returning it, read at each connection).
 * pages maps paths to HTML the tap serves itself, from the same loopback
 * origin as the server (a page Playwright fulfils from memory would have
 * no address space, and Chromium's Local Network Access checks would then
 * block its WebSocket to 127.0.0.1). Plain HTTP requests are forwarded
 * with "Connection: close", so each connection carries one request and
 * the first bytes decide where it goes.
 * Resolves with {port, addr, totals(), connections, reset(), close()}.
 */
export function startTap(target, pages = {}) {
  const conns = [];
  const sockets = new Set();
  const server = net.createServer((client) => {
    sockets.add(client);
    client.once('data', (first) => {
      const head = first.toString('latin1');
      const path = head.match(/^GET (\S+) HTTP\/1\.1\r\n/)?.[1];
      if (path && pages[path]) {
        const body = Buffer.from(pages[path]);
        client.end(Buffer.concat([Buffer.from(`HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n` +
          `Content-Length: ${body.length}\r\nConnection: close\r\n\r\n`, 'latin1'), body]));
        return;
      }
      const [host, port] = (typeof target === 'function' ? target() : target).split(':');
      const upstream = net.connect(Number(port), host);
      sockets.add(upstream);
      const c = { up: new Counter(), down: new Counter(), offered: '', answered: null };
      const isWebSocket = /^upgrade:\s*websocket/im.test(head);
      if (isWebSocket) {
        c.offered = head.match(/^sec-websocket-extensions:\s*(.*?)\r$/im)?.[1] ?? '';
        conns.push(c);
        c.up.feed(first);
      } else {
        first = Buffer.from(head.replace(/^connection:.*\r\n/gim, '').replace(/\r\n/, '\r\nConnection: close\r\n'), 'latin1');
      }
      upstream.write(first);
      client.on('data', (b) => {
        if (isWebSocket) c.up.feed(b);
        upstream.write(b);
      });
      upstream.on('data', (b) => {
        if (isWebSocket) {
          if (c.answered === null) c.answered = b.toString('latin1').match(/^sec-websocket-extensions:\s*(.*?)\r$/im)?.[1] ?? '';
          c.down.feed(b);
        }
        client.write(b);
      });
      // An end on one side ends the other after what was written to it
      // is flushed (a server's close frame right before its FIN must
      // arrive); an error drops both.
      upstream.on('end', () => client.end());
      client.on('end', () => upstream.end());
      const drop = () => { client.destroy(); upstream.destroy(); };
      client.on('error', drop);
      upstream.on('error', drop);
      client.on('close', () => { sockets.delete(client); upstream.end(); });
      upstream.on('close', () => { sockets.delete(upstream); client.end(); });
    });
    client.on('error', () => client.destroy());
  });
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      resolve({
        port,
        addr: `127.0.0.1:${port}`,
        connections: conns,
        /** totals sums messages and compressed messages each way. */
        totals() {
          const t = { up: { messages: 0, compressed: 0 }, down: { messages: 0, compressed: 0 } };
          for (const c of conns) {
            for (const d of ['up', 'down']) {
              t[d].messages += c[d].messages;
              t[d].compressed += c[d].compressed;
            }
          }
          return t;
        },
        reset() { conns.length = 0; },
        close() {
          for (const s of sockets) s.destroy();
          return new Promise((r) => server.close(() => r()));
        },
      });
    });
  });
}
