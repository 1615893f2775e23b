"""JSON shapes the Hub API returns: repo info, tree entries, commits, discussions and their events.

Only what huggingface_hub 2.4.0 reads is produced, with the Hub's key names. Card metadata comes from the README's
front matter through the safe loader (:func:`bnconvention.formats.card.parse_card_metadata`); a card that does not parse
simply has no ``cardData`` (as a file it is still served unchanged).
"""

from __future__ import annotations

import base64
import datetime as dt
import difflib
import html
import math
from collections.abc import Mapping

from bnconvention.errors import BnConventionError
from bnconvention.formats.card import CARD_NAME, MAX_CARD_BYTES, decode_card, parse_card_metadata
from bnconvention.formats.json_types import JsonObject, JsonValue
from bnconvention.formats.safetensors_header import DTYPE_BITS, read_header
from bnconvention.hubserver.handlers import HubContext
from bnconvention.hubserver.records import DiscussionEvent, DiscussionRecord, RepoState
from bnconvention.hubserver.repos import Commit
from bnconvention.hubserver.trees import FileEntry, folder_oid, lfs_pointer
from bnconvention.hubserver.validation import bad_request
from bnconvention.hubserver.wire import sha1_hex

# What the client may ask for with expand= (huggingface_hub 2.4.0's ExpandModelProperty_T, and the dataset/space
# ones); a name outside these is refused like the Hub does. Names we cannot compute are left out of the answer.
EXPAND_PROPERTIES: dict[str, frozenset[str]] = {
    "model": frozenset({
        "author", "baseModels", "cardData", "childrenModelCount", "config", "createdAt", "disabled", "downloads",
        "downloadsAllTime", "evalResults", "gated", "gguf", "inference", "inferenceProviderMapping",
        "lastModified", "library_name", "likes", "mask_token", "model-index", "pipeline_tag", "private",
        "resourceGroup", "safetensors", "sha", "siblings", "spaces", "tags", "transformersInfo", "trendingScore",
        "usedStorage", "widgetData"}),
    "dataset": frozenset({
        "author", "cardData", "citation", "createdAt", "description", "disabled", "downloads", "downloadsAllTime",
        "gated", "lastModified", "likes", "paperswithcode_id", "private", "resourceGroup", "sha", "siblings",
        "tags", "trendingScore", "usedStorage"}),
    "space": frozenset({
        "author", "cardData", "createdAt", "datasets", "disabled", "lastModified", "likes", "models", "private",
        "resourceGroup", "runtime", "sdk", "sha", "siblings", "subdomain", "tags", "trendingScore",
        "usedStorage"}),
}
LIST_FIELDS = ("id", "likes", "trendingScore", "private", "downloads", "tags", "pipeline_tag", "library_name",
               "createdAt")
FULL_FIELDS = LIST_FIELDS + ("author", "sha", "lastModified", "gated", "disabled", "siblings")
INFO_FIELDS = FULL_FIELDS + ("cardData", "model-index", "safetensors", "spaces", "usedStorage")
MAX_DIFF_FILE_BYTES = 1024 * 1024


def check_expand(repo_type: str, names: list[str]) -> list[str]:
    allowed = EXPAND_PROPERTIES[repo_type]
    unknown = sorted(set(names) - allowed)
    if unknown:
        raise bad_request(f"expand={','.join(unknown)} is not a {repo_type} property; use one of "
                          f"{', '.join(sorted(allowed))}")
    return names


def jsonable(value: object) -> JsonValue:
    """YAML values as JSON values: dates as ISO strings, non-string keys as strings, bytes as base64, sets as lists."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    if isinstance(value, dt.date | dt.datetime):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, str | int | float):
        return value
    return str(value)


def card_metadata(context: HubContext, commit: Commit) -> JsonObject | None:
    """The README's front matter as JSON, ``None`` when there is no README or it does not parse."""
    entry = commit.tree.get(CARD_NAME)
    if entry is None or entry.size > MAX_CARD_BYTES:
        return None

    def compute() -> JsonObject | None:
        data = context.store.blob_path(entry.sha256).read_bytes()
        try:
            metadata = parse_card_metadata(decode_card(data))
        except BnConventionError:
            return None
        value = jsonable(metadata)
        return value if isinstance(value, dict) and value else None

    return context.cached("card", entry.sha256, compute)


