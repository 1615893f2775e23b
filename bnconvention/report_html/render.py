"""Render the report's ``index.html``: a static page with inline CSS, no scripts and no external resources.

Strings from outside go through :func:`bnconvention.report_html.markup.esc`; links point only at files the writer
copied into the report folder (see :mod:`bnconvention.report_html.write`).
"""

from __future__ import annotations

from collections.abc import Mapping

from bnconvention.audit.population import population_story
from bnconvention.formats.text import plural, signed
from bnconvention.hub_audit.entries import RepoAudit
from bnconvention.report_html.markup import badge, esc, esc_code, href, page, table
from bnconvention.report_html.model import ReportInput, checkpoint_key
from bnconvention.report_html.sections import audit_section, class_label

# --- sections ------------------------------------------------------------------------------------------------------


def _decisions(audit: RepoAudit | None) -> tuple[str, str]:
    """(decisions per cell, verdict flips) of a repo's audited files, as HTML."""
    if audit is None:
        return "—", "—"
    parts: list[str] = []
    flips: list[str] = []
    for item in audit.files:
        prefix = "" if len(audit.files) == 1 else f"{esc(item.filename)}: "
        if item.result is None:
            parts.append(prefix + badge(item.status, "warning") + f" <span class=\"muted\">{esc(item.reason)}</span>")
            continue
        annotation = item.result.annotation
        link = f'<a href="#{esc(checkpoint_key(audit.repo_id, item.filename))}">'
        cells = "<br>".join(f"{link}{esc(c.metric)}</a> {signed(c.shift_pp)}pp "
                            f"{badge(c.decision.outcome, c.decision.outcome)}" for c in annotation.cells)
        channel = f"<br>{badge('channel absent', 'absent')}" if annotation.channel == "absent" else ""
        parts.append(f"{prefix}{cells}{channel}")
        flips += [f"{prefix}<code>{esc(v.criterion)}</code> {esc((v.direction or '').replace('_', ' '))}"
                  for v in annotation.verdicts if v.flipped]
    return "<br>".join(parts) or "—", "<br>".join(flips) or "none"


def _validation_cell(report: ReportInput, repo_id: str) -> str:
    issues = report.issues_of(repo_id)
    errors = [i for i in issues if i.severity == "error"]
    warnings = [i for i in issues if i.severity == "warning"]
    if not report.validation and not issues:
        return badge("valid", "ok")
    if errors:
        codes = ", ".join(sorted({esc(i.code) for i in errors}))
        return f"{badge(plural(len(errors), 'error'), 'error')} <code>{codes}</code>"
    if warnings:
        codes = ", ".join(sorted({esc(i.code) for i in warnings}))
        return f"{badge(plural(len(warnings), 'warning'), 'warning')} <code>{codes}</code>"
    return badge("valid", "ok")


def _pull_request(report: ReportInput, repo_id: str) -> str:
    push = report.push_of(repo_id)
    if push is None:
        return "—"
    if push.pr_num is not None:
        return f"#{push.pr_num} <span class=\"muted\">({esc(push.status)}, <code>refs/pr/{push.pr_num}</code>)</span>"
    return f"{esc(push.status)}" + (f" <span class=\"muted\">{esc(push.reason)}</span>" if push.reason else "")


def census_table(report: ReportInput) -> str:
    """One row per repo: class, BN layers, declared convention, audit decisions, flips, validation, pull request."""
    rows: list[list[str]] = []
    attrs: list[dict[str, str]] = []
    for repo in report.repos():
        repo_id, status = repo.repo_id, repo.status
        layers = sum(c.bn_layers for c in repo.checkpoints)
        conventions = sorted({c.declared_convention for c in repo.checkpoints if c.declared_convention})
        decisions, flips = _decisions(report.audit_of(repo_id))
        kind = "flag" if status in ("undeclared", "declared_inconsistent", "unreadable") else (
            "absent" if status == "channel_absent" else "ok")
        note = report.release_notes.get(repo_id)
        rows.append([
            f"<code>{esc(repo_id)}</code>" + (f'<br><span class="muted">{esc(note)}</span>' if note else ""),
            badge(class_label(status), kind) + f'<br><span class="muted">{esc(repo.reason)}</span>',
            str(layers),
            "<br>".join(f"<code>{esc(c)}</code>" for c in conventions) or "none",
            decisions, flips, _validation_cell(report, repo_id), _pull_request(report, repo_id),
        ])
        attrs.append({"data-repo": repo_id, "data-class": status})
    return table(["Repo", "Census class", "BN layers", "Declared convention", "Audit: shift and decision per cell",
                  "Verdict flips", "Validation", "Pull request"], rows, table_id="census", row_attrs=attrs,
                 numeric=(2,))


