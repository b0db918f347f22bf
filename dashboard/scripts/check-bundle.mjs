#!/usr/bin/env node
// CI check: the committed bundle in rollouthub/dashboard/ must equal a fresh build from source.
// Builds into a temporary directory (the committed bundle is not touched) and compares file names and bytes.
// The build is deterministic: content-hashed names, no timestamps/source maps, pinned package-lock.json.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative, resolve } from 'node:path';

const here = resolve(import.meta.dirname, '..');
const committed = resolve(here, '..', 'rollouthub', 'dashboard');
const fresh = mkdtempSync(join(tmpdir(), 'rollouthub-dashboard-build-'));

function list(dir) {
  const out = [];
  const walk = (d) => {
    for (const name of readdirSync(d)) {
      const p = join(d, name);
      if (statSync(p).isDirectory()) walk(p);
      else out.push(relative(dir, p));
    }
  };
  try {
    walk(dir);
  } catch {
    /* missing directory → empty */
  }
  return out.sort();
}

try {
  const vite = join(here, 'node_modules', '.bin', 'vite');
  const res = spawnSync(vite, ['build', '--outDir', fresh, '--emptyOutDir', '--logLevel', 'warn'], { cwd: here, stdio: 'inherit' });
  if (res.status !== 0) {
    console.error('check-bundle: the build failed');
    process.exit(res.status ?? 1);
  }
  const a = list(committed);
  const b = list(fresh);
  const problems = [];
  for (const f of b) if (!a.includes(f)) problems.push(`missing from the committed bundle: ${f}`);
  for (const f of a) if (!b.includes(f)) problems.push(`stale file in the committed bundle: ${f}`);
  for (const f of b) {
    if (a.includes(f) && !readFileSync(join(committed, f)).equals(readFileSync(join(fresh, f)))) problems.push(`differs: ${f}`);
  }
  if (problems.length) {
    console.error(`check-bundle: rollouthub/dashboard/ does not match a fresh build of dashboard/:\n  ${problems.join('\n  ')}`);
    console.error('Run `cd dashboard && npm ci && npm run build` and commit rollouthub/dashboard/.');
    process.exit(1);
  }
  console.log(`check-bundle: committed bundle matches the source (${b.length} files)`);
} finally {
  rmSync(fresh, { recursive: true, force: true });
}
