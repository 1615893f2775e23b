"""One audited checkpoint's section of the report: the reporting line, the cells as shipped and refit with the
replicate spread, decisions with p-values (and Benjamini–Yekutieli across the census), verdict flips, the layerwise
staleness profile, recoverability, the provenance contrast, the plots, and the annotation with its pull request.
"""

from __future__ import annotations

from collections.abc import Mapping

from bnconvention.audit.core import AuditResult
from bnconvention.audit.population import CheckpointRow
from bnconvention.formats.text import plural, signed
from bnconvention.hub.summaries import CLASS_LABELS
from bnconvention.hub_audit.entries import FileAudit, RepoAudit
from bnconvention.report_html.markup import badge, esc, href, table
from bnconvention.report_html.model import ReportInput, checkpoint_key


def class_label(status: str) -> str:
    """The census class in words (``undeclared`` -> ``BN undeclared``)."""
    return CLASS_LABELS.get(status, status)


def fraction(value: float | None) -> str:
    return "—" if value is None else f"{value:.4f}"


def pp(value: float | None) -> str:
    return "—" if value is None else signed(value)


def p_value(value: float | None) -> str:
    """Two significant digits (``0.0009765625`` -> ``0.00098``), as in the reporting lines."""
    return "n/a" if value is None else f"{value:.2g}"


def _facts(audit: RepoAudit, item: FileAudit, result: AuditResult) -> str:
    a = result.annotation
    if a.anchoring is None:
        anchoring = "not checked (no published cells)"
    else:
        anchoring = ("anchored" if a.anchoring.anchored else "NOT anchored: excluded from the census decisions") + \
            f" (tolerance {a.anchoring.tolerance:g}; " + ", ".join(
                f"{esc(c.metric)} published {c.published:.4f} vs shipped {c.shipped:.4f}" for c in a.anchoring.cells) \
            + ")"
    rows = [
        ["Revision audited", f"<code>{esc(audit.revision)}</code>"],
        ["Trainable sha256", f"<code>{esc(a.subject.trainable_sha256)}</code> (bit-identical before and after every "
                             "refit)"],
        ["Declared convention", f"<code>{esc(a.subject.declared_convention)}</code>"
         if a.subject.declared_convention else "none declared"],
        ["Refit convention", f"<code>{esc(a.convention.name)}</code>"],
        ["Architecture", f"<code>{esc(result.factory)}</code> (from {esc(item.architecture_source or '—')})"],
        ["Channel", badge("channel absent: no running statistics, a refit is the identity", "absent")
         if a.channel == "absent" else "present"],
        ["Replicates", f"{a.replicates}, each an exact refit on {esc(a.convention.data.record_count or '—')} "
                       "redrawn retained records"],
        ["Margin", f"±{a.margin_pp:g} pp"],
        ["Anchoring", anchoring],
    ]
    return table(None, rows)


def _cells(result: AuditResult, summary: CheckpointRow | None) -> str:
    a = result.annotation
    by_cells = summary.cells if summary is not None else {}
    rows = []
    for cell in a.cells:
        sign = result.sign_tests.get(cell.metric)
        by = by_cells[cell.metric].by_p_value if cell.metric in by_cells else None
        rows.append([
            f"<code>{esc(cell.metric)}</code>", fraction(cell.published), fraction(cell.shipped),
            fraction(cell.refit),
            f"{min(cell.replicate_values):.4f} … {max(cell.replicate_values):.4f}",
            pp(cell.shift_pp),
            f"{signed(min(cell.replicate_shifts_pp))} … {signed(max(cell.replicate_shifts_pp))}",
            f"{sign.beyond}/{len(cell.replicate_shifts_pp)}" if sign is not None else "—",
            badge(cell.decision.outcome, cell.decision.outcome), esc(cell.decision.method),
            p_value(cell.decision.p_value), p_value(by) if by is not None else "—",
        ])
    return table(["Cell", "Published", "Shipped", "Refit (mean)", "Refit replicates (min … max)", "Shift pp",
                  "Replicate shifts pp", "Beyond margin", "Decision", "Rule", "p", "p (BY, census)"], rows,
                 numeric=(1, 2, 3, 4, 5, 6, 7, 10, 11))


def _verdicts(result: AuditResult) -> str:
    a = result.annotation
    if not a.verdicts:
        return "<p>No criteria declared.</p>"
    rows = [[f"<code>{esc(v.criterion)}</code>", badge("pass" if v.shipped else "fail", "ok" if v.shipped else "flag"),
             badge("pass" if v.refit else "fail", "ok" if v.refit else "flag"),
             f"{v.refit_pass_replicates if v.refit_pass_replicates is not None else '—'}/{a.replicates}",
             badge("flips " + (v.direction or "").replace("_", " "), "displaced") if v.flipped else "no flip"]
            for v in a.verdicts]
    return table(["Criterion", "Shipped", "Refit (mean cells)", "Replicates passing", "Flip"], rows,
                 numeric=(3,))


