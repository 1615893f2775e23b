"""Validation issues: one problem found in one file, with a stable code, a severity and a JSON-pointer path.

Codes are a public contract (pipelines filter on them): :data:`CODES` lists every code with its default severity,
whether it means the input could not be read at all (exit code 2), and a one-line description. New codes may be
added; existing codes never change meaning.

>>> issue = Issue(code="schema.required", severity="error", file="record.json", path="/convention",
...               message="'name' is a required property of FittingConvention")
>>> issue.pointer_tokens
('convention',)
>>> best_issue([issue]) is issue
True
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

Severity: TypeAlias = Literal["error", "warning"]


@dataclass(frozen=True)
class CodeInfo:
    """What a code means: its default severity, whether the input was unreadable, and a description."""

    severity: Severity
    description: str
    unreadable: bool = False


def _code(description: str, *, severity: Severity = "error", unreadable: bool = False) -> CodeInfo:
    return CodeInfo(severity=severity, description=description, unreadable=unreadable)


# Grouped by topic. ``unreadable`` codes make ``bnconvention validate`` exit with 2 instead of 1.
CODES: dict[str, CodeInfo] = {
    # --- the input itself ---------------------------------------------------------------------------------------
    "input.unreadable": _code("The path does not exist or cannot be read.", unreadable=True),
    "input.unsupported": _code(
        "The path is not a record (.json), a weights file (.safetensors), a model card (.md) or a directory.",
        unreadable=True),
    "input.nothing_to_validate": _code(
        "A directory holds no weights file, model card or record to validate.", unreadable=True),
    "internal.error": _code("The validator failed unexpectedly on this file; please report it as a bug."),
    # --- JSON records ---------------------------------------------------------------------------------------------
    "json.not_utf8": _code("A JSON document is not valid UTF-8.", unreadable=True),
    "json.duplicate_key": _code("A JSON object repeats a key.", unreadable=True),
    "json.invalid": _code("A document is not valid JSON (syntax, NaN/Infinity, out-of-range number, nesting).",
                          unreadable=True),
    # --- safetensors files ----------------------------------------------------------------------------------------
    "safetensors.truncated": _code(
        "A safetensors file is shorter than its 8-byte length field or than the header length it declares.",
        unreadable=True),
    "safetensors.header_too_large": _code(
        "A safetensors header length exceeds the format's 100,000,000-byte limit.", unreadable=True),
    "safetensors.not_safetensors": _code(
        "A weights file is another format (a PyTorch pickle or zip checkpoint, a NumPy or GGUF file, ...); the "
        "message says which and how to convert it. Nothing is unpickled.", unreadable=True),
    "safetensors.invalid_header": _code(
        "A safetensors header does not start with '{', is not UTF-8 JSON as safetensors reads it (lone surrogate "
        "escapes, NaN, out-of-range numbers and deep nesting are refused), repeats keys, has non-string "
        "__metadata__ values, bad tensor entries, or offsets that do not tile the data section.", unreadable=True),
    "safetensors.invalid_index": _code(
        "A shard index (*.safetensors.index.json) is not strict JSON with a non-empty weight_map of tensor names to "
        ".safetensors files beside it, names a shard the folder does not hold, or disagrees with the shards' "
        "headers (the Hub census's rule).", unreadable=True),
    "safetensors.record_not_json": _code("The stamped record in __metadata__ is not valid JSON text."),
    "safetensors.record_not_canonical": _code(
        "The stamped record is valid JSON but not in canonical form (RFC 8785), so its bytes are not reproducible.",
        severity="warning"),
    # --- model cards ----------------------------------------------------------------------------------------------
    "card.not_utf8": _code("A model card is not valid UTF-8.", unreadable=True),
    "card.too_large": _code("A model card is larger than the 4 MiB bound.", unreadable=True),
    "card.invalid_yaml": _code(
        "A model card's YAML front matter is malformed, repeats keys, or has aliases that expand past the size "
        "bound (an alias bomb) or refer to themselves.", unreadable=True),
    "card.front_matter_not_mapping": _code("A model card's YAML front matter is not a mapping.", unreadable=True),
    "card.block_not_mapping": _code("The card's bnconvention block is not a mapping."),
    "card.non_json_value": _code(
        "The card's bnconvention block holds a YAML value JSON cannot represent (date, binary, set, non-string "
        "key, infinity)."),
    "card.no_record": _code("A model card named on the command line carries no bnconvention block.",
                            severity="warning"),
    "card.model_index_refit_mismatch": _code(
        "A BatchNorm refit result in the card's model-index (a metric whose config is 'bnconvention-refit') "
        "disagrees with the refit annotation it names: another value, cell, convention or annotation digest, the "
        "annotation's cells copied only in part, an annotation the release does not hold, or args naming none."),
    # --- the schema (JSON Schema and the pydantic models both reject) ---------------------------------------------
    "schema.type": _code("A value has the wrong JSON type."),
    "schema.required": _code("A required property is missing."),
    "schema.additional_property": _code("An object has a property the standard does not define."),
    "schema.enum": _code("A value is not one of the allowed values."),
    "schema.const": _code("A value differs from the only allowed value."),
    "schema.spec_version": _code("The record's spec_version is not one this validator reads (1.0)."),
    "schema.discriminator": _code(
        "A tagged union's tag (record kind, accumulation rule, deployed-state kind) has an unknown value."),
    "schema.pattern": _code("A string does not match the required pattern (e.g. a lowercase hex sha256)."),
    "schema.length": _code("A string is shorter or longer than allowed (e.g. empty)."),
    "schema.items": _code("An array has fewer items than required."),
    "schema.range": _code("A number is outside its allowed range."),
    "schema.invalid": _code("A value fails a schema rule not listed above."),
    "schema.model_mismatch": _code(
        "The JSON Schema and the pydantic models disagree about this record: a bug in bnconvention; please "
        "report it."),
    # --- semantic checks on one record (the schema accepts, the rules of the standard do not) ---------------------
    "record.name_mismatch": _code("convention.name is not the canonical name derived from the other fields."),
    "record.transform_sha256_mismatch": _code(
        "convention.transform.sha256 is not the sha256 of the canonical JSON of the transform description."),
    "record.duplicate_state_kind": _code("deployed_state lists the same kind more than once."),
    "record.duplicate_layer": _code("A BatchNorm layer name appears more than once."),
    "record.layer_digest_missing": _code("A layer that tracks running statistics has no running_sha256."),
    "record.layer_digest_unexpected": _code("A layer that tracks no running statistics has a running_sha256."),
    "record.running_digest_inconsistent": _code(
        "digests.running_sha256 disagrees with the layers: present without running layers, absent with them, or "
        "different from the only layer's digest."),
    "record.duplicate_site": _code("An activation-scales site name appears more than once."),
    "record.quant_range": _code(
        "An activation-scales state's quantized range is empty, or a zero point lies outside it (or off the middle "
        "under a symmetric scheme)."),
    "record.observer_percentile": _code(
        "An activation-scales state gives a percentile without the percentile observer, or that observer without it."),
    "record.scales_digest_inconsistent": _code(
        "An activation-scales state's digests disagree: some sites digested and others not, scales_sha256 without "
        "site digests (or the reverse), or one site whose digest differs from the combined one."),
    "record.channel_mode": _code(
        "A declaration without running statistics (channel absent) names a buffer-update mode other than "
        "untouched or unknown.", severity="warning"),
    "record.refit_weights_changed": _code(
        "refit.trainable_sha256_before differs from trainable_sha256_after: the refit changed the weights."),
    "record.refit_digest_mismatch": _code(
        "refit's 'after' digests differ from the declaration's digests of the deployed state."),
    "record.refit_mode_mismatch": _code(
        "A declaration carries refit details but its buffer-update mode is not 'refit'.", severity="warning"),
    "record.observation_contradiction": _code(
        "The recorder observed something that contradicts the declaration.", severity="warning"),
    "record.mode_override": _code(
        "The convention's buffer-update mode is the author's override of the mode the recorder observed.",
        severity="warning"),
    "record.observation_mode_mismatch": _code(
        "The convention's buffer-update mode is not the mode the recorder observed, and no override (or a "
        "different one) says so."),
    "record.staleness_average": _code("A staleness distance is not the average of its per-layer values."),
    "record.replicate_count": _code(
        "A cell's replicate lists do not have one value per replicate (the annotation's 'replicates')."),
    "record.cell_mean": _code("A cell's refit or shift_pp is not the mean of its replicate values."),
    "record.decision_inconsistent": _code(
        "A cell's decision (outcome, method or p-value) is not what the decision rules of docs/statistics.md give "
        "for its own replicate shifts and margin (p-values compared exactly or at two significant digits)."),
    "record.twin_weights_differ": _code(
        "A 1.1 annotation's twin has other trainable tensors than its subject: a frozen twin shares θ bit for bit."),
    "record.channel_absent_shift": _code("An annotation with channel 'absent' reports a non-zero shift."),
    "record.verdict_flip": _code("A verdict's flipped/direction fields disagree with its shipped and refit "
                                 "outcomes."),
    "record.anchoring_inconsistent": _code(
        "Anchoring's abs_diff or anchored flag disagrees with its published and shipped values and tolerance."),
    # --- a record against the files of its release ----------------------------------------------------------------
    "location.wrong_kind": _code(
        "A refit annotation was found where a declaration belongs (a safetensors header or a model card)."),
    "digests.trainable_mismatch": _code("The record's trainable digest does not match the file's tensors."),
    "digests.running_mismatch": _code("The record's running-statistics digest does not match the file's tensors."),
    "digests.layer_mismatch": _code("A layer's running digest does not match the file's running buffers."),
    "layers.missing_in_file": _code("A declared layer's running buffers are not in the weights file."),
    "layers.num_features_mismatch": _code("A declared layer's num_features differs from its buffers' length."),
    "layers.affine_mismatch": _code("A declared layer's affine flag disagrees with the weight/bias in the file."),
    "layers.unexpected_running_stats": _code(
        "A layer declared with track_running_stats false has running buffers in the file."),
    "layers.undeclared": _code("The weights file has running buffers of a BatchNorm layer the record omits."),
    "statistics.nonfinite": _code(
        "A BatchNorm layer's running_mean or running_var in the weights file holds NaN or infinite values: a shipped "
        "state that cannot be evaluated as it is (checked for float64, float32, float16 and bfloat16 buffers, "
        "declared or not)."),
    "statistics.negative_variance": _code(
        "A BatchNorm layer's running_var in the weights file holds negative values, which no variance can be: the "
        "shipped state cannot be evaluated as it is."),
    "declaration.missing": _code(
        "A weights file has BatchNorm running buffers and no declaration (error with --require-declaration).",
        severity="warning"),
    "release.card_header_mismatch": _code("The model card's record differs from the one stamped in the weights."),
    "release.card_missing_record": _code(
        "The weights carry a stamped record but the release's model card does not.", severity="warning"),
    "release.card_unbound": _code("The card's record matches none of the release's weights files."),
    "release.header_missing_record": _code(
        "The model card declares a convention for a weights file whose header does not carry it (never stamped, "
        "or re-saved by another tool, e.g. a library's save_pretrained or push_to_hub).", severity="warning"),
    "annotation.filename_mismatch": _code(
        "A refit annotation's file name is not bnconvention/refit-<first 12 hex of its sha256>.json.",
        severity="warning"),
    "annotation.subject_missing": _code("A refit annotation's subject file is not in the release.",
                                        severity="warning"),
    "annotation.subject_mismatch": _code("A refit annotation's subject digest does not match the weights file."),
    "annotation.subject_running_changed": _code(
        "The running statistics changed since the annotation was written (it audited another deployed state).",
        severity="warning"),
    # --- signatures (OpenSSF model signing) beside the release --------------------------------------------------
    "signature.stale": _code(
        "A signature beside the release (model.sig, or an annotation's <file>.sig) no longer matches the files it "
        "signed: a file changed since signing (a stamp after signing), is missing, or was not signed. Sign again "
        "(bnconvention sign). Checked only where model-signing is installed; elsewhere the report says the check "
        "was not run.", severity="warning"),
    "signature.unreadable": _code("A signature file beside the release is not a model-signing signature.",
                                  severity="warning"),
}

_SEVERITY_RANK = {"error": 0, "warning": 1}


def pointer_tokens(pointer: str) -> tuple[str, ...]:
    """The reference tokens of a JSON pointer (RFC 6901), unescaped."""
    if not pointer:
        return ()
    return tuple(token.replace("~1", "/").replace("~0", "~") for token in pointer[1:].split("/"))


def make_pointer(tokens: Iterable[str | int]) -> str:
    """A JSON pointer (RFC 6901) from path tokens.

    >>> make_pointer(["deployed_state", 0, "a/b~c"])
    '/deployed_state/0/a~1b~0c'
    """
    return "".join("/" + str(token).replace("~", "~0").replace("/", "~1") for token in tokens)


def join_pointer(base: str, *tokens: str | int) -> str:
    return base + make_pointer(tokens)


def _token_key(token: str) -> tuple[int, int, str]:
    # numeric tokens (array indices) sort numerically so /layers/10 comes after /layers/9
    return (0, int(token), "") if token.isdigit() else (1, 0, token)


@dataclass(frozen=True)
class Issue:
    """One problem in one file. ``path`` is a JSON pointer into the record ("" for the whole document/file)."""

    code: str
    severity: Severity
    file: str
    path: str
    message: str
    line: int | None = None  # the file's line (1-based) when the problem has one: a YAML error in a card

    @property
    def pointer_tokens(self) -> tuple[str, ...]:
        return pointer_tokens(self.path)

    @property
    def unreadable(self) -> bool:
        """Whether this issue means the input could not be read at all (exit code 2)."""
        info = CODES.get(self.code)
        return bool(info and info.unreadable)

    def sort_key(self) -> tuple[Any, ...]:
        """Stable order: by file, then path (array indices numerically), then errors first, code, message."""
        return (self.file, tuple(_token_key(t) for t in self.pointer_tokens), _SEVERITY_RANK[self.severity],
                self.code, self.message)

    def to_dict(self) -> dict[str, Any]:
        found: dict[str, Any] = {"file": self.file, "path": self.path, "code": self.code, "severity": self.severity,
                                 "message": self.message}
        if self.line is not None:
            found["line"] = self.line
        return found


def new_issue(code: str, *, file: str, path: str = "", message: str, severity: Severity | None = None,
              line: int | None = None) -> Issue:
    """An issue with the code's default severity (``severity`` overrides it, e.g. for --require-declaration)."""
    info = CODES.get(code)
    if info is None:
        raise KeyError(f"unknown issue code {code!r}; add it to bnconvention.validation.issues.CODES")
    return Issue(code=code, severity=severity or info.severity, file=file, path=path, message=message, line=line)


def sort_issues(issues: Iterable[Issue]) -> list[Issue]:
    """Issues in their stable report order, without exact duplicates."""
    return sorted(set(issues), key=Issue.sort_key)


def best_issue(issues: Sequence[Issue]) -> Issue | None:
    """The one issue to show when there is room for one line (jsonschema's ``best_match`` idea).

    Unreadable input first, then errors before warnings, then the shallowest path, then report order.
    """
    if not issues:
        return None
    return min(issues, key=lambda i: (not i.unreadable, _SEVERITY_RANK[i.severity], len(i.pointer_tokens),
                                      i.sort_key()))


__all__ = [
    "CODES",
    "CodeInfo",
    "Issue",
    "Severity",
    "best_issue",
    "join_pointer",
    "make_pointer",
    "new_issue",
    "pointer_tokens",
    "sort_issues",
]
