"""Overhead of BNRecorder on a training step of torchvision's ResNet-18, measured side by side.

Three copies of the same network train on the same fixed batches: one plain, one with a recorder attached for the
whole run (split tags), one with a recorder that also matches every batch by content against two named splits
(``splits={"retain": ..., "forget": ...}``: each input row digested and looked up). Steps rotate between them one by
one (the order rotates every round, so drift and frequency changes hit all alike) and every step is timed on its
own; the figures are the ratios of the median recorded steps to the median plain step. Entering and leaving the
recorder (two digests of the model; indexing the splits) is timed separately: it is paid once per run, not per step.

    .venv/bin/python benchmarks/recorder.py                 # ResNet-18, batch 32, 3x32x32, 60 steps each, 1 thread
    .venv/bin/python benchmarks/recorder.py --model convnet --batch-size 64 --steps 400   # the digits ConvNet
    .venv/bin/python benchmarks/recorder.py --json          # one JSON object

Exit status 0 when both overheads are below ``--limit`` (default 5 %), 1 otherwise.
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
    parser.add_argument("--model", choices=("resnet18", "convnet"), default="resnet18")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=60, help="timed steps per variant")
    parser.add_argument("--width", type=int, default=16, help="ConvNet width (the zoo's default is 16)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--limit", type=float, default=0.05, help="overhead above which the exit status is 1")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)

    import torch
    import torch.nn.functional as F

    from bnconvention.authoring.recorder import BNRecorder

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.model == "resnet18":
        import torchvision

        plain_model = torchvision.models.resnet18(num_classes=10).train()
        x = torch.randn(args.batch_size * 4, 3, 32, 32)
        y = torch.randint(0, 10, (len(x),))
        described = f"torchvision ResNet-18, 20 BatchNorm2d layers, batch {args.batch_size}, 3x32x32 inputs"
    else:
        from bnconvention.data.digits import digits_arrays
        from bnconvention.zoo.models import convnet_bn

        arrays = digits_arrays()
        x = torch.from_numpy(arrays.x[: args.batch_size * 4].copy())
        y = torch.from_numpy(arrays.y[: args.batch_size * 4].copy())
        plain_model = convnet_bn(width=args.width).train()
        described = f"zoo ConvNet width {args.width}, 4 BatchNorm2d layers, batch {args.batch_size}, 1x16x16 inputs"
    batches = [(x[i:i + args.batch_size], y[i:i + args.batch_size]) for i in range(0, len(x), args.batch_size)]
    half = len(x) // 2
    splits = {"retain": torch.utils.data.TensorDataset(x[:half], y[:half]),
              "forget": torch.utils.data.TensorDataset(x[half:], y[half:])}
    recorded_model = copy.deepcopy(plain_model)
    matched_model = copy.deepcopy(plain_model)
    models = (plain_model, recorded_model, matched_model)
    optimizers = {id(m): torch.optim.SGD(m.parameters(), lr=1e-3) for m in models}

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
    matcher = BNRecorder(matched_model, split="train", splits=splits).__enter__()
    enter_s = time.perf_counter() - t0
    for i in range(10):  # warm-up: allocator, autograd caches
        for model in models:
            step(model, i)
    times: dict[int, list[float]] = {id(m): [] for m in models}
    for i in range(args.steps):
        for k in range(len(models)):
            model = models[(i + k) % len(models)]
            times[id(model)].append(step(model, i))
    t1 = time.perf_counter()
    recorder.__exit__(None, None, None)
    matcher.__exit__(None, None, None)
    exit_s = time.perf_counter() - t1
    matching = matcher.observation().split_matching
    if recorder.observation().buffer_updates != args.steps + 10 or matching is None \
            or sum(s.records for s in matching.splits) != (args.steps + 10) * args.batch_size \
            or matching.unmatched_records != 0:
        raise RuntimeError("the recorder missed updates or rows; the measurement is void")
    plain_step = statistics.median(times[id(plain_model)])
    recorded_step = statistics.median(times[id(recorded_model)])
    matched_step = statistics.median(times[id(matched_model)])
    overhead = recorded_step / plain_step - 1.0
    matched_overhead = matched_step / plain_step - 1.0
    result = {
        "model": described,
        "threads": args.threads,
        "steps": args.steps,
        "plain_step_ms": round(plain_step * 1e3, 4),
        "recorded_step_ms": round(recorded_step * 1e3, 4),
        "matched_step_ms": round(matched_step * 1e3, 4),
        "overhead": round(overhead, 5),
        "matched_overhead": round(matched_overhead, 5),
        "enter_exit_ms": round((enter_s + exit_s) * 1e3, 3),
        "limit": args.limit,
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['model']}, {args.threads} thread(s)")
        print(f"plain step     {result['plain_step_ms']:.3f} ms (median of {args.steps} steps)")
        print(f"recorded step  {result['recorded_step_ms']:.3f} ms (interleaved step by step)")
        print(f"matched step   {result['matched_step_ms']:.3f} ms (splits matched by content)")
        print(f"overhead       {overhead * 100:+.2f} % recorded, {matched_overhead * 100:+.2f} % matched "
              f"(limit {args.limit * 100:.0f} %)")
        print(f"enter + exit   {result['enter_exit_ms']:.2f} ms once per run (digests of the model, split index)")
    return 0 if max(overhead, matched_overhead) < args.limit else 1


if __name__ == "__main__":
    sys.exit(main())
