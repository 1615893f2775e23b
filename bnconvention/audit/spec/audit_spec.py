"""The audit spec: what to measure on a checkpoint, as a small YAML or JSON file validated by a schema of ours.

The pydantic models below are the source of truth; ``schema/v1/audit-spec.schema.json`` is generated from them
(regenerate with ``BNC_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/test_audit_spec.py``, which also proves
the committed file is up to date). A spec is untrusted data: it is read with the safe loaders
(:func:`bnconvention.formats.card.load_yaml_strict`, :func:`bnconvention.formats.canonical.loads_strict`), its cells
and criteria are parsed by the whitelist of :mod:`bnconvention.audit.spec.expressions`, and every problem is an
:class:`~bnconvention.errors.AuditSpecError` whose ``field`` is the JSON pointer of the offending value.

A minimal spec (everything else has the papers' defaults: margin 1.2 pp, R = 10 replicates, anchor tolerance 0.02,
exact refit under the train transform, recoverability on B = 10 test images):

>>> spec = parse_spec({"spec_version": "1.0", "kind": "audit_spec",
...                    "splits": {"forget_classes": [3]}, "criteria": ["abs(df - dt) <= 0.05"]})
>>> spec.margin_pp, spec.replicates, spec.anchor_tolerance, spec.refit.rule, spec.refit.transform
(1.2, 10, 0.02, 'exact', 'train')
>>> [cell.text for cell in spec.cell_expressions()]
['df', 'dr', 'dt', 'abs(df - dt)']
"""

from __future__ import annotations

import difflib
import typing
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import (
    BaseModel,
    Field,
    JsonValue,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
)
from pydantic_core import ErrorDetails

from bnconvention.audit.spec.census import ControlsSpec, SweepSpec
from bnconvention.audit.spec.data import (
    MAX_BATCH,
    MAX_DRAWS,
    MAX_RECORDS,
    MAX_REPLICATES,
    MAX_SWEEP_VALUES,
    BatchSize,
    DatasetSpec,
    Draws,
    Records,
    Replicates,
    SpecModel,
    SplitsSpec,
    Text,
    check_dataset,
    check_splits,
)
from bnconvention.audit.spec.diagnostics import DiagnosticsSpec
from bnconvention.audit.spec.expressions import BASE_CELLS, CellExpression, Criterion, parse_cell, parse_criterion
from bnconvention.audit.spec.rules import RuleMatch, check_rules
from bnconvention.audit.spec.scales import QuantizationSpec
from bnconvention.errors import AuditSpecError, UntrustedInputError
from bnconvention.formats.canonical import canonical_sha256, loads_strict
from bnconvention.formats.card import load_yaml_strict
from bnconvention.formats.model_index import BASE_CELL_METRICS
from bnconvention.standard.models import AccumulationRule, TransformMode
from bnconvention.standard.schema import committed_text, model_schema

AUDIT_SPEC_VERSION = "1.0"
AUDIT_SPEC_SCHEMA_ID = "https://bnconvention.github.io/schema/v1/audit-spec.schema.json"
REPO_AUDIT_SCHEMA_PATH = Path("schema") / "v1" / "audit-spec.schema.json"
MAX_SPEC_BYTES = 1_000_000

PublishedSource: TypeAlias = Literal["spec", "sidecar", "model_index"]
# model-index metric label (a metric's name, else its type) -> cell
DEFAULT_MODEL_INDEX_METRICS: dict[str, str] = dict(BASE_CELL_METRICS)

_Spec = SpecModel


