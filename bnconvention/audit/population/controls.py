"""Known-answer negative controls of a census: which checkpoints they are, and whether each gave its answer.

A control is a checkpoint whose answer is known before the audit: a channel-absent model (GroupNorm, LayerNorm: no
running statistics, so a refit is the identity and every replicate shift is exactly 0.00 pp), and the checkpoints
the spec names under ``controls.checkpoints`` (the no-removal base, the retrain reference: no cell displaced).
Controls are reported in their own table and never enter the Benjamini–Yekutieli family, the population counts,
the sweeps or the detection floor: m counts the checkpoints whose answer is not known.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence

from bnconvention.audit.core.result import AuditResult
from bnconvention.audit.population.model_sections import Background, BackgroundRate, ControlCell, ControlRow, Controls
from bnconvention.audit.spec.audit_spec import AuditSpec

CHANNEL_ABSENT_LABEL = "channel absent"
EXPECT_ZERO = "every replicate shift exactly 0.00 pp"
EXPECT_NOT_DISPLACED = "no cell displaced"


def control_label(name: str, result: AuditResult, spec: AuditSpec) -> str | None:
    """The control's label (the first spec pattern matching the name, else 'channel absent'), or None."""
    for pattern, label in spec.controls.checkpoints.items():
        if fnmatch.fnmatchcase(name, pattern):
            return label
    if spec.controls.channel_absent and result.annotation.channel == "absent":
        return CHANNEL_ABSENT_LABEL
    return None


def control_row(name: str, label: str, result: AuditResult) -> ControlRow:
    """One control: its known answer, whether it held, and each cell's outcome and largest |shift|."""
    # the spec's cells (those with a sign test): the encoder diagnostics' typed cells answer other questions
    cells = [c for c in result.annotation.cells if c.metric in result.sign_tests]
    absent = result.annotation.channel == "absent"
    if absent:
        holds = all(s == 0.0 for c in cells for s in c.replicate_shifts_pp)
    else:
        holds = all(c.decision.outcome != "displaced" for c in cells)
    return ControlRow(
        checkpoint=name,
        label=label,
        flips=[v.criterion for v in result.annotation.verdicts if v.flipped],
        channel=result.annotation.channel,
        anchored=result.anchored,
        expected=EXPECT_ZERO if absent else EXPECT_NOT_DISPLACED,
        holds=holds,
        cells={c.metric: ControlCell(outcome=c.decision.outcome, shift_pp=c.shift_pp,
                                     max_abs_shift_pp=max(abs(s) for s in c.replicate_shifts_pp)) for c in cells},
    )


def controls_table(results: Sequence[AuditResult], names: Sequence[str], labels: Sequence[str | None],
                   spec: AuditSpec) -> Controls:
    """The controls' table for census.json: how many, how many gave their known answer, one row each, and the
    background rates (:func:`background`)."""
    rows = [control_row(name, label, result)
            for result, name, label in zip(results, names, labels, strict=True) if label is not None]
    return Controls(controls=len(rows), as_expected=sum(row.holds for row in rows), rows=rows,
                    background=background(rows, metrics=[c.text for c in spec.cell_expressions()],
                                          criteria=[c.text for c in spec.criterion_expressions()]))


def background(rows: Sequence[ControlRow], *, metrics: Sequence[str], criteria: Sequence[str]) -> Background:
    """The census's background rates: over the BatchNorm controls (channel present, not refused by anchoring),
    how many are displaced on each cell and flip each criterion, in all and per label. A control's answer is
    known, so every displacement or flip among them is what the instrument reports where there is nothing to
    find; it is printed beside every headline count. Channel-absent controls cannot move (a refit is the
    identity) and are left out of the denominator."""
    bn = [row for row in rows if row.channel == "present" and row.anchored is not False]

    def rates(members: Sequence[ControlRow]) -> BackgroundRate:
        return BackgroundRate(
            checkpoints=len(members),
            displaced={m: sum(m in row.cells and row.cells[m].outcome == "displaced" for row in members)
                       for m in metrics},
            flips={c: sum(c in row.flips for row in members) for c in criteria})

    every = rates(bn)
    return Background(checkpoints=every.checkpoints, displaced=every.displaced, flips=every.flips,
                      by_label={label: rates([row for row in bn if row.label == label])
                                for label in sorted({row.label for row in bn})})
