// The demo page of `go run ./compat/cmd/hotpath`: a chat room, a live
// ticker, calls with their round-trip time, and the connection's state,
// all through one hotpath.js Client. window.hotpathDemo exposes the client
// and what the page has seen, for people poking in the console and for
// browser tests.
import { Client, RPCError, CloseError } from './hotpath.js';

const $ = (id) => document.getElementById(id);

const client = new Client('ws');

/** What the page has seen; tests read it through window.hotpathDemo. */
const state = {
  connection: client.state,
  members: null, // lobby members, from join answers and presence
  messages: [], // chat messages received: {name, text, at}
  ticks: {}, // symbol → recent {price, at}, oldest first
  tickCount: 0,
  echo: null, // last echo/say: {text, rtt} or {error}
  batch: null, // last batch run: {calls, ms, inOrder} or {error}
  serverTime: null, // time/now answer at load: {now, rtt}
  log: [], // the last connection state changes: {at, line}
};

window.hotpathDemo = { client, state };

const MAX_MESSAGES = 200;
const SPARK_POINTS = 60;

// ---- connection status ----------------------------------------------------

let retryAt = null; // performance.now() of the next connection attempt

function showState(change) {
  state.connection = change.state;
  $('status').dataset.state = change.state;
  retryAt = null;
  let line = change.state;
  if (change.state === 'open') line = 'connected';
  if (change.state === 'reconnecting') {
    retryAt = performance.now() + change.delay;
    line = `dropped (${describeClose(change.error)}), retry ${change.attempt} in ${change.delay} ms`;
  }
  if (change.state === 'closed') line = `closed (${describeClose(change.error)})`;
  showStatusText();
  addLog(line);
}

// showStatusText labels the indicator, counting down to the next attempt.
function showStatusText() {
  let label = state.connection === 'open' ? 'connected' : state.connection;
  if (retryAt !== null) {
    const left = (retryAt - performance.now()) / 1000;
    label = left > 0.05 ? `reconnecting in ${left.toFixed(1)} s` : 'reconnecting…';
  }
  $('status-text').textContent = label;
}

function describeClose(err) {
  if (!(err instanceof CloseError)) return String(err);
  return err.reason ? `${err.code} ${err.reason}` : String(err.code);
}

const MAX_LOG = 50;

function addLog(line) {
  state.log.push({ at: Date.now(), line });
  if (state.log.length > MAX_LOG) state.log.shift();
  const li = document.createElement('li');
  li.textContent = `${new Date().toLocaleTimeString()}  ${line}`;
  $('log').prepend(li);
  while ($('log').children.length > MAX_LOG) $('log').lastChild.remove();
}

client.onState(showState);

// The client sends its capabilities first on every connection, so the
// server's answer has arrived by the time the first call is answered.
function showServer() {
  const caps = client.capabilities;
  if (caps?.server) $('server-info').textContent = caps.server;
}

// ---- chat -----------------------------------------------------------------

const nameInput = $('name');
nameInput.value = loadName();
nameInput.addEventListener('change', () => {
  nameInput.value = nameInput.value.trim() || loadName();
  try { localStorage.setItem('hotpath-demo-name', nameInput.value); } catch { /* storage off */ }
});

function loadName() {
  try {
    const saved = localStorage.getItem('hotpath-demo-name');
    if (saved) return saved;
  } catch { /* storage off */ }
  return `guest-${Math.floor(1000 + Math.random() * 9000)}`;
}

function showMembers(n) {
  state.members = n;
  $('members').textContent = `${n} online`;
}

function addChatLine(li) {
  const list = $('messages');
  const atBottom = list.scrollHeight - list.scrollTop - list.clientHeight < 40;
  list.append(li);
  while (list.children.length > MAX_MESSAGES) list.firstChild.remove();
  if (atBottom) list.scrollTop = list.scrollHeight;
}

// MAX_TEXT is the message input's maxlength. The demo server drops emits
// over 8 KiB (Limits.MaxEmitSize), which passes any line of MAX_TEXT
// characters, but a line another client sent longer, in fewer bytes, is
// still cut to it: one client's script could otherwise make every page
// keep MAX_MESSAGES such lines in memory and on screen.
const MAX_TEXT = 1000;

function showMessage(msg) {
  if (typeof msg?.text !== 'string') return;
  const name = String(msg.name ?? '?').slice(0, 32);
  const text = msg.text.slice(0, MAX_TEXT);
  state.messages.push({ name, text, at: msg.at });
  if (state.messages.length > MAX_MESSAGES) state.messages.shift();
  const li = document.createElement('li');
  if (name === nameInput.value) li.className = 'mine';
  const who = document.createElement('span');
  who.className = 'who';
  who.textContent = name;
  const body = document.createElement('span');
  body.textContent = text;
  const time = document.createElement('time');
  const at = new Date(Number(msg.at) || Date.now());
  time.dateTime = at.toISOString();
  time.textContent = at.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
  li.append(who, body, time);
  addChatLine(li);
}

function showPresence(verb, { members }) {
  showMembers(members);
  const li = document.createElement('li');
  li.className = 'system';
  li.textContent = `someone ${verb} · ${members} online`;
  addChatLine(li);
}

client.onRoom('lobby', 'message', showMessage);
client.onRoom('lobby', '$join', (data) => showPresence('joined', data));
client.onRoom('lobby', '$leave', (data) => showPresence('left', data));
client.join('lobby').then(
  ({ members }) => showMembers(members),
  (err) => addLog(`join lobby failed: ${err.message}`),
);

