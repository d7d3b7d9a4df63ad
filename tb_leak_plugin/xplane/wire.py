"""Reading the protobuf wire format of an XSpace, in place.

Two ways: one field at a time in Python (`read_fields`, for structure: the
space, its planes and lines), and many messages at a time with numpy
(`scan_messages`, `decode_stats`, for the millions of events and stats).
Only unusual layouts take slower, general paths, so any valid encoding
still decodes. `tb_leak_plugin.xplane.decode` builds the decoder from these.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from tb_leak_plugin.eventfile import records
from tb_leak_plugin.xplane.schema import (
    KIND_BYTES, KIND_DOUBLE, KIND_INT64, KIND_REF, KIND_STR, KIND_UINT64, XPlaneDecodeError,
)

_FAST_RECORDS_PER_ROUND = 4  # short fields read per message per round
_MAX_VARINT_BYTES = 10

# -- wire-format reading, one field at a time (structure) ------------------------------


def read_varint(data, pos: int, end: int) -> tuple[int, int]:
    """The varint at ``pos`` of a message ending at ``end``: (value, position after).

    Reads at most ten bytes (so a run of continuation bytes in a corrupt
    file costs nothing), through the event files' scalar reader.

    Raises:
      XPlaneDecodeError: the varint runs past ``end`` or is over ten bytes.
    """
    window = data[pos : min(end, pos + _MAX_VARINT_BYTES)]
    try:
        value, used = records.read_varint(window, 0)
    except IndexError:
        if pos + len(window) >= end:
            raise XPlaneDecodeError(
                f"varint runs past the end of its message at byte {pos}"
            ) from None
        raise XPlaneDecodeError(f"varint longer than 10 bytes at byte {pos}") from None
    return value, pos + used


def read_fields(data, pos: int, end: int, what: str):
    """Yield (number, wire type, value or (body start, body stop), field start, field stop)."""
    while pos < end:
        field_start = pos
        tag, pos = read_varint(data, pos, end)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise XPlaneDecodeError(f"invalid field number 0 in {what} at byte {field_start}")
        if wire == 0:
            value, pos = read_varint(data, pos, end)
            yield number, wire, value, field_start, pos
        elif wire == 2:
            length, pos = read_varint(data, pos, end)
            if pos + length > end:
                raise XPlaneDecodeError(
                    f"{what} field {number} at byte {field_start} claims {length} bytes, "
                    f"only {end - pos} remain"
                )
            yield number, wire, (pos, pos + length), field_start, pos + length
            pos += length
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            if pos + size > end:
                raise XPlaneDecodeError(f"{what} field {number} at byte {field_start} is cut short")
            yield number, wire, bytes(data[pos : pos + size]), field_start, pos + size
            pos += size
        else:
            raise XPlaneDecodeError(
                f"unsupported wire type {wire} in {what} at byte {field_start}"
            )


def as_signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


# -- wire-format reading, many messages at a time (numpy) -------------------------------


def read_varints(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Decode one varint at each position; return (uint64 values, positions after)."""
    if pos.size and int(pos.max()) >= buf.size:
        raise XPlaneDecodeError("a field runs past the end of the data")
    byte = buf[pos]
    values = (byte & 0x7F).astype(np.uint64)
    after = pos + 1
    more = np.flatnonzero(byte >= 0x80)
    shift = 7
    while more.size:
        if shift > 63:
            raise XPlaneDecodeError("varint longer than 10 bytes")
        at = after[more]
        if int(at.max()) >= buf.size:
            raise XPlaneDecodeError("a varint runs past the end of the data")
        byte = buf[at]
        values[more] |= (byte & 0x7F).astype(np.uint64) << np.uint64(shift)
        after[more] = at + 1
        more = more[byte >= 0x80]
        shift += 7
    return values, after


