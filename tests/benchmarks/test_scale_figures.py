"""The scale study's growth exponents and defect verdicts, on made-up figures."""

from __future__ import annotations

import math

import pytest

from benchmarks.scale_figures import (
    ANNOTATIONS_LIMIT_BYTES,
    OBJECT_LIMIT_BYTES,
    exponent,
    growth,
    growths,
    table,
    verdicts,
)

SIZES = (8, 64, 512)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ((10.0, 10.0, 10.0), (0.0, 0.0)),  # flat
        ((8.0, 64.0, 512.0), (1.0, 1.0)),  # linear
        ((64.0, 4096.0, 262144.0), (2.0, 2.0)),  # quadratic
        ((5.0, 5.0, 40.0), (0.0, 1.0)),  # flat, then linear
        ((0.0, 3.0, 24.0), (None, 1.0)),  # a zero has no exponent
    ],
)
def test_growth_exponents_between_neighbouring_sizes(
    values: tuple[float, ...], expected: tuple[float | None, ...]
) -> None:
    got = growth("figure", SIZES, values).exponents
    assert len(got) == len(expected), got
    for g, e in zip(got, expected, strict=True):
        assert (g is None) == (e is None), (got, expected)
        if e is not None:
            assert math.isclose(g, e, abs_tol=1e-9), (got, expected)


def test_growth_refuses_a_value_count_that_is_not_the_size_count() -> None:
    with pytest.raises(ValueError, match="figure: 2 values for 3 sizes"):
        growth("figure", SIZES, (1.0, 2.0))


def test_only_figures_present_at_every_size_are_compared() -> None:
    rows = [{"a": 1.0, "b": 2.0}, {"a": 8.0}, {"a": 64.0, "c": 1.0}]
    assert [g.name for g in growths(SIZES, rows)] == ["a"]
    assert exponent(8, 0.0, 64, 1.0) is None


@pytest.mark.parametrize(
    ("values", "largest", "annotations", "expected"),
    [
        ((8.0, 64.0, 512.0), ("StatefulSet/w", 1000), ("StatefulSet/w", 10), []),
        (
            (64.0, 4096.0, 262144.0),
            ("StatefulSet/w", 1000),
            ("StatefulSet/w", 10),
            ["DEFECT  figure grows faster than linearly: exponent 2.00 from 64 to 512 workers"],
        ),
        (
            (8.0, 64.0, 512.0),
            ("Role/r", OBJECT_LIMIT_BYTES // 2 + 1),
            ("StatefulSet/w", 10),
            ["DEFECT  Role/r: object"],
        ),
        (
            (8.0, 64.0, 512.0),
            ("Role/r", 10),
            ("StatefulSet/w", ANNOTATIONS_LIMIT_BYTES),
            ["DEFECT  StatefulSet/w: annotations"],
        ),
    ],
)
def test_verdicts_name_each_defect(
    values: tuple[float, ...],
    largest: tuple[str, int],
    annotations: tuple[str, int],
    expected: list[str],
) -> None:
    lines = verdicts(SIZES, [growth("figure", SIZES, values)], largest, annotations)
    assert len(lines) == len(expected), lines
    for line, start in zip(lines, expected, strict=True):
        assert line.startswith(start), line


def test_the_table_has_a_row_per_figure_with_its_last_exponent() -> None:
    lines = table(SIZES, [growth("pulumi up (s)", SIZES, (10.0, 12.5, 40.0))])
    assert lines[0].split()[-1] == "exponent", lines[0]
    assert lines[1].split()[-4:] == ["10", "12.5", "40", "0.56"], lines[1]
