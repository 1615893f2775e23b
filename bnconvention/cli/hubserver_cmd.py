"""``bnconvention hubserver``: run the local Hub-compatible server until interrupted (offline pipelines, demos)."""

from __future__ import annotations

# The command's machinery (and torch) is imported when the command runs, not when the parser is built: every --help
# and every other command stays light (cli/main.py).
import argparse
import logging
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType

from bnconvention.errors import UsageError
from bnconvention.formats.text import plural


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "hubserver",
        help="serve a local Hugging Face Hub-compatible API from a directory",
        description=(
            "Serve repos stored under --root over the Hub HTTP API that huggingface_hub speaks (listing, model "
            "info, downloads with ranges, uploads as regular files or with --lfs through the LFS batch API, pull "
            "requests, discussions, refs). Prints the "
            "endpoint, then serves until Ctrl-C or SIGTERM. Point clients at it with HfApi(endpoint=...) or "
            "HF_ENDPOINT (set before huggingface_hub is imported). Tokens given here are never printed."
        ),
        epilog=(
            "examples:\n"
            "  bnconvention hubserver --root ./hub --token alice=secret-token --org lab=alice\n"
            "  bnconvention hubserver --root ./hub --port 8900 --fault kind=status,status=503,path=/resolve/,"
            "probability=0.2\n"
            "  HF_ENDPOINT=http://127.0.0.1:8900 python my_pipeline.py\n"
            "  bnconvention hubserver --root ./hub --port 8900 --token alice=secret-token --lfs   # then:\n"
            "  HF_ENDPOINT=http://127.0.0.1:8900 HF_HUB_DISABLE_XET=1 python push_my_dataset.py\n\n"
            "Exit codes: 0 stopped by Ctrl-C or SIGTERM, 1 the server could not start (e.g. the port is in use), "
            "2 bad\n"
            "usage (a malformed --token, --org or --fault; a --root that is neither empty nor a hub store)."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--root", required=True, metavar="DIR",
                        help="store directory (created if missing; must be empty or an existing hub store)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, metavar="N", help="port (default: 0 = a free port)")
    parser.add_argument("--token", action="append", default=[], metavar="NAME=TOKEN",
                        help="accept TOKEN as user NAME (repeatable); writes need a token")
    parser.add_argument("--org", action="append", default=[], metavar="ORG=USER[,USER...]",
                        help="make users members of organisation ORG (repeatable)")
    parser.add_argument("--page-size", type=int, default=50, metavar="N",
                        help="repos per listing page (default: 50)")
    parser.add_argument("--fault", action="append", default=[], metavar="SPEC",
                        help="inject a fault, e.g. kind=status,status=429,path=/api/models,probability=0.1 "
                             "(kinds: latency, status, drop, truncate, trickle, endless; keys: kind, path, method, "
                             "probability, count, status, latency_s, retry_after, error_code, truncate_fraction, "
                             "rate_bps)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the fault-injection RNG (default: 0)")
    parser.add_argument("--lfs", action="store_true",
                        help="answer uploads as the Hub does (LFS for binary, large and .gitattributes-tracked "
                             "files, through the classic LFS batch API), as datasets' push_to_hub needs; clients "
                             "must then set HF_HUB_DISABLE_XET=1 (default: every upload regular, any client)")
    parser.set_defaults(func=run)


def _pairs(values: list[str], *, option: str) -> list[tuple[str, str]]:
    pairs = []
    for value in values:
        left, sep, right = value.partition("=")
        if not sep or not left or not right:
            # never echo the value: it may be a token
            raise UsageError(f"{option} expects NAME=VALUE with both parts non-empty")
        pairs.append((left, right))
    return pairs


def _log_to_stderr() -> Callable[[], None]:
    """Show the server's log lines (a client that hung up, an unhandled error) on stderr while it serves; returns
    the function that stops it."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.INFO)
    handler.setFormatter(logging.Formatter("%(message)s"))
    server_logger = logging.getLogger("bnconvention.hubserver")
    level = server_logger.level
    server_logger.addHandler(handler)
    server_logger.setLevel(logging.INFO)

    def undo() -> None:
        server_logger.removeHandler(handler)
        server_logger.setLevel(level)

    return undo


def run(args: argparse.Namespace) -> int:
    from bnconvention.hubserver import FaultRule, LocalHub

    tokens = {token: name for name, token in _pairs(args.token, option="--token")}
    orgs = {org: [m for m in members.split(",") if m] for org, members in _pairs(args.org, option="--org")}
    faults = [FaultRule.from_spec(spec) for spec in args.fault]
    hub = LocalHub(args.root, host=args.host, port=args.port, tokens=tokens, orgs=orgs, faults=faults,
                   seed=args.seed, page_size=args.page_size, lfs=args.lfs)
    hub.start()
    stop_logging = _log_to_stderr()
    def announce() -> None:
        print(f"endpoint: {hub.endpoint}", flush=True)
        print(f"serving {args.root} with {plural(len(tokens), 'token')}; Ctrl-C to stop", file=sys.stderr,
              flush=True)

    try:
        # announced inside the wait: a Ctrl-C that comes as soon as the endpoint is read still stops cleanly
        wait_until_stopped(announce=announce)
    finally:
        hub.stop()
        stop_logging()
    print("stopped", file=sys.stderr, flush=True)
    return 0


def wait_until_stopped(*, poll_s: float = 0.5, announce: Callable[[], None] | None = None) -> None:
    """Block until Ctrl-C (SIGINT) or SIGTERM: the normal end of a server command, so it returns rather than
    raising. ``announce`` runs once the signals are handled (a client told the endpoint may stop the server at
    once). The previous SIGTERM handler comes back afterwards."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = signal.signal(signal.SIGTERM, on_signal)
    try:
        if announce is not None:
            announce()
        while not stop.wait(poll_s):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
