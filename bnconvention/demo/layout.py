"""Where the demo keeps things: one output folder (default ``demo-output/``) that it owns and can reuse.

Layout of ``OUT``::

    .bnconvention-demo      marks the folder as the demo's (a non-empty folder without it is never touched)
    .bnconvention-demo.lock held by the running demo (a second demo in the same folder is refused)
    zoo/                    the digits zoo, built with the recorder observing every variant's training
    zoo-libraries/          the timm and transformers models, trained once (beside the zoo, wherever it is)
    population/             the structured population (families x variants x removals x seeds, controls, twins)
    population-census/      its census: journal/ (resumable), checkpoints/, census.json, census.md, census.html
    releases/<name>/        the authors' release folders, as they were published
    hub/                    the local Hub's store (repos, commits, pull requests)
    hub-published.json      written once the organisation is fully published; a rerun reuses the store
    crawl/                  the auditor's crawl: journal.sqlite, census, audits/<repo>/..., population, validation
    report/                 the HTML report (index.html, population.html, plots/, annotations/)
    serve/                  ``demo --serve``: hub/ (the store it serves) and releases/, published afresh at each
                            start (the crawl above and its hub/ are not touched)
    hf-home/                HF_HOME for this run: huggingface_hub never writes to ~/.cache
    summary.txt             the summary printed at the end
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeAlias

from bnconvention.errors import UsageError

# The population's sizes (``--population-size``; docs/population.md): here beside the folders, so that the CLI builds
# its parser from this module alone, without the population stage's zoo and census.
PopulationSize: TypeAlias = Literal["full", "tiny"]
POPULATION_SIZES: tuple[PopulationSize, ...] = ("full", "tiny")

MARKER = ".bnconvention-demo"
DEFAULT_OUT = "demo-output"


@dataclass(frozen=True)
class DemoPaths:
    root: Path
    zoo: Path
    population: Path

    @classmethod
    def under(cls, root: str | os.PathLike[str], *, zoo: str | os.PathLike[str] | None = None,
              population: str | os.PathLike[str] | None = None) -> DemoPaths:
        base = Path(root).resolve()
        return cls(root=base, zoo=Path(zoo).resolve() if zoo is not None else base / "zoo",
                   population=Path(population).resolve() if population is not None else base / "population")

    @property
    def population_census(self) -> Path:
        """The population's census: journal, replicates, per-checkpoint outputs, census.json/md/html."""
        return self.root / "population-census"

    @property
    def marker(self) -> Path:
        return self.root / MARKER

    @property
    def lock(self) -> Path:
        """Held while a demo runs in this folder: a second one is refused instead of racing the first."""
        return self.root / ".bnconvention-demo.lock"

    @property
    def library_models(self) -> Path:
        """The trained timm and transformers models (:mod:`bnconvention.demo.library_models`), beside the zoo."""
        return self.zoo.with_name(f"{self.zoo.name}-libraries")

    @property
    def releases(self) -> Path:
        return self.root / "releases"

    @property
    def hub(self) -> Path:
        return self.root / "hub"

    @property
    def published(self) -> Path:
        return self.root / "hub-published.json"

    @property
    def crawl(self) -> Path:
        return self.root / "crawl"

    @property
    def journal(self) -> Path:
        return self.crawl / "journal.sqlite"

    @property
    def report(self) -> Path:
        return self.root / "report"

    @property
    def serve(self) -> Path:
        """``demo --serve``'s own store and release folders, rebuilt at every start."""
        return self.root / "serve"

    @property
    def serve_hub(self) -> Path:
        return self.serve / "hub"

    @property
    def serve_releases(self) -> Path:
        return self.serve / "releases"

    @property
    def hf_home(self) -> Path:
        return self.root / "hf-home"

    @property
    def summary(self) -> Path:
        return self.root / "summary.txt"

    def claim(self) -> None:
        """Create the folder (or accept it as the demo's); refuse a non-empty folder the demo did not create."""
        if self.root.exists() and not self.root.is_dir():
            raise UsageError(f"demo output {self.root} exists and is not a folder; choose another --out")
        if self.root.is_dir() and any(self.root.iterdir()) and not self.marker.is_file():
            raise UsageError(f"demo output {self.root} is a non-empty folder the demo did not create (no {MARKER}); "
                             "choose an empty or new --out")
        self.root.mkdir(parents=True, exist_ok=True)
        self.marker.write_text("bnconvention demo output; `bnconvention demo --fresh` rebuilds it\n", "utf-8")

    def forget_hub(self) -> None:
        """Drop the published organisation and everything derived from it (the crawl, the report)."""
        for path in (self.published, self.hub, self.crawl, self.releases, self.report):
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()

    def forget_serve(self) -> None:
        """Drop what the last ``demo --serve`` published (each start publishes the organisation afresh)."""
        if self.serve.is_dir():
            shutil.rmtree(self.serve)
        elif self.serve.exists():
            self.serve.unlink()

    def wipe(self) -> None:
        """``--fresh``: remove everything the demo wrote (the zoo too, when it lives inside the output folder)."""
        self.forget_hub()
        self.forget_serve()
        for path in (self.hf_home, self.summary):
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
        if self.population_census.is_dir():
            shutil.rmtree(self.population_census)
        for cache in (self.zoo, self.library_models, self.population):
            if cache.parent == self.root and cache.is_dir():
                shutil.rmtree(cache)


__all__ = ["DEFAULT_OUT", "MARKER", "DemoPaths"]
