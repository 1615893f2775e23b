"""Markdown summaries: one audited checkpoint, and a census of many (the results table of Shen and Li).

Pure functions from results to text; writing files is :mod:`bnconvention.audit.render.outputs`' job.
"""

from __future__ import annotations

from collections.abc import Mapping

from bnconvention.audit.core.result import AuditResult
from bnconvention.audit.measure.decisions import format_p
from bnconvention.audit.population.encoder_report import encoder_lines
from bnconvention.audit.population.model import CensusResult
from bnconvention.audit.population.scales_report import scales_lines
from bnconvention.audit.population.story import background_text, margin_line
from bnconvention.audit.render.readings import arms_lines, curve_lines, mechanism_cell, null_lines, readings_lines
from bnconvention.formats.text import markdown_table, plural, signed

PLOT_FILES = {"cells": "cells.png", "staleness": "staleness.png"}


def _pp(value: float) -> str:
    return signed(value)


def _value(value: float | None) -> str:
    return "—" if value is None else f"{value:.4f}"


def _yes(flag: bool | None) -> str:
    return {True: "yes", False: "no", None: "—"}[flag]


def audit_markdown(result: AuditResult, *, plots: Mapping[str, str] | None = None) -> str:
    """The summary of one audit; ``plots`` maps plot kind to a relative file name to embed."""
    a = result.annotation
    if a.anchoring is None:
        anchoring = "not checked (no published cells)"
    else:
        anchoring = (f"{'anchored' if a.anchoring.anchored else 'NOT anchored (excluded from decisions)'} "
                     f"(tolerance {a.anchoring.tolerance:g})")
    lines = [f"# Audit of `{a.subject.filename}`", "", f"> {a.reporting_line}", ""]
    lines += markdown_table(["", ""], [
        ["trainable sha256", f"`{a.subject.trainable_sha256}` (bit-identical before and after the audit)"],
        ["shipped running sha256", f"`{a.subject.running_sha256}`" if a.subject.running_sha256 else "— (none)"],
        ["declared convention", f"`{a.subject.declared_convention}`" if a.subject.declared_convention else "none"],
        ["refit convention", f"`{a.convention.name}`"],
        ["architecture", f"`{result.factory}`"],
        ["channel", a.channel + (" (no running statistics: a refit is the identity)" if a.channel == "absent"
                                 else "")],
        ["replicates", f"{a.replicates} (each a refit on {a.convention.data.record_count} redrawn retained records)"],
        ["margin", f"±{a.margin_pp:g} pp"],
        ["anchoring", anchoring],
    ])
    lines += ["", "## Cells", "",
              "Cells are fractions (`mia_auc` an AUC); shifts are refit minus shipped in pp, per replicate.", ""]
    rows = []
    for cell in a.cells:
        sign = result.sign_tests.get(cell.metric)
        spread = f"{signed(min(cell.replicate_shifts_pp))} … {signed(max(cell.replicate_shifts_pp))}"
        beyond = f"{sign.beyond}/{len(cell.replicate_shifts_pp)}" if sign else "—"
        rows.append([f"`{cell.metric}`", _value(cell.published), _value(cell.shipped), _value(cell.refit),
                     _pp(cell.shift_pp), spread, beyond, cell.decision.outcome, cell.decision.method,
                     format_p(cell.decision.p_value)])
    lines += markdown_table(["cell", "published", "shipped", "refit (mean)", "shift pp", "replicate range pp",
                     "beyond margin", "decision", "rule", "p"], rows)
    if a.anchoring is not None:
        lines += ["", "## Anchoring", ""]
        lines += markdown_table(["cell", "published", "shipped", "|difference|"],
                        [[f"`{c.metric}`", _value(c.published), _value(c.shipped), f"{c.abs_diff:.4f}"]
                         for c in a.anchoring.cells])
    if a.verdicts:
        lines += ["", "## Verdicts", ""]
        lines += markdown_table(["criterion", "shipped", "refit (mean cells)", "refit passes", "flip"], [
            [f"`{v.criterion}`", "pass" if v.shipped else "fail", "pass" if v.refit else "fail",
             f"{v.refit_pass_replicates}/{a.replicates}", (v.direction or "").replace("_", " ") or "—"]
            for v in a.verdicts])
    if a.staleness is not None:
        s = a.staleness
        lines += ["", "## Staleness", "",
                  "Distance of the shipped statistics from a retain refit (Kalani et al., Eq. 15), layer-averaged; the "
                  "reference band is the 1 − level quantile of the same distance between independent retain refits, "
                  "and 'exceeds' is an exact rank test at that level.", ""]
        band = s.reference_band
        lines += markdown_table(["", "shipped vs refit", "reference band"], [
            ["mean ‖µ−µ̂‖/‖σ̂‖", f"{s.mean_distance:.5f}", f"{band.mean_distance:.5f}" if band else "—"],
            ["variance ‖σ²−σ̂²‖/‖σ̂²‖", f"{s.var_distance:.5f}", f"{band.var_distance:.5f}" if band else "—"],
        ])
        lines += ["", f"Exceeds the band: {_yes(s.exceeds_band)}; {plural(len(s.layers), 'layer')}."]
        lines += null_lines(result.staleness_null)
    if a.recoverability is not None:
        r = a.recoverability
        lines += ["", "## Recoverability", "",
                  f"A refit ({r.rule}) on {plural(r.images, f'unlabeled {r.source} image')} moves forget accuracy from "
                  f"{r.forget_accuracy_shipped:.4f} to {r.forget_accuracy_after:.4f} ({_pp(r.shift_pp)} pp)."]
    if a.provenance is not None:
        p = a.provenance
        shift = "—" if p.forget_shift_pp is None else f"{_pp(p.forget_shift_pp)} pp"
        lines += ["", "## Provenance contrast", "",
                  f"Exchanging {p.exchanged} of {plural(p.pool_size, 'retained record')} for forget records in a "
                  f"fixed pool moves the refit statistics by {p.mean_distance:.5f} (mean) / "
                  f"{p.var_distance:.5f} (variance) and forget accuracy by {shift}."]
    lines += arms_lines(result.provenance_arms) + curve_lines(result.recoverability_curve) + encoder_lines(a)
    lines += scales_lines(result.scales)
    if plots:
        lines += ["", "## Plots", ""]
        lines += [f"![{kind}]({name})" for kind, name in plots.items()]
    lines += ["", "## Cost", "",
              f"{plural(result.refits_run, 'refit')}, shipped cells evaluated once "
              f"({result.seconds_shipped_eval:.2f} s), {result.seconds:.1f} s in all."]
    if result.warnings:
        lines += ["", "## Warnings", ""] + [f"- {w}" for w in result.warnings]
    return "\n".join(lines) + "\n"


