"""`decode_space`: the columnar decoder for large XSpace traces.

See `tb_leak_plugin.xplane.schema` for how it works and what it returns; the
structure (planes, lines, where each event is) is read by
`tb_leak_plugin.xplane.lines`, on the wire-format readers of
`tb_leak_plugin.xplane.wire`. Memory is charged to a
`tb_leak_plugin.xplane.budget.MemoryBudget` element by element.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Collection

import numpy as np

from tb_leak_plugin.xplane import budget as costs
from tb_leak_plugin.xplane.budget import MemoryBudget
from tb_leak_plugin.xplane.lines import read_line, read_plane_header, read_space
from tb_leak_plugin.xplane.selection import PlaneNames, Selection, select_events, wanted_metadata_ids
from tb_leak_plugin.xplane.schema import KIND_BYTES, KIND_STR, DecodedSpace, PlaneEvents
from tb_leak_plugin.xplane.stats import decode_stats
from tb_leak_plugin.xplane.wire import concat, scan_messages


@dataclasses.dataclass(frozen=True)
class _Request:
    """What the caller of :func:`decode_space` asks for (see its arguments)."""

    select_names: Callable[[str], bool]
    select_stats: frozenset
    value_stats: Collection[str] | None
    value_stats_by_event: dict[str, Collection[str]] | None
    samples_per_kind: int


def decode_space(
    data: bytes,
    *,
    select_names: Callable[[str], bool],
    select_stats: Collection[str] = (),
    value_stats: Collection[str] | None = None,
    value_stats_by_event: dict[str, Collection[str]] | None = None,
    samples_per_kind: int = 3,
    budget: MemoryBudget | None = None,
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
      budget: the memory decoding may take (default: ``MemoryBudget(len(data))``,
        4x the file plus working space); what the decoded space holds stays
        charged to it.

    Returns:
      A :class:`DecodedSpace` whose planes hold the selected events as
      arrays, times in picoseconds since ``base_ns``.

    Raises:
      XPlaneDecodeError: the bytes are not a readable XSpace.
      XPlaneMemoryLimitError: (a subclass) decoding them would pass ``budget``.
    """
    request = _Request(select_names, frozenset(select_stats), value_stats, value_stats_by_event,
                       samples_per_kind)
    if budget is None:
        budget = MemoryBudget(len(data))
    buf = np.frombuffer(data, dtype=np.uint8)
    plane_spans, hostnames = read_space(data, budget)
    headers = []
    for start, stop in plane_spans:
        plane, line_spans = read_plane_header(data, start, stop, budget)
        lines = [read_line(data, buf, a, b, budget) for a, b in line_spans]
        headers.append((plane, lines))
    stamps = [line.timestamp_ns for _, lines in headers for line in lines]
    base_ns = min(stamps) if stamps else 0
    planes = []
    for plane, lines in headers:
        planes.append(_decode_plane(buf, plane, lines, base_ns, request, budget))
        lines.clear()
    return DecodedSpace(planes=planes, base_ns=base_ns, hostnames=hostnames)


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


def _decode_plane(buf, plane, lines, base_ns, request: _Request, budget: MemoryBudget) -> PlaneEvents:
    names = PlaneNames.of(plane)
    wanted_ids = wanted_metadata_ids(buf, names, lines, request, budget)
    total = sum(line.events for line in lines)
    selection = select_events(lines, wanted_ids, base_ns, budget)
    values_wanted = _value_table(names.event_names, names.stat_names, request.value_stats,
                                 request.value_stats_by_event)
    events, stats, strings = _decode_events(buf, selection, wanted_ids, values_wanted, budget)
    keep = events.keep
    budget.charge("decoded events", int(np.count_nonzero(keep)), costs.DECODED_EVENT_BYTES)
    decoded = PlaneEvents(
        name=plane.name,
        event_names=names.event_names,
        stat_names=names.stat_names,
        line_names=[line.name for line in lines],
        total_events=int(total),
        line=selection.line[keep],
        metadata_id=events.metadata_id[keep],
        start_ps=(selection.line_base_ps[selection.line] + events.offset_ps)[keep],
        duration_ps=events.duration_ps[keep],
        strings=strings,
        stat_event=stats.event,
        stat_id=stats.id,
        stat_kind=stats.kind,
        stat_raw=stats.raw,
        stat_string=stats.string,
        metadata_stats=names.metadata_stats,
    )
    budget.release(len(selection), costs.SELECTED_EVENT_BYTES)
    return decoded


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
_STATS_PER_CHUNK = 1 << 15  # stats decoded together: bounds the working arrays


def _stat_filter(buf, class_of_message, keep_lut):
    """A span filter that drops stats whose value is not wanted, by metadata id.

    Only stats in the usual layout (``0x08 <one-byte id>`` first) are judged;
    the others are kept for :func:`decode_stats` to decode and judge.
    """
    width = keep_lut.shape[1]
    limit = np.uint8(min(0x80, width))
    flat = np.ascontiguousarray(keep_lut).ravel()
    offset = class_of_message.astype(np.int64) * width  # where each message's row starts

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
        classes = keep_lut.shape[0] + 1  # one per value_stats_by_event entry, and two more
        message_class = np.zeros(first_ids.size, dtype=np.int8 if classes < 127 else np.int64)
        message_class[first_ids < 0] = keep_lut.shape[0]
        ids = first_ids.astype(np.int64)
        for mid, group in class_of.items():
            message_class[ids == mid] = group
        return cls(message_class, lut)


