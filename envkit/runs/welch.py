"""Welch's confidence interval of a ratio of times, from the runs on each side (issue 40 §6).

Times are compared on the log scale, where a ratio is a difference and run-to-run noise is closer to
symmetric: log(base / row) = mean(log base times) - mean(log row times), its standard error from both sides'
sample variances (Welch: unequal variances, unequal run counts), its degrees of freedom by Welch and
Satterthwaite, and the interval the exponential of mean ± t·se. Each run is one sample: a run's own steps
or epochs are not independent measurements of the run-to-run spread. Standard library only (Student's t
quantile from the regularised incomplete beta function), so the report needs no scipy and gives the same
bytes everywhere.
"""

from __future__ import annotations

import math
from statistics import fmean, variance

CONFIDENCE = 0.95
_ITERATIONS = 200  # the continued fraction and the bisection: far below float precision long before this


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    fraction = d
    for m in range(1, _ITERATIONS):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            fraction *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return fraction


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    tail = 0.5 * _incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The t with P(T <= t) = p (0.5 < p < 1), by bisection."""
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        high *= 2.0
    for _ in range(_ITERATIONS):
        middle = (low + high) / 2.0
        low, high = (middle, high) if t_cdf(middle, df) < p else (low, middle)
    return (low + high) / 2.0


def ratio_interval(base: list[float], row: list[float], confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """The ``confidence`` interval of mean(base) ÷ mean(row) on the log scale (Welch), from positive times; None
    where either side has fewer than two runs (no spread to estimate)."""
    if len(base) < 2 or len(row) < 2:
        return None
    logs = [[math.log(value) for value in side] for side in (base, row)]
    centre = fmean(logs[0]) - fmean(logs[1])
    shares = [variance(side) / len(side) for side in logs]
    error = math.sqrt(sum(shares))
    if error == 0.0:  # every run of both sides took the same time: the ratio has no spread
        return math.exp(centre), math.exp(centre)
    df = sum(shares) ** 2 / sum(share**2 / (len(side) - 1) for share, side in zip(shares, logs))
    half = t_quantile(0.5 + confidence / 2.0, df) * error
    return math.exp(centre - half), math.exp(centre + half)
