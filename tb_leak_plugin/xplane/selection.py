"""Which events of a plane to decode: its names, and the events chosen.

Events are chosen by their metadata id (the first field of nearly every
event): by name, by stats set on their metadata, and by the stats a few
sampled events of each kind carry (step markers, tf.function calls).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tb_leak_plugin.xplane import budget as costs
from tb_leak_plugin.xplane.budget import MemoryBudget
from tb_leak_plugin.xplane.wire import concat, read_varints, scan_messages


def _stat_value(stat, stat_names):
    """The Python value of an XStat message; a ref becomes the name it points to."""
    kind = stat.WhichOneof("value")
    if kind == "ref_value":
        return stat_names.get(stat.ref_value, "")
    return None if kind is None else getattr(stat, kind)


@dataclasses.dataclass
class PlaneNames:
    """A plane's metadata: names by id, and stats set on event metadata."""

    event_names: dict[int, str]
    stat_names: dict[int, str]
    metadata_stats: dict[int, dict[str, object]]

    @classmethod
    def of(cls, plane) -> "PlaneNames":
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
class Selection:
    """The events of a plane chosen for decoding, one entry each, line by line."""

    starts: np.ndarray  # int64 event body starts
    lengths: np.ndarray  # int32 body lengths
    line: np.ndarray  # int32 line index
    first_ids: np.ndarray  # int16 metadata id when it is the event's first field, else -1
    line_base_ps: np.ndarray  # int64 per line: its start since base_ns, picoseconds

    def __len__(self) -> int:
        return int(self.starts.size)


def wanted_metadata_ids(buf, names: PlaneNames, lines, request,
                         budget: MemoryBudget) -> np.ndarray:
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
        wanted |= _sampled_kinds_with_stats(buf, lines, marker_stat_ids, request.samples_per_kind,
                                            budget)
    return np.array(sorted(wanted), dtype=np.int64)


def _sampled_kinds_with_stats(buf, lines, stat_ids, samples: int, budget: MemoryBudget) -> set[int]:
    """Which kinds of events carry these stats? Look at a few of each kind, per line."""
    sample_starts, sample_stops, sample_ids = [], [], []
    for line in lines:
        ids = line.first_ids.astype(np.int64)
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
        sample_stops.append(line.starts[pick] + line.lengths[pick])
        sample_ids.append(ids[pick])
        del ids, candidates, taken
    return _events_with_stats(buf, np.concatenate(sample_starts), np.concatenate(sample_stops),
                              np.concatenate(sample_ids), stat_ids, budget)


def select_events(lines, wanted_ids: np.ndarray, base_ns: int, budget: MemoryBudget) -> Selection:
    """The events to decode, line after line: those of a wanted kind, and
    those whose kind is not known before decoding. Frees each line's spans."""
    is_wanted = _membership(wanted_ids)
    starts, lengths, line_of, first_ids = [], [], [], []
    for index, line in enumerate(lines):
        ids = line.first_ids
        keep = np.flatnonzero((ids < 0) | is_wanted(ids.astype(np.int64)))
        budget.charge("selected events", keep.size, costs.SELECTED_EVENT_BYTES)
        first_ids.append(ids[keep])
        starts.append(line.starts[keep])
        lengths.append(line.lengths[keep])
        line_of.append(np.full(keep.size, index, dtype=np.int32))
        budget.release(line.events, costs.LINE_EVENT_KEPT_BYTES)
        line.starts = line.lengths = line.first_ids = None  # every event: no longer needed
        del ids, keep
    return Selection(
        starts=concat(starts, np.int64),
        lengths=concat(lengths, np.int32),
        line=concat(line_of, np.int32),
        first_ids=concat(first_ids, np.int16),
        line_base_ps=np.array([(line.timestamp_ns - base_ns) * 1000 for line in lines],
                              dtype=np.int64),
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


def _events_with_stats(buf, starts, stops, ids, stat_ids, budget: MemoryBudget) -> set[int]:
    """Metadata ids of the events (given by span) that carry any of ``stat_ids``."""
    budget.charge("sampled events", starts.size, costs.SELECTED_EVENT_BYTES)
    scanned = scan_messages(buf, starts, stops, scalar_fields=(), span_fields=(4,), budget=budget)
    owner, s_start, s_stop = scanned.span_owner[4], scanned.span_start[4], scanned.span_stop[4]
    budget.release(owner.size, costs.STAT_SPAN_BYTES)
    budget.release(starts.size, costs.SELECTED_EVENT_BYTES)
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
