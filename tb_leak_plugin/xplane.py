"""The profiler's XSpace / XPlane format, without TensorFlow.

Two things live here:

* Message classes for ``tensorflow/tsl/profiler/protobuf/xplane.proto``
  (:data:`XSpace`, :data:`XPlane`, ...), built at import time from a
  descriptor, for writing test traces and reading plane metadata. Only the
  TensorFlow wheel ships a generated module, and the plugin must run where
  TensorFlow is absent.
* :func:`decode_space`, a columnar decoder for large traces. Parsing a 40 MB
  trace into messages and walking its million events in Python takes longer
  than the whole analysis may, and holds several copies of the file.
  Instead the wire format is read in place with numpy:

  - a line's events are found by their byte signature and confirmed by
    stepping from record to record by length (exact; :func:`_walk_events`);
  - each event's metadata id (its first field) selects the events to keep:
    those whose name the caller asks for, or whose kind carries a given
    stat in a few sampled events (step markers, tf.function calls);
  - kept events are decoded a block at a time, all messages of a block one
    field per round; their stats, whose value ends the message, decode in
    bulk (:func:`_decode_stats`). Only unusual layouts take slower, general
    paths, so any valid encoding still decodes.

  Memory: the file's bytes plus about 21 bytes per kept stat.

Timestamps: an event's absolute time is ``line.timestamp_ns * 1000 +
event.offset_ps`` picoseconds. :func:`decode_space` returns times relative to
the earliest line of the space (``DecodedSpace.base_ns``) so that they fit in
int64 even when lines carry wall-clock nanoseconds.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Collection

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

# -- message classes ---------------------------------------------------------------

_F = descriptor_pb2.FieldDescriptorProto
_PACKAGE = "tb_leak.xplane"


def _add_fields(message, fields):
    for number, name, kind, label, type_name, oneof in fields:
        field = message.field.add(name=name, number=number, type=kind, label=label)
        if type_name:
            field.type_name = f".{_PACKAGE}.{type_name}"
        if oneof is not None:
            field.oneof_index = oneof


def _map_entry(parent, entry_name, value_type):
    entry = parent.nested_type.add(name=entry_name)
    entry.options.map_entry = True
    _add_fields(
        entry,
        [
            (1, "key", _F.TYPE_INT64, _F.LABEL_OPTIONAL, None, None),
            (2, "value", _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, value_type, None),
        ],
    )
    return f"XPlane.{entry_name}"


def _build_classes():
    opt, rep = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
    fdp = descriptor_pb2.FileDescriptorProto(
        name="tb_leak_plugin/xplane.proto", package=_PACKAGE, syntax="proto3"
    )
    space = fdp.message_type.add(name="XSpace")
    _add_fields(
        space,
        [
            (1, "planes", _F.TYPE_MESSAGE, rep, "XPlane", None),
            (2, "errors", _F.TYPE_STRING, rep, None, None),
            (3, "warnings", _F.TYPE_STRING, rep, None, None),
            (4, "hostnames", _F.TYPE_STRING, rep, None, None),
        ],
    )
    plane = fdp.message_type.add(name="XPlane")
    event_entry = _map_entry(plane, "EventMetadataEntry", "XEventMetadata")
    stat_entry = _map_entry(plane, "StatMetadataEntry", "XStatMetadata")
    _add_fields(
        plane,
        [
            (1, "id", _F.TYPE_INT64, opt, None, None),
            (2, "name", _F.TYPE_STRING, opt, None, None),
            (3, "lines", _F.TYPE_MESSAGE, rep, "XLine", None),
            (4, "event_metadata", _F.TYPE_MESSAGE, rep, event_entry, None),
            (5, "stat_metadata", _F.TYPE_MESSAGE, rep, stat_entry, None),
            (6, "stats", _F.TYPE_MESSAGE, rep, "XStat", None),
        ],
    )
    line = fdp.message_type.add(name="XLine")
    _add_fields(
        line,
        [
            (1, "id", _F.TYPE_INT64, opt, None, None),
            (10, "display_id", _F.TYPE_INT64, opt, None, None),
            (2, "name", _F.TYPE_STRING, opt, None, None),
            (11, "display_name", _F.TYPE_STRING, opt, None, None),
            (3, "timestamp_ns", _F.TYPE_INT64, opt, None, None),
            (9, "duration_ps", _F.TYPE_INT64, opt, None, None),
            (4, "events", _F.TYPE_MESSAGE, rep, "XEvent", None),
        ],
    )
    event = fdp.message_type.add(name="XEvent")
    event.oneof_decl.add(name="data")
    _add_fields(
        event,
        [
            (1, "metadata_id", _F.TYPE_INT64, opt, None, None),
            (2, "offset_ps", _F.TYPE_INT64, opt, None, 0),
            (5, "num_occurrences", _F.TYPE_INT64, opt, None, 0),
            (3, "duration_ps", _F.TYPE_INT64, opt, None, None),
            (4, "stats", _F.TYPE_MESSAGE, rep, "XStat", None),
        ],
    )
    stat = fdp.message_type.add(name="XStat")
    stat.oneof_decl.add(name="value")
    _add_fields(
        stat,
        [
            (1, "metadata_id", _F.TYPE_INT64, opt, None, None),
            (2, "double_value", _F.TYPE_DOUBLE, opt, None, 0),
            (3, "uint64_value", _F.TYPE_UINT64, opt, None, 0),
            (4, "int64_value", _F.TYPE_INT64, opt, None, 0),
            (5, "str_value", _F.TYPE_STRING, opt, None, 0),
            (6, "bytes_value", _F.TYPE_BYTES, opt, None, 0),
            (7, "ref_value", _F.TYPE_UINT64, opt, None, 0),
        ],
    )
    event_metadata = fdp.message_type.add(name="XEventMetadata")
    _add_fields(
        event_metadata,
        [
            (1, "id", _F.TYPE_INT64, opt, None, None),
            (2, "name", _F.TYPE_STRING, opt, None, None),
            (4, "display_name", _F.TYPE_STRING, opt, None, None),
            (3, "metadata", _F.TYPE_BYTES, opt, None, None),
            (5, "stats", _F.TYPE_MESSAGE, rep, "XStat", None),
            (6, "child_id", _F.TYPE_INT64, rep, None, None),
        ],
    )
    stat_metadata = fdp.message_type.add(name="XStatMetadata")
    _add_fields(
        stat_metadata,
        [
            (1, "id", _F.TYPE_INT64, opt, None, None),
            (2, "name", _F.TYPE_STRING, opt, None, None),
            (3, "description", _F.TYPE_STRING, opt, None, None),
        ],
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    names = "XSpace XPlane XLine XEvent XStat XEventMetadata XStatMetadata".split()
    return [
        message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{n}"))
        for n in names
    ]


XSpace, XPlane, XLine, XEvent, XStat, XEventMetadata, XStatMetadata = _build_classes()

# XStat value kinds, named by their field numbers.
KIND_NONE, KIND_DOUBLE, KIND_UINT64, KIND_INT64, KIND_STR, KIND_BYTES, KIND_REF = (
    0,
    2,
    3,
    4,
    5,
    6,
    7,
)


class XPlaneDecodeError(ValueError):
    """Bytes that are not a readable XSpace (truncated, corrupt or not a trace)."""


# -- decoded, columnar form ----------------------------------------------------------


@dataclasses.dataclass
class PlaneEvents:
    """The selected events of one XPlane, one array entry per event.

    Attributes:
      name: the plane name, e.g. ``/host:CPU`` or ``/device:GPU:0``.
      event_names: event metadata id -> event name.
      stat_names: stat metadata id -> stat name.
      line_names: names of the plane's lines; ``line`` indexes this list.
      total_events: all events of the plane, selected or not.
      line: int32 line index of each selected event.
      metadata_id: int64 event metadata id.
      start_ps: int64 start in picoseconds since ``DecodedSpace.base_ns``.
      duration_ps: int64 duration in picoseconds.
      strings: interned string values (str and bytes stats).
      stat_event, stat_id, stat_kind, stat_raw, stat_string: one entry per
        stat of a selected event: the event's index, the stat metadata id,
        the value kind (``KIND_*``), the raw 64 bits (int, uint, double bits
        or ref id) and, for str / bytes values, the index into ``strings``.
      metadata_stats: event metadata id -> {stat name: value} for stats set
        on the XEventMetadata (they apply to every event of that metadata).
    """

    name: str
    event_names: dict[int, str]
    stat_names: dict[int, str]
    line_names: list[str]
    total_events: int
    line: np.ndarray
    metadata_id: np.ndarray
    start_ps: np.ndarray
    duration_ps: np.ndarray
    strings: list[str]
    stat_event: np.ndarray
    stat_id: np.ndarray
    stat_kind: np.ndarray
    stat_raw: np.ndarray
    stat_string: np.ndarray
    metadata_stats: dict[int, dict[str, object]]

    def __len__(self) -> int:
        return int(self.metadata_id.size)

    def names(self) -> np.ndarray:
        """Event name of each selected event (object array)."""
        lookup = {mid: self.event_names.get(int(mid), "") for mid in np.unique(self.metadata_id)}
        return np.array([lookup[m] for m in self.metadata_id.tolist()], dtype=object)

    def _stat_rows(self, name: str) -> np.ndarray:
        """Rows of ``stat_*`` holding stat ``name``, in order."""
        ids = [sid for sid, sname in self.stat_names.items() if sname == name]
        if not ids:
            return np.zeros(0, dtype=np.int64)
        index = self.__dict__.get("_rows_by_id")
        if index is None:
            index = self.__dict__["_rows_by_id"] = _rows_by_value(self.stat_id)
        if index is not False:
            order, values, bounds = index
            found = np.searchsorted(values, ids)
            parts = [order[bounds[f] : bounds[f + 1]] for f, sid in zip(found.tolist(), ids)
                     if f < values.size and values[f] == sid]
            if len(parts) == 1:
                return parts[0]
            return np.sort(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)
        return np.flatnonzero(np.isin(self.stat_id, ids))

    def int_stat(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """Return (int64 values, present mask) of stat ``name`` per event.

        Every value kind is accepted: ints as is (uint64 keeps its bit
        pattern), doubles truncated, str / bytes / ref parsed as integers when
        they spell one. Stats on the event metadata fill in missing values.
        """
        values = np.zeros(len(self), dtype=np.int64)
        present = np.zeros(len(self), dtype=bool)
        self._fill_from_metadata(name, values, present, _as_int)
        rows = self._stat_rows(name)
        if rows.size:
            kinds = self.stat_kind[rows]
            raw = self.stat_raw[rows]
            got = np.zeros(rows.size, dtype=np.int64)
            ok = (kinds == KIND_INT64) | (kinds == KIND_UINT64)
            got[ok] = raw[ok].view(np.int64)
            doubles = np.flatnonzero(kinds == KIND_DOUBLE)
            if doubles.size:
                as_float = raw[doubles].view(np.float64)
                fits = np.isfinite(as_float) & (np.abs(as_float) < 2.0**63)
                got[doubles[fits]] = as_float[fits].astype(np.int64)
                ok[doubles[fits]] = True
            # Texts (and refs, whose value is a stat name) that spell numbers:
            # convert each distinct text once.
            for kind in (KIND_STR, KIND_BYTES, KIND_REF):
                sel = np.flatnonzero(kinds == kind)
                if not sel.size:
                    continue
                keys = self.stat_string[rows[sel]] if kind != KIND_REF else raw[sel]
                distinct, inverse = _distinct(keys)
                numbers = [
                    _as_int(self.strings[k] if kind != KIND_REF else self.stat_names.get(k, ""))
                    for k in distinct.tolist()
                ]
                parsed = np.array([0 if v is None else v for v in numbers], dtype=np.int64)
                valid = np.array([v is not None for v in numbers], dtype=bool)
                got[sel] = parsed[inverse]
                ok[sel] = valid[inverse]
            events = self.stat_event[rows][ok]
            values[events] = got[ok]
            present[events] = True
        return values, present

    def str_stat(self, name: str) -> tuple[np.ndarray, list[str]]:
        """Return (int32 codes, table) of stat ``name`` per event; -1 = absent.

        ``table[code]`` is the value as text: str / bytes values decoded as
        UTF-8, ref values as the name of the referenced stat metadata,
        numbers written out.
        """
        codes = np.full(len(self), -1, dtype=np.int32)
        table: list[str] = []
        index: dict[str, int] = {}

        def code_of(text: str) -> int:
            code = index.get(text)
            if code is None:
                code = index[text] = len(table)
                table.append(text)
            return code

        for mid, stats in self.metadata_stats.items():
            if name in stats:
                codes[self.metadata_id == mid] = code_of(_as_text(stats[name]))
        rows = self._stat_rows(name)
        if rows.size:
            kinds = self.stat_kind[rows]
            raw = self.stat_raw[rows]
            got = np.full(rows.size, -1, dtype=np.int32)
            strs = np.flatnonzero((kinds == KIND_STR) | (kinds == KIND_BYTES))
            if strs.size:
                string_codes = self.stat_string[rows[strs]]
                uniq, inverse = _distinct(string_codes)
                mapped = np.array([code_of(self.strings[u]) for u in uniq.tolist()], dtype=np.int32)
                got[strs] = mapped[inverse]
            for kind in (KIND_REF, KIND_INT64, KIND_UINT64, KIND_DOUBLE):
                sel = np.flatnonzero(kinds == kind)
                if not sel.size:
                    continue
                uniq, inverse = _distinct(raw[sel])
                mapped = np.array(
                    [code_of(self._raw_text(kind, int(u))) for u in uniq.tolist()], dtype=np.int32
                )
                got[sel] = mapped[inverse]
            ok = got >= 0
            codes[self.stat_event[rows][ok]] = got[ok]
        return codes, table

    def has_stat(self, name: str) -> np.ndarray:
        """Bool mask: the event (or its metadata) carries stat ``name``."""
        mask = np.zeros(len(self), dtype=bool)
        for mid, stats in self.metadata_stats.items():
            if name in stats:
                mask |= self.metadata_id == mid
        mask[self.stat_event[self._stat_rows(name)]] = True
        return mask

    def _raw_text(self, kind: int, raw: int) -> str:
        if kind == KIND_REF:
            return self.stat_names.get(raw, "")
        if kind == KIND_INT64:
            return str(raw - (1 << 64) if raw >= 1 << 63 else raw)
        if kind == KIND_DOUBLE:
            return repr(float(np.array([raw], dtype=np.uint64).view(np.float64)[0]))
        return str(raw)

    def _fill_from_metadata(self, name, values, present, convert):
        for mid, stats in self.metadata_stats.items():
            if name in stats:
                number = convert(stats[name])
                if number is not None:
                    mask = self.metadata_id == mid
                    values[mask] = number
                    present[mask] = True


def _rows_by_value(values: np.ndarray):
    """(row order grouped by value, distinct values, group bounds), or False.

    Only for values that fit 16 bits, where numpy's stable sort is a radix
    sort (linear time).
    """
    if not values.size or int(values.min()) < 0 or int(values.max()) >= 1 << 16:
        return False
    order = np.argsort(values.astype(np.uint16), kind="stable")
    counts = np.bincount(values)
    present = np.flatnonzero(counts)
    bounds = np.concatenate(([0], np.cumsum(counts[present])))
    return order, present, bounds


def _distinct(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct values, index of each value among them); O(n) for small ints."""
    if values.size and values.dtype.kind in "iu":
        low, high = int(values.min()), int(values.max())
        if low >= 0 and high < 1 << 20:
            seen = np.zeros(high + 1, dtype=bool)
            seen[values] = True
            distinct = np.flatnonzero(seen)
            slot = np.zeros(high + 1, dtype=np.int64)
            slot[distinct] = np.arange(distinct.size)
            return distinct.astype(values.dtype), slot[values]
    distinct, inverse = np.unique(values, return_inverse=True)
    return distinct, inverse.ravel()


