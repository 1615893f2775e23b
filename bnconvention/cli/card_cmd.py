"""``bnconvention card``: (re)render a model card's bnconvention block and section."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bnconvention.authoring.card_stamp import stamp_card_file, stamp_card_text
from bnconvention.authoring.stamp import checked_record, read_stamped_record
from bnconvention.cli.commands import summary
from bnconvention.cli.stamp_cmd import read_record_file
from bnconvention.errors import RecordError
from bnconvention.formats.card import decode_card

EPILOG = """\
examples:
  bnconvention card README.md --record record.json
  bnconvention card README.md --from model.safetensors      # the record stamped in the weights
  bnconvention card README.md --from model.safetensors --check   # exit 1 if the card is out of date

Only the top-level `bnconvention:` key of the YAML front matter and the section between
<!-- bnconvention:begin --> and <!-- bnconvention:end --> are written; everything else in the card (other keys,
their order, comments, line endings) is kept as it is. A missing card is created.
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "card",
        help=summary("card"),
        description="Write a record into a model card: the `bnconvention` block of the YAML front matter and a "
                    "'BatchNorm fitting convention' section in the body, replaced (not duplicated) on re-runs.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("card", metavar="README.md", type=Path, help="the model card")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--record", type=Path, metavar="RECORD.json", help="the record as JSON")
    source.add_argument("--from", dest="weights", type=Path, metavar="WEIGHTS.safetensors",
                        help="use the record stamped in this safetensors file")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if the card does not already say exactly this")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.record is not None:
        model, _ = checked_record(read_record_file(args.record), source=str(args.record))
    else:
        stamped = read_stamped_record(args.weights)
        if stamped is None:
            raise RecordError(f"{args.weights}: has no bnconvention record in its header; stamp one first "
                              "(bnconvention stamp) or pass --record", source=str(args.weights))
        model = stamped
    if args.check:
        text = decode_card(args.card.read_bytes(), source=str(args.card)) if args.card.exists() else ""
        if args.card.exists() and stamp_card_text(text, model, source=str(args.card)) == text:
            print(f"{args.card}: up to date")
            return 0
        print(f"{args.card}: out of date; run without --check to update it", file=sys.stderr)
        return 1
    result = stamp_card_file(args.card, model)
    print(f"{args.card}: {'created' if result.created else ('updated' if result.changed else 'unchanged')}")
    return 0
