#!/usr/bin/env bash
# Regenerate requirements/lock.txt: a fresh virtual environment with every extra the README's commands use
# (test pulls audit and refit; ray is optional but pinned so its tests can run), torch and torchvision pinned to the
# builds on this machine's local wheel store, then `pip freeze`. Review the diff before committing it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
python_bin="${BNC_PYTHON:-$(command -v python3.11 || command -v python3)}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$python_bin" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check torch==2.14.1 torchvision==0.29.1
"$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check ".[test,ray]" pytest-xdist hypothesis
{
    echo "# Pinned environment for the README commands (demo and tests). Regenerate with scripts/update-lock.sh."
    echo "# torch/torchvision come from the machine-local wheel store; do not bump them without checking it."
    "$work/venv/bin/python" -m pip freeze --exclude-editable | grep -v -i '^bnconvention'
} > requirements/lock.txt.new
mv requirements/lock.txt.new requirements/lock.txt
echo "wrote requirements/lock.txt; review: git diff requirements/lock.txt"