class _StatTable:
    """Collects decoded stats chunk by chunk, and builds their columns."""

    def __init__(self, event_dtype, budget: MemoryBudget):
        self.event_dtype = event_dtype
        self.budget = budget
        self.texts: dict[str, int] = {}
        self.parts = {name: [] for name in ("event", "id", "kind", "raw", "string")}
        self.count = 0

    def add(self, buf, stats, owner: np.ndarray, first_event: int) -> None:
        """Add ``stats`` (from ``decode_stats``) of the events ``owner + first_event``."""
        self.budget.charge("stats kept", stats.row.size, costs.KEPT_STAT_BYTES)
        self.count += stats.row.size
        is_text = (stats.kind == KIND_STR) | (stats.kind == KIND_BYTES)
        self.parts["event"].append((owner[stats.row] + first_event).astype(self.event_dtype))
        self.parts["id"].append(_narrow(stats.metadata_id))
        self.parts["kind"].append(stats.kind)
        self.parts["raw"].append(stats.raw)
        self.parts["string"].append(
            _intern_texts(buf, stats.text_start, stats.text_stop, is_text, self.texts, self.budget)
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
        self.budget.release(self.count, costs.KEPT_STAT_BYTES - costs.DECODED_STAT_BYTES)
        return _StatColumns(**out)


def _decode_events(buf, selection: Selection, wanted_ids, values_wanted, budget: MemoryBudget):
    """Decode the selected events and their stats.

    Returns (:class:`_EventColumns`, :class:`_StatColumns`, strings). Events
    whose id was not their first field are only filtered here (``keep``).
    Blocks of events are decoded together so that their bytes stay in cache
    and temporary arrays stay small.
    """
    n = len(selection)
    columns = _EventColumns(*(np.zeros(n, dtype=np.int64) for _ in range(3)))
    table = _StatTable(np.int32 if n < 1 << 31 else np.int64, budget)
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
    starts = selection.starts[block]
    scanned = scan_messages(buf, starts, starts + selection.lengths[block],
                             scalar_fields=(1, 2, 3), span_fields=(4,),
                             span_filter=span_filter, budget=table.budget)
    columns.metadata_id[block] = scanned.values[1].view(np.int64)
    columns.offset_ps[block] = scanned.values[2].view(np.int64)
    columns.duration_ps[block] = scanned.values[3].view(np.int64)
    # Spans come one field round at a time, so each event's stats keep
    # their written order (the last of a repeated stat wins).
    owner, span_start, span_stop = (
        scanned.span_owner[4], scanned.span_start[4], scanned.span_stop[4]
    )
    keep_lut, row_class = _block_stat_filter(values_wanted, scanned.values[1], owner)
    del scanned, starts
    for low in range(0, owner.size, _STATS_PER_CHUNK):
        high = low + _STATS_PER_CHUNK
        stats = decode_stats(buf, span_start[low:high], span_stop[low:high], keep_lut,
                              None if row_class is None else row_class[low:high])
        table.add(buf, stats, owner[low:high], block.start)
        del stats
    table.budget.release(owner.size, costs.STAT_SPAN_BYTES)


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


_TEXT_BYTES_PER_BATCH = 1 << 18  # text bytes compared at a time: bounds the working arrays


def _intern_texts(buf, starts, stops, is_text, index: dict[str, int],
                  budget: MemoryBudget) -> np.ndarray:
    """Intern the str / bytes values into ``index`` (text -> code); -1 elsewhere.

    Texts of one length are compared as fixed-size byte strings, a batch of
    at most ``_TEXT_BYTES_PER_BATCH`` bytes at a time.
    """
    codes = np.full(starts.size, -1, dtype=np.int32)
    rows = np.flatnonzero(is_text)
    lengths = stops[rows] - starts[rows]
    for length in np.unique(lengths).tolist():
        group = rows[lengths == length]
        if length == 0:
            codes[group] = _intern_batch([""], np.zeros(group.size, np.int64), index, budget)
            continue
        per_batch = max(1, _TEXT_BYTES_PER_BATCH // length)
        for low in range(0, group.size, per_batch):
            batch = group[low : low + per_batch]
            matrix = np.ascontiguousarray(buf[starts[batch][:, None] + np.arange(length)])
            keys = matrix.view(np.dtype((np.void, length))).ravel()
            distinct, inverse = np.unique(keys, return_inverse=True)
            texts = [d.tobytes().decode("utf-8", "replace") for d in distinct]
            codes[batch] = _intern_batch(texts, inverse.ravel(), index, budget)
    return codes


def _intern_batch(texts, inverse, index: dict[str, int], budget: MemoryBudget) -> np.ndarray:
    """Codes of ``texts[inverse]``, adding new texts to ``index``."""
    mapped = np.zeros(len(texts), dtype=np.int32)
    for i, text in enumerate(texts):
        code = index.get(text)
        if code is None:
            budget.charge("distinct texts", 1, costs.STRING_BYTES + 4 * len(text))
            code = index[text] = len(index)
        mapped[i] = code
    return mapped[inverse]
