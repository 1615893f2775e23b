"""``bnconvention stamp``: write a record into a safetensors header (and optionally a model card)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from bnconvention.authoring.card_stamp import stamp_card_file, stamp_card_text
from bnconvention.authoring.stamp import DEFAULT_RESERVE, checked_record, stamp_file
from bnconvention.cli.commands import summary
from bnconvention.cli.progress import add_progress_option, show_progress
from bnconvention.errors import RecordError
from bnconvention.formats.canonical import loads_strict
from bnconvention.formats.card import decode_card, read_card_record
from bnconvention.formats.signatures import RESIGN_HINT, signature_target, signatures_covering

EPILOG = """\
examples:
  bnconvention stamp model.safetensors --record record.json
  bnconvention stamp model.safetensors --record record.json --card README.md
  bnconvention stamp model.safetensors --record record.json --reserve 65536   # room for larger later records
  bnconvention stamp model.safetensors --from-card README.md   # restore the record a re-save dropped

The tensor data is never rewritten or loaded: the header is updated in place when the new one fits (a single
one-page write), otherwise the file is copied next to itself with the new header and renamed over the original.
Either way the file is always the complete old one or the complete new one. Stamping the same record again changes
nothing. Stamp first, then sign: a stamp that changes a signed release (a model.sig beside the weights) warns that
the signature no longer matches and how to sign again (bnconvention sign).

Exit codes: 0 stamped (or already stamped with this record), 1 the record is invalid or does not describe the
file's tensors, or writing failed (the file is left intact), 2 unreadable record, card or weights file, or bad
usage, 130 interrupted (the file is intact).
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "stamp",
        help=summary("stamp"),
        description="Write a bnconvention record into the __metadata__ of a safetensors file, keeping every other "
                    "key and the tensor bytes unchanged; optionally also into a model card.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("weights", metavar="WEIGHTS.safetensors", type=Path, help="the file to stamp")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--record", type=Path, metavar="RECORD.json",
                        help="the record (a declaration or a refit annotation) as JSON")
    source.add_argument("--from-card", type=Path, metavar="README.md",
                        help="the record of this model card's bnconvention block (restores a header another tool "
                             "re-saved without it)")
    parser.add_argument("--card", type=Path, metavar="README.md",
                        help="also add the record to this model card (created if missing)")
    parser.add_argument("--no-check-digests", dest="check_digests", action="store_false",
                        help="skip checking the record's digests against the file's tensors (reads every tensor)")
    parser.add_argument("--reserve", type=int, default=None, metavar="BYTES",
                        help="header padding kept for later re-stamps when the header must grow (default 4096)")
    add_progress_option(parser, help="a progress bar while copying tensor data (default: only when stderr is a "
                                     "terminal)")
    parser.set_defaults(func=run)


def read_record_file(path: Path) -> Any:
    """The decoded JSON of a record file (untrusted: strict UTF-8 JSON, no duplicate keys); any JSON value, which
    ``checked_record`` refuses unless it is a valid record."""
    return loads_strict(path.read_bytes(), source=str(path))


def _record_source(args: argparse.Namespace) -> tuple[Any, str]:
    """The record's decoded JSON and where it came from: ``--record``, or the block of ``--from-card``."""
    if args.record is not None:
        return read_record_file(args.record), str(args.record)

    block = read_card_record(decode_card(args.from_card.read_bytes(), source=str(args.from_card)),
                             source=str(args.from_card))
    if block is None:
        raise RecordError(f"{args.from_card} has no bnconvention block to stamp", source=str(args.from_card))
    return block, f"{args.from_card} bnconvention block"


def run(args: argparse.Namespace) -> int:
    data, source = _record_source(args)
    model, _ = checked_record(data, source=source)
    if args.card is not None and args.card.exists():
        # Fail on a malformed card before the weights are touched.
        stamp_card_text(decode_card(args.card.read_bytes(), source=str(args.card)), model, source=str(args.card))
    result = stamp_file(args.weights, model, check_digests=args.check_digests,
                        reserve=DEFAULT_RESERVE if args.reserve is None else args.reserve,
                        progress=show_progress(args.progress))
    how = {"unchanged": "already stamped with this record, unchanged", "in_place": "header updated in place",
           "rewrite": "header rewritten, tensor data copied unchanged"}[result.method]
    checked = "digests match" if result.digests_checked else "digests not checked"
    print(f"{args.weights}: {how} ({checked}; header {result.header_size} bytes, {result.padding} spare)")
    for leftover in result.removed_temps:
        print(f"{leftover}: removed (the copy an earlier, killed stamp of {args.weights} left behind)")
    changed = [args.weights] if result.method != "unchanged" else []
    if args.card is not None:
        card = stamp_card_file(args.card, model)
        state = "created" if card.created else ("updated" if card.changed else "unchanged")
        print(f"{args.card}: {state}")
        changed += [args.card] if card.created or card.changed else []
    _warn_signatures(changed)
    return 0


def _warn_signatures(changed: list[Path]) -> None:
    """A stamp rewrites bytes a release's signature covers: say which signature it invalidated and how to sign
    again (stamp first, then sign; docs/quickstart-author.md)."""
    for signature in sorted({s for path in changed for s in signatures_covering(path)}):
        names = ", ".join(str(p) for p in changed if signature in signatures_covering(p))
        print(f"bnconvention: warning: {signature} signed {names} before this stamp changed it; the signature no "
              f"longer matches: sign again: {RESIGN_HINT.format(target=signature_target(signature))}",
              file=sys.stderr)
