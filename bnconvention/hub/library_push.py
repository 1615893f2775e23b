"""``push_to_hub`` that keeps the record: save a model with the library it came from, stamp the weights' header and
the card, validate, and upload it all in **one** commit.

A library's own ``push_to_hub`` (timm's ``push_to_hf_hub``, transformers' ``push_to_hub``) rewrites
``model.safetensors`` without our header record; stamping afterwards takes a second commit, and a re-push undoes
it. Here the library writes the release into a private staging folder with its own save function (timm
``save_for_hf``, the function its ``push_to_hf_hub`` calls before uploading: ``config.json`` with ``architecture``
and ``pretrained_cfg``; transformers ``save_pretrained``; else safetensors ``save_file`` of the state dict), and
:func:`bnconvention.authoring.publish.publish` stamps, validates and uploads the staged folder in one
``upload_folder`` commit. A failure at any step before the upload commits nothing; the upload itself is one commit
or none. A folder given instead of a model is copied to the staging folder first: the author's files are never
changed, and links in it are not followed (:mod:`bnconvention.formats.links`: passed over and named in the result's
``skipped``, like ``publish`` does).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from bnconvention.authoring.publish import publish
from bnconvention.errors import UsageError
from bnconvention.formats.atomic import TEMP_GLOBS
from bnconvention.formats.canonical import loads_strict
from bnconvention.formats.json_types import JsonObject
from bnconvention.formats.links import copy_folder, skipped_line

# save_with_library is the one function that needs torch (and timm for a timm model): it imports them when it runs, so
# importing this module does not import torch (``bnconvention push-to-hub`` of a saved folder runs without it).

__all__ = ["folder_library", "push_to_hub", "save_with_library"]


def folder_library(folder: Path) -> str:
    """Which library saved a release folder, from its ``config.json`` (read as untrusted JSON, nothing imported):
    ``timm`` (``architecture``, as ``save_for_hf`` writes it), ``transformers`` (``model_type``/``architectures``),
    else ``safetensors``."""
    config_path = folder / "config.json"
    if not config_path.is_file():
        return "safetensors"
    config = loads_strict(config_path.read_bytes(), source=str(config_path))
    if isinstance(config, dict) and isinstance(config.get("architecture"), str):
        return "timm"
    if isinstance(config, dict) and ("model_type" in config or "architectures" in config):
        return "transformers"
    return "safetensors"


def save_with_library(model: Any, folder: Path, *, model_args: JsonObject | None = None,
                      data_config: JsonObject | None = None) -> str:
    """Write ``model`` into ``folder`` with its own library's save; the library's name."""
    if hasattr(model, "save_pretrained") and hasattr(model, "config"):
        model.save_pretrained(str(folder))  # transformers: config.json + model.safetensors
        return "transformers"
    if getattr(model, "pretrained_cfg", None) is not None and type(model).__module__.startswith("timm."):
        from timm.models import save_for_hf

        save_for_hf(model, str(folder), model_args=model_args, data_config=data_config, safe_serialization=True)
        return "timm"
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(folder / "model.safetensors"))
    return "safetensors"


def push_to_hub(model_or_folder: Any, repo_id: str, *, record: Any = None, card: str | None = None,
                model_args: JsonObject | None = None, data_config: JsonObject | None = None,
                create_pr: bool = False, commit_message: str | None = None, endpoint: str | None = None,
                token: str | None = None, dry_run: bool = False, api: Any = None) -> Any:
    """Save (or copy) the release, stamp ``record`` into its weights and card, validate it, upload it in one commit.

    ``model_or_folder``: a ``torch.nn.Module`` (saved by its library) or a release folder (copied). ``record``: a
    declaration (model, dict or JSON path; e.g. ``callback.declaration()`` or ``recorder.declaration(...)``); for a
    folder it may be omitted when the folder already carries one. ``card``: the README text to start from (a model's
    release gets a minimal card otherwise). ``dry_run``: stamp and validate the staged copy, upload nothing.
    Returns :class:`bnconvention.authoring.publish.PublishResult` (its ``directory``, the staging folder, is gone).
    """
    with tempfile.TemporaryDirectory(prefix="bnc-push-") as staging:
        stage = Path(staging) / "release"
        if isinstance(model_or_folder, (str, os.PathLike)):
            source = Path(model_or_folder)
            if not source.is_dir():
                raise UsageError(f"{source} is not a folder; push_to_hub takes a model or a release folder")
            skipped = [skipped_line(source, name) for name in copy_folder(source, stage, ignore=TEMP_GLOBS).skipped]
        else:
            skipped = []
            save_with_library(model_or_folder, stage, model_args=model_args, data_config=data_config)
        readme = stage / "README.md"
        if card is not None:
            readme.write_text(card, encoding="utf-8")
        elif not readme.exists():
            readme.write_text(f"---\nlibrary_name: pytorch\n---\n# {repo_id.split('/')[-1]}\n", encoding="utf-8")
        result = publish(stage, repo_id=repo_id, records=[] if record is None else [record], create_pr=create_pr,
                         commit_message=commit_message, endpoint=endpoint, token=token, dry_run=dry_run, api=api)
        result.skipped = skipped + result.skipped
        return result
