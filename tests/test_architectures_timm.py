"""timm architectures from the config.json timm itself writes: built through timm's registry
only, with plain-JSON arguments, the saved weights loading strictly and giving timm's own logits."""

from __future__ import annotations

import re
import sys

import pytest
import torch
from architectures_support import fixed_input, read_json, timm_release
from safetensors.torch import load_file

from bnconvention.architectures.build import build_model
from bnconvention.architectures.resolve import architecture_from_config
from bnconvention.architectures.timm_models import REFUSED_KEYS, safe_timm_kwargs, timm_architecture
from bnconvention.errors import ArchitectureConfigError, MissingDependencyError

SOURCE = "org/model/config.json"


@pytest.mark.parametrize(("name", "kwargs", "size"), [
    pytest.param("resnet10t", {"num_classes": 5}, 32, id="resnet10t-batchnorm"),
    pytest.param("mobilenetv3_small_050", {"num_classes": 4}, 32, id="mobilenetv3-batchnorm"),
    pytest.param("convnext_atto", {"num_classes": 3}, 32, id="convnext-layernorm"),
    pytest.param("vit_tiny_patch16_224", {"num_classes": 3, "img_size": 32}, 32, id="vit-fixed-size"),
    pytest.param("resnet10t", {"num_classes": 2, "in_chans": 1}, 24, id="resnet10t-one-channel"),
])
def test_a_timm_release_builds_from_its_own_config(tmp_path, name, kwargs, size):
    original = timm_release(tmp_path, name, **kwargs)
    arch = architecture_from_config(read_json(tmp_path / "config.json"), source=SOURCE)
    assert arch is not None and arch.factory == f"timm/{name}" and arch.source == SOURCE
    assert arch.kwargs["num_classes"] == kwargs["num_classes"]
    model = build_model(arch.factory, arch.kwargs, source=arch.source)
    model.load_state_dict(load_file(str(tmp_path / "model.safetensors")), strict=True)
    model.eval()
    x = fixed_input(channels=kwargs.get("in_chans", 3), size=size)
    with torch.inference_mode():
        # same weights, same ops, same process: the outputs are the same numbers
        assert torch.equal(model(x), original(x))


def test_the_architecture_and_arguments_timm_wrote_are_the_ones_used(tmp_path):
    timm_release(tmp_path, "vit_tiny_patch16_224", num_classes=3, img_size=32)
    config = read_json(tmp_path / "config.json")
    assert config["architecture"] == "vit_tiny_patch16_224" and "pretrained_cfg" in config  # timm's own shape
    factory, kwargs = timm_architecture(config, source=SOURCE)
    assert factory == "timm/vit_tiny_patch16_224"
    assert kwargs == config["model_args"] == {"num_classes": 3, "img_size": [32, 32], "in_chans": 3,
                                              "global_pool": "token"}


def test_a_legacy_config_without_model_args_takes_channels_and_fixed_size_from_pretrained_cfg():
    config = {"architecture": "vit_tiny_patch16_224", "num_classes": 4,
              "pretrained_cfg": {"input_size": [1, 48, 48], "fixed_input_size": True}}
    assert timm_architecture(config, source=SOURCE) == (
        "timm/vit_tiny_patch16_224", {"in_chans": 1, "img_size": [48, 48], "num_classes": 4})


def test_a_pretrained_tag_selects_weights_not_code_and_is_dropped():
    factory, _ = timm_architecture({"architecture": "resnet18.a1_in1k", "num_classes": 10}, source=SOURCE)
    assert factory == "timm/resnet18"


@pytest.fixture
def no_timm_build(monkeypatch):
    """timm.create_model raises if anything reaches it: a refusal must come first."""
    import timm

    def refuse(*args, **kwargs):
        raise AssertionError("timm.create_model was called")

    monkeypatch.setattr(timm, "create_model", refuse)


