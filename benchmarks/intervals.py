"""What a benchmark's verdict rests on: a distribution-free 95% interval of a median (the sign test's order
statistics), so that a goal is said met, or not, only where that interval lies on one side of it (issue 42: a
benchmark never reports a ratio its noise cannot support)."""

from __future__ import annotations

import math


def median_interval(values: list[float]) -> tuple[float, float]:
    """A 95% interval of the median of ``values``: the k-th smallest and the k-th largest, k the largest rank with
    P(Binomial(n, 1/2) < k) <= 2.5% (n=9: the 2nd and 8th; n=15: the 4th and 12th); the whole range under 6."""
    ordered, n = sorted(values), len(values)
    below, k = 0.0, 0
    while below + math.comb(n, k) / 2**n <= 0.025:
        below += math.comb(n, k) / 2**n
        k += 1
    return (ordered[k - 1], ordered[n - k]) if k else (ordered[0], ordered[-1])


def against(goal: float, interval: tuple[float, float]) -> str:
    """An upper ``goal`` held to ``interval``: met, NOT met, or not shown where the interval holds it."""
    low, high = interval
    if high <= goal:
        return "met"
    if low > goal:
        return "NOT met"
    return "not shown either way"
