"""``bnconvention hubserver``: run the local Hub-compatible server until interrupted (offline pipelines, demos)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import stat
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from bnconvention.cli.commands import summary
from bnconvention.errors import UsageError
from bnconvention.formats.text import plural
from bnconvention.hubserver import FaultRule, LocalHub

TOKENS_ENV = "BNC_HUBSERVER_TOKENS"  # NAME=TOKEN entries, separated by commas or spaces
MAX_TOKEN_FILE_BYTES = 1_000_000


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "hubserver",
        help=summary("hubserver"),
        description=(
            "Serve repos stored under --root over the Hub HTTP API that huggingface_hub speaks (listing, model "
            "info, downloads with ranges, uploads as regular files or with --lfs through the LFS batch API, pull "
            "requests, discussions, refs). Prints the "
            "endpoint, then serves until Ctrl-C or SIGTERM. Point clients at it with HfApi(endpoint=...) or "
            "HF_ENDPOINT (set before huggingface_hub is imported). Tokens given here are never printed. Tokens "
            "come from --token-file (one NAME=TOKEN a line; refused when other users may read or write it), from "
            f"the environment variable {TOKENS_ENV} (NAME=TOKEN entries separated by commas or spaces) and from "
            "--token; a --token argument is visible to every local user (ps, /proc), so prefer the other two."
        ),
        epilog=(
            "examples:\n"
            "  bnconvention hubserver --root ./hub --token-file tokens.txt --org lab=alice   # chmod 600 tokens.txt\n"
            f"  {TOKENS_ENV}=alice=secret-token bnconvention hubserver --root ./hub --org lab=alice\n"
            "  bnconvention hubserver --root ./hub --port 8900 --fault kind=status,status=503,path=/resolve/,"
            "probability=0.2\n"
            "  HF_ENDPOINT=http://127.0.0.1:8900 python my_pipeline.py\n"
            "  bnconvention hubserver --root ./hub --port 8900 --token alice=secret-token --lfs   # then:\n"
            "  HF_ENDPOINT=http://127.0.0.1:8900 HF_HUB_DISABLE_XET=1 python push_my_dataset.py\n\n"
            "Exit codes: 0 stopped by Ctrl-C or SIGTERM, 1 the server could not start (e.g. the port is in use), "
            "2 bad\n"
            "usage (a malformed --token, --token-file, --org or --fault; a token file others may read; a --root "
            "that is neither empty nor a hub store)."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--root", required=True, metavar="DIR",
                        help="store directory (created if missing; must be empty or an existing hub store)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, metavar="N", help="port (default: 0 = a free port)")
    parser.add_argument("--token", action="append", default=[], metavar="NAME=TOKEN",
                        help="accept TOKEN as user NAME (repeatable); writes need a token. Visible to every local "
                             f"user in ps: prefer --token-file or {TOKENS_ENV}")
    parser.add_argument("--token-file", action="append", default=[], type=Path, metavar="PATH",
                        help="read NAME=TOKEN lines from PATH (repeatable; blank lines and # comments skipped); the "
                             "file must not be readable or writable by other users (chmod 600)")
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


def token_file_pairs(path: Path) -> list[tuple[str, str]]:
    """The ``(name, token)`` pairs of a token file: one ``NAME=TOKEN`` a line, blank lines and ``#`` comments
    skipped. Refused (:class:`UsageError`, the token never echoed) when the file is missing, not a regular file, or
    readable or writable by users other than its owner and group: a token file others can read leaks what
    ``--token-file`` exists to hide."""
    try:
        st = path.stat()
    except OSError as exc:
        raise UsageError(f"--token-file {path}: cannot be read ({exc.strerror or exc})") from exc
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"--token-file {path}: not a regular file")
    if os.name == "posix" and st.st_mode & (stat.S_IROTH | stat.S_IWOTH):
        raise UsageError(f"--token-file {path}: other users may read or write it (mode {stat.S_IMODE(st.st_mode):o}); "
                         f"restrict it first: chmod 600 {path}")
    try:
        text = path.read_bytes()[: MAX_TOKEN_FILE_BYTES + 1].decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--token-file {path}: cannot be read as UTF-8 text") from exc
    if len(text) > MAX_TOKEN_FILE_BYTES:
        raise UsageError(f"--token-file {path}: over {MAX_TOKEN_FILE_BYTES:,} bytes; one NAME=TOKEN a line")
    lines = [(number, line.strip()) for number, line in enumerate(text.splitlines(), 1)]
    pairs = []
    for number, line in lines:
        if line and not line.startswith("#"):
            pairs += _pairs([line], option=f"--token-file {path} line {number}")
    return pairs


def env_pairs() -> list[tuple[str, str]]:
    """The ``(name, token)`` pairs of :data:`TOKENS_ENV` (``NAME=TOKEN`` entries separated by commas or spaces)."""
    value = os.environ.get(TOKENS_ENV, "")
    return _pairs([entry for entry in value.replace(",", " ").split() if entry], option=TOKENS_ENV)


def gather_tokens(args: argparse.Namespace) -> dict[str, str]:
    """token -> user name from every source: the token files, :data:`TOKENS_ENV`, ``--token``. A token given for two
    users is refused (without echoing it)."""
    pairs = [pair for path in args.token_file for pair in token_file_pairs(path)]
    pairs += env_pairs() + _pairs(args.token, option="--token")
    tokens: dict[str, str] = {}
    for name, token in pairs:
        if tokens.setdefault(token, name) != name:
            raise UsageError(f"one token is given for two users ({tokens[token]} and {name}); give each its own")
    return tokens


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
    tokens = gather_tokens(args)
    if args.token:
        print(f"warning: --token puts a token on the command line, where every local user can read it (ps); pass "
              f"--token-file or {TOKENS_ENV} instead", file=sys.stderr, flush=True)
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
