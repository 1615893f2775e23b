"""Push audit results back: one pull request per audited repo, never a commit to ``main``.

The pull request, based on the commit that was audited, adds each refit annotation as
``bnconvention/refit-<12 hex>.json`` (:func:`bnconvention.standard.locations.annotation_filename`, named by the
sha256 of the annotation's canonical JSON), updates the model card (a ``bnconvention_refit`` front-matter entry and a
"BatchNorm refit audit" section, written by :func:`bnconvention.authoring.card_stamp.stamp_card_refit_text`; the
release's own declaration block is left alone), adds the refit cells to the card's ``model-index`` beside the
published ones (:mod:`bnconvention.authoring.card_model_index`; the annotation stays the source of truth and
``bnconvention validate`` checks the copy) and, only when the audit's dataset is a Hub benchmark dataset (a dataset
repo with an ``eval.yaml``), adds an ``.eval_results/`` entry with the refit test accuracy.

Every audited repo is offered: a repo audited under several specs (rows the journal keeps side by side) gets the
annotations of all of them at its latest audited commit (:func:`audits_to_push`).

Idempotent: the description carries a marker per annotation (``<!-- bnconvention:refit-annotation sha256=... -->``).
Before opening a pull request, and again before retrying a failed attempt, the repo's pull requests by the same
user (open, merged or closed: a maintainer's refusal is respected) are searched for the markers; annotations already
on ``main`` (also when recorded at an earlier commit of the same weights) count as done
(:mod:`bnconvention.hub.proposals`). A rerun therefore never opens a second pull request for the same annotations,
even when the journal was lost or the previous run was killed between the Hub's answer and the journal write; a
new pull request carries only the annotations no earlier one did. The search and the creation are one step under
the repo's lock (:func:`bnconvention.hub.locking.repo_lock`), so two pushes at once on this machine, even into
different ``--out`` folders, open at most one pull request per annotation: the second waits, then finds the first's.

Signed annotations: an annotation under ``--out`` with a ``<file>.sig`` beside it (``bnconvention sign``, OpenSSF
model signing) gets that signature pushed in the same commit as ``bnconvention/refit-<12 hex>.json.sig``, and the
description says so (:func:`annotation_signature`). A signature that no longer covers the bytes pushed fails that
repo's push, naming the file and how to sign again: a stale signature is never proposed.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from huggingface_hub import CommitOperationAdd, EvalResultEntry, eval_result_entries_to_yaml
from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError
from tqdm.auto import tqdm

from bnconvention.audit.render import annotation_text
from bnconvention.authoring.card_model_index import (
    DEFAULT_TASK_TYPE,
    refit_index_results,
    stamp_model_index_text,
)
from bnconvention.authoring.card_stamp import refit_card_entry, stamp_card_refit_text
from bnconvention.errors import CardError, UsageError
from bnconvention.formats.canonical import canonical_sha256, loads_strict
from bnconvention.formats.card import CARD_NAME, MAX_CARD_BYTES, decode_card, load_yaml_strict, parse_card_metadata
from bnconvention.formats.signatures import RESIGN_HINT, SIGNATURE_SUFFIX, read_signed_files, signature_target
from bnconvention.formats.text import one_line, plural, signed
from bnconvention.hub.client import HubClient
from bnconvention.hub.journal import Journal
from bnconvention.hub.locking import repo_lock
from bnconvention.hub.proposals import (
    MARKER,
    already_on_main,
    annotations_on_main,
    comparable,
    find_pull_request,
    marker,
    markers_in,
    our_pull_requests,
)
from bnconvention.hub.retry import call_with_retry, describe, is_retryable
from bnconvention.hub_audit.audit import repo_out_dir
from bnconvention.hub_audit.entries import FileAudit, PushOutcome, RepoAudit
from bnconvention.standard.models import RefitAnnotation, to_dict

EVAL_DIR = ".eval_results"
BENCHMARK_FILE = "eval.yaml"
MAX_EVAL_YAML_BYTES = 1_000_000


@dataclass
class Benchmark:
    """A Hub benchmark dataset named by an audit: its id and the task the entry reports."""

    dataset_id: str
    task_id: str


@dataclass
class PushPlan:
    """What one pull request would contain."""

    repo_id: str
    revision: str
    annotations: list[str]  # sha256 of each annotation's canonical JSON
    files: dict[str, bytes]
    changes: list[tuple[str, str]]  # (path, "add" | "update")
    title: str
    description: str
    card_before: str | None
    card_after: str

    def describe(self) -> str:
        """The dry-run text: the files the pull request would add or change, and the card's diff."""
        lines = [f"{self.repo_id}: would open a pull request on {self.revision[:12]}: {self.title}"]
        for path, change in self.changes:
            lines.append(f"  {change:<6} {path} ({plural(len(self.files[path]), 'byte')})")
        diff = difflib.unified_diff((self.card_before or "").splitlines(keepends=True),
                                    self.card_after.splitlines(keepends=True), fromfile=f"a/{CARD_NAME}",
                                    tofile=f"b/{CARD_NAME}")
        lines += ["    " + line.rstrip("\r\n") for line in diff]
        return "\n".join(lines) + "\n"


