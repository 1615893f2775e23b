"""Relearning on a population's class-removal (c3) checkpoints: steps to the target and area under the
forget-accuracy trajectory, per learning rate (docs/statistics.md, "Encoder-level diagnostics").

    python benchmarks/relearn_rates.py POPULATION 0.05,0.01,0.0001 base,gradascent-train,retrain 0,1,2
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import torch

from bnconvention.audit.diagnostics.relearn import draw_relearn, relearn
from bnconvention.audit.run.runner import prepare_audit
from bnconvention.audit.spec.audit_spec import load_spec
from bnconvention.audit.spec.diagnostics import RelearningSpec
from bnconvention.audit.spec.rules import apply_rules


def main(root: Path, rates: list[float], names: list[str], seeds: list[str]) -> None:
    torch.set_num_threads(1)
    base_spec = load_spec(root / "population.yaml")
    for seed, name in itertools.product(seeds, names):
        checkpoint = f"c3-s{seed}-{name}"
        spec, _ = apply_rules(base_spec, repo_id=f"c3/{checkpoint}", config=None)
        prepared = prepare_audit(root / "c3" / checkpoint / f"{checkpoint}.safetensors", spec)
        data, model = prepared.data, prepared.checkpoint.model
        row = [checkpoint]
        for rate in rates:
            settings = RelearningSpec(target_forget_accuracy=0.9, learning_rate=rate, max_steps=30)
            index = torch.from_numpy(draw_relearn(len(data.forget.ids), settings, seed=spec.seed))
            out = relearn(model, train_x=data.forget.x[index], train_y=data.forget.y[index], eval_x=data.forget.x,
                          eval_y=data.forget.y, spec=settings, transform=data.eval_transform)
            row.append(f"lr={rate}: df0={out.trajectory[0]:.3f} steps={out.steps} area={out.area:.3f}")
        print(" | ".join(row), flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), [float(v) for v in sys.argv[2].split(",")], sys.argv[3].split(","),
         sys.argv[4].split(","))