def _as_int(value) -> int | None:
    """An int64 for a stat value, or None (uint64 values keep their bit pattern)."""
    if isinstance(value, float):
        if not (np.isfinite(value) and abs(value) < 2.0**63):
            return None
        number = int(value)
    elif isinstance(value, int):
        number = int(value)
    else:
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        text = str(value).strip()
        try:
            number = int(text, 16) if text[:2].lower() == "0x" else int(text)
        except ValueError:
            try:
                as_float = float(text)
            except ValueError:
                return None
            return _as_int(as_float)
    if (1 << 63) <= number < (1 << 64):
        number -= 1 << 64
    return number if -(1 << 63) <= number < (1 << 63) else None


def _as_text(value) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


@dataclasses.dataclass
class DecodedSpace:
    """The planes of an XSpace, with their selected events (see :func:`decode_space`)."""

    planes: list[PlaneEvents]
    base_ns: int
    hostnames: list[str]


# -- wire-format reading, one field at a time (structure) ------------------------------


def _varint(data, pos: int, end: int) -> tuple[int, int]:
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


def _fields(data, pos: int, end: int, what: str):
    """Yield (number, wire type, value or (body start, body stop), field start, field stop)."""
    while pos < end:
        field_start = pos
        tag, pos = _varint(data, pos, end)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise XPlaneDecodeError(f"invalid field number 0 in {what} at byte {field_start}")
        if wire == 0:
            value, pos = _varint(data, pos, end)
            yield number, wire, value, field_start, pos
        elif wire == 2:
            length, pos = _varint(data, pos, end)
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


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


