"""Push audit results back: one pull request per audited repo, never a commit to ``main``.

The pull request, based on the commit that was audited, adds each refit annotation as
``bnconvention/refit-<12 hex>.json`` (:func:`bnconvention.standard.locations.annotation_filename`, named by the
sha256 of the annotation's canonical JSON), updates the model card (a ``bnconvention_refit`` front-matter entry and a
"BatchNorm refit audit" section, written by :func:`bnconvention.authoring.card_stamp.stamp_card_refit_text`; the
release's own declaration block is left alone) and, only when the audit's dataset is a Hub benchmark dataset (a
dataset repo with an ``eval.yaml``), adds an ``.eval_results/`` entry with the refit test accuracy.

Idempotent: the description carries a marker per annotation (``<!-- bnconvention:refit-annotation sha256=... -->``).
Before opening a pull request, and again before retrying a failed attempt, the repo's pull requests by the same
user (open, merged or closed: a maintainer's refusal is respected) are searched for the markers; annotations already
on ``main`` (also when recorded at an earlier commit of the same weights) count as done. A rerun therefore never
opens a second pull request for the same annotations, even when the journal was lost or the previous run was killed
between the Hub's answer and the journal write.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from bnconvention.errors import BnConventionError, UsageError
from bnconvention.formats.canonical import canonical_sha256, loads_strict
from bnconvention.formats.card import CARD_NAME, MAX_CARD_BYTES
from bnconvention.formats.text import plural, signed
from bnconvention.hub.audit import RepoAudit
from bnconvention.hub.client import HubClient
from bnconvention.hub.journal import Journal
from bnconvention.hub.retry import call_with_retry, describe, is_retryable
from bnconvention.standard.locations import ANNOTATION_DIR
from bnconvention.standard.models import RefitAnnotation, to_dict

MARKER = "bnconvention:refit-annotation"
_MARKER_RE = re.compile(r"<!-- bnconvention:refit-annotation sha256=([0-9a-f]{64}) -->")
EVAL_DIR = ".eval_results"
BENCHMARK_FILE = "eval.yaml"
MAX_EVAL_YAML_BYTES = 1_000_000
MAX_ANNOTATION_BYTES = 4 * 1024 * 1024

PushStatus = Literal["opened", "exists", "merged", "dry-run", "failed", "nothing"]


def marker(sha256: str) -> str:
    return f"<!-- {MARKER} sha256={sha256} -->"


def markers_in(text: str) -> set[str]:
    """The annotation digests a pull request description carries."""
    return set(_MARKER_RE.findall(text or ""))


class PushOutcome(BaseModel):
    """The journal's ``push`` entry of one repo."""

    model_config = ConfigDict(extra="forbid")

    repo_id: str
    revision: str
    status: PushStatus
    annotations: list[str]
    pr_num: int | None = None
    pr_url: str | None = None
    reason: str = ""
    transient: bool = False


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
    from bnconvention.formats.card import load_yaml_strict

    if not dataset_id or dataset_id.count("/") != 1:
        return None
    if dataset_id in cache:
        return cache[dataset_id]
    found: Benchmark | None = None
    try:
        data = client.read_small_file(dataset_id, BENCHMARK_FILE, revision="main", repo_type="dataset",
                                      max_bytes=MAX_EVAL_YAML_BYTES)
    except Exception as exc:  # noqa: BLE001 - a missing dataset repo is "not a benchmark"; other errors surface
        from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError

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
    import yaml
    from huggingface_hub import EvalResultEntry, eval_result_entries_to_yaml

    cell = next((c for c in annotation.cells if c.metric == "dt"), None)
    if cell is None:
        return None
    notes = (f"BatchNorm refit ({annotation.convention.name}, {annotation.replicates} replicates) of "
             f"{annotation.subject.filename}: test accuracy {cell.shipped:.4f} as shipped, {cell.refit:.4f} refit "
             f"({signed(cell.shift_pp)}pp, {cell.decision.outcome}); written by bnconvention")
    entry = EvalResultEntry(dataset_id=benchmark.dataset_id, task_id=benchmark.task_id, value=cell.refit,
                            notes=notes)
    return yaml.safe_dump(eval_result_entries_to_yaml([entry]), sort_keys=False, allow_unicode=True).encode("utf-8")


def _description(audit: RepoAudit, annotations: list[tuple[str, str, RefitAnnotation]]) -> str:
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
    lines.append("The card gets a `bnconvention_refit` entry and a \"BatchNorm refit audit\" section per annotation.")
    lines.append("")
    lines += [marker(sha) for _, sha, _ in annotations]
    return "\n".join(lines) + "\n"


def plan_push(client: HubClient, audit: RepoAudit, *, eval_results: bool = True,
              benchmarks: dict[str, Benchmark | None] | None = None) -> PushPlan | None:
    """The pull request for one audited repo, built from the card at the audited revision; ``None`` when nothing
    was audited."""
    from bnconvention.audit.outputs import annotation_text
    from bnconvention.authoring.card_stamp import refit_card_entry, stamp_card_refit_text
    from bnconvention.formats.card import decode_card

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
    files[CARD_NAME] = card.encode("utf-8")
    changes.append((CARD_NAME, "update" if before is not None else "add"))
    short = ", ".join(path.rsplit("/", 1)[-1] for path, _, _ in annotations)
    return PushPlan(repo_id=audit.repo_id, revision=audit.revision, annotations=[sha for _, sha, _ in annotations],
                    files=files, changes=sorted(changes), title=f"Add BatchNorm refit annotation ({short})",
                    description=_description(audit, annotations), card_before=before, card_after=card)


# --- finding what was already pushed -----------------------------------------------------------------------------


