"""The encoder-level diagnostics in reports: the audit summary's section, the census row's columns, census.md's table.

Pure functions over a (1.1) annotation or the census model. The reading (Kalani et al., Corollary 2): the BN-residual
``LP_M - LP_Mcal`` is what the shipped running statistics do to the surface probe; negative means the shipped state
*hides* encoder leakage that the exact refit reveals, positive that the surface probe overstates it. The
NC-residual ``LP_Mcal - LP_retr`` is what the encoder keeps beyond a model retrained without the removed records.
"""

from __future__ import annotations

from typing import Any

from bnconvention.audit.population.families import census_group, control_labels
from bnconvention.audit.population.model import CensusResult
from bnconvention.audit.population.model_rows import EncoderColumns
from bnconvention.formats.text import markdown_table, plural, signed
from bnconvention.standard.diagnostics import Interval

READING = ("BN-residual = LP_M − LP_Mcal (shipped minus exact retain refit); negative: the shipped state hides "
           "encoder leakage the refit reveals. NC-residual = LP_Mcal − LP_retr: what the encoder keeps beyond the "
           "retrain reference.")


def _interval(value: Any) -> str:
    return "—" if value is None else f"{signed(value.estimate)} [{signed(value.lower)}, {signed(value.upper)}]"


def _steps(value: int | None) -> str:
    return "not reached" if value is None else str(value)


def encoder_lines(annotation: Any) -> list[str]:
    """The audit summary's section (nothing for an annotation without the diagnostics)."""
    probe = getattr(annotation, "linear_probe", None)
    attack = getattr(annotation, "membership_inference", None)
    relearning = getattr(annotation, "relearning", None)
    if probe is None and attack is None and relearning is None:
        return []
    lines = ["", "## Encoder-level diagnostics", ""]
    if probe is not None:
        p = probe.protocol
        lines += [f"Forget linear probe (`{probe.metric}`): lbfgs logistic regression on the input of "
                  f"`{p.feature_layer}`, {p.per_class} {p.train_split} records per class ({p.classes} classes), "
                  f"scored on {plural(p.test_records, 'forget record')}; intervals are t over the replicates. "
                  f"{READING}", ""]
        lines += markdown_table(["", "pp (95 % interval)"], [["BN-residual", _interval(probe.bn_residual_pp)],
                                                             ["NC-residual", _interval(probe.nc_residual_pp)]])
    if attack is not None:
        a = attack.protocol
        lines += ["", f"Membership attack (`{attack.metric}`, {a.attack}): {a.records_per_side} forget against "
                      f"{a.records_per_side} test records, {a.bootstrap} bootstrap resamples.", ""]
        lines += markdown_table(["", "AUC (95 % interval)"], [
            ["shipped", f"{attack.auc_shipped.estimate:.4f} [{attack.auc_shipped.lower:.4f}, "
                        f"{attack.auc_shipped.upper:.4f}]"],
            ["refit", f"{attack.auc_refit.estimate:.4f} [{attack.auc_refit.lower:.4f}, {attack.auc_refit.upper:.4f}]"],
            ["shift (pp)", _interval(attack.shift_pp)]])
    if relearning is not None:
        r = relearning.protocol
        lines += ["", f"Relearning: SGD (lr {r.learning_rate:g}, batch {r.batch_size}, BatchNorm frozen) on "
                      f"{plural(r.records, 'forget record')} until forget accuracy {r.target_forget_accuracy:g}, at "
                      f"most {r.max_steps} steps, on a copy: shipped {_steps(relearning.steps_shipped)}, refit "
                      f"{', '.join(_steps(s) for s in relearning.steps_refit)}.{_area_sentence(relearning)}"]
    return lines


