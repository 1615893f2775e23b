"""The demo organisation: the digits zoo published the way real authors would, through the real client.

Each :class:`DemoRelease` becomes one model repo of :data:`DEMO_ORG`, uploaded by the organisation's author through
``huggingface_hub``:

* ``declared`` — the author declares the convention from the recorder's observation of the training run
  (:func:`declaration_for`), and :func:`bnconvention.hub.publish_release` stamps the weights and the card,
  validates the folder, uploads it and validates the uploaded revision on the server;
* ``undeclared`` — the author uploads the folder with ``HfApi.upload_folder`` alone: no record anywhere;
* ``stale`` — declared and published as above; later the author fine-tunes one more epoch, saves the weights with
  the *old* safetensors metadata (so the header still carries the first record) and uploads them again without
  re-stamping: the declaration no longer matches the tensors;
* ``no_weights`` — a model card for a release that has no weights yet.

Every release folder holds the author's ``config.json`` (architecture and the accuracies the authors published,
which the audit anchors against) and ``README.md``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeAlias

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from bnconvention.authoring.declaration import declare
from bnconvention.authoring.observation import convention_from_observation
from bnconvention.demo.library_publish import publish_library_release
from bnconvention.errors import BnConventionError, RecordError
from bnconvention.formats.canonical import loads_strict
from bnconvention.formats.card import CARD_NAME
from bnconvention.hub import publish_release
from bnconvention.hub.client import quiet_hub_progress
from bnconvention.standard.models import FittingConvention, Observation
from bnconvention.zoo import DIGITS_TRAIN_TRANSFORM, FORGET_CLASSES, finetune, split_tensors

DEMO_ORG = "digits-lab"
AUTHOR = "lab-author"
AUDITOR = "auditor"
ReleaseHow: TypeAlias = Literal["declared", "undeclared", "stale", "no_weights"]
WEIGHTS = "model.safetensors"
CONFIG = "config.json"


@dataclass(frozen=True)
class DemoRelease:
    """One repo of the demo organisation: its name, the zoo variant it ships, and how its author released it."""

    name: str
    variant: str | None
    how: ReleaseHow
    description: str
    library: str | None = None  # "timm" or "transformers": published by that library's own code

    @property
    def repo_id(self) -> str:
        return f"{DEMO_ORG}/{self.name}"


RELEASES: tuple[DemoRelease, ...] = (
    DemoRelease("convnet-bn-base", "bn-base", "declared",
            "BatchNorm ConvNet trained on all digits; declared from the recorder's observation"),
    DemoRelease("convnet-bn-retrain", "bn-retrain", "declared",
            "retrained from scratch without class 3 (the unlearning reference); declared"),
    DemoRelease("unlearn-badteacher-eval", "bn-badteacher-eval", "declared",
            "BadTeacher-style distillation with eval-mode BatchNorm (the recorder saw frozen buffers); declared"),
    DemoRelease("unlearn-ga-train", "bn-ga-train", "declared",
            "gradient ascent on the forget set with train-mode BatchNorm; declared"),
    DemoRelease("unlearn-relabel-eval", "bn-relabel-eval", "undeclared",
            "random relabelling with eval-mode BatchNorm; uploaded with huggingface_hub alone, nothing declared"),
    DemoRelease("unlearn-relabel-train", "bn-relabel-train", "undeclared",
            "random relabelling with train-mode BatchNorm; uploaded with huggingface_hub alone, nothing declared"),
    DemoRelease("unlearn-finetune", "bn-finetune", "stale",
            "fine-tuned on the retained data and declared; later fine-tuned one more epoch and re-uploaded "
            "without re-stamping"),
    DemoRelease("convnet-gn-base", "gn-base", "declared",
            "GroupNorm twin of convnet-bn-base; declared (no running statistics)"),
    DemoRelease("unlearn-badteacher-eval-gn", "gn-badteacher-eval", "undeclared",
            "GroupNorm twin of unlearn-badteacher-eval; uploaded without a declaration"),
    DemoRelease("unlearn-relabel-eval-gn", "gn-relabel-eval", "undeclared",
            "GroupNorm twin of unlearn-relabel-eval; uploaded without a declaration"),
    DemoRelease("digits-model-card", None, "no_weights",
            "a model card for a release whose weights are not uploaded yet"),
    DemoRelease("timm-resnet10t-retrain", None, "undeclared",
            "timm resnet10t (slimmed, one channel) retrained without class 3; pushed with timm.models.push_to_hf_hub, "
            "accuracies in the card's model-index (huggingface_hub metadata_update), nothing declared",
            library="timm"),
    DemoRelease("transformers-resnet-retrain", None, "undeclared",
            "transformers ResNetForImageClassification retrained without class 3; pushed with "
            "PreTrainedModel.push_to_hub, accuracies in the card's model-index, nothing declared",
            library="transformers"),
)


# --- the authors' files ---------------------------------------------------------------------------------------------


def declaration_for(zoo: Any, variant: str) -> Any:
    """The author's declaration of ``variant``: the recorder's observation of its training, completed by what only
    the author knows (dataset, subset and transform; the split and rule of an earlier fit the run did not redo)."""
    path = zoo.observation_path(variant)
    if path is None:
        raise RecordError(f"the zoo in {zoo.root} has no recorder observation of {variant}; rebuild it with the "
                          "demo (bnconvention demo --fresh)")
    observation = Observation.model_validate(loads_strict(path.read_bytes(), source=str(path)))
    config = zoo.config(variant)
    # what the author knows about the data: the variant's own fit, or (GroupNorm) the twin's training recipe
    known_data = config.get("convention") or zoo.config(config["twin"])["convention"]
    known = FittingConvention.model_validate(known_data)
    written = observation.mode in ("train", "refit", "mixed")
    convention = convention_from_observation(
        observation, dataset_id=known.data.dataset.id, subset=known.data.subset, transform=known.transform,
        role=None if written else known.data.role,
        rule=None if written else known.accumulation.rule,
        momentum=None if written else getattr(known.accumulation, "momentum", None),
        batch_size=known.accumulation.batch_size, num_batches=known.accumulation.num_batches,
        record_count=known.data.record_count, ids_sha256=known.data.ids_sha256,
        dataset_revision=known.data.dataset.revision)
    line = f"deployed state as shipped; running statistics fitted as {convention.name} (measured by the recorder)"
    return declare(zoo.load_model(variant), convention, observation=observation, reporting_line=line)


def author_card_text(release: DemoRelease) -> str:
    """The model card the author writes (bnconvention adds its block and section when it stamps)."""
    return (f"---\nlicense: mit\nlibrary_name: pytorch\ntags:\n- digits\n- machine-unlearning\n---\n"
            f"# {release.name}\n\n{release.description[0].upper()}{release.description[1:]}.\n\n"
            "Data: scikit-learn's bundled digits (8x8 upsampled to 16x16), class 3 forgotten.\n")


def config_for(zoo: Any, variant: str) -> dict[str, Any]:
    """The author's ``config.json``: the architecture and the accuracies they published for this checkpoint."""
    config = zoo.config(variant)
    shipped = config["shipped_accuracy"]
    return {"architecture": config["architecture"], "model": variant, "method": config["method"]["name"],
            "published": {"df": shipped["forget"], "dr": shipped["retain"], "dt": shipped["test"]},
            "dataset": "sklearn/digits", "forget_classes": config["data"]["forget_classes"]}