class ModelSpec(_Spec):
    """The architecture the weights are loaded into (allowlisted factories and the libraries' registries only)."""

    factory: Text = Field(description=(
        "An allowlisted factory name: 'zoo/convnet-bn', 'zoo/convnet-gn', 'torchvision/<arch>', 'timm/<model>' "
        "(a model of timm's registry), 'transformers/<class>' (an image classifier of transformers, e.g. "
        "'transformers/ResNetForImageClassification'), or one the user allows on the command line with "
        "--allow-factory package.module:function."))
    kwargs: dict[str, JsonValue] = Field(default_factory=dict, description=(
        "Keyword arguments of the factory, plain JSON values: scalars or lists of scalars for factories and timm "
        "(timm.create_model's loading options are refused), the config fields for transformers (e.g. "
        "embedding_size, hidden_sizes, depths, num_labels or id2label)."))
    # where the architecture was named, for messages ("... (from <source>)"): the spec, or the repo file a hub audit
    # read it from and put here; never serialized, so the spec's digest is unchanged
    _source: str = PrivateAttr(default="spec")

    @property
    def source(self) -> str:
        """``spec``, or the file the architecture was read from (``org/name/config.json``)."""
        return self._source

    def read_from(self, source: str) -> ModelSpec:
        """This model section, marked as read from ``source`` (a repo's ``config.json``)."""
        copy = self.model_copy()
        copy._source = source
        return copy


class RefitSpec(_Spec):
    """The named refit convention every replicate applies."""

    rule: AccumulationRule = Field(default="exact", description="Accumulation rule of the refit.")
    transform: TransformMode = Field(default="train", description="Transform applied to the refit pool.")
    pool_size: Records = Field(default=512, description=(
        f"Retained records per replicate, redrawn independently for each replicate (at most {MAX_RECORDS:,})."))
    batch_size: BatchSize = Field(default=128, description=f"Batch size of the refit pass (at most {MAX_BATCH:,}).")


RecoverySource: TypeAlias = Literal["test", "retain", "noise"]
DEFAULT_BUDGETS = (1, 2, 5, 10, 20, 50, 100)
DEFAULT_SOURCES: tuple[RecoverySource, ...] = ("test", "retain", "noise")


class RecoverabilityCurveSpec(_Spec):
    """Forget accuracy after a refit on B proxy images, for several budgets, seeds and proxy sources."""

    budgets: list[Records] = Field(default_factory=lambda: list(DEFAULT_BUDGETS), min_length=1,
                                   max_length=MAX_SWEEP_VALUES, description=(
        "Budgets B (images per refit); a budget larger than a source is skipped, as is B = 1 under a train-mode "
        f"rule (at most {MAX_SWEEP_VALUES} budgets)."))
    seeds: Draws = Field(default=3, description=f"Independent draws per budget and source (at most {MAX_DRAWS:,}).")
    sources: list[RecoverySource] = Field(default_factory=lambda: list(DEFAULT_SOURCES), min_length=1,
                                          description=(
        "Proxy sources: 'test' (the test split), 'retain' (retained records only), 'noise' (out of distribution: "
        "Gaussian noise with the test split's per-pixel mean and standard deviation)."))


class StalenessBandSpec(_Spec):
    """The reference band as a null distribution of independent retain refits (bnconvention.audit.diagnostics.band)."""

    refits: Replicates | None = Field(default=None, description=(
        "Independent retain refits N forming the null: the R replicates, plus N - R more drawn the same way; "
        f"default: the R replicates (no extra refit); at most {MAX_REPLICATES:,}."))
    level: Annotated[float, Field(gt=0, le=0.5)] = Field(default=0.1, description=(
        "Nominal false-positive rate of 'exceeds band' (an exact rank test: it needs N >= 1/level - 1)."))


class RecoverabilitySpec(_Spec):
    """Forget accuracy after a refit on B unlabeled proxy images (the papers' ten-image attack)."""

    curve: RecoverabilityCurveSpec | None = Field(default=None, description=(
        "Optional recoverability curve over budgets, seeds and proxy sources (the B = images point of source is "
        "its headline); {} for the defaults."))

    images: Records = Field(default=10, description=f"Number of unlabeled images B (at most {MAX_RECORDS:,}).")
    source: Literal["test", "retain"] = Field(default="test", description="Split the images are drawn from.")
    rule: AccumulationRule | None = Field(default=None, description="Refit rule; default: the refit's rule.")
    transform: TransformMode = Field(default="eval", description="Transform applied to the proxy images.")


