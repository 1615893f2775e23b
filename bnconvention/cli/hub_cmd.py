"""``bnconvention hub census|audit|push|validate|publish``: crawl a Hub organisation and write results back.

Every subcommand talks to the Hub through one ``HfApi(endpoint=..., token=...)``; the token is read from the
environment variable named by ``--token-env`` (default ``HF_TOKEN``) and never printed. The hub_scripts/ entry
points run these same commands.

``census``, ``validate`` and ``publish`` run on the core install (their machinery, :mod:`bnconvention.hub`, is
imported at the top); ``audit``, ``push`` and ``reproduce`` need bnconvention[audit], so the functions that run them
import :mod:`bnconvention.hub_audit` (and the audit spec) when they run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from bnconvention.cli.commands import summary
from bnconvention.cli.device_option import add_device_option, chosen_device
from bnconvention.cli.hub_common import add_hub_options, guarded, hub_client
from bnconvention.cli.progress import show_progress, show_stage_lines, stage_line
from bnconvention.errors import UsageError
from bnconvention.extras import needs_extra
from bnconvention.formats.text import one_line, plural
from bnconvention.hub.client import HubClient
from bnconvention.hub.crawl import OrgCensusRun, census_entries, census_org, check_org
from bnconvention.hub.executors import ExecutorKind, check_ray_address, resolve_executor
from bnconvention.hub.journal import Journal
from bnconvention.hub.locking import output_lock
from bnconvention.hub.summaries import (
    AUDIT_LABELS,
    PUSH_LABELS,
    CensusHead,
    CensusRunSection,
    census_head,
    census_run_line,
    census_text,
    outcomes_line,
    write_org_census_entries,
)
from bnconvention.hub.validate import validate_hub
from bnconvention.hub.verified_publish import publish_release
from bnconvention.validation import render

if TYPE_CHECKING:
    from bnconvention.audit.spec import AuditSpec
    from bnconvention.hub_audit.audit import AuditRun
    from bnconvention.hub_audit.entries import RepoAudit
    from bnconvention.hub_audit.push import PushRun

P = TypeVar("P")  # what a journaled command's own options check returns
R = TypeVar("R")  # what its work returns

EPILOG = """examples:
  bnconvention hub census my-org --endpoint http://127.0.0.1:8000 --out hub-my-org
  bnconvention hub audit my-org --spec examples/audit/digits-zoo.yaml --workers 2
  bnconvention hub push my-org --dry-run          # what the pull requests would change
  bnconvention hub push my-org                     # one pull request per audited repo, never to main
  bnconvention hub validate my-org/model --revision refs/pr/1 --format github
  bnconvention hub publish release/ --repo my-org/model

census, audit and push share --out (default hub-ORG) and its journal (OUT/journal.sqlite): run them in that order;
a killed run resumes where it stopped when run again, without redoing finished repos or opening a second pull
request. One run at a time writes an --out or a journal: a second is refused at once, naming the first (pid, host,
command, since when); a killed run's lock is taken over by the next. Exit codes: 0 done, 1 some repos failed (rerun
to retry them), validation errors or --out in use by another run, 2 bad usage or unreadable input, 130 interrupted.
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "hub", help=summary("hub"),
        description="Drive the Hugging Face Hub (or a compatible server) with huggingface_hub: a header-only "
                    "census of an organisation, audits of its BatchNorm repos, annotations pushed back as pull "
                    "requests, the submission-pipeline check, and publishing a release.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="hub_command", metavar="COMMAND")
    parser.set_defaults(func=lambda args: _usage(parser))
    for add in (_add_census, _add_audit, _add_push, _add_validate, _add_publish, _add_reproduce):
        add(commands)


