"""Welch's interval of a ratio of times (issue 40 §6), against Student's t tables and a case worked by hand."""

from __future__ import annotations

import math

import pytest

from envkit.runs.welch import ratio_interval, t_quantile


@pytest.mark.parametrize(
    "df, quantile", [(1, 12.706), (2, 4.303), (3, 3.182), (5, 2.571), (10, 2.228), (30, 2.042), (120, 1.980)]
)
def test_the_t_quantile_is_the_tables(df, quantile):
    assert t_quantile(0.975, df) == pytest.approx(quantile, abs=5e-4)


def test_the_interval_of_a_ratio_is_welchs_on_log_times():
    """log times 1 and 1.2 against 0 and 0.2: difference 1, se sqrt(0.02/2 + 0.02/2), Welch df 2 (t 4.303)."""
    low, high = ratio_interval([math.e, math.exp(1.2)], [1.0, math.exp(0.2)])
    half = 4.302653 * math.sqrt(0.02)
    assert (low, high) == pytest.approx((math.exp(1 - half), math.exp(1 + half)), rel=1e-6)


def test_one_run_on_a_side_gives_no_interval_and_identical_runs_a_point():
    assert ratio_interval([10.0], [5.0, 6.0]) is None and ratio_interval([10.0, 11.0], [5.0]) is None
    assert ratio_interval([10.0, 10.0], [5.0, 5.0, 5.0]) == pytest.approx((2.0, 2.0))
