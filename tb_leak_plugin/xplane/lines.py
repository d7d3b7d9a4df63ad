"""An XSpace's structure: its planes, their lines, and where each event is.

Planes and lines are few and read one field at a time (``wire.read_fields``);
a line's events are many, and are found by their byte signature and
confirmed by stepping from record to record by length (exact; see
:func:`_walk_events`). Every element is charged to the trace's
:class:`~tb_leak_plugin.xplane.budget.MemoryBudget` as it is found.
"""

from __future__ import annotations

import array
import dataclasses

import numpy as np

from tb_leak_plugin.xplane import budget as costs
from tb_leak_plugin.xplane.budget import MemoryBudget
from tb_leak_plugin.xplane.schema import XPlane, XPlaneDecodeError
from tb_leak_plugin.xplane.wire import as_signed, read_fields, read_varint

_EVENT_TAG = 0x22  # XLine.events: field 4, length-delimited
_SCAN_BYTES = 1 << 17  # bytes searched for event starts at a time: bounds the working arrays
_CHARGE_EVERY = 4096  # events found one by one are charged in batches of this many
_MAX_EVENT_BYTES = (1 << 31) - 1  # event lengths are kept as int32
_EMPTY_RUN = 1 << 16  # empty events taken in bulk at a time


# -- the space and its planes ----------------------------------------------------------------


def read_space(data, budget: MemoryBudget) -> tuple[list[tuple[int, int]], list[str]]:
    """Return (the planes' byte spans, the host names) of an XSpace."""
    plane_spans, hostnames = [], []
    for number, wire, value, field_start, _ in read_fields(data, 0, len(data), "XSpace"):
        if number == 1 and wire == 2:
            budget.charge("planes", 1, costs.PLANE_BYTES)
            plane_spans.append(value)
        elif number == 4 and wire == 2:
            budget.charge("host names", 1, costs.METADATA_FIELD_BYTES + 3 * (value[1] - value[0]))
            hostnames.append(bytes(data[value[0] : value[1]]).decode("utf-8", "replace"))
        elif number not in (2, 3, 4) or wire != 2:
            raise XPlaneDecodeError(
                f"not an XSpace: unexpected field {number} (wire type {wire}) at byte {field_start}"
            )
    if not plane_spans:
        raise XPlaneDecodeError("the data holds no XPlane")
    return plane_spans, hostnames


def read_plane_header(data, start, stop, budget: MemoryBudget):
    """Return (the plane without its lines, parsed; the lines' byte spans)."""
    line_spans, other = [], []
    for number, wire, value, field_start, field_stop in read_fields(data, start, stop, "XPlane"):
        if number == 3 and wire == 2:
            budget.charge("lines", 1, costs.LINE_BYTES)
            line_spans.append(value)
        else:
            budget.charge("plane metadata fields", 1,
                          costs.METADATA_FIELD_BYTES + 3 * (field_stop - field_start))
            other.append(bytes(data[field_start:field_stop]))
    plane = XPlane()
    try:
        plane.ParseFromString(b"".join(other))
    except Exception as error:
        raise XPlaneDecodeError(f"plane metadata is corrupt: {error}") from None
    return plane, line_spans


# -- a line and its events ---------------------------------------------------------------------


@dataclasses.dataclass
class Line:
    """One XLine: its header, and the byte span of each event body."""

    name: str
    timestamp_ns: int
    starts: np.ndarray | None  # int64 event body starts (None once the events are selected)
    lengths: np.ndarray | None  # int32 event body lengths
    first_ids: np.ndarray | None  # int16 metadata id when it is the event's first field, else -1

    @property
    def events(self) -> int:
        return 0 if self.starts is None else int(self.starts.size)


def read_line(data, buf, start, stop, budget: MemoryBudget) -> Line:
    """Read the XLine ``data[start:stop]``: header fields and event spans."""
    header = {}
    events = _EventList(budget)
    pos = start
    while pos < stop:
        if data[pos] == _EVENT_TAG:
            pos = _walk_events(data, buf, pos, stop, events)
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
    starts, lengths, first_ids = events.arrays()
    budget.release(starts.size, costs.LINE_EVENT_BYTES - costs.LINE_EVENT_KEPT_BYTES)
    return Line(name=text(11) or text(2), timestamp_ns=as_signed(stamp) if wire == 0 else 0,
                starts=starts, lengths=lengths, first_ids=first_ids)


