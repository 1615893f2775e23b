"""Publish a model release: stamp what needs stamping, validate the folder, upload it through ``HfApi``.

:func:`publish` works on a release folder (its top-level ``*.safetensors`` files and ``README.md``) in four steps,
each a function of its own and finished before the next starts, so a failure leaves no half-done state behind:

1. **Decide** (:func:`plan_records`, :func:`plan_card`) the record of every weights file, and check it against the
   file's tensors, before anything is written. A record given by the caller goes to the file whose tensors it
   describes (digests decide, by the validator's consistency rule). Otherwise a file keeps the record stamped in it;
   a release with one weights file may also take the card's record. When the card and the header carry different
   records, the one that matches the tensors wins; when both do, the caller must choose (``records=``).
2. **Stamp** (:func:`stamp_release`) the weights whose header lacks their record
   (:func:`bnconvention.authoring.stamp.stamp_file`: the tensor bytes are never rewritten, the file is always either
   the old or the new one) and, for a one-file release, the card
   (:func:`bnconvention.authoring.card_stamp.stamp_card_file`; a missing ``README.md`` is created). Stamping what is
   already stamped changes nothing, so a publish that was interrupted can simply be run again.
3. **Validate** (:func:`check_release`) the folder with the validator
   (:func:`bnconvention.validation.validate_paths`, with ``require_declaration``): any error stops the publish before
   the upload (warnings, e.g. recorder contradictions, are reported and allowed).
4. **Upload** (:func:`upload_release`) the folder through one ``huggingface_hub.HfApi(endpoint=..., token=...)``:
   ``create_repo`` (unless a pull request is asked for, which needs the repository to exist) and ``upload_folder``,
   optionally as a pull request. The client skips files the Hub already holds, so re-running after an interruption
   re-sends only what is missing. Our own temporary files (:data:`bnconvention.formats.atomic.TEMP_GLOBS`, e.g. the
   copy a killed stamp left behind) are never uploaded.

The token is handed to ``HfApi`` and nowhere else: it is never printed, logged or put in an error message (an
error from the client is scrubbed of it before it is re-raised as :class:`~bnconvention.errors.HubError`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import huggingface_hub
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id

from bnconvention.authoring.card_stamp import stamp_card_file, stamp_card_text
from bnconvention.authoring.stamp import check_record_matches_file, checked_record, read_stamped_record, stamp_file
from bnconvention.errors import (
    BnConventionError,
    DigestMismatchError,
    HubError,
    RecordError,
    UsageError,
)
from bnconvention.formats.atomic import TEMP_GLOBS
from bnconvention.formats.canonical import loads_strict
from bnconvention.formats.card import CARD_NAME, read_card_record, read_card_text
from bnconvention.formats.digests import file_digests
from bnconvention.formats.links import folder_files, skipped_line, upload_ignore_patterns
from bnconvention.formats.safetensors_header import read_header
from bnconvention.standard.models import Declaration, RefitAnnotation, to_dict
from bnconvention.validation import Issue, best_issue, validate_paths
from bnconvention.validation.consistency import StoredRecord, bind_record, check_consistency, records_equal

RecordInput = Declaration | RefitAnnotation | Mapping[str, Any] | str | os.PathLike[str]
Loaded = tuple[Declaration | RefitAnnotation, dict[str, Any]]  # a checked record and its JSON dict


@dataclass
class PublishResult:
    """What :func:`publish` did. ``stamped`` lists the files whose header or card changed."""

    directory: Path
    repo_id: str
    records: dict[str, str] = field(default_factory=dict)  # weights file name -> convention name
    stamped: list[str] = field(default_factory=list)
    card: str | None = None  # "created", "updated", "unchanged" or None (not touched)
    warnings: list[Issue] = field(default_factory=list)
    uploaded: bool = False
    commit_url: str | None = None
    pr_url: str | None = None
    # links (and other files that are not regular) passed over, "name -> target": never followed, never uploaded
    skipped: list[str] = field(default_factory=list)


@dataclass
class RecordChoice:
    """The record decided for one weights file (step 1); ``stamped``: its header already holds exactly this record."""

    weights: Path
    record: Declaration | RefitAnnotation
    data: dict[str, Any]
    stamped: bool


# --- step 0: the target ---------------------------------------------------------------------------------------------


def release_weights(directory: str | os.PathLike[str], *, repo_id: str) -> tuple[Path, list[Path]]:
    """The release folder and its top-level weights files, after checking the repository id; :class:`UsageError`
    for a bad id, a path that is not a folder, or a folder without weights."""
    try:
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        raise UsageError(f"--repo {repo_id!r} is not a Hub repository id: {exc}") from exc
    if "/" not in repo_id:
        raise UsageError(f"--repo {repo_id!r} needs its owner: ORG/NAME (or USER/NAME)")
    folder = Path(directory)
    if not folder.is_dir():
        raise UsageError(f"{folder} is not a folder; publish takes the release folder holding the weights")
    weights = sorted(p for p in folder.iterdir() if p.suffix == ".safetensors" and p.is_file() and not p.is_symlink())
    if not weights:
        links = sorted(p.name for p in folder.iterdir() if p.suffix == ".safetensors" and p.is_symlink())
        passed = f" ({', '.join(links)}: links are not followed; copy the file in)" if links else ""
        raise UsageError(f"{folder} holds no .safetensors file at its top level{passed}; nothing to publish")
    return folder, weights


# --- step 1: decide ---------------------------------------------------------------------------------------------------


def _load_record(item: RecordInput, *, index: int) -> Loaded:
    if isinstance(item, (str, os.PathLike)):
        path = Path(item)
        return checked_record(loads_strict(path.read_bytes(), source=str(path)), source=str(path))
    return checked_record(item, source=f"record #{index + 1}")


def record_matches(weights: Path, record: Declaration | RefitAnnotation) -> bool:
    """Whether ``record`` describes the tensors of ``weights``: for a declaration, the consistency rule of
    ``bnconvention validate`` (:func:`~bnconvention.validation.consistency.check_consistency`: layers and every
    digest); for a refit annotation, its subject's digests."""
    if isinstance(record, RefitAnnotation):
        try:
            check_record_matches_file(weights, record)
        except DigestMismatchError:
            return False
        return True
    header = read_header(weights)
    result = check_consistency(header=StoredRecord(to_dict(record), record, str(weights)), card=None,
                               shapes={name: info.shape for name, info in header.tensors.items()},
                               display=str(weights),
                               digests=lambda layers: file_digests(weights, bn_layers=layers, header=header))
    return not result.issues


