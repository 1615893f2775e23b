#!/usr/bin/env bash
# The README's main-job command: creates .venv with the pinned dependencies if needed, then runs the demo.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/ensure-venv.sh
exec "$BNC_VENV_PYTHON" -m bnconvention demo "$@"