class ProvenanceSpec(_Spec):
    """Exchange k retained records for forget records in a fixed-size fitting pool
    (docs/statistics.md#provenance-contrast)."""

    pool_size: Records = Field(description=f"Size of the fitting pool (records; at most {MAX_RECORDS:,}).")
    exchanged: Records | None = Field(default=None, description=(
        "Retained records exchanged for forget records in the deployment arm; default: the removed share of the "
        "training data (forget / (forget + retain)) times pool_size."))
    draws: Draws = Field(default=3, description=f"Independent draws of the pools per arm (at most {MAX_DRAWS:,}).")
    ceiling: bool = Field(default=True, description=(
        "Also run the ceiling arm: every removed record in the pool (as many as fit)."))


class RuleSpec(_Spec):
    """Sections of the spec replaced for the repos a rule matches (see :mod:`bnconvention.audit.spec.rules`)."""

    name: Text | None = Field(default=None, description="A short name, reported with each repo it shaped.")
    match: RuleMatch = Field(description="Which repos the rule applies to (every condition given must hold).")
    dataset: DatasetSpec | None = Field(default=None, description="The dataset of these repos.")
    splits: SplitsSpec | None = Field(default=None, description="Their forget, retain and test splits.")
    model: ModelSpec | None = Field(default=None, description=(
        "Their architecture when neither the declaration nor config.json names one."))
    refit: RefitSpec | None = Field(default=None, description="Their refit convention.")
    published: dict[str, float] | None = Field(default=None, description="Their published cells (cell -> value).")
    published_source: PublishedSource | None = Field(default=None, description="Where their published cells come "
                                                     "from.")
    model_index_metrics: dict[Text, Text] | None = Field(default=None, description=(
        "Their model-index metric labels -> cells."))
    provenance: ProvenanceSpec | None = Field(default=None, description=(
        "The provenance contrast for these repos (a census can run it on a subset: one removal, say)."))
    diagnostics: DiagnosticsSpec | None = Field(default=None, description=(
        "The encoder-level diagnostics for these repos (on a subset of a census)."))

    @model_serializer(mode="wrap")
    def _without_absent_sections(self, handler: SerializerFunctionWrapHandler) -> Any:
        # a rule without these sections dumps, and so digests (journal keys), exactly as before they existed
        data = handler(self)
        for optional in ("provenance", "diagnostics"):
            if getattr(self, optional) is None and isinstance(data, dict):
                data.pop(optional, None)
        return data


