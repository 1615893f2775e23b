"""The refit results an audit writes back into a model card (bnconvention.authoring.card_refit), on their own:
the ``bnconvention_refit`` block and section, next to the release's declaration, which they never touch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bnconvention.authoring import card_stamp
from bnconvention.authoring.card_refit import (
    REFIT_BLOCK_KEY,
    REFIT_SECTION_BEGIN,
    REFIT_SECTION_END,
    read_refit_entries,
    render_refit_section,
    stamp_card_refit_text,
)
from bnconvention.authoring.card_stamp import stamp_card_text
from bnconvention.errors import CardError
from bnconvention.formats.card import parse_card_metadata, read_card_record

RECORD: dict[str, Any] = json.loads((Path(__file__).resolve().parent / "fixtures" / "stamp" / "record.json")
                                    .read_text("utf-8"))


def _entry(path: str, shift: float) -> dict[str, Any]:
    return {"annotation": path, "sha256": "a" * 64, "subject": "model.safetensors", "convention": "c",
            "cells": [{"metric": "df", "shipped": 0.5, "refit": 0.5 + shift / 100, "shift_pp": shift,
                       "decision": "displaced"}], "reporting_line": f"refit moves the cell {shift:+.2f}pp"}


def test_refit_entries_go_beside_the_declaration_and_replace_their_own_path() -> None:
    card = stamp_card_text("---\r\nlicense: mit\r\n---\r\n# Model\r\n", RECORD)
    first = stamp_card_refit_text(card, _entry("bnconvention/refit-1.json", 2.466))
    second = stamp_card_refit_text(first, _entry("bnconvention/refit-2.json", -0.001))
    again = stamp_card_refit_text(second, _entry("bnconvention/refit-1.json", 1.0))
    assert stamp_card_refit_text(again, _entry("bnconvention/refit-1.json", 1.0)) == again  # idempotent
    assert [e["annotation"] for e in read_refit_entries(again)] == ["bnconvention/refit-1.json",
                                                                     "bnconvention/refit-2.json"]
    assert read_refit_entries(again)[0]["cells"][0]["shift_pp"] == 1.0
    assert read_card_record(again) == RECORD  # the declaration is untouched
    assert list(parse_card_metadata(again)) == ["license", "bnconvention", REFIT_BLOCK_KEY]
    assert again.count(REFIT_SECTION_BEGIN) == 1 and "\n" not in again.replace("\r\n", "")  # CRLF kept


def test_the_section_signs_shifts_and_escapes_cells() -> None:
    section = render_refit_section([_entry("a|b.json", -0.001)])
    assert section.startswith(REFIT_SECTION_BEGIN) and section.endswith(REFIT_SECTION_END)
    assert "| `a\\|b.json` | `model.safetensors` | `c` | df | 0.5000 | 0.5000 | +0.00pp | displaced |" in section


@pytest.mark.parametrize("block", ["not a list", [{"no": "annotation"}]])
def test_a_malformed_refit_block_is_refused(block: Any) -> None:
    import yaml

    text = "---\n" + yaml.safe_dump({REFIT_BLOCK_KEY: block}) + "---\n"
    with pytest.raises(CardError, match="is not a list of entries with an 'annotation' path"):
        stamp_card_refit_text(text, _entry("bnconvention/refit-1.json", 1.0))


def test_the_refit_names_stay_importable_from_card_stamp() -> None:
    assert card_stamp.stamp_card_refit_text is stamp_card_refit_text
    assert card_stamp.REFIT_BLOCK_KEY == REFIT_BLOCK_KEY
