"""Overhead of BNRecorder on a training step of the digits zoo's ConvNet, measured side by side.

Two copies of the same ConvNet train on the same fixed batches, one with a recorder attached for the whole run and
one without. Steps alternate between them one by one (the order flips every pair, so drift and frequency changes
hit both alike) and every step is timed on its own; the figure is the ratio of the median recorded step to the
median plain step. Entering and leaving the recorder (two digests of the model) is timed separately: it is paid
once per run, not per step.

    .venv/bin/python benchmarks/recorder.py                 # defaults: batch 64, 400 steps each, 1 thread
    .venv/bin/python benchmarks/recorder.py --json          # one JSON object

Exit status 0 when the overhead is below ``--limit`` (default 5 %), 1 otherwise.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=400, help="timed steps per variant")
    parser.add_argument("--width", type=int, default=16, help="ConvNet width (the zoo's default is 16)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--limit", type=float, default=0.05, help="overhead above which the exit status is 1")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)

    import torch
    import torch.nn.functional as F

    from bnconvention.authoring.recorder import BNRecorder
    from bnconvention.data.digits import digits_arrays
    from bnconvention.zoo.models import convnet_bn

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    arrays = digits_arrays()
    x = torch.from_numpy(arrays.x[: args.batch_size * 4].copy())
    y = torch.from_numpy(arrays.y[: args.batch_size * 4].copy())
    batches = [(x[i:i + args.batch_size], y[i:i + args.batch_size]) for i in range(0, len(x), args.batch_size)]
    plain_model = convnet_bn(width=args.width).train()
    recorded_model = copy.deepcopy(plain_model)
    optimizers = {id(m): torch.optim.SGD(m.parameters(), lr=1e-3) for m in (plain_model, recorded_model)}

    def step(model: torch.nn.Module, index: int) -> float:
        xb, yb = batches[index % len(batches)]
        optimizer = optimizers[id(model)]
        start = time.perf_counter()
        loss = F.cross_entropy(model(xb), yb)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return time.perf_counter() - start

    t0 = time.perf_counter()
    recorder = BNRecorder(recorded_model, split="train").__enter__()
    enter_s = time.perf_counter() - t0
    for i in range(20):  # warm-up: allocator, autograd caches
        step(plain_model, i)
        step(recorded_model, i)
    plain: list[float] = []
    recorded: list[float] = []
    for i in range(args.steps):
        if i % 2 == 0:
            plain.append(step(plain_model, i))
            recorded.append(step(recorded_model, i))
        else:
            recorded.append(step(recorded_model, i))
            plain.append(step(plain_model, i))
    t1 = time.perf_counter()
    recorder.__exit__(None, None, None)
    exit_s = time.perf_counter() - t1
    if recorder.observation().buffer_updates != args.steps + 20:
        raise RuntimeError("the recorder missed updates; the measurement is void")
    plain_step = statistics.median(plain)
    recorded_step = statistics.median(recorded)
    overhead = recorded_step / plain_step - 1.0
    result = {
        "model": f"zoo ConvNet width {args.width}, 4 BatchNorm2d layers, batch {args.batch_size}, 1x16x16 inputs",
        "threads": args.threads,
        "steps": args.steps,
        "plain_step_ms": round(plain_step * 1e3, 4),
        "recorded_step_ms": round(recorded_step * 1e3, 4),
        "overhead": round(overhead, 5),
        "enter_exit_ms": round((enter_s + exit_s) * 1e3, 3),
        "limit": args.limit,
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['model']}, {args.threads} thread(s)")
        print(f"plain step     {result['plain_step_ms']:.3f} ms (median of {args.steps} steps)")
        print(f"recorded step  {result['recorded_step_ms']:.3f} ms (interleaved step by step)")
        print(f"overhead       {overhead * 100:+.2f} % (limit {args.limit * 100:.0f} %)")
        print(f"enter + exit   {result['enter_exit_ms']:.2f} ms once per run (two digests of the model)")
    return 0 if overhead < args.limit else 1


if __name__ == "__main__":
    sys.exit(main())
