"""The encoder-level diagnostics a refit annotation can carry (spec version 1.1; see
docs/statistics.md#encoder-level-diagnostics-linear-probe-membership-attack-relearning).

They separate *measurement failure* (the running statistics) from *encoder failure* (the weights still encode the
removed data). Three diagnostics say which one a checkpoint has, each as shipped and after an exact retain refit at
bit-identical θ: the forget linear probe with its decomposition (BN-residual ``LP_M - LP_Mcal``, NC-residual
``LP_Mcal - LP_retr`` against the retrain reference), a shadow-free membership attack (AUC with a bootstrap
interval) and relearning susceptibility (fine-tuning steps to a stated forget accuracy). A cell has a ``unit`` and a
``reference`` arm (:mod:`.cells`), and each diagnostic its protocol, so another tool can rerun it. Every object
here is reached only through a field marked ``since("1.1")``.
"""

from __future__ import annotations

from typing import Annotated, Literal, TypeAlias

from pydantic import Field

from bnconvention.standard.fields import Count, Int, NonEmptyStr, PositiveInt, Sha256Hex, SplitRole, StrictModel

Fraction = Annotated[float, Field(ge=0, le=1)]
Level = Annotated[float, Field(gt=0, lt=1)]
PositiveFloat = Annotated[float, Field(gt=0)]

CellUnit: TypeAlias = Literal["fraction", "pp", "auc"]
ReferenceArmKind: TypeAlias = Literal["retrain"]
AttackKind: TypeAlias = Literal["loss-threshold", "confidence-threshold"]


class CellReference(StrictModel):
    """The reference arm a cell compares with: the checkpoint retrained from scratch without the removed records."""

    arm: ReferenceArmKind = Field(description="'retrain': trained from scratch on the retained records only.")
    filename: NonEmptyStr = Field(description="Path of the reference's weights file inside its repository.")
    repo: NonEmptyStr | None = Field(default=None, description="The reference's repository id.")
    revision: NonEmptyStr | None = Field(default=None, description="Revision of the reference.")
    trainable_sha256: Sha256Hex = Field(description="Trainable digest of the reference.")
    running_sha256: Sha256Hex | None = Field(default=None, description="Running digest of the reference as shipped.")
    value: float = Field(description="The cell on the reference, as it ships, in the cell's unit.")


class Interval(StrictModel):
    """A point estimate with an interval: over refit replicates (t) or over resampled records (bootstrap)."""

    estimate: float = Field(description="The point estimate.")
    lower: float = Field(description="Lower end of the interval.")
    upper: float = Field(description="Upper end of the interval.")
    level: Level = Field(description="Coverage of the interval, e.g. 0.95.")
    method: Literal["t-replicates", "bootstrap-percentile"] = Field(description=(
        "'t-replicates': Student t interval of the mean over the refit replicates; 'bootstrap-percentile': "
        "percentile interval over resampled records."))


class LinearProbeProtocol(StrictModel):
    """The fixed linear-probe protocol (sklearn LogisticRegression, lbfgs), enough to rerun it."""

    probe: Literal["sklearn-logistic-regression"] = Field(description="The probe: multinomial logistic regression.")
    solver: Literal["lbfgs"] = Field(description=(
        "Its solver (Adam-trained probes are biased low: "
        "docs/statistics.md#encoder-level-diagnostics-linear-probe-membership-attack-relearning)."))
    max_iter: PositiveInt = Field(description="Iteration cap of the solver (1000 in the papers).")
    inverse_regularization: PositiveFloat = Field(description="sklearn's C.")
    standardized: bool = Field(description="Features standardized with the probe-train mean and deviation.")
    feature_layer: NonEmptyStr = Field(description=(
        "Module whose input is the feature vector (the penultimate features: the input of the classifier head)."))
    train_split: SplitRole = Field(description="Split the probe's training records are drawn from.")
    per_class: PositiveInt = Field(description="Training records drawn per class (50 in the papers).")
    classes: Annotated[int, Field(ge=2)] = Field(description="Classes in the probe's training set.")
    test_split: SplitRole = Field(description="Split the probe is scored on ('forget': the forget accuracy).")
    test_records: PositiveInt = Field(description="Records the probe is scored on.")
    seed: Int = Field(description="Seed of the training draw (the same draw for every state).")
    refit_rule: Literal["exact"] = Field(description="Rule of the refit behind LP_Mcal (the exact operator R*).")


