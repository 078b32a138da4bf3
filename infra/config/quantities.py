"""Kubernetes quantities (``500m``, ``2Gi``): their value, and a quantity times a whole number."""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

# Kubernetes resource.Quantity: a signed decimal number and an optional suffix.
_QUANTITY = re.compile(
    r"^(?P<num>\+?(\d+(\.\d*)?|\.\d+))(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?\d+)?$"
)
_SUFFIX = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    **{s: Decimal(1024) ** (i + 1) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
}


def parse_quantity(text: str) -> Decimal:
    """Value of a Kubernetes quantity (``500m`` -> 0.5, ``2Gi`` -> 2147483648).

    Raises:
        ValueError: ``text`` is not a quantity.
    """
    match = _QUANTITY.match(text)
    if not match:
        raise ValueError(text)
    suffix = match["suffix"] or ""
    try:
        scale = _SUFFIX[suffix] if suffix in _SUFFIX else Decimal(f"1{suffix}")
        return Decimal(match["num"]) * scale
    except InvalidOperation:
        raise ValueError(text) from None


def scale_quantity(text: str | int, factor: int) -> str:
    """A Kubernetes quantity times a whole ``factor``, in the same suffix (``16Gi`` x 4 ->
    ``64Gi``, ``500m`` x 3 -> ``1500m``): exact, with no rounding through floats.

    Raises:
        ValueError: ``text`` is not a quantity.
    """
    match = _QUANTITY.match(str(text))
    if not match:
        raise ValueError(text)
    number = Decimal(match["num"]) * factor
    # 'f' never writes an exponent (Decimal('1E+2') -> '100'); drop a trailing '.0'.
    digits = format(number.normalize(), "f") if number else "0"
    return f"{digits}{match['suffix'] or ''}"


def millis(cores: Decimal) -> int:
    """CPU cores as whole millicores, at least 1."""
    return max(1, math.ceil(cores * 1000))
