"""The profiler's XSpace / XPlane format, without TensorFlow.

Two things live here:

* Message classes for ``tensorflow/tsl/profiler/protobuf/xplane.proto``
  (:data:`XSpace`, :data:`XPlane`, ...), built at import time from a
  descriptor, for writing test traces and reading plane metadata. Only the
  TensorFlow wheel ships a generated module, and the plugin must run where
  TensorFlow is absent.
* The columnar form (:class:`DecodedSpace`, :class:`PlaneEvents`) that
  :func:`tb_leak_plugin.xplane.decode.decode_space` returns, a decoder for
  large traces built on :mod:`tb_leak_plugin.xplane.wire`. Parsing a 40 MB
  trace into messages and walking its million events in Python takes longer
  than the whole analysis may, and holds several copies of the file.
  Instead the wire format is read in place with numpy:

  - a line's events are found by their byte signature and confirmed by
    stepping from record to record by length (exact; ``lines._walk_events``);
  - each event's metadata id (its first field) selects the events to keep:
    those whose name the caller asks for, or whose kind carries a given
    stat in a few sampled events (step markers, tf.function calls;
    ``selection``);
  - kept events are decoded a block at a time, all messages of a block one
    field per round; their stats, whose value ends the message, decode in
    bulk (``stats.decode_stats``). Only unusual layouts take slower, general
    paths, so any valid encoding still decodes.

  Memory: the file's bytes, about 14 bytes per event while the lines are
  read, then about 28 bytes per kept event and 22 per kept stat. Every
  element is charged to a :class:`~tb_leak_plugin.xplane.budget.MemoryBudget`
  (4x the file by default), so a file whose structure would need more is
  refused with :class:`XPlaneMemoryLimitError` instead.

Timestamps: an event's absolute time is ``line.timestamp_ns * 1000 +
event.offset_ps`` picoseconds. :func:`decode_space` returns times relative to
the earliest line of the space (``DecodedSpace.base_ns``) so that they fit in
int64 even when lines carry wall-clock nanoseconds.
"""

from __future__ import annotations

import dataclasses

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


@dataclasses.dataclass(frozen=True)
class _Message:
    """One message of xplane.proto: fields as (number, name, type, label,
    message type or map entry, oneof index), in the order of the .proto."""

    name: str
    fields: tuple
    oneofs: tuple[str, ...] = ()
    maps: tuple[tuple[str, str], ...] = ()  # (entry name, value message)


_OPT, _REP = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
_INT64, _UINT64, _DOUBLE = _F.TYPE_INT64, _F.TYPE_UINT64, _F.TYPE_DOUBLE
_STRING, _BYTES, _MESSAGE = _F.TYPE_STRING, _F.TYPE_BYTES, _F.TYPE_MESSAGE
_EVENT_METADATA_MAP = "XPlane.EventMetadataEntry"
_STAT_METADATA_MAP = "XPlane.StatMetadataEntry"

_SCHEMA = (
    _Message("XSpace", (
        (1, "planes", _MESSAGE, _REP, "XPlane", None),
        (2, "errors", _STRING, _REP, None, None),
        (3, "warnings", _STRING, _REP, None, None),
        (4, "hostnames", _STRING, _REP, None, None),
    )),
    _Message("XPlane", (
        (1, "id", _INT64, _OPT, None, None),
        (2, "name", _STRING, _OPT, None, None),
        (3, "lines", _MESSAGE, _REP, "XLine", None),
        (4, "event_metadata", _MESSAGE, _REP, _EVENT_METADATA_MAP, None),
        (5, "stat_metadata", _MESSAGE, _REP, _STAT_METADATA_MAP, None),
        (6, "stats", _MESSAGE, _REP, "XStat", None),
    ), maps=(("EventMetadataEntry", "XEventMetadata"), ("StatMetadataEntry", "XStatMetadata"))),
    _Message("XLine", (
        (1, "id", _INT64, _OPT, None, None),
        (10, "display_id", _INT64, _OPT, None, None),
        (2, "name", _STRING, _OPT, None, None),
        (11, "display_name", _STRING, _OPT, None, None),
        (3, "timestamp_ns", _INT64, _OPT, None, None),
        (9, "duration_ps", _INT64, _OPT, None, None),
        (4, "events", _MESSAGE, _REP, "XEvent", None),
    )),
    _Message("XEvent", (
        (1, "metadata_id", _INT64, _OPT, None, None),
        (2, "offset_ps", _INT64, _OPT, None, 0),
        (5, "num_occurrences", _INT64, _OPT, None, 0),
        (3, "duration_ps", _INT64, _OPT, None, None),
        (4, "stats", _MESSAGE, _REP, "XStat", None),
    ), oneofs=("data",)),
    _Message("XStat", (
        (1, "metadata_id", _INT64, _OPT, None, None),
        (2, "double_value", _DOUBLE, _OPT, None, 0),
        (3, "uint64_value", _UINT64, _OPT, None, 0),
        (4, "int64_value", _INT64, _OPT, None, 0),
        (5, "str_value", _STRING, _OPT, None, 0),
        (6, "bytes_value", _BYTES, _OPT, None, 0),
        (7, "ref_value", _UINT64, _OPT, None, 0),
    ), oneofs=("value",)),
    _Message("XEventMetadata", (
        (1, "id", _INT64, _OPT, None, None),
        (2, "name", _STRING, _OPT, None, None),
        (4, "display_name", _STRING, _OPT, None, None),
        (3, "metadata", _BYTES, _OPT, None, None),
        (5, "stats", _MESSAGE, _REP, "XStat", None),
        (6, "child_id", _INT64, _REP, None, None),
    )),
    _Message("XStatMetadata", (
        (1, "id", _INT64, _OPT, None, None),
        (2, "name", _STRING, _OPT, None, None),
        (3, "description", _STRING, _OPT, None, None),
    )),
)


def _build_classes():
    """Message classes for every message of ``_SCHEMA``, in its order."""
    fdp = descriptor_pb2.FileDescriptorProto(
        name="tb_leak_plugin/xplane.proto", package=_PACKAGE, syntax="proto3"
    )
    for spec in _SCHEMA:
        message = fdp.message_type.add(name=spec.name)
        for entry_name, value_type in spec.maps:
            _map_entry(message, entry_name, value_type)
        for oneof in spec.oneofs:
            message.oneof_decl.add(name=oneof)
        _add_fields(message, spec.fields)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return [
        message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{spec.name}"))
        for spec in _SCHEMA
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


class XPlaneMemoryLimitError(XPlaneDecodeError):
    """A trace whose structure would take more memory to decode than its budget
    allows (see :mod:`tb_leak_plugin.xplane.budget`); the message says how much."""


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