def _add_census(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    census = commands.add_parser(
        "census", help="classify every model of an organisation from its safetensors headers",
        description="List ORG's models and classify each from its safetensors header(s) and card alone: no "
                    "weights / channel absent / BN declared and consistent / BN declared but inconsistent / BN "
                    "undeclared / unreadable. Writes OUT/org-census.json and OUT/org-census.md.",
        epilog="example:\n  bnconvention hub census my-org --endpoint http://127.0.0.1:8000 --format json\n\n"
               "exit codes: 0 every repo read or reused from the journal; 1 some repos could not be read (the Hub "
               "failed; rerun to retry them), ORG has no model repos, the Hub cannot be reached, or another run is "
               "writing --out or the journal; 2 bad usage or an unusable journal; 130 interrupted.\n",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    census.add_argument("org", metavar="ORG")
    add_hub_options(census)
    census.add_argument("--workers", type=int, default=1, metavar="N", help="read N repos at a time (threads)")
    census.add_argument("--format", choices=("text", "json"), default="text",
                        help="what to print: a summary (text) or the census document (json)")
    census.set_defaults(func=run_census_cmd)


def _add_audit(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    audit = commands.add_parser(
        "audit", help="audit the BatchNorm repos of an organisation and write annotations locally",
        description="Run the census (reusing the journal), then download every BatchNorm repo at the commit the "
                    "census read, build its model (the repo's allowlisted architecture, else the spec's) and run "
                    "the audit. The spec's rules give repos matched by repo-id pattern or config.json field their "
                    "own dataset, splits, model, refit and published cells (published_source: model_index reads "
                    "them from the card's model-index). Annotations and summaries go to "
                    "OUT/audits/<repo>/<file>/spec-<sha>/, the population summary of this spec to OUT/audit.json "
                    "and OUT/audit.md.",
        epilog="examples:\n  bnconvention hub audit my-org --spec examples/audit/digits-zoo.yaml --replicates 3\n"
               "  bnconvention hub audit my-org --spec audit.yaml --workers 4 --executor ray\n"
               "  bnconvention hub audit my-org --spec audit.yaml --redo-failed --allow-factory mymodels:build\n\n"
               "reruns: a repo audited (or skipped) at the same commit under the same spec is reused from the "
               "journal; a failed audit is always run again, so fixing the cause and rerunning is enough. Audits "
               "under different specs into the same --out are kept side by side, never overwritten. "
               "--redo and --redo-failed narrow the run to a selection: only the repos named (audited again "
               "even after a success) and/or those whose last audit failed; the others are reused or left for a "
               "later run.\n\n"
               "exit codes: 0 every BatchNorm repo audited or skipped; 1 some audits failed (rerun to retry them), "
               "ORG has no model repos, the Hub cannot be reached, or another run is writing --out or the journal; "
               "2 bad usage, an unreadable spec or an unusable journal; 130 interrupted.\n",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    audit.add_argument("org", metavar="ORG")
    add_hub_options(audit, progress_help="progress bars on stderr (default: only when stderr is a terminal); a line "
                                         "per repo as it finishes is written to stderr on any stream, and "
                                         "--no-progress also hides those lines")
    audit.add_argument("--spec", required=True, metavar="SPEC", help="audit spec (.yaml or .json)")
    audit.add_argument("--replicates", type=int, metavar="R", help="number of replicates (overrides the spec)")
    audit.add_argument("--allow-factory", action="append", default=[], metavar="MODULE:FUNCTION",
                       help="allow your own model factory for this run (repeatable)")
    audit.add_argument("--workers", type=int, default=1, metavar="N", help="audit N repos in parallel")
    audit.add_argument("--executor", choices=("local", "process", "ray"),
                       help="local (in this process), process (spawned workers) or ray (Ray tasks); default: "
                            "process when --workers > 1, else local")
    audit.add_argument("--ray-address", metavar="ADDRESS",
                       help="with --executor ray: connect to this existing Ray cluster (ray://HOST:10001, HOST:6379 "
                            "or auto) instead of starting a local one (default: RAY_ADDRESS when set, as Ray's own "
                            "tools read it, e.g. in a job of ray job submit); every worker reads the token from its "
                            "own environment (the --token-env variable)")
    audit.add_argument("--threads", type=int, default=1, metavar="T", help="torch threads per audit (default: 1)")
    add_device_option(audit)
    audit.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    audit.add_argument("--redo", action="append", default=[], metavar="ORG/NAME",
                       help="audit only this repo (repeatable), again even if the journal holds a success")
    audit.add_argument("--redo-failed", action="store_true",
                       help="audit only the repos whose last audit failed (with --redo: those too)")
    audit.add_argument("--format", choices=("text", "json"), default="text")
    needs_extra(audit, "audit")
    audit.set_defaults(func=run_audit_cmd)


def _add_push(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    push = commands.add_parser(
        "push", help="open one pull request per audited repo with its refit annotation",
        description="For each repo audited into the journal (under any spec), open a pull request (never a "
                    "commit to main) that adds bnconvention/refit-<sha>.json, updates the model card (its "
                    "bnconvention_refit entry, its section, and the refit cells in its model-index beside the "
                    "published ones), and adds an .eval_results/ entry when the audit's dataset is a Hub benchmark. "
                    "Reruns never open a second pull request for the same annotation.",
        epilog="examples:\n  bnconvention hub push my-org --dry-run\n  bnconvention hub push my-org --repo "
               "my-org/model\n\n"
               "reruns: a repo whose pull request was opened (or found already opened or merged) is reused from "
               "the journal; a failed push is tried again.\n\n"
               "exit codes: 0 every audited repo has its pull request (opened now, earlier, or already merged); "
               "1 some pushes failed (rerun to retry them), the token is refused, the Hub cannot be reached, or "
               "another run is writing --out or the journal; 2 bad usage or an unusable journal; 130 interrupted.\n",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    push.add_argument("org", metavar="ORG")
    add_hub_options(push)
    push.add_argument("--dry-run", action="store_true", help="print what each pull request would change")
    push.add_argument("--repo", action="append", metavar="ORG/NAME", help="only these repos (repeatable)")
    push.add_argument("--no-eval-results", action="store_true", help="never add .eval_results/ entries")
    push.add_argument("--format", choices=("text", "json"), default="text")
    needs_extra(push, "audit")
    push.set_defaults(func=run_push_cmd)


def _add_validate(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    validate = commands.add_parser(
        "validate", help="validate an organisation's models, or one repo at a revision (e.g. a pull request)",
        description="Download each repo's weights, card and annotations at the revision and validate them with "
                    "the offline validator. TARGET is ORG (every model at its head) or ORG/NAME.",
        epilog="examples:\n  bnconvention hub validate my-org\n  bnconvention hub validate my-org/model --revision "
               "refs/pr/3 --format github\n\nexit codes: 0 no errors, 1 errors found, 2 unreadable input.\n",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    validate.add_argument("target", metavar="TARGET", help="ORG or ORG/NAME")
    add_hub_options(validate, journal=False)
    validate.add_argument("--revision", metavar="REF", help="branch, tag, commit or refs/pr/N (needs ORG/NAME)")
    validate.add_argument("--require-declaration", action="store_true",
                          help="BatchNorm weights without a declaration are an error (default: a warning)")
    validate.add_argument("--format", choices=("text", "json", "github"), default="text")
    validate.set_defaults(func=run_validate_cmd)


def _add_publish(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    publish = commands.add_parser(
        "publish", help="stamp, validate and upload a release folder, then validate it on the Hub",
        description="bnconvention publish through the hub client, then the server-side check: the uploaded "
                    "revision is downloaded and validated (--require-declaration).",
        epilog="example:\n  bnconvention hub publish release/ --repo my-org/model --record record.json\n",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    publish.add_argument("directory", type=Path, metavar="DIR")
    publish.add_argument("--repo", required=True, metavar="ORG/NAME")
    add_hub_options(publish, journal=False)
    publish.add_argument("--record", action="append", default=[], type=Path, metavar="RECORD.json")
    publish.add_argument("--create-pr", action="store_true", help="upload as a pull request")
    publish.add_argument("--commit-message", metavar="TEXT")
    publish.add_argument("--dry-run", action="store_true", help="stamp and validate locally only")
    publish.add_argument("--format", choices=("text", "json", "github"), default="text",
                         help="format of the server-side validation report")
    publish.set_defaults(func=run_publish_cmd)


def _add_reproduce(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from bnconvention.cli.reproduce_cmd import add_reproduce_options

    reproduce = commands.add_parser(
        "reproduce", help="re-run the audit of a pull request's refit annotation and check its cells come back",
        description="bnconvention reproduce on a Hub pull request: read the annotations pull request N adds, "
                    "download the weights at the commit each annotation audited (their digests checked), read a "
                    "Hub dataset at the annotated revision, re-run the audit as hub audit does, and compare every "
                    "cell, decision and flip with the annotation's.",
        epilog="example:\n  bnconvention hub reproduce my-org/model --pr 3 --spec audit.yaml\n\n"
               "exit codes: 0 every annotation of the pull request reproduced; 1 some did not (the cells and "
               "criteria that differ are named); 2 unreadable or unavailable input (named: the pull request, a spec "
               "that is not the annotation's, a weights revision or dataset revision that no longer exists, weights "
               "whose digests differ) or bad usage; 130 interrupted.\n",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    reproduce.add_argument("repo", metavar="ORG/NAME")
    add_hub_options(reproduce, journal=False)
    reproduce.add_argument("--pr", type=int, required=True, metavar="N", help="the pull request's number")
    add_reproduce_options(reproduce)
    reproduce.set_defaults(func=run_reproduce_cmd)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


# --- shared plumbing ------------------------------------------------------------------------------------------------


def _paths(args: argparse.Namespace, org: str) -> tuple[Path, Path]:
    out = args.out or Path(f"hub-{org}")
    return out, args.journal or out / "journal.sqlite"


def _print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")


def _run_journaled(args: argparse.Namespace, *, prepare: Callable[[argparse.Namespace], P],
                   work: Callable[[argparse.Namespace, P, HubClient, Journal, Path], R],
                   report: Callable[[argparse.Namespace, R, HubClient, Path], int]) -> int:
    """The skeleton the census, audit and push commands share: check ORG, ``prepare`` the command's own options
    (before any Hub client exists), make the client and the output and journal paths, take the lock of both (one
    writer per output: another run holding either is refused in one line naming it, :mod:`bnconvention.hub.locking`),
    run ``work`` with the journal open, then ``report`` the outcome once the journal is closed, still under the lock;
    its return value is the exit code. Hub failures in ``work`` and ``report`` become one scrubbed error
    (:func:`_guarded`)."""
    check_org(args.org)
    prepared = prepare(args)
    client = hub_client(args)
    out, journal_path = _paths(args, args.org)

    command = f"bnconvention hub {getattr(args, 'hub_command', None) or ''} {args.org}"

    def go() -> int:
        with Journal(journal_path, org=args.org, endpoint=client.endpoint) as journal:
            outcome = work(args, prepared, client, journal, out)
        return report(args, outcome, client, out)

    with output_lock(out, journal_path, command=command,
                     on_recovered=lambda line: print(f"bnconvention: note: {line}", file=sys.stderr)):
        return guarded(client, go)


def _no_options(args: argparse.Namespace) -> None:
    """Census and push have no options to check beyond the shared ones (checked when the client is made)."""


# --- commands -------------------------------------------------------------------------------------------------------


def run_census_cmd(args: argparse.Namespace) -> int:
    return _run_journaled(args, prepare=_no_options, work=_census_work, report=_census_report)


def _census_work(args: argparse.Namespace, _: None, client: HubClient, journal: Journal,
                 out: Path) -> tuple[OrgCensusRun, CensusHead, dict[str, Path]]:
    """The census, then its reports written from the journal while it is open (a repo at a time)."""
    run = census_org(client, args.org, journal=journal, workers=args.workers, progress=show_progress(args.progress))
    head = census_head(args.org, census_entries(journal), endpoint=client.endpoint,
                       run=CensusRunSection(read=run.read, reused=run.reused, failed=run.failed,
                                            seconds=round(run.seconds, 3)), listing=run.listing.section())
    return run, head, write_org_census_entries(head, lambda: census_entries(journal), out)


def _census_report(args: argparse.Namespace, outcome: tuple[OrgCensusRun, CensusHead, dict[str, Path]],
                   client: HubClient, out: Path) -> int:
    run, head, written = outcome
    if args.format == "json":  # the document just written, copied rather than held in memory
        with written["json"].open(encoding="utf-8") as document:
            shutil.copyfileobj(document, sys.stdout)
    else:
        sys.stdout.write(census_text(head))
        print(f"{census_run_line(read=run.read, reused=run.reused, failed=run.failed)}; wrote "
              f"{written['json']} and {written['markdown']}")
    for failure in run.failures:
        print(f"failed: {failure} (rerun to retry)", file=sys.stderr)
    if run.failed > len(run.failures):
        print(f"failed: {run.failed - len(run.failures)} more (class unreadable in {written['json']}; rerun to "
              "retry)", file=sys.stderr)
    if run.listing.stopped is not None:  # the census covers part of the organisation: said, and not a success
        print(f"bnconvention: {run.listing.stopped}", file=sys.stderr)
    return 1 if run.failed or run.listing.stopped is not None else 0


def run_audit_cmd(args: argparse.Namespace) -> int:
    return _run_journaled(args, prepare=_audit_options, work=_audit_work, report=_audit_report)


def _audit_options(args: argparse.Namespace) -> tuple[AuditSpec, ExecutorKind]:
    """``--redo``, ``--executor``/``--workers``, ``--threads``, ``--device``, ``--allow-factory`` and the spec, checked
    in order."""
    from bnconvention.audit.spec import load_spec
    from bnconvention.cli.audit_cmd import allow_factories

    for repo_id in args.redo:
        if repo_id.split("/")[0] != args.org or repo_id.count("/") != 1:
            raise UsageError(f"--redo {repo_id!r} is not a repo of {args.org} (ORG/NAME)")
    executor = resolve_executor(args.executor, args.workers)
    check_ray_address(executor, args.ray_address)  # before the census, not after it
    if args.threads < 1:
        raise UsageError(f"--threads must be at least 1, got {args.threads}")
    args.device = chosen_device(args)  # resolved here: --device cuda without CUDA fails before the census
    allow_factories(args.allow_factory)
    return load_spec(args.spec, replicates=args.replicates), executor


def _audit_work(args: argparse.Namespace, options: tuple[AuditSpec, ExecutorKind], client: HubClient,
                journal: Journal, out: Path) -> AuditRun:
    from bnconvention.hub_audit.audit import audit_org

    spec, executor = options
    bars = show_progress(args.progress)
    on_audit = None
    if show_stage_lines(args.progress):  # said as it happens, whatever stderr is (a log, a pipe, a terminal)
        stage_line(f"[hub audit] {args.org}: census (reusing the journal), then each BatchNorm repo's audit",
                   bars=bars)
        on_audit = _audit_line_writer(bars)
    return audit_org(client, args.org, spec, journal=journal, out=out, executor=executor, workers=args.workers,
                     allowed_factories=args.allow_factory, threads=args.threads, device=args.device,
                     plots=not args.no_plots, progress=bars, redo=args.redo, redo_failed=args.redo_failed,
                     ray_address=args.ray_address, on_audit=on_audit)


def _audit_line_writer(bars: bool) -> Callable[[RepoAudit, bool], None]:
    """The stage line of each repo, written as its audit arrives (or is taken from the journal): its status, its
    files, the reason of a failure, and the time since the audits began."""
    start = time.monotonic()

    def write(audit: RepoAudit, reused: bool) -> None:
        failure = audit.reason or next((f.reason for f in audit.files if f.status == "failed"), "")
        when = "reused from the journal" if reused else f"after {time.monotonic() - start:.0f} s"
        reason = f": {one_line(failure)}" if audit.status == "failed" and failure else ""
        stage_line(f"[hub audit] {audit.repo_id}: {audit.status} ({plural(len(audit.files), 'file')}), {when}"
                   f"{reason}", bars=bars)

    return write


def _audit_report(args: argparse.Namespace, run: AuditRun, client: HubClient, out: Path) -> int:
    if args.format == "json":
        _print_json({"org": args.org, "audits": [a.model_dump(mode="json", exclude={"files": {"__all__": {
            "result"}}}) for a in run.audits], "summary": run.summary})
    else:
        for audit in run.audits:
            for item in audit.files:
                line = (item.result.annotation.reporting_line if item.result is not None else item.reason)
                print(f"{audit.repo_id} {item.filename}: {item.status}: {line}")
        print(outcomes_line("BatchNorm repo", labels=AUDIT_LABELS, left=run.left,
                            now=[a.status for a in run.audits if a.repo_id not in run.reused_ids],
                            reused=[a.status for a in run.audits if a.repo_id in run.reused_ids])
              + f"; outputs in {out}")
    failed = run.counts()["failed"]
    if failed:
        print(f"{plural(failed, 'audit')} failed: rerun to retry (after fixing the cause); --redo-failed retries "
              "only those", file=sys.stderr)
    if run.listing_stopped is not None:  # audited what the census listed: said, and not a success
        print(f"bnconvention: {run.listing_stopped}; audited the repos listed before it stopped", file=sys.stderr)
    return 1 if failed or run.listing_stopped is not None else 0


def run_push_cmd(args: argparse.Namespace) -> int:
    return _run_journaled(args, prepare=_no_options, work=_push_work, report=_push_report)


def _push_work(args: argparse.Namespace, _: None, client: HubClient, journal: Journal, out: Path) -> PushRun:
    from bnconvention.hub_audit.push import push_org

    return push_org(client, args.org, journal=journal, dry_run=args.dry_run, eval_results=not args.no_eval_results,
                    progress=show_progress(args.progress), repos=args.repo, out=out)


def _push_report(args: argparse.Namespace, run: PushRun, client: HubClient, out: Path) -> int:
    if args.format == "json":
        _print_json([o.model_dump(mode="json") for o in run.outcomes])
    else:
        if args.dry_run:
            for plan in run.plans:
                sys.stdout.write(plan.describe())
        for outcome in run.outcomes:
            where = f" #{outcome.pr_num}" if outcome.pr_num is not None else ""
            note = f": {outcome.reason}" if outcome.reason else ""
            earlier = " (by an earlier run, per the journal)" if outcome.repo_id in run.reused_ids else ""
            print(f"{outcome.repo_id}: {outcome.status}{where}{earlier}{note}")
        print(outcomes_line("repo", labels=PUSH_LABELS,
                            now=[o.status for o in run.outcomes if o.repo_id not in run.reused_ids],
                            reused=[o.status for o in run.outcomes if o.repo_id in run.reused_ids]))
    return 1 if any(o.status == "failed" for o in run.outcomes) else 0


def run_validate_cmd(args: argparse.Namespace) -> int:
    client = hub_client(args)

    def go() -> int:
        result = validate_hub(client, args.target, revision=args.revision,
                              require_declaration=args.require_declaration, progress=show_progress(args.progress))
        sys.stdout.write(render(result.report, args.format))
        if args.format == "text":
            for repo_id, commit in result.checked:
                print(f"checked {repo_id} at {commit}")
        return result.exit_code

    return guarded(client, go)


def run_publish_cmd(args: argparse.Namespace) -> int:
    client = hub_client(args)

    def go() -> int:
        outcome = publish_release(client, args.directory, repo_id=args.repo, records=args.record,
                                  create_pr=args.create_pr, commit_message=args.commit_message,
                                  dry_run=args.dry_run)
        result = outcome.result
        out = sys.stdout if args.format == "text" else sys.stderr
        for name, convention in sorted(result.records.items()):
            print(f"{name}: {convention}", file=out)
        print(f"stamped: {', '.join(result.stamped) if result.stamped else 'nothing (already stamped)'}", file=out)
        if not result.uploaded:
            print("validated locally; not uploaded (--dry-run)", file=out)
            return 0
        print(f"uploaded: {result.pr_url or result.commit_url}", file=out)
        validation = outcome.validation
        if validation is not None:
            sys.stdout.write(render(validation.report, args.format))
            status = "passes" if validation.exit_code == 0 else "FAILS"
            print(f"server-side validation of {args.repo}: {status}", file=out)
        return outcome.exit_code

    return guarded(client, go)


def run_reproduce_cmd(args: argparse.Namespace) -> int:
    from bnconvention.audit.spec import load_spec
    from bnconvention.cli.audit_cmd import allow_factories
    from bnconvention.cli.reproduce_cmd import checked_tolerance, report
    from bnconvention.hub_audit.reproduce import reproduce_pull_request

    if args.repo.count("/") != 1:
        raise UsageError(f"{args.repo!r} is not a repo id (ORG/NAME)")
    tolerance = checked_tolerance(args)
    allow_factories(args.allow_factory)
    device = chosen_device(args)
    spec = load_spec(args.spec)
    client = hub_client(args)

    def go() -> int:
        results = reproduce_pull_request(client, args.repo, args.pr, spec, spec_source=args.spec,
                                         tolerance=tolerance, allowed_factories=tuple(args.allow_factory),
                                         device=device)
        return report(results, args.format)

    return guarded(client, go)
