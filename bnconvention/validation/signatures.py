"""The signatures of a release (OpenSSF model signing) against its files, without a key: ``signature.stale``.

A release folder's ``model.sig`` and each annotation's ``<file>.sig`` list the files they signed with their digests;
a file changed since (a stamp after signing, an edited annotation) makes the signature fail for everyone who verifies
it. Whether the signature is the signer's needs the public key (``bnconvention verify``); whether it still matches
the files does not. The check hashes the files as model-signing does, so it runs only where model-signing is
installed (``bnconvention[provenance]``); elsewhere the signature's line says the check was not run. Nothing here
imports model-signing (or torch) until a signature is found.
"""

from __future__ import annotations

import posixpath
from pathlib import Path

from bnconvention.errors import SignatureError
from bnconvention.formats.signatures import (
    RESIGN_HINT,
    SIGNATURE_NAME,
    SIGNATURE_SUFFIX,
    check_signed_files,
    signature_target,
)
from bnconvention.validation.issues import Issue, new_issue

NOT_RUN = "signature check not run: model-signing is not installed (pip install 'bnconvention[provenance]')"


def release_signatures(directory: Path, displays: list[str], annotations: list[tuple[str, Path]]
                       ) -> list[tuple[str, Path]]:
    """``(display, path)`` of the signatures of a release: its folder's ``model.sig`` (named beside the release's
    other files, ``displays``) and each annotation's ``<file>.sig``."""
    found = []
    folder_signature = directory / SIGNATURE_NAME
    if folder_signature.is_file() and displays:
        found.append((posixpath.join(posixpath.dirname(displays[0]), SIGNATURE_NAME), folder_signature))
    for display, path in annotations:
        signature = path.with_name(path.name + SIGNATURE_SUFFIX)
        if signature.is_file():
            found.append((display + SIGNATURE_SUFFIX, signature))
    return found


def check_signature(display: str, signature: Path) -> tuple[list[Issue], str]:
    """The issues of one signature against the files it signed, and its summary note."""
    target = signature_target(signature)
    try:
        check = check_signed_files(signature, target)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in {"model_signing", "OpenSSL", "blake3", "sigstore"}:
            raise
        return [], NOT_RUN
    except SignatureError as exc:
        return [new_issue("signature.unreadable", file=display, message=str(exc))], "unreadable signature"
    if check.matches:
        return [], f"signature: {check.describe()} (the signer's key is checked by bnconvention verify)"
    hint = RESIGN_HINT.format(target=posixpath.dirname(display) if signature.name == "model.sig" else display[:-4])
    return [new_issue("signature.stale", file=display, message=(
        f"the signature no longer matches the files it signed ({check.describe()}); whoever verifies it will "
        f"refuse the release. If the change is yours (a stamp after signing), sign again: {hint}"))], (
        f"signature no longer matches ({check.describe()})")


__all__ = ["NOT_RUN", "check_signature", "release_signatures"]
