"""The optional ``diagnostics`` section of an audit spec: seed 003's encoder-level diagnostics (issue 14).

Off by default: a spec without the section audits exactly as before (and digests as before: the section is left
out of the spec's dump when absent). With it, each named diagnostic is measured as shipped and after an exact retain
refit on each replicate's pool, at bit-identical θ:

.. code-block:: yaml

    diagnostics:
      reference:                       # the retrain-from-scratch checkpoint the NC-residual compares with
        path: "../{seed_stem}-retrain/{seed_stem}-retrain.safetensors"
      linear_probe: {per_class: 20}    # forget linear probe and its BN/NC decomposition
      membership_inference: {}         # loss-threshold attack AUC, forget against test
      relearning: {target_forget_accuracy: 0.9}

``reference.path`` is relative to the audited checkpoint's folder; ``{name}`` is the checkpoint's name and
``{seed_stem}`` its name up to and including the first ``-s<digits>`` part (``c3-s0-gradascent-train`` → ``c3-s0``),
which names the population's retrain sibling ``<removal>-s<seed>-retrain`` (docs/population.md).
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, model_validator

from bnconvention.audit.spec_data import SpecModel, Text
from bnconvention.errors import AuditSpecError

PositiveInt = Annotated[int, Field(ge=1)]
Fraction = Annotated[float, Field(ge=0, le=1)]
SEED_STEM = re.compile(r"^(.*?-s\d+)(?:-|$)")
PLACEHOLDERS = ("name", "seed_stem")

# The smallest inputs the protocols accept (bad input below them: an error naming the cell, nothing computed).
MIN_PROBE_TEST_RECORDS = 2
MIN_ATTACK_RECORDS = 10
MIN_BOOTSTRAP = 20


class ReferenceSpec(SpecModel):
    path: Text = Field(description=(
        "The retrain reference's weights file, relative to the audited checkpoint's folder (or absolute); "
        "'{name}' is the checkpoint's name, '{seed_stem}' its name up to its '-s<seed>' part."))

    @model_validator(mode="after")
    def _placeholders(self) -> ReferenceSpec:
        for found in re.findall(r"{([^{}]*)}", self.path):
            if found not in PLACEHOLDERS:
                raise ValueError(f"unknown placeholder {{{found}}} in reference.path; use {{name}} or {{seed_stem}}")
        return self


class LinearProbeSpec(SpecModel):
    feature_layer: Text | None = Field(default=None, description=(
        "Module whose input is the feature vector; default the last torch.nn.Linear (the classifier head)."))
    train_split: Literal["test", "retain"] = Field(default="test", description=(
        "Split the probe is trained on (per_class records of each class); it is scored on the forget split."))
    per_class: PositiveInt = Field(default=50, description="Training records per class (50 in seed 003).")
    test_records: PositiveInt | None = Field(default=None, description="Forget records scored; default all.")
    max_iter: PositiveInt = Field(default=1000, description="lbfgs iteration cap (1000 in seed 003).")
    inverse_regularization: Annotated[float, Field(gt=0)] = Field(default=1.0, description="sklearn's C.")
    standardize: bool = Field(default=True, description="Standardize features with the probe-train moments.")


class MembershipSpec(SpecModel):
    attack: Literal["loss-threshold", "confidence-threshold"] = Field(default="loss-threshold", description=(
        "Score per record: minus the cross-entropy loss, or the largest softmax probability."))
    records_per_side: PositiveInt | None = Field(default=None, description=(
        f"Forget (member) and test (non-member) records drawn per side; default the smaller split; at least "
        f"{MIN_ATTACK_RECORDS}."))
    class_matched: bool = Field(default=True, description=(
        "Draw non-members only among the test records of the forget split's classes (for a class removal: the "
        "forget class), so the attack compares membership, not class."))
    bootstrap: Annotated[int, Field(ge=MIN_BOOTSTRAP)] = Field(default=200, description="Bootstrap resamples.")
    level: Annotated[float, Field(gt=0, lt=1)] = Field(default=0.95, description="Coverage of the intervals.")


class RelearningSpec(SpecModel):
    target_forget_accuracy: Fraction = Field(description="The forget accuracy fine-tuning must reach.")
    records: PositiveInt = Field(default=32, description="Forget records fine-tuned on.")
    batch_size: PositiveInt = Field(default=16, description="Records per step.")
    learning_rate: Annotated[float, Field(gt=0)] = Field(default=0.05, description="Plain SGD step size.")
    max_steps: PositiveInt = Field(default=50, description="The budget (a state not reaching the target: null).")
    replicates: PositiveInt = Field(default=3, description="Refit replicates fine-tuned (the first ones).")


class DiagnosticsSpec(SpecModel):
    reference: ReferenceSpec | None = Field(default=None, description=(
        "The retrain reference: the linear probe's NC-residual and the cells' reference arm; none without it."))
    linear_probe: LinearProbeSpec | None = Field(default=None, description="Forget linear-probe decomposition.")
    membership_inference: MembershipSpec | None = Field(default=None, description="Threshold membership attack.")
    relearning: RelearningSpec | None = Field(default=None, description="Relearning susceptibility.")

    @property
    def any(self) -> bool:
        return any(x is not None for x in (self.linear_probe, self.membership_inference, self.relearning))


def seed_stem(name: str) -> str | None:
    """A checkpoint name up to its ``-s<seed>`` part, or None when it has none.

    >>> seed_stem("c3-s0-gradascent-train"), seed_stem("r10-s12-twin1-online"), seed_stem("bn-baseline")
    ('c3-s0', 'r10-s12', None)
    """
    found = SEED_STEM.match(name)
    return found.group(1) if found else None


def reference_path(template: str, *, name: str) -> str:
    """The reference's path for checkpoint ``name`` (still relative to its folder when the template is)."""
    stem = seed_stem(name)
    if "{seed_stem}" in template and stem is None:
        raise AuditSpecError(f"diagnostics.reference.path uses {{seed_stem}} but checkpoint {name!r} has no "
                             "'-s<seed>' part in its name; name the reference file directly",
                             field="/diagnostics/reference/path")
    return template.replace("{name}", name).replace("{seed_stem}", stem or "")


__all__ = ["MIN_ATTACK_RECORDS", "MIN_BOOTSTRAP", "MIN_PROBE_TEST_RECORDS", "DiagnosticsSpec", "LinearProbeSpec",
           "MembershipSpec", "ReferenceSpec", "RelearningSpec", "reference_path", "seed_stem"]