def census_markdown(census: CensusResult) -> str:
    """The census summary from the census model (see :func:`bnconvention.audit.population.summary.summarize`)."""
    counts = census.counts
    q = census.fdr_q
    margin = census.margin_pp
    eligible = counts.decided  # anchored and not a control (audit/population/controls.py)
    lines = [f"# Census of {plural(counts.checkpoints, 'checkpoint')}", "",
             f"Spec `{census.spec_name or census.spec_sha256[:12]}`; "
             f"{plural(census.replicates, 'replicate')} per checkpoint; margin ±{margin:g} pp; "
             f"Benjamini–Yekutieli at q = {q:g} across the census, per cell.", "", margin_line(census), ""]
    if census.identical_weights:
        lines += ["Identical weights under several names (each its own row, one weight file): "
                  + "; ".join(" = ".join(group) for group in census.identical_weights) + ".", ""]
    warnings = census.margin.warnings
    lines += [f"> warning: {w}" for w in warnings] + ([""] if warnings else [])
    rows = [
        ["Shipped cells reproduce the published ones (anchored)", str(counts.anchoring_checked),
         str(counts.anchored)],
        ["Controls (known answer; outside the BY family)", str(counts.checkpoints), str(counts.controls)],
        ["Checkpoints decided (anchored or nothing to anchor to; not controls)", str(counts.checkpoints),
         str(eligible)],
        ["Channel absent (no running statistics)", str(counts.checkpoints), str(counts.channel_absent)],
    ]
    if counts.twin_arms:
        rows.append(["Synthetic twin arms (read apart, not counted as released)", str(counts.checkpoints),
                     str(counts.twin_arms)])
    for metric, cell in census.cells.items():
        rows.append([f"`{metric}` displaced beyond ±{margin:g} pp (BY q = {q:g})", str(eligible),
                     f"{cell.displaced_by} (raw {cell.displaced}); {background_text(census, cell=metric)}"])
        rows.append([f"`{metric}` equivalent (TOST 90 %)", str(eligible), str(cell.equivalent)])
    for criterion, verdict in census.verdicts.items():
        rows.append([f"Verdict `{criterion}` flips", str(eligible),
                     f"{verdict.flips} (pass→fail {verdict.pass_to_fail}, fail→pass {verdict.fail_to_pass}); "
                     f"{background_text(census, criterion=criterion)}"])
    largest = census.largest_shift
    if largest is not None:
        rows.append(["Largest shift", "", f"{_pp(largest.shift_pp)} pp (`{largest.cell}`, {largest.checkpoint})"])
    lines += markdown_table(["Question", "n", "Result"], rows)
    lines += ["", "## Per checkpoint", ""]
    metrics = list(census.cells)
    header = (["checkpoint", "channel", "anchored"] + [f"`{m}` shift pp" for m in metrics]
              + ["flips", "mechanism", "annotation"])
    table_rows = []
    for entry in census.checkpoints:
        row = [entry.checkpoint, entry.channel, _yes(entry.anchored)]
        for m in metrics:
            shift = entry.cells[m]
            mark = {"displaced": " **displaced**", "equivalent": " equivalent", "undetermined": ""}[shift.outcome]
            if shift.outcome == "displaced" and not shift.displaced_by:
                mark = " displaced (not after BY)"
            row.append(f"{_pp(shift.shift_pp)}{mark}")
        flips = ", ".join(f"`{f.criterion}` {(f.direction or '').replace('_', ' ')}" for f in entry.flips) or "—"
        row += [flips, mechanism_cell(entry), f"[json]({entry.annotation})"]
        table_rows.append(row)
    lines += markdown_table(header, table_rows)
    lines += readings_lines(census.readings)
    timing = census.timing
    if timing is not None:
        lines += ["", f"Audit time per checkpoint: median {timing.median_seconds:.1f} s, total "
                      f"{timing.total_seconds:.1f} s of audits ({timing.audits_run} run in this invocation, "
                      f"{timing.audits_reused} reused from the journal)."]
    return "\n".join(lines) + "\n"
