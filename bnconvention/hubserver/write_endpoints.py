"""Write endpoints: repo creation, README validation, preupload and ndjson commits.

By default preupload answers ``uploadMode: "regular"``: the file content then travels base64-encoded inside the
commit, and the client never needs an LFS or Xet server; an ``lfsFile`` line is then refused, since this server
never asked for one. A hub started with ``lfs=True`` answers like the Hub (``lfs.upload_mode``) and accepts
``lfsFile`` lines naming objects uploaded through the batch API (``lfs_endpoints``). Every line of a commit is
checked before anything is written.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError

from bnconvention.errors import CardError
from bnconvention.formats.card import CARD_NAME, parse_card_metadata
from bnconvention.formats.json_types import JsonObject, JsonValue
from bnconvention.hubserver.auth import forbidden
from bnconvention.hubserver.errors import HubRequestError
from bnconvention.hubserver.handlers import (
    HubContext,
    HubRequest,
    HubResponse,
    error_response,
    json_response,
    readable_state,
    require_user,
    require_write,
    resolved_commit,
)
from bnconvention.hubserver.lfs import lfs_size, revision_patterns, upload_mode
from bnconvention.hubserver.repos import PR_REF
from bnconvention.hubserver.trees import AddFile, AddLfsFile, DeleteFile, DeleteFolder, Operation
from bnconvention.hubserver.validation import (
    URL_PREFIX,
    bad_request,
    check_file_path,
    check_folder_path,
    check_repo_id,
    check_repo_type,
)


class CommitHeader(BaseModel):
    """The ``header`` line of an ndjson commit: the summary (the commit title), an optional description and the
    optional ``parentCommit`` the client built on. Other keys are ignored, as the Hub does."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    summary: StrictStr
    description: StrictStr | None = ""
    parent_commit: StrictStr | None = Field(default=None, alias="parentCommit")

    @classmethod
    def parse(cls, value: JsonObject) -> CommitHeader:
        """The header of ``value`` (400 when a field is missing or not a string)."""
        try:
            return cls.model_validate(value)
        except ValidationError as exc:
            raise bad_request("the commit header needs a string summary (and optional string description and "
                              "parentCommit)") from exc


@dataclass(frozen=True)
class PreuploadFile:
    """One file the client asks about before a commit: its path, size and the first bytes of its content (decoded
    only when the answer depends on them, on a hub that serves LFS; ``b""`` otherwise)."""

    path: str
    size: int
    sample: bytes

    @classmethod
    def parse(cls, item: JsonValue, index: int, *, with_sample: bool) -> PreuploadFile:
        """``files[index]`` of a preupload body (400 naming the field that is wrong)."""
        if not isinstance(item, dict):
            raise bad_request(f"files[{index}] must be an object")
        path = check_file_path(item.get("path"), field=f"files[{index}].path")
        size = item.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise bad_request(f"files[{index}].size must be a non-negative integer, found {size!r}")
        if not with_sample:
            return cls(path=path, size=size, sample=b"")
        sample = item.get("sample", "")
        try:
            data = base64.b64decode(sample if isinstance(sample, str) else "", validate=True)
        except (binascii.Error, ValueError) as exc:
            raise bad_request(f"files[{index}].sample is not base64: {exc}") from exc
        return cls(path=path, size=size, sample=data)


def repo_url(request: HubRequest, repo_type: str, repo_id: str) -> str:
    return f"{request.base_url}/{URL_PREFIX[repo_type]}{repo_id}"


