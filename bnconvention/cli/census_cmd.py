"""``bnconvention census``: audit a local population of checkpoints and count what moves."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from bnconvention.audit.census import PREREGISTRATION_FILE, preregister_census, run_census
from bnconvention.audit.population import headline, margin_line
from bnconvention.audit.spec import SweepSpec, load_spec
from bnconvention.cli.audit_cmd import add_common_options, allow_factories
from bnconvention.cli.commands import summary
from bnconvention.cli.device_option import chosen_device
from bnconvention.cli.progress import show_progress
from bnconvention.errors import UsageError
from bnconvention.formats.text import plural, signed
from bnconvention.report_html.census_page import CENSUS_HTML, write_census_html

EPILOG = """examples:
  bnconvention census zoo --spec examples/audit/digits-zoo.yaml --out census-zoo
  bnconvention census a.safetensors b.safetensors --spec audit.yaml --out census --workers 2
  bnconvention census zoo --spec examples/audit/digits-zoo.yaml --out census-zoo --margins 1,1.5,2 --pool-sizes 256
  bnconvention census population --spec spec.yaml --out census --preregister   # fix spec, margin, listing first
  bnconvention census population --spec spec.yaml --out census --amend "why the spec changed"

PATHS are .safetensors files, shard indexes (.safetensors.index.json) or folders searched recursively (a sharded
checkpoint there is one checkpoint: its index). Every checkpoint is checked before any is audited.
Each finished audit is journaled in DIR/journal/, so an interrupted census resumes where it stopped (rerun the
same command). Outputs: DIR/census.json, DIR/census.md, DIR/census.html (the readings with a forest plot by family,
the margin sweep, detection floor, recoverability curve, twin gaps and staleness scatter; opens from disk) and
DIR/checkpoints/<name>/ per checkpoint.

Margins and q levels are re-read from the journaled replicates (no refit); stored replicates are kept per pool
size in DIR/replicates/. Controls (spec controls.checkpoints, and channel-absent models) are reported apart and
kept out of the Benjamini-Yekutieli family; census.md adds the detection floor and the recalibration budget.

With --preregister nothing is refit: DIR/preregistration.json records the spec's digest, the margin (derived from
the population's own seed spread with margin: auto in the spec) and the listing with weight digests. A census into
that DIR then refuses a changed spec, listing or margin unless --amend gives the reason (DIR/amendments.json).

Exit codes: 0 census written (displaced cells and flips are findings, not failures), 1 an audit could not run (a
checkpoint does not fit its model, a factory failed, a dependency is missing), 2 invalid spec, unreadable or
missing checkpoint, a factory that cannot be loaded, or bad usage, 130 interrupted (rerun to resume).
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "census",
        help=summary("census"),
        description="Audit a population of checkpoints with one spec and write the census: per checkpoint the "
                    "decisions and flips, and population counts with Benjamini-Yekutieli control across it.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("paths", nargs="+", metavar="PATHS",
                        help=".safetensors files, shard indexes or folders of them")
    parser.add_argument("--out", required=True, metavar="DIR", help="output folder (also holds the resume journal)")
    parser.add_argument("--workers", type=int, default=1, metavar="N", help="audit N checkpoints in parallel "
                        "processes (default: 1)")
    parser.add_argument("--margins", type=_numbers(float), metavar="PP,...", help="margins of the margin sweep, "
                        "e.g. 1,1.2,1.5,2 (overrides sweeps.margins_pp; re-decided from stored replicates, no refit)")
    parser.add_argument("--pool-sizes", type=_numbers(int), metavar="N,...", help="pool sizes to sweep beside "
                        "refit.pool_size (overrides sweeps.pool_sizes; a pool size stored once is never refit)")
    parser.add_argument("--preregister", action="store_true", help="check the population and the spec, derive "
                        "the margin (margin: auto) and write DIR/preregistration.json before any refit; then stop")
    parser.add_argument("--amend", metavar="REASON", help="run a preregistered census whose spec, checkpoints or "
                        "margin changed, recording the change and REASON in DIR/amendments.json")
    add_common_options(parser)
    parser.set_defaults(func=run)


