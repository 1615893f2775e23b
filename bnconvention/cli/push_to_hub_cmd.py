"""``bnconvention push-to-hub``: publish a folder a library saved (timm, transformers, plain safetensors) so the record
survives: header and card stamped in the same commit as the weights, validated first, the folder itself unchanged."""

from __future__ import annotations

import argparse
from pathlib import Path

from bnconvention.cli.commands import summary
from bnconvention.cli.publish_cmd import add_upload_options, print_publish_outcome, upload_token
from bnconvention.errors import UsageError
from bnconvention.hub.library_push import folder_library, push_to_hub

EPILOG = """\
examples:
  bnconvention push-to-hub saved/ digits-lab/digits-convnet --record record.json
  bnconvention push-to-hub saved/ digits-lab/digits-convnet --record record.json --create-pr --token-env HF_TOKEN
  bnconvention push-to-hub saved/ digits-lab/digits-convnet --record record.json --dry-run

FOLDER is what a library's save wrote (timm save_for_hf, transformers save_pretrained, safetensors save_file) and
any README.md. It is copied to a staging folder; the copy's weights header and card are stamped with the record,
the copy is validated (errors stop before anything is uploaded) and uploaded in one commit (or one pull request
with --create-pr). A library's own push_to_hub would rewrite model.safetensors without the header record; from
Python, bnconvention.hub.push_to_hub(model, repo_id, record=...) saves with the model's library and does the same.
Without --record the folder's weights or card must already carry one. The token is read from the environment and
never printed.

Exit codes: 0 pushed (with --dry-run: stamped and validated), 1 the staged release does not validate or the record
does not fit the weights (nothing committed) or the upload failed, 2 unreadable input or bad usage.
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "push-to-hub",
        help=summary("push-to-hub"),
        description="Copy a folder saved by timm, transformers or safetensors, stamp its weights header and card "
                    "with the declaration, validate it, and upload it to a Hub model repository in one commit; the "
                    "folder itself is not changed.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("folder", type=Path, metavar="FOLDER", help="the folder the library saved")
    parser.add_argument("repo_id", metavar="ORG/NAME", help="the model repository on the Hub")
    parser.add_argument("--record", type=Path, metavar="RECORD.json",
                        help="the declaration to stamp (default: the one the folder's weights or card carry)")
    add_upload_options(parser, dry_run="stamp and validate the staged copy; upload nothing")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    token = upload_token(args)
    if not args.folder.is_dir():
        raise UsageError(f"{args.folder} is not a folder; give the folder a library's save wrote")
    library = folder_library(args.folder)
    result = push_to_hub(args.folder, args.repo_id, record=args.record, create_pr=args.create_pr,
                         commit_message=args.commit_message, endpoint=args.endpoint, token=token,
                         dry_run=args.dry_run)
    print(f"{args.folder}: saved by {library}")
    for name, convention in sorted(result.records.items()):
        print(f"{name}: {convention}")
    print_publish_outcome(result, not_uploaded="stamped and validated a copy; not uploaded (--dry-run)")
    return 0
