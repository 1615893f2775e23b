"""The second deployed state on the zoo: activation-quantization scales, shipped vs retain-only refit.

Shen and Li (appendix E; docs/statistics.md#references) refit static 8-bit activation scales on a retain-only
calibration set at bit-identical θ and
normalization buffers, finds zero displacement on that state, and finds absmax scale influence decaying slowly
with calibration size while percentile and mse influence decay as O(1/n). This measures both on the zoo's
quantized variants (``bnconvention.zoo.quantized``: 9 sites per model, shipped scales calibrated on 256 train
records, forget records included):

1. **Displacement**, per variant and observer: the cells df/dr/dt with activations fake-quantized at the shipped
   scales and at scales refit on R retain-only draws of 256 records, decided by the standard's rules (margin
   1.2 pp), and the median |ln(refit / shipped)| over sites and draws.
2. **Influence by calibration size**, per observer on ``bn-base``: a core of n retained records against the same
   core with 8 of its places exchanged for forget records (Shen and Li's identification contrast), the median
   |ln(scale with forget / scale without)| over sites and draws, for n = 64 ... 1024.

    .venv/bin/python benchmarks/quant_scales.py                 # builds (or reuses) the zoo in .cache/
    .venv/bin/python benchmarks/quant_scales.py --replicates 5 --json   # about 10 minutes on two busy cores

Deterministic given the zoo (draws seeded); other machines agree to float32 round-off.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

OBSERVERS: tuple[tuple[str, float | None], ...] = (("minmax", None), ("absmax", None), ("percentile", 99.99),
                                                   ("mse", None))
SIZES = (64, 128, 256, 512, 1024)
EXCHANGED = 8  # forget records exchanged into the core: a fixed count, so an O(1/n) influence shows as O(1/n)
VARIANTS = ("bn-base", "gn-base", "bn-ga-train", "gn-ga-train")


def _zoo() -> Any:
    from bnconvention.zoo import build_zoo, default_zoo_dir

    return build_zoo(default_zoo_dir(Path(".cache"), seed=0), seed=0, progress=False, variants=list(VARIANTS))


def _splits() -> dict[str, Any]:
    from bnconvention.zoo.variants import FORGET_CLASSES, split_tensors

    data = split_tensors(FORGET_CLASSES)
    return {role: (data.x[role], data.y[role]) for role in ("forget", "retain", "test")}


def displacement(zoo: Any, *, replicates: int) -> list[dict[str, Any]]:
    from bnconvention.audit.scales.cells import scales_cells
    from bnconvention.authoring.activation_scales import load_quantized
    from bnconvention.zoo.quantized import calibration_draw, quantize_variant

    rows = []
    splits = _splits()
    with tempfile.TemporaryDirectory() as tmp:
        for name in VARIANTS:
            for observer, percentile in OBSERVERS:
                folder = quantize_variant(zoo, name, Path(tmp), observer=observer, percentile=percentile)  # type: ignore[arg-type]
                model, shipped = load_quantized(zoo.load_model(name), folder / "declaration.json")
                pools = [[calibration_draw("retain", size=256, seed=100 + r)[0]] for r in range(replicates)]
                audit = scales_cells(model, splits=splits, calibration_pools=pools, shipped=shipped)
                rows.append({"variant": name, "observer": observer, "median_abs_log_ratio": audit.median_abs_log_ratio,
                             "cells": {c.metric: {"shipped": c.shipped, "shift_pp": c.shift_pp,
                                                  "outcome": c.decision.outcome} for c in audit.cells}})
    return rows


def influence(zoo: Any, *, replicates: int) -> list[dict[str, Any]]:
    import torch

    from bnconvention.refitting.observers import observer_spec, prepare_static
    from bnconvention.refitting.scales import refit_scales

    splits = _splits()
    retain, forget = splits["retain"][0], splits["forget"][0]
    rows = []
    for observer, percentile in OBSERVERS[1:]:
        model = prepare_static(zoo.load_model("bn-base"), observer_spec(observer, percentile=percentile))  # type: ignore[arg-type]
        with torch.no_grad():
            model(retain[:256])
        for size in SIZES:
            ratios = []
            for draw in range(replicates):
                generator = torch.Generator().manual_seed(1000 * size + draw)
                core = retain[torch.randperm(len(retain), generator=generator)[:size]]
                exchanged = core.clone()
                k = EXCHANGED
                exchanged[:k] = forget[torch.randperm(len(forget), generator=generator)[:k]]
                without = refit_scales(model, [core]).refit
                with_forget = refit_scales(model, [exchanged]).refit
                ratios += [abs(v) for v in without.log_ratios(with_forget).values()]
            rows.append({"observer": observer, "n": size, "median_abs_log_ratio": statistics.median(ratios)})
    return rows


def _print(result: dict[str, Any]) -> None:
    print(f"displacement: shipped scales (256 train records) vs retain-only refits, R = {result['replicates']}")
    print("| variant | observer | median abs ln ratio | df shipped | df shift pp | dr shift pp | dt shift pp | "
          "decisions |")
    print("|---|---|---|---|---|---|---|---|")
    for row in result["displacement"]:
        cells = row["cells"]
        decisions = ", ".join(f"{m} {c['outcome']}" for m, c in cells.items())
        print(f"| {row['variant']} | {row['observer']} | {row['median_abs_log_ratio']:.4f} | "
              f"{cells['df']['shipped']:.4f} | {cells['df']['shift_pp']:+.2f} | {cells['dr']['shift_pp']:+.2f} | "
              f"{cells['dt']['shift_pp']:+.2f} | {decisions} |")
    print(f"\ninfluence of {EXCHANGED} forget records in the calibration set, bn-base, by calibration size n")
    observers = sorted({row["observer"] for row in result["influence"]}, key=[o for o, _ in OBSERVERS].index)
    print("| n | " + " | ".join(observers) + " |")
    print("|---|" + "---|" * len(observers))
    for size in SIZES:
        values = {row["observer"]: row["median_abs_log_ratio"] for row in result["influence"] if row["n"] == size}
        print(f"| {size} | " + " | ".join(f"{values[o]:.5f}" for o in observers) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=3, help="retain-only draws per measurement (default 3)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--skip-displacement", action="store_true", help="measure only the influence by size")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(2)
    zoo = _zoo()
    shifts = [] if args.skip_displacement else displacement(zoo, replicates=args.replicates)
    result = {"replicates": args.replicates, "displacement": shifts,
              "influence": influence(zoo, replicates=args.replicates)}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print(result)


if __name__ == "__main__":
    main()
