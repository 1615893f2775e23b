"""Cost of reproducing a refit annotation as a ratio to the audit that wrote it, measured side by side in one run.

One zoo checkpoint is audited (``bnconvention audit``, in process) on the digits as a local ``.npz`` pool, then its
annotation is reproduced (``bnconvention reproduce``: the spec and digest checks, the re-run, the comparison) and
must come back (exit 0). Rounds alternate which runs first; the figure is the ratio of the median reproduction to
the median audit (the audit also draws its plots and writes its files, the reproduction writes nothing).

    .venv/bin/python benchmarks/reproduce.py                         # bn-badteacher-eval, R = 10, 3 rounds
    .venv/bin/python benchmarks/reproduce.py --checkpoint bn-retrain --replicates 10 --json

The zoo is built (or reused) under ``.cache/``, as the tests do.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", default="bn-badteacher-eval")
    parser.add_argument("--replicates", type=int, default=10)
    parser.add_argument("--pool", type=int, default=128)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)

    import numpy as np
    import yaml

    from bnconvention.cli.main import main as cli
    from bnconvention.data.digits import digits_arrays
    from bnconvention.zoo import build_zoo, default_zoo_dir

    root = Path(__file__).resolve().parent.parent
    zoo = build_zoo(default_zoo_dir(root / ".cache", seed=0), seed=0, progress=False)
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        arrays = digits_arrays()
        np.savez(folder / "digits.npz", x=arrays.x, y=arrays.y, ids=arrays.ids, test=arrays.is_test)
        spec = folder / "spec.yaml"
        spec.write_text(yaml.safe_dump({
            "spec_version": "1.0", "kind": "audit_spec",
            "dataset": {"kind": "npz", "path": "digits.npz", "ids_key": "ids", "test_key": "test"},
            "splits": {"forget_classes": [3]}, "criteria": ["df <= 0.05", "dr >= 0.95"],
            "published_source": "sidecar", "replicates": args.replicates, "refit": {"pool_size": args.pool},
            "recoverability": None}, sort_keys=False))
        for suffix in (".safetensors", ".json"):
            shutil.copy(zoo.root / f"{args.checkpoint}{suffix}", folder / f"{args.checkpoint}{suffix}")
        weights = folder / f"{args.checkpoint}.safetensors"

        def quiet(argv: list[str]) -> int:  # the commands' own reports are not the benchmark's output
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                return cli(argv)

        def audit(index: int) -> float:
            start = time.perf_counter()
            if quiet(["audit", str(weights), "--spec", str(spec), "--out", str(folder / f"audit-{index}"),
                    "--no-progress"]) != 0:
                raise RuntimeError("the audit failed; the measurement is void")
            return time.perf_counter() - start

        def reproduce(index: int) -> float:
            start = time.perf_counter()
            if quiet(["reproduce", str(folder / f"audit-{index}"), "--spec", str(spec), "--format", "json"]) != 0:
                raise RuntimeError("the annotation did not reproduce; the measurement is void")
            return time.perf_counter() - start

        audits: list[float] = []
        reproductions: list[float] = []
        audit(0)  # warm-up: imports, allocator, the zoo's first read
        for index in range(1, args.runs + 1):
            if index % 2:
                audits.append(audit(index))
                reproductions.append(reproduce(index))
            else:  # the other order: the previous round's annotation reproduced first
                reproductions.append(reproduce(index - 1))
                audits.append(audit(index))
    audit_s, reproduce_s = statistics.median(audits), statistics.median(reproductions)
    result = {"checkpoint": args.checkpoint, "replicates": args.replicates, "pool": args.pool, "runs": args.runs,
              "audit_s": round(audit_s, 3), "reproduce_s": round(reproduce_s, 3),
              "ratio": round(reproduce_s / audit_s, 3)}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{args.checkpoint}, R = {args.replicates}, pools of {args.pool}, {args.runs} rounds")
        print(f"audit      {audit_s:.2f} s (median)")
        print(f"reproduce  {reproduce_s:.2f} s (median)")
        print(f"ratio      {reproduce_s / audit_s:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
