"""Benchmark: the header-only census against ``huggingface_hub.get_safetensors_metadata``, on the local Hub.

    .venv/bin/python benchmarks/hub_census.py                    # 100 MB repo, 150-repo organisation, resnets
    .venv/bin/python benchmarks/hub_census.py --big-mb 20 --repos 60 --repeats 1 --models resnet18  # quick look
    .venv/bin/python benchmarks/hub_census.py --thousands 5000 --big-mb 1 --repos 50 --repeats 1 --models ''

Three measurements, each side by side in one run against the same server (``bnconvention.hubserver.LocalHub``),
bytes from the server's own counters (body bytes actually sent):

1. **Bytes for one repo with ``--big-mb`` MB of weights** (a BatchNorm layer plus one large tensor): what
   ``classify_repo`` reads (one speculative range of 4 KiB, then exactly the missing header bytes) versus what
   ``get_safetensors_metadata`` reads (a HEAD, then ``bytes=0-100000``). The header is reported too.
2. **A census of a ``--repos``-repo organisation** (generated: BatchNorm undeclared and declared, sharded BatchNorm,
   GroupNorm, no weights, in equal shares; 50 repos per listing page): wall time and bytes of ``census_org`` (1 and
   ``--workers`` threads) versus a loop of ``get_safetensors_metadata`` over the same repos (what a census built on
   the client call alone would cost; it classifies nothing beyond reading the headers). Medians of interleaved
   repeats.
3. **Bytes per repo for real architectures** (``--models``, default timm's resnet18 and resnet50, random
   initialisation, saved as timm saves them): a release whose card declares its convention, then a re-push that
   keeps the card and replaces the weights (buffers moved by training-mode forwards). Per repo: the census's bytes
   and requests, the running statistics read with coalesced ranges, each as a fraction of the weights, and the
   class of the re-push, with the running-buffer check (budget ``RUNNING_CHECK_BYTES``) and with the old
   16 KiB budget that skipped it (``declared_consistent``: the stale declaration passed).
4. **Organisations of thousands** (``--thousands N``, off by default; ``benchmarks/hub_census_scale.py``): organisations
   of N/5 and N repos (or each of ``--thousands 1000,5000,10000``) written directly into the server's store
   (``HubStore.commit``, no HTTP uploads), each census and its reports in its own process: wall time, requests and
   bytes per repo, peak memory at each size side by side (its growth per repo: flat, the census streams), and a
   census killed a third of the way through and rerun on its journal (it must read only the unfinished repos).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np


def _bn_tensors(width: int) -> dict[str, np.ndarray]:
    return {"conv.weight": np.zeros((width, 3, 3, 3), dtype=np.float32),
            "bn.weight": np.ones(width, dtype=np.float32), "bn.bias": np.zeros(width, dtype=np.float32),
            "bn.running_mean": np.zeros(width, dtype=np.float32), "bn.running_var": np.ones(width, dtype=np.float32),
            "bn.num_batches_tracked": np.zeros((), dtype=np.int64),
            "head.weight": np.zeros((10, width), dtype=np.float32), "head.bias": np.zeros(10, dtype=np.float32)}


def _declared(data: bytes) -> bytes:
    """``data`` stamped with a valid declaration of its tensors (built by the production builder)."""
    import torch
    from safetensors.torch import load

    from bnconvention.authoring.declaration import declare, make_convention, make_transform
    from bnconvention.authoring.stamp import stamped_header_bytes
    from bnconvention.formats.canonical import canonical_json
    from bnconvention.formats.safetensors_header import parse_header
    from bnconvention.standard.models import to_dict

    state = load(data)
    width = state["bn.weight"].shape[0]
    model = torch.nn.Sequential()
    model.add_module("conv", torch.nn.Conv2d(3, width, 3, bias=False))
    model.add_module("bn", torch.nn.BatchNorm2d(width))
    model.add_module("head", torch.nn.Linear(width, 10))
    model.load_state_dict(state)
    convention = make_convention(buffer_update_mode="train", role="train", dataset_id="bench/data",
                                 subset="all", transform=make_transform(mode="train"), rule="ema", momentum=0.1)
    record = canonical_json(to_dict(declare(model, convention)))
    length = int.from_bytes(data[:8], "little")
    header = parse_header(data[8:8 + length], data_size=len(data) - 8 - length)
    new = stamped_header_bytes(header, record)
    return len(new).to_bytes(8, "little") + new + data[8 + length:]


def seed_org(hub: Any, org: str, count: int) -> None:
    from safetensors.numpy import save

    bn = save(_bn_tensors(32))
    declared = _declared(bn)
    gn = save({"gn.weight": np.ones(32, dtype=np.float32), "gn.bias": np.zeros(32, dtype=np.float32),
               "head.weight": np.zeros((10, 32), dtype=np.float32)})
    tensors = _bn_tensors(32)
    names = list(tensors)
    shard_a, shard_b = save({n: tensors[n] for n in names[:4]}), save({n: tensors[n] for n in names[4:]})
    index = json.dumps({"weight_map": {**dict.fromkeys(names[:4], "model-00001-of-00002.safetensors"),
                                       **dict.fromkeys(names[4:], "model-00002-of-00002.safetensors")}}).encode()
    kinds = [
        {"model.safetensors": bn},
        {"model.safetensors": declared, "README.md": b"---\nlicense: mit\n---\n# declared\n"},
        {"model-00001-of-00002.safetensors": shard_a, "model-00002-of-00002.safetensors": shard_b,
         "model.safetensors.index.json": index},
        {"model.safetensors": gn},
        {"README.md": b"# no weights\n"},
    ]
    for i in range(count):
        hub.store.commit(f"{org}/repo-{i:03d}", files=kinds[i % len(kinds)])


def big_repo_bytes(hub: Any, client: Any, repo_id: str, revision: str) -> dict[str, int]:
    from bnconvention.hub.classify import classify_repo

    hub.reset_stats()
    entry = classify_repo(client, repo_id, sha=revision, filenames=["model.safetensors"])
    ours = hub.bytes_sent(repo_id=repo_id)
    hub.reset_stats()
    client.api.get_safetensors_metadata(repo_id, revision=revision)
    theirs = hub.bytes_sent(repo_id=repo_id)
    header = entry.checkpoints[0].header_bytes
    return {"file_bytes": entry.checkpoints[0].file_size, "header_bytes": header, "census_bytes": ours,
            "get_safetensors_metadata_bytes": theirs}


def census_once(hub: Any, client: Any, org: str, workers: int) -> tuple[float, int]:
    from bnconvention.hub.crawl import census_org
    from bnconvention.hub.journal import Journal

    with tempfile.TemporaryDirectory() as tmp, Journal(Path(tmp) / "j.sqlite", org=org,
                                                       endpoint=hub.endpoint) as journal:
        hub.reset_stats()
        start = time.perf_counter()
        run = census_org(client, org, journal=journal, workers=workers)
        seconds = time.perf_counter() - start
    if run.failed:
        raise RuntimeError(f"census failures: {run.failures[:3]}")
    return seconds, hub.bytes_sent()


def metadata_loop_once(hub: Any, client: Any, org: str) -> tuple[float, int]:
    from huggingface_hub.errors import NotASafetensorsRepoError

    hub.reset_stats()
    start = time.perf_counter()
    for model in client.api.list_models(author=org):
        with contextlib.suppress(NotASafetensorsRepoError):
            client.api.get_safetensors_metadata(model.id)
    return time.perf_counter() - start, hub.bytes_sent()


OLD_BUDGET = 16 * 1024  # the census's former running-buffer budget


def _declared_release(name: str) -> tuple[dict[str, bytes], dict[str, bytes], int]:
    """(release, re-push, running bytes) of a random-initialised timm model: weights as ``timm.models.save_for_hf``
    writes them, a card declaring the convention; the re-push keeps the card, the buffers moved."""
    import timm
    import torch
    from safetensors.torch import save

    from bnconvention.authoring.card_stamp import stamp_card_text
    from bnconvention.authoring.declaration import declare, make_convention, make_transform
    from bnconvention.standard.models import to_dict

    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False).eval()
    convention = make_convention(buffer_update_mode="train", role="train", dataset_id="bench/imagenet-subset",
                                 subset="all", transform=make_transform(mode="train"), rule="ema", momentum=0.1)
    card = stamp_card_text(f"---\nlicense: mit\nlibrary_name: timm\n---\n# {name}\n", to_dict(declare(model,
                                                                                                        convention)))
    first = save({k: v.contiguous() for k, v in model.state_dict().items()})
    with torch.no_grad():  # a later training run moved the running statistics; the card was kept
        model.train()
        model(torch.randn(4, 3, 64, 64))
        model.eval()
    second = save({k: v.contiguous() for k, v in model.state_dict().items()})
    files = {"README.md": card.encode("utf-8")}
    return {**files, "model.safetensors": first}, {**files, "model.safetensors": second}, _running_bytes(model)


def _running_bytes(model: Any) -> int:
    from bnconvention.formats.digests import bn_layer_names, running_names_for_layer

    state = model.state_dict()
    names = [n for layer in bn_layer_names(model) for n in running_names_for_layer(layer, state)]
    return sum(state[n].numel() * state[n].element_size() for n in names)


def model_repo_costs(hub: Any, client: Any, names: list[str]) -> dict[str, dict[str, Any]]:
    """Per model: weights, running statistics, the census's bytes and requests on the release, and the classes of
    the re-push with the running check and with the old budget."""
    from bnconvention.hub.classify import classify_repo

    figures: dict[str, dict[str, Any]] = {}
    for name in names:
        release, repush, running = _declared_release(name)
        repo_id = f"bench-models/{name}"
        first = hub.store.commit(repo_id, files=release)
        hub.reset_stats()
        entry = classify_repo(client, repo_id, sha=first.oid, filenames=sorted(release))
        sent, requests = hub.bytes_sent(repo_id=repo_id), len([r for r in hub.stats if r.repo_id == repo_id])
        second = hub.store.commit(repo_id, files=repush)
        stale = classify_repo(client, repo_id, sha=second.oid, filenames=sorted(repush))
        old = classify_repo(client, repo_id, sha=second.oid, filenames=sorted(repush),
                            running_check_bytes=OLD_BUDGET)
        weights = len(release["model.safetensors"])
        checkpoint = entry.checkpoints[0]
        figures[name] = {"weights_bytes": weights, "running_bytes": running, "census_bytes": sent,
                         "census_requests": requests, "card_bytes": len(release["README.md"]),
                         "header_bytes": checkpoint.header_bytes, "release_status": entry.status,
                         "repush_status": stale.status, "repush_status_old_budget": old.status,
                         "census_fraction": sent / weights}
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--big-mb", type=int, default=100, help="weights of the large repo, in MB (default 100)")
    parser.add_argument("--repos", type=int, default=150, help="repos in the organisation (default 150)")
    parser.add_argument("--workers", type=int, default=4, help="threads of the parallel census (default 4)")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats (default 3)")
    parser.add_argument("--models", default="resnet18,resnet50",
                        help="timm models for the bytes-per-repo figures, comma-separated ('' to skip)")
    parser.add_argument("--thousands", default="", metavar="N|SIZES",
                        help="also census generated organisations of N/5 and N repos (or of each of the "
                             "comma-separated SIZES), and the largest killed and resumed (default: skip)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)

    import os

    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    from huggingface_hub import constants
    from safetensors.numpy import save

    from bnconvention.hub.client import make_client, quiet_hub_progress
    from bnconvention.hubserver import LocalHub

    with tempfile.TemporaryDirectory(prefix="bnc-bench-hub-") as tmp:
        constants.HF_HUB_CACHE = str(Path(tmp) / "hf-cache")  # get_safetensors_metadata caches the index
        with LocalHub(Path(tmp) / "hub", durable=False, page_size=50) as hub:
            client = make_client(endpoint=hub.endpoint)
            big = save({**_bn_tensors(64), "big.weight": np.zeros(args.big_mb * 250_000, dtype=np.float32)})
            result = hub.store.commit("bench-big/model", files={"model.safetensors": big})
            del big
            figures: dict[str, Any] = {"big_repo": big_repo_bytes(hub, client, "bench-big/model", result.oid)}

            seed_org(hub, "bench-org", args.repos)
            runs: dict[str, list[tuple[float, int]]] = {"census_1": [], f"census_{args.workers}": [],
                                                        "get_safetensors_metadata_loop": []}
            with quiet_hub_progress():
                census_once(hub, client, "bench-org", 1)  # warm-up: imports, connections, page cache
                metadata_loop_once(hub, client, "bench-org")
            for _ in range(args.repeats):
                runs["census_1"].append(census_once(hub, client, "bench-org", 1))
                runs[f"census_{args.workers}"].append(census_once(hub, client, "bench-org", args.workers))
                with quiet_hub_progress():
                    runs["get_safetensors_metadata_loop"].append(metadata_loop_once(hub, client, "bench-org"))
            figures["org"] = {name: {"median_seconds": statistics.median(s for s, _ in values),
                                     "bytes": values[0][1]} for name, values in runs.items()}
            figures["org"]["repos"] = args.repos
            names = [n for n in args.models.split(",") if n]
            figures["models"] = model_repo_costs(hub, client, names) if names else {}
            if args.thousands:
                from hub_census_scale import parse_sizes, scale_figures  # beside this file

                figures["thousands"] = scale_figures(hub, seed_org, parse_sizes(args.thousands), Path(tmp),
                                                     args.workers)

    big_figures = figures["big_repo"]
    print(f"repo with {big_figures['file_bytes'] / 1e6:.1f} MB of weights (header {big_figures['header_bytes']} "
          "bytes):")
    print(f"  census (classify_repo)      {big_figures['census_bytes']:>9} bytes")
    print(f"  get_safetensors_metadata    {big_figures['get_safetensors_metadata_bytes']:>9} bytes "
          f"({big_figures['get_safetensors_metadata_bytes'] / big_figures['census_bytes']:.1f}x)")
    org = figures["org"]
    base = org["census_1"]["median_seconds"]
    print(f"organisation of {args.repos} repos (median of {args.repeats}):")
    for name in ("census_1", f"census_{args.workers}", "get_safetensors_metadata_loop"):
        item = org[name]
        print(f"  {name:<30} {item['median_seconds']:7.2f} s ({item['median_seconds'] / base:.2f}x)  "
              f"{item['bytes']:>9} bytes ({item['bytes'] / org['census_1']['bytes']:.1f}x)")
    _print_models(figures["models"])
    if "thousands" in figures:
        from hub_census_scale import print_scale

        print_scale(figures["thousands"])
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


def _print_models(models: dict[str, dict[str, Any]]) -> None:
    if not models:
        return
    print("declared releases of real architectures (census of the release; class of a re-push keeping the card):")
    for name, item in models.items():
        print(f"  {name:<10} weights {item['weights_bytes'] / 1e6:6.1f} MB, running statistics "
              f"{item['running_bytes']:>7} bytes ({100 * item['running_bytes'] / item['weights_bytes']:.3f} %); "
              "census read "
              f"{item['census_bytes']:>7} bytes in {item['census_requests']} requests "
              f"({100 * item['census_fraction']:.3f} % of the weights; card {item['card_bytes']} bytes, header "
              f"{item['header_bytes']}); release {item['release_status']}, re-push {item['repush_status']} "
              f"(16 KiB budget: {item['repush_status_old_budget']})")


if __name__ == "__main__":
    sys.exit(main())
