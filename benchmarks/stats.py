"""Statistics of paired runs: the median of per-pair ratios and a distribution-free interval.

On a shared machine the same configuration varies by up to 2x between runs, mostly through
load that hits both runs of a pair alike. Each pair therefore runs its two configurations back
to back (alternating which goes first), and the figure is the median of the per-pair ratios
``a_i / b_i``, which cancels the slow drift of the load and ignores single disturbed pairs.

The interval is the exact order-statistic confidence interval of a median: for ``n`` ratios
sorted ascending, ``[r_(k), r_(n-k+1)]`` holds the true median with probability at least
``1 - 2 * P(Binomial(n, 1/2) <= k - 1)``; ``k`` is the largest rank that keeps this at least
the requested level. It assumes only independent pairs, no distribution, and gives the same
answer every time (a bootstrap would not). 10 pairs give ``[r_(2), r_(9)]`` at 97.9%; fewer
than 6 pairs cannot reach 95% and give no interval.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


class StatsError(ValueError):
    """Inputs from which no ratio or interval can be computed."""


@dataclass(frozen=True)
class PairedRatio:
    """The median ratio of ``n`` pairs and its interval (``None`` when ``n`` is too small)."""

    n: int
    median: float
    low: float | None
    high: float | None
    coverage: float | None
    """The interval's exact coverage (at least the level asked for)."""
    ratios: tuple[float, ...]


def binomial_cdf(k: int, n: int) -> float:
    """``P(Binomial(n, 1/2) <= k)``, exactly (as a float)."""
    if k < 0:
        return 0.0
    return sum(math.comb(n, i) for i in range(min(k, n) + 1)) / 2**n


def median_rank(n: int, level: float = 0.95) -> tuple[int, float] | None:
    """The rank ``k`` (1-based) of the interval's lower end, and the interval's coverage, for
    ``n`` sorted values at confidence ``level``; ``None`` when no rank reaches it."""
    if not 0 < level < 1:
        raise StatsError(f"level: must be in (0, 1); got {level}")
    best = None
    for k in range(1, n // 2 + 1):
        coverage = 1 - 2 * binomial_cdf(k - 1, n)
        if coverage >= level:
            best = (k, coverage)
        else:
            break
    return best


def median_interval(
    values: Sequence[float], level: float = 0.95
) -> tuple[float, float, float] | None:
    """The order-statistic interval of the median of ``values`` at ``level``: ``(low, high,
    coverage)``; ``None`` when there are too few values for one (:func:`median_rank`)."""
    rank = median_rank(len(values), level)
    if rank is None:
        return None
    k, coverage = rank
    ordered = sorted(values)
    return ordered[k - 1], ordered[len(ordered) - k], coverage


def paired_ratio(a: Sequence[float], b: Sequence[float], level: float = 0.95) -> PairedRatio:
    """Median of ``a_i / b_i`` with its order-statistic interval at ``level``.

    Raises:
        StatsError: different lengths, no pairs, or a value that is not positive.
    """
    if len(a) != len(b):
        raise StatsError(f"paired runs: {len(a)} and {len(b)} values; every pair needs both")
    if not a:
        raise StatsError("paired runs: no pairs")
    bad = [v for v in (*a, *b) if not (isinstance(v, int | float) and v > 0)]
    if bad:
        raise StatsError(f"paired runs: every value must be a positive number; got {bad[0]!r}")
    ratios = sorted(x / y for x, y in zip(a, b, strict=True))
    low, high, coverage = median_interval(ratios, level) or (None, None, None)
    return PairedRatio(len(ratios), statistics.median(ratios), low, high, coverage, tuple(ratios))
