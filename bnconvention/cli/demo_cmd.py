"""``bnconvention demo``: the BatchNorm illusion on a Hub organisation, end to end, offline; ``demo --serve``: the
organisation as published, on a local Hub that stays up for the quickstarts."""

from __future__ import annotations

import argparse
import os
import sys

from bnconvention.cli.commands import summary
from bnconvention.cli.hubserver_cmd import wait_until_stopped
from bnconvention.cli.progress import add_progress_option, show_progress, show_stage_lines
from bnconvention.demo.layout import POPULATION_SIZES, DemoPaths
from bnconvention.errors import UsageError
from bnconvention.formats.atomic import atomic_write_text

EPILOG = """examples:
  bnconvention demo                          # into ./demo-output, reusing what an earlier run built
  bnconvention demo --out /tmp/demo --no-progress
  bnconvention demo --fresh                  # rebuild everything: zoo, organisation, crawl, report
  bnconvention demo --serve --port 8900      # the organisation as published, served for the quickstarts

Stages: build the digits zoo with the recorder observing training; publish it as the organisation digits-lab on a
local Hub-compatible server (127.0.0.1, a free port) through huggingface_hub, the way authors would: declared and
stamped releases, undeclared ones, one whose declaration no longer matches its weights, GroupNorm twins, a repo
without weights, and a timm and a transformers release pushed by those libraries' own code (trained once, a few
seconds, and kept beside the zoo in ZOO-libraries/); then, as an auditor: census from the safetensors headers,
audits at bit-identical weights, one annotation pull request per audited repo, validation of the organisation; then
the structured population (families x BatchNorm variants x removals x seeds, known-answer controls, frozen twins;
OUT/population, built once) censused with the same instrument (OUT/population-census); and the HTML report
OUT/report/index.html with the population's census page (forest plot by family, margin sweep, detection floor,
recoverability curve, twin gaps, staleness scatter), its headline chosen by the data.
Nothing is downloaded from the internet. A rerun reuses the zoo, the published organisation and every finished
census entry, audit and pull request (OUT/crawl/journal.sqlite), and the population and its audits. Exit codes:
0 done, 1 a stage failed, 2 bad usage (e.g. --out is a folder the demo did not create), 130 interrupted (rerun to
resume).

--serve runs the first two stages only, into OUT/serve/ (published afresh at every start; a full run's crawl is not
touched), then keeps the Hub up with digits-lab as its authors published it, before any census, audit or pull
request: the starting point of the quickstarts (docs/quickstart-*.md). It prints the endpoint and the lines to paste
into another shell (export HF_ENDPOINT=..., export HF_TOKEN=... as the auditor or as the organisation's author) and
serves until Ctrl-C or SIGTERM: exit 0 then; 130 when interrupted before the Hub is up.
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "demo", help=summary("demo"),
        description="Build the digits zoo, publish it as a Hub organisation on a local server, crawl it as an "
                    "auditor (census, audit, annotation pull requests, validation) and write an HTML report; or, "
                    "with --serve, publish the organisation and keep the local Hub up for the quickstarts.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="demo-output", metavar="DIR",
                        help="output folder, created or reused (default: demo-output)")
    parser.add_argument("--zoo", default=None, metavar="DIR",
                        help="keep the recorded zoo in DIR instead of OUT/zoo (reused when complete)")
    parser.add_argument("--population", default=None, metavar="DIR",
                        help="keep the structured population in DIR instead of OUT/population (reused when complete)")
    parser.add_argument("--population-size", choices=POPULATION_SIZES, default="full",
                        help="full: the 114-checkpoint population (default); tiny: 14 checkpoints of the same code, "
                             "built in seconds (a quick look; its census has one seed)")
    parser.add_argument("--fresh", action="store_true", help="remove what an earlier run built and start over")
    add_progress_option(parser, help="progress bars on stderr (default: only when stderr is a terminal); "
                                     "--no-progress also hides the stage lines")
    parser.add_argument("--serve", action="store_true",
                        help="publish the organisation (no crawl) and serve it until Ctrl-C, for the quickstarts")
    parser.add_argument("--port", type=int, default=None, metavar="N",
                        help="with --serve: the port on 127.0.0.1 (default: 0 = a free port)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.port is not None and not args.serve:
        raise UsageError("--port applies to --serve only: bnconvention demo --serve --port N")
    paths = DemoPaths.under(args.out, zoo=args.zoo)
    paths.claim()  # refuses a folder the demo did not create, before anything else happens
    # before huggingface_hub is imported anywhere in this process: its cache and telemetry settings are read then
    os.environ["HF_HOME"] = str(paths.hf_home)
    os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
    os.environ.pop("HF_HUB_OFFLINE", None)  # everything is local; offline mode would block the local Hub too
    if args.serve:
        return _serve(args)
    from bnconvention.demo import run_demo, summary_text  # imports huggingface_hub: only after HF_HOME is set

    result = run_demo(args.out, zoo_dir=args.zoo, population_dir=args.population,
                      population_size=args.population_size, fresh=args.fresh, progress=show_progress(args.progress),
                      stage_lines=show_stage_lines(args.progress))
    text = summary_text(result)
    atomic_write_text(result.out / "summary.txt", text)
    sys.stdout.write(text)
    return 0


def _serve(args: argparse.Namespace) -> int:
    from bnconvention.demo.serve import serve_demo, serve_text  # imports huggingface_hub: only after HF_HOME is set

    with serve_demo(args.out, zoo_dir=args.zoo, port=args.port or 0, fresh=args.fresh,
                    progress=show_progress(args.progress), stage_lines=show_stage_lines(args.progress)) as served:
        sys.stdout.write(serve_text(served))
        sys.stdout.flush()
        wait_until_stopped()
    print("bnconvention demo --serve: stopped", file=sys.stderr, flush=True)
    return 0
