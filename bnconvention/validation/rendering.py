"""Render a validation report as text (for people), JSON (for programs) or GitHub workflow annotations.

>>> from bnconvention.validation.issues import Issue
>>> issue = Issue(code="schema.enum", severity="error", file="a,b.json", path="/kind", message="50% off\\nnow")
>>> print(format_github_issue(issue))
::error file=a%2Cb.json,title=schema.enum::/kind: 50%25 off%0Anow
"""

from __future__ import annotations

import json
from typing import Literal, TypeAlias

from bnconvention.formats.text import plural
from bnconvention.validation.files import ValidationReport
from bnconvention.validation.issues import Issue

ReportFormat: TypeAlias = Literal["text", "json", "github"]
FORMATS: tuple[ReportFormat, ...] = ("text", "json", "github")
SKIPPED_SHOWN = 5  # .json files passed over as not records, named in the summary line (the others counted)


def format_text(report: ValidationReport) -> str:
    """One status line per file (ok / warn / FAIL and what it holds), its issues under it, then a summary."""
    notes = {s.file: s.note for s in report.files}
    by_file: dict[str, list[Issue]] = {}
    for issue in report.issues:
        by_file.setdefault(issue.file, []).append(issue)
    lines = []
    for file in sorted(set(notes) | set(by_file)):
        issues = by_file.get(file, [])
        status = "FAIL" if any(i.severity == "error" for i in issues) else ("warn" if issues else "ok")
        note = f": {notes[file]}" if file in notes else ""
        lines.append(f"{status:<5} {file}{note}")
        for issue in issues:
            where = f" at {issue.path}" if issue.path else ""
            lines.append(f"      {issue.severity:<7} {issue.code}{where}: {issue.message}")
    lines.append("")
    lines.append(_summary(report, checked=len((set(notes) | set(by_file)) - set(report.missing))))
    return "\n".join(lines) + "\n"


def _summary(report: ValidationReport, *, checked: int) -> str:
    """The last line: how many files were checked with how many problems, which named paths do not exist (they
    were not checked, so they are not counted as files, nor their issues as the files' errors), and which named
    ``.json`` files were passed over as not records (``--skip-non-records``)."""
    return _counts(report, checked=checked) + _passed_over(report)


def _counts(report: ValidationReport, *, checked: int) -> str:
    if not report.missing:
        return (f"{plural(checked, 'file')} checked: {plural(len(report.errors), 'error')}, "
                f"{plural(len(report.warnings), 'warning')}")
    verb = "does" if len(report.missing) == 1 else "do"
    absent = f"{plural(len(report.missing), 'path')} {verb} not exist: {', '.join(report.missing)}"
    if not checked:
        return f"nothing checked: {absent}"
    errors = [i for i in report.errors if i.file not in report.missing]
    return (f"{plural(checked, 'file')} checked: {plural(len(errors), 'error')}, "
            f"{plural(len(report.warnings), 'warning')}; {absent}")


def _passed_over(report: ValidationReport) -> str:
    if not report.skipped:
        return ""
    shown = ", ".join(report.skipped[:SKIPPED_SHOWN])
    more = f" and {len(report.skipped) - SKIPPED_SHOWN} more" if len(report.skipped) > SKIPPED_SHOWN else ""
    what = "is not a record" if len(report.skipped) == 1 else "are not records"
    return f"; passed over {plural(len(report.skipped), 'JSON file')} that {what}: {shown}{more}"


def format_json(report: ValidationReport) -> str:
    """A JSON list of ``{file, path, code, severity, message}`` objects, in report order."""
    return json.dumps([issue.to_dict() for issue in report.issues], indent=2, ensure_ascii=False) + "\n"


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def format_github_issue(issue: Issue) -> str:
    """One GitHub Actions workflow command (``::error`` or ``::warning``) for an issue."""
    where = f"{issue.path}: " if issue.path else ""
    line = "" if issue.line is None else f",line={issue.line}"
    return (f"::{issue.severity} file={_escape_property(issue.file)}{line},title={_escape_property(issue.code)}::"
            f"{_escape_data(where + issue.message)}")


def format_github(report: ValidationReport) -> str:
    """Workflow annotations, one per issue (nothing when there is no issue)."""
    return "".join(format_github_issue(issue) + "\n" for issue in report.issues)


def render(report: ValidationReport, fmt: ReportFormat = "text") -> str:
    """The report in format ``fmt`` (text, json or github)."""
    if fmt == "json":
        return format_json(report)
    if fmt == "github":
        return format_github(report)
    if fmt == "text":
        return format_text(report)
    raise ValueError(f"unknown report format {fmt!r}; expected one of {', '.join(FORMATS)}")


__all__ = ["FORMATS", "ReportFormat", "format_github", "format_github_issue", "format_json", "format_text",
           "render"]
