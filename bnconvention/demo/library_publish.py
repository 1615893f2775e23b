"""Publishing the demo's timm and transformers releases with those libraries' own code, to the demo's local Hub.

What a real author runs, nothing of ours in between:

* timm: ``timm.models.push_to_hf_hub(model, repo_id, model_args={"in_chans": 1}, data_config=...)``, which writes
  ``config.json`` (``architecture``, ``num_classes``, ``model_args``, ``pretrained_cfg``), ``model.safetensors``,
  ``pytorch_model.bin`` and timm's model card;
* transformers: ``model.push_to_hub(repo_id)`` (``config.json`` with ``model_type`` and ``architectures``,
  ``model.safetensors``, transformers' model card);
* then the accuracies they measured where the Hub keeps published numbers, the card's ``model-index``, with
  huggingface_hub's own ``metadata_update`` and ``ModelCardData(eval_results=...)`` (metrics "forget accuracy",
  "retain accuracy", "test accuracy", each of type ``accuracy``). Neither library writes bnconvention's keys, so
  these releases are undeclared, as a real author's are; the demo spec anchors them on the model-index.

The libraries call huggingface_hub without an endpoint argument: :func:`library_endpoint` points the import-time
copies of the endpoint at the local Hub while they publish, and restores every one afterwards.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

from huggingface_hub import EvalResult, ModelCardData, constants, hf_api, metadata_update

from bnconvention.data.digits import DIGITS_DATASET_ID
from bnconvention.demo.library_models import LIBRARY_MODELS, RECIPE, LibraryModels, require_libraries

# The digits as the zoo prepares them (16x16, one channel, values in [0, 1]) go in as they are: no normalisation.
DATA_CONFIG: dict[str, Any] = {"input_size": (1, 16, 16), "mean": (0.0,), "std": (1.0,), "crop_pct": 1.0,
                               "interpolation": "bilinear"}
METRICS = (("forget", "forget accuracy"), ("retain", "retain accuracy"), ("test", "test accuracy"))
_MISSING = object()


@contextlib.contextmanager
def library_endpoint(endpoint: str) -> Iterator[None]:
    """Send timm's, transformers' and huggingface_hub's module-level calls to ``endpoint`` while inside.

    huggingface_hub reads ``HF_ENDPOINT`` once, at import, into ``constants.ENDPOINT``, the resolve-URL template and
    the module-level ``HfApi`` behind ``create_repo``/``upload_folder``/``metadata_update``; transformers keeps the
    ``HfApi`` it made first (``transformers.utils.hub._hf_api``), dropped here so the next one is made for
    ``endpoint``; timm makes a new ``HfApi``, which reads ``constants.ENDPOINT``; an imported ``datasets`` keeps its
    copies in ``datasets.config``. All of them, and the variable, get their values back on the way out.
    """
    import transformers.utils.hub as transformers_hub
    patches: list[tuple[Any, str, Any]] = [
        (constants, "ENDPOINT", endpoint),
        (constants, "HUGGINGFACE_CO_URL_TEMPLATE", endpoint + "/{repo_id}/resolve/{revision}/{filename}"),
        (hf_api.api, "endpoint", endpoint),
        (transformers_hub, "_hf_api", None),
    ]
    datasets_config = sys.modules.get("datasets.config")  # copied at its import; imported later, it reads the variable
    if datasets_config is not None:
        patches += [(datasets_config, "HF_ENDPOINT", endpoint),
                    (datasets_config, "HUB_DATASETS_URL", endpoint + "/datasets/{repo_id}/resolve/{revision}/{path}")]
    saved = [(target, name, getattr(target, name, _MISSING)) for target, name, _ in patches]
    saved_env = os.environ.get("HF_ENDPOINT")
    try:
        os.environ["HF_ENDPOINT"] = endpoint
        for target, name, value in patches:
            setattr(target, name, value)
        yield
    finally:
        for target, name, value in reversed(saved):
            if value is _MISSING:
                delattr(target, name)
            else:
                setattr(target, name, value)
        if saved_env is None:
            os.environ.pop("HF_ENDPOINT", None)
        else:
            os.environ["HF_ENDPOINT"] = saved_env


def card_description(name: str) -> str:
    library = next(m.library for m in LIBRARY_MODELS if m.name == name)
    return (f"Retrained from scratch without class 3 of scikit-learn's bundled digits (16x16, one channel) with "
            f"{library}: {RECIPE['epochs']} epochs of Adam (lr {RECIPE['lr']}) on the retained part of the train "
            "split, train-mode BatchNorm. The unlearning reference for forgetting class 3.")


def eval_results_metadata(name: str, accuracy: dict[str, float]) -> dict[str, Any]:
    """The card metadata with the author's published accuracies as ``model-index`` eval results."""
    results = [EvalResult(task_type="image-classification", task_name="Image Classification",
                          dataset_type=DIGITS_DATASET_ID, dataset_name="digits (class 3 forgotten)",
                          dataset_split=role, metric_type="accuracy", metric_name=label,
                          metric_value=round(float(accuracy[role]), 4))
               for role, label in METRICS]
    return dict(ModelCardData(model_name=name, eval_results=results).to_dict())


def _push(model: Any, library: str, repo_id: str, token: str) -> str:
    """Push with the library's own code; the commit id."""
    if library == "timm":
        from timm.models import push_to_hf_hub

        info = push_to_hf_hub(model, repo_id, token=token, commit_message="Add model", model_args={"in_chans": 1},
                              data_config=DATA_CONFIG,
                              model_card={"description": card_description(repo_id.split("/", 1)[1])})
    else:
        info = model.push_to_hub(repo_id, token=token, commit_message="Upload model")
    return str(info.oid)


def publish_library_release(models: LibraryModels, name: str, *, repo_id: str, endpoint: str,
                            token: str) -> list[str]:
    """Publish release ``name`` (one of :data:`LIBRARY_MODELS`) to ``repo_id`` on ``endpoint`` as its author
    (``token``): the library's push, then the eval results; the commits made."""
    require_libraries()
    from transformers.utils import logging as transformers_logging

    library = next(m.library for m in LIBRARY_MODELS if m.name == name)
    model = models.load(name)
    verbosity, bars = transformers_logging.get_verbosity(), transformers_logging.is_progress_bar_enabled()
    transformers_logging.set_verbosity_error()  # transformers' notes on a card it writes itself
    transformers_logging.disable_progress_bar()  # its "Writing model shards" bar; the demo's stage bar reports
    try:
        with library_endpoint(endpoint):
            commits = [_push(model, library, repo_id, token)]
            url = metadata_update(repo_id, eval_results_metadata(name, models.accuracy[name]), token=token,
                                  commit_message="Add evaluation results")
    finally:
        transformers_logging.set_verbosity(verbosity)
        if bars:
            transformers_logging.enable_progress_bar()
    commits.append(str(url).rsplit("/commit/", 1)[-1])
    return commits


__all__ = ["DATA_CONFIG", "METRICS", "card_description", "eval_results_metadata", "library_endpoint",
           "publish_library_release"]