def _area(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def _area_sentence(relearning: Any) -> str:
    """The areas under the forget-accuracy trajectories, when the record gives them (optional in 1.1)."""
    if relearning.area_shipped is None and relearning.area_refit is None:
        return ""
    refit = ", ".join(_area(a) for a in relearning.area_refit or [])
    return (f" Mean forget accuracy over steps 0..{relearning.protocol.max_steps} (area): shipped "
            f"{_area(relearning.area_shipped)}, refit {refit or '—'}.")


def encoder_row(annotation: Any) -> EncoderColumns | None:
    """The census columns of one checkpoint (None without the diagnostics)."""
    probe = getattr(annotation, "linear_probe", None)
    attack = getattr(annotation, "membership_inference", None)
    relearning = getattr(annotation, "relearning", None)
    if probe is None and attack is None and relearning is None:
        return None
    lp = None if probe is None else {c.metric: c for c in annotation.cells}[probe.metric]
    return EncoderColumns(
        lp_shipped=None if lp is None else lp.shipped,
        lp_refit=None if lp is None else lp.refit,
        lp_reference=None if lp is None or lp.reference is None else lp.reference.value,
        bn_residual_pp=None if probe is None else probe.bn_residual_pp,
        nc_residual_pp=None if probe is None else probe.nc_residual_pp,
        mia_auc_shipped=None if attack is None else attack.auc_shipped,
        mia_auc_refit=None if attack is None else attack.auc_refit,
        mia_shift_pp=None if attack is None else attack.shift_pp,
        relearn_steps_shipped=None if relearning is None else relearning.steps_shipped,
        relearn_steps_refit=None if relearning is None else relearning.steps_refit,
        relearn_area_shipped=None if relearning is None else relearning.area_shipped,
        relearn_area_refit=None if relearning is None else relearning.area_refit)


def _pp(interval: Interval | None) -> str:
    if interval is None:
        return "—"
    return f"{signed(interval.estimate)} [{signed(interval.lower)}, {signed(interval.upper)}]"


def _auc(interval: Interval | None) -> str:
    return "—" if interval is None else f"{interval.estimate:.3f}"


def _excludes_zero(interval: Interval | None, *, below: bool) -> bool:
    if interval is None:
        return False
    return bool(interval.upper < 0) if below else bool(interval.lower > 0)


def _mean(values: list[float]) -> str:
    return "—" if not values else signed(sum(values) / len(values))


def _group_row(label: str, rows: list[EncoderColumns]) -> list[str]:
    bn = [r.bn_residual_pp for r in rows if r.bn_residual_pp is not None]
    nc = [r.nc_residual_pp.estimate for r in rows if r.nc_residual_pp is not None]
    shipped = [r.mia_auc_shipped.estimate for r in rows if r.mia_auc_shipped is not None]
    refit = [r.mia_auc_refit.estimate for r in rows if r.mia_auc_refit is not None]
    moved = sum(_excludes_zero(r.mia_shift_pp, below=True) or _excludes_zero(r.mia_shift_pp, below=False)
                for r in rows)
    estimates = [b.estimate for b in bn]
    spread = f" [{signed(min(estimates))}, {signed(max(estimates))}]" if estimates else ""
    return [label, str(len(rows)), _mean(estimates) + spread,
            str(sum(_excludes_zero(b, below=True) for b in bn)), str(sum(_excludes_zero(b, below=False) for b in bn)),
            _mean(nc), "—" if not shipped else f"{sum(shipped) / len(shipped):.3f}",
            "—" if not refit else f"{sum(refit) / len(refit):.3f}", f"{moved} of {len(rows)}" if shipped else "—"]


def encoder_groups_markdown(census: CensusResult) -> list[str]:
    """The diagnostics summarised per group (control label, family and variant, twin arm): how often the shipped
    state hides (BN-residual interval below 0) or overstates (above 0) the probe, and how often the refit moves the
    attack (its shift interval excludes 0). Groups in first-seen order; nothing without diagnostics."""
    controls = control_labels(census)
    groups: dict[str, list[EncoderColumns]] = {}
    for entry in census.checkpoints:
        if entry.encoder is not None:
            groups.setdefault(census_group(entry, controls), []).append(entry.encoder)
    if not groups:
        return []
    lines = ["", "### Per group", "",
             "Means over each group's checkpoints; *hides* / *overstates*: checkpoints whose BN-residual interval "
             "lies below / above 0; *attack moved*: those whose refit-minus-shipped AUC interval excludes 0.", ""]
    return lines + markdown_table(["group", "n", "BN-residual pp mean [min, max]", "hides", "overstates",
                                   "NC-residual pp mean", "MIA AUC shipped", "MIA AUC refit", "attack moved"],
                                  [_group_row(label, rows) for label, rows in groups.items()])


def encoder_census_markdown(census: CensusResult) -> str:
    """census.md's table of the diagnostics per checkpoint and per group; empty when no checkpoint has them."""
    rows = []
    for entry in census.checkpoints:
        row = entry.encoder
        if row is None:
            continue
        steps = row.relearn_steps_refit
        rows.append([entry.checkpoint, _pp(row.bn_residual_pp), _pp(row.nc_residual_pp),
                     _auc(row.mia_auc_shipped), _auc(row.mia_auc_refit),
                     _steps(row.relearn_steps_shipped) if steps is not None else "—",
                     ", ".join(_steps(s) for s in steps) if steps else "—", _area(row.relearn_area_shipped),
                     ", ".join(_area(a) for a in row.relearn_area_refit or []) or "—"])
    if not rows:
        return ""
    lines = ["", "## Encoder-level diagnostics", "", READING, ""]
    lines += markdown_table(["checkpoint", "BN-residual pp", "NC-residual pp", "MIA AUC shipped", "MIA AUC refit",
                             "relearn steps shipped", "relearn steps refit", "relearn area shipped",
                             "relearn area refit"], rows)
    lines += encoder_groups_markdown(census)
    return "\n".join(lines) + "\n"


__all__ = ["READING", "encoder_census_markdown", "encoder_groups_markdown", "encoder_lines", "encoder_row"]
