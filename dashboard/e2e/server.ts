// Starts a real `rollouthub store` process on a free loopback port for the e2e tests.
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import { resolve } from 'node:path';

export interface StoreProcess {
  url: string;
  port: number;
  proc: ChildProcess;
  output: () => string;
  stop: () => Promise<void>;
}

export const REPO_ROOT = resolve(import.meta.dirname, '..', '..');

function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const srv = createServer();
    srv.once('error', rej);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => res(port));
    });
  });
}

export async function startStore(extraArgs: string[] = []): Promise<StoreProcess> {
  const port = await freePort();
  const python = process.env.PYTHON ?? 'python3';
  const args = ['-m', 'rollouthub.cli', 'store', '--backend', 'memory', '--host', '127.0.0.1', '--port', String(port), '--log-level', 'WARNING', ...extraArgs];
  const proc = spawn(python, args, { cwd: REPO_ROOT, env: { ...process.env, PYTHONUNBUFFERED: '1' }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  proc.stdout?.on('data', (d) => (out += d));
  proc.stderr?.on('data', (d) => (out += d));
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`store exited with ${proc.exitCode}:\n${out}`);
    try {
      const res = await fetch(`${url}/v1/agl/health`);
      if (res.ok) break;
    } catch {
      /* not up yet */
    }
    if (Date.now() > deadline) {
      proc.kill('SIGKILL');
      throw new Error(`store did not become healthy:\n${out}`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  return {
    url,
    port,
    proc,
    output: () => out,
    stop: () =>
      new Promise<void>((res) => {
        if (proc.exitCode !== null) return res();
        const timer = setTimeout(() => proc.kill('SIGKILL'), 5000);
        proc.once('exit', () => {
          clearTimeout(timer);
          res();
        });
        proc.kill('SIGTERM');
      }),
  };
}