def _card_record(card: Path) -> Loaded | None:
    if not card.is_file():
        return None
    block = read_card_record(read_card_text(card), source=str(card))
    if block is None:
        return None
    return checked_record(block, source=f"{card} bnconvention block")


def _stamped_data(weights: Path) -> Loaded | None:
    record = read_stamped_record(weights)
    return None if record is None else (record, to_dict(record))


def assign_records(directory: Path, weights: Sequence[Path], loaded: Sequence[Loaded]) -> dict[Path, int]:
    """Each given record's weights file (:func:`~bnconvention.validation.consistency.bind_record`: the first file not
    yet taken whose tensors it describes); :class:`DigestMismatchError` for a record that describes none."""
    assigned: dict[Path, int] = {}
    for index, (record, data) in enumerate(loaded):
        home = bind_record(data, [p for p in weights if p not in assigned], only=False,
                           tensors_match=functools.partial(record_matches, record=record))
        if home is None:
            raise DigestMismatchError(
                f"record #{index + 1} ({record.convention.name}) describes none of the weights files in {directory} "
                f"({', '.join(p.name for p in weights)}); rebuild it from the released file (bnconvention declare)")
        assigned[home] = index
    return assigned


def choose_record(path: Path, *, stamped: Loaded | None, card: Loaded | None, single: bool) -> Loaded:
    """The record of a weights file no given record went to: the stamped one or the card's, whichever describes the
    file's tensors (the same record in both places counts once); :class:`RecordError` when there is none,
    :class:`DigestMismatchError` when neither fits, :class:`UsageError` when two different ones both fit."""
    candidates = [c for c in (stamped, card) if c is not None]
    if len(candidates) == 2 and records_equal(candidates[0][1], candidates[1][1]):
        candidates = candidates[:1]
    if not candidates:
        where = f"neither it nor {CARD_NAME} carries one" if single else (
            "it carries none, and with several weights files each needs its own")
        raise RecordError(f"{path}: no declaration: {where}; build one (bnconvention declare) and pass it "
                          "with --record", source=str(path))
    fitting = [c for c in candidates if record_matches(path, c[0])]
    if not fitting:
        where = "its header" if stamped is not None else CARD_NAME
        raise DigestMismatchError(
            f"{path}: the record in {where} describes other tensors; rebuild it from this file "
            "(bnconvention declare) and pass it with --record")
    if len(fitting) > 1:
        raise UsageError(
            f"{path}: its header and {CARD_NAME} carry different records that both match its tensors "
            f"({fitting[0][0].convention.name} and {fitting[1][0].convention.name}); pass the one to publish "
            "with --record")
    return fitting[0]


