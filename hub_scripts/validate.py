"""``python hub_scripts/validate.py ...``: the same as ``bnconvention hub validate ...`` (see ``--help``).

A thin entry point: all the work is in :mod:`bnconvention.hub`; the library never imports this folder.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from bnconvention.cli.main import main as cli_main

    return cli_main(["hub", "validate", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
