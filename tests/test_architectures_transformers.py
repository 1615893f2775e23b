"""transformers image classifiers from the config.json ``save_pretrained`` writes: transformers'
own config and image-classification mappings only, never remote code; the saved weights load strictly and the
logits are transformers' own."""

from __future__ import annotations

import re
import sys

import pytest
import torch
from architectures_support import fixed_input, read_json, transformers_convnext, transformers_resnet
from safetensors.torch import load_file

from bnconvention.architectures.build import build_model
from bnconvention.architectures.outputs import logits
from bnconvention.architectures.resolve import architecture_from_config
from bnconvention.errors import ArchitectureConfigError, MissingDependencyError, UnsupportedModelError

SOURCE = "org/model/config.json"


@pytest.mark.parametrize("release", [
    pytest.param(transformers_resnet, id="resnet-batchnorm"),
    pytest.param(transformers_convnext, id="convnext-layernorm"),
])
def test_a_transformers_release_builds_from_its_own_config(tmp_path, release):
    original = release(tmp_path)
    config = read_json(tmp_path / "config.json")
    arch = architecture_from_config(config, source=SOURCE)
    assert arch is not None and arch.factory == f"transformers/{config['architectures'][0]}"
    model = build_model(arch.factory, arch.kwargs, source=arch.source)
    assert type(model) is type(original) and not model.training
    assert next(model.parameters()).dtype == torch.float32
    model.load_state_dict(load_file(str(tmp_path / "model.safetensors")), strict=True)
    x = fixed_input()
    with torch.inference_mode():
        ours, theirs = model(x), original(x)
        assert type(ours).__name__.startswith("ImageClassifierOutput")  # a ModelOutput, not a tensor
        assert torch.equal(logits(ours), theirs.logits)  # same weights and ops: the same numbers


def test_a_half_precision_config_still_builds_float32(tmp_path):
    transformers_resnet(tmp_path)
    config = {**read_json(tmp_path / "config.json"), "dtype": "float16"}
    arch = architecture_from_config(config, source=SOURCE)
    model = build_model(arch.factory, arch.kwargs)
    assert {p.dtype for p in model.parameters()} == {torch.float32}


def test_a_spec_can_name_a_transformers_classifier_with_config_fields():
    model = build_model("transformers/ResNetForImageClassification",
                        {"embedding_size": 8, "hidden_sizes": [8, 16], "depths": [1, 1], "layer_type": "basic",
                         "num_labels": 4})
    assert model.config.model_type == "resnet" and model.classifier[-1].out_features == 4


@pytest.fixture
def no_transformers_build(monkeypatch):
    """AutoConfig.for_model and from_config raise if anything reaches them: a refusal must come first."""
    from transformers import AutoConfig, AutoModelForImageClassification

    def refuse(*args, **kwargs):
        raise AssertionError("transformers was asked to build")

    monkeypatch.setattr(AutoConfig, "for_model", refuse)
    monkeypatch.setattr(AutoModelForImageClassification, "from_config", refuse)


RESNET = {"architectures": ["ResNetForImageClassification"], "model_type": "resnet", "embedding_size": 8,
          "hidden_sizes": [8, 16], "depths": [1, 1], "id2label": {"0": "a", "1": "b"}}


@pytest.mark.parametrize(("config", "message"), [
    pytest.param({**RESNET, "model_type": "no_such_model"},
                 "model_type 'no_such_model' is unknown to transformers' config mapping", id="unknown-model-type"),
    pytest.param({**RESNET, "architectures": ["ResNetModel"]},
                 "architectures[0] 'ResNetModel' is not an image classifier of transformers for model_type 'resnet' "
                 "(that is ResNetForImageClassification)", id="not-a-classifier"),
    pytest.param({**RESNET, "architectures": ["BertForSequenceClassification"], "model_type": "bert"},
                 "model_type 'bert' (it has none)", id="text-model"),
    pytest.param({**RESNET, "architectures": ["ConvNextForImageClassification"]},
                 "'ConvNextForImageClassification' is not an image classifier of transformers for model_type "
                 "'resnet'", id="class-of-another-type"),
    pytest.param({**RESNET, "architectures": []}, "'architectures' names no model class", id="no-class"),
    pytest.param({**RESNET, "auto_map": {"AutoModelForImageClassification": "modeling.Net"}},
                 "/auto_map asks for remote code", id="auto-map"),
    pytest.param({**RESNET, "trust_remote_code": True}, "/trust_remote_code asks for remote code",
                 id="trust-remote-code"),
    pytest.param({**RESNET, "backbone_config": {"model_type": "resnet", "auto_map": {"AutoBackbone": "x.Y"}}},
                 "/backbone_config/auto_map asks for remote code", id="nested-auto-map"),
    pytest.param({**RESNET, "use_pretrained_backbone": True}, "/use_pretrained_backbone = True would load",
                 id="pretrained-backbone"),
    pytest.param({**RESNET, "backbone": "microsoft/resnet-50"}, "/backbone = 'microsoft/resnet-50' would load",
                 id="named-backbone"),
    pytest.param({**RESNET, "quantization_config": {"quant_method": "bitsandbytes"}}, "/quantization_config",
                 id="quantization"),
    pytest.param({"architectures": ["TimmWrapperForImageClassification"], "model_type": "timm_wrapper",
                  "architecture": "hf-hub:org/other", "num_labels": 3}, "is not a plain timm model name",
                 id="timm-wrapper-hub-name"),
    pytest.param({"architectures": ["TimmWrapperForImageClassification"], "model_type": "timm_wrapper",
                  "architecture": "resnet10t", "model_args": {"checkpoint_path": "/x"}},
                 "'checkpoint_path' is a loading option", id="timm-wrapper-loader-args"),
])
def test_a_refused_transformers_config_is_one_line_naming_the_file(no_transformers_build, config, message):
    with pytest.raises(ArchitectureConfigError, match=re.escape(message)) as caught:
        architecture_from_config(config, source=SOURCE)
    text = str(caught.value)
    assert text.startswith(f"{SOURCE}: ") and "\n" not in text


def test_a_spec_naming_a_remote_code_config_is_refused_too(no_transformers_build):
    with pytest.raises(ArchitectureConfigError, match="asks for remote code"):
        build_model("transformers/ResNetForImageClassification", {"auto_map": {"x": "y"}})
    with pytest.raises(ArchitectureConfigError, match="'ResNetModel' is not one of transformers' image classifiers"):
        build_model("transformers/ResNetModel", {})


def test_without_transformers_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'bnconvention\[transformers\]'") as caught:
        architecture_from_config(RESNET, source=SOURCE)
    assert caught.value.extra == "transformers" and SOURCE in str(caught.value)


def test_logits_are_read_out_of_every_output_shape():
    from transformers.modeling_outputs import ImageClassifierOutputWithNoAttention

    scores = torch.arange(6.0).reshape(2, 3)
    assert logits(scores) is scores
    assert logits(ImageClassifierOutputWithNoAttention(logits=scores)) is scores
    assert logits((scores, torch.zeros(1))) is scores
    assert logits({"logits": scores}) is scores
    with pytest.raises(UnsupportedModelError, match=r"returned a tensor of shape \[2, 3, 1\], not N x classes"):
        logits(scores[..., None])
    with pytest.raises(UnsupportedModelError, match="returned a str"):
        logits("no")