class AuditSpec(_Spec):
    """One audit's design. Cells are fractions in [0, 1]; shifts and the margin are in percentage points."""

    spec_version: Literal["1.0"] = Field(description="Version of the audit-spec format; write \"1.0\" (quoted).")
    kind: Literal["audit_spec"]
    name: Text | None = Field(default=None, description="A short name for reports.")
    dataset: DatasetSpec = Field(default_factory=DatasetSpec)
    splits: SplitsSpec
    transform: Literal["dataset", "from_repo"] = Field(default="dataset", description=(
        "The train and eval transforms: 'dataset' (the dataset's own: the digits' shift and identity, the "
        "identity for other sources) or 'from_repo' (each model repo's own preprocessing: timm's pretrained_cfg "
        "in config.json, train and eval variants, else the transformers image processor of "
        "preprocessor_config.json, eval only), recorded in the convention with its digest."))
    model: ModelSpec | None = Field(default=None, description=(
        "The architecture. In a local audit it is used when given; when absent, the checkpoint's sidecar "
        "'<name>.json' or the folder's config.json (our own architecture entry, or timm's or transformers' own "
        "config) must name it. In a Hub audit each repo's config.json comes first and this is the fallback."))
    cells: list[Text] = Field(default_factory=lambda: list(BASE_CELLS), min_length=1, description=(
        "Cells to report: 'df' (forget accuracy), 'dr' (retain), 'dt' (test) or expressions such as "
        "'abs(df - dt)'. Criterion operands are added when missing."))
    criteria: list[Text] = Field(default_factory=list, description=(
        "Verdict criteria, e.g. 'abs(df - dt) <= 0.05', 'dr >= 0.95'."))
    headline: Text = Field(default="df", description="The cell named in the reporting line.")
    published: dict[str, float] | None = Field(default=None, description=(
        "Published cells to anchor against (cell -> value), for a single-checkpoint audit."))
    published_by_checkpoint: dict[str, dict[str, float]] | None = Field(default=None, description=(
        "Published cells per checkpoint file name (without .safetensors), for a census."))
    published_source: PublishedSource = Field(default="spec", description=(
        "Where published cells come from: 'spec' (published / published_by_checkpoint above), or the files "
        "beside the weights, read in one order by audit, census and hub audit alike: 'sidecar' reads the "
        "checkpoint's '<name>.json', then the folder's config.json (in either a 'published' mapping of cell -> "
        "value, or the zoo's 'shipped_accuracy' with forget/retain/test read as df/dr/dt), then the eval results "
        "of the model card's model-index (README.md beside the weights, through model_index_metrics); "
        "'model_index' reads the card first, then the other two. The first that holds any cells is used; cells "
        "the spec lists too take the spec's value. When none holds any, one error names every place looked at."))
    model_index_metrics: dict[Text, Text] = Field(default_factory=lambda: dict(DEFAULT_MODEL_INDEX_METRICS),
                                                  description=(
        "Model-index metric labels -> cells, e.g. {'forget accuracy': df}. A metric matches a label by its name, "
        "or by its type when no metric has that name (case and spacing ignored). Read for anchoring when the "
        "card is where the published cells are found (see published_source); hub push puts each refit cell "
        "beside the metric it maps from."))
    rules: list[RuleSpec] = Field(default_factory=list, description=(
        "Per-repo rules of a Hub audit: the sections each replaces (dataset, splits, model, refit, published "
        "cells) for the repos it matches by repo-id pattern or config.json field; every matching rule applies, "
        "later ones replacing the sections earlier ones set."))
    anchor_tolerance: Annotated[float, Field(ge=0)] = Field(default=0.02, description=(
        "Largest absolute difference between shipped and published cells for the checkpoint to anchor."))
    margin_pp: Annotated[float, Field(gt=0)] = Field(default=1.2, description="Displacement margin (pp).")
    margin: Literal["auto"] | None = Field(default=None, description=(
        "'auto': a census derives margin_pp before any refit as the median of the population's own seed spread "
        "(each recipe's published cells across seeds; audit/population/margin.py) and records how; leave margin_pp "
        "out."))
    fdr_q: Annotated[float, Field(gt=0, lt=1)] = Field(default=0.05, description=(
        "False-discovery level of the census: Benjamini-Yekutieli across checkpoints, per cell."))
    replicates: Annotated[int, Field(ge=2, le=MAX_REPLICATES)] = Field(default=10, description=(
        "Number of replicates R (independent refits); at least 2, since one refit cannot decide a cell, and at "
        f"most {MAX_REPLICATES:,} (each is a refit plus an evaluation of every split)."))
    seed: Annotated[int, Field(ge=0)] = Field(default=0, description=(
        "Root seed; replicate r draws its pool and augmentation from (seed, r), so results are deterministic."))
    refit: RefitSpec = Field(default_factory=RefitSpec)
    staleness: bool = Field(default=True, description=(
        "Report the staleness distance of shipped statistics from a retain refit, and the reference band."))
    staleness_band: StalenessBandSpec = Field(default_factory=StalenessBandSpec)
    recoverability: RecoverabilitySpec | None = Field(default_factory=RecoverabilitySpec, description=(
        "The ten-image recovery check; null to skip it."))
    provenance: ProvenanceSpec | None = Field(default=None, description="Optional provenance contrast.")
    eval_batch_size: BatchSize = Field(default=512, description=(
        f"Batch size of evaluation forwards (at most {MAX_BATCH:,})."))
    sweeps: SweepSpec = Field(default_factory=SweepSpec, description=(
        "Census sweeps over margins, false-discovery levels and pool sizes, read from stored replicates."))
    controls: ControlsSpec = Field(default_factory=ControlsSpec, description=(
        "Census controls: known-answer checkpoints kept out of the multiplicity family, and the detection floor."))
    diagnostics: DiagnosticsSpec | None = Field(default=None, description=(
        "Optional encoder-level diagnostics (linear probe, membership attack, relearning: "
        "docs/statistics.md#encoder-level-diagnostics-linear-probe-membership-attack-relearning), shipped and "
        "after an exact retain refit; off when absent (audit/spec/diagnostics.py)."))
    quantization: QuantizationSpec | None = Field(default=None, description=(
        "Optional audit of shipped activation scales (a second deployed state) against retain-only "
        "recalibrations; off when absent (audit/spec/scales.py)."))

    @model_serializer(mode="wrap")
    def _without_absent_diagnostics(self, handler: SerializerFunctionWrapHandler) -> Any:
        # A spec without these sections dumps, and so digests (journal keys), exactly as before they existed.
        data = handler(self)
        for optional in ("diagnostics", "quantization", "margin"):
            if getattr(self, optional) is None and isinstance(data, dict):
                data.pop(optional, None)
        return data

    # --- derived, checked once ------------------------------------------------------------------------------------

    @cached_property
    def _cells(self) -> tuple[CellExpression, ...]:
        parsed: list[CellExpression] = []
        for index, text in enumerate(self.cells):
            cell = parse_cell(text, field=f"/cells/{index}")
            if cell.text in {c.text for c in parsed}:
                raise AuditSpecError(f"cell {text!r} is listed twice (as {cell.text!r}); list each cell once",
                                     field=f"/cells/{index}")
            parsed.append(cell)
        for criterion in self.criterion_expressions():
            for operand in criterion.operands:
                if operand.text not in {c.text for c in parsed}:
                    parsed.append(operand)
        return tuple(parsed)

    def cell_expressions(self) -> tuple[CellExpression, ...]:
        """Every reported cell: the listed ones, then criterion operands not listed."""
        return self._cells

    @cached_property
    def _criteria(self) -> tuple[Criterion, ...]:
        return tuple(parse_criterion(text, field=f"/criteria/{index}") for index, text in enumerate(self.criteria))

    def criterion_expressions(self) -> tuple[Criterion, ...]:
        return self._criteria

    def headline_cell(self) -> CellExpression:
        return parse_cell(self.headline, field="/headline")

    def published_for(self, checkpoint: str | None) -> dict[str, float] | None:
        """Published cells (canonical cell text -> value) for a checkpoint name, or the single-audit ones."""
        if checkpoint is not None and self.published_by_checkpoint and checkpoint in self.published_by_checkpoint:
            values = self.published_by_checkpoint[checkpoint]
            where = f"/published_by_checkpoint/{_escape(checkpoint)}"
        elif self.published is not None:
            values, where = self.published, "/published"
        else:
            return None
        return {parse_cell(key, field=f"{where}/{_escape(key)}").text: float(value) for key, value in values.items()}

    def sha256(self) -> str:
        """Digest of the effective spec (defaults filled in): part of the census journal key."""
        return canonical_sha256(self.model_dump(mode="json"))

    def check(self) -> AuditSpec:
        """The checks a JSON Schema cannot express (expressions, field combinations), with exact JSON pointers."""
        check_dataset(self.dataset)
        check_splits(self.splits, self.dataset)
        if (self.provenance is not None and self.provenance.exchanged is not None
                and self.provenance.exchanged > self.provenance.pool_size):
            raise AuditSpecError(f"provenance.exchanged ({self.provenance.exchanged}) exceeds provenance.pool_size "
                                 f"({self.provenance.pool_size}); exchange at most the whole pool",
                                 field="/provenance/exchanged")
        self.cell_expressions()
        headline = self.headline_cell()
        if headline.text not in {c.text for c in self.cell_expressions()}:
            raise AuditSpecError(f"headline {self.headline!r} is not one of the cells "
                                 f"{[c.text for c in self.cell_expressions()]}; add it to cells",
                                 field="/headline")
        if self.published_source == "sidecar" and (self.published or self.published_by_checkpoint):
            raise AuditSpecError("published_source is 'sidecar' but the spec also lists published cells; keep one "
                                 "source", field="/published_source")
        self.published_for(None)
        for name in self.published_by_checkpoint or {}:
            self.published_for(name)
        for metric_label, cell_text in self.model_index_metrics.items():
            parse_cell(cell_text, field=f"/model_index_metrics/{_escape(metric_label)}")
        check_rules(self)
        return self