# --- building the pull request --------------------------------------------------------------------------------------


def find_benchmark(client: HubClient, dataset_id: str | None, *,
                   cache: dict[str, Benchmark | None]) -> Benchmark | None:
    """The benchmark an audit's dataset id names on the Hub: a dataset repo with an ``eval.yaml`` (its first task's
    id is the entry's task, ``default`` when it names none). ``None`` for anything else (e.g. ``sklearn/digits``)."""
    if not dataset_id or dataset_id.count("/") != 1:
        return None
    if dataset_id in cache:
        return cache[dataset_id]
    found: Benchmark | None = None
    try:
        data = client.read_small_file(dataset_id, BENCHMARK_FILE, revision="main", repo_type="dataset",
                                      max_bytes=MAX_EVAL_YAML_BYTES)
    except Exception as exc:  # noqa: BLE001 - a missing dataset repo is "not a benchmark"; other errors surface
        if not isinstance(exc, (RepositoryNotFoundError, RevisionNotFoundError)):
            raise
        data = None
    if data is not None:
        task_id = "default"
        try:
            decoded = load_yaml_strict(data.decode("utf-8"), source=f"{dataset_id}/{BENCHMARK_FILE}")
        except (UnicodeDecodeError, ValueError):
            decoded = None
        tasks = decoded.get("tasks") if isinstance(decoded, dict) else None
        if isinstance(tasks, list) and tasks and isinstance(tasks[0], dict) and isinstance(tasks[0].get("id"), str):
            task_id = tasks[0]["id"]
        found = Benchmark(dataset_id=dataset_id, task_id=task_id)
    cache[dataset_id] = found
    return found


def eval_results_entry(annotation: RefitAnnotation, benchmark: Benchmark) -> bytes | None:
    """The ``.eval_results`` YAML for the refit test accuracy (``dt``); ``None`` when the audit has no ``dt`` cell."""
    cell = next((c for c in annotation.cells if c.metric == "dt"), None)
    if cell is None:
        return None
    notes = (f"BatchNorm refit ({annotation.convention.name}, {annotation.replicates} replicates) of "
             f"{annotation.subject.filename}: test accuracy {cell.shipped:.4f} as shipped, {cell.refit:.4f} refit "
             f"({signed(cell.shift_pp)}pp, {cell.decision.outcome}); written by bnconvention")
    entry = EvalResultEntry(dataset_id=benchmark.dataset_id, task_id=benchmark.task_id, value=cell.refit,
                            notes=notes)
    return yaml.safe_dump(eval_result_entries_to_yaml([entry]), sort_keys=False, allow_unicode=True).encode("utf-8")


