"""Sign and verify releases, annotations and declarations with OpenSSF model signing (the ``model-signing`` package).

The signature is model-signing's, not ours: a Sigstore bundle holding a DSSE envelope whose in-toto statement lists
every signed file with its sha256 (``https://model_signing/signature/v1.0``), so ``model_signing verify key`` checks
what ``bnconvention sign`` wrote and the reverse. Key-based signing (an elliptic-curve private key, PEM) works
offline. Two things can be signed:

* a **release folder**: every file in it, signature ``model.sig`` in the folder (model-signing's default name);
  the signature itself, git's files and the ``bnconvention/`` folder are left out, because refit annotations are
  other people's claims, added later by pull request, and carry their own signatures;
* a **file** (a refit annotation ``bnconvention/refit-*.json``, a declaration ``record.json``): signature
  ``<file>.sig`` beside it, pushed with the annotation's pull request.

:func:`verify` checks the signature with the public key, then the records' digests against the weights
(:func:`bnconvention.formats.digests.file_digests`), and names every file that fails.
:func:`~bnconvention.formats.signatures.check_signed_files`
compares the files with the digests a signature lists without any key: what ``bnconvention validate`` reports as
``signature.stale`` and what ``bnconvention stamp`` warns about (a stamp rewrites header bytes the signature covers:
stamp first, then sign).

``model_signing`` is imported inside the functions (``bnconvention[provenance]``); :func:`signatures_covering` and
the path rules need nothing beyond the standard library.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bnconvention.authoring.stamp import checked_record
from bnconvention.errors import BnConventionError, SignatureError, UsageError
from bnconvention.formats.canonical import loads_strict
from bnconvention.formats.digests import file_digests
from bnconvention.formats.safetensors_header import read_header
from bnconvention.formats.signatures import (
    ANNOTATIONS_DIR,
    RESIGN_HINT,
    SignatureCheck,
    check_signed_files,
    signature_path,
)
from bnconvention.standard.locations import record_from_header
from bnconvention.standard.models import BatchNormState, Declaration


@dataclass(frozen=True)
class DigestCheck:
    """One record's digests against one weights file: ``problem`` is ``None`` when they match."""

    record: str
    weights: str
    problem: str | None = None


@dataclass(frozen=True)
class VerifyResult:
    """:func:`verify`'s answer: the signature's check and each record's digests against its weights."""

    signature: SignatureCheck
    digests: list[DigestCheck] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.signature.matches and all(d.problem is None for d in self.digests)

    @property
    def failing_files(self) -> list[str]:
        """Every file that fails, by name (files changed since signing, then records whose digests differ)."""
        base = self.signature.target if self.signature.target.is_dir() else self.signature.target.parent
        names = [str(base / n) for n in (*self.signature.changed, *self.signature.missing, *self.signature.extra)]
        return list(dict.fromkeys(names + [d.record for d in self.digests if d.problem is not None]))


# --- signing and verifying with a key ---------------------------------------------------------------------------------


def sign(target: Path, *, private_key: Path, signature: Path | None = None, password: str | None = None) -> Path:
    """Sign ``target`` (a release folder or one file) with an elliptic-curve private key (PEM); the signature path.

    A folder's signature leaves out itself, git's files and ``bnconvention/`` (annotations are signed on their
    own); a file's covers that file only."""
    from model_signing import hashing, signing

    if not target.exists():
        raise FileNotFoundError(f"{target} does not exist; name a release folder, an annotation or a record")
    signature = signature if signature is not None else signature_path(target)
    config = hashing.Config()
    if target.is_dir():
        ignored: list[Path] = [Path(ANNOTATIONS_DIR)]
        with contextlib.suppress(ValueError):  # a signature written outside the folder is not one of its files
            ignored.append(signature.resolve().relative_to(target.resolve()))
        config.set_ignored_paths(paths=ignored)
    try:
        signing.Config().set_hashing_config(config).use_elliptic_key_signer(
            private_key=private_key, password=password).sign(target, signature)
    except ValueError as exc:  # an unreadable or unsupported key
        raise SignatureError(f"cannot sign {target} with {private_key}: {exc}", signature=str(signature)) from exc
    return signature


