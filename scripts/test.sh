#!/usr/bin/env bash
# The README's test command: creates .venv with the pinned dependencies if needed, then runs the whole suite.
# Extra arguments go to pytest (e.g. scripts/test.sh tests/test_canonical.py -x).
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
exec "$BNC_VENV_PYTHON" -m pytest "$@"
