"""The demo's timm and transformers releases (bnconvention/demo/library_models.py, library_publish.py).

The demo organisation holds one release published by ``timm.models.push_to_hf_hub`` and one by transformers'
``PreTrainedModel.push_to_hub``, with their accuracies in the card's model-index (``metadata_update``). They carry
no bnconvention record, so the census calls them undeclared; ``hub audit`` builds each from its own ``config.json``
(no ``--allow-factory``, no ``model:`` in the spec), anchors it on the model-index, and ``hub push`` opens a pull
request that puts the refit cells beside the authors' in the model-index. The slow tests read the session's demo
run (tests/helpers/demo_run.py), shared with test_demo.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from helpers.demo_run import DemoRun, shared_demo_run

ORG = "digits-lab"
TIMM = f"{ORG}/timm-resnet10t-retrain"
TRANSFORMERS = f"{ORG}/transformers-resnet-retrain"
FACTORIES = {TIMM: "timm/resnet10t", TRANSFORMERS: "transformers/ResNetForImageClassification"}
METRICS = {"forget accuracy": "df", "retain accuracy": "dr", "test accuracy": "dt"}


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    return shared_demo_run(tmp_path_factory.mktemp("demo"))


def _hub_files(demo: DemoRun, repo_id: str, names: tuple[str, ...], *,
               revision: str | None = None) -> tuple[list[str], dict[str, str]]:
    """``(files at revision, {name: text})`` read through huggingface_hub from the demo's store."""
    from huggingface_hub import HfApi

    from bnconvention.hubserver import LocalHub

    with LocalHub(demo.out / "hub", durable=False) as hub:
        api = HfApi(endpoint=hub.endpoint, token=False)
        files = api.list_repo_files(repo_id, revision=revision)
        texts = {name: Path(api.hf_hub_download(repo_id, name, revision=revision,
                                                cache_dir=demo.out / "test-hf-cache")).read_text("utf-8")
                 for name in names}
    return files, texts


def _front_matter(card: str) -> dict[str, Any]:
    import yaml

    return dict(yaml.safe_load(card.split("---\n", 2)[1]))


def _published(card: str) -> dict[str, float]:
    """The authors' model-index metrics (not ours: those carry config bnconvention-refit) as cells."""
    found = {}
    for entry in _front_matter(card)["model-index"]:
        for result in entry["results"]:
            for metric in result["metrics"]:
                if metric.get("config") != "bnconvention-refit":
                    found[METRICS[metric["name"]]] = metric["value"]
    return found


@pytest.mark.slow
def test_timm_release_is_what_push_to_hf_hub_writes(demo: DemoRun) -> None:
    files, texts = _hub_files(demo, TIMM, ("config.json", "README.md"))
    assert {"config.json", "model.safetensors", "pytorch_model.bin", "README.md"} <= set(files)
    config = json.loads(texts["config.json"])
    assert config["architecture"] == "resnet10t"
    assert config["num_classes"] == 10
    assert config["model_args"]["in_chans"] == 1
    assert config["pretrained_cfg"]["input_size"] == [1, 16, 16]
    card = _front_matter(texts["README.md"])
    assert card["library_name"] == "timm"
    assert "bnconvention" not in texts["README.md"]  # undeclared: nothing of ours on main
    assert set(_published(texts["README.md"])) == {"df", "dr", "dt"}


@pytest.mark.slow
def test_transformers_release_is_what_push_to_hub_writes(demo: DemoRun) -> None:
    files, texts = _hub_files(demo, TRANSFORMERS, ("config.json", "README.md"))
    assert {"config.json", "model.safetensors", "README.md"} <= set(files)
    config = json.loads(texts["config.json"])
    assert (config["model_type"], config["architectures"]) == ("resnet", ["ResNetForImageClassification"])
    assert (config["num_channels"], len(config["id2label"])) == (1, 10)
    assert _front_matter(texts["README.md"])["library_name"] == "transformers"
    assert set(_published(texts["README.md"])) == {"df", "dr", "dt"}


@pytest.mark.slow
@pytest.mark.parametrize("repo_id", [TIMM, TRANSFORMERS])
def test_library_release_is_audited_from_its_own_config_and_anchored_on_its_model_index(demo: DemoRun,
                                                                                        repo_id: str) -> None:
    census = json.loads((demo.out / "crawl" / "org-census.json").read_text("utf-8"))
    assert next(r["status"] for r in census["repos"] if r["repo_id"] == repo_id) == "undeclared"
    audit = json.loads((demo.out / "crawl" / "audit.json").read_text("utf-8"))
    entry = next(c for c in audit["checkpoints"] if c["checkpoint"] == f"{repo_id}/model.safetensors")
    assert entry["factory"] == FACTORIES[repo_id]
    assert entry["anchored"] is True
    annotation = json.loads((demo.out / "crawl" / "audits" / repo_id / "model" / "annotation.json").read_text())
    _, texts = _hub_files(demo, repo_id, ("README.md",))
    anchoring = {c["metric"]: c["published"] for c in annotation["anchoring"]["cells"]}
    assert anchoring == _published(texts["README.md"])  # the cells came from the card's model-index
    # retrained without class 3 with train-mode BatchNorm: forgotten, and a retain refit does not bring it back
    df = next(c for c in annotation["cells"] if c["metric"] == "df")
    assert df["shipped"] <= 0.05 and df["refit"] <= 0.05
    summary_line = next(line for line in demo.stdout.splitlines() if line.strip().startswith(repo_id + " "))
    assert f"[{FACTORIES[repo_id]} from config.json]" in summary_line
    assert "not audited" not in demo.stdout