def find_pull_request(client: HubClient, repo_id: str, annotations: list[str], *, user: str) -> tuple[int, str] | None:
    """Our pull request (any status) whose description carries a marker for every annotation: ``(num, status)``."""
    wanted = set(annotations)

    def search() -> tuple[int, str] | None:
        # every pull request of ours is checked (a maintainer may have renamed it); there are few per repo
        for discussion in client.api.get_repo_discussions(repo_id, author=user, discussion_type="pull_request",
                                                          discussion_status="all"):
            details = client.api.get_discussion_details(repo_id, discussion.num)
            first = next((e for e in details.events if e.type == "comment"), None)
            if first is not None and wanted <= markers_in(getattr(first, "content", "")):
                return discussion.num, discussion.status
        return None

    return call_with_retry(search, policy=client.retry, what=f"search pull requests of {repo_id}")


def _comparable(annotation: Any) -> str:
    """An annotation's digest without the audited commit: the same weights and results at a later commit (after
    our own pull request was merged, say) count as the same annotation."""
    data = json.loads(json.dumps(annotation))
    if isinstance(data, dict) and isinstance(data.get("subject"), dict):
        data["subject"].pop("revision", None)
    return canonical_sha256(data)


def already_on_main(client: HubClient, repo_id: str, annotations: list[RefitAnnotation]) -> bool:
    """Whether ``main`` already holds every annotation, possibly recorded at an earlier commit of the same weights
    (a merged pull request of ours, or the authors' own commit).

    One rule for every other file under ``bnconvention/``: one that is not an annotation we could have written
    (over :data:`MAX_ANNOTATION_BYTES`, which the tree listing says without downloading it, or not strict JSON) is
    someone else's, not ours to judge here, and is passed over."""
    from huggingface_hub.hf_api import RepoFile

    def present() -> set[str]:
        entries = client.api.list_repo_tree(repo_id, revision="main", recursive=True)
        names = [e.path for e in entries if isinstance(e, RepoFile) and _candidate(e.path, e.size)]
        found = set()
        for name in names:
            try:
                data = client.read_small_file(repo_id, name, revision="main", max_bytes=MAX_ANNOTATION_BYTES)
                if data is not None:
                    found.add(_comparable(loads_strict(data, source=f"{repo_id}/{name}")))
            except BnConventionError as exc:
                if is_retryable(exc):
                    raise
                continue  # grew past the bound since the listing, or malformed: not ours either way
        return found

    found = call_with_retry(present, policy=client.retry, what=f"look for annotations on {repo_id} main")
    return all(_comparable(to_dict(a)) in found for a in annotations)


def _candidate(path: str, size: int | None) -> bool:
    """A file that may be one of our annotations: ``bnconvention/<name>.json`` within the size bound."""
    return (path.startswith(f"{ANNOTATION_DIR}/") and path.endswith(".json") and path.count("/") == 1
            and (size is None or size <= MAX_ANNOTATION_BYTES))


def open_pull_request(client: HubClient, plan: PushPlan, *, user: str) -> tuple[int, str | None, bool]:
    """Open the pull request (``create_pr=True`` always: nothing is ever committed to a branch) and return
    ``(number, url, opened)``; a retry first looks for a pull request the failed attempt may have opened."""
    from huggingface_hub import CommitOperationAdd

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
              after_open: Callable[[PushOutcome], None] | None = None) -> tuple[PushOutcome, PushPlan | None]:
    """Plan and (unless ``dry_run``) open the pull request of one audited repo."""
    plan = plan_push(client, audit, eval_results=eval_results, benchmarks=benchmarks)
    if plan is None:
        return PushOutcome(repo_id=audit.repo_id, revision=audit.revision, status="nothing", annotations=[],
                           reason="no audited file"), None
    base: dict[str, Any] = {"repo_id": audit.repo_id, "revision": audit.revision, "annotations": plan.annotations}
    found = find_pull_request(client, audit.repo_id, plan.annotations, user=user)
    if found is not None:
        return PushOutcome(**base, status="exists", pr_num=found[0],
                           reason=f"pull request #{found[0]} ({found[1]}) already carries these annotations"), plan
    annotations = [f.result.annotation for f in audit.files if f.status == "audited" and f.result is not None]
    if already_on_main(client, audit.repo_id, annotations):
        return PushOutcome(**base, status="merged", reason="the annotations are already on main"), plan
    if dry_run:
        return PushOutcome(**base, status="dry-run", reason="not pushed (--dry-run)"), plan
    num, url, opened = open_pull_request(client, plan, user=user)
    outcome = PushOutcome(**base, status="opened" if opened else "exists", pr_num=num, pr_url=url)
    if after_open is not None:
        after_open(outcome)
    return outcome, plan


def push_org(client: HubClient, org: str, *, journal: Journal, dry_run: bool = False, eval_results: bool = True,
             progress: bool = False, repos: list[str] | None = None,
             after_open: Callable[[PushOutcome], None] | None = None) -> PushRun:
    """Open one pull request per audited repo in the journal (see the module docstring); ``repos`` restricts it."""
    from tqdm.auto import tqdm

    if not client.token:
        raise UsageError("push needs a token with write access: set it in the environment variable named by "
                         "--token-env (default HF_TOKEN)")
    user = client.whoami_name()
    audits = [RepoAudit.model_validate(e.payload) for e in journal.entries("audit")]
    audits = [a for a in audits if a.repo_id.split("/")[0].lower() == org.lower()
              and (repos is None or a.repo_id in repos) and any(f.status == "audited" for f in a.files)]
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
                                          benchmarks=benchmarks, after_open=after_open)
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
    "eval_results_entry",
    "find_benchmark",
    "find_pull_request",
    "marker",
    "markers_in",
    "open_pull_request",
    "plan_push",
    "push_org",
    "push_repo",
]
