"""``bnconvention publish``: stamp a release folder if needed, validate it, and upload it to the Hub."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from bnconvention.authoring.publish import PublishResult, publish
from bnconvention.cli.commands import summary
from bnconvention.errors import UsageError

EPILOG = """\
examples:
  bnconvention publish release/ --repo my-org/resnet18-unlearned --record record.json
  bnconvention publish release/ --repo my-org/resnet18-unlearned --create-pr --token-env HF_WRITE_TOKEN
  bnconvention publish release/ --repo my-org/model --dry-run        # stamp and validate, upload nothing

Steps: every weights file gets its record (a --record whose digests match it, else the one already stamped, else
the card's), the weights and the card are stamped where they lack it, the folder is validated (errors stop the
publish; warnings are shown), then the folder is uploaded with huggingface_hub (create_repo + upload_folder, or a
pull request with --create-pr). Running it again after an interruption is safe: stamps are not repeated and the
client re-sends only files the Hub lacks. The token is read from the environment and never printed.

Exit codes: 0 published (with --dry-run: stamped and validated), 1 the folder does not validate (nothing uploaded)
or the upload failed (run it again), 2 unreadable input or bad usage (e.g. --repo without its owner, --token-env
naming an unset variable), 130 interrupted (run it again to resume).
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "publish",
        help=summary("publish"),
        description="Stamp a release folder's weights and card with their declarations where needed, validate "
                    "it, and upload it to a Hub model repository.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("directory", type=Path, metavar="DIR", help="the release folder (weights and README.md)")
    parser.add_argument("--repo", required=True, metavar="ORG/NAME", help="the model repository on the Hub")
    parser.add_argument("--record", action="append", default=[], type=Path, metavar="RECORD.json",
                        help="a declaration to stamp into the weights file it describes (repeatable)")
    add_upload_options(parser, dry_run="stamp and validate only; upload nothing")
    parser.set_defaults(func=run)


def add_upload_options(parser: argparse.ArgumentParser, *, dry_run: str) -> None:
    """The options of a command that commits to the Hub (``publish``, ``push-to-hub``)."""
    parser.add_argument("--create-pr", action="store_true", help="open a pull request instead of committing to main")
    parser.add_argument("--endpoint", metavar="URL", help="Hub endpoint (default: huggingface_hub's, HF_ENDPOINT)")
    parser.add_argument("--token-env", metavar="VAR",
                        help="environment variable holding the token (default: huggingface_hub's own lookup)")
    parser.add_argument("--commit-message", metavar="TEXT")
    parser.add_argument("--dry-run", action="store_true", help=dry_run)


def upload_token(args: argparse.Namespace) -> str | None:
    """The token ``--token-env`` names (None: huggingface_hub's own lookup); a variable unset or empty is refused."""
    if not args.token_env:
        return None
    token = os.environ.get(args.token_env)
    if not token:
        raise UsageError(f"--token-env {args.token_env}: that environment variable is not set or empty")
    return token


def run(args: argparse.Namespace) -> int:
    token = upload_token(args)
    result = publish(args.directory, repo_id=args.repo, records=args.record, create_pr=args.create_pr,
                     endpoint=args.endpoint, token=token, commit_message=args.commit_message, dry_run=args.dry_run)
    for name, convention in sorted(result.records.items()):
        print(f"{name}: {convention}")
    print(f"stamped: {', '.join(result.stamped) if result.stamped else 'nothing (already stamped)'}")
    print_publish_outcome(result, not_uploaded="validated; not uploaded (--dry-run)")
    return 0


def print_publish_outcome(result: PublishResult, *, not_uploaded: str) -> None:
    """The validator's warnings (stderr) and where the release went: the pull request, the commit, or
    ``not_uploaded`` for a dry run."""
    for issue in result.warnings:
        where = f" at {issue.path}" if issue.path else ""
        print(f"warning {issue.file}: {issue.code}{where}: {issue.message}", file=sys.stderr)
    for entry in result.skipped:
        print(f"skipped {entry}: links are not followed (copy the file into the folder to publish it)",
              file=sys.stderr)
    if not result.uploaded:
        print(not_uploaded)
    elif result.pr_url:
        print(f"pull request: {result.pr_url}")
    else:
        print(f"committed: {result.commit_url}")
