"""``hub audit`` with the encoder-level diagnostics: a retrain reference published as a sibling repo is
named in its Hub form (``reference: {repo: "{org}/{seed_stem}-retrain", filename: ...}``), downloaded through the
real huggingface_hub client at a pinned commit before the repo's audit, and recorded in the cells' reference arm; a
reference repo the Hub lacks fails that repo's audit alone, with its name."""

from __future__ import annotations

import pytest

from bnconvention.audit.diagnostics.encoder import reference_file
from bnconvention.audit.spec.audit_spec import parse_spec
from bnconvention.audit.spec.diagnostics import ReferenceSpec
from bnconvention.errors import AuditSpecError
from bnconvention.hub.client import make_client
from bnconvention.hub.journal import Journal
from bnconvention.hub.retry import RetryPolicy
from bnconvention.hub_audit.audit import audit_org
from bnconvention.hub_audit.reference import resolve_reference
from bnconvention.hubserver import LocalHub

ORG = "diag-org"
TOKEN = "hf_diag_owner_0c1d"
HUB_REFERENCE = {"repo": "{org}/{seed_stem}-retrain", "filename": "model.safetensors"}
SPEC = {
    "spec_version": "1.0", "kind": "audit_spec", "name": "hub-diagnostics", "splits": {"forget_classes": [3]},
    "model": {"factory": "zoo/convnet-bn", "kwargs": {"width": 16}}, "published_source": "sidecar",
    "cells": ["df", "dr", "dt"], "replicates": 2, "refit": {"pool_size": 128}, "recoverability": None,
    "provenance": None, "staleness": False,
    "diagnostics": {"reference": HUB_REFERENCE, "linear_probe": {"per_class": 8},
                    "membership_inference": {"bootstrap": 50}},
}


def test_the_hub_form_resolves_its_placeholders_from_the_audited_repo() -> None:
    reference = ReferenceSpec.model_validate(HUB_REFERENCE)
    assert resolve_reference(reference, repo_id="lab/c3-s0-gradascent-train") == ("lab/c3-s0-retrain",
                                                                                 "model.safetensors")
    with pytest.raises(ValueError, match="needs 'filename'"):
        ReferenceSpec.model_validate({"repo": "lab/x"})
    with pytest.raises(ValueError, match="not a .safetensors file"):
        ReferenceSpec.model_validate({"repo": "lab/x", "filename": "pytorch_model.bin"})
    with pytest.raises(ValueError, match=r"unknown placeholder \{org\} in reference.path"):
        ReferenceSpec.model_validate({"path": "{org}.safetensors"})
    # a local reference dumps (and digests) as before the Hub form existed
    assert ReferenceSpec.model_validate({"path": "r.safetensors"}).model_dump(mode="json") == {"path": "r.safetensors"}


def test_a_local_audit_refuses_the_hub_form(tmp_path) -> None:
    spec = parse_spec(SPEC)
    with pytest.raises(AuditSpecError, match="only bnconvention hub audit downloads") as info:
        reference_file(spec, tmp_path / "c3-s0-ga.safetensors", name="c3-s0-ga")
    assert info.value.field == "/diagnostics/reference/repo"


@pytest.fixture(scope="module")
def audited(zoo, tmp_path_factory: pytest.TempPathFactory):
    """diag-org: an unlearned checkpoint and its retrain sibling, and one whose retrain repo was never published."""
    def files(variant: str) -> dict[str, bytes]:
        return {"model.safetensors": zoo.weights_path(variant).read_bytes(),
                "config.json": zoo.config_path(variant).read_bytes()}

    with LocalHub(tmp_path_factory.mktemp("hub"), tokens={TOKEN: "owner"}, orgs={ORG: ["owner"]},
                  durable=False) as hub:
        hub.store.commit(f"{ORG}/c3-s0-gradascent-train", files=files("bn-ga-train"), author="owner")
        hub.store.commit(f"{ORG}/c3-s0-retrain", files=files("bn-retrain"), author="owner")
        hub.store.commit(f"{ORG}/c3-s1-gradascent-train", files=files("bn-ga-train"), author="owner")
        states = hub.store.list_repo_states()
        client = make_client(endpoint=hub.endpoint, token=TOKEN, retry=RetryPolicy(attempts=2, base_delay=0.001))
        out = tmp_path_factory.mktemp("audit-out")
        journal = Journal(out / "journal.sqlite", org=ORG, endpoint=hub.endpoint)
        try:
            run = audit_org(client, ORG, parse_spec(SPEC), journal=journal, out=out, plots=False)
        finally:
            journal.close()
        heads = {state["id"]: state["branches"]["main"] for state in states}
        yield {audit.repo_id: audit for audit in run.audits}, heads


@pytest.mark.slow  # three zoo checkpoints audited with the linear probe and the membership attack
def test_hub_audit_downloads_the_sibling_reference_and_gives_the_encoder_cells(audited) -> None:
    audits, heads = audited
    audit = audits[f"{ORG}/c3-s0-gradascent-train"]
    assert audit.status == "audited", audit.reason
    [file] = audit.files
    assert file.result is not None
    cells = {c.metric: c for c in file.result.annotation.cells}
    for metric in ("lp_forget", "mia_auc"):
        reference = cells[metric].reference  # type: ignore[attr-defined]
        assert reference is not None and reference.arm == "retrain"
        assert (reference.repo, reference.filename) == (f"{ORG}/c3-s0-retrain", "model.safetensors")
        assert reference.revision == heads[f"{ORG}/c3-s0-retrain"]  # pinned to the commit it read
    record = file.result.annotation.model_dump(mode="json", exclude_none=True)
    probe = record["linear_probe"]
    lp = record["cells"][[c["metric"] for c in record["cells"]].index("lp_forget")]
    assert probe["nc_residual_pp"]["estimate"] == pytest.approx(100 * (lp["refit"] - lp["reference"]["value"]),
                                                                abs=1e-9)


@pytest.mark.slow
def test_a_missing_reference_repo_fails_that_repo_only(audited) -> None:
    audits, _ = audited
    orphan = audits[f"{ORG}/c3-s1-gradascent-train"]
    assert orphan.status == "failed" and not orphan.transient
    assert f"repo {ORG}/c3-s1-retrain at main" in orphan.reason and "is not on the Hub" in orphan.reason
    assert "\n" not in orphan.reason
    assert audits[f"{ORG}/c3-s0-retrain"].status == "audited"  # its own reference is itself: found
