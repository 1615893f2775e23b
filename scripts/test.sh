#!/usr/bin/env bash
# The README's test command: creates .venv with the pinned dependencies if needed, runs the gate (ruff, mypy),
# then the whole suite. Extra arguments go to pytest (e.g. scripts/test.sh tests/test_canonical.py -x; the fast
# local loop: BNC_SKIP_LINT=1 scripts/test.sh -m "not slow").
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/ensure-venv.sh

# The browser test (tests/test_browser.py) drives Debian's chromium through Playwright. Install it when it is
# missing and we can (root with apt-get, as in CI); otherwise say why, and that test skips with the same reason.
if [ ! -x /usr/bin/chromium ]; then
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
        echo "[setup] installing chromium for the browser test: apt-get update -qq && apt-get install -y -qq chromium"
        if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >/tmp/bnc-chromium-install.log 2>&1; then
            echo "[setup] could not install chromium (see /tmp/bnc-chromium-install.log); the browser test will skip" >&2
        fi
    else
        echo "[setup] /usr/bin/chromium is missing and apt-get is not available as root; the browser test will skip" >&2
    fi
fi

# The gate: ruff (lint, import order) and mypy (types), configured in pyproject.toml, run before any test; a
# failure stops the command. BNC_SKIP_LINT=1 skips them for a fast local loop; under CI (CI set, not "false") the
# gate always runs.
run_gate() {
    local lint_paths=(bnconvention tests hub_scripts benchmarks examples scripts)
    echo "[gate] ruff check ${lint_paths[*]}"
    if ! "$BNC_VENV_PYTHON" -m ruff check --quiet "${lint_paths[@]}"; then
        echo "[gate] ruff check failed (above; ruff check --fix mends some problems); tests not run" >&2
        exit 1
    fi
    echo "[gate] mypy (files and options from pyproject.toml)"
    if ! "$BNC_VENV_PYTHON" -m mypy; then
        echo "[gate] mypy failed (above); tests not run" >&2
        exit 1
    fi
}
under_ci=0
if [ -n "${CI:-}" ] && [ "${CI}" != "false" ]; then under_ci=1; fi
if [ "${BNC_SKIP_LINT:-0}" = "1" ] && [ "$under_ci" = "0" ]; then
    echo "[gate] BNC_SKIP_LINT=1: ruff and mypy skipped (CI always runs them)" >&2
else
    if [ "${BNC_SKIP_LINT:-0}" = "1" ]; then echo "[gate] BNC_SKIP_LINT is ignored under CI" >&2; fi
    run_gate
fi
exec "$BNC_VENV_PYTHON" -m pytest "$@"
