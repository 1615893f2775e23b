"""Export a release's record to the bills of materials people already use: SPDX 3 and a CycloneDX model card.

:func:`read_release` gathers what a release says
(:class:`~bnconvention.authoring.sbom_record.ReleaseRecord`: each weights file's sha256 and stamped declaration, each
refit annotation's cells); :func:`export` maps it with the registry's libraries (``bnconvention[provenance]``, an
optional extra: imported inside the functions that write each format). The mapping is the table in
``docs/standard.md`` ("Export to SPDX and CycloneDX").

* **SPDX 3.0.1** (``spdx``, :mod:`bnconvention.authoring.spdx3`): one ``ai_AIPackage`` per weights file, written with
  spdx-python-model, SPDX's bindings generated from the model's SHACL shapes.
* **SPDX 2.3** (``spdx-2.3``, kept for the tools that read 2.3 only): one package per weights file (sha256
  checksum, the convention in its comment) and the records as package annotations, each a JSON text; written by
  spdx-tools 0.8, it passes ``validate_full_spdx_document``.
* **CycloneDX** 1.6: one ``machine-learning-model`` component per weights file (sha256 hash, ``bnconvention:*``
  properties). cyclonedx-python-lib 11 has no ``modelCard`` model yet, so the library writes the BOM and the
  ``modelCard`` (``modelParameters.approach``, ``quantitativeAnalysis.performanceMetrics`` for each refit cell,
  ``considerations``) is added to its JSON; the whole passes the library's ``JsonStrictValidator``.
"""

from __future__ import annotations

import hashlib
import io
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TypeAlias

from bnconvention._version import __version__
from bnconvention.authoring.sbom_record import ReleaseRecord, WeightsEntry
from bnconvention.authoring.stamp import checked_record
from bnconvention.formats.canonical import loads_strict
from bnconvention.formats.json_types import JsonObject, JsonValue
from bnconvention.formats.safetensors_header import read_header
from bnconvention.standard.locations import record_from_header
from bnconvention.standard.models import Declaration, RefitAnnotation, to_dict

ExportFormat: TypeAlias = Literal["spdx", "spdx-2.3", "cyclonedx"]
FORMATS: tuple[ExportFormat, ...] = ("spdx", "spdx-2.3", "cyclonedx")
TOOL = f"bnconvention-{__version__}"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def read_release(path: Path, *, name: str | None = None) -> ReleaseRecord:
    """A release folder (or one ``.safetensors`` file): each weights file with its stamped record (checked), and
    each ``bnconvention/*.json`` refit annotation."""
    folder = path if path.is_dir() else path.parent
    files = sorted(folder.glob("*.safetensors")) if path.is_dir() else [path]
    weights = []
    for weights_path in files:
        record = record_from_header(read_header(weights_path), source=str(weights_path))
        declaration = None
        if record is not None:
            checked, _ = checked_record(record, source=str(weights_path))
            declaration = checked if isinstance(checked, Declaration) else None
        weights.append(WeightsEntry(weights_path.name, _sha256(weights_path), declaration))
    annotations = []
    for annotation in sorted((folder / "bnconvention").glob("*.json")):
        model, _ = checked_record(loads_strict(annotation.read_bytes(), source=str(annotation)),
                                  source=str(annotation))
        if isinstance(model, RefitAnnotation):
            annotations.append(model)
    return ReleaseRecord(name=name or folder.resolve().name, weights=weights, annotations=annotations)


