"""Every exception bnconvention raises, grouped by topic.

Each error subclasses :class:`BnConventionError` *and* a built-in (``ValueError``, ``OSError``, ...) so callers can
catch either. Messages say what went wrong, where, what was found and how to fix it. The CLI maps these types to
one-line messages and exit codes (see ``bnconvention.cli.main``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


class BnConventionError(Exception):
    """Base class of every error raised by bnconvention."""


# --- records and the standard -------------------------------------------------------------------------------------


class RecordError(BnConventionError, ValueError):
    """A record of the standard could not be parsed or does not conform.

    ``issues`` holds the validation issues (``bnconvention.validation.Issue``) when there are several.
    """

    def __init__(self, message: str, *, source: str | None = None, issues: list[Any] | None = None) -> None:
        super().__init__(message)
        self.source = source
        self.issues = list(issues or [])


class CanonicalJSONError(BnConventionError, ValueError):
    """A value cannot be written as canonical JSON (NaN, infinity, a non-string key, an unsupported type)."""


# --- untrusted input: safetensors headers, cards, JSON ------------------------------------------------------------


class UntrustedInputError(BnConventionError, ValueError):
    """Bytes from a file or a server could not be parsed. ``source`` names the file or URL."""

    def __init__(self, message: str, *, source: str | Path | None = None) -> None:
        super().__init__(message)
        self.source = str(source) if source is not None else None


class SafetensorsHeaderError(UntrustedInputError):
    """A safetensors file is truncated, its header length is out of bounds, or its header is not valid.

    ``reason`` says which, for callers that map it to a code: ``"unreadable"`` (an OS error), ``"truncated"``,
    ``"too_large"``, ``"not_safetensors"`` (the bytes are another format, e.g. a PyTorch pickle or zip checkpoint)
    or ``"invalid"``.
    """

    def __init__(self, message: str, *, source: str | Path | None = None, reason: str = "invalid") -> None:
        super().__init__(message, source=source)
        self.reason = reason


class CardError(UntrustedInputError):
    """A model card (README.md) has malformed YAML front matter or a malformed bnconvention block. ``line`` is the
    card's line (1-based) of the problem when the YAML parser names one."""

    def __init__(self, message: str, *, source: str | Path | None = None, line: int | None = None) -> None:
        super().__init__(message, source=source)
        self.line = line


class JSONInputError(UntrustedInputError):
    """A JSON document is not valid UTF-8 JSON, has duplicate keys, or has the wrong top-level type."""


# --- binding records to tensors -------------------------------------------------------------------------------------


