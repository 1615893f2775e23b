"""Hub tooling over one ``huggingface_hub.HfApi`` that needs no torch: header-only census of an organisation, the
submission-pipeline check, publishing, and the pull-request bookkeeping. Auditing an organisation's repos and pushing
the annotations back is :mod:`bnconvention.hub_audit`, a layer above the audit.

The ``hub_scripts/`` entry points and ``bnconvention hub ...`` are thin wrappers over these functions:

>>> from bnconvention.hub import Journal, census_org, make_client  # doctest: +SKIP
>>> client = make_client(endpoint="http://127.0.0.1:8000", token_env="HF_TOKEN")  # doctest: +SKIP
>>> with Journal("crawl.sqlite", org="lab", endpoint=client.endpoint) as journal:  # doctest: +SKIP
...     run = census_org(client, "lab", journal=journal)  # streams: the entries are in the journal
...     head = census_head("lab", census_entries(journal), endpoint=client.endpoint)
...     write_org_census_entries(head, lambda: census_entries(journal), "out")
"""

from bnconvention._lazy import lazy_exports

# Lazy: ``import bnconvention.hub.client`` need not import the census, the validator or ``huggingface_hub``.
_EXPORTS: dict[str, str] = {
    "call_with_retry": "bnconvention.hub.retry",
    "census_summary": "bnconvention.hub.summaries",
    "OrgCensusRun": "bnconvention.hub.crawl",
    "census_entries": "bnconvention.hub.crawl",
    "census_head": "bnconvention.hub.summaries",
    "org_census_markdown": "bnconvention.hub.summaries",
    "OrgCensus": "bnconvention.hub.summaries",
    "CensusHead": "bnconvention.hub.summaries",
    "CensusRunSection": "bnconvention.hub.summaries",
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
    "publish_release": "bnconvention.hub.verified_publish",
    "push_to_hub": "bnconvention.hub.library_push",
    "save_with_library": "bnconvention.hub.library_push",
    "read_remote_header": "bnconvention.hub.headers",
    "RemoteHeader": "bnconvention.hub.headers",
    "REPO_CLASSES": "bnconvention.hub.classify",
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
    "CensusHead",
    "CensusRunSection",
    "CheckpointReport",
    "ExecutorKind",
    "HubClient",
    "HubPublish",
    "HubValidation",
    "Journal",
    "ListedRepo",
    "OrgCensus",
    "OrgCensusRun",
    "RemoteHeader",
    "RepoCensus",
    "RepoClass",
    "RetryPolicy",
    "Secret",
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
    "publish_release",
    "push_to_hub",
    "read_remote_header",
    "run_tasks",
    "save_with_library",
    "validate_hub",
    "write_org_census",
    "write_org_census_entries",
]
