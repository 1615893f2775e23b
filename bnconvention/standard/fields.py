"""Building blocks of the standard's models: the closed vocabularies (``Literal`` aliases), constrained field
types, the strict base model every record part derives from, and the base of the two record kinds (their version
and its check). The versions themselves are in :mod:`.versions`."""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal, TypeAlias

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StringConstraints,
    ValidationInfo,
    model_serializer,
    model_validator,
)

from bnconvention.standard.versions import SpecVersion, later_fields, version_errors

SCHEMA_ID = "https://bnconvention.github.io/schema/v1/bnconvention.schema.json"
DIGEST_ALGORITHM: Final = "bnconvention-tensors/1"  # Final: typed as the Literal the records declare

# Literal aliases double as CLI choices (``typing.get_args``).
SplitRole: TypeAlias = Literal["train", "retain", "forget", "test", "proxy", "other"]
TransformMode: TypeAlias = Literal["train", "eval"]
AccumulationRule: TypeAlias = Literal["ema", "cumulative", "exact"]
BufferUpdateMode: TypeAlias = Literal["train", "frozen", "mixed", "refit", "untouched", "unknown"]
DistributedMode: TypeAlias = Literal["none", "sync_batchnorm", "all_reduce", "rank0_broadcast"]
VarianceEstimator: TypeAlias = Literal["unbiased", "biased"]
Precision: TypeAlias = Literal["float16", "bfloat16", "float32", "float64"]
DropoutMode: TypeAlias = Literal["off", "on", "absent"]
DecisionOutcome: TypeAlias = Literal["displaced", "equivalent", "undetermined"]
Channel: TypeAlias = Literal["present", "absent"]
FlipDirection: TypeAlias = Literal["pass_to_fail", "fail_to_pass"]

# The length bounds are not redundant with the pattern: Python's ``re`` (which jsonschema uses) lets ``$`` match
# before a trailing newline, pydantic's regex engine does not; with the lengths both reject "<64 hex>\n".
Sha256Hex = Annotated[
    str, StringConstraints(min_length=64, max_length=64, pattern=r"^[0-9a-f]{64}$"),
    Field(description="Lowercase hexadecimal sha256 digest (64 characters)."),
]
NonEmptyStr = Annotated[str, StringConstraints(min_length=1)]


def _integral_float_to_int(value: Any) -> Any:
    # JSON Schema counts 16.0 as an integer (and RFC 8785 writes it as 16); strict pydantic would refuse it.
    # Converting integral floats, and only those, keeps the models and the schema in agreement.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# The bound sits inside the validator so that it is checked on the converted value and reaches the JSON Schema
# as ``minimum`` (outside, pydantic would leak a non-standard ``ge`` keyword into the schema).
Int = Annotated[int, BeforeValidator(_integral_float_to_int)]
Count = Annotated[Annotated[int, Field(ge=0)], BeforeValidator(_integral_float_to_int)]
PositiveInt = Annotated[Annotated[int, Field(ge=1)], BeforeValidator(_integral_float_to_int)]


class StrictModel(BaseModel):
    # strict: no silent coercion ("1" is not 1), so the models accept what the JSON Schema accepts.
    model_config = ConfigDict(extra="forbid", strict=True, validate_assignment=True)

    @model_serializer(mode="wrap")
    def _later_nulls_left_out(self, handler: SerializerFunctionWrapHandler) -> Any:
        # A field a later version added is left out when null (absent and null mean the same), so a dump of every
        # field of an older record is still a record of its version.
        data = handler(self)
        if isinstance(data, dict):
            for name in later_fields(type(self)):
                if name in data and data[name] is None:
                    del data[name]
        return data


STRICT_VERSIONS = "bnconvention.strict_versions"  # validation-context key: a null later field counts


class VersionedRecord(StrictModel):
    """A record kind: its ``spec_version`` comes first, and the record holds no field or object of a later version
    (a 1.0 object admits no property it does not define, as the JSON Schema of 1.0 says)."""

    spec_version: SpecVersion = Field(description="Version of the standard the record follows.")

    @model_validator(mode="after")
    def _only_fields_of_its_version(self, info: ValidationInfo) -> VersionedRecord:
        # A record read as the standard reads it (parse_record) refuses a later field even when null, as the
        # version's JSON Schema does; elsewhere (a dump of every field read back) a null one is absent.
        nulls = isinstance(info.context, dict) and bool(info.context.get(STRICT_VERSIONS))
        errors = list(version_errors(self, self.spec_version, nulls=nulls))
        if errors:
            raise ValueError(f"a spec_version {self.spec_version} record holds later fields: {'; '.join(errors)}")
        return self
