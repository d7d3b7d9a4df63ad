"""Numbers in their units, and names made safe to print, for people: one
formatter for every text surface (the CLI and the monitor's own warnings)."""

from __future__ import annotations

import math
import re

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


# Characters that a terminal or a renderer would act on rather than show:
# C0 controls (ESC, CR, LF, TAB, BS...), DEL, C1 controls (CSI, OSC, NEL),
# Unicode line/paragraph separators, bidirectional marks, overrides and
# isolates, and lone surrogates (bytes of a non-UTF-8 file name, kept by
# Python's surrogateescape).
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029"
                          "\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape_char(match: re.Match) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape: the undecodable byte itself
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text) -> str:
    """``text`` safe to print on a terminal: one line, nothing a terminal acts on.

    Control characters, separators, bidirectional overrides and lone
    surrogates become visible ``\\xNN`` / ``\\uNNNN`` escapes (a surrogate
    from a non-UTF-8 file name shows the original byte), so a name can neither
    forge report lines nor drive the terminal, and the result always encodes
    as UTF-8. Idempotent.
    """
    return _UNPRINTABLE.sub(_escape_char, str(text))
