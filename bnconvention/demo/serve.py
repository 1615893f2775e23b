"""``bnconvention demo --serve``: the organisation as its authors published it, on a local Hub that stays up.

This is where the quickstarts start. The stages are the demo's first two, nothing of the auditor's side:

1. **zoo** — the digits zoo with the recorder observing training (reused when built);
2. **publish** — :data:`~bnconvention.demo.releases.DEMO_ORG` published afresh into ``OUT/serve/hub`` by its
   author, through huggingface_hub, exactly as ``bnconvention demo`` publishes it (:func:`publish_demo_org`).

Then the Hub keeps serving, with no census, audit or pull request yet: the quickstarts' commands do those. Every
start publishes the organisation again (about two seconds), so restarting is starting over; ``OUT/hub`` and
``OUT/crawl`` of a full ``bnconvention demo`` run are not touched.

>>> with serve_demo("demo-output", progress=False) as served:  # doctest: +SKIP
...     print(serve_text(served))                               # the export lines for the quickstarts
...     input("press Enter to stop")
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from bnconvention.demo.access import DemoAccess, Role, demo_hub
from bnconvention.demo.layout import DEFAULT_OUT
from bnconvention.demo.pipeline import Stages, demo_folder, hub_environment, prepare_models, publish_demo_org
from bnconvention.demo.releases import AUTHOR, DEMO_ORG, RELEASES

SERVE_STAGES = ("zoo", "publish")


@dataclass(frozen=True)
class ServedDemo:
    """The running Hub of ``demo --serve``: its endpoint, its users' tokens and the repos as published."""

    out: Path
    endpoint: str
    access: DemoAccess
    repos: tuple[str, ...]

    def environment(self, role: Role = "auditor") -> dict[str, str]:
        """What a shell needs to follow the quickstarts against this Hub, as the auditor or as the author: the
        variables huggingface_hub and every ``bnconvention`` command read (``HF_ENDPOINT``, ``HF_TOKEN``)."""
        return {"HF_ENDPOINT": self.endpoint, "HF_TOKEN": self.access.token(role)}


def serve_text(served: ServedDemo) -> str:
    """What ``demo --serve`` prints once the Hub is up: the endpoint and the lines to paste into another shell."""
    auditor, author = served.environment("auditor"), served.environment("author")
    return "\n".join([
        f"bnconvention demo --serve: organisation {DEMO_ORG} as its authors published it ({len(served.repos)} "
        f"model repos, no audit yet) on a local Hub at {served.endpoint}",
        "The quickstarts (docs/quickstart-*.md) start here. In another shell, paste:",
        "",
        f"  export HF_ENDPOINT={served.endpoint}",
        f"  export HF_TOKEN={auditor['HF_TOKEN']}    # as the auditor (reads, opens pull requests)",
        f"  export HF_TOKEN={author['HF_TOKEN']}    # as {AUTHOR}, a member of {DEMO_ORG} (may publish to it)",
        "",
        f"Serving until Ctrl-C. The author's token may do all the auditor's may, and publish (quickstart-author.md); "
        f"every start publishes {DEMO_ORG} afresh.",
    ]) + "\n"


@contextlib.contextmanager
def serve_demo(out: str | os.PathLike[str] = DEFAULT_OUT, *, zoo_dir: str | os.PathLike[str] | None = None,
               port: int = 0, fresh: bool = False, progress: bool = True, stage_lines: bool | None = None,
               stream: TextIO | None = None) -> Iterator[ServedDemo]:
    """Build (or reuse) the zoo in ``out``, publish the organisation into a fresh store and serve it on 127.0.0.1
    (``port`` 0: a free port) while the block runs. Stage lines as :func:`~bnconvention.demo.pipeline.run_demo`
    writes them (``stage_lines`` keeps them without progress bars: a redirected ``demo --serve`` says what it
    builds while it builds). Holds the demo folder's lock throughout: a ``bnconvention demo`` in the same ``out`` is
    refused until the block ends."""
    with demo_folder(out, zoo_dir=zoo_dir, fresh=fresh) as paths, hub_environment(paths.hf_home):
        stages = Stages(stream or sys.stderr, quiet=not (progress if stage_lines is None else stage_lines),
                        names=SERVE_STAGES)
        with stages.stage("zoo", f"digits zoo with the recorder observing training, and the timm and transformers "
                                 f"models ({paths.zoo})"):
            zoo, libraries, _ = prepare_models(paths, progress=progress)
        paths.forget_serve()
        access = DemoAccess.new()
        with demo_hub(paths.serve_hub, access, port=port) as hub:
            with stages.stage("publish", f"{len(RELEASES)} releases of {DEMO_ORG} on a local Hub at {hub.endpoint}"):
                published = publish_demo_org(hub, (zoo, libraries), paths.serve_releases, access.author_token,
                                             progress=progress)
            yield ServedDemo(out=paths.root, endpoint=hub.endpoint, access=access,
                             repos=tuple(p.repo_id for p in published))


__all__ = ["SERVE_STAGES", "ServedDemo", "serve_demo", "serve_text"]
