"""What a bill of materials is made from: a release's weights files and refit annotations as
:func:`bnconvention.authoring.sbom.read_release` reads them. Both exporters take it, the SPDX 2.3 and CycloneDX
writers of :mod:`bnconvention.authoring.sbom` and the SPDX 3 writer of :mod:`bnconvention.authoring.spdx3`, so it sits
below both."""

from __future__ import annotations

from dataclasses import dataclass, field

from bnconvention.standard.models import Declaration, RefitAnnotation


@dataclass(frozen=True)
class WeightsEntry:
    """One weights file: its name in the release, sha256 of its bytes, and its stamped declaration (checked)."""

    filename: str
    sha256: str
    declaration: Declaration | None = None


@dataclass(frozen=True)
class ReleaseRecord:
    """What a release says about its deployed state: its weights and the refit annotations of them."""

    name: str
    weights: list[WeightsEntry] = field(default_factory=list)
    annotations: list[RefitAnnotation] = field(default_factory=list)

    def annotations_of(self, filename: str) -> list[RefitAnnotation]:
        return [a for a in self.annotations if a.subject.filename == filename]


__all__ = ["ReleaseRecord", "WeightsEntry"]
