"""Measure the floating-point error behind every tolerance of the refit tests (not a test; run it by hand).

    PYTHONPATH=.:tests .venv/bin/python tests/helpers/measure_refit_errors.py [--seeds 20] [--json OUT.json]

For each tolerance site it prints the smallest ``rtol`` that would pass under that site's ``atol`` structure (e.g.
``atol = rtol / 10``), on the test's own configuration (``test``) and the largest over ``--seeds`` other seeds of
model and data (``seeds``). Run it under every arithmetic a machine may use, and set each tolerance with a margin
over the largest value measured; the comment beside the tolerance quotes the numbers:

    for t in 1 2; do OMP_NUM_THREADS=$t PYTHONPATH=.:tests python tests/helpers/measure_refit_errors.py; done
    taskset -c 0 env PYTHONPATH=.:tests python tests/helpers/measure_refit_errors.py
    for c in default avx2; do
        ATEN_CPU_CAPABILITY=$c PYTHONPATH=.:tests python tests/helpers/measure_refit_errors.py
    done
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from collections.abc import Callable, Iterator

import torch
from helpers.refit_models import (
    ControlFlowNet,
    SequenceNet,
    SmallConvNet,
    make_pool,
    reference_exact,
    seeded,
)
from torch.optim.swa_utils import update_bn

from bnconvention.refitting import refit, running_state
from bnconvention.refitting.moments import ChannelMoments

Measure = Callable[[int], dict[str, float]]


def rel(actual: torch.Tensor, expected: torch.Tensor, *, floor: float | torch.Tensor = 0.0) -> float:
    """Smallest rtol passing ``|a - e| <= rtol * (|e| + floor)`` (floor: atol / rtol of the site)."""
    a, e = actual.double(), expected.double()
    return float(((a - e).abs() / (e.abs() + floor)).max())


def against_reference(model: torch.nn.Module, pool: list[torch.Tensor], **kwargs: object) -> dict[str, float]:
    """The refit vs the naive float64 reference (test_refit_exact.assert_matches_reference's structure)."""
    reference = reference_exact(model, pool)
    refit(model, pool, **kwargs)  # type: ignore[arg-type]
    state = running_state(model)
    mean = max(rel(state[n].mean, m, floor=float(v.sqrt().max())) for n, (m, v) in reference.items())
    var = max(rel(state[n].var, v) for n, (m, v) in reference.items())
    return {"mean": mean, "var": var}


def reference_case(model_cls: type, shape: tuple[int, ...], sizes: list[int], **kwargs: object) -> Measure:
    return lambda seed: against_reference(seeded(model_cls, seed), make_pool(shape, sizes, seed=seed + 1), **kwargs)


def dropout_case(seed: int) -> dict[str, float]:
    model = seeded(SmallConvNet, seed, dropout=0.9)
    model.train()
    return against_reference(model, make_pool((3, 6, 6), [8, 8], seed=seed + 1))


def float64_case(seed: int) -> dict[str, float]:
    model = seeded(SmallConvNet, seed).double()
    return against_reference(model, [x.double() for x in make_pool((3, 6, 6), [5, 7, 4], seed=seed + 1)])


def large_mean_float64(seed: int) -> dict[str, float]:
    model = torch.nn.Sequential(torch.nn.BatchNorm1d(2)).double()
    data = torch.randn(4000, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(seed + 3)) * 1e-3 + 10.0
    refit(model, list(data.split(7)))
    return {"var": rel(model[0].running_var, data.var(dim=0, unbiased=True)),
            "mean": rel(model[0].running_mean, data.mean(dim=0))}


def large_mean_float32(seed: int) -> dict[str, float]:
    data = (torch.randn(3000, 2, generator=torch.Generator().manual_seed(seed + 4), dtype=torch.float64)
            + 1000.0).float()
    expected = data.double().var(dim=0, unbiased=True)
    worst = 0.0
    for sizes in ([3000], [1000] * 3, [7] * 428 + [4]):
        model = torch.nn.Sequential(torch.nn.BatchNorm1d(2))
        refit(model, list(data.split(sizes)))
        worst = max(worst, rel(model[0].running_var, expected))
    return {"var": worst}


def partition_case(method: str) -> Measure:
    def measure(seed: int) -> dict[str, float]:
        base = seeded(SmallConvNet, seed)
        data = torch.cat(make_pool((3, 6, 6), [24], seed=seed + 1))
        results = []
        for sizes in ([24], [5, 5, 5, 5, 4], [1] * 24, [23, 1]):
            model = copy.deepcopy(base)
            refit(model, list(data.split(sizes)), method=method)
            results.append(running_state(model))
        mean = max(rel(o[n].mean, s.mean, floor=1.0) for o in results[1:] for n, s in results[0].items())
        var = max(rel(o[n].var, s.var) for o in results[1:] for n, s in results[0].items())
        return {"mean": mean, "var": var}
    return measure


def chunk_case(seed: int) -> dict[str, float]:
    base = seeded(SmallConvNet, seed)
    pool = make_pool((3, 6, 6), [16], seed=seed + 1)
    whole = copy.deepcopy(base)
    refit(whole, pool)
    worst = {"var": 0.0, "mean": 0.0}
    for chunk_size in (3,) if seed == 0 else range(1, 16):  # the test's chunking, then every other
        chunked = copy.deepcopy(base)
        refit(chunked, pool, chunk_size=chunk_size)
        for name, state in running_state(whole).items():
            worst["var"] = max(worst["var"], rel(running_state(chunked)[name].var, state.var))
            worst["mean"] = max(worst["mean"], rel(running_state(chunked)[name].mean, state.mean, floor=1.0))
    return worst


def buffers(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v for k, v in model.state_dict().items() if k.endswith(("running_mean", "running_var"))}


def compare_buffers(a: torch.nn.Module, b: torch.nn.Module) -> dict[str, float]:
    """``rtol`` for ``atol = rtol / 10`` (the sites with rtol=1e-6, atol=1e-7)."""
    return {"buffers": max(rel(buffers(a)[k], v, floor=0.1) for k, v in buffers(b).items())}


def resnet_case(seed: int) -> dict[str, float]:
    import torchvision

    torch.manual_seed(seed)
    base = torchvision.models.resnet18(num_classes=4)
    pool = make_pool((3, 16, 16), [2, 3], seed=seed + 1)
    traced, hooked = copy.deepcopy(base), copy.deepcopy(base)
    refit(traced, pool, method="traced")
    refit(hooked, pool, method="hooks")
    return compare_buffers(hooked, traced)


def budget_case(seed: int) -> dict[str, float]:
    base = seeded(SmallConvNet, seed)
    pool = make_pool((3, 6, 6), [8, 8], seed=seed + 1)
    small, large = copy.deepcopy(base), copy.deepcopy(base)
    refit(small, pool, memory_budget=4096)
    refit(large, pool)
    return compare_buffers(small, large)


def update_bn_case(model_cls: type, shape: tuple[int, ...]) -> Measure:
    def measure(seed: int) -> dict[str, float]:
        base = seeded(model_cls, seed)
        pool = [(x, torch.zeros(len(x))) for x in make_pool(shape, [8, 8, 8, 3], seed=seed + 1)]
        ours, theirs = copy.deepcopy(base), copy.deepcopy(base)
        torch.manual_seed(123)
        refit(ours, pool, rule="cumulative")
        torch.manual_seed(123)
        update_bn(pool, theirs)
        return compare_buffers(ours, theirs)
    return measure


def moments_case(dtype: torch.dtype) -> Measure:
    def measure(seed: int) -> dict[str, float]:
        data = (torch.randn(50, 3, 4, 4, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64) * 3
                + 100).to(dtype)
        moments = ChannelMoments()
        for chunk in data.split([1, 7, 30, 12]):
            moments.update(chunk)
        mean, var = moments.mean_and_unbiased_var()
        columns = data.double().transpose(0, 1).reshape(3, -1)
        return {"mean": rel(mean, columns.mean(dim=1)), "var": rel(var, columns.var(dim=1, unbiased=True))}
    return measure


# name: (measure, the seed the test uses; the measure's seed convention: model seed, pool seed + 1)
CASES: dict[str, tuple[Measure, int]] = {
    "reference/conv2d-residual-bn1d-dropout/traced": (reference_case(SmallConvNet, (3, 6, 6), [5, 7, 4],
                                                                     method="traced"), 0),
    "reference/conv2d-residual-bn1d-dropout/hooks": (reference_case(SmallConvNet, (3, 6, 6), [5, 7, 4],
                                                                    method="hooks"), 0),
    "reference/bn1d-3d-input-bn3d-syncbn/traced": (reference_case(SequenceNet, (2, 8), [6, 6], method="traced"), 0),
    "reference/bn1d-3d-input-bn3d-syncbn/hooks": (reference_case(SequenceNet, (2, 8), [6, 6], method="hooks"), 0),
    "reference/dropout-0.9": (dropout_case, 0),
    "reference/untraceable-fallback": (reference_case(ControlFlowNet, (3, 5, 5), [4, 4]), 0),
    "reference/float64-model": (float64_case, 0),
    "large-mean/float64": (large_mean_float64, 0),
    "large-mean/float32": (large_mean_float32, 0),
    "partition/traced": (partition_case("traced"), 0),
    "partition/hooks": (partition_case("hooks"), 0),
    "chunk-size": (chunk_case, 0),
    "resnet18/traced-vs-hooks": (resnet_case, 0),
    "memory-budget/hooks-vs-traced": (budget_case, 0),
    "update_bn/convnet": (update_bn_case(SmallConvNet, (3, 6, 6)), 0),
    "update_bn/bn1d-bn3d-syncbn": (update_bn_case(SequenceNet, (2, 8)), 0),
    "moments/float32": (moments_case(torch.float32), -1),
    "moments/float64": (moments_case(torch.float64), -1),
}


def measure_all(seeds: int, only: str = "") -> Iterator[tuple[str, dict[str, float], dict[str, float]]]:
    for name, (measure, test_seed) in CASES.items():
        if only not in name:
            continue
        test = measure(test_seed)
        worst: dict[str, float] = dict(test)
        count = max(2, seeds // 4) if name.startswith("resnet18") else seeds
        for seed in range(1, count + 1):
            for key, value in measure(seed + 100).items():
                worst[key] = max(worst[key], value)
        yield name, test, worst


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--json", help="also write the numbers to this file")
    parser.add_argument("--only", default="", help="only the cases whose name contains this text")
    args = parser.parse_args(argv)
    print(f"# torch {torch.__version__}, cpu capability {torch.backends.cpu.get_cpu_capability()}, "
          f"{torch.get_num_threads()} threads", flush=True)
    rows = []
    for name, test, worst in measure_all(args.seeds, args.only):
        rows.append({"case": name, "test": test, "seeds": worst})
        cells = "  ".join(f"{k}: test {test[k]:.3g} seeds {worst[k]:.3g}" for k in test)
        print(f"{name:50s} {cells}", flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(rows, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
