"""A local Hugging Face Hub-compatible HTTP server for tests, the offline demo and users' own pipelines.

Drive it with the real ``huggingface_hub`` client through one ``HfApi(endpoint=hub.endpoint, token=...)``:

    from bnconvention.hubserver import LocalHub
    with LocalHub(tokens={"secret": "alice"}, orgs={"lab": ["alice"]}) as hub:
        hub.store.commit("lab/model", files={"README.md": b"---\\nlicense: mit\\n---\\n"})   # fast seeding
        api = HfApi(endpoint=hub.endpoint, token="secret")
        api.model_info("lab/model")

What it serves, the fault kinds and the counters are described in ``server``, ``faults`` and ``stats``; uploads
are ``regular`` by default, and go through the classic LFS batch API with ``LocalHub(lfs=True)`` (``lfs_endpoints``),
as ``datasets.Dataset.push_to_hub`` needs.
"""

from bnconvention.hubserver.auth import AccessControl
from bnconvention.hubserver.faults import FaultDecision, FaultInjector, FaultKind, FaultRule
from bnconvention.hubserver.repos import Commit, ResolvedRevision
from bnconvention.hubserver.server import LocalHub
from bnconvention.hubserver.stats import RequestRecord, RequestStats
from bnconvention.hubserver.storage import CommitResult, HubStore
from bnconvention.hubserver.trees import AddFile, AddLfsFile, DeleteFile, DeleteFolder, FileEntry, Operation

__all__ = [
    "AccessControl",
    "AddFile",
    "AddLfsFile",
    "Commit",
    "CommitResult",
    "DeleteFile",
    "DeleteFolder",
    "FaultDecision",
    "FaultInjector",
    "FaultKind",
    "FaultRule",
    "FileEntry",
    "HubStore",
    "LocalHub",
    "Operation",
    "RequestRecord",
    "RequestStats",
    "ResolvedRevision",
]