def verify_signature(target: Path, *, public_key: Path, signature: Path | None = None) -> SignatureCheck:
    """Check ``signature`` with ``public_key`` and the files against it; :class:`SignatureError` when the signature
    is not one of this key's (the files are compared only once the signature is authentic)."""
    from model_signing import verifying

    signature = signature if signature is not None else signature_path(target)
    if not signature.is_file():
        raise SignatureError(f"{signature} does not exist: {target} is not signed; sign it: "
                             f"{RESIGN_HINT.format(target=target)}", signature=str(signature))
    try:
        verifying.Config().use_elliptic_key_verifier(public_key=public_key).verify(target, signature)
    except ValueError as exc:
        if not str(exc).startswith("Signature mismatch"):  # a bad signature or another key: no file to name
            raise SignatureError(f"{signature} is not a valid signature of {target} by {public_key}: {exc}",
                                 signature=str(signature)) from exc
    except Exception as exc:  # noqa: BLE001 - model-signing's own errors (malformed bundle, key) become one line
        raise SignatureError(f"{signature} cannot be verified with {public_key}: {type(exc).__name__}: {exc}",
                             signature=str(signature)) from exc
    return check_signed_files(signature, target)


def _weights_declaration(weights: Path) -> Any:
    return record_from_header(read_header(weights), source=str(weights))


def check_record_digests(record: Any, weights: Path, *, source: str) -> DigestCheck:
    """A record's digests against a weights file: a declaration's trainable, running and per-layer digests, or a
    refit annotation's subject digests."""
    try:
        model, _ = checked_record(record, source=source)
    except BnConventionError as exc:  # an edited record: name it with the signature's verdict, not instead of it
        return DigestCheck(source, str(weights), str(exc))
    if not weights.is_file():
        return DigestCheck(source, str(weights), f"{weights} does not exist: the weights the record describes")
    if isinstance(model, Declaration):
        layers = {layer.name: layer.running_sha256 for s in model.deployed_state if isinstance(s, BatchNormState)
                  for layer in s.layers}
        try:
            file_digests(weights, bn_layers=list(layers)).check_against(
                trainable_sha256=model.digests.trainable_sha256, running_sha256=model.digests.running_sha256,
                layer_running_sha256=layers, where=str(weights))
        except BnConventionError as exc:
            return DigestCheck(source, str(weights), str(exc))
        return DigestCheck(source, str(weights))
    digests = file_digests(weights)
    subject = model.subject
    for name, expected, found in (("subject.trainable_sha256", subject.trainable_sha256, digests.trainable_sha256),
                                  ("subject.running_sha256", subject.running_sha256, digests.running_sha256)):
        if expected is not None and expected != found:
            return DigestCheck(source, str(weights), (
                f"{name} is {expected} but {weights} gives {found}: the annotation audited other tensors"))
    return DigestCheck(source, str(weights))


def _release_records(folder: Path) -> Iterable[tuple[Any, Path, str]]:
    """``(record, weights, source)`` for each record of a release folder: each weights file's stamped record, and
    each annotation under ``bnconvention/`` with its subject file."""
    for weights in sorted(folder.glob("*.safetensors")):
        record = _weights_declaration(weights)
        if record is not None:
            yield record, weights, f"{weights} header"
    annotations = folder / ANNOTATIONS_DIR
    for path in sorted(annotations.glob("*.json")) if annotations.is_dir() else ():
        record = loads_strict(path.read_bytes(), source=str(path))
        subject = record.get("subject", {}).get("filename") if isinstance(record, dict) else None
        if isinstance(subject, str):
            yield record, folder / subject, str(path)


def record_weights(record_path: Path, record: Any) -> Path:
    """The weights a record file describes when none is named: an annotation's subject (in the release that holds
    ``bnconvention/``), or the one ``.safetensors`` file beside a declaration."""
    if isinstance(record, dict) and isinstance(record.get("subject"), dict):
        release = record_path.parent.parent if record_path.parent.name == ANNOTATIONS_DIR else record_path.parent
        return release / str(record["subject"].get("filename"))
    beside = sorted(record_path.parent.glob("*.safetensors"))
    if len(beside) != 1:
        raise UsageError(f"{record_path}: name the weights it describes (--weights); {len(beside)} .safetensors "
                         "files are beside it")
    return beside[0]


def verify(target: Path, *, public_key: Path, signature: Path | None = None,
           weights: Path | None = None) -> VerifyResult:
    """The signature of ``target`` (with ``public_key``), then the digests of its records against the weights: a
    folder's stamped records and annotations, or a record file against ``weights`` (default: :func:`record_weights`).
    """
    checked = verify_signature(target, public_key=public_key, signature=signature)
    if target.is_dir():
        digests = [check_record_digests(r, w, source=s) for r, w, s in _release_records(target)]
    else:
        record = loads_strict(target.read_bytes(), source=str(target))
        digests = [check_record_digests(record, weights or record_weights(target, record), source=str(target))]
    return VerifyResult(signature=checked, digests=digests)


__all__ = ["DigestCheck", "VerifyResult", "check_record_digests", "record_weights", "sign", "verify",
           "verify_signature"]
