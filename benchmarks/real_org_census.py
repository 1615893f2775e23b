"""Census bytes per repo on the real test organisation (``tests/helpers/real_org.py``: timm, transformers, a
pickle-only repo, published by the libraries' own code on the local Hub).

    PYTHONPATH=tests .venv/bin/python benchmarks/real_org_census.py

Per repo: its census class, the bytes the server sent for it (body bytes, the server's own counters) and the
requests, against the size of its weights (every ``.safetensors`` file of the repo, shards included). Needs the
extras timm, transformers and datasets (installed by the README's commands).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

# the local Hub serves the LFS upload path, not Xet; read by huggingface_hub at import
os.environ["HF_HUB_DISABLE_XET"] = "1"


def main() -> int:
    from helpers.real_org import HUB_ORGS, HUB_TOKENS, ORG, publish_real_org

    from bnconvention.hub import Journal, census_entries, census_org, make_client
    from bnconvention.hubserver import LocalHub

    with tempfile.TemporaryDirectory() as tmp, LocalHub(Path(tmp) / "hub", tokens=HUB_TOKENS, orgs=HUB_ORGS,
                                                        durable=False, lfs=True) as hub:
        org = publish_real_org(hub)
        client = make_client(endpoint=hub.endpoint, token=org.auditor_token)
        hub.reset_stats()
        with Journal(Path(tmp) / "journal.sqlite", org=ORG, endpoint=hub.endpoint) as journal:
            census_org(client, ORG, journal=journal)
            repos = list(census_entries(journal))  # a dozen real releases
        counted = {r.repo_id: (hub.bytes_sent(repo_id=r.repo_id), len([s for s in hub.stats if s.repo_id == r.repo_id]))
                   for r in repos}  # before the listings below, which the server counts too
        print(f"{'repo':<34} {'class':<22} {'weights B':>10} {'census B':>9} {'req':>4} {'fraction':>9}")
        for repo in repos:
            files = org.api().list_repo_files(repo.repo_id)
            weights = sum(len(hub.store.read_file(repo.repo_id, f)) for f in files if f.endswith(".safetensors"))
            sent, requests = counted[repo.repo_id]
            fraction = f"{sent / weights:.2%}" if weights else "-"
            print(f"{repo.repo_id.split('/')[1]:<34} {repo.status:<22} {weights:>10} {sent:>9} {requests:>4} "
                  f"{fraction:>9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
