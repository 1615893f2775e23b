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

from bnconvention.demo.access import DemoAccess
from bnconvention.demo.layout import DEFAULT_OUT, DemoPaths
from bnconvention.demo.pipeline import DemoResult, headline, run_demo
from bnconvention.demo.releases import AUDITOR, AUTHOR, DEMO_ORG, RELEASES, Release
from bnconvention.demo.serve import ServedDemo, serve_demo, serve_text
from bnconvention.demo.spec import DEMO_SPEC, demo_spec
from bnconvention.demo.summary import flagged, summary_text

__all__ = [
    "AUDITOR",
    "AUTHOR",
    "DEFAULT_OUT",
    "DEMO_ORG",
    "DEMO_SPEC",
    "RELEASES",
    "DemoAccess",
    "DemoPaths",
    "DemoResult",
    "Release",
    "ServedDemo",
    "demo_spec",
    "flagged",
    "headline",
    "run_demo",
    "serve_demo",
    "serve_text",
    "summary_text",
]