def _description(audit: RepoAudit, annotations: list[tuple[str, str, RefitAnnotation]], *,
                 model_index_note: str = "", signed_by: dict[str, str] | None = None) -> str:
    lines = [f"Adds BatchNorm refit annotations for `{audit.repo_id}` at `{audit.revision[:12]}`, written by "
             "`bnconvention hub push`. The weights are not changed: each refit runs at bit-identical trainable "
             "tensors, checked by digest.", ""]
    for path, _, annotation in annotations:
        lines += [f"**`{path}`** ({annotation.subject.filename}, {annotation.convention.name}, "
                  f"{annotation.replicates} replicates):", "", annotation.reporting_line, "",
                  "| Cell | Shipped | Refit | Shift | Decision |", "| --- | ---: | ---: | ---: | --- |"]
        lines += [f"| {c.metric} | {c.shipped:.4f} | {c.refit:.4f} | {signed(c.shift_pp)}pp | {c.decision.outcome} |"
                  for c in annotation.cells]
        lines.append("")
        if signed_by and path in signed_by:
            lines += [f"Signed: `{path}{SIGNATURE_SUFFIX}` (OpenSSF model signing, written by `bnconvention sign` as "
                      f"`{signed_by[path]}`) signs this annotation; check it with `bnconvention verify {path} "
                      "--public-key KEY.pub`.", ""]
    lines.append("The card gets a `bnconvention_refit` entry and a \"BatchNorm refit audit\" section per annotation.")
    lines.append(model_index_note or "The card's `model-index` gets each refit cell as an evaluation result beside "
                                      "the published one (metric config `bnconvention-refit`); the annotation file "
                                      "stays the source of truth.")
    lines.append("")
    lines += [marker(sha) for _, sha, _ in annotations]
    return "\n".join(lines) + "\n"


def annotation_signature(out: Path | None, audit: RepoAudit, digest: str, data: bytes) -> Path | None:
    """The signature ``bnconvention sign`` wrote beside the local copy of an annotation under ``out`` (a
    ``<file>.sig`` under the repo's audit folder whose file is the annotation of canonical digest ``digest``);
    ``None`` when it is not signed. :class:`UsageError` when the signature does not cover ``data``, the bytes the
    pull request adds (the annotation changed since it was signed): it names the file and how to sign again."""
    folder = repo_out_dir(out, audit.repo_id) if out is not None else None
    if folder is None or not folder.is_dir():
        return None
    for signature in sorted(folder.rglob(f"*.json{SIGNATURE_SUFFIX}")):
        target = signature_target(signature)
        try:
            if not target.is_file() or canonical_sha256(loads_strict(target.read_bytes(),
                                                                    source=str(target))) != digest:
                continue
        except (OSError, ValueError):  # unreadable or not JSON (JSONInputError is a ValueError): not ours
            continue
        signed = read_signed_files(signature, target)
        listed = list(signed.digests.values())
        method = (signed.serialization.get("method"), signed.serialization.get("hash_type", "sha256"))
        if method != ("files", "sha256"):
            raise UsageError(f"{signature}: signed with {method[0]}/{method[1]} hashing, not one file's sha256; "
                             f"sign it again: {RESIGN_HINT.format(target=target.name)}")
        if listed != [hashlib.sha256(data).hexdigest()]:
            raise UsageError(f"{signature} no longer matches its annotation (changed since signing); sign it "
                             f"again: {RESIGN_HINT.format(target=target.name)}")
        return signature
    return None