def _escape(token: str) -> str:
    """A JSON-pointer reference token (RFC 6901)."""
    return token.replace("~", "~0").replace("/", "~1")


def _pointer(loc: tuple[Any, ...]) -> str:
    return "".join(f"/{_escape(str(part))}" for part in loc)


def parse_spec(data: Any, *, source: str = "<spec>", base_dir: Path | None = None) -> AuditSpec:
    """Validate a decoded spec (a dict); every problem raises :class:`AuditSpecError` with a JSON-pointer field.

    Relative paths (dataset path, index files) are resolved against ``base_dir`` when given.
    """
    if not isinstance(data, dict):
        raise AuditSpecError(f"{source}: an audit spec is a mapping of keys to values, found "
                             f"{type(data).__name__}", field="")
    try:
        spec = AuditSpec.model_validate(data)
    except ValidationError as exc:
        problems = sorted(exc.errors(include_url=False), key=lambda e: (_pointer(e["loc"]), e["msg"]))
        lines = [f"{_pointer(e['loc']) or '/'}: {_message(e)}" for e in problems]
        raise AuditSpecError(f"{source}: {len(lines)} problem{'s' if len(lines) > 1 else ''}: " + "; ".join(lines),
                             field=_pointer(problems[0]["loc"])) from None
    if data.get("margin") == "auto" and "margin_pp" in data:
        raise AuditSpecError(f"{source}: the spec gives both margin: auto and margin_pp; keep one (auto derives "
                             "margin_pp from the population's seed spread)", field="/margin_pp")
    spec.check()
    if base_dir is not None:
        spec = _resolve_rule_paths(_resolve_paths(spec, base_dir), base_dir)
    return spec