def _staleness(result: AuditResult) -> str:
    s = result.annotation.staleness
    if s is None:
        return "<p>No staleness measured.</p>"
    if not s.layers:
        return "<p>No running statistics: nothing to compare (channel absent).</p>"
    band = s.reference_band
    exceeds = {True: badge("exceeds the reference band", "displaced"),
               False: badge("within the reference band", "equivalent"), None: "—"}[s.exceeds_band]
    parts = [f"<p>Layer-averaged distance of the shipped statistics from a retain refit: mean "
             f"{s.mean_distance:.5f}, variance {s.var_distance:.5f}; reference band (null of independent retain "
             "refits): "
             + (f"mean {band.mean_distance:.5f}, variance {band.var_distance:.5f}" if band else "—")
             + f". {exceeds}</p>"]
    reference = {layer.name: layer for layer in (result.band_layers or [])}
    rows = []
    for layer in s.layers:
        ref = reference.get(layer.name)
        rows.append([f"<code>{esc(layer.name)}</code>", f"{layer.mean_distance:.5f}", f"{layer.var_distance:.5f}",
                     f"{ref.mean_distance:.5f}" if ref else "—", f"{ref.var_distance:.5f}" if ref else "—"])
    parts.append(table(["Layer", "Mean ‖µ−µ̂‖/‖σ̂‖", "Variance ‖σ²−σ̂²‖/‖σ̂²‖", "Band: mean", "Band: variance"], rows,
                       numeric=(1, 2, 3, 4)))
    return "\n".join(parts)


def _recoverability(result: AuditResult) -> str:
    a = result.annotation
    parts = []
    r = a.recoverability
    if r is not None:
        parts.append(f"<p><strong>Recoverability:</strong> a refit ({esc(r.rule)}) on "
                     f"{esc(plural(r.images, f'unlabeled {r.source} image'))} moves forget accuracy from "
                     f"{r.forget_accuracy_shipped:.4f} to {r.forget_accuracy_after:.4f} ({pp(r.shift_pp)} pp).</p>")
    p = a.provenance
    if p is not None:
        shift = "—" if p.forget_shift_pp is None else f"{pp(p.forget_shift_pp)} pp"
        parts.append(f"<p><strong>Provenance contrast:</strong> exchanging {p.exchanged} of {p.pool_size} retained "
                     f"records for forget records moves the refit statistics by {p.mean_distance:.5f} (mean) / "
                     f"{p.var_distance:.5f} (variance) and forget accuracy by {shift}.</p>")
    return "\n".join(parts)


def _plots(links: Mapping[str, str], filename: str) -> str:
    captions = {"cells": "Shipped vs refit per cell with the replicate spread, and the shifts against the margin",
                "staleness": "Layerwise staleness profile of the shipped statistics, with the reference band"}
    figures = []
    for kind, caption in captions.items():
        if kind in links:
            figures.append(f'<figure><img src="{href(links[kind])}" alt="{esc(caption)} ({esc(filename)})" '
                           f'width="900"><figcaption class="muted">{esc(caption)}</figcaption></figure>')
    return "\n".join(figures)


def _annotation(audit: RepoAudit, item: FileAudit, report: ReportInput, links: Mapping[str, str]) -> str:
    push = report.push_of(audit.repo_id)
    parts = []
    if "annotation" in links:
        parts.append(f'Annotation: <a href="{href(links["annotation"])}"><code>{esc(item.annotation_path)}</code></a>'
                     f' (sha256 <code>{esc(item.annotation_sha256)}</code>)')
    if push is not None and push.pr_num is not None:
        parts.append(f"pull request #{push.pr_num} on <code>{esc(audit.repo_id)}</code> "
                     f"(<code>refs/pr/{push.pr_num}</code>, {esc(push.status)})")
    elif push is not None:
        parts.append(f"pull request: {esc(push.status)} {esc(push.reason)}")
    return "<p>" + "; ".join(parts) + ".</p>" if parts else ""


def audit_section(audit: RepoAudit, item: FileAudit, report: ReportInput, links: Mapping[str, str]) -> str:
    """The section of one audited checkpoint (``item`` must carry a result)."""
    result = item.result
    if result is None:
        raise ValueError(f"{audit.repo_id}/{item.filename} has no audit result to show ({item.status})")
    a = result.annotation
    key = checkpoint_key(audit.repo_id, item.filename)
    summary = report.summary_entry(audit.repo_id, item.filename)
    title = audit.repo_id if item.filename == "model.safetensors" else f"{audit.repo_id}: {item.filename}"
    parts = [
        f'<section class="checkpoint" id="{esc(key)}" data-repo="{esc(audit.repo_id)}">',
        f"<h3><code>{esc(title)}</code></h3>",
        f"<blockquote>{esc(a.reporting_line)}</blockquote>",
        _facts(audit, item, result),
        "<h4>Cells</h4>",
        _cells(result, summary),
        "<h4>Verdicts</h4>",
        _verdicts(result),
        "<h4>Staleness per layer</h4>",
        _staleness(result),
        _recoverability(result),
        _plots(links, item.filename),
        _annotation(audit, item, report, links),
    ]
    if result.warnings:
        parts.append("<ul>" + "".join(f"<li>{esc(w)}</li>" for w in result.warnings) + "</ul>")
    parts.append("</section>")
    return "\n".join(p for p in parts if p)


__all__ = ["audit_section", "class_label", "fraction", "p_value", "pp"]