def plan_push(client: HubClient, audit: RepoAudit, *, eval_results: bool = True,
              benchmarks: dict[str, Benchmark | None] | None = None, out: Path | None = None) -> PushPlan | None:
    """The pull request for one audited repo, built from the card at the audited revision; ``None`` when nothing
    was audited. ``out`` (the audit's output folder) is where signed annotations' signatures are looked for."""
    audited = [f for f in audit.files
               if f.status == "audited" and f.result is not None and f.annotation_path and f.annotation_sha256]
    if not audited:
        return None
    benchmarks = {} if benchmarks is None else benchmarks
    raw = client.read_small_file(audit.repo_id, CARD_NAME, revision=audit.revision, max_bytes=MAX_CARD_BYTES)
    before = decode_card(raw, source=f"{audit.repo_id}/{CARD_NAME}") if raw is not None else None
    card = before or ""
    files: dict[str, bytes] = {}
    changes: list[tuple[str, str]] = []
    annotations: list[tuple[str, str, RefitAnnotation]] = []
    signed_by: dict[str, str] = {}
    for item in audited:
        result = item.result
        if result is None or item.annotation_path is None:  # excluded above; keeps the type checker informed
            continue
        annotation = result.annotation
        digest = canonical_sha256(to_dict(annotation))
        if digest != item.annotation_sha256:
            raise UsageError(f"{audit.repo_id}: the journaled annotation of {item.filename} does not match its "
                             "digest; rerun the audit")
        files[item.annotation_path] = annotation_text(result).encode("utf-8")
        changes.append((item.annotation_path, "add"))
        signature = annotation_signature(out, audit, digest, files[item.annotation_path])
        if signature is not None and out is not None:
            files[item.annotation_path + SIGNATURE_SUFFIX] = signature.read_bytes()
            changes.append((item.annotation_path + SIGNATURE_SUFFIX, "add"))
            signed_by[item.annotation_path] = signature.relative_to(out).as_posix()
        annotations.append((item.annotation_path, digest, annotation))
        card = stamp_card_refit_text(card, refit_card_entry(annotation, path=item.annotation_path, sha256=digest),
                                     source=f"{audit.repo_id}/{CARD_NAME}")
        if eval_results:
            benchmark = find_benchmark(client, annotation.convention.data.dataset.id, cache=benchmarks)
            entry = eval_results_entry(annotation, benchmark) if benchmark is not None else None
            if entry is not None:
                path = f"{EVAL_DIR}/bnconvention-refit-{digest[:12]}.yaml"
                files[path] = entry
                changes.append((path, "add"))
    card, note = with_model_index(card, audited, repo_id=audit.repo_id)
    files[CARD_NAME] = card.encode("utf-8")
    changes.append((CARD_NAME, "update" if before is not None else "add"))
    short = ", ".join(path.rsplit("/", 1)[-1] for path, _, _ in annotations)
    return PushPlan(repo_id=audit.repo_id, revision=audit.revision, annotations=[sha for _, sha, _ in annotations],
                    files=files, changes=sorted(changes), title=f"Add BatchNorm refit annotation ({short})",
                    description=_description(audit, annotations, model_index_note=note, signed_by=signed_by),
                    card_before=before,
                    card_after=card)


def with_model_index(card: str, audited: list[FileAudit], *, repo_id: str) -> tuple[str, str]:
    """The card with every audited file's refit cells in its model-index (beside the published metric each cell
    maps from, :mod:`bnconvention.authoring.card_model_index`), and a note for the pull request when the card's
    own model-index is malformed and was left alone (the annotation and the card's refit entry still carry the
    results)."""
    source = f"{repo_id}/{CARD_NAME}"
    tag = parse_card_metadata(card, source=source).get("pipeline_tag")
    task_type = tag if isinstance(tag, str) and tag else DEFAULT_TASK_TYPE
    results = {item.annotation_path: refit_index_results(item.result.annotation, path=item.annotation_path,
                                                         sha256=item.annotation_sha256, task_type=task_type,
                                                         origins=item.published_origins)
               for item in audited if item.result is not None and item.annotation_path and item.annotation_sha256}
    try:
        return stamp_model_index_text(card, results, model_name=repo_id.rsplit("/", 1)[-1], source=source), ""
    except CardError as exc:
        return card, (f"The card's `model-index` was left as it is ({one_line(exc)}); the refit cells are in the "
                      "annotation and the `bnconvention_refit` entry.")


def open_pull_request(client: HubClient, plan: PushPlan, *, user: str) -> tuple[int, str | None, bool]:
    """Open the pull request (``create_pr=True`` always: nothing is ever committed to a branch) and return
    ``(number, url, opened)``; a retry first looks for a pull request the failed attempt may have opened."""
    operations = [CommitOperationAdd(path_in_repo=path, path_or_fileobj=data) for path, data in plan.files.items()]

    def create() -> tuple[int, str | None, bool]:
        info = client.api.create_commit(plan.repo_id, operations, commit_message=plan.title,
                                        commit_description=plan.description, create_pr=True,
                                        parent_commit=plan.revision)
        if info.pr_num is None:
            raise client.error(f"{plan.repo_id}: the Hub did not open a pull request for the commit "
                               f"{info.oid}; check the repo", repo_id=plan.repo_id)
        return int(info.pr_num), info.pr_url, True

    def before_retry() -> tuple[int, str | None, bool] | None:
        found = find_pull_request(client, plan.repo_id, plan.annotations, user=user)
        return None if found is None else (found[0], None, False)

    return call_with_retry(create, policy=client.retry, what=f"open a pull request on {plan.repo_id}",
                           before_retry=before_retry)


