"""The declaration: how the deployed state of one weights file was fitted, bound to its tensors by digests."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from bnconvention.standard.convention import FittingConvention
from bnconvention.standard.deployed import Producer, TensorDigests
from bnconvention.standard.evidence import Observation, RefitDetails
from bnconvention.standard.fields import NonEmptyStr, VersionedRecord
from bnconvention.standard.quantization import DeployedState


class Declaration(VersionedRecord):
    """How the deployed state of one weights file was fitted, bound to its tensors by digests."""

    kind: Literal["declaration"] = Field(description="Record kind.")
    convention: FittingConvention = Field(description="How the running statistics were fitted.")
    deployed_state: list[DeployedState] = Field(
        min_length=1, description="The deployed state, one entry per kind (tagged by kind)."
    )
    digests: TensorDigests = Field(description="Digests binding the record to the file's tensors.")
    producer: Producer = Field(description="The tool and version that wrote this record.")
    reporting_line: NonEmptyStr | None = Field(
        default=None, description="The one sentence a release adds, e.g. 'deployed state as shipped; ...'."
    )
    observation: Observation | None = Field(default=None, description="Evidence measured by the recorder.")
    refit: RefitDetails | None = Field(default=None, description="Present when the state was produced by a refit.")


__all__ = ["Declaration"]
