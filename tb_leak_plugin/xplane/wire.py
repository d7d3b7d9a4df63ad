"""Reading the protobuf wire format of an XSpace, in place.

Two ways: one field at a time in Python (`read_fields`, for structure: the
space, its planes and lines), and many messages at a time with numpy
(`scan_messages`, for the millions of events and stats; `stats.decode_stats`
decodes the stats found). Only unusual layouts take slower, general paths,
so any valid encoding still decodes. `tb_leak_plugin.xplane.decode` builds
the decoder from these.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from tb_leak_plugin.eventfile import records
from tb_leak_plugin.xplane.budget import STAT_SPAN_BYTES
from tb_leak_plugin.xplane.schema import XPlaneDecodeError

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
    """A varint's uint64 value read as the int64 it encodes."""
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


def fixed64(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """The little-endian 64-bit word at each position (uint64)."""
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
    spans: int = 0  # spans found so far
    charged: int = 0  # ... of them charged to a budget

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
        self.spans += owners.size
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
                   span_filter=None, budget=None) -> _Scanned:
    """Read every field of the messages ``buf[starts[i]:stops[i]]`` in lockstep.

    Varint and fixed64 fields in ``scalar_fields`` are kept (the last one
    wins, as in protobuf); length-delimited fields in ``span_fields`` are
    returned as (owner, start, stop) per occurrence; other fields are
    skipped; ``last_field`` records the last of ``oneof_fields`` seen.
    ``span_filter(message rows, span starts) -> keep mask`` may drop short
    spans as they are found (stats nobody asked for). With a ``budget``
    (a :class:`~tb_leak_plugin.xplane.budget.MemoryBudget`), the spans are
    charged round by round; the caller releases them.

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
        if budget is not None and found.spans > found.charged:
            budget.charge("stat spans", found.spans - found.charged, STAT_SPAN_BYTES)
            found.charged = found.spans
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
        value[sel] = fixed64(buf, at[sel])
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


def concat(parts, dtype):
    """The arrays ``parts`` joined as ``dtype`` (an empty array when there are none)."""
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)