def plan_records(directory: Path, weights: Sequence[Path], given: Sequence[RecordInput]) -> list[RecordChoice]:
    """Step 1: the record of every weights file, checked against its tensors; nothing is written."""
    loaded = [_load_record(item, index=i) for i, item in enumerate(given)]
    assigned = assign_records(directory, weights, loaded)
    card = _card_record(directory / CARD_NAME) if len(weights) == 1 else None  # a card describes a one-file release
    choices: list[RecordChoice] = []
    for path in weights:
        if path in assigned:
            record, data = loaded[assigned[path]]
            try:
                stamped = _stamped_data(path)
            except BnConventionError:  # an unreadable stamped record is about to be replaced
                stamped = None
        else:
            stamped = _stamped_data(path)
            record, data = choose_record(path, stamped=stamped, card=card, single=len(weights) == 1)
        choices.append(RecordChoice(weights=path, record=record, data=data,
                                    stamped=stamped is not None and records_equal(stamped[1], data)))
    return choices


def plan_card(folder: Path, choices: Sequence[RecordChoice]) -> dict[str, Any] | None:
    """The record the card gets (a one-file release's), or ``None``; a malformed card fails here, before any weights
    file is touched."""
    if len(choices) != 1:
        return None
    card_path = folder / CARD_NAME
    if card_path.is_file():
        stamp_card_text(read_card_text(card_path), choices[0].data, source=str(card_path))
    return choices[0].data


# --- steps 2 to 4 -----------------------------------------------------------------------------------------------------


def stamp_release(folder: Path, choices: Sequence[RecordChoice], *, card_data: Mapping[str, Any] | None,
                  repo_id: str) -> PublishResult:
    """Step 2: stamp the weights whose header lacks their record, then the card; what already says it is left."""
    result = PublishResult(directory=folder, repo_id=repo_id,
                           records={c.weights.name: c.record.convention.name for c in choices})
    for choice in choices:
        if not choice.stamped:
            stamp_file(choice.weights, choice.data)
            result.stamped.append(choice.weights.name)
    if card_data is not None:
        card = stamp_card_file(folder / CARD_NAME, card_data)
        result.card = "created" if card.created else ("updated" if card.changed else "unchanged")
        if card.changed:
            result.stamped.append(CARD_NAME)
    return result


