"""What every ``bnconvention hub`` subcommand shares: the connection options, the client they build, and the guard
that turns a Hub client failure into one token-scrubbed error."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from bnconvention.cli.progress import DEFAULT_HELP, add_progress_option
from bnconvention.errors import BnConventionError, HubError, UsageError
from bnconvention.hub.client import make_client
from bnconvention.hub.retry import RetryPolicy, describe, network_error, show_retries

if TYPE_CHECKING:
    from bnconvention.hub.client import HubClient


def add_hub_options(parser: argparse.ArgumentParser, *, journal: bool = True,
                    progress_help: str = DEFAULT_HELP) -> None:
    parser.add_argument("--endpoint", metavar="URL", help="Hub endpoint (default: HF_ENDPOINT or huggingface.co)")
    parser.add_argument("--token-env", default="HF_TOKEN", metavar="VAR",
                        help="environment variable holding the token (default: HF_TOKEN); unset: anonymous")
    parser.add_argument("--retries", type=int, default=5, metavar="N",
                        help="tries per Hub request on 408/429/5xx, timeouts and dropped connections (default: 5)")
    parser.add_argument("--retry-delay", type=float, default=0.5, metavar="SECONDS",
                        help="first backoff delay, doubled per retry up to 8 s (default: 0.5)")
    parser.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                        help="time bound of each Hub request in all (listing pages, repo info, header ranges, small "
                             "files), and of each silence while huggingface_hub downloads a file (default: 60)")
    parser.add_argument("--max-pages", type=int, default=1000, metavar="N",
                        help="page budget of one listing: a census stops there and says so (default: 1000)")
    parser.add_argument("--max-repos", type=int, default=100_000, metavar="N",
                        help="repo budget of one listing: a census stops there and says so (default: 100000)")
    add_progress_option(parser, help=progress_help)
    if journal:
        parser.add_argument("--out", type=Path, metavar="DIR", help="output folder (default: hub-ORG)")
        parser.add_argument("--journal", type=Path, metavar="PATH",
                            help="crawl journal (default: OUT/journal.sqlite); a rerun resumes from it")


def hub_client(args: argparse.Namespace) -> HubClient:
    for wrong, message in ((args.retries < 1, f"--retries must be at least 1, got {args.retries}"),
                           (args.max_pages < 1, f"--max-pages must be at least 1, got {args.max_pages}"),
                           (args.max_repos < 1, f"--max-repos must be at least 1, got {args.max_repos}"),
                           (args.retry_delay < 0, f"--retry-delay must not be negative, got {args.retry_delay:g}"),
                           (args.timeout <= 0, f"--timeout must be positive, got {args.timeout:g}")):
        if wrong:
            raise UsageError(message)
    show_retries()
    return make_client(endpoint=args.endpoint, token_env=args.token_env, timeout_s=args.timeout,
                       max_pages=args.max_pages, max_repos=args.max_repos,
                       retry=RetryPolicy(attempts=args.retries, base_delay=args.retry_delay))


def guarded(client: HubClient, fn: Callable[[], int]) -> int:
    """Run ``fn``; a failure of the Hub client becomes one error whose message is scrubbed of the token: a network
    failure (refused, dropped, cut short, timed out: httpx2's transport errors are not ``OSError``s) one
    :class:`HubNetworkError` naming the endpoint, an HTTP failure one :class:`HubError`."""
    try:
        return int(fn())
    except Exception as exc:
        network = network_error(exc, endpoint=client.endpoint, scrub=client.scrub)
        if network is not None:
            raise network from None
        if isinstance(exc, BnConventionError) or not isinstance(exc, OSError):
            raise
        raise HubError(client.scrub(describe(exc))) from None  # huggingface_hub's HTTP errors are OSErrors


__all__ = ["add_hub_options", "guarded", "hub_client"]
