"""The paired-run statistics on known inputs: binomial tail, interval ranks, median ratios."""

from __future__ import annotations

import math

import pytest

from benchmarks.stats import StatsError, binomial_cdf, median_rank, paired_ratio


@pytest.mark.parametrize(
    ("k", "n", "expected"),
    [(-1, 10, 0.0), (0, 10, 1 / 1024), (1, 10, 11 / 1024), (2, 10, 56 / 1024), (10, 10, 1.0),
     (12, 10, 1.0), (0, 1, 0.5), (2, 6, 22 / 64)],
)  # fmt: skip
def test_binomial_cdf(k: int, n: int, expected: float):
    assert math.isclose(binomial_cdf(k, n), expected), f"P(B({n}) <= {k})"


@pytest.mark.parametrize(
    ("n", "level", "rank", "coverage"),
    [
        (5, 0.95, None, None),  # 1 - 2/32 = 0.9375 < 0.95: no interval
        (6, 0.95, 1, 1 - 2 / 64),
        (8, 0.95, 1, 1 - 2 / 256),  # rank 2: 1 - 18/256 = 0.930
        (9, 0.95, 2, 1 - 20 / 512),
        (10, 0.95, 2, 1 - 22 / 1024),
        (20, 0.95, 6, 1 - 2 * 1 / 2**20 * sum(math.comb(20, i) for i in range(6))),
        (10, 0.90, 2, 1 - 22 / 1024),  # rank 3 gives 0.891
        (10, 0.85, 3, 1 - 112 / 1024),
    ],
)
def test_median_rank(n: int, level: float, rank: int | None, coverage: float | None):
    got = median_rank(n, level)
    if rank is None:
        assert got is None, f"n={n}: {got}"
        return
    assert got is not None and got[0] == rank, f"n={n} level={level}: {got}"
    assert math.isclose(got[1], coverage), f"n={n}: coverage {got[1]} != {coverage}"
    assert got[1] >= level


@pytest.mark.parametrize("level", [0.0, 1.0, 1.5])
def test_median_rank_rejects_levels(level: float):
    with pytest.raises(StatsError, match="level: must be in"):
        median_rank(10, level)


@pytest.mark.parametrize(
    ("a", "b", "median", "low", "high"),
    [
        # Ratios 1..10 (given out of order): median 5.5, 95% interval [r_(2), r_(9)] = [2, 9].
        ([10, 2, 9, 3, 8, 4, 7, 5, 6, 1], [1] * 10, 5.5, 2.0, 9.0),
        # The same ratios from other magnitudes: only a_i / b_i counts.
        ([20, 400, 9000, 3, 80, 4, 7, 50, 600, 1], [2, 200, 1000, 1, 10, 1, 1, 10, 100, 1], 5.5,
         2.0, 9.0),
        # 6 pairs: the interval is the whole range (coverage 62/64).
        ([1.1, 0.9, 1.0, 1.2, 0.8, 1.05], [1] * 6, 1.025, 0.8, 1.2),
        # 5 pairs: a median, no 95% interval.
        ([1, 2, 3, 4, 5], [1] * 5, 3.0, None, None),
        ([3.0], [2.0], 1.5, None, None),
    ],
)  # fmt: skip
def test_paired_ratio(a, b, median, low, high):
    got = paired_ratio(a, b)
    assert got.n == len(a)
    assert math.isclose(got.median, median), f"median {got.median} != {median}"
    if low is None:
        assert (got.low, got.high, got.coverage) == (None, None, None), got
    else:
        assert math.isclose(got.low, low) and math.isclose(got.high, high), got
        assert got.coverage >= 0.95
    assert list(got.ratios) == sorted(got.ratios)


def test_one_disturbed_pair_moves_the_median_little():
    """A pair hit by load (both slow, or one side 3x slower) barely moves the figure."""
    a = [1.0] * 9 + [0.3]
    b = [1.0] * 10
    got = paired_ratio(a, b)
    assert got.median == 1.0 and got.low == 1.0 and got.high == 1.0, got


@pytest.mark.parametrize(
    ("a", "b", "match"),
    [
        ([1.0, 2.0], [1.0], "2 and 1 values"),
        ([], [], "no pairs"),
        ([1.0, 0.0], [1.0, 1.0], "positive number; got 0.0"),
        ([1.0], [-2.0], "positive number; got -2.0"),
        ([1.0], [None], "positive number; got None"),
    ],
)
def test_paired_ratio_refuses(a, b, match):
    with pytest.raises(StatsError, match=match):
        paired_ratio(a, b)