def _compact(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _spdx_id(index: int) -> str:
    return f"SPDXRef-Model-{index}"


# --- SPDX 2.3 -------------------------------------------------------------------------------------------------------


def spdx_document(release: ReleaseRecord, *, created: datetime | None = None) -> Any:
    """The SPDX 2.3 document (spdx-tools' model) of ``release``."""
    from spdx_tools.spdx.model import (
        Actor,
        ActorType,
        Annotation,
        AnnotationType,
        Checksum,
        ChecksumAlgorithm,
        CreationInfo,
        Document,
        Package,
        PackagePurpose,
        Relationship,
        RelationshipType,
        SpdxNoAssertion,
    )

    created = created or datetime.now(UTC).replace(microsecond=0, tzinfo=None)
    tool = Actor(ActorType.TOOL, TOOL)
    namespace_digest = hashlib.sha256(_compact([w.sha256 for w in release.weights]).encode()).hexdigest()[:16]
    info = CreationInfo(spdx_version="SPDX-2.3", spdx_id="SPDXRef-DOCUMENT", name=f"{release.name} deployed state",
                        document_namespace=f"https://spdx.org/spdxdocs/bnconvention/{release.name}-{namespace_digest}",
                        creators=[tool], created=created)
    packages, annotations, relationships = [], [], []
    for index, weights in enumerate(release.weights):
        spdx_id = _spdx_id(index)
        convention = weights.declaration.convention.name if weights.declaration is not None else None
        comment = (f"BatchNorm running statistics fitted under {convention} (bnconvention declaration)"
                   if convention else "no bnconvention declaration stamped")
        packages.append(Package(spdx_id=spdx_id, name=f"{release.name}/{weights.filename}",
                                download_location=SpdxNoAssertion(), file_name=weights.filename,
                                files_analyzed=False, checksums=[Checksum(ChecksumAlgorithm.SHA256, weights.sha256)],
                                primary_package_purpose=PackagePurpose.OTHER, comment=comment))
        relationships.append(Relationship("SPDXRef-DOCUMENT", RelationshipType.DESCRIBES, spdx_id))
        records: list[Declaration | RefitAnnotation] = [weights.declaration] if weights.declaration else []
        for record in [*records, *release.annotations_of(weights.filename)]:
            annotations.append(Annotation(spdx_id, AnnotationType.OTHER, tool, created,
                                          f"bnconvention {record.kind}: {_compact(to_dict(record))}"))
    return Document(info, packages=packages, annotations=annotations, relationships=relationships)


def spdx_json(release: ReleaseRecord, *, created: datetime | None = None) -> str:
    """The SPDX 2.3 JSON of ``release``, validated by spdx-tools as it is written."""
    from spdx_tools.spdx.writer.json.json_writer import write_document_to_stream

    stream = io.StringIO()
    write_document_to_stream(spdx_document(release, created=created), stream, validate=True)
    return stream.getvalue() + "\n"


# --- CycloneDX 1.6 --------------------------------------------------------------------------------------------------


def _model_card(weights: WeightsEntry, annotations: list[RefitAnnotation]) -> JsonObject:
    """The component's CycloneDX ``modelCard`` (JSON, beside the document cyclonedx-python-lib writes)."""
    declaration = weights.declaration
    metrics: list[JsonValue] = []
    for annotation in annotations:
        refit = annotation.convention.name
        for cell in annotation.cells:
            metrics.append({"type": cell.metric, "value": repr(cell.shipped), "slice": "shipped"})
            metrics.append({"type": cell.metric, "value": repr(cell.refit), "slice": f"refit {refit}",
                            "confidenceInterval": {"lowerBound": repr(min(cell.replicate_values)),
                                                   "upperBound": repr(max(cell.replicate_values))}})
    card: JsonObject = {"modelParameters": {"approach": {"type": "supervised"}}}
    if metrics:
        card["quantitativeAnalysis"] = {"performanceMetrics": metrics}
    lines = [declaration.reporting_line if declaration else None] + [a.reporting_line for a in annotations]
    considerations: list[JsonValue] = [line for line in lines if line]
    if declaration is not None and declaration.convention.name:
        considerations.insert(0, f"BatchNorm running statistics fitted under {declaration.convention.name}")
    if considerations:
        card["considerations"] = {"technicalLimitations": considerations}
    return card


def _properties(weights: WeightsEntry, annotations: list[RefitAnnotation]) -> list[tuple[str, str]]:
    declaration = weights.declaration
    found: list[tuple[str, str]] = []
    if declaration is not None:
        found += [("bnconvention:convention", declaration.convention.name),
                  ("bnconvention:trainable_sha256", declaration.digests.trainable_sha256)]
        if declaration.digests.running_sha256:
            found.append(("bnconvention:running_sha256", declaration.digests.running_sha256))
        found.append(("bnconvention:declaration", _compact(to_dict(declaration))))
    found += [("bnconvention:refit_annotation", _compact(to_dict(a))) for a in annotations]
    return found


def cyclonedx_document(release: ReleaseRecord) -> JsonObject:
    """The CycloneDX 1.6 BOM of ``release`` as a JSON dict: the library's BOM plus each component's ``modelCard``."""
    from cyclonedx.model import HashAlgorithm, HashType, Property
    from cyclonedx.model.bom import Bom
    from cyclonedx.model.component import Component, ComponentType
    from cyclonedx.output.json import JsonV1Dot6

    bom = Bom()
    cards = {}
    for index, weights in enumerate(release.weights):
        annotations = release.annotations_of(weights.filename)
        ref = f"bnconvention-model-{index}"
        bom.components.add(Component(
            type=ComponentType.MACHINE_LEARNING_MODEL, name=f"{release.name}/{weights.filename}", bom_ref=ref,
            hashes=[HashType(alg=HashAlgorithm.SHA_256, content=weights.sha256)],
            properties=[Property(name=n, value=v) for n, v in _properties(weights, annotations)]))
        cards[ref] = _model_card(weights, annotations)
    data = json.loads(JsonV1Dot6(bom).output_as_string())
    for component in data.get("components", []):
        component["modelCard"] = cards[component["bom-ref"]]
    return data


def cyclonedx_json(release: ReleaseRecord) -> str:
    return json.dumps(cyclonedx_document(release), indent=2, ensure_ascii=False) + "\n"


def export(release: ReleaseRecord, fmt: ExportFormat) -> str:
    """The document of ``release`` in ``fmt`` as JSON text (``spdx`` is SPDX 3.0.1, ``spdx-2.3`` SPDX 2.3)."""
    if fmt == "spdx":
        from bnconvention.authoring.spdx3 import spdx3_json

        return spdx3_json(release)
    if fmt == "spdx-2.3":
        return spdx_json(release)
    if fmt == "cyclonedx":
        return cyclonedx_json(release)
    raise ValueError(f"unknown export format {fmt!r}; expected one of {', '.join(FORMATS)}")


__all__ = ["FORMATS", "ExportFormat", "ReleaseRecord", "WeightsEntry", "cyclonedx_document", "cyclonedx_json",
           "export", "read_release", "spdx_document", "spdx_json"]
