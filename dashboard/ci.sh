#!/usr/bin/env bash
# Dashboard CI: installs what the browser tests need, checks the committed bundle against the source,
# then runs the unit tests (vitest) and the end-to-end tests (headless Chromium against a real `rollouthub store`).
# Idempotent; works on a clean clone. Screenshots go to ci-artifacts/dashboard-screenshots/.
set -euo pipefail
cd "$(dirname "$0")"
export DEBIAN_FRONTEND=noninteractive
export CI="${CI:-true}"

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null 2>&1; then sudo "$@"; else "$@"; fi; }

# 1. Browser: Debian's Chromium (browser downloads by test tools do not work here).
if [ -z "${CHROMIUM_PATH:-}" ] && [ ! -x /usr/bin/chromium ]; then
  echo "dashboard/ci.sh: installing chromium (apt)"
  as_root apt-get update -q
  as_root apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core
fi

# 2. Node toolchain and dependencies (pinned by package-lock.json).
command -v node >/dev/null 2>&1 || { echo "dashboard/ci.sh: node (>= 20.19) is required" >&2; exit 1; }
npm ci --no-audit --no-fund --loglevel=error

# 3. The Python package must be importable: the e2e tests start `python -m rollouthub.cli store`.
PYTHON="${PYTHON:-$(command -v python3 || command -v python)}"
export PYTHON
if ! "$PYTHON" -c "import rollouthub.store.client_server" >/dev/null 2>&1; then
  "$PYTHON" -m pip install -q -e ..
fi

# 4. Static checks and the committed-bundle check (fresh deterministic build into a temp dir, compared byte for byte).
npm run --silent typecheck
node scripts/check-bundle.mjs

# 5. Unit tests of the data layer, then the end-to-end tests (screenshots of every page).
REPORTS="$(mktemp -d)"
trap 'rm -rf "$REPORTS"' EXIT
npx vitest run --reporter=default --reporter=json --outputFile.json="$REPORTS/unit.json"
rm -rf ../ci-artifacts/dashboard-screenshots
npx vitest run --config vitest.e2e.config.ts --reporter=default --reporter=json --outputFile.json="$REPORTS/e2e.json"
echo "dashboard/ci.sh: screenshots in $(cd .. && pwd)/ci-artifacts/dashboard-screenshots:"
ls -1 ../ci-artifacts/dashboard-screenshots
node -e '
  let p = 0, f = 0, s = 0;
  for (const file of process.argv.slice(1)) {
    const r = require(file);
    p += r.numPassedTests; f += r.numFailedTests; s += r.numPendingTests + (r.numTodoTests || 0);
  }
  console.log(`dashboard: ${p} passed, ${f} failed` + (s ? `, ${s} skipped` : ""));
' "$REPORTS/unit.json" "$REPORTS/e2e.json"
