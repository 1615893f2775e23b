"""Hub tooling over one ``huggingface_hub.HfApi``: header-only census of an organisation, audits of its BatchNorm
repos, annotations pushed back as pull requests, the submission-pipeline check, and publishing.

The ``hub_scripts/`` entry points and ``bnconvention hub ...`` are thin wrappers over these functions:

>>> from bnconvention.hub import Journal, census_org, make_client  # doctest: +SKIP
>>> client = make_client(endpoint="http://127.0.0.1:8000", token_env="HF_TOKEN")  # doctest: +SKIP
>>> with Journal("crawl.sqlite", org="lab", endpoint=client.endpoint) as journal:  # doctest: +SKIP
...     run = census_org(client, "lab", journal=journal)  # streams: the entries are in the journal
...     head = census_head("lab", census_entries(journal), endpoint=client.endpoint)
...     write_org_census_entries(head, lambda: census_entries(journal), "out")
"""

from bnconvention._lazy import lazy_exports

# Lazy: ``bnconvention hub census`` must not import the audit machinery (torch, plots) it never uses.
_EXPORTS: dict[str, str] = {
    "audit_org": "bnconvention.hub.audit",
    "audit_repo_task": "bnconvention.hub.audit",
    "AuditRun": "bnconvention.hub.audit",
    "AuditTask": "bnconvention.hub.audit",
    "call_with_retry": "bnconvention.hub.retry",
    "census_summary": "bnconvention.hub.summaries",
    "CensusRun": "bnconvention.hub.crawl",
    "census_entries": "bnconvention.hub.crawl",
    "census_head": "bnconvention.hub.summaries",
    "org_census_markdown": "bnconvention.hub.summaries",
    "OrgCensus": "bnconvention.hub.summaries",
    "census_org": "bnconvention.hub.crawl",
    "CheckpointReport": "bnconvention.hub.classify",
    "classify_repo": "bnconvention.hub.classify",
    "ExecutorKind": "bnconvention.hub.executors",
    "EXECUTORS": "bnconvention.hub.executors",
    "HubClient": "bnconvention.hub.client",
    "HubPublish": "bnconvention.hub.verified_publish",
    "HubValidation": "bnconvention.hub.validate",
    "is_retryable": "bnconvention.hub.retry",
    "iter_org_models": "bnconvention.hub.crawl",
    "Journal": "bnconvention.hub.journal",
    "list_org_models": "bnconvention.hub.crawl",
    "ListedRepo": "bnconvention.hub.crawl",
    "make_client": "bnconvention.hub.client",
    "plan_push": "bnconvention.hub.push",
    "publish_release": "bnconvention.hub.verified_publish",
    "push_to_hub": "bnconvention.hub.library_push",
    "save_with_library": "bnconvention.hub.library_push",
    "push_org": "bnconvention.hub.push",
    "PushOutcome": "bnconvention.hub.push",
    "PushPlan": "bnconvention.hub.push",
    "PushRun": "bnconvention.hub.push",
    "read_remote_header": "bnconvention.hub.headers",
    "RemoteHeader": "bnconvention.hub.headers",
    "REPO_CLASSES": "bnconvention.hub.classify",
    "RepoAudit": "bnconvention.hub.audit",
    "RepoCensus": "bnconvention.hub.classify",
    "RepoClass": "bnconvention.hub.classify",
    "RetryPolicy": "bnconvention.hub.retry",
    "run_tasks": "bnconvention.hub.executors",
    "Secret": "bnconvention.hub.client",
    "SPECULATIVE_BYTES": "bnconvention.hub.headers",
    "validate_hub": "bnconvention.hub.validate",
    "write_org_census": "bnconvention.hub.summaries",
    "write_org_census_entries": "bnconvention.hub.summaries",
}


# ``run_census`` was renamed ``census_org`` (beside ``audit_org`` and ``push_org``): ``bnconvention.run_census`` is the
# local-population census, a different function.
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, deprecated={"run_census": "census_org"}, namespace=globals())

__all__ = [
    "EXECUTORS",
    "REPO_CLASSES",
    "SPECULATIVE_BYTES",
    "AuditRun",
    "AuditTask",
    "CensusRun",
    "CheckpointReport",
    "ExecutorKind",
    "HubClient",
    "HubPublish",
    "HubValidation",
    "Journal",
    "ListedRepo",
    "OrgCensus",
    "PushOutcome",
    "PushPlan",
    "PushRun",
    "RemoteHeader",
    "RepoAudit",
    "RepoCensus",
    "RepoClass",
    "RetryPolicy",
    "Secret",
    "audit_org",
    "audit_repo_task",
    "call_with_retry",
    "census_entries",
    "census_head",
    "census_org",
    "census_summary",
    "classify_repo",
    "is_retryable",
    "iter_org_models",
    "list_org_models",
    "make_client",
    "org_census_markdown",
    "plan_push",
    "publish_release",
    "push_org",
    "push_to_hub",
    "read_remote_header",
    "run_tasks",
    "save_with_library",
    "validate_hub",
    "write_org_census",
    "write_org_census_entries",
]
