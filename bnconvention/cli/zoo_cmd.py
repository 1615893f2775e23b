"""``bnconvention zoo build``: build (or reuse) the digits model zoo (and, with ``--quantized DIR``, its statically
quantized variants); ``bnconvention zoo audit-scales``: a quantized variant's activation scales, shipped vs refit on
retain-only calibration sets, written as a 1.1 refit annotation."""

from __future__ import annotations

# Each action imports its machinery (torch) when it runs: a missing dependency then names the action that needs it
# (``bnconvention zoo build needs torch``), as extras.needs_extra marks it.
import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from bnconvention.cli.commands import summary
from bnconvention.cli.progress import add_progress_option, show_progress
from bnconvention.errors import UsageError
from bnconvention.extras import needs_extra
from bnconvention.formats.atomic import atomic_write_bytes
from bnconvention.standard.models import to_dict

if TYPE_CHECKING:
    from bnconvention.zoo.population_manifest import PopulationManifest

DEFAULT_OUT = "zoo"
POPULATION_OUT = "population"
POPULATION_QUANTIZED = ""  # --quantized given without DIR: the population's own folders are quantized


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "zoo",
        help=summary("zoo"),
        description="Models trained and unlearned on sklearn's bundled digits (class 3 forgotten), with "
                    "BatchNorm and a GroupNorm twin, saved as safetensors plus JSON configs and a manifest.",
        epilog="examples:\n"
               "  bnconvention zoo build                    # into ./zoo, reused when already built\n"
               "  bnconvention zoo build --out /tmp/zoo --seed 1\n"
               "  bnconvention zoo build --variant bn-badteacher-eval --no-progress\n"
               "  bnconvention zoo build --population      # the structured population into ./population\n"
               "  bnconvention zoo build --quantized zoo-q8  # also the 8-bit activation-quantized variants\n"
               "  bnconvention zoo build --population --quantized --out population-q8\n"
               "  bnconvention zoo audit-scales zoo-q8/bn-base-q8 --zoo zoo\n\n"
               "Exit codes (zoo build): 0 built or reused, 1 the build failed, 2 bad usage, 130 interrupted.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="zoo_action", metavar="ACTION")
    build = actions.add_parser(
        "build",
        help="build the zoo into a folder (reuses an intact build with the same seed and code)",
        description="Train every variant deterministically (one torch thread, seeded) into --out. An existing "
                    "build with the same seed and code version whose files hash correctly is reused; an "
                    "interrupted build resumes.",
        epilog="examples:\n  bnconvention zoo build --out zoo\n  bnconvention zoo build --out zoo --force\n\n"
               "Exit codes: 0 built (or reused), 1 the build failed (rerun to resume), 2 bad usage (e.g. --out is a "
               "non-empty folder\nthat is not a zoo), 130 interrupted (rerun to resume).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    build.add_argument("--out", default=None, metavar="DIR", help=f"output folder (default: ./{DEFAULT_OUT}, or "
                       f"./{POPULATION_OUT} with --population)")
    build.add_argument("--population", action="store_true",
                       help="build the structured population instead (noisy digits; 3 families x 2 BN variants x "
                            "4 removals x 3 seeds, bases, retrains, frozen twins; see docs/zoo.md)")
    build.add_argument("--seed", type=int, default=0, metavar="N", help="zoo seed (default: 0)")
    build.add_argument("--variant", action="append", metavar="NAME",
                       help="build only this variant and its parents (repeatable; default: all)")
    build.add_argument("--force", action="store_true", help="rebuild even when a matching build exists")
    build.add_argument("--quantized", nargs="?", const=POPULATION_QUANTIZED, default=None, metavar="DIR",
                       help="also write statically quantized variants <variant>-q8/ into DIR (float weights copied, "
                            "activation scales beside them, a 1.1 declaration); of the --variant names, default "
                            "bn-base gn-base bn-ga-train gn-ga-train. With --population (no DIR): every checkpoint "
                            "folder gains activation_scales.safetensors and declaration.json (docs/population.md)")
    build.add_argument("--observer", default="minmax", choices=["minmax", "absmax", "percentile", "mse", "histogram"],
                       help="observer of the quantized variants' scales (default: minmax; percentile at 99.99)")
    build.add_argument("--calibration-size", type=int, default=256, metavar="N",
                       help="train records the quantized variants are calibrated on (default: 256)")
    add_progress_option(build)
    needs_extra(build, "refit")
    build.set_defaults(func=run)
    _register_audit_scales(actions)
    parser.set_defaults(func=_run_missing)


def _register_audit_scales(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    audit = actions.add_parser(
        "audit-scales",
        help="audit a quantized variant's activation scales against retain-only recalibrations",
        description="Measure df/dr/dt of a <variant>-q8 folder (bnconvention zoo build --quantized DIR) with its "
                    "activations fake-quantized at the shipped scales and at scales refit on R retain-only "
                    "calibration sets (weights and BatchNorm buffers bit-identical), decide each shift by the "
                    "standard's rules and write the 1.1 refit annotation (refit_state activation_scales).",
        epilog="examples:\n  bnconvention zoo audit-scales zoo-q8/bn-base-q8 --zoo zoo\n"
               "  bnconvention zoo audit-scales zoo-q8/gn-base-q8 --zoo zoo --replicates 6 --out gn-scales.json\n\n"
               "Exit codes: 0 written, 1 the audit failed (e.g. scales that are NaN or zero, a declaration that does "
               "not\nmatch the scales file), 2 bad usage or unreadable input.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    audit.add_argument("folder", metavar="FOLDER", help="the quantized variant's folder, <variant>-q8")
    audit.add_argument("--zoo", required=True, metavar="DIR", help="the zoo the variant was built from")
    audit.add_argument("--replicates", type=int, default=3, metavar="R", help="retain-only refits (default: 3)")
    audit.add_argument("--calibration-size", type=int, default=256, metavar="N",
                       help="retain records per refit (default: 256)")
    audit.add_argument("--seed", type=int, default=100, metavar="S",
                       help="seed of the first refit's draw; refit r uses S + r (default: 100)")
    audit.add_argument("--out", default=None, metavar="FILE",
                       help="annotation file (default: FOLDER/refit-scales.json); written atomically")
    needs_extra(audit, "refit")
    audit.set_defaults(func=run_audit_scales)


def _run_missing(args: argparse.Namespace) -> int:
    """``bnconvention zoo`` without an action."""
    raise UsageError("bnconvention zoo needs an action: bnconvention zoo build [--out DIR] [--seed N], or "
                     "bnconvention zoo audit-scales FOLDER --zoo DIR")


def run(args: argparse.Namespace) -> int:
    from bnconvention.zoo import build_zoo

    if args.seed < 0:
        raise UsageError(f"--seed must be a non-negative integer, got {args.seed}")
    if args.population:
        return _run_population(args)
    if args.quantized is not None:
        if args.quantized == POPULATION_QUANTIZED:
            raise UsageError("--quantized needs DIR for the zoo's quantized variants (--quantized zoo-q8), or "
                             "--population to quantize the population's checkpoints")
        return _run_quantized(args)
    manifest = build_zoo(Path(args.out or DEFAULT_OUT), seed=args.seed, progress=show_progress(args.progress),
                         variants=args.variant, force=args.force)
    print(f"zoo in {manifest.root} (seed {manifest.seed}, code {manifest.code_sha256[:12]})")
    print(f"{'variant':<20} {'buffers':<10} {'forget':>7} {'retain':>7} {'test':>7}")
    for name in manifest.variants:
        config = manifest.config(name)
        shipped = config["shipped_accuracy"]
        print(f"{name:<20} {config['buffer_update_mode']:<10} {shipped['forget']:>7.3f} "
              f"{shipped['retain']:>7.3f} {shipped['test']:>7.3f}")
    return 0


def _run_quantized(args: argparse.Namespace) -> int:
    from bnconvention.zoo import build_zoo
    from bnconvention.zoo.quantized import DEFAULT_VARIANTS, build_quantized

    variants = args.variant or list(DEFAULT_VARIANTS)
    manifest = build_zoo(Path(args.out or DEFAULT_OUT), seed=args.seed, progress=show_progress(args.progress),
                         variants=variants, force=args.force)
    percentile = 99.99 if args.observer == "percentile" else None
    folders = build_quantized(manifest, Path(args.quantized), variants=variants, observer=args.observer,
                              percentile=percentile, size=args.calibration_size, seed=args.seed)
    print(f"zoo in {manifest.root}; quantized variants ({args.observer}, {args.calibration_size} train records):")
    for folder in folders:
        print(f"  {folder}")
    print(f"audit one: bnconvention zoo audit-scales {folders[0]} --zoo {manifest.root}")
    return 0


def run_audit_scales(args: argparse.Namespace) -> int:
    from bnconvention.zoo.manifest import read_manifest
    from bnconvention.zoo.quantized_audit import audit_quantized_variant

    folder = Path(args.folder)
    record = audit_quantized_variant(read_manifest(Path(args.zoo)), folder, replicates=args.replicates,
                                     size=args.calibration_size, seed=args.seed)
    out = Path(args.out) if args.out else folder / "refit-scales.json"
    atomic_write_bytes(out, (json.dumps(to_dict(record), indent=2) + "\n").encode("utf-8"))
    print(f"{'cell':<5} {'shipped':>8} {'refit':>8} {'shift pp':>9}  decision")
    for cell in record.cells:
        print(f"{cell.metric:<5} {cell.shipped:>8.4f} {cell.refit:>8.4f} {cell.shift_pp:>+9.2f}  "
              f"{cell.decision.outcome}")
    print(f"wrote {out}")
    return 0


def _run_population(args: argparse.Namespace) -> int:
    from bnconvention.zoo.population_build import build_population
    from bnconvention.zoo.population_spec import SPEC_FILE

    if args.variant:
        raise UsageError("--variant names a zoo variant; the population is built whole (leave out --variant)")
    out = Path(args.out or POPULATION_OUT)
    if args.quantized not in (None, POPULATION_QUANTIZED):
        raise UsageError("with --population, --quantized takes no DIR: the scales go into each checkpoint's folder "
                         "(write --population --quantized --out DIR)")
    if args.quantized is None:
        manifest = build_population(out, seed=args.seed, progress=show_progress(args.progress), force=args.force)
    else:
        manifest = _build_quantized_population(args, out)
    counts = manifest.counts
    print(f"population in {manifest.root} (seed {manifest.seed}, code {manifest.code_sha256[:12]}): "
          f"{counts['total']} checkpoints ({counts['base']} base, {counts['retrain']} retrain, "
          f"{counts['unlearned']} unlearned, {counts['twin']} twin)")
    print(f"audit it: bnconvention census {out} --spec {out / SPEC_FILE} --out census-population")
    return 0


def _build_quantized_population(args: argparse.Namespace, out: Path) -> PopulationManifest:
    from bnconvention.zoo.population_quantized import QuantizationSettings, build_quantized_population

    settings = QuantizationSettings(observer=args.observer, calibration_size=args.calibration_size,
                                    percentile=99.99 if args.observer == "percentile" else None)
    manifest = build_quantized_population(out, seed=args.seed, settings=settings,
                                          progress=show_progress(args.progress), force=args.force)
    print(f"activation scales ({args.observer}, {args.calibration_size} records of each checkpoint's training data) "
          "beside every checkpoint")
    return manifest