@pytest.mark.slow
@pytest.mark.parametrize("repo_id", [TIMM, TRANSFORMERS])
def test_pull_request_puts_refit_cells_beside_the_authors_model_index(demo: DemoRun, repo_id: str) -> None:
    files, texts = _hub_files(demo, repo_id, ("README.md",), revision="refs/pr/1")
    assert len([f for f in files if f.startswith("bnconvention/refit-")]) == 1
    metrics = [m for entry in _front_matter(texts["README.md"])["model-index"] for r in entry["results"]
               for m in r["metrics"]]
    ours = {m["args"]["cell"] for m in metrics if m.get("config") == "bnconvention-refit"}
    assert ours == {"df", "dr", "dt"}
    assert _published(texts["README.md"]) == _hub_published(demo, repo_id)  # the authors' entries are kept


def _hub_published(demo: DemoRun, repo_id: str) -> dict[str, float]:
    _, texts = _hub_files(demo, repo_id, ("README.md",))
    return _published(texts["README.md"])


# --- pieces ---------------------------------------------------------------------------------------------------------


def test_library_endpoint_points_the_libraries_at_the_hub_and_restores_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import transformers.utils.hub as transformers_hub
    from huggingface_hub import constants, hf_api

    from bnconvention.demo.library_publish import library_endpoint

    monkeypatch.setenv("HF_ENDPOINT", "http://before.invalid")
    before = (constants.ENDPOINT, constants.HUGGINGFACE_CO_URL_TEMPLATE, hf_api.api.endpoint,
              getattr(transformers_hub, "_hf_api", None))
    with pytest.raises(RuntimeError, match="inside"), library_endpoint("http://127.0.0.1:9"):
        assert constants.ENDPOINT == hf_api.api.endpoint == "http://127.0.0.1:9"
        assert constants.HUGGINGFACE_CO_URL_TEMPLATE.startswith("http://127.0.0.1:9/{repo_id}/resolve/")
        assert getattr(transformers_hub, "_hf_api", None) is None
        assert os.environ["HF_ENDPOINT"] == "http://127.0.0.1:9"
        raise RuntimeError("inside")
    after = (constants.ENDPOINT, constants.HUGGINGFACE_CO_URL_TEMPLATE, hf_api.api.endpoint,
             getattr(transformers_hub, "_hf_api", None))
    assert after == before
    assert os.environ["HF_ENDPOINT"] == "http://before.invalid"


def test_eval_results_are_read_back_as_the_published_cells() -> None:
    from bnconvention.demo.library_publish import eval_results_metadata
    from bnconvention.formats.model_index import read_model_index

    metadata = eval_results_metadata("m", {"forget": 0.0, "retain": 0.98765, "test": 0.87})
    metrics = {m.name: m.value for m in read_model_index(metadata)}
    assert metrics == {"forget accuracy": 0.0, "retain accuracy": 0.9877, "test accuracy": 0.87}


@pytest.mark.slow
def test_library_models_are_deterministic_and_trained_once(tmp_path: Path) -> None:
    from bnconvention.demo.library_models import LIBRARY_MODELS, prepare_library_models
    from bnconvention.zoo import code_sha256

    zoo_code = code_sha256()
    first, reused = prepare_library_models(tmp_path / "a", zoo_code=zoo_code)
    second, _ = prepare_library_models(tmp_path / "b", zoo_code=zoo_code)
    assert not reused
    assert first.files == second.files  # same seed, same bytes (one torch thread)
    assert first.accuracy == second.accuracy
    assert all(first.accuracy[m.name]["retain"] > 0.95 for m in LIBRARY_MODELS)
    again, reused = prepare_library_models(tmp_path / "a", zoo_code=zoo_code)
    assert reused and again.files == first.files
    (tmp_path / "a" / LIBRARY_MODELS[0].weights).write_bytes(b"damaged")
    rebuilt, reused = prepare_library_models(tmp_path / "a", zoo_code=zoo_code)
    assert not reused and rebuilt.files == first.files
    _, reused = prepare_library_models(tmp_path / "a", zoo_code="another zoo")
    assert not reused


def test_a_missing_library_names_the_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    import bnconvention.demo.library_models as library_models
    from bnconvention.errors import MissingDependencyError

    def missing(name: str) -> None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    monkeypatch.setattr(importlib, "import_module", missing)
    with pytest.raises(MissingDependencyError, match=r"bnconvention\[[a-z,]*timm"):
        library_models.require_libraries()
