"""The scale study's figures and verdicts: pure functions of what ``benchmarks.scale`` measured.

How a figure grows with the worker count is its exponent between two sizes,
``log(y2 / y1) / log(n2 / n1)``: 1 is linear, 0 flat, 2 quadratic. A figure whose exponent
between the two largest sizes exceeds :data:`SUPERLINEAR` grows faster than linearly; an object
above :data:`NEAR_LIMIT` of a Kubernetes size limit is near it. Both are defects to fix (the
verdict lines say which).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

OBJECT_LIMIT_BYTES = 1_572_864
"""etcd's default largest request (``--max-request-bytes``, 1.5 MiB): no object may be larger."""
ANNOTATIONS_LIMIT_BYTES = 262_144
"""The API server's limit on an object's annotations, keys and values together (256 KiB)."""
NEAR_LIMIT = 0.5
SUPERLINEAR = 1.2
"""Above linear by more than the noise of one run: time figures of a loaded machine wander by
tens of percent between sizes, which moves an exponent over a factor of 8 by about 0.1-0.2."""


@dataclass(frozen=True)
class Growth:
    """One figure at every size, and its exponent between each pair of neighbouring sizes."""

    name: str
    values: tuple[float, ...]
    exponents: tuple[float | None, ...]

    @property
    def last_exponent(self) -> float | None:
        return self.exponents[-1] if self.exponents else None


def exponent(n1: float, y1: float, n2: float, y2: float) -> float | None:
    """The growth exponent from ``(n1, y1)`` to ``(n2, y2)``; ``None`` where a value is 0."""
    if y1 <= 0 or y2 <= 0 or n1 <= 0 or n2 <= 0 or n1 == n2:
        return None
    return math.log(y2 / y1) / math.log(n2 / n1)


def growth(name: str, sizes: Sequence[int], values: Sequence[float]) -> Growth:
    if len(sizes) != len(values):
        raise ValueError(f"{name}: {len(values)} values for {len(sizes)} sizes")
    exps = tuple(
        exponent(sizes[i], values[i], sizes[i + 1], values[i + 1]) for i in range(len(sizes) - 1)
    )
    return Growth(name, tuple(values), exps)


def growths(sizes: Sequence[int], rows: Sequence[Mapping[str, float]]) -> list[Growth]:
    """Every figure present at every size (``rows[i]`` is size ``sizes[i]``), in name order."""
    names = sorted(set.intersection(*(set(r) for r in rows))) if rows else []
    return [growth(n, sizes, [float(r[n]) for r in rows]) for n in names]


def verdicts(
    sizes: Sequence[int],
    grown: Sequence[Growth],
    largest_object: tuple[str, int],
    largest_annotations: tuple[str, int],
) -> list[str]:
    """One line per defect found, each naming the figure; ``[]`` when there is none."""
    lines = []
    for g in grown:
        e = g.last_exponent
        if e is not None and e > SUPERLINEAR:
            lines.append(
                f"DEFECT  {g.name} grows faster than linearly: exponent {e:.2f} from "
                f"{sizes[-2]} to {sizes[-1]} workers ({g.values[-2]:g} -> {g.values[-1]:g})"
            )
    for what, (name, size), limit in (
        ("object", largest_object, OBJECT_LIMIT_BYTES),
        ("annotations", largest_annotations, ANNOTATIONS_LIMIT_BYTES),
    ):
        if size > NEAR_LIMIT * limit:
            lines.append(
                f"DEFECT  {name}: {what} {size:,} bytes at {sizes[-1]} workers, over "
                f"{NEAR_LIMIT:.0%} of the {limit:,}-byte limit"
            )
    return lines


def table(sizes: Sequence[int], grown: Sequence[Growth]) -> list[str]:
    """A text table: each figure at each size and its last exponent."""
    head = f"{'figure':<44}" + "".join(f"{n:>12}" for n in sizes) + f"{'exponent':>10}"
    lines = [head]
    for g in grown:
        e = g.last_exponent
        lines.append(
            f"{g.name:<44}"
            + "".join(f"{v:>12,.1f}" if v % 1 else f"{v:>12,.0f}" for v in g.values)
            + (f"{e:>10.2f}" if e is not None else f"{'-':>10}")
        )
    return lines
