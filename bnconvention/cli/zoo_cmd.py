"""``bnconvention zoo build``: build (or reuse) the digits model zoo."""

from __future__ import annotations

# The command's machinery (and torch) is imported when the command runs, not when the parser is built: every --help
# and every other command stays light (cli/main.py).
import argparse
from pathlib import Path

from bnconvention.cli.progress import add_progress_option, show_progress
from bnconvention.errors import UsageError
from bnconvention.extras import needs_extra

DEFAULT_OUT = "zoo"
POPULATION_OUT = "population"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "zoo",
        help="build the digits model zoo (BN and GroupNorm ConvNets, trained and unlearned)",
        description="Models trained and unlearned on sklearn's bundled digits (class 3 forgotten), with "
                    "BatchNorm and a GroupNorm twin, saved as safetensors plus JSON configs and a manifest.",
        epilog="examples:\n"
               "  bnconvention zoo build                    # into ./zoo, reused when already built\n"
               "  bnconvention zoo build --out /tmp/zoo --seed 1\n"
               "  bnconvention zoo build --variant bn-badteacher-eval --no-progress\n"
               "  bnconvention zoo build --population      # the structured population into ./population\n\n"
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
    add_progress_option(build)
    needs_extra(build, "refit")
    build.set_defaults(func=run)
    parser.set_defaults(func=_run_missing)


def _run_missing(args: argparse.Namespace) -> int:
    """``bnconvention zoo`` without an action."""
    raise UsageError("bnconvention zoo needs an action: bnconvention zoo build [--out DIR] [--seed N]")


def run(args: argparse.Namespace) -> int:
    from bnconvention.zoo import build_zoo

    if args.seed < 0:
        raise UsageError(f"--seed must be a non-negative integer, got {args.seed}")
    if args.population:
        return _run_population(args)
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


def _run_population(args: argparse.Namespace) -> int:
    from bnconvention.zoo.population_build import build_population
    from bnconvention.zoo.population_spec import SPEC_FILE

    if args.variant:
        raise UsageError("--variant names a zoo variant; the population is built whole (leave out --variant)")
    out = Path(args.out or POPULATION_OUT)
    manifest = build_population(out, seed=args.seed, progress=show_progress(args.progress), force=args.force)
    counts = manifest.counts
    print(f"population in {manifest.root} (seed {manifest.seed}, code {manifest.code_sha256[:12]}): "
          f"{counts['total']} checkpoints ({counts['base']} base, {counts['retrain']} retrain, "
          f"{counts['unlearned']} unlearned, {counts['twin']} twin)")
    print(f"audit it: bnconvention census {out} --spec {out / SPEC_FILE} --out census-population")
    return 0