def _message(error: ErrorDetails) -> str:
    found = error.get("input")
    text = error["msg"]
    if error["type"] == "missing":
        return "required field is missing"
    if tuple(error["loc"]) == ("replicates",) and error["type"] == "greater_than_equal":
        return (f"a decision needs at least 2 replicates (found {found!r}): one refit reaches no sign-test level "
                "and gives no TOST interval; the papers use 10")
    if error["type"] == "less_than_equal" and isinstance(found, int):
        limit = (error.get("ctx") or {}).get("le")
        return (f"{found:,} is over the upper bound of {limit:,} (the spec's counts are bounded by what an audit "
                "runs in reasonable time; see docs/statistics.md, \"Bounds of an audit spec\")")
    if error["type"] == "extra_forbidden":
        suggestion = _did_you_mean(tuple(error["loc"]))
        hint = f"; did you mean {suggestion!r}?" if suggestion else "; check the spelling against the schema"
        return f"unknown field (found {found!r}){hint}"
    if isinstance(found, (str, int, float, bool)) or found is None:
        return f"{text} (found {found!r})"
    return text


def _did_you_mean(loc: tuple[Any, ...]) -> str | None:
    """The closest field name of the model that holds the unknown key at ``loc`` (``replicate`` -> ``replicates``,
    ``refit.pol_size`` -> ``pool_size``), or None."""
    model: Any = AuditSpec
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return None
        model = next((t for t in _types(field.annotation) if isinstance(t, type) and issubclass(t, BaseModel)), None)
        if model is None:
            return None
    names = list(getattr(model, "model_fields", {}))
    found = difflib.get_close_matches(str(loc[-1]), names, n=1, cutoff=0.6)
    return found[0] if found else None


