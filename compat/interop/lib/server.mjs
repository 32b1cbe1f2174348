// Starting and stopping the `hotpath` command for the interop tests. The
// binary comes from $HOTPATH_BIN (run.sh builds it once).
import { spawn } from 'node:child_process';

export const binary = process.env.HOTPATH_BIN;
if (!binary) throw new Error('HOTPATH_BIN is not set: run the tests through compat/interop/run.sh');

// Servers still running when this process ends (a test that timed out
// never reached its after hook; run.sh's timeout sends SIGTERM) are killed
// with it, so that no hotpath outlives its test file.
const running = new Set();
process.once('exit', () => { for (const c of running) c.kill('SIGKILL'); });
for (const sig of ['SIGTERM', 'SIGINT']) process.once(sig, () => process.exit(128 + (sig === 'SIGTERM' ? 15 : 2)));

/**
 * start runs `hotpath args...` on addr (127.0.0.1:0 picks a free port) and
 * resolves once it listens, with {child, addr, args}.
 */
export function start(args = [], addr = '127.0.0.1:0') {
  return new Promise((resolve, reject) => {
    const child = spawn(binary, ['-addr', addr, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    running.add(child);
    child.once('exit', () => running.delete(child));
    let out = '';
    let errOut = '';
    const timer = setTimeout(() => { child.kill('SIGKILL'); reject(new Error(`hotpath did not start: ${out}${errOut}`)); }, 20_000);
    child.stderr.on('data', (b) => { errOut = (errOut + b).slice(-4000); });
    child.stdout.on('data', (b) => {
      out += b;
      const m = out.match(/http:\/\/([0-9.]+:[0-9]+)/);
      if (m) {
        clearTimeout(timer);
        resolve({ child, addr: m[1], args, stderr: () => errOut });
      }
    });
    child.on('exit', (code) => { clearTimeout(timer); reject(new Error(`hotpath exited with ${code}: ${out}${errOut}`)); });
  });
}

/** stop ends the server with signal and resolves when it has exited. */
export function stop(server, signal = 'SIGTERM') {
  return new Promise((resolve) => {
    if (server.child.exitCode !== null || server.child.signalCode !== null) return resolve();
    server.child.once('exit', () => resolve());
    server.child.kill(signal);
  });
}

/**
 * restart stops the server and starts it again on the same address; the
 * port may take a moment to be free again.
 */
export async function restart(server, signal = 'SIGTERM') {
  await stop(server, signal);
  for (let i = 0; ; i++) {
    try {
      return await start(server.args, server.addr);
    } catch (err) {
      if (i >= 50) throw err;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}
