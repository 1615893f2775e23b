"""Cost of one checkpoint's audit as a ratio to its floor, measured side by side in one run.

An audit of one checkpoint with R replicates needs at least R refit passes over the pool plus (R + 1) evaluations
of each cell's split (the shipped state once, every replicate once). The **floor** is measured here with plain
eval-mode forwards under ``torch.no_grad()`` over the same tensors, already transformed: ``R x`` one forward over
a pool of ``--pool`` images plus ``(R + 1) x`` one forward over the forget, retain and test splits at the spec's
evaluation batch size. Nothing in the floor draws pools, augments, accumulates statistics, proves θ, restores φ,
decides or writes a record; the audit does all of that, so ``audit / floor`` is what the audit's machinery costs on
top of the forwards it cannot avoid.

For each model (the zoo's ConvNet with 3 input channels, torchvision's ResNet-18; random initialisation) the data
are ``--images`` random 32x32 RGB images in 10 classes (an ``.npz`` dataset, 20 % test, class 3 forgotten: about
2,200 retain, 250 forget and 600 test records at the default 3,000), the spec refits ``--pool`` retained records per
replicate under the training transform (exact rule, batches of 128) with staleness on. Every round times, in a
shuffled order, the two floor pieces and:

* ``audit``         ``run_audit(prepare_audit(...))`` without a shipped-cell store (a first audit)
* ``audit+store``   the same with a :class:`~bnconvention.audit.run.shipped_store.ShippedStore` that already holds this
                    checkpoint's shipped cells (a rerun, a sweep, or a census member sharing the weights)

Loading (``prepare_audit``: data, checkpoint, file digests) is timed apart (``load``), once per round, and is not in
the audit's ratio: a census loads the data once for every member. Wall and process-CPU clocks are both reported;
on a shared machine the CPU ratio is the steadier one (``OMP_WAIT_POLICY=PASSIVE`` keeps idle threads from
spinning into it). The load average is printed before and after.

    OMP_WAIT_POLICY=PASSIVE .venv/bin/python benchmarks/audit.py                      # both models, 5 rounds
    .venv/bin/python benchmarks/audit.py --models resnet18 --replicates 10 --runs 3
    .venv/bin/python benchmarks/audit.py --device auto                                # GPU rows when present

``--malloc tuned`` fixes glibc's allocator thresholds first, as the ``bnconvention`` command line does
(:mod:`bnconvention.refitting.allocator`). ``--device auto`` (or ``cuda``/``mps``) adds the same rows on an accelerator;
without one the output says that no GPU rows were measured. With ``--check`` the exit status is 1 unless every CPU
``audit`` median is <= 1.2x floor.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

MODELS = {
    "convnet": {"factory": "zoo/convnet-bn", "kwargs": {"in_channels": 3, "num_classes": 10}},
    "resnet18": {"factory": "torchvision/resnet18", "kwargs": {"num_classes": 10}},
}


def write_case(folder: Path, name: str, *, images: int, pool: int, replicates: int, seed: int) -> tuple[Path, Path]:
    """The dataset (.npz), the checkpoint (.safetensors) and the spec (.json) of one model, in ``folder``."""
    import torch
    from safetensors.torch import save_file

    from bnconvention.architectures.build import build_model

    rng = np.random.default_rng(seed)
    np.savez(folder / "data.npz", x=rng.integers(0, 256, size=(images, 3, 32, 32), dtype=np.uint8),
             y=rng.integers(0, 10, size=images), test=rng.random(images) < 0.2)
    torch.manual_seed(seed)
    model = build_model(MODELS[name]["factory"], MODELS[name]["kwargs"])  # type: ignore[arg-type]
    weights = folder / f"{name}.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(weights))
    spec = {
        "spec_version": "1.0", "kind": "audit_spec", "name": f"bench-{name}",
        "dataset": {"kind": "npz", "path": "data.npz", "test_key": "test"},
        "splits": {"forget_classes": [3]},
        "model": MODELS[name],
        "cells": ["df", "dr", "dt"], "criteria": ["df <= 0.05"], "headline": "df",
        "margin_pp": 1.2, "replicates": replicates, "fdr_q": 0.05, "seed": 0,
        "refit": {"rule": "exact", "transform": "train", "pool_size": pool, "batch_size": 128},
        "staleness": True,
    }
    spec_path = folder / f"{name}.json"
    spec_path.write_text(json.dumps(spec))
    return weights, spec_path


def floor_pieces(prepared: Any, *, sync: Callable[[], None]) -> dict[str, Callable[[], None]]:
    """The two forwards of the floor, over tensors transformed beforehand (not timed)."""
    import torch

    from bnconvention.audit.measure.evaluation import model_device

    spec, data, model = prepared.spec, prepared.data, prepared.checkpoint.model
    device = model_device(model)
    generator = torch.Generator().manual_seed(0)
    train = data.transform(spec.refit.transform)
    pool = [train(x, generator=generator).to(device)
            for x in data.retain.x[: spec.refit.pool_size].split(spec.refit.batch_size)]
    splits = [data.eval_transform(split.x[i:i + spec.eval_batch_size], generator=None).to(device)
              for split in (data.forget, data.retain, data.test) for i in range(0, len(split.x), spec.eval_batch_size)]

    def forward(batches: list[Any]) -> Callable[[], None]:
        def run() -> None:
            model.eval()
            with torch.no_grad():
                for x in batches:
                    model(x)
            sync()
        return run

    return {"refit-floor": forward(pool), "eval-floor": forward(splits)}


def measure(name: str, *, args: argparse.Namespace, device: str) -> dict[str, Any]:
    import torch

    from bnconvention.audit.run.runner import prepare_audit, run_audit
    from bnconvention.audit.run.shipped_store import ShippedStore

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    with tempfile.TemporaryDirectory(prefix="bnc-bench-audit-") as tmp:
        folder = Path(tmp)
        weights, spec_path = write_case(folder, name, images=args.images, pool=args.pool,
                                        replicates=args.replicates, seed=args.seed)
        from bnconvention.audit.spec.audit_spec import load_spec

        spec = load_spec(spec_path)
        prepared = prepare_audit(weights, spec, device=device)  # type: ignore[arg-type]
        store = ShippedStore(folder / "shipped")
        run_audit(prepared, shipped_store=store)  # warm-up, and the store's entry for audit+store
        pieces = floor_pieces(prepared, sync=sync)
        fns: dict[str, Callable[[], Any]] = {
            **pieces,
            "load": lambda: prepare_audit(weights, spec, device=device),  # type: ignore[arg-type]
            "audit": lambda: run_audit(prepared),
            "audit+store": lambda: run_audit(prepared, shipped_store=store),
        }
        times: dict[str, dict[str, list[float]]] = {c: {k: [] for k in fns} for c in ("wall", "cpu")}
        order = list(fns)
        shuffler = random.Random(args.seed)
        for _ in range(args.runs):
            shuffler.shuffle(order)
            for key in order:
                wall, cpu = time.perf_counter(), time.process_time()
                fns[key]()
                times["cpu"][key].append(time.process_time() - cpu)
                times["wall"][key].append(time.perf_counter() - wall)
        sizes = {s: len(getattr(prepared.data, s).ids) for s in ("forget", "retain", "test")}
    return {"model": name, "device": device, "replicates": args.replicates, "pool": args.pool, "splits": sizes,
            "eval_batch_size": spec.eval_batch_size, "runs": args.runs, "rows": rows_of(times, args.replicates)}


def rows_of(times: dict[str, dict[str, list[float]]], replicates: int) -> dict[str, dict[str, Any]]:
    """Per variant and clock: the median ratio to the same round's floor, its range, and the median seconds."""
    rows: dict[str, dict[str, Any]] = {}
    for clock, measured in times.items():
        floors = [replicates * r + (replicates + 1) * e
                  for r, e in zip(measured["refit-floor"], measured["eval-floor"], strict=True)]
        for key, values in measured.items():
            ratios = [v / f for v, f in zip(values, floors, strict=True)]
            rows.setdefault(key, {})[clock] = {
                "ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
                "seconds_median": statistics.median(values)}
        rows.setdefault("floor", {})[clock] = {"ratio_median": 1.0, "ratio_min": 1.0, "ratio_max": 1.0,
                                               "seconds_median": statistics.median(floors)}
    return rows