# --- the organisation ---------------------------------------------------------------------------------------------


@dataclass
class PushRun:
    """What one push did: every repo's outcome, those reused from the journal (``reused_ids``) included."""

    org: str
    outcomes: list[PushOutcome] = field(default_factory=list)
    plans: list[PushPlan] = field(default_factory=list)
    opened: int = 0  # pull requests opened by this run
    reused: int = 0
    reused_ids: set[str] = field(default_factory=set)


def push_repo(client: HubClient, audit: RepoAudit, *, user: str, dry_run: bool = False, eval_results: bool = True,
              benchmarks: dict[str, Benchmark | None] | None = None,
              after_open: Callable[[PushOutcome], None] | None = None,
              out: Path | None = None) -> tuple[PushOutcome, PushPlan | None]:
    """Plan and (unless ``dry_run``) open the pull request of one audited repo. Annotations an earlier pull request
    of ours already carries, or ``main`` already holds, are left out of a new one (a repo audited again under a
    second spec gets a pull request with the second spec's annotations only)."""
    plan = plan_push(client, audit, eval_results=eval_results, benchmarks=benchmarks, out=out)
    if plan is None:
        return PushOutcome(repo_id=audit.repo_id, revision=audit.revision, status="nothing", annotations=[],
                           reason="no audited file"), None
    # one step under the repo's lock: the search for a pull request carrying the annotations and the creation of a
    # new one, so two pushes at once (two processes, any --out) open at most one
    with contextlib.nullcontext() if dry_run else repo_lock(client.endpoint, audit.repo_id):
        return _search_then_open(client, audit, plan, user=user, dry_run=dry_run, eval_results=eval_results,
                                 benchmarks=benchmarks, after_open=after_open, out=out)


def _search_then_open(client: HubClient, audit: RepoAudit, plan: PushPlan, *, user: str, dry_run: bool,
                      eval_results: bool, benchmarks: dict[str, Benchmark | None] | None,
                      after_open: Callable[[PushOutcome], None] | None,
                      out: Path | None = None) -> tuple[PushOutcome, PushPlan | None]:
    base: dict[str, Any] = {"repo_id": audit.repo_id, "revision": audit.revision, "annotations": plan.annotations}
    proposals = our_pull_requests(client, audit.repo_id, user=user)
    found = next(((num, status) for num, status, carried in proposals if set(plan.annotations) <= carried), None)
    if found is not None:
        return PushOutcome(**base, status="exists", pr_num=found[0],
                           reason=f"pull request #{found[0]} ({found[1]}) already carries these annotations"), plan
    audited = [f for f in audit.files if f.status == "audited" and f.result is not None]
    on_main = annotations_on_main(client, audit.repo_id)
    merged = {f.annotation_sha256 for f in audited
              if f.result is not None and comparable(to_dict(f.result.annotation)) in on_main}
    if len(merged) == len(audited):
        return PushOutcome(**base, status="merged", reason="the annotations are already on main"), plan
    done = merged | {sha for _, _, carried in proposals for sha in carried}
    if done & set(plan.annotations):
        rest = audit.model_copy(update={"files": [f for f in audit.files if f.annotation_sha256 not in done]})
        plan = plan_push(client, rest, eval_results=eval_results, benchmarks=benchmarks, out=out) or plan
    if dry_run:
        return PushOutcome(**base, status="dry-run", reason="not pushed (--dry-run)"), plan
    num, url, opened = open_pull_request(client, plan, user=user)
    outcome = PushOutcome(**base, status="opened" if opened else "exists", pr_num=num, pr_url=url)
    if after_open is not None:
        after_open(outcome)
    return outcome, plan


