"""Write the report folder: ``index.html``, ``plots/*.png`` and ``annotations/*.json`` copied next to it, and
``population.html`` (the census page of a population) when the report has one.

The folder is built complete in ``.<name>.partial`` beside the target and then swapped into place, so a reader
(or a browser) never sees half a report, and a failure leaves the previous report as it was.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from bnconvention.errors import UsageError
from bnconvention.formats.atomic import atomic_write_bytes, atomic_write_text, replace_directory
from bnconvention.report_html.census_page import render_census_page
from bnconvention.report_html.model import ReportInput, checkpoint_key, slug
from bnconvention.report_html.render import POPULATION_PAGE, render_index

INDEX = "index.html"
PLOTS_DIR = "plots"
ANNOTATIONS_DIR = "annotations"
MARKER = ".bnconvention-report"


def _copy(source: Path, target: Path) -> None:
    atomic_write_bytes(target, source.read_bytes())


def _build(report: ReportInput, folder: Path) -> None:
    (folder / PLOTS_DIR).mkdir(parents=True)
    (folder / ANNOTATIONS_DIR).mkdir()
    links: dict[tuple[str, str], dict[str, str]] = {}
    for audit, item in report.audited_files():
        files = report.files.get((audit.repo_id, item.filename))
        if files is None:
            continue
        key = checkpoint_key(audit.repo_id, item.filename)
        entry: dict[str, str] = {}
        for kind, source in sorted(files.plots.items()):
            name = f"{PLOTS_DIR}/{key}-{slug(kind)}.png"
            _copy(Path(source), folder / name)
            entry[kind] = name
        if files.annotation is not None:
            stem = Path(item.annotation_path or files.annotation.name).name.removesuffix(".json")
            name = f"{ANNOTATIONS_DIR}/{slug(audit.repo_id)}--{slug(stem)}.json"  # one extension
            _copy(Path(files.annotation), folder / name)
            entry["annotation"] = name
        links[(audit.repo_id, item.filename)] = entry
    if report.population_census is not None:
        atomic_write_text(folder / POPULATION_PAGE, render_census_page(report.population_census))
    atomic_write_text(folder / INDEX, render_index(report, links=links))
    atomic_write_text(folder / MARKER, "a bnconvention HTML report; rewritten as a whole on every run\n")


def write_report(report: ReportInput, out_dir: str | os.PathLike[str]) -> Path:
    """Write the report into ``out_dir`` (replacing a previous report there) and return the path of ``index.html``.

    ``out_dir`` must be missing, empty, or a previous report (it holds the marker file); anything else is refused
    rather than replaced.
    """
    out = Path(out_dir).resolve()
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / MARKER).is_file())):
        raise UsageError(f"report folder {out} exists and is not a previous bnconvention report; choose another "
                         "folder (a report replaces the whole folder)")
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.parent / f".{out.name}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    try:
        _build(report, partial)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    replace_directory(partial, out)
    return out / INDEX


__all__ = ["ANNOTATIONS_DIR", "INDEX", "MARKER", "PLOTS_DIR", "write_report"]
