"""The short text the demo prints at the end: census counts, what the audits found (the headline displaced release
with its shift and flip, the channel-absent twins at 0.00), the flagged releases, the pull requests, the report."""

from __future__ import annotations

from typing import Any

from bnconvention.audit.population import population_story
from bnconvention.demo.pipeline import DemoResult
from bnconvention.demo.pipeline import headline_release as headline
from bnconvention.demo.spec import DEMO_SPEC
from bnconvention.formats.text import one_line, plural, signed
from bnconvention.hub.summaries import CLASS_LABELS
from bnconvention.report_html import flagged_repos


def _cell(result: Any, metric: str) -> Any:
    return next((c for c in result.annotation.cells if c.metric == metric), None)


def _p(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2g}"


def flagged(result: DemoResult) -> list[tuple[str, str, str]]:
    """``(repo id, flagged by, reason)``: census classes that need attention, and validation errors."""
    return flagged_repos(result.census.repos, result.validation)


def _decision(cell: Any) -> str:
    """``displaced (exact-sign-test, p = 0.00098)``; a rule that decided nothing is not named."""
    decision = cell.decision
    if decision.method == "none" or decision.p_value is None:
        return decision.outcome
    return f"{decision.outcome} ({decision.method}, p = {_p(decision.p_value)})"


def _shorten(text: str, limit: int = 110) -> str:
    text = one_line(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def summary_text(result: DemoResult) -> str:
    metric = DEMO_SPEC["headline"]
    census = result.census
    lines = [f"bnconvention demo: organisation {census.org} on a local Hub ({result.endpoint}), "
             f"{plural(census.repos_total, 'model repo')}", "",
             f"census (header only, {census.bytes_read_total} bytes read):"]
    lines += [f"  {CLASS_LABELS[name]:<44} {count}" for name, count in census.counts.model_dump().items()]

    lines += ["", f"audits ({plural(DEMO_SPEC['replicates'], 'replicate')}, ±{DEMO_SPEC['margin_pp']} pp margin, "
                  f"exact refit on {DEMO_SPEC['refit']['pool_size']} redrawn retained records each), "
                  f"cell {metric} = forget accuracy:"]
    top = headline(result.audits)
    absent: list[str] = []
    for repo_id, audit in result.audited():
        cell = _cell(audit, metric)
        if cell is None:
            continue
        if audit.annotation.channel == "absent":
            shifts = {signed(s) for c in audit.annotation.cells for s in c.replicate_shifts_pp}
            absent.append(f"{repo_id} {'/'.join(sorted(shifts))}pp")
            continue
        flips = [f'"{v.criterion}" {v.direction.replace("_", " ")}' for v in audit.annotation.verdicts
                 if v.flipped and v.direction]
        anchored = "" if audit.anchored is not False else " [not anchored: excluded]"
        built = "" if audit.factory.startswith("zoo/") else f" [{audit.factory} from config.json]"
        mark = "  <- headline" if top is not None and top[0] == repo_id else ""
        lines.append(f"  {repo_id:<40} {cell.shipped:.2f} -> {cell.refit:.2f} {signed(cell.shift_pp):>8}pp "
                     f"{_decision(cell)}"
                     + (f"; flips {', '.join(flips)}" if flips else "") + anchored + built + mark)
    if absent:
        lines.append(f"  channel absent (GroupNorm, no running statistics): {', '.join(absent)}")
    lines += [f"  {a.repo_id:<40} not audited: {_shorten(a.reason)}" for a in result.audits if a.status == "failed"]
    if top is not None:
        repo_id, audit = top
        cell = _cell(audit, metric)
        flipped = [v for v in audit.annotation.verdicts if v.flipped]
        lines += ["", f"headline: {repo_id} ships {metric} = {cell.shipped:.4f}; a retain refit at bit-identical "
                      f"weights gives {cell.refit:.4f} ({signed(cell.shift_pp)}pp, {cell.decision.outcome} on "
                      f"{len(cell.replicate_shifts_pp)}/{plural(len(cell.replicate_shifts_pp), 'replicate')}, p = "
                      f"{_p(cell.decision.p_value)}); verdict \"{flipped[0].criterion}\" flips "
                      f"{(flipped[0].direction or '').replace('_', ' ')}",
                  f"  reporting line: {audit.annotation.reporting_line}"]
        if audit.annotation.recoverability is not None:
            r = audit.annotation.recoverability
            lines.append(f"  recoverability: a refit on {plural(r.images, f'unlabeled {r.source} image')} moves "
                         f"forget accuracy {r.forget_accuracy_shipped:.2f} -> {r.forget_accuracy_after:.2f}")

    flags = flagged(result)
    lines += ["", f"flagged releases ({len(flags)}):"]
    lines += [f"  {repo_id:<40} {source}: {_shorten(reason)}" for repo_id, source, reason in flags] or ["  none"]

    opened = [p for p in result.pushes if p.pr_num is not None]
    lines += ["", f"pull requests with refit annotations: {len(opened)} "
                  f"({result.reused.get('pushes_opened', 0)} opened in this run, "
                  f"{result.reused.get('pushes', 0)} from an earlier run)"]
    if result.pr_check is not None:
        repo_id, number, code = result.pr_check
        lines.append(f"  {repo_id} pull request #{number} (refs/pr/{number}) validates: exit {code}")
    errors = sum(i.severity == "error" for i in result.validation)
    warnings = sum(i.severity == "warning" for i in result.validation)
    lines += [f"validation of {census.org}: {plural(errors, 'error')}, {plural(warnings, 'warning')}"]
    lines += population_lines(result)
    lines += ["", f"report: {result.report}"]
    timing = ", ".join(f"{name} {seconds:.1f}s" for name, seconds in result.seconds.items())
    reuse = [name for name in ("zoo", "publish") if result.reused.get(name)]
    reuse += [f"{result.reused[k]} {k}" for k in ("census", "audits", "pushes") if result.reused.get(k)]
    if result.population_census is not None and result.population_census.audits_reused:
        reuse.append(f"{result.population_census.audits_reused} population audits")
    lines.append(f"time: {sum(result.seconds.values()):.1f}s ({timing})"
                 + (f"; reused: {', '.join(reuse)}" if reuse else ""))
    return "\n".join(lines) + "\n"


def population_lines(result: DemoResult) -> list[str]:
    """The population census in brief: what was censused, the headline chosen by its data, the readings."""
    run = result.population_census
    if run is None:
        return []
    counts = run.summary.counts
    story = population_story(run.summary)
    lines = ["", f"population census ({run.checkpoints} checkpoints in {run.folder}: {counts.decided} decided, "
                 f"{counts.controls} controls; {run.audits_run} audited now, {run.audits_reused} from the journal):",
             f"  headline: {story[0]}"]
    lines += [f"  {line}" for line in story[1:]]
    lines.append(f"  census page: {result.report.with_name('population.html')} (and {run.census_dir}/census.md)")
    return lines


__all__ = ["flagged", "population_lines", "summary_text"]
