#!/usr/bin/env bash
# Create .venv (once) and install the pinned dependencies with pip. Sourced by scripts/demo.sh and scripts/test.sh.
# Re-running is cheap: the install is skipped while the lock file and pyproject.toml are unchanged.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${BNC_VENV:-$repo_root/.venv}"
python_bin="${BNC_PYTHON:-$(command -v python3.11 || command -v python3)}"
lock="$repo_root/requirements/lock.txt"
stamp="$venv/.bnconvention-install-stamp"
want="$(cat "$lock" "$repo_root/pyproject.toml" | sha256sum | cut -d' ' -f1)"

if [ ! -x "$venv/bin/python" ]; then
    echo "[setup] creating virtual environment in $venv"
    "$python_bin" -m venv "$venv"
fi
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "[setup] installing pinned dependencies (torch comes from the local wheel store when present)"
    # Warnings about missing local index folders are noise from the machine's pip config.
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$lock" 2>&1 \
        | grep -v "is ignored: it is neither a file nor a directory" || true
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e "$repo_root" 2>&1 \
        | grep -v "is ignored: it is neither a file nor a directory" || true
    "$venv/bin/python" -c "import torch, torchvision, huggingface_hub, safetensors, bnconvention" \
        || { echo "[setup] dependency install failed" >&2; exit 2; }
    echo "$want" > "$stamp"
fi
export BNC_VENV_PYTHON="$venv/bin/python"