@pytest.mark.parametrize(("config", "message"), [
    pytest.param({"architecture": "resnet9000", "num_classes": 3}, "'resnet9000' is not in timm's model registry",
                 id="outside-the-registry"),
    pytest.param({"architecture": "hf-hub:org/other", "num_classes": 3}, "is not a plain timm model name",
                 id="hf-hub-prefix"),
    pytest.param({"architecture": "local-dir:/tmp/x", "num_classes": 3}, "is not a plain timm model name",
                 id="local-dir-prefix"),
    pytest.param({"architecture": "resnet10t", "num_classes": 3, "model_args": {"checkpoint_path": "/etc/x"}},
                 "'checkpoint_path' is a loading option", id="checkpoint-path"),
    pytest.param({"architecture": "resnet10t", "num_classes": 3, "model_args": {"pretrained": True}},
                 "'pretrained' is a loading option", id="pretrained"),
    pytest.param({"architecture": "resnet10t", "num_classes": 3, "model_args": {"weights_url": "http://x"}},
                 "'weights_url' is a loading option", id="url-key"),
    pytest.param({"architecture": "resnet10t", "num_classes": 3, "model_args": {"act_layer": {"cls": "os.system"}}},
                 "is not plain JSON (a dict)", id="object-value"),
    pytest.param({"architecture": "resnet10t", "num_classes": 3, "model_args": {"act_layer": "os:system"}},
                 "is not plain JSON (a string other than a short name)", id="module-string"),
    pytest.param({"architecture": "resnet10t", "num_classes": 3, "model_args": {"depths": [[[[1]]]]}},
                 "nested too deeply", id="deep-list"),
    pytest.param({"architecture": "resnet10t", "num_classes": 3, "model_args": {"num_classes": 4}},
                 "num_classes is 3 but model_args.num_classes is 4", id="contradiction"),
    pytest.param({"architecture": "resnet10t", "num_classes": True}, "num_classes is True", id="bool-classes"),
    pytest.param({"architecture": "resnet10t", "num_classes": 3, "model_args": [1]}, "'model_args' is a list",
                 id="model-args-list"),
    pytest.param({"architecture": "resnet10t", "num_classes": 3, "auto_map": {"AutoModel": "x.Y"}},
                 "/auto_map asks for remote code", id="auto-map"),
])
def test_a_refused_timm_config_is_one_line_naming_the_file(no_timm_build, config, message):
    with pytest.raises(ArchitectureConfigError, match=re.escape(message)) as caught:
        architecture_from_config(config, source=SOURCE)
    text = str(caught.value)
    assert text.startswith(f"{SOURCE}: ") and "\n" not in text
    assert caught.value.source == SOURCE


def test_a_spec_naming_timm_directly_is_checked_the_same_way(no_timm_build):
    with pytest.raises(ArchitectureConfigError, match="'cache_dir' is a loading option"):
        build_model("timm/resnet10t", {"cache_dir": "/tmp"})
    with pytest.raises(ArchitectureConfigError, match="is not a plain timm model name"):
        build_model("timm/hf-hub:org/x", {})


def test_every_create_model_loading_option_is_refused():
    import inspect

    import timm

    own = {p for p in inspect.signature(timm.create_model).parameters if p not in ("model_name", "kwargs")}
    assert own <= REFUSED_KEYS, own - REFUSED_KEYS
    for key in sorted(REFUSED_KEYS):
        with pytest.raises(ArchitectureConfigError, match="loading option"):
            safe_timm_kwargs({key: None}, source=SOURCE)


def test_plain_arguments_pass_unchanged():
    kwargs = {"num_classes": 10, "in_chans": 3, "global_pool": "avg", "img_size": [32, 32], "drop_rate": 0.1,
              "act_layer": "gelu_tanh", "depths": [2, 2, 6, 2], "class_token": False, "reg_tokens": None}
    assert safe_timm_kwargs(kwargs, source=SOURCE) == kwargs


def test_without_timm_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "timm", None)  # import timm now raises ModuleNotFoundError
    with pytest.raises(MissingDependencyError, match=r"pip install 'bnconvention\[timm\]'") as caught:
        architecture_from_config({"architecture": "resnet10t", "num_classes": 3}, source=SOURCE)
    assert caught.value.extra == "timm" and "resnet10t" in str(caught.value)
