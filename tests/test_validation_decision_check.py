"""The validator re-decides each cell of an annotation from its own replicate shifts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bnconvention.validation.decision_check import p_matches
from bnconvention.validation.records import validate_record

FULL = Path(__file__).resolve().parent.parent / "schema" / "tests" / "valid" / "refit-annotation-full.json"


def _full() -> dict:
    return json.loads(FULL.read_text(encoding="utf-8"))


def test_the_fixed_full_vector_is_consistent_and_the_old_one_was_not() -> None:
    assert validate_record(_full()) == []
    # the vector as it was: four replicates claiming p = 0.5^10 for df, and "undetermined" for shifts <= -38 pp
    old = _full()
    old["replicates"] = 4
    for cell in old["cells"]:
        cell["replicate_values"], cell["replicate_shifts_pp"] = cell["replicate_values"][:4], \
            cell["replicate_shifts_pp"][:4]
        cell["refit"] = sum(cell["replicate_values"]) / 4
        cell["shift_pp"] = sum(cell["replicate_shifts_pp"]) / 4
    old["cells"][0]["decision"]["p_value"] = 0.0009765625
    old["cells"][2]["decision"] = {"outcome": "undetermined", "method": "exact-sign-test"}
    old["verdicts"] = []
    issues = {(i.code, i.path) for i in validate_record(old)}
    assert ("record.decision_inconsistent", "/cells/0/decision/outcome") in issues  # 4 replicates: p = 0.0625
    assert ("record.decision_inconsistent", "/cells/2/decision/method") in issues


def test_the_message_says_what_the_rules_give() -> None:
    data = _full()
    data["cells"][0]["decision"]["p_value"] = 0.0009765625
    [issue] = validate_record(data)
    assert issue.message == ('0.0009765625 is not the p-value of cell "df": the rules give "displaced" '
                             "(exact-sign-test, p = 0.016) for its 6/6 replicates beyond ±1.2pp, one-sided "
                             "sign-test p = 0.016, TOST p = 1")


def test_a_p_value_printed_at_two_significant_digits_is_accepted() -> None:
    data = _full()
    data["cells"][0]["decision"]["p_value"] = 0.016
    assert validate_record(data) == []
    assert p_matches(0.0044, 0.004437115077114705) and not p_matches(0.0045, 0.004437115077114705)


def test_another_tool_s_method_is_not_re_decided() -> None:
    data = _full()
    data["cells"][0]["decision"] = {"outcome": "undetermined", "method": "bootstrap-t", "p_value": 0.2}
    assert validate_record(data) == []


def test_without_scipy_the_sign_test_is_still_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "scipy", None)  # the core install: no audit extra
    data = _full()
    assert validate_record(data) == []  # dt needs TOST: not compared, not an error
    data["cells"][0]["decision"]["p_value"] = 0.0009765625
    assert [(i.code, i.path) for i in validate_record(data)] == [
        ("record.decision_inconsistent", "/cells/0/decision/p_value")]