class _EventList:
    """A line's events in the order found, in compact growable arrays.

    Arrays of the standard library grow in place and numpy then reads them
    without a copy, so a line never holds its events twice.
    """

    def __init__(self, budget: MemoryBudget):
        self.budget = budget
        self.starts = array.array("q")
        self.lengths = array.array("i")
        self.ids = array.array("h")
        self.uncharged = 0

    def add_run(self, starts: np.ndarray, lengths: np.ndarray, ids: np.ndarray) -> None:
        """Events found by their signature (ids and lengths fit 14 bits; -1: no id)."""
        self.budget.charge("events", starts.size, costs.LINE_EVENT_BYTES)
        self.starts.frombytes(starts.astype(np.int64, copy=False).tobytes())
        self.lengths.frombytes(lengths.astype(np.int32, copy=False).tobytes())
        self.ids.frombytes(ids.astype(np.int16, copy=False).tobytes())

    def add_one(self, start: int, length: int) -> None:
        """An event found by the general path (its metadata id is not known yet)."""
        if length > _MAX_EVENT_BYTES:
            raise XPlaneDecodeError(f"an XEvent at byte {start} claims {length} bytes")
        self.starts.append(start)
        self.lengths.append(length)
        self.ids.append(-1)
        self.uncharged += 1
        if self.uncharged >= _CHARGE_EVERY:
            self._charge_found()

    def _charge_found(self) -> None:
        self.budget.charge("events", self.uncharged, costs.LINE_EVENT_BYTES)
        self.uncharged = 0

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(starts int64, lengths int32, first ids int16), sharing this list's memory."""
        self._charge_found()
        return (np.frombuffer(self.starts, dtype=np.int64),
                np.frombuffer(self.lengths, dtype=np.int32),
                np.frombuffer(self.ids, dtype=np.int16))


@dataclasses.dataclass
class _Candidates:
    """Records in one stretch of a line that look like XEvents (see :func:`_event_starts`)."""

    records: np.ndarray  # where each record starts (its tag)
    bodies: np.ndarray  # where its body starts
    lengths: np.ndarray  # body length
    ends: np.ndarray  # where it ends
    ids: np.ndarray  # metadata id (its first field)
    breaks: np.ndarray  # candidates whose end is not the next candidate's start
    high: int  # candidates starting at or after this were not searched for


def _event_starts(buf, low: int, stop: int) -> _Candidates:
    """Positions in [low, low + _SCAN_BYTES) that look like an XEvent record.

    The signature is how events are written: ``0x22 <length> 0x08 <metadata
    id> 0x10`` (the events field, then metadata_id, then offset_ps; lengths
    and ids of one or two bytes). Stats nested in an event never match (their
    second field is never 0x10), and a stray match inside an event is never
    followed: see :func:`_walk_events`.
    """
    last = min(stop, buf.size) - 7  # the signature reads up to 6 bytes ahead
    high = min(last, low + _SCAN_BYTES)
    at = low + np.flatnonzero(buf[low:max(low, high)] == _EVENT_TAG)
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
    metadata_id = np.where(long_id, (id_first & 0x7F).astype(np.int64)
                           | (id_second.astype(np.int64) << 7), id_first.astype(np.int64))
    records, ends = at[ok], end[ok]
    chained = np.zeros(records.size, dtype=bool)
    chained[:-1] = ends[:-1] == records[1:]
    return _Candidates(records=records, bodies=body[ok], lengths=length[ok], ends=ends,
                       ids=metadata_id[ok], breaks=np.flatnonzero(~chained),  # the last breaks
                       high=max(high, low + 1))


def _empty_events_at(buf, pos: int, stop: int) -> int:
    """How many empty events (``0x22 0x00``) follow each other from ``pos``, up
    to ``_EMPTY_RUN`` (there is one at ``pos``): found in bulk, not one Python
    step each."""
    pairs = buf[pos : pos + 2 * min(_EMPTY_RUN, (stop - pos) // 2)].reshape(-1, 2)
    empty = (pairs[:, 0] == _EVENT_TAG) & (pairs[:, 1] == 0)
    return int(empty.size if empty.all() else np.argmin(empty))


def _walk_events(data, buf, first: int, stop: int, events: _EventList) -> int:
    """Add the run of XLine.events records that starts at ``first`` to ``events``;
    return the position after it.

    Exact: it steps from one record to the next by the record's length, as
    a protobuf parser does, but a whole stretch of records at once where the
    candidates of :func:`_event_starts` already chain up; only records the
    signature misses (and stray candidates) cost a Python step.
    """
    pos = first
    chunk = None
    while pos < stop and data[pos] == _EVENT_TAG:
        if chunk is None or pos >= chunk.high:
            chunk = _event_starts(buf, pos, stop)
        k = int(np.searchsorted(chunk.records, pos))
        if k < chunk.records.size and chunk.records[k] == pos:
            j = int(chunk.breaks[np.searchsorted(chunk.breaks, k)])
            events.add_run(chunk.bodies[k : j + 1], chunk.lengths[k : j + 1], chunk.ids[k : j + 1])
            pos = int(chunk.ends[j])
        elif pos + 3 < stop and data[pos + 1] == 0 and data[pos + 2] == _EVENT_TAG:
            count = _empty_events_at(buf, pos, stop)  # a run of empty events
            bodies = pos + 2 + 2 * np.arange(count, dtype=np.int64)
            events.add_run(bodies, np.zeros(count, np.int32), np.full(count, -1, np.int16))
            pos += 2 * count
        else:
            length, body = read_varint(data, pos + 1, stop)
            if body + length > stop:
                raise XPlaneDecodeError(
                    f"XLine event at byte {pos} claims {length} bytes, only {stop - body} remain"
                )
            events.add_one(body, length)
            pos = body + length
    return pos
