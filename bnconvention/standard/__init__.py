"""The bnconvention standard: models (source of truth), derived names and digests, and the generated schema."""

from bnconvention.standard.models import (
    SCHEMA_ID,
    SPEC_VERSION,
    Declaration,
    FittingConvention,
    RefitAnnotation,
    parse_record,
    to_dict,
)
from bnconvention.standard.naming import canonical_name, record_ids_sha256, transform_sha256

__all__ = [
    "SCHEMA_ID",
    "SPEC_VERSION",
    "Declaration",
    "FittingConvention",
    "RefitAnnotation",
    "canonical_name",
    "parse_record",
    "record_ids_sha256",
    "to_dict",
    "transform_sha256",
]
