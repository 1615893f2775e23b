"""The refit annotation of a scales audit: a 1.1 record whose refit_state says the cells were
refit on the activation scales, validated, with its decisions checked against its replicate shifts.

The tiny model is tests/test_quant_scales.py's sign model: a 1x1 convolution of weight 2 and a BatchNorm layer,
one minmax observer on the convolution's output (shipped on [-2, 6]: scale 8/255), two logits (z, -z). At the
shipped scale x = -0.004 quantizes to 0 and is misclassified; at the scale refit on [-0.04, 0.04] it is not, so each
of six replicates moves df from 0.75 to 1.0 (+25 pp): displaced at p = 0.5^6 = 0.015625 (hand-computed).
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch.ao.quantization import QConfig, default_weight_observer, prepare
from torch.ao.quantization.observer import MinMaxObserver

from bnconvention.audit.scales.annotation import scales_annotation
from bnconvention.audit.scales.cells import ScalesAudit, scales_cells
from bnconvention.authoring.activation_scales import float_state
from bnconvention.authoring.declaration import make_convention, make_transform
from bnconvention.errors import DigestMismatchError
from bnconvention.formats.digests import bn_layer_names, state_dict_digests
from bnconvention.refitting.scales import scales_digests
from bnconvention.standard.models import AuditedFile, DatasetRef, DataSplit, to_dict
from bnconvention.validation.records import validate_record

REPLICATES = 6


class Signs(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        inner = torch.nn.Sequential(torch.nn.Conv2d(1, 1, 1, bias=False), torch.nn.BatchNorm2d(1))
        with torch.no_grad():
            inner[0].weight.fill_(2.0)  # type: ignore[operator]
        inner.eval()
        inner[0].qconfig = QConfig(activation=MinMaxObserver.with_args(dtype=torch.quint8),  # type: ignore[assignment]
                                   weight=default_weight_observer)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.ao.quantization's deprecation notices
            self.inner = prepare(inner)
        with torch.no_grad():
            self.inner(torch.linspace(-1.0, 3.0, 9).reshape(-1, 1, 1, 1))  # the site sees [-2, 6]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.inner[0](x).reshape(-1, 1)
        return torch.cat([z, -z], dim=1)


CALIBRATION = DataSplit(role="retain", dataset=DatasetRef(id="d"), subset="two retained records", record_count=2)
CONVENTION = make_convention(buffer_update_mode="untouched", role="train", dataset_id="d", subset="s",
                             transform=make_transform(mode="eval"), rule="ema", momentum=0.1)


@pytest.fixture(scope="module")
def audited() -> tuple[Signs, ScalesAudit, AuditedFile]:
    model = Signs()
    digests = state_dict_digests(float_state(model), bn_layer_names(model))
    subject = AuditedFile(filename="model.safetensors", trainable_sha256=digests.trainable_sha256,
                          running_sha256=digests.running_sha256)
    x = torch.tensor([-0.004, 0.5, 1.0, -0.5]).reshape(-1, 1, 1, 1)
    pools = [[torch.tensor([-0.02, 0.02]).reshape(-1, 1, 1, 1)]] * REPLICATES
    audit = scales_cells(model, splits={"forget": (x, torch.tensor([1, 0, 0, 1]))}, calibration_pools=pools)
    return model, audit, subject


def test_the_annotation_says_the_scales_were_refit_and_validates(audited: tuple[Signs, ScalesAudit,
                                                                                 AuditedFile]) -> None:
    _, audit, subject = audited
    record = scales_annotation(audit, subject=subject, convention=CONVENTION, calibration=CALIBRATION,
                               calibration_seeds=list(range(REPLICATES)))
    data = to_dict(record)
    assert data["spec_version"] == "1.1" and validate_record(data) == []
    [cell] = record.cells
    assert (cell.shipped, cell.replicate_shifts_pp) == (0.75, [25.0] * REPLICATES)
    assert (cell.decision.outcome, cell.decision.p_value) == ("displaced", 0.015625)
    state = data["refit_state"]
    assert state["kind"] == "activation_scales" and state["observer"] == "minmax"
    assert state["shipped_scales_sha256"] == scales_digests(audit.shipped)[0]
    assert state["refit_scales_sha256"] == [scales_digests(r)[0] for r in audit.refits]
    assert state["shipped_scales_sha256"] not in state["refit_scales_sha256"]  # the scales moved: 8/255 -> 0.08/255
    assert data["subject"]["trainable_sha256"] == subject.trainable_sha256
    assert "df +25.00pp displaced" in data["reporting_line"]


def test_a_decision_that_contradicts_the_replicate_shifts_is_caught(audited: tuple[Signs, ScalesAudit,
                                                                                    AuditedFile]) -> None:
    _, audit, subject = audited
    data = to_dict(scales_annotation(audit, subject=subject, convention=CONVENTION, calibration=CALIBRATION))
    flipped = copy.deepcopy(data)
    flipped["cells"][0]["decision"] = {"outcome": "equivalent", "method": "exact-equality"}
    assert [(i.code, i.path) for i in validate_record(flipped)] == [
        ("record.decision_inconsistent", "/cells/0/decision/outcome")]
    shifted = copy.deepcopy(data)  # the shifts no longer clear the margin: displaced is not their decision
    cell = shifted["cells"][0]
    cell["replicate_values"] = [0.755] * REPLICATES
    cell["replicate_shifts_pp"] = [0.5] * REPLICATES
    cell["refit"], cell["shift_pp"] = 0.755, 0.5
    assert "record.decision_inconsistent" in {i.code for i in validate_record(shifted)}


def test_an_audit_of_other_weights_is_refused(audited: tuple[Signs, ScalesAudit, AuditedFile]) -> None:
    _, audit, subject = audited
    other = subject.model_copy(update={"trainable_sha256": "0" * 64})
    with pytest.raises(DigestMismatchError, match="not the subject's"):
        scales_annotation(audit, subject=other, convention=CONVENTION, calibration=CALIBRATION)
