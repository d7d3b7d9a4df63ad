"""`decode_space`: the columnar decoder for large XSpace traces.

See `tb_leak_plugin.xplane.schema` for how it works and what it returns; the
wire-format readers it builds on are in `tb_leak_plugin.xplane.wire`.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Collection

import numpy as np

from tb_leak_plugin.xplane.schema import (
    KIND_BYTES, KIND_STR, DecodedSpace, PlaneEvents, XPlane, XPlaneDecodeError,
)
from tb_leak_plugin.xplane.wire import (
    as_signed, concat, decode_stats, read_fields, read_varint, read_varints, scan_messages,
)


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
    return (concat(records, np.int64), concat(bodies, np.int64), concat(ends, np.int64),
            concat(ids, np.int64))


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
            length, body = read_varint(data, pos + 1, stop)
            if body + length > stop:
                raise XPlaneDecodeError(
                    f"XLine event at byte {pos} claims {length} bytes, only {stop - body} remain"
                )
            extra_start.append(body)
            extra_stop.append(body + length)
            pos = body + length
    if extra_start:
        flush_extra()
    return (concat(pieces_start, np.int64), concat(pieces_stop, np.int64),
            concat(pieces_id, np.int64), pos)


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
        for number, wire, value, _, field_stop in read_fields(data, pos, stop, "XLine"):
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
        timestamp_ns=as_signed(stamp) if wire == 0 else 0,
        starts=concat(starts, np.int64),
        stops=concat(stops, np.int64),
        first_ids=concat(ids, np.int64),
    )


# -- decoding a whole space ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Request:
    """What the caller of :func:`decode_space` asks for (see its arguments)."""

    select_names: Callable[[str], bool]
    select_stats: frozenset
    value_stats: Collection[str] | None
    value_stats_by_event: dict[str, Collection[str]] | None
    samples_per_kind: int


def _stat_value(stat, stat_names):
    """The Python value of an XStat message; a ref becomes the name it points to."""
    kind = stat.WhichOneof("value")
    if kind == "ref_value":
        return stat_names.get(stat.ref_value, "")
    return None if kind is None else getattr(stat, kind)


def _read_space(data) -> tuple[list[tuple[int, int]], list[str]]:
    """Return (the planes' byte spans, the host names) of an XSpace."""
    plane_spans, hostnames = [], []
    for number, wire, value, field_start, _ in read_fields(data, 0, len(data), "XSpace"):
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
    return plane_spans, hostnames


def _read_plane_header(data, start, stop):
    """Return (the plane without its lines, parsed; the lines' byte spans)."""
    line_spans, other = [], []
    for number, wire, value, field_start, field_stop in read_fields(data, start, stop, "XPlane"):
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
    request = _Request(select_names, frozenset(select_stats), value_stats, value_stats_by_event,
                       samples_per_kind)
    buf = np.frombuffer(data, dtype=np.uint8)
    plane_spans, hostnames = _read_space(data)
    headers = []
    for start, stop in plane_spans:
        plane, line_spans = _read_plane_header(data, start, stop)
        lines = [_read_line(data, buf, a, b) for a, b in line_spans]
        headers.append((plane, lines))
    stamps = [line.timestamp_ns for _, lines in headers for line in lines]
    base_ns = min(stamps) if stamps else 0
    planes = [_decode_plane(buf, plane, lines, base_ns, request) for plane, lines in headers]
    return DecodedSpace(planes=planes, base_ns=base_ns, hostnames=hostnames)


@dataclasses.dataclass
class _PlaneNames:
    """A plane's metadata: names by id, and stats set on event metadata."""

    event_names: dict[int, str]
    stat_names: dict[int, str]
    metadata_stats: dict[int, dict[str, object]]

    @classmethod
    def of(cls, plane) -> "_PlaneNames":
        event_names = {int(k): v.name for k, v in plane.event_metadata.items()}
        stat_names = {int(k): v.name for k, v in plane.stat_metadata.items()}
        metadata_stats = {}
        for mid, meta in plane.event_metadata.items():
            if meta.stats:
                metadata_stats[int(mid)] = {
                    stat_names.get(s.metadata_id, ""): _stat_value(s, stat_names)
                    for s in meta.stats
                }
        return cls(event_names, stat_names, metadata_stats)


@dataclasses.dataclass
class _Selection:
    """The events of a plane chosen for decoding, one entry each, line by line."""

    starts: np.ndarray  # event body spans
    stops: np.ndarray
    line: np.ndarray  # int32 line index
    offset_base_ps: np.ndarray  # int64: the line's start since base_ns, picoseconds
    first_ids: np.ndarray  # metadata id when it is the event's first field, else -1


@dataclasses.dataclass
class _EventColumns:
    """Fields of the selected events; ``keep``: the metadata id is wanted."""

    metadata_id: np.ndarray
    offset_ps: np.ndarray
    duration_ps: np.ndarray
    keep: np.ndarray | None = None


@dataclasses.dataclass
class _StatColumns:
    """One entry per kept stat: the event (index among kept events), the stat
    metadata id, value kind, raw bits, and index into the strings (-1: no text)."""

    event: np.ndarray
    id: np.ndarray
    kind: np.ndarray
    raw: np.ndarray
    string: np.ndarray


def _decode_plane(buf, plane, lines, base_ns, request: _Request) -> PlaneEvents:
    names = _PlaneNames.of(plane)
    wanted_ids = _wanted_metadata_ids(buf, names, lines, request)
    total = sum(line.starts.size for line in lines)
    selection = _select_events(lines, wanted_ids, base_ns)
    values_wanted = _value_table(names.event_names, names.stat_names, request.value_stats,
                                 request.value_stats_by_event)
    events, stats, strings = _decode_events(buf, selection, wanted_ids, values_wanted)
    keep = events.keep
    return PlaneEvents(
        name=plane.name,
        event_names=names.event_names,
        stat_names=names.stat_names,
        line_names=[line.name for line in lines],
        total_events=int(total),
        line=selection.line[keep],
        metadata_id=events.metadata_id[keep],
        start_ps=(selection.offset_base_ps + events.offset_ps)[keep],
        duration_ps=events.duration_ps[keep],
        strings=strings,
        stat_event=stats.event,
        stat_id=stats.id,
        stat_kind=stats.kind,
        stat_raw=stats.raw,
        stat_string=stats.string,
        metadata_stats=names.metadata_stats,
    )


def _wanted_metadata_ids(buf, names: _PlaneNames, lines, request: _Request) -> np.ndarray:
    """Sorted event metadata ids to keep: by name, by metadata stats, and by
    the stats a few sampled events of each kind carry."""
    wanted = {mid for mid, name in names.event_names.items() if request.select_names(name)}
    wanted |= {
        mid for mid, stats in names.metadata_stats.items()
        if request.select_stats.intersection(stats)
    }
    marker_stat_ids = np.array(
        [sid for sid, name in names.stat_names.items() if name in request.select_stats],
        dtype=np.int64,
    )
    if marker_stat_ids.size and lines:
        wanted |= _sampled_kinds_with_stats(buf, lines, marker_stat_ids, request.samples_per_kind)
    return np.array(sorted(wanted), dtype=np.int64)


def _sampled_kinds_with_stats(buf, lines, stat_ids, samples: int) -> set[int]:
    """Which kinds of events carry these stats? Look at a few of each kind, per line."""
    sample_starts, sample_stops, sample_ids = [], [], []
    for line in lines:
        ids = line.first_ids
        candidates = np.flatnonzero(ids >= 0)
        taken = np.zeros(ids.size, dtype=bool)
        taken[ids < 0] = True  # unusual layout: always decoded
        for _ in range(samples):
            rest = candidates[~taken[candidates]]
            if not rest.size:
                break
            _, first = _first_occurrences(ids[rest])
            taken[rest[first]] = True
        pick = np.flatnonzero(taken & (ids >= 0))
        sample_starts.append(line.starts[pick])
        sample_stops.append(line.stops[pick])
        sample_ids.append(ids[pick])
    return _events_with_stats(buf, np.concatenate(sample_starts), np.concatenate(sample_stops),
                              np.concatenate(sample_ids), stat_ids)


def _select_events(lines, wanted_ids: np.ndarray, base_ns: int) -> _Selection:
    """The events to decode, line after line: those of a wanted kind, and
    those whose kind is not known before decoding. Frees each line's spans."""
    is_wanted = _membership(wanted_ids)
    starts, stops, line_of, base_of, first_ids = [], [], [], [], []
    for index, line in enumerate(lines):
        ids = line.first_ids
        keep = np.flatnonzero((ids < 0) | is_wanted(ids))
        first_ids.append(ids[keep])
        starts.append(line.starts[keep])
        stops.append(line.stops[keep])
        line_of.append(np.full(keep.size, index, dtype=np.int32))
        base_of.append(np.full(keep.size, (line.timestamp_ns - base_ns) * 1000, np.int64))
        line.starts = line.stops = line.first_ids = None  # every event: no longer needed
        del ids, keep
    return _Selection(
        starts=concat(starts, np.int64),
        stops=concat(stops, np.int64),
        line=concat(line_of, np.int32),
        offset_base_ps=concat(base_of, np.int64),
        first_ids=concat(first_ids, np.int64),
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


_EVENTS_PER_BLOCK = 16384  # events read together, one field per round
_STATS_PER_CHUNK = 1 << 17  # stats decoded together: bounds temporary memory


def _stat_filter(buf, class_of_message, keep_lut):
    """A span filter that drops stats whose value is not wanted, by metadata id.

    Only stats in the usual layout (``0x08 <one-byte id>`` first) are judged;
    the others are kept for :func:`decode_stats` to decode and judge.
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


@dataclasses.dataclass
class _Prefilter:
    """Drops unwanted stats while events are scanned, by the event's first
    metadata id: ``message_class`` per event indexes the rows of ``lut``."""

    message_class: np.ndarray
    lut: np.ndarray

    @classmethod
    def of(cls, values_wanted, first_ids: np.ndarray) -> "_Prefilter | None":
        if values_wanted is None:
            return None
        class_of, keep_lut = values_wanted
        # An extra class, for events whose metadata id is not known yet: keep all.
        lut = np.vstack([keep_lut, np.ones(keep_lut.shape[1], dtype=bool)])
        message_class = np.zeros(first_ids.size, dtype=np.int64)
        message_class[first_ids < 0] = keep_lut.shape[0]
        for mid, group in class_of.items():
            message_class[first_ids == mid] = group
        return cls(message_class, lut)


class _StatTable:
    """Collects decoded stats chunk by chunk, and builds their columns."""

    def __init__(self, event_dtype):
        self.event_dtype = event_dtype
        self.texts: dict[str, int] = {}
        self.parts = {name: [] for name in ("event", "id", "kind", "raw", "string")}

    def add(self, buf, stats, owner: np.ndarray, first_event: int) -> None:
        """Add ``stats`` (from ``decode_stats``) of the events ``owner + first_event``."""
        is_text = (stats.kind == KIND_STR) | (stats.kind == KIND_BYTES)
        self.parts["event"].append((owner[stats.row] + first_event).astype(self.event_dtype))
        self.parts["id"].append(_narrow(stats.metadata_id))
        self.parts["kind"].append(stats.kind)
        self.parts["raw"].append(stats.raw)
        self.parts["string"].append(
            _intern_texts(buf, stats.text_start, stats.text_stop, is_text, self.texts)
        )

    def columns(self, keep: np.ndarray) -> _StatColumns:
        """The stats of the kept events, renumbered among them."""
        # Columns are narrow where the values fit: this table is most of the memory.
        parts = self.parts
        wide_ids = any(p.dtype == np.int64 for p in parts["id"])
        dtypes = dict(event=self.event_dtype, id=np.int64 if wide_ids else np.int32,
                      kind=np.int8, raw=np.uint64, string=np.int32)
        # One column at a time, so that only one is ever held twice.
        event = concat(parts.pop("event"), dtypes["event"])
        mask = None if keep.all() else keep[event]
        if mask is not None:
            event = (np.cumsum(keep) - 1)[event[mask]].astype(dtypes["event"])
        out = {"event": event}
        for name in ("id", "kind", "raw", "string"):
            column = concat(parts.pop(name), dtypes[name])
            out[name] = column if mask is None else column[mask]
            del column
        return _StatColumns(**out)


def _decode_events(buf, selection: _Selection, wanted_ids, values_wanted):
    """Decode the selected events and their stats.

    Returns (:class:`_EventColumns`, :class:`_StatColumns`, strings). Events
    whose id was not their first field are only filtered here (``keep``).
    Blocks of events are decoded together so that their bytes stay in cache
    and temporary arrays stay small.
    """
    n = selection.starts.size
    columns = _EventColumns(*(np.zeros(n, dtype=np.int64) for _ in range(3)))
    table = _StatTable(np.int32 if n < 1 << 31 else np.int64)
    prefilter = _Prefilter.of(values_wanted, selection.first_ids)
    for first in range(0, n, _EVENTS_PER_BLOCK):
        _decode_block(buf, selection, slice(first, min(n, first + _EVENTS_PER_BLOCK)),
                      prefilter, values_wanted, columns, table)
    columns.keep = np.isin(columns.metadata_id, wanted_ids)
    return columns, table.columns(columns.keep), list(table.texts)


def _decode_block(buf, selection, block: slice, prefilter, values_wanted, columns, table):
    """Decode the events ``block`` of the selection into ``columns`` and ``table``."""
    span_filter = None
    if prefilter is not None:
        span_filter = _stat_filter(buf, prefilter.message_class[block], prefilter.lut)
    scanned = scan_messages(buf, selection.starts[block], selection.stops[block],
                             scalar_fields=(1, 2, 3), span_fields=(4,),
                             span_filter=span_filter)
    columns.metadata_id[block] = scanned.values[1].view(np.int64)
    columns.offset_ps[block] = scanned.values[2].view(np.int64)
    columns.duration_ps[block] = scanned.values[3].view(np.int64)
    # Spans come one field round at a time, so each event's stats keep
    # their written order (the last of a repeated stat wins).
    owner, span_start, span_stop = (
        scanned.span_owner[4], scanned.span_start[4], scanned.span_stop[4]
    )
    keep_lut, row_class = _block_stat_filter(values_wanted, scanned.values[1], owner)
    del scanned
    for low in range(0, owner.size, _STATS_PER_CHUNK):
        high = low + _STATS_PER_CHUNK
        stats = decode_stats(buf, span_start[low:high], span_stop[low:high], keep_lut,
                              None if row_class is None else row_class[low:high])
        table.add(buf, stats, owner[low:high], block.start)
        del stats


def _block_stat_filter(values_wanted, metadata_ids, owner):
    """(keep table, class per stat or None) for ``decode_stats``, now that the
    events' metadata ids are known; (None, None) keeps every stat."""
    if values_wanted is None:
        return None, None
    class_of, keep_lut = values_wanted
    if not class_of:
        return keep_lut[0], None
    mids = metadata_ids.view(np.int64)
    event_class = np.zeros(mids.size, dtype=np.int64)
    for mid, group in class_of.items():
        event_class[mids == mid] = group
    return keep_lut, event_class[owner]


def _events_with_stats(buf, starts, stops, ids, stat_ids) -> set[int]:
    """Metadata ids of the events (given by span) that carry any of ``stat_ids``."""
    scanned = scan_messages(buf, starts, stops, scalar_fields=(), span_fields=(4,))
    owner, s_start, s_stop = scanned.span_owner[4], scanned.span_start[4], scanned.span_stop[4]
    nonempty = np.flatnonzero(s_start < s_stop)
    leading = nonempty[buf[s_start[nonempty]] == 0x08]  # XStat.metadata_id comes first
    if not leading.size:
        return set()
    sids, _ = read_varints(buf, s_start[leading] + 1)
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
