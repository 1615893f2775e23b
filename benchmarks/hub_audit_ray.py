"""Benchmark: ``hub audit`` as Ray tasks (a local ``ray.init()`` with ``--workers`` CPUs) against one worker in this
process, on the local Hub.

    .venv/bin/python benchmarks/hub_audit_ray.py                      # 8 repos, 2 Ray workers, 2 replicates
    .venv/bin/python benchmarks/hub_audit_ray.py --repos 4 --replicates 1   # quick look

An organisation of ``--repos`` undeclared BatchNorm repos (the digits zoo's BatchNorm checkpoints with their
``config.json``, committed directly into the ``bnconvention.hubserver.LocalHub`` store) is audited twice with the
same spec, each into a fresh journal and output folder: ``--executor local`` (one worker, in this process) and
``--executor ray --workers N`` (the token read by every task from ``BNC_BENCH_TOKEN`` in its environment, never
passed in the task). Printed: wall time of each (the Ray run with and without starting the local instance, which
is done before its timing starts), cold (each new worker imports torch and decodes the dataset) and warm (a second
run on the same workers: the steady state of a large organisation), the speedups, and whether every annotation is
byte-identical to the one-worker run. On a 2-core
machine shared with other work the speedup is bounded by the free cores, not by the executor.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
TOKEN = "hf_bench_ray_secret"
TOKEN_ENV = "BNC_BENCH_TOKEN"
VARIANTS = ("bn-badteacher-eval", "bn-relabel-eval", "bn-ga-train")


def spec_data(replicates: int) -> dict[str, Any]:
    return {"spec_version": "1.0", "kind": "audit_spec", "name": "bench-ray", "splits": {"forget_classes": [3]},
            "model": {"factory": "zoo/convnet-bn", "kwargs": {"width": 16}}, "cells": ["df", "dr", "dt"],
            "criteria": ["df <= 0.05"], "replicates": replicates,
            "refit": {"rule": "exact", "transform": "train", "pool_size": 64, "batch_size": 64},
            "recoverability": None, "provenance": None}


def seed(hub: Any, org: str, count: int) -> None:
    from bnconvention.zoo import build_zoo, default_zoo_dir

    zoo = build_zoo(default_zoo_dir(REPO_ROOT / ".cache", seed=0), seed=0, progress=False)
    for i in range(count):
        variant = VARIANTS[i % len(VARIANTS)]
        hub.store.commit(f"{org}/repo-{i:02d}", files={"model.safetensors": zoo.weights_path(variant).read_bytes(),
                                                       "config.json": zoo.config_path(variant).read_bytes()})


def audit_once(hub: Any, org: str, spec: Any, out: Path, *, executor: str, workers: int) -> tuple[float, Any]:
    from bnconvention.hub.client import make_client
    from bnconvention.hub.journal import Journal
    from bnconvention.hub_audit.audit import audit_org

    client = make_client(endpoint=hub.endpoint, token_env=TOKEN_ENV)
    with Journal(out / "journal.sqlite", org=org, endpoint=hub.endpoint) as journal:
        start = time.perf_counter()
        run = audit_org(client, org, spec, journal=journal, out=out, executor=executor,  # type: ignore[arg-type]
                        workers=workers, plots=False)
        seconds = time.perf_counter() - start
    if run.counts()["audited"] != len(run.audits):
        raise RuntimeError(f"{executor}: not every repo was audited: {run.counts()}")
    return seconds, run


def annotations(out: Path) -> dict[str, bytes]:
    from bnconvention.audit.core.files import ANNOTATION_FILE

    return {str(p.relative_to(out)): p.read_bytes() for p in sorted((out / "audits").rglob(ANNOTATION_FILE))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repos", type=int, default=8, help="repos in the organisation (default 8)")
    parser.add_argument("--workers", type=int, default=2, help="CPUs of the local Ray instance (default 2)")
    parser.add_argument("--replicates", type=int, default=2, help="replicates per audit (default 2)")
    args = parser.parse_args(argv)

    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ[TOKEN_ENV] = TOKEN  # before ray.init: the local workers inherit this environment
    import ray

    from bnconvention.audit.spec.audit_spec import parse_spec
    from bnconvention.hubserver import LocalHub

    spec = parse_spec(spec_data(args.replicates))
    with tempfile.TemporaryDirectory(prefix="bnc-bench-ray-") as tmp, \
            LocalHub(Path(tmp) / "hub", durable=False, tokens={TOKEN: "auditor"}) as hub:
        seed(hub, "ray-bench", args.repos)
        local_s, _ = audit_once(hub, "ray-bench", spec, Path(tmp) / "local", executor="local", workers=1)
        start = time.perf_counter()
        ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
        init_s = time.perf_counter() - start
        try:  # cold: each worker process imports torch and decodes the dataset once; warm: a second organisation-
            # wide run on the same workers, the steady state of an organisation of thousands
            ray_s, _ = audit_once(hub, "ray-bench", spec, Path(tmp) / "ray", executor="ray", workers=args.workers)
            warm_s, _ = audit_once(hub, "ray-bench", spec, Path(tmp) / "ray-warm", executor="ray",
                                   workers=args.workers)
        finally:
            ray.shutdown()
        expected = annotations(Path(tmp) / "local")
        same = bool(expected) and all(annotations(Path(tmp) / name) == expected for name in ("ray", "ray-warm"))
        count = len(expected)
    print(f"hub audit of {args.repos} repos, {args.replicates} replicates each ({os.cpu_count()} CPUs here):")
    print(f"  --executor local (1 worker)      {local_s:7.1f} s (1.00x)")
    print(f"  --executor ray --workers {args.workers:<2}     {ray_s:7.1f} s ({local_s / ray_s:.2f}x; "
          f"{local_s / (ray_s + init_s):.2f}x counting ray.init, {init_s:.1f} s; cold workers)")
    print(f"  the same, warm workers           {warm_s:7.1f} s ({local_s / warm_s:.2f}x)")
    print(f"  annotations byte-identical: {same} ({count} annotations)")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
