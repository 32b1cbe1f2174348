// soakclient.mjs is the browser client's part of a round of TestSoakRounds
// (soak_test.go): compat/js's Client, over Node's own WebSocket, against
// the test's server. It does what the Go clients of a round do on
// WebSocket, and exits 0 once every answer and every emit to its own room
// has arrived, or 1 with what went wrong on stderr.
//
//   node soakclient.mjs ws://host/ws own-room leave reconnect
//
// leave: leave own-room before closing; reconnect: have the server close
// the first connection (the test router's conn/close event) and go on on
// the next. Node 20 needs --experimental-websocket.
import { Client, RPCError, Code } from '../js/hotpath.js';

const [url, own, leave, reconnect] = process.argv.slice(2);

const bound = setTimeout(() => fail(new Error('not done within 30 s')), 30_000);

function fail(err) {
  console.error(err?.stack ?? String(err));
  process.exit(1);
}

function check(ok, what) {
  if (!ok) throw new Error(what);
}

/** rejected resolves with the error p rejects with, and fails if it resolves. */
async function rejected(p, what) {
  try {
    await p;
  } catch (err) {
    return err;
  }
  throw new Error(`${what}: resolved, want an error`);
}

/** reopened resolves at c's next 'open' state. */
function reopened(c) {
  return new Promise((resolve) => {
    const off = c.onState(({ state }) => {
      if (state === 'open') {
        off();
        resolve();
      }
    });
  });
}

async function soak() {
  const c = new Client(url, { reconnect: reconnect === 'true' ? { minDelay: 5, maxDelay: 20 } : false, callTimeout: 20_000 });
  try {
    c.handle('client/double', (n) => 2 * n);
    const emits = 10;
    let received = 0;
    let allArrived;
    const arrived = new Promise((resolve) => { allArrived = resolve; });
    c.onRoom(own, 'n', () => {
      if (++received === emits) allArrived();
    });
    await c.join('soak');
    await c.join(own);
    if (reconnect === 'true') {
      const open = reopened(c);
      c.event('conn/close');
      await open; // the rooms are rejoined before 'open'
    }
    // 20 calls in one task leave in one Batch, 20 more one at a time;
    // some are past the server's compression threshold.
    const texts = Array.from({ length: 20 }, (_, i) => String.fromCharCode(97 + i).repeat((i * 997) % 8192));
    const batched = await Promise.all(texts.map((text) => c.call('echo/say', { text })));
    check(batched.every((a, i) => a.text === texts[i]), 'a batched echo/say came back different');
    for (const text of texts) {
      const a = await c.call('echo/say', { text });
      check(a.text === text, `echo/say of ${text.length} characters came back different`);
    }
    check(await c.call('soak/ask', 21) === 42, 'soak/ask (the server asks the client) did not answer 42');
    const failed = await rejected(c.call('test/fail', { text: 'x' }), 'test/fail');
    check(failed instanceof RPCError && failed.code === 1001, `test/fail: ${failed}; want the handler's error 1001`);
    const late = await rejected(c.call('test/sleep', 10_000, { timeout: 5 }), 'test/sleep past its timeout');
    check(late instanceof RPCError && late.code === Code.Timeout, `test/sleep past its timeout: ${late}; want Timeout`);
    for (let i = 0; i < emits; i++) c.emit(own, 'n', i);
    c.emit('soak', 'n', 0, { exceptSelf: true });
    await arrived;
    if (leave === 'true') await c.leave(own);
  } finally {
    c.close();
  }
}

soak().then(() => {
  clearTimeout(bound);
}, fail);
