"""Write an audit's files, each atomically, only after the whole audit has been computed.

In the output folder:

* ``annotation.json`` — the refit annotation of the standard (a ``refit_annotation`` record), 2-space indented JSON
  in the models' field order with a trailing newline; it passes ``bnconvention validate``. Indented rather than
  canonical because people read it; its canonical form (and sha256) is one call away
  (:func:`bnconvention.formats.canonical.canonical_json`), which is what the hub scripts name the pushed file by.
* ``summary.md`` — the Markdown summary; ``cells.png`` and ``staleness.png`` — the plots (and ``recoverability.png``
  when the audit ran a recoverability curve).
* ``scales_annotation.json`` — with the spec's ``quantization`` section and a checkpoint that ships activation
  scales: the 1.1 refit annotation of its scales (:mod:`bnconvention.audit.scales.stage`); it validates too.
* ``result.json`` — the full :class:`~bnconvention.audit.core.result.AuditResult` (annotation plus sign tests, reference
  band per layer, per-replicate pools and timings), the census journal's format.
"""

from __future__ import annotations

from pathlib import Path

from bnconvention.audit.core.files import ANNOTATION_FILE, SCALES_ANNOTATION_FILE, json_text
from bnconvention.audit.core.result import AuditResult
from bnconvention.audit.render.markdown import PLOT_FILES, audit_markdown
from bnconvention.audit.render.plots import cells_figure, recoverability_figure, staleness_figure
from bnconvention.formats.atomic import atomic_write_bytes
from bnconvention.standard.models import to_dict

SUMMARY_FILE = "summary.md"
RESULT_FILE = "result.json"
CURVE_PLOT = "recoverability.png"


def annotation_text(result: AuditResult) -> str:
    return json_text(to_dict(result.annotation))


def write_audit_outputs(result: AuditResult, out_dir: str | Path, *, plots: bool = True) -> dict[str, Path]:
    """Write the annotation, summary, plots and full result into ``out_dir`` (created if needed)."""
    out = Path(out_dir)
    # render everything first: a failure while plotting must not leave half of the files behind
    files: dict[str, bytes] = {ANNOTATION_FILE: annotation_text(result).encode("utf-8")}
    embedded = dict(PLOT_FILES)
    if plots:
        files[PLOT_FILES["cells"]] = cells_figure(result)
        files[PLOT_FILES["staleness"]] = staleness_figure(result)
        curve = recoverability_figure(result)
        if curve is not None:  # only when the audit ran a recoverability curve
            files[CURVE_PLOT] = curve
            embedded["recoverability"] = CURVE_PLOT
    files[SUMMARY_FILE] = audit_markdown(result, plots=embedded if plots else None).encode("utf-8")
    files[RESULT_FILE] = json_text(result.model_dump(mode="json")).encode("utf-8")
    if result.scales is not None and result.scales.annotation is not None:  # the second deployed state's record
        files[SCALES_ANNOTATION_FILE] = json_text(to_dict(result.scales.annotation)).encode("utf-8")
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, data in files.items():
        atomic_write_bytes(out / name, data)
        written[name] = out / name
    return written