def check_release(folder: Path) -> list[Issue]:
    """Step 3: the validator on the stamped folder (``require_declaration``); its warnings, or :class:`RecordError`
    carrying its errors (nothing is uploaded then)."""
    report = validate_paths([folder], require_declaration=True)
    if report.errors or report.exit_code:
        best = best_issue(report.errors or report.issues)
        more = f" (and {len(report.errors) - 1} more)" if len(report.errors) > 1 else ""
        detail = f"{best.file}: {best.code}: {best.message}" if best is not None else "see bnconvention validate"
        raise RecordError(f"{folder} does not validate, nothing uploaded: {detail}{more}; run bnconvention "
                          f"validate {folder} for every issue", source=str(folder),
                          issues=report.errors)
    return report.warnings


def _scrub(text: str, secret: str | None) -> str:
    return text.replace(secret, "***") if secret else text


def upload_release(result: PublishResult, *, api: Any, create_pr: bool, commit_message: str | None,
                   token: str | None) -> None:
    """Step 4: ``create_repo`` (unless a pull request is asked for) and ``upload_folder``; fills in ``result``.
    A client failure becomes one :class:`HubError` without the token."""
    folder, repo_id = result.directory, result.repo_id
    passed_over = folder_files(folder, ignore=TEMP_GLOBS).skipped  # links are not followed: never uploaded
    result.skipped = [skipped_line(folder, name) for name in passed_over]
    try:
        if not create_pr:
            api.create_repo(repo_id=repo_id, repo_type="model", exist_ok=True)
        commit = api.upload_folder(repo_id=repo_id, repo_type="model", folder_path=str(folder),
                                   commit_message=commit_message or _commit_message(result), create_pr=create_pr,
                                   # a killed write's leftovers stay home
                                   ignore_patterns=list(TEMP_GLOBS) + upload_ignore_patterns(passed_over))
    except BnConventionError:
        raise
    except Exception as exc:  # noqa: BLE001 - any client failure becomes one HubError without the token
        raise HubError(_scrub(f"uploading {folder} to {repo_id} failed: {type(exc).__name__}: {exc}", token),
                       repo_id=repo_id) from None
    result.uploaded = True
    result.commit_url = getattr(commit, "commit_url", None)
    result.pr_url = getattr(commit, "pr_url", None)


def publish(directory: str | os.PathLike[str], *, repo_id: str, records: Sequence[RecordInput] = (),
            create_pr: bool = False, endpoint: str | None = None, token: str | None = None,
            commit_message: str | None = None, dry_run: bool = False, api: Any = None) -> PublishResult:
    """Stamp, validate and upload the release in ``directory`` to the model repository ``repo_id``.

    ``records``: declarations (models, JSON dicts or paths to JSON files) to stamp, each into the weights file whose
    tensors it describes. ``dry_run`` stops after validation. ``api`` replaces the ``HfApi`` (tests inject a fake;
    ``endpoint``/``token`` are then unused). Raises :class:`UsageError` (bad repo id, not a folder, no weights,
    ambiguous records), :class:`RecordError` / :class:`DigestMismatchError` (nothing to declare, records that do
    not fit, validation errors: nothing uploaded), :class:`HubError` (the upload failed).
    """
    folder, weights = release_weights(directory, repo_id=repo_id)
    choices = plan_records(folder, weights, records)  # 1. decide (reads only)
    card_data = plan_card(folder, choices)
    result = stamp_release(folder, choices, card_data=card_data, repo_id=repo_id)  # 2. stamp
    result.warnings = check_release(folder)  # 3. validate
    if dry_run:
        return result
    if api is None:  # 4. upload
        api = huggingface_hub.HfApi(endpoint=endpoint, token=token)
    upload_release(result, api=api, create_pr=create_pr, commit_message=commit_message, token=token)
    return result


def _commit_message(result: PublishResult) -> str:
    names = sorted(set(result.records.values()))
    return f"Publish with bnconvention declaration {', '.join(names)}"


__all__ = [
    "PublishResult",
    "RecordChoice",
    "assign_records",
    "check_release",
    "choose_record",
    "plan_card",
    "plan_records",
    "publish",
    "record_matches",
    "release_weights",
    "stamp_release",
    "upload_release",
]
