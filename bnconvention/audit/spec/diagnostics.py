"""The optional ``diagnostics`` section of an audit spec: the encoder-level diagnostics of
docs/statistics.md#encoder-level-diagnostics-linear-probe-membership-attack-relearning.

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
which names the population's retrain sibling ``<removal>-s<seed>-retrain`` (docs/population.md). On a Hub, where
``hub audit`` downloads each repo alone, the reference is a file of another repo instead:
``reference: {repo: "{org}/{seed_stem}-retrain", filename: model.safetensors}`` (``{org}``: the audited repo's
owner; ``{name}``: its name), which ``hub audit`` downloads at a pinned commit (:mod:`bnconvention.hub_audit.reference`)
and a local audit refuses.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from bnconvention.audit.spec.data import (
    MAX_BATCH,
    MAX_ITERATIONS,
    MAX_RECORDS,
    MAX_REPLICATES,
    BatchSize,
    Iterations,
    Records,
    Replicates,
    SpecModel,
    Text,
)
from bnconvention.errors import AuditSpecError

Fraction = Annotated[float, Field(ge=0, le=1)]
SEED_STEM = re.compile(r"^(.*?-s\d+)(?:-|$)")
PLACEHOLDERS = ("name", "seed_stem")
REPO_PLACEHOLDERS = ("org", "name", "seed_stem")

# The smallest inputs the protocols accept (bad input below them: an error naming the cell, nothing computed).
MIN_PROBE_TEST_RECORDS = 2
MIN_ATTACK_RECORDS = 10
MIN_BOOTSTRAP = 20


class ReferenceSpec(SpecModel):
    path: Text | None = Field(default=None, description=(
        "The retrain reference's weights file, relative to the audited checkpoint's folder (or absolute); "
        "'{name}' is the checkpoint's name, '{seed_stem}' its name up to its '-s<seed>' part. With 'repo': where "
        "the local copy of that Hub file is (what hub audit writes once it downloaded it)."))
    repo: Text | None = Field(default=None, description=(
        "The Hub form, for hub audit (each repo is downloaded alone): the reference's model repo, e.g. "
        "'{org}/{seed_stem}-retrain'; '{org}' is the audited repo's owner, '{name}' its name, '{seed_stem}' its "
        "name up to its '-s<seed>' part. Downloaded through huggingface_hub at a pinned commit, safetensors only."))
    filename: Text | None = Field(default=None, description=(
        "With 'repo': the reference's single .safetensors file in that repo (placeholders as in 'path')."))
    revision: Text | None = Field(default=None, description=(
        "With 'repo': the branch, tag or commit to read (default main); hub audit pins the commit it resolves."))

    @model_validator(mode="after")
    def _placeholders(self) -> ReferenceSpec:
        if self.path is None and self.repo is None:
            raise ValueError("reference needs 'path' (a local file) or 'repo' and 'filename' (a Hub file)")
        if self.repo is None and (self.filename is not None or self.revision is not None):
            raise ValueError("reference 'filename' and 'revision' name a file of a Hub repo: give 'repo' too")
        if self.repo is not None and self.filename is None:
            raise ValueError("reference 'repo' needs 'filename', the .safetensors file in that repo")
        if self.filename is not None and not self.filename.endswith(".safetensors"):
            raise ValueError(f"reference filename {self.filename!r} is not a .safetensors file (a single file: "
                             "no pickle, no shard index)")
        for key, value in (("path", self.path), ("repo", self.repo), ("filename", self.filename)):
            allowed = REPO_PLACEHOLDERS if key == "repo" else PLACEHOLDERS
            for found in re.findall(r"{([^{}]*)}", value or ""):
                if found not in allowed:
                    names = " or ".join(f"{{{p}}}" for p in allowed)
                    raise ValueError(f"unknown placeholder {{{found}}} in reference.{key}; use {names}")
        return self

    @model_serializer(mode="wrap")
    def _without_absent_fields(self, handler: SerializerFunctionWrapHandler) -> Any:
        # A local reference ({path}) dumps, and so digests (journal keys), exactly as before the Hub form existed.
        data = handler(self)
        return {k: v for k, v in data.items() if v is not None} if isinstance(data, dict) else data

    @property
    def on_hub(self) -> bool:
        """Whether the reference is a file of a Hub repo (``repo``), not only a local path."""
        return self.repo is not None


class LinearProbeSpec(SpecModel):
    feature_layer: Text | None = Field(default=None, description=(
        "Module whose input is the feature vector; default the last torch.nn.Linear (the classifier head)."))
    train_split: Literal["test", "retain"] = Field(default="test", description=(
        "Split the probe is trained on (per_class records of each class); it is scored on the forget split."))
    per_class: Records = Field(default=50, description=(
        f"Training records per class (50 in Kalani et al.; at most {MAX_RECORDS:,})."))
    test_records: Records | None = Field(default=None, description=(
        f"Forget records scored; default all (at most {MAX_RECORDS:,})."))
    max_iter: Iterations = Field(default=1000, description=(
        f"lbfgs iteration cap (1000 in Kalani et al.; at most {MAX_ITERATIONS:,})."))
    inverse_regularization: Annotated[float, Field(gt=0)] = Field(default=1.0, description="sklearn's C.")
    standardize: bool = Field(default=True, description="Standardize features with the probe-train moments.")


class MembershipSpec(SpecModel):
    attack: Literal["loss-threshold", "confidence-threshold"] = Field(default="loss-threshold", description=(
        "Score per record: minus the cross-entropy loss, or the largest softmax probability."))
    records_per_side: Records | None = Field(default=None, description=(
        f"Forget (member) and test (non-member) records drawn per side; default the smaller split; at least "
        f"{MIN_ATTACK_RECORDS}, at most {MAX_RECORDS:,}."))
    class_matched: bool = Field(default=True, description=(
        "Draw non-members only among the test records of the forget split's classes (for a class removal: the "
        "forget class), so the attack compares membership, not class."))
    bootstrap: Annotated[int, Field(ge=MIN_BOOTSTRAP, le=MAX_ITERATIONS)] = Field(default=200, description=(
        f"Bootstrap resamples (at most {MAX_ITERATIONS:,})."))
    level: Annotated[float, Field(gt=0, lt=1)] = Field(default=0.95, description="Coverage of the intervals.")


class RelearningSpec(SpecModel):
    target_forget_accuracy: Fraction = Field(description="The forget accuracy fine-tuning must reach.")
    records: Records = Field(default=32, description=f"Forget records fine-tuned on (at most {MAX_RECORDS:,}).")
    batch_size: BatchSize = Field(default=16, description=f"Records per step (at most {MAX_BATCH:,}).")
    learning_rate: Annotated[float, Field(gt=0)] = Field(default=1e-4, description=(
        "Plain SGD step size. Default 1e-4: fine-tuning on a removed class alone, a larger step makes any state "
        "predict that class after one or two steps (0.05 reached 0.9 in 0-2 steps on every c3 checkpoint of the "
        "population); at 1e-4 bases take 0-2 steps, unlearned checkpoints 5-11, retrain references never reach it "
        "(docs/statistics.md)."))
    max_steps: Iterations = Field(default=50, description=(
        f"The budget (a state not reaching the target: null; at most {MAX_ITERATIONS:,} steps)."))
    replicates: Replicates = Field(default=3, description=(
        f"Refit replicates fine-tuned (the first ones; at most {MAX_REPLICATES:,})."))


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


def reference_path(template: str, *, name: str, org: str | None = None, field: str = "path") -> str:
    """The reference's path (or repo, or filename) for checkpoint ``name`` (of owner ``org`` on a Hub): the
    placeholders filled in; still relative to the checkpoint's folder when the template is."""
    stem = seed_stem(name)
    if "{seed_stem}" in template and stem is None:
        raise AuditSpecError(f"diagnostics.reference.{field} uses {{seed_stem}} but checkpoint {name!r} has no "
                             "'-s<seed>' part in its name; name the reference file directly",
                             field=f"/diagnostics/reference/{field}")
    if "{org}" in template and org is None:
        raise AuditSpecError(f"diagnostics.reference.{field} uses {{org}}, which only a Hub audit knows",
                             field=f"/diagnostics/reference/{field}")
    return template.replace("{name}", name).replace("{seed_stem}", stem or "").replace("{org}", org or "")