def audits_to_push(journal: Journal, org: str, *, repos: list[str] | None = None) -> list[RepoAudit]:
    """One audit per repo of ``org`` with audited files in the journal, every spec's included: the audited files
    of all its audit rows at the revision of its latest one (rows at an older commit are stale; the repo moved since
    they ran), each annotation once."""
    rows: dict[str, list[tuple[float, RepoAudit]]] = {}
    for entry in journal.entries("audit"):
        audit = RepoAudit.model_validate(entry.payload)
        if (audit.repo_id.split("/")[0].lower() != org.lower() or (repos is not None and audit.repo_id not in repos)
                or not any(f.status == "audited" for f in audit.files)):
            continue
        rows.setdefault(audit.repo_id, []).append((entry.updated, audit))
    merged = []
    for repo_id in sorted(rows):
        latest = max(rows[repo_id], key=lambda row: row[0])[1]
        current = sorted((a for _, a in rows[repo_id] if a.revision == latest.revision), key=lambda a: a.spec_sha256)
        files: dict[str, FileAudit] = {}
        for audit in current:
            for item in audit.files:
                if item.status == "audited" and item.annotation_sha256:
                    files.setdefault(item.annotation_sha256, item)
        specs = [a.spec_sha256 for a in current]
        merged.append(latest.model_copy(update={
            "spec_sha256": specs[0] if len(specs) == 1 else canonical_sha256(specs), "status": "audited",
            "reason": "", "files": sorted(files.values(), key=lambda f: (f.filename, f.annotation_sha256 or ""))}))
    return merged


def push_org(client: HubClient, org: str, *, journal: Journal, dry_run: bool = False, eval_results: bool = True,
             progress: bool = False, repos: list[str] | None = None,
             after_open: Callable[[PushOutcome], None] | None = None, out: Path | None = None) -> PushRun:
    """Open one pull request per audited repo in the journal (see the module docstring); ``repos`` restricts it,
    ``out`` (the audit's output folder) holds the signatures of signed annotations."""
    if not client.token:
        raise UsageError("push needs a token with write access: set it in the environment variable named by "
                         "--token-env (default HF_TOKEN)")
    user = client.whoami_name()
    audits = audits_to_push(journal, org, repos=repos)
    run = PushRun(org=org)
    benchmarks: dict[str, Benchmark | None] = {}
    bar = tqdm(total=len(audits), desc=f"push {org}", unit="repo", disable=not progress)
    try:
        for audit in audits:
            key = canonical_sha256(sorted(f.annotation_sha256 for f in audit.files if f.annotation_sha256))
            entry = journal.get("push", audit.repo_id)
            if (not dry_run and entry is not None and entry.matches(revision=audit.revision, key=key)
                    and entry.status in ("opened", "exists", "merged")):
                run.outcomes.append(PushOutcome.model_validate(entry.payload))
                run.reused += 1
                run.reused_ids.add(audit.repo_id)
                bar.update(1)
                continue
            try:
                outcome, plan = push_repo(client, audit, user=user, dry_run=dry_run, eval_results=eval_results,
                                          benchmarks=benchmarks, after_open=after_open, out=out)
            except Exception as exc:  # noqa: BLE001 - recorded with its error; the crawl goes on
                outcome, plan = PushOutcome(repo_id=audit.repo_id, revision=audit.revision, status="failed",
                                            annotations=[], reason=client.scrub(describe(exc)),
                                            transient=is_retryable(exc)), None
            if plan is not None:
                run.plans.append(plan)
            if not dry_run:
                journal.record("push", audit.repo_id, revision=audit.revision, key=key, status=outcome.status,
                               payload=outcome.model_dump(mode="json"), final=outcome.status != "failed")
            run.opened += outcome.status == "opened"
            run.outcomes.append(outcome)
            bar.update(1)
    finally:
        bar.close()
    return run


__all__ = [
    "MARKER",
    "Benchmark",
    "PushOutcome",
    "PushPlan",
    "PushRun",
    "already_on_main",
    "annotation_signature",
    "annotations_on_main",
    "audits_to_push",
    "eval_results_entry",
    "find_benchmark",
    "find_pull_request",
    "marker",
    "markers_in",
    "open_pull_request",
    "our_pull_requests",
    "plan_push",
    "push_org",
    "push_repo",
    "with_model_index",
]
