"""Numbers in their units, for people: one formatter for every text surface."""

from __future__ import annotations

import math

_BINARY = ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"))


def format_bytes(value: float, signed: bool = False) -> str:
    """Bytes with a binary prefix and one decimal: ``1536`` -> ``"1.5 KiB"``,
    ``512`` -> ``"512 B"``; a ``+`` sign for growth when ``signed``."""
    value = float(value)
    sign = "-" if value < 0 else ("+" if signed else "")
    magnitude = abs(value)
    for size, name in _BINARY:
        if magnitude >= size:
            return f"{sign}{magnitude / size:.1f} {name}"
    return f"{sign}{magnitude:.0f} B"


def format_quantity(value: float, unit: str) -> str:
    """A value with 3 significant digits in its unit (bytes get a binary
    prefix): ``4198.4, "bytes"`` -> ``"4.1 KiB"``; ``2.0, "count"`` -> ``"2 count"``."""
    if unit == "bytes":
        magnitude = abs(value)
        for size, name in _BINARY:
            if magnitude >= size:
                return f"{value / size:.3g} {name}"
        return f"{value:.3g} B"
    return f"{value:.3g} {unit}" if unit else f"{value:.3g}"


def format_duration(seconds: float) -> str:
    """Seconds as the largest fitting unit: ``5400`` -> ``"1.5 h"``."""
    if not math.isfinite(seconds):
        return "never"
    for name, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {name}"
    return f"{seconds:.0f} s"
