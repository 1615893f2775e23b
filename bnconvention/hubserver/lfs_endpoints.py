"""The classic git-lfs upload path, served when the hub runs with ``lfs=True``: which files preupload sends to LFS,
the batch API, the upload of one object and its verification. Xet token requests get a one-line refusal.

huggingface_hub uploads an ``lfs`` file in three requests before the commit that names it (``lfsFile`` line)::

    POST /{prefix}{repo}.git/info/lfs/objects/batch   {"operation": "upload", "objects": [{"oid", "size"}]}
    PUT  <actions.upload.href>                         the raw bytes (no token: the URL is signed, like S3's)
    POST <actions.verify.href>                         {"oid", "size"}

Only the ``basic`` transfer is offered (no ``chunk_size`` header, so no multipart). An object the store already
holds gets no ``actions``, which the client takes as "already uploaded". ``datasets.Dataset.push_to_hub`` depends on
this path: it pre-uploads each parquet shard and deletes the temporary file before its commit. Which files are
``lfs`` is decided in ``lfs``.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from bnconvention.formats.json_types import JsonObject, JsonValue
from bnconvention.hubserver.errors import HubRequestError
from bnconvention.hubserver.handlers import (
    HubContext,
    HubRequest,
    HubResponse,
    json_response,
    readable_state,
    require_user,
)
from bnconvention.hubserver.lfs import LFS_JSON, SHA256_HEX, UPLOAD_URL_LIFETIME_S
from bnconvention.hubserver.validation import URL_PREFIX, bad_request

# --- the batch API -------------------------------------------------------------------------------------------------

def _signature(context: HubContext, oid: str, size: int) -> str:
    return hmac.new(context.lfs_secret, f"{oid}:{size}".encode("ascii"), hashlib.sha256).hexdigest()[:40]


def _require_lfs(context: HubContext) -> None:
    if not context.lfs:
        raise HubRequestError("this local Hub answers every upload 'regular' and serves no LFS batch API; start "
                              "it with lfs=True for LFS uploads", status=404, code="LfsNotEnabled")


@dataclass(frozen=True)
class LfsObjectAnswer:
    """One object of a batch answer: an ``error`` (code, message) for a malformed or refused object, else upload and
    verify URLs when the store lacks it, else neither (the client takes that as "already uploaded")."""

    oid: str
    size: int
    upload_href: str | None = None
    verify_href: str | None = None
    error: tuple[int, str] | None = None

    def to_json(self) -> JsonObject:
        if self.error is not None:
            return {"oid": self.oid, "size": self.size, "error": {"code": self.error[0], "message": self.error[1]}}
        if self.upload_href is None or self.verify_href is None:
            return {"oid": self.oid, "size": self.size}
        return {"oid": self.oid, "size": self.size, "authenticated": True,
                "actions": {"upload": {"href": self.upload_href, "expires_in": UPLOAD_URL_LIFETIME_S},
                            "verify": {"href": self.verify_href, "expires_in": UPLOAD_URL_LIFETIME_S}}}


def _object_error(oid: JsonValue, size: JsonValue, code: int, message: str) -> LfsObjectAnswer:
    return LfsObjectAnswer(oid=str(oid), size=size if isinstance(size, int) and not isinstance(size, bool) else 0,
                           error=(code, message))


def _batch_object(context: HubContext, request: HubRequest, item: JsonValue) -> LfsObjectAnswer:
    """One object's answer: no actions when the store holds it, upload + verify actions otherwise, or an error."""
    if not isinstance(item, dict):
        return _object_error("", 0, 422, "each object must be {\"oid\": <sha256 hex>, \"size\": <bytes>}")
    oid, size = item.get("oid"), item.get("size")
    if not isinstance(oid, str) or not SHA256_HEX.match(oid):
        return _object_error(oid, size, 422, f"oid {oid!r} is not a lowercase sha256 hex digest")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        return _object_error(oid, size, 422, f"size {size!r} is not a non-negative integer")
    if size > context.max_body_bytes:
        return _object_error(oid, size, 413, f"{size} bytes is over this server's {context.max_body_bytes}-byte "
                                             "upload limit")
    if context.store.has_blob(oid, size):
        return LfsObjectAnswer(oid=oid, size=size)
    upload = f"{request.base_url}/api/lfs-objects/{oid}/{size}/{_signature(context, oid, size)}"
    verify = f"{request.base_url}/{URL_PREFIX[request.repo_type]}{request.repo_id}.git/info/lfs/objects/verify"
    return LfsObjectAnswer(oid=oid, size=size, upload_href=upload, verify_href=verify)


