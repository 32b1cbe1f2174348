// Shared by the resilience tests: a hotpath server that can be stopped
// and started again on the same ports with the same certificate, and a
// headless Chromium page on its origin.
import { spawn, execFileSync } from 'node:child_process';
import { createInterface } from 'node:readline';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createHash, X509Certificate } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

export const bin = process.env.HOTPATH_BIN;
if (!bin) throw new Error('HOTPATH_BIN is not set: run ./run.sh');

/** devCert makes a 13-day ECDSA P-256 certificate for 127.0.0.1 (what
 * serverCertificateHashes accepts) and returns its files and base64 hash:
 * a server restarted with it keeps the hash a page pinned. */
export function devCert() {
  const dir = mkdtempSync(join(tmpdir(), 'hpcert-'));
  const cert = join(dir, 'cert.pem');
  const key = join(dir, 'key.pem');
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
    '-days', '13', '-subj', '/CN=localhost', '-addext', 'subjectAltName=IP:127.0.0.1,DNS:localhost',
    '-keyout', key, '-out', cert], { stdio: 'ignore', timeout: 10_000 });
  const der = new X509Certificate(readFileSync(cert)).raw;
  return { cert, key, hash: createHash('sha256').update(der).digest('base64'), cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/** startServer runs the hotpath binary with args and resolves with the
 * process and the URLs it prints ({http, webtransport, webrtc}). A server
 * that exits before printing them rejects with the end of its stderr
 * (kept even when quiet: a failed restart said only "exited with 1"). */
export function startServer(args, { quiet = true } = {}) {
  return new Promise((resolve, reject) => {
    const p = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let stderrTail = '';
    p.stderr.on('data', (d) => {
      stderrTail = (stderrTail + d).slice(-4096);
      if (!quiet) process.stderr.write(d);
    });
    const found = {};
    const timer = setTimeout(() => { p.kill('SIGKILL'); reject(new Error('server did not print its URLs within 20 s')); }, 20_000);
    p.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`server exited with ${code}${stderrTail.trim() ? `: ${stderrTail.trim()}` : ''}`));
    });
    const want = ['http', ...(args.includes('-quic') ? ['webtransport'] : []), ...(args.includes('-webrtc-loopback') ? ['webrtc'] : [])];
    createInterface({ input: p.stdout }).on('line', (line) => {
      let m;
      if ((m = line.match(/^hotpath listening on (http:\/\/\S+)/))) found.http = m[1];
      if ((m = line.match(/^webtransport (\S+)/))) found.webtransport = m[1];
      if ((m = line.match(/^webrtc (\S+)/))) found.webrtc = m[1];
      if (want.every((k) => found[k])) {
        clearTimeout(timer);
        resolve({ process: p, urls: found });
      }
    });
  });
}

/** stopServer ends p with signal and resolves once it exited. */
export function stopServer(p, signal = 'SIGTERM') {
  return new Promise((resolve) => {
    if (p.exitCode !== null || p.signalCode !== null) { resolve(); return; }
    const t = setTimeout(() => p.kill('SIGKILL'), 15_000);
    p.once('exit', () => { clearTimeout(t); resolve(); });
    p.kill(signal);
  });
}

export async function launch() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    headless: true,
    args: [
      '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync',
      '--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1',
      '--disable-features=WebRtcHideLocalIpsWithMdns',
    ],
  });
}

/** openPage opens a page on the server's origin with the client module
 * as window.hp and window.opts for each carrier. */
export async function openPage(browser, urls, hash) {
  const page = await browser.newPage();
  page.on('console', (m) => { if (m.type() === 'error' && process.env.HP_VERBOSE) console.error('[page]', m.text()); });
  await page.goto(`${urls.http}/healthz`);
  await page.evaluate(async ({ wtURL, hash, rtcURL }) => {
    const hp = await import('/hotpath.js');
    window.hp = hp;
    const pin = hash ? { serverCertificateHashes: [{ algorithm: 'sha-256', value: Uint8Array.from(atob(hash), (c) => c.charCodeAt(0)) }] } : {};
    window.opts = {
      webtransport: wtURL ? { webTransport: { url: wtURL, ...pin } } : {},
      webrtc: rtcURL ? { webRTC: { url: rtcURL } } : {},
      websocket: {},
    };
    window.clients = {};
    window.log = {};
  }, { wtURL: urls.webtransport, hash, rtcURL: urls.webrtc });
  return page;
}

export function portOf(url) { return new URL(url).port; }
