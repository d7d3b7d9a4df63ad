"""Reading the protobuf wire format of an XSpace, in place.

Two ways: one field at a time in Python (`read_fields`, for structure: the
space, its planes and lines), and many messages at a time with numpy
(`scan_messages`, `decode_stats`, for the millions of events and stats).
Only unusual layouts take slower, general paths, so any valid encoding
still decodes. `tb_leak_plugin.xplane.decode` builds the decoder from these.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tb_leak_plugin.xplane.schema import (
    KIND_BYTES, KIND_DOUBLE, KIND_INT64, KIND_REF, KIND_STR, KIND_UINT64, XPlaneDecodeError,
)

_FAST_RECORDS_PER_ROUND = 4  # short fields read per message per round

# -- wire-format reading, one field at a time (structure) ------------------------------


def read_varint(data, pos: int, end: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise XPlaneDecodeError(f"varint runs past the end of its message at byte {pos}")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise XPlaneDecodeError(f"varint longer than 10 bytes ending at byte {pos}")


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
    n = starts.size
    values = {f: np.zeros(n, dtype=np.uint64) for f in scalar_fields}
    last_field = np.zeros(n, dtype=np.int8)
    owners = {f: [] for f in span_fields}
    span_starts = {f: [] for f in span_fields}
    span_stops = {f: [] for f in span_fields}
    short_tags = np.zeros(256, dtype=np.int8)  # tag byte -> span field, 0 = none
    for f in span_fields:
        if f < 16:
            short_tags[(f << 3) | 2] = f
    varint_tags = np.zeros(256, dtype=np.int8)  # tag byte -> varint scalar field
    for f in scalar_fields:
        if f < 16 and f not in oneof_fields:
            varint_tags[f << 3] = f
    index = np.arange(n, dtype=np.int64)
    pos = starts.astype(np.int64, copy=True)
    stop = stops.astype(np.int64, copy=False)
    live = pos < stop
    index, pos, stop = index[live], pos[live], stop[live]
    if index.size and int(stop.max()) > buf.size:
        raise XPlaneDecodeError("a message runs past the end of the data")
    last_byte = buf.size - 1
    while index.size:
        field_of_tag = short_tags[buf[pos]]
        length = buf[np.minimum(pos + 1, last_byte)]
        fast = (field_of_tag > 0) & (length < 0x80) & (pos + 1 < stop)
        after = pos + 2 + length
        at = np.flatnonzero(fast)
        chain, chain_pos, chain_field = at, pos[at], field_of_tag[at]
        for substep in range(_FAST_RECORDS_PER_ROUND):
            # Record the short fields just read, then read the next ones of
            # the same messages while they are short fields too.
            chain_after = after[chain]
            for f in span_fields:
                mine = slice(None) if len(span_fields) == 1 else chain_field == f
                rows = chain[mine]
                if rows.size:
                    if f in oneof_fields:
                        last_field[index[rows]] = f
                    body, end = chain_pos[mine] + 2, chain_after[mine]
                    if span_filter is not None:
                        keep = span_filter(index[rows], body)
                        rows, body, end = rows[keep], body[keep], end[keep]
                    owners[f].append(index[rows])
                    span_starts[f].append(body)
                    span_stops[f].append(end)
            if substep == _FAST_RECORDS_PER_ROUND - 1:
                break
            more = chain_after < stop[chain]
            chain, chain_pos = chain[more], chain_after[more]
            if not chain.size:
                break
            chain_field = short_tags[buf[chain_pos]]
            length = buf[np.minimum(chain_pos + 1, last_byte)]
            ok = (chain_field > 0) & (length < 0x80) & (chain_pos + 1 < stop[chain])
            chain, chain_pos, chain_field = chain[ok], chain_pos[ok], chain_field[ok]
            after[chain] = chain_pos + 2 + length[ok]
        slow = np.flatnonzero(~fast) if at.size < index.size else at[:0]
        if slow.size and scalar_fields:
            # Varint fields with a one-byte tag (metadata_id, offset_ps ...).
            field_of_varint = varint_tags[buf[pos[slow]]]
            plain = field_of_varint > 0
            rows = slow[plain]
            if rows.size:
                value, after[rows] = read_varints(buf, pos[rows] + 1)
                fields = field_of_varint[plain]
                for f in scalar_fields:
                    mine = fields == f
                    if mine.any():
                        values[f][index[rows[mine]]] = value[mine]
                slow = slow[~plain]
        if slow.size:
            field, value = _field_step(buf, pos, slow, after, span_fields, owners,
                                       span_starts, span_stops, index)
            for f in scalar_fields:
                mine = field == f
                if mine.any():
                    values[f][index[slow[mine]]] = value[mine]
            for f in oneof_fields:
                mine = field == f
                if mine.any():
                    last_field[index[slow[mine]]] = f
        overrun = after > stop
        if overrun.any():
            raise XPlaneDecodeError(
                f"a field at byte {int(pos[overrun][0])} runs past the end of its message"
            )
        live = after < stop
        index, pos, stop = index[live], after[live], stop[live]

    def cat(parts):
        return concat(parts, np.int64)

    return _Scanned(
        values=values,
        last_field=last_field,
        span_owner={f: cat(owners[f]) for f in span_fields},
        span_start={f: cat(span_starts[f]) for f in span_fields},
        span_stop={f: cat(span_stops[f]) for f in span_fields},
    )


def _field_step(buf, pos, rows, after, span_fields, owners, span_starts, span_stops, index):
    """Read one field at ``pos[rows]`` (any tag, any wire type); return (field, value)."""
    at = pos[rows]
    tag, at = read_varints(buf, at)
    field = (tag >> np.uint64(3)).astype(np.int64)
    wire = (tag & np.uint64(7)).astype(np.int8)
    bad = ~np.isin(wire, (0, 1, 2, 5)) | (field == 0)
    if bad.any():
        raise XPlaneDecodeError(
            f"invalid field (number {int(field[bad][0])}, wire type {int(wire[bad][0])}) "
            f"at byte {int(pos[rows][bad][0])}"
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
        for f in span_fields:
            mine = field[sel] == f
            if mine.any():
                owners[f].append(index[rows[sel[mine]]])
                span_starts[f].append(body[mine])
                span_stops[f].append(end[sel[mine]])
    after[rows] = end
    return field, value


@dataclasses.dataclass
class _Stats:
    """Decoded XStats, one entry each: metadata id, value kind, raw bits, text span."""

    row: np.ndarray  # index into the stat spans given to decode_stats
    metadata_id: np.ndarray
    kind: np.ndarray
    raw: np.ndarray
    text_start: np.ndarray
    text_stop: np.ndarray


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
    drop = np.zeros(n, dtype=bool)
    if keep_lut is not None:
        known = (metadata_id >= 0) & (metadata_id < keep_lut.shape[-1])
        wanted = np.zeros(rows.size, dtype=bool)
        if keep_lut.ndim == 2:
            wanted[known] = keep_lut[row_class[rows[known]], metadata_id[known]]
        else:
            wanted[known] = keep_lut[metadata_id[known]]
        drop[rows[~wanted & (metadata_id >= 0)]] = True
        rows, metadata_id, value_tag_at = rows[wanted], metadata_id[wanted], value_tag_at[wanted]
    stop = stops[rows]
    value_at = value_tag_at + 1
    fits = value_at < stop  # then the tag is < buf.size too
    kind = np.zeros(rows.size, dtype=np.int8)
    kind[fits] = _VALUE_TAGS[buf[value_tag_at[fits]]]
    usual = fits & (kind > 0) & (metadata_id >= 0)
    raw = np.zeros(rows.size, dtype=np.uint64)
    text_start = np.zeros(rows.size, dtype=np.int64)
    text_stop = np.zeros(rows.size, dtype=np.int64)
    width = stop - value_at
    # Doubles: exactly eight bytes.
    sel = np.flatnonzero(usual & (kind == KIND_DOUBLE))
    good = width[sel] == 8
    usual[sel[~good]] = False
    if good.any():
        raw[sel[good]] = _fixed64(buf, value_at[sel[good]])
    # Varints: as long as what is left of the message.
    varint_rows = np.flatnonzero(
        usual & ((kind == KIND_UINT64) | (kind == KIND_INT64) | (kind == KIND_REF))
    )
    varint_width = width[varint_rows]
    usual[varint_rows[(varint_width < 1) | (varint_width > 10)]] = False
    # Group by width with a linear-time stable sort (widths fit a byte).
    order = np.argsort(np.clip(varint_width, 0, 11).astype(np.uint8), kind="stable")
    grouped = varint_rows[order]
    sorted_width = varint_width[order]
    edges = np.searchsorted(sorted_width, np.arange(1, 12))
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
        raw[sel] = value
        usual[sel[~good]] = False
    # Strings and bytes: a one-byte length, then the text to the end.
    sel = np.flatnonzero(usual & ((kind == KIND_STR) | (kind == KIND_BYTES)))
    length = buf[value_at[sel]].astype(np.int64)
    good = (length < 0x80) & (width[sel] == 1 + length)
    usual[sel[~good]] = False
    sel = sel[good]
    text_start[sel] = value_at[sel] + 1
    text_stop[sel] = stop[sel]

    done = np.flatnonzero(usual)
    result = [(rows[done], metadata_id[done], kind[done], raw[done], text_start[done],
               text_stop[done])]
    usual = np.zeros(n, dtype=bool)
    usual[rows[done]] = True
    other = np.flatnonzero(~usual & ~drop & (stops > starts))
    if other.size:
        scanned = scan_messages(
            buf, starts[other], stops[other],
            scalar_fields=(1, 2, 3, 4, 7), span_fields=(5, 6), oneof_fields=(2, 3, 4, 5, 6, 7),
        )
        o_kind = scanned.last_field.astype(np.int8)
        o_raw = np.zeros(other.size, dtype=np.uint64)
        for k in (KIND_DOUBLE, KIND_UINT64, KIND_INT64, KIND_REF):
            mine = o_kind == k
            o_raw[mine] = scanned.values[k][mine]
        o_start = np.zeros(other.size, dtype=np.int64)
        o_stop = np.zeros(other.size, dtype=np.int64)
        for k in (KIND_STR, KIND_BYTES):
            owner = scanned.span_owner[k]
            mine = o_kind[owner] == k  # the last value of the oneof wins
            o_start[owner[mine]] = scanned.span_start[k][mine]
            o_stop[owner[mine]] = scanned.span_stop[k][mine]
        o_id = scanned.values[1].view(np.int64)
        has_value = o_kind > 0
        if keep_lut is not None:
            in_lut = (o_id >= 0) & (o_id < keep_lut.shape[-1])
            slot = np.where(in_lut, o_id, 0)
            if keep_lut.ndim == 2:
                has_value &= in_lut & keep_lut[row_class[other], slot]
            else:
                has_value &= in_lut & keep_lut[slot]
        sel = np.flatnonzero(has_value)
        result.append((other[sel], o_id[sel], o_kind[sel], o_raw[sel], o_start[sel], o_stop[sel]))
    if len(result) == 1:
        return _Stats(*result[0])
    parts = [np.concatenate(column) for column in zip(*result)]
    if other.size:
        order = np.argsort(parts[0], kind="stable")  # keep the written order of stats
        parts = [part[order] for part in parts]
    return _Stats(*parts)


def concat(parts, dtype):
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)