def _safetensors_counts(context: HubContext, entry: FileEntry) -> dict[str, int] | None:
    def compute() -> dict[str, int] | None:
        try:
            header = read_header(context.store.blob_path(entry.sha256))
        except (BnConventionError, OSError):
            return None
        counts: dict[str, int] = {}
        for info in header.tensors.values():
            if info.dtype in DTYPE_BITS:
                counts[info.dtype] = counts.get(info.dtype, 0) + math.prod(info.shape)
        return counts

    return context.cached("safetensors", entry.sha256, compute)


def safetensors_info(context: HubContext, commit: Commit) -> JsonObject | None:
    """Parameter counts per dtype over every ``*.safetensors`` file, like the Hub's ``safetensors`` field."""
    totals: dict[str, int] = {}
    found = False
    for path, entry in sorted(commit.tree.items()):
        if path.endswith(".safetensors"):
            counts = _safetensors_counts(context, entry)
            if counts is not None:
                found = True
                for dtype, n in counts.items():
                    totals[dtype] = totals.get(dtype, 0) + n
    return {"parameters": dict(totals), "total": sum(totals.values())} if found else None


def _tags(card: JsonObject | None, commit: Commit) -> list[str]:
    tags: list[str] = []
    card = card or {}
    library = card.get("library_name")
    if isinstance(library, str):
        tags.append(library)
    if any(path.endswith(".safetensors") for path in commit.tree):
        tags.append("safetensors")
    raw_tags = card.get("tags")
    for tag in raw_tags if isinstance(raw_tags, list) else [raw_tags] if isinstance(raw_tags, str) else []:
        if isinstance(tag, str | int | float):
            tags.append(str(tag))
    datasets = card.get("datasets")
    for name in datasets if isinstance(datasets, list) else [datasets] if isinstance(datasets, str) else []:
        if isinstance(name, str):
            tags.append(f"dataset:{name}")
    license_ = card.get("license")
    if isinstance(license_, str):
        tags.append(f"license:{license_}")
    return list(dict.fromkeys(tags))


def repo_payload(context: HubContext, state: RepoState, commit: Commit, *, fields: tuple[str, ...] | list[str],
                 blobs: bool = False) -> JsonObject:
    """The Hub's repo dict with ``fields`` (keys with no value, such as a missing card, are left out)."""
    repo_type, repo_id = state["type"], state["id"]
    card = card_metadata(context, commit) if {"cardData", "tags", "pipeline_tag", "library_name",
                                              "model-index"} & set(fields) else None
    payload: JsonObject = {"_id": sha1_hex(f"{repo_type}/{repo_id}".encode())[:24], "id": repo_id}
    if repo_type == "model":
        payload["modelId"] = repo_id
    for name in fields:
        value: JsonValue = None
        if name == "author":
            value = repo_id.split("/")[0]
        elif name == "sha":
            value = commit.id
        elif name == "lastModified":
            value = commit.date
        elif name == "createdAt":
            value = state["createdAt"]
        elif name == "private":
            value = bool(state["private"])
        elif name in ("gated", "disabled"):
            value = False
        elif name in ("downloads", "likes", "trendingScore", "downloadsAllTime"):
            value = 0
        elif name == "tags":
            value = list(_tags(card, commit))
        elif name in ("pipeline_tag", "library_name") and repo_type == "model":
            value = card.get(name) if card and isinstance(card.get(name), str) else None
        elif name == "cardData":
            value = card
        elif name == "model-index" and repo_type == "model":
            value = card.get("model-index") if card else None
        elif name == "safetensors" and repo_type == "model":
            value = safetensors_info(context, commit)
        elif name == "spaces" and repo_type == "model":
            value = []
        elif name == "usedStorage":
            value = sum(entry.size for entry in commit.tree.values())
        elif name == "siblings":
            value = [_sibling(path, entry, blobs=blobs) for path, entry in sorted(commit.tree.items())]
        if value is not None:
            payload[name] = value
    return payload


def _sibling(path: str, entry: FileEntry, *, blobs: bool) -> JsonObject:
    sibling: JsonObject = {"rfilename": path}
    if blobs:  # the Hub sends sizes and blob ids only with blobs=true (model_info(files_metadata=True))
        sibling.update(size=entry.size, blobId=entry.oid)
        if entry.lfs:
            sibling["lfs"] = {"size": entry.size, "sha256": entry.sha256,
                              "pointerSize": len(lfs_pointer(entry.sha256, entry.size))}
    return sibling