# -- wire-format reading, many messages at a time (numpy) -------------------------------


def _varints(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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


def _scan_messages(buf, starts, stops, *, scalar_fields, span_fields, oneof_fields=(),
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
                value, after[rows] = _varints(buf, pos[rows] + 1)
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
        return _concat(parts, np.int64)

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
    tag, at = _varints(buf, at)
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
        value[sel], end[sel] = _varints(buf, at[sel])
    sel = np.flatnonzero(wire == 1)
    if sel.size:
        value[sel] = _fixed64(buf, at[sel])
        end[sel] = at[sel] + 8
    sel = np.flatnonzero(wire == 5)
    if sel.size:
        end[sel] = at[sel] + 4
    sel = np.flatnonzero(wire == 2)
    if sel.size:
        length, body = _varints(buf, at[sel])
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

    row: np.ndarray  # index into the stat spans given to _decode_stats
    metadata_id: np.ndarray
    kind: np.ndarray
    raw: np.ndarray
    text_start: np.ndarray
    text_stop: np.ndarray


_VALUE_TAGS = np.zeros(256, dtype=np.int8)  # value tag byte -> kind
for _kind, _wire in ((KIND_DOUBLE, 1), (KIND_UINT64, 0), (KIND_INT64, 0), (KIND_STR, 2),
                     (KIND_BYTES, 2), (KIND_REF, 0)):
    _VALUE_TAGS[(_kind << 3) | _wire] = _kind


def _decode_stats(buf, starts, stops, keep_lut=None, row_class=None) -> _Stats:
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
        scanned = _scan_messages(
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


# -- splitting a line into its events ------------------------------------------------------

_EVENT_TAG = 0x22  # XLine.events: field 4, length-delimited
_SCAN_BYTES = 1 << 20  # bytes searched for event starts at a time


def _event_starts(buf, start, stop):
    """Positions in [start, stop) that look like an XEvent record, and where it ends.

    The signature is how events are written: ``0x22 <length> 0x08 <metadata
    id> 0x10`` (the events field, then metadata_id, then offset_ps; lengths
    and ids of one or two bytes). Stats nested in an event never match (their
    second field is never 0x10), and a stray match inside an event is never
    followed: see :func:`_walk_events`.
    """
    records, bodies, ends, ids = [], [], [], []
    last = min(stop, buf.size) - 7  # the signature reads up to 6 bytes ahead
    for low in range(start, last, _SCAN_BYTES):
        high = min(last, low + _SCAN_BYTES)
        at = low + np.flatnonzero(buf[low:high] == _EVENT_TAG)
        # Cheap first cut: offset_ps's tag sits 4, 5 or 6 bytes in.
        at = at[(buf[at + 4] == 0x10) | (buf[at + 5] == 0x10) | (buf[at + 6] == 0x10)]
        first = buf[at + 1]
        long_length = first >= 0x80
        second = buf[at + 2]
        ok = ~long_length | (second < 0x80)
        length = np.where(long_length, (first & 0x7F).astype(np.int64) | (second.astype(np.int64) << 7),
                          first.astype(np.int64))
        body = at + 2 + long_length
        ok &= buf[body] == 0x08
        id_first = buf[body + 1]
        id_second = buf[body + 2]
        long_id = id_first >= 0x80
        ok &= ~long_id | (id_second < 0x80)
        ok &= buf[body + 2 + long_id] == 0x10
        end = body + length
        ok &= end <= stop
        records.append(at[ok])
        bodies.append(body[ok])
        ends.append(end[ok])
        metadata_id = np.where(long_id, (id_first & 0x7F).astype(np.int64)
                               | (id_second.astype(np.int64) << 7), id_first.astype(np.int64))
        ids.append(metadata_id[ok])
    return (_concat(records, np.int64), _concat(bodies, np.int64), _concat(ends, np.int64),
            _concat(ids, np.int64))


def _walk_events(data, buf, first, stop):
    """Spans of the run of XLine.events records that starts at ``first``.

    Exact: it steps from one record to the next by the record's length, as
    a protobuf parser does, but a whole stretch of records at once where the
    candidates of :func:`_event_starts` already chain up; only records the
    signature misses (and stray candidates) cost a Python step.

    Returns (body starts, body stops, metadata ids, position after the run);
    the metadata id is -1 where the event did not start with it.
    """
    records, bodies, ends, ids = _event_starts(buf, first, stop)
    chained = np.zeros(records.size, dtype=bool)
    chained[:-1] = ends[:-1] == records[1:]
    breaks = np.flatnonzero(~chained)  # the last candidate always breaks
    pieces_start, pieces_stop, pieces_id, extra_start, extra_stop = [], [], [], [], []

    def flush_extra():
        pieces_start.append(np.array(extra_start, dtype=np.int64))
        pieces_stop.append(np.array(extra_stop, dtype=np.int64))
        pieces_id.append(np.full(len(extra_start), -1, dtype=np.int64))
        extra_start.clear()
        extra_stop.clear()

    pos = first
    while pos < stop and data[pos] == _EVENT_TAG:
        k = int(np.searchsorted(records, pos))
        if k < records.size and records[k] == pos:
            if extra_start:
                flush_extra()
            j = int(breaks[np.searchsorted(breaks, k)])
            pieces_start.append(bodies[k : j + 1])
            pieces_stop.append(ends[k : j + 1])
            pieces_id.append(ids[k : j + 1])
            pos = int(ends[j])
        else:
            length, body = _varint(data, pos + 1, stop)
            if body + length > stop:
                raise XPlaneDecodeError(
                    f"XLine event at byte {pos} claims {length} bytes, only {stop - body} remain"
                )
            extra_start.append(body)
            extra_stop.append(body + length)
            pos = body + length
    if extra_start:
        flush_extra()
    return (_concat(pieces_start, np.int64), _concat(pieces_stop, np.int64),
            _concat(pieces_id, np.int64), pos)


@dataclasses.dataclass
class _Line:
    name: str
    timestamp_ns: int
    starts: np.ndarray  # event body spans
    stops: np.ndarray
    first_ids: np.ndarray  # metadata id when it is the event's first field, else -1


def _read_line(data, buf, start, stop) -> _Line:
    header = {}
    starts, stops, ids = [], [], []
    pos = start
    while pos < stop:
        if data[pos] == _EVENT_TAG:
            run_starts, run_stops, run_ids, pos = _walk_events(data, buf, pos, stop)
            starts.append(run_starts)
            stops.append(run_stops)
            ids.append(run_ids)
            continue
        for number, wire, value, _, field_stop in _fields(data, pos, stop, "XLine"):
            if number == 4:
                raise XPlaneDecodeError("XLine.events has the wrong wire type")
            header[number] = (wire, value)
            pos = field_stop
            break

    def text(number):
        wire, value = header.get(number, (None, None))
        return bytes(data[value[0] : value[1]]).decode("utf-8", "replace") if wire == 2 else ""

    wire, stamp = header.get(3, (None, 0))
    return _Line(
        name=text(11) or text(2),
        timestamp_ns=_signed(stamp) if wire == 0 else 0,
        starts=_concat(starts, np.int64),
        stops=_concat(stops, np.int64),
        first_ids=_concat(ids, np.int64),
    )


# -- decoding a whole space ---------------------------------------------------------------


def _stat_value(stat, stat_names):
    """The Python value of an XStat message; a ref becomes the name it points to."""
    kind = stat.WhichOneof("value")
    if kind == "ref_value":
        return stat_names.get(stat.ref_value, "")
    return None if kind is None else getattr(stat, kind)


def _read_plane_header(data, start, stop):
    """Return (the plane without its lines, parsed; the lines' byte spans)."""
    line_spans, other = [], []
    for number, wire, value, field_start, field_stop in _fields(data, start, stop, "XPlane"):
        if number == 3 and wire == 2:
            line_spans.append(value)
        else:
            other.append(bytes(data[field_start:field_stop]))
    plane = XPlane()
    try:
        plane.ParseFromString(b"".join(other))
    except Exception as error:
        raise XPlaneDecodeError(f"plane metadata is corrupt: {error}") from None
    return plane, line_spans


def decode_space(
    data: bytes,
    *,
    select_names: Callable[[str], bool],
    select_stats: Collection[str] = (),
    value_stats: Collection[str] | None = None,
    value_stats_by_event: dict[str, Collection[str]] | None = None,
    samples_per_kind: int = 3,
) -> DecodedSpace:
    """Decode an XSpace, keeping only the events the caller asks for.

    Args:
      data: the serialized XSpace (a whole ``*.xplane.pb`` file).
      select_names: keeps every event whose metadata name it accepts.
      select_stats: also keeps every event of an event metadata whose
        metadata stats, or whose first ``samples_per_kind`` events on each
        line, carry one of these stats (step markers, tf.function calls).
      value_stats: stat names whose values are kept (None: all).
      value_stats_by_event: for events of these names, keep these stats'
        values instead.

    Returns:
      A :class:`DecodedSpace` whose planes hold the selected events as
      arrays, times in picoseconds since ``base_ns``.

    Raises:
      XPlaneDecodeError: the bytes are not a readable XSpace.
    """
    buf = np.frombuffer(data, dtype=np.uint8)
    plane_spans, hostnames = [], []
    for number, wire, value, field_start, _ in _fields(data, 0, len(data), "XSpace"):
        if number == 1 and wire == 2:
            plane_spans.append(value)
        elif number == 4 and wire == 2:
            hostnames.append(bytes(data[value[0] : value[1]]).decode("utf-8", "replace"))
        elif number not in (2, 3, 4) or wire != 2:
            raise XPlaneDecodeError(
                f"not an XSpace: unexpected field {number} (wire type {wire}) at byte {field_start}"
            )
    if not plane_spans:
        raise XPlaneDecodeError("the data holds no XPlane")
    headers = []
    for start, stop in plane_spans:
        plane, line_spans = _read_plane_header(data, start, stop)
        lines = [_read_line(data, buf, a, b) for a, b in line_spans]
        headers.append((plane, lines))
    stamps = [line.timestamp_ns for _, lines in headers for line in lines]
    base_ns = min(stamps) if stamps else 0
    select_stats = frozenset(select_stats)
    planes = [
        _decode_plane(buf, plane, lines, base_ns, select_names, select_stats, value_stats,
                      value_stats_by_event, samples_per_kind)
        for plane, lines in headers
    ]
    return DecodedSpace(planes=planes, base_ns=base_ns, hostnames=hostnames)


def _decode_plane(buf, plane, lines, base_ns, select_names, select_stats, value_stats,
                  value_stats_by_event, samples):
    event_names = {int(k): v.name for k, v in plane.event_metadata.items()}
    stat_names = {int(k): v.name for k, v in plane.stat_metadata.items()}
    metadata_stats = {}
    for mid, meta in plane.event_metadata.items():
        if meta.stats:
            metadata_stats[int(mid)] = {
                stat_names.get(s.metadata_id, ""): _stat_value(s, stat_names) for s in meta.stats
            }
    wanted = {mid for mid, name in event_names.items() if select_names(name)}
    wanted |= {
        mid for mid, stats in metadata_stats.items() if select_stats.intersection(stats)
    }
    marker_stat_ids = np.array(
        [sid for sid, name in stat_names.items() if name in select_stats], dtype=np.int64
    )

    total = sum(line.starts.size for line in lines)
    first_ids = [line.first_ids for line in lines]

    if marker_stat_ids.size and lines:
        # Which kinds of events carry marker stats? Look at a few of each kind.
        sample_starts, sample_stops, sample_ids = [], [], []
        for line, ids in zip(lines, first_ids):
            candidates = np.flatnonzero(ids >= 0)
            taken = np.zeros(ids.size, dtype=bool)
            taken[ids < 0] = True  # unusual layout: always decoded below
            for _ in range(samples):
                rest = candidates[~taken[candidates]]
                if not rest.size:
                    break
                kinds, first = _first_occurrences(ids[rest])
                taken[rest[first]] = True
            pick = np.flatnonzero(taken & (ids >= 0))
            sample_starts.append(line.starts[pick])
            sample_stops.append(line.stops[pick])
            sample_ids.append(ids[pick])
        found = _events_with_stats(
            buf,
            np.concatenate(sample_starts),
            np.concatenate(sample_stops),
            np.concatenate(sample_ids),
            marker_stat_ids,
        )
        wanted |= found

    wanted_ids = np.array(sorted(wanted), dtype=np.int64)
    is_wanted = _membership(wanted_ids)
    sel_starts, sel_stops, sel_line, sel_offset_base, sel_ids = [], [], [], [], []
    for index, (line, ids) in enumerate(zip(lines, first_ids)):
        keep = np.flatnonzero((ids < 0) | is_wanted(ids))
        sel_ids.append(ids[keep])
        sel_starts.append(line.starts[keep])
        sel_stops.append(line.stops[keep])
        sel_line.append(np.full(keep.size, index, dtype=np.int32))
        sel_offset_base.append(np.full(keep.size, (line.timestamp_ns - base_ns) * 1000, np.int64))
        line.starts = line.stops = line.first_ids = None  # every event: no longer needed
    del first_ids
    starts = _concat(sel_starts, np.int64)
    stops = _concat(sel_stops, np.int64)
    line_of = _concat(sel_line, np.int32)
    base_of = _concat(sel_offset_base, np.int64)
    selected_ids = _concat(sel_ids, np.int64)
    del sel_starts, sel_stops, sel_line, sel_offset_base, sel_ids

    values_wanted = _value_table(event_names, stat_names, value_stats, value_stats_by_event)
    events, stats, strings = _decode_events(buf, starts, stops, wanted_ids, values_wanted,
                                            selected_ids)
    keep = events["keep"]
    return PlaneEvents(
        name=plane.name,
        event_names=event_names,
        stat_names=stat_names,
        line_names=[line.name for line in lines],
        total_events=int(total),
        line=line_of[keep],
        metadata_id=events["metadata_id"][keep],
        start_ps=(base_of + events["offset_ps"])[keep],
        duration_ps=events["duration_ps"][keep],
        strings=strings,
        stat_event=stats["event"],
        stat_id=stats["id"],
        stat_kind=stats["kind"],
        stat_raw=stats["raw"],
        stat_string=stats["string"],
        metadata_stats=metadata_stats,
    )


def _membership(members: np.ndarray):
    """A function: int64 array -> bool mask of the values in ``members``."""
    top = int(members.max(initial=-1))
    if members.size and int(members.min()) >= 0 and top < 1 << 22:
        table = np.zeros(top + 2, dtype=bool)
        table[members] = True

        def lookup(values):
            return table[np.clip(values, -1, top + 1)]  # -1 -> top + 1: never a member

        return lookup
    return lambda values: np.isin(values, members)


def _value_table(event_names, stat_names, value_stats, value_stats_by_event):
    """Which stat values to keep: None (all), or (class per event metadata id,
    bool table [class, stat metadata id]); class 0 is the default."""
    if value_stats is None and not value_stats_by_event:
        return None
    groups = [None if value_stats is None else frozenset(value_stats)]
    class_of = {}
    for event_name, names in (value_stats_by_event or {}).items():
        groups.append(frozenset(names))
        for mid, name in event_names.items():
            if name == event_name:
                class_of[mid] = len(groups) - 1
    ids = [sid for sid in stat_names if 0 <= sid < 1 << 22]
    table = np.zeros((len(groups), max(ids, default=0) + 1), dtype=bool)
    for group, names in enumerate(groups):
        for sid in ids:
            table[group, sid] = names is None or stat_names[sid] in names
    return class_of, table


def _narrow(values: np.ndarray) -> np.ndarray:
    """int32 when every value fits, else the values unchanged."""
    if not values.size or (int(values.min()) >= -(1 << 31) and int(values.max()) < 1 << 31):
        return values.astype(np.int32)
    return values


def _concat(parts, dtype):
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)


_EVENTS_PER_BLOCK = 16384  # events read together, one field per round
_STATS_PER_CHUNK = 1 << 17  # stats decoded together: bounds temporary memory
_FAST_RECORDS_PER_ROUND = 4  # short fields read per message per round


def _stat_filter(buf, class_of_message, keep_lut):
    """A span filter that drops stats whose value is not wanted, by metadata id.

    Only stats in the usual layout (``0x08 <one-byte id>`` first) are judged;
    the others are kept for :func:`_decode_stats` to decode and judge.
    """
    width = keep_lut.shape[1]
    limit = np.uint8(min(0x80, width))
    flat = np.ascontiguousarray(keep_lut).ravel()
    offset = class_of_message * width  # where each message's row of the table starts

    def keep(messages, body):
        if body.size and int(body.max()) + 1 >= buf.size:
            body = np.minimum(body, buf.size - 2)  # only at the very end of the data
        first, stat_id = buf[body], buf[body + 1]
        usual = (first == 0x08) & (stat_id < limit)
        judged = flat[offset[messages] + np.minimum(stat_id, limit - 1)]
        return ~usual | judged

    return keep


def _decode_events(buf, starts, stops, wanted_ids, values_wanted, first_ids=None):
    """Decode the events ``buf[starts[i]:stops[i]]`` and their stats.

    Returns (columns, stats, strings). ``columns`` holds metadata_id,
    offset_ps, duration_ps and ``keep`` (the metadata id is wanted; events
    whose id was not their first field are only filtered here). ``stats``
    holds one entry per kept stat: ``event`` (index among the kept events),
    ``id``, ``kind``, ``raw`` and ``string`` (index into ``strings``, -1
    when not a text). Blocks of events are decoded together so that their
    bytes stay in cache and temporary arrays stay small.
    """
    n = starts.size
    columns = {name: np.zeros(n, dtype=np.int64) for name in ("metadata_id", "offset_ps",
                                                              "duration_ps")}
    texts: dict[str, int] = {}
    parts = {name: [] for name in ("event", "id", "kind", "raw", "string")}
    event_dtype = np.int32 if n < 1 << 31 else np.int64
    message_class = filter_lut = None
    if values_wanted is not None and first_ids is not None:
        class_of, keep_lut = values_wanted
        # An extra class, for events whose metadata id is not known yet: keep all.
        filter_lut = np.vstack([keep_lut, np.ones(keep_lut.shape[1], dtype=bool)])
        message_class = np.zeros(n, dtype=np.int64)
        message_class[first_ids < 0] = keep_lut.shape[0]
        for mid, group in class_of.items():
            message_class[first_ids == mid] = group
    for first in range(0, n, _EVENTS_PER_BLOCK):
        last = min(n, first + _EVENTS_PER_BLOCK)
        span_filter = None
        if message_class is not None:
            span_filter = _stat_filter(buf, message_class[first:last], filter_lut)
        scanned = _scan_messages(buf, starts[first:last], stops[first:last],
                                 scalar_fields=(1, 2, 3), span_fields=(4,),
                                 span_filter=span_filter)
        for field, name in ((1, "metadata_id"), (2, "offset_ps"), (3, "duration_ps")):
            columns[name][first:last] = scanned.values[field].view(np.int64)
        # Spans come one field round at a time, so each event's stats keep
        # their written order (the last of a repeated stat wins).
        owner, span_start, span_stop = (
            scanned.span_owner[4], scanned.span_start[4], scanned.span_stop[4]
        )
        row_class = None
        if values_wanted is not None:
            class_of, keep_lut = values_wanted
            if class_of:
                mids = scanned.values[1].view(np.int64)
                event_class = np.zeros(mids.size, dtype=np.int64)
                for mid, group in class_of.items():
                    event_class[mids == mid] = group
                row_class = event_class[owner]
            else:
                keep_lut = keep_lut[0]
        else:
            keep_lut = None
        del scanned
        for low in range(0, owner.size, _STATS_PER_CHUNK):
            high = low + _STATS_PER_CHUNK
            stats = _decode_stats(buf, span_start[low:high], span_stop[low:high], keep_lut,
                                  None if row_class is None else row_class[low:high])
            is_text = (stats.kind == KIND_STR) | (stats.kind == KIND_BYTES)
            parts["event"].append((owner[low:high][stats.row] + first).astype(event_dtype))
            parts["id"].append(_narrow(stats.metadata_id))
            parts["kind"].append(stats.kind)
            parts["raw"].append(stats.raw)
            parts["string"].append(
                _intern_texts(buf, stats.text_start, stats.text_stop, is_text, texts)
            )
            del stats
    keep = np.isin(columns["metadata_id"], wanted_ids)
    columns["keep"] = keep
    # Columns are narrow where the values fit: this table is most of the memory.
    wide_ids = any(p.dtype == np.int64 for p in parts["id"])
    dtypes = dict(event=event_dtype, id=np.int64 if wide_ids else np.int32,
                  kind=np.int8, raw=np.uint64, string=np.int32)
    # One column at a time, so that only one is ever held twice.
    event = _concat(parts.pop("event"), dtypes["event"])
    mask = None if keep.all() else keep[event]
    if mask is not None:
        event = (np.cumsum(keep) - 1)[event[mask]].astype(dtypes["event"])
    out = {"event": event}
    for name in ("id", "kind", "raw", "string"):
        column = _concat(parts.pop(name), dtypes[name])
        out[name] = column if mask is None else column[mask]
        del column
    return columns, out, list(texts)


def _events_with_stats(buf, starts, stops, ids, stat_ids) -> set[int]:
    """Metadata ids of the events (given by span) that carry any of ``stat_ids``."""
    scanned = _scan_messages(buf, starts, stops, scalar_fields=(), span_fields=(4,))
    owner, s_start, s_stop = scanned.span_owner[4], scanned.span_start[4], scanned.span_stop[4]
    nonempty = np.flatnonzero(s_start < s_stop)
    leading = nonempty[buf[s_start[nonempty]] == 0x08]  # XStat.metadata_id comes first
    if not leading.size:
        return set()
    sids, _ = _varints(buf, s_start[leading] + 1)
    hits = np.isin(sids.view(np.int64), stat_ids)
    return set(np.unique(ids[owner[leading][hits]]).tolist())


def _first_occurrences(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return (distinct ids, index of the first occurrence of each)."""
    if ids.size and 0 <= int(ids.min()) and int(ids.max()) < 1 << 22:
        first = np.full(int(ids.max()) + 1, ids.size, dtype=np.int64)
        np.minimum.at(first, ids, np.arange(ids.size))
        kinds = np.flatnonzero(first < ids.size)
        return kinds, first[kinds]
    return np.unique(ids, return_index=True)


def _intern_texts(buf, starts, stops, is_text, index: dict[str, int]) -> np.ndarray:
    """Intern the str / bytes values into ``index`` (text -> code); -1 elsewhere."""
    codes = np.full(starts.size, -1, dtype=np.int32)
    rows = np.flatnonzero(is_text)
    lengths = stops[rows] - starts[rows]
    for length in np.unique(lengths).tolist():
        group = rows[lengths == length]
        if length == 0:
            texts, inverse = [""], np.zeros(group.size, dtype=np.int64)
        else:
            matrix = np.ascontiguousarray(buf[starts[group][:, None] + np.arange(length)])
            keys = matrix.view(np.dtype((np.void, length))).ravel()
            distinct, inverse = np.unique(keys, return_inverse=True)
            texts = [d.tobytes().decode("utf-8", "replace") for d in distinct]
        mapped = np.array([index.setdefault(t, len(index)) for t in texts], dtype=np.int32)
        codes[group] = mapped[inverse.ravel()]
    return codes