def overview(report: ReportInput) -> str:
    rows = [[esc(class_label(name)), str(count)] for name, count in report.census.counts.by_class()]
    parts = ["<h2 id=\"overview\">Overview</h2>",
             f"<p>{esc(plural(report.census.repos_total, 'model repo'))} of "
             f"<code>{esc(report.org)}</code>, classified from their safetensors headers and cards alone "
             f"({esc(report.census.bytes_read_total)} bytes read).</p>",
             table(["Census class", "Repos"], rows, table_id="class-counts", numeric=(1,))]
    summary = report.audit_summary
    if summary is not None:
        c = summary.counts
        audit_rows = [["Checkpoints audited", str(c.checkpoints)],
                      ["Anchored (shipped cells reproduce the published ones)",
                       f"{c.anchored} of {c.anchoring_checked} checked"],
                      ["Channel absent (no running statistics)", str(c.channel_absent)]]
        for metric, cell in summary.cells.items():
            audit_rows.append([f"<code>{esc(metric)}</code> displaced beyond ±{esc(summary.margin_pp)} pp "
                               f"(Benjamini–Yekutieli, q = {esc(summary.fdr_q)})",
                               f"{esc(cell.displaced_by)} (raw {esc(cell.displaced)})"])
        for criterion, verdict in summary.verdicts.items():
            audit_rows.append([f"Verdict <code>{esc(criterion)}</code> flips",
                               f"{esc(verdict.flips)} (pass→fail {esc(verdict.pass_to_fail)}, "
                               f"fail→pass {esc(verdict.fail_to_pass)})"])
        largest = summary.largest_shift
        if largest is not None:
            audit_rows.append(["Largest shift", f"{signed(largest.shift_pp)} pp (<code>{esc(largest.cell)}"
                                                f"</code>, <code>{esc(largest.checkpoint)}</code>)"])
        parts.append(table(["Audit", "Result"], audit_rows, table_id="audit-counts", numeric=(1,)))
    flagged = report.flagged()
    parts.append('<h3 id="flagged">Flagged releases</h3>')
    if flagged:
        parts.append(table(["Repo", "Flagged by", "Reason"],
                           [[f"<code>{esc(r)}</code>", badge(s, "flag"), esc(m)] for r, s, m in flagged],
                           table_id="flagged-table"))
    else:
        parts.append("<p>None: every release is declared and consistent, or has no running statistics.</p>")
    return "\n".join(parts)


def validation_section(report: ReportInput) -> str:
    parts = ['<h2 id="validation">Validation of the organisation\'s cards and weights</h2>']
    if not report.validation:
        parts.append("<p>No issues: every card and weights file validates.</p>")
        return "\n".join(parts)
    rows = [[f"<code>{esc(i.file)}</code>", f"<code>{esc(i.path or '/')}</code>", f"<code>{esc(i.code)}</code>",
             badge(i.severity, i.severity), esc(i.message)] for i in report.validation]
    parts.append(table(["File", "Path", "Code", "Severity", "Message"], rows, table_id="validation-issues"))
    return "\n".join(parts)


POPULATION_PAGE = "population.html"


def population_section(report: ReportInput) -> str:
    """The population census in brief, its headline chosen by the data, linking the census page."""
    census = report.population_census
    if census is None:
        return ""
    story = population_story(census)
    counts = census.counts
    return "\n".join([
        '<h2 id="population">Population census</h2>',
        f"<p>A structured population of {counts.checkpoints} checkpoints ({counts.decided} decided, "
        f"{counts.controls} known-answer controls), censused with the same instrument: "
        f'<a href="{href(POPULATION_PAGE)}">the census page</a> has the forest plot by family, the margin sweep, '
        "the detection floor, the recoverability curve, the twin gaps and the staleness scatter.</p>",
        f"<blockquote><strong>{esc_code(story[0])}</strong></blockquote>",
        "<ul>" + "".join(f"<li>{esc_code(line)}</li>" for line in story[1:]) + "</ul>",
    ])


def render_index(report: ReportInput, *, links: Mapping[tuple[str, str], Mapping[str, str]]) -> str:
    """The whole page. ``links[(repo id, filename)]`` maps ``cells``/``staleness``/``annotation`` to paths
    relative to ``index.html`` (files the writer copied there)."""
    title = report.title or f"BatchNorm audit of {report.org}"
    audited = report.audited_files()
    sections = [audit_section(audit, item, report, links.get((audit.repo_id, item.filename), {}))
                for audit, item in audited]
    body = [
        f"<header><h1>{esc(title)}</h1>",
        f'<p class="muted">Hub endpoint <code>{esc(report.endpoint)}</code>; written by {esc(report.generator)}. '
        "Shifts are refit minus shipped, in percentage points; cells are fractions.</p>",
        '<nav><a href="#overview">Overview</a><a href="#census-table">Census</a><a href="#audits">Audits</a>'
        '<a href="#validation">Validation</a>'
        + ('<a href="#population">Population census</a>' if report.population_census is not None else "")
        + "</nav></header>",
        overview(report),
        '<h2 id="census-table">Census</h2>',
        census_table(report),
        f'<h2 id="audits">Audited checkpoints ({len(audited)})</h2>',
        *sections,
        validation_section(report),
        population_section(report),
    ]
    return page(title, body)


__all__ = ["POPULATION_PAGE", "census_table", "overview", "population_section", "render_index", "validation_section"]
