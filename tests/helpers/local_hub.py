"""A local Hub for the publishing tests: one user (``alice``) in one organisation (``lab``), a token the test names,
huggingface_hub's cache redirected into the test's temporary folder (the real client never writes ~/.cache)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest


@contextlib.contextmanager
def lab_hub(tmp_path_factory: pytest.TempPathFactory, *, token: str) -> Iterator[Any]:
    """A running ``LocalHub`` where ``token`` is alice's, a member of ``lab``; stopped on exit."""
    from huggingface_hub import constants

    from bnconvention.hubserver import LocalHub

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(constants, "HF_HUB_CACHE", str(tmp_path_factory.mktemp("hf-cache")))
        with LocalHub(tmp_path_factory.mktemp("hub"), tokens={token: "alice"}, orgs={"lab": ["alice"]},
                      durable=False) as server:
            yield server