def lfs_batch(context: HubContext, request: HubRequest) -> HubResponse:
    _require_lfs(context)
    readable_state(context, request)
    require_user(request)  # anyone signed in may upload for a pull request; the commit checks the rest
    body = request.json_body()
    if body.get("operation") != "upload":
        raise bad_request(f"operation {body.get('operation')!r} is not served: only 'upload' (download files "
                          "through /resolve)", repo_id=request.repo_id)
    transfers = body.get("transfers", ["basic"])
    if not isinstance(transfers, list) or "basic" not in transfers:
        raise bad_request(f"transfers {transfers!r} do not include 'basic', the only one served",
                          repo_id=request.repo_id)
    objects = body.get("objects")
    if not isinstance(objects, list):
        raise bad_request("objects must be a list of {oid, size}", repo_id=request.repo_id)
    answers: list[JsonValue] = [_batch_object(context, request, item).to_json() for item in objects]
    return json_response({"transfer": "basic", "objects": answers, "hash_algo": "sha256"},
                         headers={"Content-Type": LFS_JSON})


def _upload_target(context: HubContext, request: HubRequest) -> tuple[str, int]:
    """The oid and size a signed upload URL names (403 when the signature does not match)."""
    parts = ((request.route.path if request.route else None) or "").split("/")
    if len(parts) != 3 or not SHA256_HEX.match(parts[0]) or not parts[1].isdigit() or len(parts[1]) > 15:
        raise bad_request("an LFS upload URL is /api/lfs-objects/<sha256>/<size>/<signature>")
    oid, size = parts[0], int(parts[1])
    if not hmac.compare_digest(parts[2], _signature(context, oid, size)):
        raise HubRequestError("this LFS upload URL was not issued by this server (bad signature); ask the batch "
                              "API for one", status=403, code="Forbidden")
    return oid, size


def lfs_upload(context: HubContext, request: HubRequest) -> HubResponse:
    _require_lfs(context)
    oid, size = _upload_target(context, request)
    context.store.put_lfs_object(request.body, sha256=oid, size=size)
    return HubResponse(status=200, headers={"ETag": f'"{oid}"'})


def lfs_verify(context: HubContext, request: HubRequest) -> HubResponse:
    _require_lfs(context)
    readable_state(context, request)
    require_user(request)
    body = request.json_body()
    oid, size = body.get("oid"), body.get("size")
    if not isinstance(oid, str) or not SHA256_HEX.match(oid) or not isinstance(size, int) or isinstance(size, bool):
        raise bad_request("verify needs {\"oid\": <sha256 hex>, \"size\": <bytes>}", repo_id=request.repo_id)
    if not context.store.has_blob(oid, size):
        raise HubRequestError(f"LFS object sha256:{oid} ({size} bytes) was not uploaded; PUT it first",
                              status=422, code="LfsObjectMissing", repo_id=request.repo_id)
    return json_response({"success": True}, headers={"Content-Type": LFS_JSON})


def xet_token(context: HubContext, request: HubRequest) -> HubResponse:
    """Xet-enabled clients ask for a token before an ``lfs`` upload: say in one line what to do instead."""
    readable_state(context, request)
    raise bad_request("this local Hub has no Xet storage: set HF_HUB_DISABLE_XET=1 in the client's environment "
                      "(its LFS uploads then use the classic LFS batch API)", repo_id=request.repo_id)


ENDPOINTS = {"lfs_batch": lfs_batch, "lfs_upload": lfs_upload, "lfs_verify": lfs_verify, "xet_token": xet_token}