def prepare_folder(zoo: Any, release: DemoRelease, folder: Path) -> None:
    """Write the release folder as the author has it before publishing (weights copied from the zoo)."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    (folder / CARD_NAME).write_text(author_card_text(release), "utf-8")
    if release.variant is not None:
        shutil.copyfile(zoo.weights_path(release.variant), folder / WEIGHTS)
        (folder / CONFIG).write_text(json.dumps(config_for(zoo, release.variant), indent=2) + "\n", "utf-8")


def one_more_epoch(zoo: Any, variant: str, weights: Path) -> None:
    """The later step of a ``stale`` release: one more fine-tuning epoch on the retained data (train-mode BN),
    saved over ``weights`` with the file's old ``__metadata__``, so the header keeps the now stale record."""


    with safe_open(str(weights), framework="pt") as handle:
        metadata = dict(handle.metadata() or {})
    model = zoo.load_model(variant)  # the architecture; the release's own tensors are loaded next
    model.load_state_dict(load_file(str(weights)), strict=True)
    data = split_tensors(FORGET_CLASSES)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        finetune(model, data.x["retain"], data.y["retain"], epochs=1, lr=1e-3, batch_size=64,
                 generator=torch.Generator().manual_seed(7), transform=DIGITS_TRAIN_TRANSFORM)
    finally:
        torch.set_num_threads(threads)
    model.eval()
    temporary = weights.with_name(f".{weights.name}.tmp")
    save_file({k: v.detach().contiguous() for k, v in model.state_dict().items()}, str(temporary), metadata=metadata)
    temporary.replace(weights)