def _types(annotation: Any) -> list[Any]:
    """The classes inside an annotation (``X | None``, ``list[X]``, ``Annotated[X, ...]``)."""
    args = typing.get_args(annotation)
    if not args:
        return [annotation]
    return [t for arg in args for t in _types(arg)]


def _resolve_paths(spec: AuditSpec, base_dir: Path) -> AuditSpec:
    def resolve(value: str | None) -> str | None:
        if value is None:
            return None
        path = Path(value)
        return str(path if path.is_absolute() else (base_dir / path))

    dataset = spec.dataset.model_copy(update={"path": resolve(spec.dataset.path)})
    if spec.splits.index_files_in != "spec":  # names inside a repo, not paths on this disk
        return spec.model_copy(update={"dataset": dataset})
    splits = spec.splits.model_copy(update={
        "forget_index": resolve(spec.splits.forget_index),
        "retain_index": resolve(spec.splits.retain_index),
        "test_index": resolve(spec.splits.test_index),
    })
    return spec.model_copy(update={"dataset": dataset, "splits": splits})


def _resolve_rule_paths(spec: AuditSpec, base_dir: Path) -> AuditSpec:
    """Each rule's dataset and splits resolved as the spec's own are (by :func:`_resolve_paths` on the spec the
    rule's sections make)."""
    if not spec.rules:
        return spec
    rules = []
    for rule in spec.rules:
        updates = {name: getattr(rule, name) for name in ("dataset", "splits") if getattr(rule, name) is not None}
        if updates:
            resolved = _resolve_paths(spec.model_copy(update=updates), base_dir)
            rule = rule.model_copy(update={name: getattr(resolved, name) for name in updates})
        rules.append(rule)
    return spec.model_copy(update={"rules": rules})


def load_spec(path: str | Path, *, replicates: int | None = None) -> AuditSpec:
    """Read a spec from a ``.yaml``/``.yml`` or ``.json`` file; ``replicates`` overrides the file's R."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise AuditSpecError(f"audit spec {str(path)!r} does not exist; pass --spec with the path of a YAML or "
                             "JSON spec (see examples/audit/digits-zoo.yaml)", field="") from None
    except IsADirectoryError:
        raise AuditSpecError(f"audit spec {str(path)!r} is a directory; pass the spec file", field="") from None
    if len(data) > MAX_SPEC_BYTES:
        raise AuditSpecError(f"audit spec {str(path)!r} is {len(data)} bytes, over the {MAX_SPEC_BYTES}-byte "
                             "limit", field="")
    try:
        if path.suffix.lower() == ".json":
            decoded = loads_strict(data, source=str(path))
        else:
            try:
                text = data.decode("utf-8-sig")
            except UnicodeDecodeError as exc:
                raise AuditSpecError(f"{path}: not valid UTF-8 at byte {exc.start}; save the spec as UTF-8",
                                     field="") from exc
            decoded = load_yaml_strict(text, source=str(path))
    except UntrustedInputError as exc:
        # the YAML loader is shared with model cards; its messages speak of "front matter"
        message = str(exc).replace("invalid YAML front matter", "invalid YAML").replace("YAML front matter", "YAML")
        raise AuditSpecError(f"audit spec is unreadable: {message}", field="") from exc
    if replicates is not None and isinstance(decoded, dict):
        decoded = {**decoded, "replicates": replicates}
    return parse_spec(decoded, source=str(path), base_dir=path.resolve().parent)


# --- the JSON Schema ----------------------------------------------------------------------------------------------


def generate_audit_spec_schema() -> dict[str, Any]:
    """The Draft 2020-12 JSON Schema of an audit spec, generated from :class:`AuditSpec`."""
    return model_schema(AuditSpec, schema_id=AUDIT_SPEC_SCHEMA_ID,
                        title=f"bnconvention audit spec, version {AUDIT_SPEC_VERSION}")


def audit_spec_schema_text() -> str:
    """The schema as committed: 2-space indented JSON with a trailing newline."""
    return committed_text(generate_audit_spec_schema())