def _numbers(kind: type) -> Any:
    def parse(text: str) -> list[Any]:
        try:
            return [kind(part) for part in text.split(",") if part.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    return parse


def _with_sweeps(spec: Any, args: argparse.Namespace) -> Any:
    """The spec with the command line's sweep lists, checked as the spec's own would be."""
    sweeps = dict(spec.sweeps.model_dump(mode="json"))
    if args.margins is not None:
        sweeps["margins_pp"] = args.margins
    if args.pool_sizes is not None:
        sweeps["pool_sizes"] = args.pool_sizes
    try:
        return spec.model_copy(update={"sweeps": SweepSpec.model_validate(sweeps)})
    except ValidationError as exc:
        problem = exc.errors(include_url=False)[0]
        raise UsageError(f"--margins/--pool-sizes: {problem['msg']} (found {problem.get('input')!r})") from None


def _preregister(args: argparse.Namespace, spec: Any) -> int:
    if args.amend is not None:
        raise UsageError("--amend records a change when a preregistered census runs; --preregister writes the record")
    record, written = preregister_census(args.paths, spec, Path(args.out))
    plan = record.plan
    how = ("from the spec" if plan.margin_derivation is None else
           f"derived: {plan.margin_derivation['rule']}, over {plan.margin_derivation['recipes']} recipes")
    state = "preregistered" if written else "already preregistered (identical)"
    print(f"{state}: {plural(len(plan.checkpoints), 'checkpoint')}, margin ±{plan.margin_pp:.4g} pp ({how}), spec "
          f"{plan.spec_sha256[:12]}, at {record.created}; wrote {Path(args.out) / PREREGISTRATION_FILE}")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.workers < 1:
        raise UsageError(f"--workers must be at least 1, got {args.workers}")
    allow_factories(args.allow_factory)
    device = chosen_device(args)
    spec = load_spec(args.spec, replicates=args.replicates)
    if args.margins is not None or args.pool_sizes is not None:
        spec = _with_sweeps(spec, args)
    if args.preregister:
        return _preregister(args, spec)
    outcome = run_census(args.paths, spec, Path(args.out), workers=args.workers, progress=show_progress(args.progress),
                         allowed_factories=args.allow_factory, device=device, amend=args.amend)
    census = outcome.summary
    page = write_census_html(census, outcome.out_dir / CENSUS_HTML)
    counts = census.counts
    print(f"census of {plural(counts.checkpoints, 'checkpoint')}: {counts.anchored} anchored of "
          f"{counts.anchoring_checked} checked, {counts.decided} decided, "
          f"{counts.controls} controls ({counts.channel_absent} channel absent)")
    for metric, cell in census.cells.items():
        print(f"  {metric:<16} displaced {cell.displaced_by} (BY q={census.fdr_q:g}; raw {cell.displaced}), "
              f"equivalent {cell.equivalent}, undetermined {cell.undetermined}")
    for criterion, verdict in census.verdicts.items():
        print(f"  {criterion}: {plural(verdict.flips, 'flip')} (pass->fail {verdict.pass_to_fail}, fail->pass "
              f"{verdict.fail_to_pass})")
    controls = census.controls
    print(f"  controls: {controls.as_expected} of {controls.controls} gave their known answer (outside BY)")
    for row in census.sweeps.margins:
        cells = ", ".join(f"{m} {c.displaced}" for m, c in row.cells.items())
        print(f"  margin {row.margin_pp:g}pp: displaced {cells}")
    largest = census.largest_shift
    if largest:
        print(f"  largest shift {signed(largest.shift_pp)}pp ({largest.cell}, {largest.checkpoint})")
    print(margin_line(census))
    for warning in census.margin.warnings:
        print(f"warning: {warning}")
    print(f"headline: {headline(census)}")
    refits = census.invocation.refits_run if census.invocation is not None else 0
    print(f"{outcome.audits_run} audited, {outcome.audits_reused} reused from the journal, "
          f"{plural(refits, 'refit')}; wrote "
          f"{outcome.out_dir / 'census.json'}, {outcome.out_dir / 'census.md'} and {page}")
    return 0