def create_repo(context: HubContext, request: HubRequest) -> HubResponse:
    user = require_user(request)
    body = request.json_body()
    repo_type = check_repo_type(body.get("type"))
    organization = body.get("organization")
    if organization is not None and not isinstance(organization, str):
        raise bad_request(f"organization must be a string, found {organization!r}")
    name = body.get("name")
    repo_id = f"{organization or user}/{name}"
    check_repo_id(repo_id)
    visibility = body.get("visibility")
    if visibility not in (None, "public", "private"):
        raise bad_request(f"visibility must be 'public' or 'private', found {visibility!r}")
    private = visibility == "private" or body.get("private") is True
    url = repo_url(request, repo_type, repo_id)
    if context.store.repo_exists(repo_id, repo_type=repo_type):
        # huggingface_hub's create_repo(exist_ok=True) reads "url" from this 409 body.
        exc = HubRequestError(f"You already created this {repo_type} repo: {repo_id}", status=409,
                              code="RepoExists", repo_id=repo_id)
        return error_response(exc, extra={"url": url})
    if not context.access.can_write(user, repo_id.split("/")[0]):
        raise forbidden(f"{user} cannot create repos in {repo_id.split('/')[0]}: not a member", repo_id=repo_id)
    try:
        context.store.create_repo(repo_id, repo_type=repo_type, private=private, author=user)
    except HubRequestError as exc:
        if exc.code == "RepoExists":  # created by a concurrent request since the check above
            return error_response(exc, extra={"url": url})
        raise
    return json_response({"url": url, "name": repo_id, "id": repo_id})


def validate_yaml(context: HubContext, request: HubRequest) -> HubResponse:
    """Always JSON: huggingface_hub reads the body before the status."""
    try:
        body = request.json_body()
        content = body.get("content")
        if not isinstance(content, str):
            raise bad_request("content must be the README text (a string)")
        check_repo_type(body.get("repoType"))
        metadata = parse_card_metadata(content, source=CARD_NAME)
    except (HubRequestError, CardError) as exc:
        message = str(exc)
        status = exc.status if isinstance(exc, HubRequestError) else 400
        return json_response({"errors": [{"message": message}], "warnings": [], "error": message}, status=status,
                             headers={"X-Error-Code": "BadRequest"})
    warnings = [] if metadata else [{"message": "Empty or missing yaml metadata in repo card"}]
    return json_response({"errors": [], "warnings": warnings})


def _check_commit_permission(context: HubContext, request: HubRequest, *, create_pr: bool) -> str:
    """Anyone signed in may open a pull request; its author and the namespace's writers may push to it."""
    user = require_user(request)
    if create_pr:
        return user
    match = PR_REF.match(request.revision)
    if match:
        discussion = context.store.get_discussion(request.repo_id, int(match.group(1)), repo_type=request.repo_type)
        if discussion["author"] == user or context.access.can_write(user, request.repo_id.split("/")[0]):
            return user
        raise forbidden(f"{user} cannot push to {request.revision}: only its author and the repo's owners can",
                        repo_id=request.repo_id)
    return require_write(context, request)


def preupload(context: HubContext, request: HubRequest) -> HubResponse:
    readable_state(context, request)
    _check_commit_permission(context, request, create_pr=request.flag("create_pr"))
    body = request.json_body()
    files = body.get("files")
    if not isinstance(files, list):
        raise bad_request("files must be a list of {path, sample, size}")
    commit = resolved_commit(context, request)
    patterns = revision_patterns(context, commit) if context.lfs else []
    answers: list[JsonValue] = []
    for index, item in enumerate(files):
        file = PreuploadFile.parse(item, index, with_sample=context.lfs)
        path = file.path
        mode = upload_mode(path, size=file.size, sample=file.sample, patterns=patterns) if context.lfs \
            else "regular"
        answer: JsonObject = {"path": path, "uploadMode": mode, "shouldIgnore": False}
        existing = commit.tree.get(path)
        # The oid lets the client drop files that did not change: a git blob id for regular files, the
        # content's sha256 for LFS ones (what the client computes for each mode).
        if existing is not None and mode == "lfs":
            answer["oid"] = existing.sha256
        elif existing is not None and not existing.lfs:
            answer["oid"] = existing.oid
        answers.append(answer)
    return json_response({"files": answers, "commitOid": commit.id})


