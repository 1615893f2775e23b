"""Session-wide test settings. Fixtures shared by several test modules live here."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

# Before anything imports huggingface_hub or torch: no telemetry, no user cache, a bounded thread count.
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.pop("HF_HUB_OFFLINE", None)  # it would block requests to the local test server too
os.environ.setdefault("OMP_NUM_THREADS", "2")
# huggingface_hub (and hf_xet's logs) write under HF_HOME: never the user's ~/.cache during tests.
os.environ["HF_HOME"] = tempfile.mkdtemp(prefix="bnc-test-hf-home-")
atexit.register(shutil.rmtree, os.environ["HF_HOME"], ignore_errors=True)
os.environ["HF_HUB_DISABLE_XET"] = "1"

import pytest  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(scope="module", autouse=True)
def _private_hf_cache(tmp_path_factory: pytest.TempPathFactory):
    """Each test module gets its own huggingface_hub file cache: local Hub servers of different modules reuse repo
    ids, and a cached download from one must never answer another. Xet stays off: the local Hub answers regular
    uploads, and importing ``hf_xet`` would start its logs."""
    from huggingface_hub import constants

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(constants, "HF_HUB_CACHE", str(tmp_path_factory.mktemp("hf-cache")))
        patch.setattr(constants, "HF_HUB_DISABLE_XET", True)
        yield


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture(scope="session")
def zoo():  # -> bnconvention.zoo.ZooManifest
    """The digits zoo (seed 0), built once into ``<repo>/.cache/zoo-<code version>-seed0`` and reused by every test
    session and every parallel worker (``build_zoo`` holds a file lock while it builds, and reuses an intact build
    whose manifest matches the code)."""
    from bnconvention.zoo import build_zoo, default_zoo_dir

    return build_zoo(default_zoo_dir(REPO_ROOT / ".cache", seed=0), seed=0, progress=False)


@pytest.fixture(scope="session")
def real_org(tmp_path_factory: pytest.TempPathFactory):  # -> helpers.real_org.RealOrg
    """A real organisation (``helpers.real_org``: timm, transformers, a pickle-only repo, a ``datasets`` dataset
    repo) published once per session with the libraries' own code on a local Hub that serves LFS uploads. Read
    it; tests that write (pull requests, pushes) use ``real_org_clone``, so every test sees it as published."""
    from helpers.real_org import HUB_ORGS, HUB_TOKENS, publish_real_org

    from bnconvention.hubserver import LocalHub

    with LocalHub(tmp_path_factory.mktemp("real-org-hub"), tokens=HUB_TOKENS, orgs=HUB_ORGS, durable=False,
                  lfs=True) as hub:
        yield publish_real_org(hub)


@pytest.fixture
def real_org_clone(real_org, tmp_path: Path):  # -> helpers.real_org.RealOrg
    """The real organisation on a hub of its own over a hard-linked copy of the store: write to it freely."""
    with real_org.clone(tmp_path / "real-org-clone") as clone:
        yield clone


@pytest.fixture(scope="session")
def tiny_population():  # -> bnconvention.zoo.population_manifest.PopulationManifest
    """A tiny configuration of the population (``TINY_CONFIG``, 14 checkpoints), built once into
    ``<repo>/.cache/population-<code+config>-seed0`` and reused across sessions like the zoo."""
    from bnconvention.zoo.population_build import build_population, default_population_dir
    from bnconvention.zoo.population_plan import TINY_CONFIG

    return build_population(default_population_dir(REPO_ROOT / ".cache", seed=0, config=TINY_CONFIG),
                            config=TINY_CONFIG, seed=0, progress=False)


@pytest.fixture(scope="session")
def tiny_quantized_population():  # -> bnconvention.zoo.population_manifest.PopulationManifest
    """``TINY_CONFIG`` built with activation scales beside every checkpoint (``zoo build --population
    --quantized``, minmax, 256 records), once into ``<repo>/.cache/population-<code+config>-seed0-quantized`` and
    reused across sessions."""
    from bnconvention.zoo.population_build import default_population_dir
    from bnconvention.zoo.population_plan import TINY_CONFIG
    from bnconvention.zoo.population_quantized import build_quantized_population

    folder = default_population_dir(REPO_ROOT / ".cache", seed=0, config=TINY_CONFIG)
    return build_quantized_population(folder.with_name(folder.name + "-quantized"), config=TINY_CONFIG, seed=0,
                                      progress=False)


@pytest.fixture(scope="session")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """An elliptic-curve key pair (private PEM, public PEM) for signing tests, made once per session."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    folder = tmp_path_factory.mktemp("keys")
    key = ec.generate_private_key(ec.SECP256R1())
    private, public = folder / "key.pem", folder / "key.pub"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public