def tree_entry(tree: Mapping[str, FileEntry], kind: str, path: str) -> JsonObject:
    """One ``/tree`` or ``/paths-info`` entry: ``lfs`` for files uploaded through LFS, never ``xetHash`` (the
    client would then download through Xet, which this server does not serve)."""
    if kind == "file":
        entry = tree[path]
        item: JsonObject = {"type": "file", "oid": entry.oid, "size": entry.size, "path": path}
        if entry.lfs:
            item["lfs"] = {"oid": entry.sha256, "size": entry.size,
                           "pointerSize": len(lfs_pointer(entry.sha256, entry.size))}
        return item
    return {"type": "directory", "oid": folder_oid(tree, path), "size": 0, "path": path}


def commit_payload(commit: Commit, *, formatted: bool) -> JsonObject:
    item: JsonObject = {"id": commit.id, "title": commit.title, "message": commit.message, "date": commit.date,
                      "authors": [{"user": commit.author, "avatar": None}]}
    if formatted:
        item["formatted"] = {"title": html.escape(commit.title), "message": html.escape(commit.message)}
    return item


def user_payload(name: str) -> JsonObject:
    return {"name": name, "type": "user", "fullname": name, "isPro": False, "isHf": False}


def event_payload(event: DiscussionEvent) -> JsonObject:
    data = dict(event["data"])
    latest = data.get("latest")
    if event["type"] == "comment" and isinstance(latest, dict) and isinstance(latest.get("author"), str):
        data["latest"] = {**latest, "author": user_payload(str(latest["author"]))}
    return {"id": event["id"], "type": event["type"], "createdAt": event["createdAt"],
            "author": user_payload(event["author"]), "data": data}


def discussion_summary(discussion: DiscussionRecord, *, repo_id: str, repo_type: str) -> JsonObject:
    comments = sum(1 for e in discussion["events"] if e["type"] == "comment")
    return {"num": discussion["num"], "title": discussion["title"], "status": discussion["status"],
            "isPullRequest": discussion["isPullRequest"], "createdAt": discussion["createdAt"],
            "author": user_payload(discussion["author"]), "repo": {"name": repo_id, "type": repo_type},
            "pinned": False, "numComments": comments, "topReactions": []}


def discussion_details(context: HubContext, discussion: DiscussionRecord, *, repo_id: str, repo_type: str,
                       with_diff: bool) -> JsonObject:
    payload = discussion_summary(discussion, repo_id=repo_id, repo_type=repo_type)
    payload["events"] = [event_payload(e) for e in discussion["events"]]
    if discussion["isPullRequest"]:
        pr = discussion["pr"]
        changes: JsonObject = {"base": f"refs/heads/{pr['baseBranch']}"}
        if pr.get("mergeCommitId"):
            changes["mergeCommitId"] = pr["mergeCommitId"]
        payload["changes"] = changes
        payload["filesWithConflicts"] = list(context.store.pull_request_conflicts(repo_id, discussion["num"],
                                                                                  repo_type=repo_type))
        if with_diff:
            base, _, head = context.store.pull_request_trees(repo_id, discussion["num"], repo_type=repo_type)
            payload["diff"] = tree_diff(context, base, head)
    return payload


def _text(context: HubContext, entry: FileEntry | None) -> list[str] | None:
    if entry is None:
        return []
    if entry.size > MAX_DIFF_FILE_BYTES:
        return None
    try:
        return context.store.blob_path(entry.sha256).read_bytes().decode("utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        return None


def tree_diff(context: HubContext, old: Mapping[str, FileEntry], new: Mapping[str, FileEntry]) -> str:
    """A git-style diff between two trees (unified for UTF-8 text up to 1 MiB, a one-liner for binaries)."""
    out: list[str] = []
    for path in sorted(set(old) | set(new)):
        a, b = old.get(path), new.get(path)
        if a == b:
            continue
        out.append(f"diff --git a/{path} b/{path}\n")
        before, after = _text(context, a), _text(context, b)
        if before is None or after is None:
            out.append(f"Binary files {'a/' + path if a else '/dev/null'} and {'b/' + path if b else '/dev/null'} "
                       "differ\n")
            continue
        lines = list(difflib.unified_diff(before, after, fromfile=f"a/{path}" if a else "/dev/null",
                                          tofile=f"b/{path}" if b else "/dev/null"))
        out.extend(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)
    return "".join(out)
