"""What a number of replicates can decide (bnconvention.audit.measure.decisions): the smallest reachable sign-test p,
said beside an undetermined cell and warned about before anything is refit."""

from __future__ import annotations

import pytest

from bnconvention.audit.measure.decisions import reach_note, reach_warning, unreachable


@pytest.mark.parametrize(("replicates", "reachable"), [(2, False), (3, False), (4, False), (5, True), (10, True)])
def test_the_sign_test_reaches_its_level_from_five_replicates(replicates, reachable):
    # 0.5^4 = 0.0625 > 0.05 >= 0.5^5 = 0.03125: exact arithmetic, the level of decide()'s default 90 %
    assert unreachable(replicates) is not reachable
    assert (reach_warning(replicates) is None) is reachable


def test_the_note_and_the_warning_say_the_smallest_p():
    assert reach_note(3) == "R = 3 cannot reach p <= 0.05 (smallest p = 0.125)"
    warning = reach_warning(3)
    assert warning is not None and warning.startswith("with 3 replicates no cell can be displaced: R = 3 cannot")
