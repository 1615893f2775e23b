"""Finite-batch error of the train-mode rules against the exact rule, as a function of batch size.

Kalani et al. (Appendix B; docs/statistics.md#references) split the error of an ``update_bn`` refit on N retain
images in batches of b into sampling
variation O_p(N^-1/2) and a finite-batch offset O_L(1/b) that more images at the same b do not remove. This measures
both on the zoo's BatchNorm ConvNet (random initialisation, seed 0, so nothing needs to be built) over the bundled
digits retain split: for each batch size b, the staleness distance (Kalani et al., Eq. 15, layer-averaged: mean part
‖µ − µ̂‖₂/‖σ̂‖₂ and variance part ‖σ² − σ̂²‖₂/‖σ̂²‖₂) of a ``cumulative`` refit (exactly update_bn) and of an ``ema``
refit (momentum 0.1) from the ``exact`` refit of the *same* records. It then refits at fixed b on a quarter of the
records and on all of them (the 1/b term stays), and shows the ragged last batch: N = 15·64 + 2 records in batches
of 64, the short batch kept (update_bn's default) or dropped (``drop_last=True``).

    .venv/bin/python benchmarks/finite_batch.py            # the tables of docs/statistics.md, "Finite-batch error"
    .venv/bin/python benchmarks/finite_batch.py --json
    .venv/bin/python benchmarks/finite_batch.py --figure docs/figures/finite-batch.svg   # and the docs figure

Deterministic on one machine (no dropout, fixed record order); other machines agree to float32 round-off.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from bnconvention.formats.atomic import atomic_write_bytes

BATCH_SIZES = (4, 8, 16, 32, 64, 128, 256)


def _setup() -> tuple[Any, Any]:
    import numpy as np
    import torch

    from bnconvention.data.digits import digits_arrays, digits_split_masks
    from bnconvention.zoo.models import convnet_bn

    torch.manual_seed(0)
    torch.set_num_threads(2)
    model = convnet_bn()
    arrays = digits_arrays()
    retain = np.flatnonzero(digits_split_masks()["retain"])
    order = np.random.default_rng(0).permutation(retain)
    return model, torch.from_numpy(arrays.x[order])


def _distance(model: Any, x: Any, *, rule: str, batch: int, exact: dict[str, Any]) -> tuple[float, float]:
    from bnconvention.refitting import refit, running_state, staleness_distance

    refit(model, list(x.split(batch)), rule=rule)  # type: ignore[arg-type]
    found = staleness_distance(running_state(model), exact)
    return found.mean_distance, found.var_distance


def _exact(model: Any, x: Any) -> dict[str, Any]:
    from bnconvention.refitting import refit, running_state

    refit(model, [x], rule="exact")
    return running_state(model)


def measure() -> dict[str, Any]:
    model, x = _setup()
    exact = _exact(model, x)
    rows = []
    for batch in BATCH_SIZES:
        cumulative = _distance(model, x, rule="cumulative", batch=batch, exact=exact)
        ema = _distance(model, x, rule="ema", batch=batch, exact=exact)
        rows.append({"b": batch, "batches": -(-len(x) // batch), "cumulative_mean": cumulative[0],
                     "cumulative_var": cumulative[1], "ema_mean": ema[0], "ema_var": ema[1]})
    quarter = x[: len(x) // 4]
    exact_quarter = _exact(model, quarter)
    fixed = []
    for batch in (8, 64):
        for name, pool, reference in (("N/4", quarter, exact_quarter), ("N", x, exact)):
            mean, var = _distance(model, pool, rule="cumulative", batch=batch, exact=reference)
            fixed.append({"b": batch, "records": len(pool), "pool": name, "mean": mean, "var": var})
    ragged_pool = x[: 15 * 64 + 2]
    exact_ragged = _exact(model, ragged_pool)
    kept = _distance(model, ragged_pool, rule="cumulative", batch=64, exact=exact_ragged)
    dropped_pool = ragged_pool[: 15 * 64]
    dropped = _distance(model, dropped_pool, rule="cumulative", batch=64, exact=_exact(model, dropped_pool))
    return {"records": len(x), "by_batch_size": rows, "fixed_batch": fixed,
            "ragged": {"kept_mean": kept[0], "kept_var": kept[1], "dropped_mean": dropped[0],
                       "dropped_var": dropped[1]}}


def _print(result: dict[str, Any]) -> None:
    print(f"cumulative and ema (m = 0.1) against exact, {result['records']} digits retain records, zoo ConvNet-BN "
          "(random init, seed 0); staleness distance, layer average")
    print("| b | batches | cumulative mean | cumulative var | ema mean | ema var |")
    print("|---|---|---|---|---|---|")
    for row in result["by_batch_size"]:
        print(f"| {row['b']} | {row['batches']} | {row['cumulative_mean']:.4f} | {row['cumulative_var']:.4f} | "
              f"{row['ema_mean']:.4f} | {row['ema_var']:.4f} |")
    print("\ncumulative at fixed b, a quarter of the records and all of them")
    print("| b | records | mean | var |")
    print("|---|---|---|---|")
    for row in result["fixed_batch"]:
        print(f"| {row['b']} | {row['records']} | {row['mean']:.4f} | {row['var']:.4f} |")
    ragged = result["ragged"]
    print("\nragged last batch: 15 x 64 + 2 records, cumulative, b = 64")
    print(f"kept (update_bn's default): mean {ragged['kept_mean']:.4f}, var {ragged['kept_var']:.4f}; "
          f"dropped (drop_last=True): mean {ragged['dropped_mean']:.4f}, var {ragged['dropped_var']:.4f}")


def figure(result: dict[str, Any]) -> str:
    """The docs figure: the cumulative rule's distance from the exact refit against b (log scale), mean and
    variance parts, from the same rows as the table."""
    from bnconvention.report_html.census_figures import line_chart

    rows = result["by_batch_size"]
    series = {"variance part": [(float(r["b"]), r["cumulative_var"]) for r in rows],
              "mean part": [(float(r["b"]), r["cumulative_mean"]) for r in rows]}
    return line_chart(f"update_bn (cumulative) against the exact refit, {result['records']} records: staleness "
                      "distance by batch size", series, x_label="batch size b (log scale)",
                      y_label="distance from exact", log_x=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--figure", type=Path, default=None, metavar="SVG",
                        help="also write the docs figure (docs/figures/finite-batch.svg) there")
    args = parser.parse_args()
    result = measure()
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print(result)
    if args.figure is not None:
        args.figure.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(args.figure, (figure(result) + "\n").encode("utf-8"))


if __name__ == "__main__":
    main()
