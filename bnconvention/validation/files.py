"""Route paths to checks and collect one sorted report: ``validate_paths`` is the validator's main entry point.

A path may be a record (``.json``), a weights file (``.safetensors``; only its header is parsed, its tensors are
streamed for the digests), a model card (``.md``) or a directory. A directory is walked (hidden folders skipped);
every folder holding ``.safetensors`` files, a shard index or a ``README.md`` is a *release*, validated as a whole
together with its ``bnconvention/*.json`` refit annotations. A shard index (``*.safetensors.index.json``) is checked
by the rule the Hub census applies, whether met in a walk or named. A weights file named on its own is
cross-checked with the ``README.md`` next to it, and a ``README.md`` with the weights next to it, because a file's
declaration may live in its card. Other ``.json`` files met in a walk are validated as records only when their
content claims to be one (:func:`looks_like_record`, whatever the file's name), so ``config.json`` and result files
are left alone; ``skip_non_records=True`` (``validate --skip-non-records``, what the pre-commit hook passes) applies
the same rule to the ``.json`` files named, which are otherwise always validated.

>>> report = validate_paths(["does-not-exist.json"])
>>> report.exit_code, report.issues[0].code
(2, 'input.unreadable')
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bnconvention.errors import JSONInputError
from bnconvention.formats.canonical import loads_strict
from bnconvention.formats.card import CARD_NAME
from bnconvention.formats.checkpoint_files import FOREIGN_WEIGHTS_SUFFIXES
from bnconvention.formats.safetensors_header import PREFIX_BYTES, foreign_format
from bnconvention.formats.safetensors_index import INDEX_SUFFIX
from bnconvention.validation.issues import Issue, new_issue, sort_issues
from bnconvention.validation.records import check_record
from bnconvention.validation.release import FileSummary, Release, describe_record, validate_release
from bnconvention.validation.sources import MAX_RECORD_BYTES, load_json_record

SKIPPED_DIRS = {"__pycache__", "node_modules", "site-packages"}


@dataclass
class ValidationReport:
    """Every issue found (sorted, stable), one summary per file checked, the named paths that do not exist (each
    also an ``input.unreadable`` issue; the text summary names them instead of counting them as checked), and the
    named ``.json`` files passed over as not records (only with ``skip_non_records``)."""

    issues: list[Issue]
    files: list[FileSummary] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # named .json files that are not records (skip_non_records)

    @property
    def errors(self) -> list[Issue]:
        return [i for i in self.issues if i.severity == "error"]

    @property
    def warnings(self) -> list[Issue]:
        return [i for i in self.issues if i.severity == "warning"]

    @property
    def exit_code(self) -> int:
        """0 no errors (warnings allowed), 1 errors found, 2 some input could not be read at all."""
        if any(i.unreadable for i in self.issues):
            return 2
        return 1 if self.errors else 0


def _display(path: str | os.PathLike[str]) -> str:
    text = os.path.normpath(os.fspath(path))
    return Path(text).as_posix()


def _release_for(releases: dict[tuple[Path, str], Release], directory: Path, *, card: str = "") -> Release:
    # A folder is one release; a card other than README.md (e.g. a draft) is checked on its own.
    key = (directory.resolve(), card)
    if key not in releases:
        releases[key] = Release(directory=directory)
    return releases[key]


def _add_unique(items: list[tuple[str, Path]], display: str, path: Path) -> None:
    if all(p.resolve() != path.resolve() for _, p in items):
        items.append((display, path))


def _add_weights(release: Release, display: str, path: Path) -> None:
    _add_unique(release.weights, display, path)


def _add_card(release: Release, display: str, path: Path, *, explicit: bool) -> None:
    if release.card is None:
        release.card = (display, path)
    release.card_explicit = release.card_explicit or explicit


RECORD_KINDS = ("declaration", "refit_annotation")  # the ``kind`` of a record: the schema's discriminator mapping
OTHER_DOCUMENT_KINDS = ("audit_spec",)  # documents that carry ``spec_version`` too and are not records
# the claim, looked for in the text before anything is parsed: the version key, or a record's kind (all a file
# that is not valid JSON can show of itself)
_CLAIM = re.compile(rb'"spec_version"\s*:|"kind"\s*:\s*"(?:' + "|".join(RECORD_KINDS).encode() + rb')"')


def looks_like_record(path: Path) -> bool:
    """Whether a ``.json`` file is a record by its content, whatever its name: the one rule a folder walk and
    ``--skip-non-records`` (the pre-commit hook) apply.

    A record is a JSON object carrying the standard's version key ``spec_version`` (unless its ``kind`` names
    another document of the standard, an audit spec) or a record ``kind`` (``declaration``, ``refit_annotation``):
    ``record.json`` of the quickstarts, the callbacks' ``bnconvention-declaration.json``, ``*.bnconvention.json``
    and ``bnconvention/refit-*.json`` alike. A file that is not valid JSON claims to be a record when its text
    carries the version key or a record kind, so a broken record fails (``json.*``) rather than being passed over.
    Every other JSON (``config.json``, ``tokenizer.json``, an array, results, a saved observation) is not a record.
    """
    try:
        if path.stat().st_size > MAX_RECORD_BYTES:
            return False
        raw = path.read_bytes()
    except OSError:
        return False
    if _CLAIM.search(raw) is None:  # neither key anywhere in the text: not a record, and nothing to parse
        return False
    try:
        data = loads_strict(raw, source=str(path))
    except JSONInputError:
        return True
    if not isinstance(data, dict):
        return False
    kind = data.get("kind")
    if kind in RECORD_KINDS:
        return True
    return "spec_version" in data and kind not in OTHER_DOCUMENT_KINDS


def _walk(root: str, releases: dict[tuple[Path, str], Release], records: list[tuple[str, Path]]) -> bool:
    """Add every release and record under ``root``; ``False`` when there is nothing to validate."""
    found = False
    for current, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIPPED_DIRS)
        weights = sorted(f for f in files if f.endswith(".safetensors"))
        indexes = sorted(f for f in files if f.endswith(INDEX_SUFFIX))
        has_card = CARD_NAME in files
        if Path(current).name != "bnconvention" or not any(
                f.endswith(".safetensors") or f == CARD_NAME for f in os.listdir(Path(current).parent)):
            for name in sorted(f for f in files if f.endswith(".json")):
                if looks_like_record(Path(current) / name):
                    found = True
                    _add_unique(records, _display(os.path.join(current, name)), Path(current) / name)
        if not weights and not has_card and not indexes:
            continue
        found = True
        release = _release_for(releases, Path(current))
        for name in weights:
            _add_weights(release, _display(os.path.join(current, name)), Path(current) / name)
        for name in indexes:
            _add_unique(release.indexes, _display(os.path.join(current, name)), Path(current) / name)
        if has_card:
            _add_card(release, _display(os.path.join(current, CARD_NAME)), Path(current) / CARD_NAME, explicit=False)
        annotation_dir = Path(current) / "bnconvention"
        if annotation_dir.is_dir():
            for name in sorted(os.listdir(annotation_dir)):
                if name.endswith(".json") and (annotation_dir / name).is_file():
                    _add_unique(release.annotations, _display(os.path.join(current, "bnconvention", name)),
                                annotation_dir / name)
    return found


def _plan(paths: Iterable[str | os.PathLike[str]], *, skip_non_records: bool = False,
          ) -> tuple[list[tuple[str, Path]], list[Release], list[Issue], list[str], list[str]]:
    """What to check: ``(records, releases, issues found already, paths that do not exist, .json files passed over
    as not records)``."""
    missing: list[str] = []
    skipped: list[str] = []
    records: list[tuple[str, Path]] = []
    releases: dict[tuple[Path, str], Release] = {}
    issues: list[Issue] = []
    for raw in paths:
        display = _display(raw)
        path = Path(raw)
        if not path.exists():
            missing.append(display)
            issues.append(new_issue("input.unreadable", file=display, message=(
                f"{display} does not exist; check the path")))
        elif path.is_dir():
            if not _walk(os.fspath(raw), releases, records):
                pickles = [_unsupported(_display(p), p) for p in _pickled_weights(path)]
                issues.extend(pickles or [new_issue("input.nothing_to_validate", file=display, message=(
                    f"{display} holds no .safetensors file, no {CARD_NAME} and no record (hidden folders are "
                    "skipped); point validate at a model release or at the files themselves"))])
        elif path.suffix == ".safetensors":
            release = _release_for(releases, path.parent)
            _add_weights(release, display, path)
            card = path.parent / CARD_NAME
            if card.is_file():
                _add_card(release, _display(os.path.join(os.path.dirname(os.fspath(raw)), CARD_NAME)), card,
                          explicit=False)
        elif path.name.endswith(INDEX_SUFFIX):  # checked as the census checks it, not as a record
            _add_unique(_release_for(releases, path.parent).indexes, display, path)
        elif path.suffix.lower() == ".md":
            release = _release_for(releases, path.parent, card="" if path.name == CARD_NAME else path.name)
            _add_card(release, display, path, explicit=True)
            if path.name == CARD_NAME:
                for sibling in sorted(path.parent.glob("*.safetensors")):
                    _add_weights(release, _display(os.path.join(os.path.dirname(os.fspath(raw)), sibling.name)),
                                 sibling)
        elif path.suffix == ".json":
            if skip_non_records and not looks_like_record(path):
                skipped.append(display)
            else:
                _add_unique(records, display, path)
        else:
            issues.append(_unsupported(display, path))
    return records, list(releases.values()), issues, missing, skipped


def _pickled_weights(folder: Path) -> list[Path]:
    """Weights files of a folder holding no safetensors (``pytorch_model.bin``, ``.pth``): named, never opened
    beyond their magic bytes."""
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name.endswith(FOREIGN_WEIGHTS_SUFFIXES)
                  and not any(part.startswith(".") for part in p.relative_to(folder).parts))


def _unsupported(display: str, path: Path) -> Issue:
    """The issue for a path of no kind we validate; a pickle or zip checkpoint (``.bin``, ``.pth``) is named."""
    try:
        with open(path, "rb") as handle:
            what = foreign_format(handle.read(PREFIX_BYTES))
    except OSError:
        what = None
    if what is not None:
        return new_issue("safetensors.not_safetensors", file=display, message=f"{display}: is {what}")
    return new_issue("input.unsupported", file=display, message=(
        f"{display} is not a record (.json), a weights file (.safetensors), a model card (.md) or a directory; name "
        "one of those"))


def validate_file_record(display: str, path: Path) -> tuple[list[Issue], FileSummary]:
    """Validate one ``.json`` record file on its own."""
    data, _, issues = load_json_record(path, source=display)
    if data is None:
        return issues, FileSummary(display, "record", "unreadable")
    record, found = check_record(data, source=display)
    note = describe_record(record) if record is not None else "invalid record"
    return issues + found, FileSummary(display, "record", note)


def _guarded(display: str, run: Callable[[], tuple[list[Issue], FileSummary | list[FileSummary]]],
            issues: list[Issue], summaries: list[FileSummary]) -> None:
    try:
        found, summary = run()
    except Exception as exc:  # noqa: BLE001 - a validator bug must not hide the other files' results
        issues.append(new_issue("internal.error", file=display, message=(
            f"the validator failed on {display} ({type(exc).__name__}: {exc}); this is a bug in bnconvention, "
            "please report it with the file")))
        return
    issues.extend(found)
    summaries.extend(summary if isinstance(summary, list) else [summary])


def validate_paths(paths: Sequence[str | os.PathLike[str]], *, require_declaration: bool = False,
                   skip_non_records: bool = False) -> ValidationReport:
    """Validate records, weights files, model cards and release folders; every problem, sorted and stable.

    ``skip_non_records``: a ``.json`` file named is validated only when its content claims to be a record
    (:func:`looks_like_record`, the rule of a folder walk); the others are listed in ``report.skipped``. For a
    caller handed every ``.json`` file of a repository (the pre-commit hook), not for paths a person names.
    """
    records, releases, issues, missing, skipped = _plan(paths, skip_non_records=skip_non_records)
    summaries: list[FileSummary] = []
    for display, path in records:
        _guarded(display, functools.partial(validate_file_record, display, path), issues, summaries)
    for release in releases:
        display = _display(release.directory)
        _guarded(display, functools.partial(validate_release, release, require_declaration=require_declaration),
                 issues, summaries)
    summaries.sort(key=lambda s: s.file)
    return ValidationReport(issues=sort_issues(issues), files=summaries, missing=sorted(set(missing)),
                            skipped=sorted(set(skipped)))


__all__ = ["RECORD_KINDS", "ValidationReport", "looks_like_record", "validate_file_record", "validate_paths"]