class LinearProbeDecomposition(StrictModel):
    """The probe decomposition (see
    docs/statistics.md#encoder-level-diagnostics-linear-probe-membership-attack-relearning):
    LP_M - LP_retr = (LP_M - LP_Mcal) + (LP_Mcal - LP_retr), in pp.

    A negative BN-residual means the shipped statistics deflate the probe: the shipped state hides encoder leakage
    that the refit reveals; a positive one means the surface probe overstates it."""

    metric: NonEmptyStr = Field(description="The cell holding LP_M (shipped), LP_Mcal (refit) and LP_retr.")
    protocol: LinearProbeProtocol = Field(description="How the probe was trained and scored.")
    bn_residual_pp: Interval = Field(description="LP_M - LP_Mcal over the refit replicates, in pp.")
    nc_residual_pp: Interval | None = Field(default=None, description=(
        "LP_Mcal - LP_retr over the refit replicates, in pp; absent without a retrain reference."))


class AttackProtocol(StrictModel):
    """A shadow-free threshold membership attack: members against non-members, scored by one number per record."""

    attack: AttackKind = Field(description=(
        "'loss-threshold' (score = minus the cross-entropy loss) or 'confidence-threshold' (score = the largest "
        "softmax probability); a higher score says member."))
    members: SplitRole = Field(description="Split of the member records ('forget').")
    nonmembers: SplitRole = Field(description="Split of the non-member records ('test').")
    class_matched: bool = Field(description=(
        "Non-members drawn only among the classes of the members (a class removal compares forget-class records "
        "with test records of the same class, not with other classes the model still knows)."))
    records_per_side: PositiveInt = Field(description="Records drawn from each side.")
    seed: Int = Field(description="Seed of the draws and of the bootstrap.")
    bootstrap: PositiveInt = Field(description="Bootstrap resamples of the records.")


class MembershipInference(StrictModel):
    """Attack AUC as shipped and after the refit (it changes little: see
    docs/statistics.md#encoder-level-diagnostics-linear-probe-membership-attack-relearning)."""

    metric: NonEmptyStr = Field(description="The cell holding the AUCs (unit 'auc').")
    protocol: AttackProtocol = Field(description="The attack.")
    auc_shipped: Interval = Field(description="AUC with the shipped statistics, bootstrap interval.")
    auc_refit: Interval = Field(description="Mean AUC over the refit replicates, bootstrap interval.")
    shift_pp: Interval = Field(description="Refit minus shipped AUC in pp, paired bootstrap interval.")


class RelearningProtocol(StrictModel):
    """Fine-tuning on forget records until a stated forget accuracy, on a copy (the checkpoint never changes)."""

    optimizer: Literal["sgd"] = Field(description="Plain SGD, no momentum, no weight decay.")
    learning_rate: PositiveFloat = Field(description="Step size.")
    batch_size: PositiveInt = Field(description="Records per step, cycled in a fixed order.")
    records: PositiveInt = Field(description="Forget records fine-tuned on.")
    max_steps: PositiveInt = Field(description="The budget; a state that does not reach the target is censored.")
    target_forget_accuracy: Fraction = Field(description="The forget accuracy to reach.")
    evaluated_on: SplitRole = Field(description="Split whose accuracy is compared with the target ('forget').")
    batchnorm: Literal["frozen"] = Field(description=(
        "BatchNorm in eval mode while fine-tuning: the running statistics stay those of the state measured."))
    seed: Int = Field(description="Seed of the record draw and of the step order.")


class Relearning(StrictModel):
    """Steps of fine-tuning to the target forget accuracy, shipped and after each refit replicate (None: the
    budget ran out first), and optionally the area under each forget-accuracy trajectory (absent in a record that
    does not give it, which means what it always meant)."""

    protocol: RelearningProtocol = Field(description="The fine-tuning.")
    steps_shipped: Count | None = Field(default=None, description=(
        "Steps with the shipped statistics; absent or null when not reached within the budget."))
    steps_refit: list[Count | None] = Field(min_length=1, description=(
        "Steps after each refit replicate (the first ones of the annotation's replicates); null when not reached."))
    area_shipped: Fraction | None = Field(default=None, description=(
        "Mean forget accuracy over steps 0..max_steps with the shipped statistics: the area under the relearning "
        "curve per step, which still separates states that never reach the target. Optional."))
    area_refit: list[Fraction] | None = Field(default=None, min_length=1, description=(
        "The same area after each refit replicate, in the order of steps_refit. Optional."))


__all__ = [
    "AttackKind",
    "AttackProtocol",
    "CellReference",
    "CellUnit",
    "Interval",
    "LinearProbeDecomposition",
    "LinearProbeProtocol",
    "MembershipInference",
    "Relearning",
    "RelearningProtocol",
]