def parse_ndjson_commit(body: bytes, *, context: HubContext | None = None) -> tuple[CommitHeader, list[Operation]]:
    """The header and the operations of an ndjson commit body; 400 on the first malformed line, then on a
    malformed header.

    ``lfsFile`` lines are accepted only with a ``context`` whose hub serves LFS (``lfs=True``)."""
    header: JsonObject | None = None
    operations: list[Operation] = []
    lines = body.split(b"\n")
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            item = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicate_keys,
                              parse_constant=_no_constants)
        except (UnicodeDecodeError, ValueError) as exc:
            raise bad_request(f"line {number} of the ndjson commit is not a JSON object: {exc}") from exc
        if not isinstance(item, dict) or not isinstance(item.get("key"), str) or not isinstance(item.get("value"),
                                                                                                 dict):
            raise bad_request(f"line {number} of the ndjson commit must be {{\"key\": ..., \"value\": {{...}}}}")
        key, value = item["key"], item["value"]
        if key == "header":
            if header is not None or operations:
                raise bad_request(f"line {number}: the header must be the first line, and only one")
            header = value
            continue
        if header is None:
            raise bad_request(f"line {number}: the first line of a commit must be its header")
        if key == "file":
            path = check_file_path(value.get("path"), field=f"line {number} path")
            if value.get("encoding") != "base64" or not isinstance(value.get("content"), str):
                raise bad_request(f"line {number}: file {path!r} needs base64 'content' and encoding 'base64'")
            try:
                data = base64.b64decode(value["content"], validate=True)
            except (binascii.Error, ValueError) as exc:
                raise bad_request(f"line {number}: content of {path!r} is not valid base64: {exc}") from exc
            operations.append(AddFile(path, data))
        elif key == "lfsFile":
            operations.append(_lfs_operation(context, value, number))
        elif key == "deletedFile":
            operations.append(DeleteFile(check_file_path(value.get("path"), field=f"line {number} path")))
        elif key == "deletedFolder":
            operations.append(DeleteFolder(check_folder_path(value.get("path"), field=f"line {number} path")))
        else:
            raise bad_request(f"line {number}: unknown commit operation {key!r} (expected header, file, "
                              "deletedFile or deletedFolder)")
    if header is None:
        raise bad_request("the ndjson commit is empty: it needs a header line")
    return CommitHeader.parse(header), operations


def _lfs_operation(context: HubContext | None, value: JsonObject, number: int) -> AddLfsFile:
    if context is None or not context.lfs:
        raise bad_request(f"line {number}: LFS file {value.get('path')!r} refused: this server stores regular "
                          "files only (preupload answers uploadMode 'regular')")
    path = check_file_path(value.get("path"), field=f"line {number} path")
    oid = value.get("oid")
    if value.get("algo", "sha256") != "sha256" or not isinstance(oid, str):
        raise bad_request(f"line {number}: LFS file {path!r} needs algo 'sha256' and a string 'oid'")
    return AddLfsFile(path, oid, lfs_size(context, oid, value.get("size"), path=path, line=number))


def _no_duplicate_keys(pairs: list[tuple[str, JsonValue]]) -> JsonObject:
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError(f"duplicate keys {sorted({k for k in keys if keys.count(k) > 1})}")
    return dict(pairs)


def _no_constants(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


def commit(context: HubContext, request: HubRequest) -> HubResponse:
    readable_state(context, request)
    create_pr = request.flag("create_pr")
    user = _check_commit_permission(context, request, create_pr=create_pr)
    header, operations = parse_ndjson_commit(request.body, context=context)
    result = context.store.commit(request.repo_id, operations=operations, message=header.summary,
                                  description=header.description or "", revision=request.revision,
                                  repo_type=request.repo_type, author=user, parent_commit=header.parent_commit,
                                  create_pr=create_pr, create_missing=False)
    url = repo_url(request, request.repo_type, request.repo_id)
    body: JsonObject = {"success": True, "commitOid": result.oid, "commitUrl": f"{url}/commit/{result.oid}",
                        "hookOutput": ""}
    if result.pr_num is not None:
        body["pullRequestUrl"] = f"{url}/discussions/{result.pr_num}"
    return json_response(body)


ENDPOINTS = {"create_repo": create_repo, "validate_yaml": validate_yaml, "preupload": preupload, "commit": commit}
