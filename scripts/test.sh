#!/usr/bin/env bash
# The README's test command: creates .venv with the pinned dependencies if needed, then runs the whole suite.
# Extra arguments go to pytest (e.g. scripts/test.sh tests/test_canonical.py -x).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/ensure-venv.sh
exec "$BNC_VENV_PYTHON" -m pytest "$@"
