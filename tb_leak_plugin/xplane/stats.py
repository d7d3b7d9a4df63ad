"""Decoding XStat messages in bulk: metadata id, value kind, raw bits, text span.

Stats written the usual way (metadata id first, then one value that ends the
message) are decoded with fixed offsets, a group at a time; any other layout
goes through the general field scanner of `tb_leak_plugin.xplane.wire`.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tb_leak_plugin.xplane.schema import (
    KIND_BYTES, KIND_DOUBLE, KIND_INT64, KIND_REF, KIND_STR, KIND_UINT64, XPlaneDecodeError,
)
from tb_leak_plugin.xplane.wire import fixed64, scan_messages


@dataclasses.dataclass
class _Stats:
    """Decoded XStats, one entry each: metadata id, value kind, raw bits, text span."""

    row: np.ndarray  # index into the stat spans given to decode_stats
    metadata_id: np.ndarray
    kind: np.ndarray
    raw: np.ndarray
    text_start: np.ndarray
    text_stop: np.ndarray

    def take(self, rows: np.ndarray) -> "_Stats":
        return _Stats(*(getattr(self, f.name)[rows] for f in dataclasses.fields(self)))

    @staticmethod
    def merged(parts: list["_Stats"]) -> "_Stats":
        """One table of ``parts``, in stat order (``row``)."""
        if len(parts) == 1:
            return parts[0]
        names = [f.name for f in dataclasses.fields(_Stats)]
        stats = _Stats(*(np.concatenate([getattr(p, name) for p in parts]) for name in names))
        return stats.take(np.argsort(stats.row, kind="stable"))  # keep the written order


@dataclasses.dataclass
class _StatFilter:
    """Which stats to keep by metadata id: ``keep_lut[id]``, or with a 2-D
    table ``keep_lut[row_class[stat], id]``; None keeps every stat."""

    keep_lut: np.ndarray | None
    row_class: np.ndarray | None

    def wanted(self, rows: np.ndarray, metadata_id: np.ndarray) -> np.ndarray:
        """Bool per stat: wanted (ids outside the table never are)."""
        if self.keep_lut is None:
            return np.ones(rows.size, dtype=bool)
        known = (metadata_id >= 0) & (metadata_id < self.keep_lut.shape[-1])
        wanted = np.zeros(rows.size, dtype=bool)
        if self.keep_lut.ndim == 2:
            wanted[known] = self.keep_lut[self.row_class[rows[known]], metadata_id[known]]
        else:
            wanted[known] = self.keep_lut[metadata_id[known]]
        return wanted


_VALUE_TAGS = np.zeros(256, dtype=np.int8)  # value tag byte -> kind
for _kind, _wire in ((KIND_DOUBLE, 1), (KIND_UINT64, 0), (KIND_INT64, 0), (KIND_STR, 2),
                     (KIND_BYTES, 2), (KIND_REF, 0)):
    _VALUE_TAGS[(_kind << 3) | _wire] = _kind


def decode_stats(buf, starts, stops, keep_lut=None, row_class=None) -> _Stats:
    """Decode XStat messages ``buf[starts[i]:stops[i]]``.

    Stats written the usual way (metadata id first, then one value that ends
    the message) are decoded in bulk: the value's length follows from the
    message length, so no byte-by-byte varint walk is needed. Any other
    layout goes through the general field scanner. With ``keep_lut``, stats
    whose metadata id it does not mark are dropped; a 2-D ``keep_lut`` is
    indexed by (``row_class``, metadata id). Stats keep their order.
    """
    n = starts.size
    if n and int(stops.max()) > buf.size:
        raise XPlaneDecodeError("a stat runs past the end of the data")
    keep = _StatFilter(keep_lut, row_class)
    usual, dropped = _decode_usual_stats(buf, starts, stops, keep)
    handled = np.zeros(n, dtype=bool)
    handled[usual.row] = True
    handled[dropped] = True
    other = np.flatnonzero(~handled & (stops > starts))
    if not other.size:
        return usual
    return _Stats.merged([usual, _decode_other_stats(buf, starts, stops, other, keep)])


def _decode_usual_stats(buf, starts, stops, keep: _StatFilter) -> tuple[_Stats, np.ndarray]:
    """Stats in the usual layout (``0x08 <id>``, one value to the end), in bulk.

    Returns (the stats decoded, rows dropped as unwanted). Rows in neither
    are left to :func:`_decode_other_stats`.
    """
    # The usual layout needs >= 4 bytes; then starts + 3 < stops <= buf.size,
    # so reading the first four bytes stays in bounds.
    rows = np.flatnonzero(stops - starts >= 4)
    rows = rows[buf[starts[rows]] == 0x08]
    at = starts[rows]
    metadata_id = buf[at + 1].astype(np.int64)
    value_tag_at = at + 2
    two = np.flatnonzero(metadata_id >= 0x80)
    if two.size:
        b2 = buf[at[two] + 2].astype(np.int64)
        metadata_id[two] = np.where(b2 < 0x80, (metadata_id[two] & 0x7F) | (b2 << 7), -1)
        value_tag_at[two] += 1
    dropped = np.zeros(0, dtype=np.int64)
    if keep.keep_lut is not None:
        wanted = keep.wanted(rows, metadata_id)
        dropped = rows[~wanted & (metadata_id >= 0)]
        rows, metadata_id, value_tag_at = rows[wanted], metadata_id[wanted], value_tag_at[wanted]
    stop = stops[rows]
    value_at = value_tag_at + 1
    fits = value_at < stop  # then the tag is < buf.size too
    kind = np.zeros(rows.size, dtype=np.int8)
    kind[fits] = _VALUE_TAGS[buf[value_tag_at[fits]]]
    usual = fits & (kind > 0) & (metadata_id >= 0)
    stats = _Stats(rows, metadata_id, kind, np.zeros(rows.size, dtype=np.uint64),
                   np.zeros(rows.size, dtype=np.int64), np.zeros(rows.size, dtype=np.int64))
    width = stop - value_at
    usual &= _read_doubles(buf, stats, usual, value_at, width)
    usual &= _read_varint_values(buf, stats, usual, value_at, width)
    usual &= _read_texts(buf, stats, usual, value_at, width, stop)
    return stats.take(np.flatnonzero(usual)), dropped


def _read_doubles(buf, stats: _Stats, usual, value_at, width) -> np.ndarray:
    """Doubles: exactly eight bytes. Returns False where the layout is not usual."""
    ok = np.ones(usual.size, dtype=bool)
    sel = np.flatnonzero(usual & (stats.kind == KIND_DOUBLE))
    good = width[sel] == 8
    ok[sel[~good]] = False
    if good.any():
        stats.raw[sel[good]] = fixed64(buf, value_at[sel[good]])
    return ok


def _read_varint_values(buf, stats: _Stats, usual, value_at, width) -> np.ndarray:
    """Varints: as long as what is left of the message, grouped by width so
    that each group is read with fixed offsets. Returns False where unusual."""
    ok = np.ones(usual.size, dtype=bool)
    kind = stats.kind
    rows = np.flatnonzero(usual & ((kind == KIND_UINT64) | (kind == KIND_INT64) | (kind == KIND_REF)))
    varint_width = width[rows]
    ok[rows[(varint_width < 1) | (varint_width > 10)]] = False
    # Group by width with a linear-time stable sort (widths fit a byte).
    order = np.argsort(np.clip(varint_width, 0, 11).astype(np.uint8), kind="stable")
    grouped = rows[order]
    edges = np.searchsorted(varint_width[order], np.arange(1, 12))
    for length in range(1, 11):
        sel = grouped[edges[length - 1] : edges[length]]
        if not sel.size:
            continue
        where = value_at[sel]
        value = np.zeros(sel.size, dtype=np.uint64)
        good = np.ones(sel.size, dtype=bool)
        for j in range(length):
            byte = buf[where + j]
            good &= (byte >= 0x80) if j < length - 1 else (byte < 0x80)
            value |= (byte & 0x7F).astype(np.uint64) << np.uint64(7 * j)
        stats.raw[sel] = value
        ok[sel[~good]] = False
    return ok


def _read_texts(buf, stats: _Stats, usual, value_at, width, stop) -> np.ndarray:
    """Strings and bytes: a one-byte length, then the text to the end.
    Returns False where the layout is not usual."""
    ok = np.ones(usual.size, dtype=bool)
    sel = np.flatnonzero(usual & ((stats.kind == KIND_STR) | (stats.kind == KIND_BYTES)))
    length = buf[value_at[sel]].astype(np.int64)
    good = (length < 0x80) & (width[sel] == 1 + length)
    ok[sel[~good]] = False
    sel = sel[good]
    stats.text_start[sel] = value_at[sel] + 1
    stats.text_stop[sel] = stop[sel]
    return ok


def _decode_other_stats(buf, starts, stops, other, keep: _StatFilter) -> _Stats:
    """Stats in any other layout (rows ``other``), through the field scanner."""
    scanned = scan_messages(
        buf, starts[other], stops[other],
        scalar_fields=(1, 2, 3, 4, 7), span_fields=(5, 6), oneof_fields=(2, 3, 4, 5, 6, 7),
    )
    kind = scanned.last_field.astype(np.int8)
    raw = np.zeros(other.size, dtype=np.uint64)
    for k in (KIND_DOUBLE, KIND_UINT64, KIND_INT64, KIND_REF):
        mine = kind == k
        raw[mine] = scanned.values[k][mine]
    text_start = np.zeros(other.size, dtype=np.int64)
    text_stop = np.zeros(other.size, dtype=np.int64)
    for k in (KIND_STR, KIND_BYTES):
        owner = scanned.span_owner[k]
        mine = kind[owner] == k  # the last value of the oneof wins
        text_start[owner[mine]] = scanned.span_start[k][mine]
        text_stop[owner[mine]] = scanned.span_stop[k][mine]
    metadata_id = scanned.values[1].view(np.int64)
    has_value = (kind > 0) & keep.wanted(other, metadata_id)
    stats = _Stats(other, metadata_id, kind, raw, text_start, text_stop)
    return stats.take(np.flatnonzero(has_value))
