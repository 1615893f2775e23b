"""Signatures of OpenSSF model signing (the ``model-signing`` package) read without a key: where a signature sits,
which files it lists with which digests, and whether the files still match them.

What ``bnconvention validate`` reports as ``signature.stale`` and what ``bnconvention stamp`` warns about (a stamp
rewrites header bytes a signature covers: stamp first, then sign); signing and verifying with a key are in
:mod:`bnconvention.authoring.signing`. The path rules and reading a signature need only the standard library;
hashing the files as model-signing does imports ``model_signing`` inside the functions (``bnconvention[provenance]``;
``ModuleNotFoundError`` without it: the caller says the check was not run).
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from bnconvention.errors import SignatureError

SIGNATURE_NAME = "model.sig"  # model-signing's default signature name: a folder's signature
SIGNATURE_SUFFIX = ".sig"  # a file's signature: <file>.sig beside it
ANNOTATIONS_DIR = "bnconvention"  # refit annotations: signed on their own, left out of a release's signature
EXTRA = "provenance"
RESIGN_HINT = "bnconvention sign {target} --private-key KEY.pem"


def signature_path(target: Path) -> Path:
    """Where the signature of ``target`` lives: ``target/model.sig`` for a folder, ``<file>.sig`` for a file."""
    return target / SIGNATURE_NAME if target.is_dir() else target.with_name(target.name + SIGNATURE_SUFFIX)


def signature_target(signature: Path) -> Path:
    """What a signature found on disk signs (the reverse of :func:`signature_path`)."""
    if signature.name == SIGNATURE_NAME:
        return signature.parent
    return signature.with_name(signature.name[: -len(SIGNATURE_SUFFIX)])


def signatures_covering(path: Path) -> list[Path]:
    """The signatures on disk that cover ``path``: its own ``<file>.sig`` and the ``model.sig`` of its folder (a
    release's weights and card; not an annotation, which its release's signature leaves out)."""
    found = [path.with_name(path.name + SIGNATURE_SUFFIX)]
    if path.parent.name != ANNOTATIONS_DIR:
        found.append(path.parent / SIGNATURE_NAME)
    return [p for p in found if p.is_file()]


class Serialization(TypedDict, total=False):
    """How model-signing hashed the files (its predicate's ``serialization``, as the signature holds it): the
    method (``files`` or ``shards``), the hash, the paths left out, whether symlinks were followed."""

    method: str
    hash_type: str
    ignore_paths: list[str]
    allow_symlinks: bool
    shard_size: int


@dataclass(frozen=True)
class SignedFiles:
    """What a signature lists, read without a key: each signed file (relative name) with its digest, and how the
    files were hashed (model-signing's ``serialization``: method, hash type, paths left out)."""

    signature: Path
    target: Path
    digests: dict[str, str]
    serialization: Serialization


@dataclass(frozen=True)
class SignatureCheck:
    """The files of ``target`` against the digests ``signature`` lists: changed, missing and unsigned files."""

    signature: Path
    target: Path
    signed: tuple[str, ...]
    changed: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()

    @property
    def matches(self) -> bool:
        return not (self.changed or self.missing or self.extra)

    def describe(self) -> str:
        """One phrase naming the files that differ (or saying that they all match)."""
        if self.matches:
            return "the signed file matches" if len(self.signed) == 1 else f"all {len(self.signed)} signed files match"
        parts = []
        for label, names in (("changed since signing", self.changed), ("missing", self.missing),
                             ("not signed", self.extra)):
            if names:
                parts.append(f"{label}: {', '.join(names)}")
        return "; ".join(parts)


# --- reading a signature without a key ------------------------------------------------------------------------------


def read_signed_files(signature: Path, target: Path | None = None) -> SignedFiles:
    """The files and digests ``signature`` lists (the DSSE payload of its Sigstore bundle), not authenticated:
    :func:`verify` checks the signature itself with the public key."""
    target = target if target is not None else signature_target(signature)
    try:
        bundle = json.loads(signature.read_text(encoding="utf-8"))
        statement = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"], validate=True))
        predicate = statement["predicate"]
        resources = {str(r["name"]): str(r["digest"]) for r in predicate["resources"]}
        serialization = Serialization(**predicate["serialization"])
    except (OSError, UnicodeDecodeError, ValueError, binascii.Error, KeyError, TypeError) as exc:
        raise SignatureError(f"{signature}: not a model-signing signature ({type(exc).__name__}: {exc}); sign again: "
                             f"{RESIGN_HINT.format(target=target)}", signature=str(signature)) from exc
    if not target.is_dir() and set(resources) == {"."}:  # a single file is listed as "."
        resources = {target.name: resources["."]}
    return SignedFiles(signature=signature, target=target, digests=resources, serialization=serialization)


def _hashing_config(serialization: Serialization, target: Path) -> Any:
    from model_signing import hashing

    method = serialization.get("method")
    ignore = [Path(p) for p in serialization.get("ignore_paths", ())]
    common: dict[str, Any] = {"hashing_algorithm": serialization.get("hash_type", "sha256"),  # model-signing's kwargs
                              "allow_symlinks": bool(serialization.get("allow_symlinks", False))}
    if method == "files":
        config = hashing.Config().use_file_serialization(**common)
    elif method == "shards":
        config = hashing.Config().use_shard_serialization(shard_size=serialization["shard_size"], **common)
    else:
        raise SignatureError(f"signature serialization method {method!r} is not one model-signing reads")
    if target.is_dir():
        config.set_ignored_paths(paths=ignore, ignore_git_paths=False)
    return config


def current_digests(target: Path, serialization: Serialization) -> dict[str, str]:
    """The digests of ``target``'s files now, hashed as the signature's ``serialization`` says."""
    manifest = _hashing_config(serialization, target).hash(target)
    found = {str(rd.identifier): rd.digest.digest_hex for rd in manifest.resource_descriptors()}
    if not target.is_dir() and set(found) == {"."}:
        found = {target.name: found["."]}
    return found


def check_signed_files(signature: Path, target: Path | None = None) -> SignatureCheck:
    """The files against the digests ``signature`` lists, without a key (``ModuleNotFoundError`` when model-signing
    is not installed: the caller says the check was not run)."""
    signed = read_signed_files(signature, target)
    if not signed.target.exists():
        return SignatureCheck(signature, signed.target, tuple(sorted(signed.digests)),
                              missing=tuple(sorted(signed.digests)))
    now = current_digests(signed.target, signed.serialization)
    return SignatureCheck(
        signature=signature, target=signed.target, signed=tuple(sorted(signed.digests)),
        changed=tuple(sorted(n for n in signed.digests if n in now and now[n] != signed.digests[n])),
        missing=tuple(sorted(n for n in signed.digests if n not in now)),
        extra=tuple(sorted(n for n in now if n not in signed.digests)))


__all__ = ["ANNOTATIONS_DIR", "EXTRA", "RESIGN_HINT", "SIGNATURE_NAME", "SIGNATURE_SUFFIX", "SignatureCheck",
           "SignedFiles", "check_signed_files", "current_digests", "read_signed_files", "signature_path",
           "signature_target", "signatures_covering"]
