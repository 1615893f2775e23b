"""The demo: the whole story of the BatchNorm illusion on one machine, offline (``bnconvention demo``).

It builds the digits zoo with the recorder observing training, publishes it as a Hub organisation on a local
Hub-compatible server the way real authors would (declared and stamped releases, undeclared ones, one whose
declaration no longer matches its weights, GroupNorm twins, a repo without weights), then crawls it as an auditor:
census from headers, audits at bit-identical weights, annotation pull requests, validation, and an HTML report.
:func:`serve_demo` (``bnconvention demo --serve``) publishes the same organisation and keeps the local Hub up
without crawling it: the starting point of the quickstarts.

>>> from bnconvention.demo import run_demo, summary_text  # doctest: +SKIP
>>> result = run_demo("demo-output")                       # doctest: +SKIP
>>> print(summary_text(result))                            # doctest: +SKIP
"""

from bnconvention._lazy import lazy_exports

# Lazy: the CLI builds its parser from bnconvention.demo.population_stage without importing the demo machinery
# (torch, the Hub client, the audit).
_EXPORTS: dict[str, str] = {
    "AUDITOR": "bnconvention.demo.releases",
    "AUTHOR": "bnconvention.demo.releases",
    "DEFAULT_OUT": "bnconvention.demo.layout",
    "DEMO_ORG": "bnconvention.demo.releases",
    "DEMO_SPEC": "bnconvention.demo.spec",
    "demo_spec": "bnconvention.demo.spec",
    "DemoAccess": "bnconvention.demo.access",
    "DemoPaths": "bnconvention.demo.layout",
    "DemoResult": "bnconvention.demo.pipeline",
    "flagged": "bnconvention.demo.summary",
    "headline_release": "bnconvention.demo.pipeline",
    "DemoRelease": "bnconvention.demo.releases",
    "RELEASES": "bnconvention.demo.releases",
    "run_demo": "bnconvention.demo.pipeline",
    "serve_demo": "bnconvention.demo.serve",
    "serve_text": "bnconvention.demo.serve",
    "ServedDemo": "bnconvention.demo.serve",
    "summary_text": "bnconvention.demo.summary",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, namespace=globals())

__all__ = [
    "AUDITOR",
    "AUTHOR",
    "DEFAULT_OUT",
    "DEMO_ORG",
    "DEMO_SPEC",
    "RELEASES",
    "DemoAccess",
    "DemoPaths",
    "DemoRelease",
    "DemoResult",
    "ServedDemo",
    "demo_spec",
    "flagged",
    "headline_release",
    "run_demo",
    "serve_demo",
    "serve_text",
    "summary_text",
]