def _fixed64(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    if pos.size and int(pos.max()) + 8 > buf.size:
        raise XPlaneDecodeError("a 64-bit field runs past the end of the data")
    matrix = buf[pos[:, None] + np.arange(8)]
    return np.ascontiguousarray(matrix).view("<u8").ravel().astype(np.uint64)


@dataclasses.dataclass
class _Scanned:
    """Fields of many messages: scalars per message, spans per occurrence."""

    values: dict[int, np.ndarray]
    last_field: np.ndarray  # per message: the last oneof field seen (0 = none)
    span_owner: dict[int, np.ndarray]
    span_start: dict[int, np.ndarray]
    span_stop: dict[int, np.ndarray]


@dataclasses.dataclass
class _FieldPlan:
    """Which fields a scan keeps, with tag-byte tables for its fast paths."""

    scalar_fields: tuple[int, ...]
    span_fields: tuple[int, ...]
    oneof_fields: tuple[int, ...]
    span_filter: Callable | None
    short_span_field: np.ndarray  # tag byte -> span field read by the fast path, 0 = none
    short_varint_field: np.ndarray  # tag byte -> varint scalar field, 0 = none

    @classmethod
    def of(cls, scalar_fields, span_fields, oneof_fields, span_filter) -> "_FieldPlan":
        short_span_field = np.zeros(256, dtype=np.int8)
        for f in span_fields:
            if f < 16:
                short_span_field[(f << 3) | 2] = f
        short_varint_field = np.zeros(256, dtype=np.int8)
        for f in scalar_fields:
            if f < 16 and f not in oneof_fields:
                short_varint_field[f << 3] = f
        return cls(tuple(scalar_fields), tuple(span_fields), tuple(oneof_fields), span_filter,
                   short_span_field, short_varint_field)


@dataclasses.dataclass
class _Found:
    """What a scan has read so far: the last value of each scalar field per
    message, and every span of the span fields in the order read."""

    values: dict[int, np.ndarray]
    last_field: np.ndarray
    owners: dict[int, list]
    starts: dict[int, list]
    stops: dict[int, list]

    @classmethod
    def empty(cls, n: int, plan: _FieldPlan) -> "_Found":
        return cls(
            values={f: np.zeros(n, dtype=np.uint64) for f in plan.scalar_fields},
            last_field=np.zeros(n, dtype=np.int8),
            owners={f: [] for f in plan.span_fields},
            starts={f: [] for f in plan.span_fields},
            stops={f: [] for f in plan.span_fields},
        )

    def add_spans(self, field: int, owners, starts, stops) -> None:
        self.owners[field].append(owners)
        self.starts[field].append(starts)
        self.stops[field].append(stops)

    def set_scalars(self, fields: np.ndarray, messages: np.ndarray, value: np.ndarray) -> None:
        for f, column in self.values.items():
            mine = fields == f
            if mine.any():
                column[messages[mine]] = value[mine]

    def result(self) -> _Scanned:
        def cat(parts):
            return concat(parts, np.int64)

        return _Scanned(
            values=self.values,
            last_field=self.last_field,
            span_owner={f: cat(parts) for f, parts in self.owners.items()},
            span_start={f: cat(parts) for f, parts in self.starts.items()},
            span_stop={f: cat(parts) for f, parts in self.stops.items()},
        )


@dataclasses.dataclass
class _Open:
    """The messages a scan is still reading: which, where it is, where each ends."""

    index: np.ndarray
    pos: np.ndarray
    stop: np.ndarray


def scan_messages(buf, starts, stops, *, scalar_fields, span_fields, oneof_fields=(),
                   span_filter=None) -> _Scanned:
    """Read every field of the messages ``buf[starts[i]:stops[i]]`` in lockstep.

    Varint and fixed64 fields in ``scalar_fields`` are kept (the last one
    wins, as in protobuf); length-delimited fields in ``span_fields`` are
    returned as (owner, start, stop) per occurrence; other fields are
    skipped; ``last_field`` records the last of ``oneof_fields`` seen.
    ``span_filter(message rows, span starts) -> keep mask`` may drop short
    spans as they are found (stats nobody asked for).

    Each round reads one field of every message still open. Short
    length-delimited fields (a one-byte tag and length: nearly every stat of
    an event) take a cheap path; everything else the general one.
    """
    plan = _FieldPlan.of(scalar_fields, span_fields, oneof_fields, span_filter)
    found = _Found.empty(starts.size, plan)
    index = np.arange(starts.size, dtype=np.int64)
    pos = starts.astype(np.int64, copy=True)
    stop = stops.astype(np.int64, copy=False)
    live = pos < stop
    messages = _Open(index[live], pos[live], stop[live])
    if messages.index.size and int(messages.stop.max()) > buf.size:
        raise XPlaneDecodeError("a message runs past the end of the data")
    while messages.index.size:
        after = _read_one_round(buf, plan, found, messages)
        overrun = after > messages.stop
        if overrun.any():
            raise XPlaneDecodeError(
                f"a field at byte {int(messages.pos[overrun][0])} runs past the end of its message"
            )
        live = after < messages.stop
        messages = _Open(messages.index[live], after[live], messages.stop[live])
    return found.result()


def _read_one_round(buf, plan: _FieldPlan, found: _Found, messages: _Open) -> np.ndarray:
    """Read the next field (or run of short fields) of every open message;
    return the position after what was read, per message."""
    fast, after = _read_short_spans(buf, plan, found, messages)
    slow = np.flatnonzero(~fast) if np.count_nonzero(fast) < fast.size else np.zeros(0, np.int64)
    if slow.size and plan.scalar_fields:
        slow = _read_short_varints(buf, plan, found, messages, slow, after)
    if slow.size:
        field, value = _read_any_field(buf, plan, found, messages, slow, after)
        found.set_scalars(field, messages.index[slow], value)
        for f in plan.oneof_fields:
            mine = field == f
            if mine.any():
                found.last_field[messages.index[slow[mine]]] = f
    return after


def _read_short_spans(buf, plan: _FieldPlan, found: _Found, messages: _Open):
    """The fast path: span fields with a one-byte tag and length, up to
    ``_FAST_RECORDS_PER_ROUND`` in a row per message.

    Returns (mask of the messages read this way, position after per message;
    meaningful only where the mask is set, the other paths fill the rest).
    """
    pos, stop = messages.pos, messages.stop
    last_byte = buf.size - 1
    field_of_tag = plan.short_span_field[buf[pos]]
    length = buf[np.minimum(pos + 1, last_byte)]
    fast = (field_of_tag > 0) & (length < 0x80) & (pos + 1 < stop)
    after = pos + 2 + length
    chain = np.flatnonzero(fast)
    chain_pos, chain_field = pos[chain], field_of_tag[chain]
    for substep in range(_FAST_RECORDS_PER_ROUND):
        # Record the short fields just read, then read the next ones of the
        # same messages while they are short fields too.
        chain_after = after[chain]
        _record_short_spans(plan, found, messages.index, chain, chain_pos, chain_field,
                            chain_after)
        if substep == _FAST_RECORDS_PER_ROUND - 1:
            break
        more = chain_after < stop[chain]
        chain, chain_pos = chain[more], chain_after[more]
        if not chain.size:
            break
        chain_field = plan.short_span_field[buf[chain_pos]]
        length = buf[np.minimum(chain_pos + 1, last_byte)]
        ok = (chain_field > 0) & (length < 0x80) & (chain_pos + 1 < stop[chain])
        chain, chain_pos, chain_field = chain[ok], chain_pos[ok], chain_field[ok]
        after[chain] = chain_pos + 2 + length[ok]
    return fast, after


def _record_short_spans(plan, found, index, chain, chain_pos, chain_field, chain_after):
    """Keep the short spans just read (``chain`` rows of the open messages)."""
    for f in plan.span_fields:
        mine = slice(None) if len(plan.span_fields) == 1 else chain_field == f
        rows = chain[mine]
        if not rows.size:
            continue
        if f in plan.oneof_fields:
            found.last_field[index[rows]] = f
        body, end = chain_pos[mine] + 2, chain_after[mine]
        if plan.span_filter is not None:
            keep = plan.span_filter(index[rows], body)
            rows, body, end = rows[keep], body[keep], end[keep]
        found.add_spans(f, index[rows], body, end)


def _read_short_varints(buf, plan, found, messages, slow, after) -> np.ndarray:
    """Varint scalars with a one-byte tag (metadata_id, offset_ps ...) at
    ``slow`` rows; return the rows this did not read."""
    field_of_varint = plan.short_varint_field[buf[messages.pos[slow]]]
    plain = field_of_varint > 0
    rows = slow[plain]
    if rows.size:
        value, after[rows] = read_varints(buf, messages.pos[rows] + 1)
        found.set_scalars(field_of_varint[plain], messages.index[rows], value)
    return slow[~plain]


def _read_any_field(buf, plan, found, messages, rows, after):
    """Read one field at ``messages.pos[rows]`` (any tag, any wire type);
    return (field number, value: the varint or fixed64, or the span length)."""
    at = messages.pos[rows]
    tag, at = read_varints(buf, at)
    field = (tag >> np.uint64(3)).astype(np.int64)
    wire = (tag & np.uint64(7)).astype(np.int8)
    bad = ~np.isin(wire, (0, 1, 2, 5)) | (field == 0)
    if bad.any():
        raise XPlaneDecodeError(
            f"invalid field (number {int(field[bad][0])}, wire type {int(wire[bad][0])}) "
            f"at byte {int(messages.pos[rows][bad][0])}"
        )
    value = np.zeros(rows.size, dtype=np.uint64)
    end = at.copy()
    sel = np.flatnonzero(wire == 0)
    if sel.size:
        value[sel], end[sel] = read_varints(buf, at[sel])
    sel = np.flatnonzero(wire == 1)
    if sel.size:
        value[sel] = _fixed64(buf, at[sel])
        end[sel] = at[sel] + 8
    sel = np.flatnonzero(wire == 5)
    if sel.size:
        end[sel] = at[sel] + 4
    sel = np.flatnonzero(wire == 2)
    if sel.size:
        length, body = read_varints(buf, at[sel])
        value[sel] = length
        end[sel] = body + length.astype(np.int64)
        for f in plan.span_fields:
            mine = field[sel] == f
            if mine.any():
                found.add_spans(f, messages.index[rows[sel[mine]]], body[mine], end[sel[mine]])
    after[rows] = end
    return field, value


# -- stats ------------------------------------------------------------------------------


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
        stats.raw[sel[good]] = _fixed64(buf, value_at[sel[good]])
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


def concat(parts, dtype):
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)