class DigestMismatchError(BnConventionError, ValueError):
    """A record's digests do not match the tensors it claims to describe."""

    def __init__(self, message: str, *, field: str | None = None, expected: str | None = None,
                 found: str | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.expected = expected
        self.found = found


class WeightsChangedError(BnConventionError, RuntimeError):
    """Trainable tensors changed during an operation that must leave them bit-identical. This is a bug: report it."""


class ImpossibleStatisticsError(BnConventionError, ValueError):
    """A file's running statistics cannot be: a NaN or infinite ``running_mean`` or ``running_var``, or a negative
    ``running_var`` (:mod:`bnconvention.formats.running_values`). ``declare`` and ``stamp`` refuse to describe such
    a file and the audit refuses to evaluate its shipped state. ``source`` names the file, ``layer`` and ``buffer``
    the first buffer found."""

    def __init__(self, message: str, *, source: str | None = None, layer: str | None = None,
                 buffer: str | None = None) -> None:
        super().__init__(message)
        self.source = source
        self.layer = layer
        self.buffer = buffer


# --- stamping -------------------------------------------------------------------------------------------------------


class StampError(BnConventionError, OSError):
    """Stamping a file failed; the original file is intact."""


class SignatureError(BnConventionError, ValueError):
    """A signature (OpenSSF model signing) is missing, malformed, or not one of the given key's; ``signature`` names
    the signature file."""

    def __init__(self, message: str, *, signature: str | None = None) -> None:
        super().__init__(message)
        self.signature = signature


# --- refit ----------------------------------------------------------------------------------------------------------


class RefitError(BnConventionError, ValueError):
    """A refit could not run (empty pool, bad batch, NaN activations, unsupported dtype); φ and θ are unchanged."""


class QuantizationError(RefitError):
    """Activation scales cannot be read, declared or refit: observers missing or never run, a scale NaN or not
    positive, an observer type the standard does not name. ``site`` names the observed site (None: the whole model).
    Nothing is written and the model's tensors are unchanged."""

    def __init__(self, message: str, *, site: str | None) -> None:
        super().__init__(message)
        self.site = site


class UnsupportedModelError(BnConventionError, TypeError):
    """The model cannot be handled (e.g. half precision where float32 is required)."""


class DeviceUnavailableError(BnConventionError, RuntimeError):
    """The device asked for (``--device cuda``, ``mps``) is not available to this torch build or machine."""


# --- audit ----------------------------------------------------------------------------------------------------------


class AuditSpecError(BnConventionError, ValueError):
    """An audit spec fails its schema or names something that does not exist. ``field`` is a JSON pointer."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class PublishedCellsNotFoundError(BnConventionError, LookupError):
    """None of the places beside a checkpoint where published cells are read holds them (the sidecar, the folder's
    ``config.json``, the card's model-index; :func:`bnconvention.audit.measure.checkpoint.published_places`). ``places``
    says each place looked at, the keys looked for and what was there."""

    def __init__(self, message: str, *, checkpoint: str | None = None, places: list[str] | None = None) -> None:
        super().__init__(message)
        self.checkpoint = checkpoint
        self.places = list(places or [])


class ReproductionInputError(BnConventionError, LookupError):
    """What ``bnconvention reproduce`` needs to re-run an annotation is unreadable or unavailable: the annotation
    itself, a spec that is not the annotation's, weights whose digests differ, a pool or dataset revision that no
    longer exists. ``missing`` names the thing (a path, ``repo@revision``, a spec field)."""

    def __init__(self, message: str, *, missing: str | None = None) -> None:
        super().__init__(message)
        self.missing = missing


class FactoryNotAllowedError(BnConventionError, PermissionError):
    """A model factory was requested that is not on the allowlist; nothing was imported."""


class FactoryImportError(BnConventionError, ImportError):
    """An allowed model factory could not be loaded: its module is not importable (missing, or it raises on
    import), or it has no such callable. ``target`` is the ``module:function`` that was asked for."""

    def __init__(self, message: str, *, target: str | None = None) -> None:
        super().__init__(message)
        self.target = target


class FactoryArgumentError(BnConventionError, TypeError):
    """The keyword arguments given for a model factory do not fit its signature; nothing was built."""


class FactoryCallError(BnConventionError, RuntimeError):
    """A model factory raised while building the model, or returned something that is not a ``torch.nn.Module``."""


class ArchitectureConfigError(UntrustedInputError):
    """A repo's ``config.json`` names an architecture we will not build: outside timm's or transformers' own
    registries, not an image classifier, remote code (``auto_map``, ``trust_remote_code``), or arguments that are not
    plain JSON values. Nothing named by the file was imported. ``source`` names the repo and file."""


class CheckpointMismatchError(BnConventionError, ValueError):
    """A checkpoint's tensors do not fit the model built by the factory (names or shapes differ)."""


# --- hub ------------------------------------------------------------------------------------------------------------


class HubError(BnConventionError, RuntimeError):
    """A Hub operation failed after retries. ``repo_id`` names the repository when known."""

    def __init__(self, message: str, *, repo_id: str | None = None) -> None:
        super().__init__(message)
        self.repo_id = repo_id


class TransientHubError(HubError):
    """A Hub read that failed in a way worth retrying without an HTTP status to say so (a body shorter than its
    announced length). Raised by ``bnconvention.hub``'s readers and retried like a dropped connection."""


class HubNetworkError(HubError, ConnectionError):
    """The Hub could not be reached or did not answer (connection refused, dropped, cut short, timed out) after the
    retries. ``endpoint`` names the Hub; the message says what was being done and which failure it was."""

    def __init__(self, message: str, *, endpoint: str, repo_id: str | None = None) -> None:
        super().__init__(message, repo_id=repo_id)
        self.endpoint = endpoint


class OutputInUseError(BnConventionError, RuntimeError):
    """Another run holds the lock of an output folder or journal (``hub census|audit|push``), or of a repo's pull
    requests (:mod:`bnconvention.hub.locking`); nothing was written. ``path`` is the lock file; ``holder`` says who
    holds it (``pid``, ``host``, ``command``, ``since``), None when it has not said."""

    def __init__(self, message: str, *, path: str | None = None, holder: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.holder = holder


class UsageError(BnConventionError, ValueError):
    """A command was called with arguments that cannot work together."""


class PreregistrationError(BnConventionError, ValueError):
    """A census differs from its preregistration (spec, checkpoints or margin) and the change was not recorded as an
    amendment, or a second, different preregistration was asked for the same output folder."""


class MissingDependencyError(BnConventionError, ImportError):
    """A command needs an optional dependency (torch, scipy, ...) that is not installed. ``extra`` names the
    ``bnconvention[...]`` extra that installs it; ``module`` the module that was missing."""

    def __init__(self, message: str, *, module: str | None = None, extra: str | None = None) -> None:
        super().__init__(message)
        self.module = module
        self.extra = extra


__all__ = [
    "AuditSpecError",
    "BnConventionError",
    "CanonicalJSONError",
    "CardError",
    "CheckpointMismatchError",
    "DeviceUnavailableError",
    "DigestMismatchError",
    "FactoryArgumentError",
    "FactoryCallError",
    "FactoryImportError",
    "FactoryNotAllowedError",
    "HubError",
    "HubNetworkError",
    "ImpossibleStatisticsError",
    "JSONInputError",
    "MissingDependencyError",
    "OutputInUseError",
    "PreregistrationError",
    "QuantizationError",
    "RecordError",
    "RefitError",
    "ReproductionInputError",
    "SafetensorsHeaderError",
    "SignatureError",
    "StampError",
    "TransientHubError",
    "UnsupportedModelError",
    "UntrustedInputError",
    "UsageError",
    "WeightsChangedError",
]