def print_table(result: dict[str, Any]) -> None:
    sizes = result["splits"]
    print(f"\n{result['model']} on {result['device']}: R = {result['replicates']}, pool {result['pool']}, splits "
          f"forget {sizes['forget']} / retain {sizes['retain']} / test {sizes['test']} (eval batches of "
          f"{result['eval_batch_size']}), median of {result['runs']} rounds")
    print(f"  {'variant':<14}{'wall x floor':>13}{'range':>12}{'cpu x floor':>13}{'range':>12}{'wall s':>9}"
          f"{'cpu s':>9}")
    for key in ("floor", "audit", "audit+store", "load", "refit-floor", "eval-floor"):
        wall, cpu = result["rows"][key]["wall"], result["rows"][key]["cpu"]
        print(f"  {key:<14}{wall['ratio_median']:>13.2f}{wall['ratio_min']:>6.2f}-{wall['ratio_max']:<5.2f}"
              f"{cpu['ratio_median']:>13.2f}{cpu['ratio_min']:>6.2f}-{cpu['ratio_max']:<5.2f}"
              f"{wall['seconds_median']:>9.3f}{cpu['seconds_median']:>9.3f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="convnet,resnet18", help="comma-separated: convnet, resnet18")
    parser.add_argument("--runs", type=int, default=5, help="timed rounds")
    parser.add_argument("--replicates", type=int, default=5, help="R")
    parser.add_argument("--images", type=int, default=3000, help="records of the generated dataset")
    parser.add_argument("--pool", type=int, default=512, help="refit pool size")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda", "mps"),
                        help="auto: CPU rows, plus accelerator rows when one is present")
    parser.add_argument("--malloc", choices=("default", "tuned"), default="default",
                        help="glibc allocator thresholds: as they are, or fixed as the CLI fixes them")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--check", action="store_true", help="exit 1 unless every CPU audit median <= 1.2x floor")
    args = parser.parse_args(argv)

    import torch
    from refit import devices_to_measure  # benchmarks/refit.py, beside this file

    torch.set_num_threads(args.threads)
    if args.malloc == "tuned":
        from bnconvention.refitting.allocator import tune_malloc

        if not tune_malloc():
            raise SystemExit("--malloc tuned: glibc's mallopt is not available (or the environment sets it)")
    devices, note = devices_to_measure(args.device)
    load_before = os.getloadavg()
    results = [measure(name, args=args, device=device) for device in devices for name in args.models.split(",")
               if name]
    load_after = os.getloadavg()
    if args.json:
        print(json.dumps({"threads": args.threads, "loadavg": [load_before, load_after], "note": note,
                          "results": results}, indent=2))
    else:
        print(f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after; {args.threads} threads; "
              f"malloc {args.malloc}"
              + (f"; {note}" if note else ""))
        for result in results:
            print_table(result)
    if args.check:
        return 0 if all(r["rows"]["audit"]["wall"]["ratio_median"] <= 1.2 for r in results
                        if r["device"] == "cpu") else 1
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
