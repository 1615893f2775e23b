"""The README's Python snippet runs as written (its ``transform=train_transform`` failed for a real
torchvision transform).

The snippet names what a reader brings (``model``, ``train``, ``train_transform``, ``retain_batches``); the test
defines small real ones before it, checks the outcome after it, and runs the script in a fresh interpreter in an
empty folder, as a reader would.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"

PRELUDE = '''
import torch
import torchvision.transforms as T
from helpers.refit_models import SmallConvNet, make_pool, seeded

model = seeded(SmallConvNet)
batches = make_pool((3, 6, 6), [8, 8, 8])


def train(net):
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    net.train()
    for x in batches:
        optimizer.zero_grad()
        net(x).square().mean().backward()
        optimizer.step()


train_transform = T.Compose([T.RandomCrop(6, padding=1), T.RandomHorizontalFlip(), T.ToTensor()])
retain_batches = make_pool((3, 6, 6), [8, 8], seed=7)
'''

EPILOGUE = '''
from bnconvention import describe_transform, read_stamped_record

assert record.convention.transform == describe_transform(train_transform), record.convention.transform
assert record.convention.name == "train/train/train-transform/ema-m0.1", record.convention.name
assert read_stamped_record("model.safetensors") == record
print("checked")
'''


def python_snippet() -> str:
    section = README.read_text(encoding="utf-8").split("## In Python", 1)[1]
    match = re.search(r"^```python\n(.*?)^```$", section, re.DOTALL | re.MULTILINE)
    assert match is not None, "README.md has no python block under '## In Python'"
    return match.group(1)


def test_readme_python_snippet_runs(tmp_path: Path) -> None:
    script = tmp_path / "snippet.py"
    script.write_text(PRELUDE + python_snippet() + EPILOGUE, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == "refit/other/eval-transform/exact\nchecked\n"