$('chat-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const input = $('message');
  const text = input.value.trim();
  if (text === '') return;
  try {
    // Not exceptSelf: our own message comes back through the server, so
    // what the page shows is what the room received.
    client.emit('lobby', 'message', { name: nameInput.value, text, at: Date.now() });
    input.value = '';
  } catch (err) {
    addLog(`send failed: ${err.message}`);
  }
});

// ---- ticker ---------------------------------------------------------------

const tickerRows = new Map(); // symbol → {price, change, spark} cells

function tickerRow(symbol) {
  let row = tickerRows.get(symbol);
  if (row) return row;
  const tr = document.createElement('tr');
  tr.id = `tick-${symbol}`;
  const cell = (cls) => { const td = document.createElement('td'); td.className = cls; tr.append(td); return td; };
  cell('symbol').textContent = symbol;
  row = { price: cell('num price'), change: cell('num change'), spark: cell('spark') };
  row.spark.innerHTML = '<svg class="spark" viewBox="0 0 100 28" preserveAspectRatio="none"><polyline points=""/></svg>';
  const rows = [...tickerRows.keys(), symbol].sort();
  const before = tickerRows.get(rows[rows.indexOf(symbol) + 1]);
  $('ticker').insertBefore(tr, before ? before.price.parentElement : null);
  tickerRows.set(symbol, row);
  return row;
}

function showTick({ symbol, price, at }) {
  if (typeof symbol !== 'string' || typeof price !== 'number') return;
  state.tickCount++;
  const series = (state.ticks[symbol] ??= []);
  const prev = series.at(-1)?.price;
  series.push({ price, at });
  if (series.length > SPARK_POINTS) series.shift();

  const row = tickerRow(symbol);
  row.price.textContent = price.toFixed(2);
  const first = series[0].price;
  const pct = ((price - first) / first) * 100;
  row.change.textContent = `${pct >= 0 ? '+' : ''}${pct.toFixed(2)}%`;
  row.change.classList.toggle('up', pct >= 0);
  row.change.classList.toggle('down', pct < 0);
  row.price.classList.toggle('up', prev !== undefined && price > prev);
  row.price.classList.toggle('down', prev !== undefined && price < prev);

  const prices = series.map((s) => s.price);
  const lo = Math.min(...prices);
  const span = Math.max(...prices) - lo || 1;
  const step = 100 / Math.max(prices.length - 1, 1);
  const points = prices.map((p, i) => `${(i * step).toFixed(1)},${(26 - ((p - lo) / span) * 24).toFixed(1)}`);
  row.spark.querySelector('polyline').setAttribute('points', points.join(' '));
  lastTickAt = performance.now();
}

let lastTickAt = null;
setInterval(() => {
  showStatusText();
  if (lastTickAt === null) return;
  const age = (performance.now() - lastTickAt) / 1000;
  if (state.connection !== 'open') $('tick-age').textContent = 'paused';
  else $('tick-age').textContent = age < 2 ? 'live' : `last tick ${age.toFixed(0)} s ago`;
}, 250);

client.onRoom('ticker', 'tick', showTick);
client.join('ticker').catch((err) => addLog(`join ticker failed: ${err.message}`));

// ---- calls ----------------------------------------------------------------

function describeError(err) {
  if (err instanceof RPCError) return `error ${err.code}: ${err.message}`;
  if (err instanceof CloseError) return `connection closed (${describeClose(err)})`;
  return err.message;
}

$('echo-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const text = $('echo-text').value;
  const result = $('echo-result');
  const rtt = $('echo-rtt');
  const t0 = performance.now();
  try {
    const answer = await client.call('echo/say', { text }, { timeout: 5000 });
    const ms = performance.now() - t0;
    state.echo = { text: answer.text, rtt: ms };
    result.textContent = JSON.stringify(answer.text);
    rtt.textContent = `${ms.toFixed(1)} ms`;
    result.className = rtt.className = '';
  } catch (err) {
    state.echo = { error: describeError(err) };
    result.textContent = state.echo.error;
    result.className = 'error';
    rtt.textContent = '–';
  }
});

// Calls issued in one task leave in one Batch frame and come back in one.
$('echo-batch').addEventListener('click', async () => {
  const out = $('batch-result');
  const calls = 20;
  const t0 = performance.now();
  try {
    const answers = await Promise.all(
      Array.from({ length: calls }, (_, i) => client.call('echo/say', { text: `#${i}` }, { timeout: 5000 })),
    );
    const ms = performance.now() - t0;
    const inOrder = answers.every((a, i) => a.text === `#${i}`);
    state.batch = { calls, ms, inOrder };
    out.textContent = `${calls} answers in ${ms.toFixed(1)} ms`;
    out.className = 'muted';
  } catch (err) {
    state.batch = { error: describeError(err) };
    out.textContent = state.batch.error;
    out.className = 'error';
  }
});

async function showServerTime() {
  const el = $('server-time');
  const t0 = performance.now();
  try {
    const { now } = await client.call('time/now');
    const rtt = performance.now() - t0;
    state.serverTime = { now, rtt };
    showServer();
    const when = new Date(now).toISOString().replace('T', ' ').replace('Z', ' UTC');
    el.textContent = `${when}, answered in ${rtt.toFixed(1)} ms`;
    el.className = '';
  } catch (err) {
    el.textContent = describeError(err);
    el.className = 'error';
  }
}

// Asked once the connection is open, so the round trip measures the
// network and not the handshake.
const offOpen = client.onState((change) => {
  if (change.state !== 'open') return;
  offOpen();
  showServerTime();
});
