"""The census numbers of docs/: regenerated from committed census summaries, never typed.

A census run on a population is trained in floating point, so its digits belong to one machine and one build. The
docs therefore quote a committed extract of one run (``docs/data/<name>.json``: the census summary without its
per-checkpoint rows, with the commit, machine, command and date of the run) and render every number they show from
it, inside marked regions::

    <!-- begin generated: NAME/PART (scripts/docs_census.py; do not edit by hand) -->
    ...
    <!-- end generated -->

where NAME is the extract and PART one of the renderings below (the story of the census, its family table, its
flip ledger, the provenance arms, the run it came from). The renderings are the library's own
(:func:`bnconvention.audit.population.story.population_story` and the census tables), so the docs say what
``census.md`` and ``census.html`` say.

    .venv/bin/python scripts/docs_census.py --check     # exit 1 when a region differs from its extract (the test suite)
    .venv/bin/python scripts/docs_census.py --write     # regenerate every region from the committed extracts
    .venv/bin/python scripts/docs_census.py --extract CENSUS_DIR --name population --command "..."
                                                        # refresh an extract from a census output folder
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bnconvention.audit.population.encoder_report import encoder_census_markdown
from bnconvention.audit.population.ledger import in_ledger_order
from bnconvention.audit.population.model import CensusResult
from bnconvention.audit.population.model_readings import MechanismCounts, RecoverabilityReading
from bnconvention.audit.population.model_sections import LedgerRow
from bnconvention.audit.population.scales_report import reading as scales_reading
from bnconvention.audit.population.scales_report import scales_groups_markdown
from bnconvention.audit.population.story import population_story
from bnconvention.audit.render.census import ledger_table
from bnconvention.audit.render.readings import recoverability_lines
from bnconvention.formats.atomic import atomic_write_text
from bnconvention.formats.text import markdown_table, signed

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
DATA = DOCS / "data"
FORMAT = "bnconvention-docs-census/1"
REGION = re.compile(r"(<!-- begin generated: (?P<name>[\w-]+)/(?P<part>[\w-]+) \(scripts/docs_census\.py; do not "
                    r"edit by hand\) -->\n)(?P<body>.*?)(<!-- end generated -->)", re.DOTALL)
# census.json sections the docs read; the per-checkpoint rows (and everything only they need) stay out
KEPT = ("spec_name", "spec_sha256", "replicates", "margin_pp", "fdr_q", "headline", "counts", "cells", "verdicts",
        "largest_shift", "margin", "preregistration", "flip_ledger", "controls", "detection_floor",
        "recalibration_budget", "families", "twin_gaps", "sweeps", "readings", "scales")


# --- the extract ------------------------------------------------------------------------------------------------


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()


def machine() -> dict[str, Any]:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count(), "platform": platform.platform(),
            "python": platform.python_version()}


def extract(census: Mapping[str, Any], *, command: str, commit: str | None = None) -> dict[str, Any]:
    """The part of a census summary the docs quote, with where it came from: ``commit`` is the commit the census
    ran at (default: this checkout's HEAD, with whether it had uncommitted changes)."""
    kept = {key: census[key] for key in KEPT if key in census}
    readings = dict(kept.get("readings") or {})
    readings.pop("mechanism", None)
    readings["mechanism_counts"] = (census.get("readings") or {}).get("mechanism", {}).get("counts")
    provenance = readings.get("provenance") or {}
    readings["provenance"] = {arm: {k: v for k, v in a.items() if k != "per_checkpoint"}
                              for arm, a in provenance.items()} or None
    kept["readings"] = readings
    if kept.get("controls"):
        kept["controls"] = {k: v for k, v in kept["controls"].items() if k != "rows"} | {
            "failed": sorted(r["checkpoint"] for r in census["controls"]["rows"] if not r["holds"]),
            "rows": [{"checkpoint": r["checkpoint"], "label": r["label"], "holds": r["holds"]}
                     for r in census["controls"]["rows"]]}
    if kept.get("twin_gaps"):
        kept["twin_gaps"] = {k: v for k, v in kept["twin_gaps"].items() if k != "pairs"}
    # the rows the encoder and scales tables read: only the checkpoints those audits ran on
    kept["checkpoints"] = [_row(row) for row in census.get("checkpoints") or []
                           if row.get("encoder") or row.get("scales")]
    dirty = None if commit is not None else bool(_git("status", "--porcelain", "--untracked-files=no"))
    return {"format": FORMAT, "source": {"commit": commit or _git("rev-parse", "HEAD"), "uncommitted_changes": dirty,
                                         "machine": machine(), "command": command,
                                         "date": datetime.now(UTC).isoformat(timespec="seconds")},
            "census": kept}


def _row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A census row cut to what the encoder and scales tables read."""
    kept = {k: row[k] for k in ("checkpoint", "encoder", "population") if k in row}
    scales = row.get("scales")
    if scales:
        kept["scales"] = {k: scales[k] for k in ("status", "displaced", "median_abs_log_ratio", "max_abs_log_ratio")
                          if k in scales}
        kept["scales"]["cells"] = {m: {"shift_pp": c["shift_pp"], "outcome": c["outcome"]}
                                   for m, c in (scales.get("cells") or {}).items()}
    return kept


# --- the renderings -----------------------------------------------------------------------------------------------


def _source(data: Mapping[str, Any]) -> str:
    s = data["source"]
    m = s["machine"]
    dirty = " with uncommitted changes" if s["uncommitted_changes"] else ""
    return (f"Run `{s['command']}` at commit `{s['commit'][:12]}`{dirty} on {m['cpu']} ({m['cores']} cores, "
            f"Python {m['python']}), {s['date']}. The checkpoints are trained in floating point: another machine "
            "prints other digits, and the docs quote this run only.")


FILLER_ROW = {"file": "", "path": "", "factory": None, "trainable_sha256": "", "channel": "present", "anchored": None,
              "cells": {}, "flips": [], "staleness": None, "recoverability_shift_pp": None, "reporting_line": "",
              "annotation": "", "group": "decided",
              "mechanism": {"mechanism": None, "evidence": None, "base_comparison": None, "consistent": None,
                            "reason": "", "base": None, "base_check": "no base named"}}
FILLER_SCALES_CELL = {"shipped": 0.0, "refit": 0.0, "min_shift_pp": 0.0, "max_shift_pp": 0.0, "p_value": None}
FILLER_CONTROL = {"flips": [], "channel": "present", "anchored": None, "expected": "", "cells": {}}


def census_of(extract: Mapping[str, Any]) -> CensusResult:
    """The census model of an extract, for the library's renderings: what the extract cut (most rows and their
    columns, the controls' rows, the mechanism per checkpoint, the provenance arms per checkpoint, the twin pairs)
    filled with empty values, which the renderings the docs quote do not read."""
    census = {key: value for key, value in extract.items() if key != "checkpoints"}
    readings = {key: value for key, value in census["readings"].items() if key != "mechanism_counts"}
    counts = extract["readings"].get("mechanism_counts") or dict.fromkeys(MechanismCounts.model_fields, 0)
    readings["mechanism"] = {"counts": counts, "per_checkpoint": {}}
    if readings.get("provenance"):
        readings["provenance"] = {arm: {**a, "per_checkpoint": {}} for arm, a in readings["provenance"].items()}
    controls = {key: value for key, value in census["controls"].items() if key != "failed"}
    controls["rows"] = [{**FILLER_CONTROL, **row} for row in controls["rows"]]
    rows = []
    for row in extract.get("checkpoints") or []:
        full = {**FILLER_ROW, **row}
        if row.get("scales"):
            full["scales"] = {"reason": "", **row["scales"], "cells": {
                m: {**FILLER_SCALES_CELL, **c} for m, c in (row["scales"].get("cells") or {}).items()}}
        rows.append(full)
    if census.get("twin_gaps"):
        census["twin_gaps"] = {"pairs": [], **census["twin_gaps"]}
    return CensusResult.model_validate({**census, "readings": readings, "controls": controls, "checkpoints": rows,
                                        "identical_weights": [], "decided": []})


def _story(data: Mapping[str, Any]) -> str:
    return "\n".join(f"- {line}" for line in population_story(census_of(data["census"])))


def _families(data: Mapping[str, Any]) -> str:
    census = data["census"]
    cell = census["headline"]
    rows = []
    for f in (census.get("families") or {}).get("families") or []:
        c = f["cells"][cell]
        interval = "—" if c["lower_pp"] is None else f"[{signed(c['lower_pp'])}, {signed(c['upper_pp'])}]"
        rows.append([f"{f['family']} ({f['variant']})", f.get("removal_kind") or "—", str(f["checkpoints"]),
                     str(c["clusters"]), signed(c["mean_shift_pp"]), interval, c["outcome"],
                     f"{c['displaced_by']}"])
    level = round(100 * (census.get("families") or {}).get("level", 0.9))
    return "\n".join(markdown_table(["family (variant)", "removal", "checkpoints", "seed clusters",
                                     f"mean Δ{cell}, pp", f"{level} % interval", "on average", "displaced"], rows))


def _ledger(data: Mapping[str, Any]) -> str:
    # extracts of older censuses are unsorted
    ledger = in_ledger_order([LedgerRow.model_validate(row) for row in data["census"].get("flip_ledger") or []])
    return "\n".join(ledger_table(ledger))


def _provenance(data: Mapping[str, Any]) -> str:
    arms = (data["census"].get("readings") or {}).get("provenance") or {}
    if not arms:
        return "Provenance was not run in this census."
    rows = []
    for arm, a in arms.items():
        ratio = "—" if a["staleness_ratio_median"] is None else (
            f"{a['staleness_ratio_median']:.2f} ({a['staleness_ratio_range'][0]:.2f} … "
            f"{a['staleness_ratio_range'][1]:.2f})")
        rows.append([arm, str(a["checkpoints"]), f"{a['exceeds_null']} of {a['checkpoints']}",
                     signed(a["pooled_forget_shift_pp"]), signed(a["largest_forget_shift_pp"]),
                     f"{a['shift_exceeds_null']} of {a['checkpoints']}", ratio])
    return "\n".join(markdown_table(["arm", "checkpoints", "φ beyond its null band", "pooled Δ forget, pp",
                                     "largest Δ forget, pp", "Δ forget beyond its null", "staleness ÷ arm distance, "
                                     "median (range)"], rows))


def _encoder(data: Mapping[str, Any]) -> str:
    text = encoder_census_markdown(census_of(data["census"])).strip("\n")
    if not text:
        return "The encoder-level diagnostics were not run in this census."
    return text.split("\n", 2)[2].strip("\n")  # without census.md's heading


def _recoverability(data: Mapping[str, Any]) -> str:
    curve = (data["census"].get("readings") or {}).get("recoverability")
    if not curve:
        return "The recoverability curve was not run in this census."
    reading = RecoverabilityReading.model_validate(curve)
    return "\n".join(recoverability_lines(reading)[3:]).strip("\n")  # without census.md's heading


def _scales(data: Mapping[str, Any]) -> str:
    if not (data["census"].get("scales") or {}).get("quantized"):
        return "No checkpoint of this census ships activation scales."
    census = census_of(data["census"])
    return "\n".join([scales_reading(census), *scales_groups_markdown(census)]).strip("\n")


PARTS: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "source": _source, "story": _story, "families": _families, "ledger": _ledger, "provenance": _provenance,
    "encoder": _encoder, "scales": _scales, "recoverability": _recoverability}


# --- regions --------------------------------------------------------------------------------------------------------


def load(name: str) -> dict[str, Any]:
    path = DATA / f"{name}.json"
    if not path.is_file():
        raise SystemExit(f"docs/data/{name}.json is missing; make it with --extract CENSUS_DIR --name {name}")
    data = json.loads(path.read_text("utf-8"))
    if data.get("format") != FORMAT:
        raise SystemExit(f"docs/data/{name}.json is not a {FORMAT} extract")
    return data


def render(text: str, *, loader: Callable[[str], Mapping[str, Any]] = load) -> str:
    """The text with every generated region rendered from its extract."""
    def replace(match: re.Match[str]) -> str:
        part = match.group("part")
        if part not in PARTS:
            raise SystemExit(f"unknown generated part {part!r}; known: {', '.join(PARTS)}")
        body = PARTS[part](loader(match.group("name")))
        return f"{match.group(1)}{body}\n{match.group(5)}"
    return REGION.sub(replace, text)


def stale_pages(docs: Path = DOCS) -> list[str]:
    """The pages whose generated regions differ from their extracts."""
    return [p.name for p in sorted(docs.glob("*.md")) if render(p.read_text("utf-8")) != p.read_text("utf-8")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="exit 1 when a generated region is out of date")
    mode.add_argument("--write", action="store_true", help="regenerate every region from the committed extracts")
    mode.add_argument("--extract", metavar="CENSUS_DIR", help="refresh docs/data/NAME.json from a census folder")
    parser.add_argument("--name", help="the extract's name (with --extract)")
    parser.add_argument("--command", help="the command that produced the census (with --extract)")
    parser.add_argument("--commit", help="the commit the census ran at (with --extract; default: HEAD here)")
    args = parser.parse_args(argv)
    if args.extract:
        if not args.name or not args.command:
            parser.error("--extract needs --name and --command")
        census = json.loads((Path(args.extract) / "census.json").read_text("utf-8"))
        DATA.mkdir(parents=True, exist_ok=True)
        data = extract(census, command=args.command, commit=args.commit)
        atomic_write_text(DATA / f"{args.name}.json", json.dumps(data, indent=1, ensure_ascii=False) + "\n")
        print(f"wrote docs/data/{args.name}.json; run --write to regenerate the pages")
        return 0
    if args.write:
        for page in sorted(DOCS.glob("*.md")):
            text = page.read_text("utf-8")
            if render(text) != text:
                atomic_write_text(page, render(text))
                print(f"regenerated {page.relative_to(REPO)}")
        return 0
    stale = stale_pages()
    for name in stale:
        print(f"docs/{name}: a generated region differs from its extract; run scripts/docs_census.py --write",
              file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
