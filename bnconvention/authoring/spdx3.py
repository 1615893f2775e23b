"""A release's record as an SPDX 3.0.1 document with the AI profile, written with ``spdx-python-model``.

``spdx-python-model`` is SPDX's own binding of the 3.0.1 model, generated from the model's SHACL shapes by
shacl2code: each property is type-, enumeration- and pattern-checked as it is set, and the required properties and
cardinalities are checked as the document is serialised, so a document that breaks the shapes is refused here, not
written. Each weights file becomes an ``ai_AIPackage`` that contains a ``software_File`` (the file, its sha256 as a
``Hash``); the convention, the digests, the refit cells and the full records are mapped as the table in
``docs/standard.md`` ("Export to SPDX and CycloneDX") says. This module is imported only when ``export --format
spdx`` runs (``bnconvention[provenance]``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from spdx_python_model.bindings import v3_0_1 as spdx

from bnconvention._version import __version__
from bnconvention.authoring.sbom_record import ReleaseRecord, WeightsEntry
from bnconvention.standard.models import Declaration, RefitAnnotation, to_dict

SPEC_VERSION = "3.0.1"
TOOL = f"bnconvention-{__version__}"
PROFILES = ("core", "software", "ai", "extension")


def _compact(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _namespace(release: ReleaseRecord) -> str:
    digest = hashlib.sha256(_compact([w.sha256 for w in release.weights]).encode()).hexdigest()[:16]
    return f"https://spdx.org/spdxdocs/bnconvention/{quote(release.name, safe='')}-{digest}"


def _properties(weights: WeightsEntry) -> list[spdx.extension_CdxPropertyEntry]:
    """The declaration's convention and tensor digests as ``bnconvention:*`` name/value pairs (the names of the
    CycloneDX export's properties); the tensor digests are not digests of the file, so they are no ``Hash``."""
    declaration = weights.declaration
    if declaration is None:
        return []
    found = [("bnconvention:convention", declaration.convention.name),
             ("bnconvention:trainable_sha256", declaration.digests.trainable_sha256)]
    if declaration.digests.running_sha256:
        found.append(("bnconvention:running_sha256", declaration.digests.running_sha256))
    return [spdx.extension_CdxPropertyEntry(extension_cdxPropName=n, extension_cdxPropValue=v) for n, v in found]


def _metrics(annotations: list[RefitAnnotation]) -> Iterator[spdx.DictionaryEntry]:
    """Each refit cell as ``ai_metric`` entries: ``<metric> <split> shipped``, ``... refit <convention>`` and the
    refit's replicate range ``[min, max]`` (values as Python's ``repr`` of the recorded floats)."""
    for annotation in annotations:
        refit = annotation.convention.name
        for cell in annotation.cells:
            where = f"{cell.metric} {cell.split}"
            replicates = cell.replicate_values
            yield spdx.DictionaryEntry(key=f"{where} shipped", value=repr(cell.shipped))
            yield spdx.DictionaryEntry(key=f"{where} refit {refit}", value=repr(cell.refit))
            yield spdx.DictionaryEntry(key=f"{where} refit {refit} replicate range",
                                       value=f"[{min(replicates)!r}, {max(replicates)!r}]")


def _model(index: int, weights: WeightsEntry, annotations: list[RefitAnnotation], *, release: str, namespace: str,
           info: spdx.CreationInfo) -> list[spdx.Element]:
    """The ``ai_AIPackage`` of one weights file, the file it contains, and an ``Annotation`` per record."""
    convention = weights.declaration.convention.name if weights.declaration is not None else None
    package = spdx.ai_AIPackage(spdxId=f"{namespace}#model-{index}", creationInfo=info,
                                name=f"{release}/{weights.filename}",
                                software_primaryPurpose=spdx.software_SoftwarePurpose.model,
                                ai_metric=list(_metrics(annotations)))
    if convention:
        package.ai_informationAboutTraining = f"BatchNorm running statistics fitted under {convention}"
        package.ai_hyperparameter = [spdx.DictionaryEntry(key="bnconvention:convention", value=convention)]
        package.extension = [spdx.extension_CdxPropertiesExtension(extension_cdxProperty=_properties(weights))]
    else:
        package.comment = "no bnconvention declaration stamped"
    lines = [line for line in [weights.declaration.reporting_line if weights.declaration is not None else None]
             + [a.reporting_line for a in annotations] if line]
    if lines:
        package.ai_limitation = "\n".join(lines)
    file = spdx.software_File(spdxId=f"{namespace}#file-{index}", creationInfo=info, name=weights.filename,
                              software_primaryPurpose=spdx.software_SoftwarePurpose.model,
                              verifiedUsing=[spdx.Hash(algorithm=spdx.HashAlgorithm.sha256,
                                                       hashValue=weights.sha256)])
    contains = spdx.Relationship(spdxId=f"{namespace}#model-{index}-contains", creationInfo=info, from_=package,
                                 relationshipType=spdx.RelationshipType.contains, to=[file])
    records: list[Declaration | RefitAnnotation] = [weights.declaration] if weights.declaration else []
    notes = [spdx.Annotation(spdxId=f"{namespace}#model-{index}-record-{n}", creationInfo=info, subject=package,
                             annotationType=spdx.AnnotationType.other,
                             statement=f"bnconvention {record.kind}: {_compact(to_dict(record))}")
             for n, record in enumerate([*records, *annotations])]
    return [package, file, contains, *notes]


def spdx3_objects(release: ReleaseRecord, *, created: datetime | None = None) -> spdx.SHACLObjectSet:
    """The SPDX 3.0.1 objects of ``release``: an ``SpdxDocument`` whose root elements are the AI packages."""
    created = created or datetime.now(UTC)
    namespace = _namespace(release)
    info = spdx.CreationInfo(specVersion=SPEC_VERSION, created=created.replace(microsecond=0))
    agent = spdx.SoftwareAgent(spdxId=f"{namespace}#agent", creationInfo=info, name=TOOL)
    tool = spdx.Tool(spdxId=f"{namespace}#tool", creationInfo=info, name=TOOL)
    info.createdBy = [agent]
    info.createdUsing = [tool]
    elements: list[spdx.Element] = [agent, tool]
    packages = []
    for index, weights in enumerate(release.weights):
        model = _model(index, weights, release.annotations_of(weights.filename), release=release.name,
                       namespace=namespace, info=info)
        packages.append(model[0])
        elements += model
    document = spdx.SpdxDocument(spdxId=f"{namespace}#document", creationInfo=info,
                                 name=f"{release.name} deployed state", rootElement=packages, element=elements,
                                 profileConformance=[getattr(spdx.ProfileIdentifierType, p) for p in PROFILES])
    objects = spdx.SHACLObjectSet()
    for element in [document, *elements]:
        objects.add(element)
    return objects


def spdx3_json(release: ReleaseRecord, *, created: datetime | None = None) -> str:
    """The SPDX 3.0.1 JSON-LD of ``release``; the library refuses (``ValueError``) a document missing a required
    property as it serialises it."""
    data = spdx.JSONLDSerializer().serialize_data(spdx3_objects(release, created=created))
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


__all__ = ["SPEC_VERSION", "spdx3_json", "spdx3_objects"]