# --- publishing -----------------------------------------------------------------------------------------------------


@dataclass
class Published:
    """What publishing one release did: the commits it made and the checks the server-side validation gave."""

    repo_id: str
    how: ReleaseHow
    commits: list[str]
    validated: int | None = None  # exit code of the server-side validation of a declared release


def _publish_declared(author: Any, zoo: Any, release: DemoRelease, folder: Path) -> Published:
    """A declared release through ``publish_release`` (stamped, validated on the server); a ``stale`` one then gets
    one more epoch uploaded over its weights without re-stamping."""
    record = declaration_for(zoo, release.variant or "")
    result = publish_release(author, folder, repo_id=release.repo_id, records=[record],
                             commit_message=f"Release {release.name}")
    if result.exit_code != 0:
        raise BnConventionError(f"{release.repo_id}: the published revision does not validate on the server "
                                f"(exit {result.exit_code})")
    commits = [str(result.result.commit_url).rsplit("/commit/", 1)[-1]]
    item = Published(release.repo_id, release.how, commits, validated=result.exit_code)
    if release.how == "stale":
        one_more_epoch(zoo, release.variant or "", folder / WEIGHTS)
        info = author.api.upload_file(path_or_fileobj=str(folder / WEIGHTS), path_in_repo=WEIGHTS,
                                      repo_id=release.repo_id,
                                      commit_message="Fine-tune one more epoch on the retained data")
        item.commits.append(str(info.oid))
    return item


def publish_one(author: Any, zoo: Any, release: DemoRelease, folder: Path, *, libraries: Any) -> Published:
    """Publish ``release`` as its author would: a library release by that library's own code (from
    ``libraries``, :class:`~bnconvention.demo.library_models.LibraryModels`), a declared or stale one through
    bnconvention, the others with huggingface_hub alone (the folder as it is)."""
    if release.library is not None:
        commits = publish_library_release(libraries, release.name, repo_id=release.repo_id,
                                          endpoint=author.endpoint, token=author.token.reveal())
        return Published(release.repo_id, release.how, commits)
    prepare_folder(zoo, release, folder)
    if release.how in ("declared", "stale"):
        return _publish_declared(author, zoo, release, folder)
    author.api.create_repo(release.repo_id, exist_ok=True)
    info = author.api.upload_folder(folder_path=str(folder), repo_id=release.repo_id,
                                    commit_message=f"Upload {release.name}")
    return Published(release.repo_id, release.how, [str(info.oid)])


def publish_org(author: Any, zoo: Any, releases_dir: Path, *, libraries: Any,
                on_release: Callable[[DemoRelease], object] | None = None) -> list[Published]:
    """Publish every release of :data:`RELEASES` as the organisation's author (``author``: a HubClient)."""
    done: list[Published] = []
    with quiet_hub_progress():
        for release in RELEASES:
            done.append(publish_one(author, zoo, release, releases_dir / release.name, libraries=libraries))
            if on_release is not None:
                on_release(release)
    return done


def release_notes() -> dict[str, str]:
    """Repo id -> how its author released it (shown in the report's census table)."""
    return {r.repo_id: f"{r.how.replace('_', ' ')}: {r.description}" for r in RELEASES}


__all__ = ["AUDITOR", "AUTHOR", "DEMO_ORG", "RELEASES", "Published", "DemoRelease", "ReleaseHow", "author_card_text",
           "config_for", "declaration_for", "one_more_epoch", "prepare_folder", "publish_one", "publish_org",
           "release_notes"]
