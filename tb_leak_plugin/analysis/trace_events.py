"""From a profiler trace to arrays: memory events and traced steps.

Decodes what the trace analysis needs from an XSpace (`decode`) and collects
it into columns: every ``MemoryAllocation`` / ``MemoryDeallocation`` event
(`extract_memory_events`) and the traced steps, from step markers or as equal
pseudo-steps (`extract_steps`). `tb_leak_plugin.analysis.trace` pairs and
ranks them. Pure functions: no I/O, no TensorFlow.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from tb_leak_plugin.xplane import schema as xplane
from tb_leak_plugin.xplane.budget import MemoryBudget
from tb_leak_plugin.xplane.decode import decode_space

MEMORY_ALLOCATION = "MemoryAllocation"
MEMORY_DEALLOCATION = "MemoryDeallocation"
STEP_STAT = "step_num"
TRACING_COUNT_STAT = "tracing_count"
FUNCTION_CALL_STAT = "tf_function_call"
UNKNOWN = "unknown"

# Events TensorFlow 2.21 writes while it traces a tf.function; the concrete
# functions it creates are named ``__inference_<function>_<number>``.
GRAPH_BUILDING_PATTERN = re.compile(r"graph_building|TraceContext|Tracing", re.IGNORECASE)
CONCRETE_FUNCTION_PATTERN = re.compile(r"__inference_(\w+)_(\d+)")

# Stats whose values the analysis reads; others are skipped while decoding.
VALUE_STATS = frozenset(
    {
        "addr",
        "allocation_bytes",
        "requested_bytes",
        "allocator_name",
        "tf_op",
        "region_type",
        "shape",
        "data_type",
        STEP_STAT,
        TRACING_COUNT_STAT,
        FUNCTION_CALL_STAT,
    }
)

# Pseudo-steps when the trace has no step markers.
PSEUDO_STEPS = 20

# Step index of times outside the traced steps.
BEFORE_STEPS = -1
AFTER_STEPS = -2


@dataclasses.dataclass
class Steps:
    """The traced steps: one entry per step, in time order.

    Attributes:
      number: the step number (``step_num``), or the pseudo-step index.
      start_ps, end_ps: the step's time span, picoseconds.
      source: ``"markers"``, ``"pseudo"`` (equal slices of the trace's time)
        or ``"none"`` (nothing to slice).
    """

    number: np.ndarray
    start_ps: np.ndarray
    end_ps: np.ndarray
    source: str

    def __len__(self) -> int:
        return int(self.number.size)

    def index_of(self, times_ps: np.ndarray) -> np.ndarray:
        """Step index of each time; BEFORE_STEPS / AFTER_STEPS outside them.

        A time in the gap between two steps belongs to the earlier step.
        """
        times_ps = np.asarray(times_ps, dtype=np.int64)
        if not len(self):
            return np.full(times_ps.size, BEFORE_STEPS, dtype=np.int64)
        index = np.searchsorted(self.start_ps, times_ps, side="right") - 1
        index[index < 0] = BEFORE_STEPS
        index[times_ps > self.end_ps[-1]] = AFTER_STEPS
        return index


@dataclasses.dataclass
class MemoryEvents:
    """Memory events of a trace as arrays (one entry per event).

    ``labels`` holds every text (allocator, op, region, shape, data type);
    the ``*_code`` columns index it.
    """

    plane: np.ndarray  # int32: which plane the event is on
    time_ps: np.ndarray  # int64
    is_allocation: np.ndarray  # bool; False = deallocation
    address: np.ndarray  # int64 (uint64 addresses keep their bit pattern)
    bytes: np.ndarray  # int64: allocation_bytes, else requested_bytes
    allocator_code: np.ndarray  # int32
    op_code: np.ndarray
    region_code: np.ndarray
    shape_code: np.ndarray
    dtype_code: np.ndarray
    labels: list[str]
    without_address: int = 0  # memory events left out: no address to pair by

    def __len__(self) -> int:
        return int(self.time_ps.size)

    @classmethod
    def empty(cls) -> "MemoryEvents":
        z = np.zeros(0, dtype=np.int64)
        c = np.zeros(0, dtype=np.int32)
        return cls(c, z, np.zeros(0, bool), z, z, c, c, c, c, c, [])


# -- from an XSpace to arrays ------------------------------------------------------------


def _select_event(name: str) -> bool:
    return (
        name in (MEMORY_ALLOCATION, MEMORY_DEALLOCATION)
        or GRAPH_BUILDING_PATTERN.search(name) is not None
        or "__inference_" in name
    )


def decode(space, budget: MemoryBudget | None = None) -> xplane.DecodedSpace:
    """Decode what the analysis needs from an XSpace (bytes or a message).

    ``budget`` bounds the memory (default: 4x the serialized size plus working
    space, see :mod:`tb_leak_plugin.xplane.budget`); pass the same budget to
    :func:`tb_leak_plugin.analysis.trace.analyze_decoded`.

    Raises:
      xplane.XPlaneDecodeError: the bytes are not a readable XSpace.
      xplane.XPlaneMemoryLimitError: (a subclass) decoding them would pass the budget.
    """
    data = space.SerializeToString() if hasattr(space, "SerializeToString") else space
    return decode_space(
        data,
        select_names=_select_event,
        select_stats=(STEP_STAT, TRACING_COUNT_STAT),
        value_stats=VALUE_STATS,
        # A free is paired by allocator and address; its other stats are not read.
        value_stats_by_event={MEMORY_DEALLOCATION: ("addr", "allocator_name")},
        budget=budget,
    )


class _Labels:
    def __init__(self):
        self.texts: list[str] = []
        self._index: dict[str, int] = {}

    def code(self, text: str) -> int:
        code = self._index.get(text)
        if code is None:
            code = self._index[text] = len(self.texts)
            self.texts.append(text)
        return code

    def recode(self, codes: np.ndarray, table: list[str], convert=str) -> np.ndarray:
        """Map per-plane codes (-1 = absent) into this table."""
        mapping = np.array(
            [self.code(convert(t)) for t in table] + [self.code(UNKNOWN)], dtype=np.int32
        )
        return mapping[np.where(codes < 0, len(table), codes)]


def _ids_named(plane: xplane.PlaneEvents, name: str) -> list[int]:
    return [mid for mid, n in plane.event_names.items() if n == name]


def extract_memory_events(decoded: xplane.DecodedSpace) -> MemoryEvents:
    """Collect the memory events of every plane into one :class:`MemoryEvents`."""
    labels = _Labels()
    parts = []
    skipped = 0
    for plane_index, plane in enumerate(decoded.planes):
        alloc_ids = _ids_named(plane, MEMORY_ALLOCATION)
        free_ids = _ids_named(plane, MEMORY_DEALLOCATION)
        if not (alloc_ids or free_ids) or not len(plane):
            continue
        address, has_address = plane.int_stat("addr")
        is_memory = np.isin(plane.metadata_id, alloc_ids + free_ids)
        # Without an address an event cannot be paired: leave it out, counted.
        skipped += int(np.count_nonzero(is_memory & ~has_address))
        rows = np.flatnonzero(is_memory & has_address)
        if not rows.size:
            continue
        allocated, has_allocated = plane.int_stat("allocation_bytes")
        size = allocated
        if not (has_allocated[rows] & (allocated[rows] > 0)).all():
            requested, _ = plane.int_stat("requested_bytes")
            size = np.where(has_allocated & (allocated > 0), allocated, requested)
        columns = {}
        for stat in ("allocator_name", "tf_op", "region_type", "shape"):
            codes, table = plane.str_stat(stat)
            columns[stat] = labels.recode(codes[rows], table, _clean_label)
        dtype_codes, dtype_table = plane.str_stat("data_type")
        columns["data_type"] = labels.recode(dtype_codes[rows], dtype_table, data_type_name)
        parts.append(
            dict(
                plane=np.full(rows.size, plane_index, dtype=np.int32),
                time_ps=plane.start_ps[rows],
                is_allocation=np.isin(plane.metadata_id[rows], alloc_ids),
                address=address[rows],
                bytes=np.maximum(size[rows], 0),
                allocator_code=columns["allocator_name"],
                op_code=columns["tf_op"],
                region_code=columns["region_type"],
                shape_code=columns["shape"],
                dtype_code=columns["data_type"],
            )
        )
    if not parts:
        events = MemoryEvents.empty()
        events.without_address = skipped
        return events
    merged = {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}
    return MemoryEvents(labels=labels.texts, without_address=skipped, **merged)


def _clean_label(text: str) -> str:
    return text if text else UNKNOWN


_DTYPE_NAMES = {
    1: "float32", 2: "float64", 3: "int32", 4: "uint8", 5: "int16", 6: "int8", 7: "string",
    8: "complex64", 9: "int64", 10: "bool", 11: "qint8", 12: "quint8", 13: "qint32",
    14: "bfloat16", 15: "qint16", 16: "quint16", 17: "uint16", 18: "complex128",
    19: "float16", 20: "resource", 21: "variant", 22: "uint32", 23: "uint64",
}


def data_type_name(text: str) -> str:
    """A readable dtype for a ``data_type`` stat (TF DataType number or text)."""
    text = text.strip()
    if not text:
        return UNKNOWN
    try:
        number = float(text)
    except ValueError:
        return text
    if not number.is_integer():
        return text
    number = int(number)
    if number == 0:
        return UNKNOWN
    return _DTYPE_NAMES.get(number, f"dtype {number}")


def extract_steps(decoded: xplane.DecodedSpace, span_ps: tuple[int, int] | None) -> Steps:
    """Steps from step markers; else ``PSEUDO_STEPS`` equal slices of ``span_ps``.

    Markers with the same step number (several threads or hosts) are merged
    into one step spanning all of them.
    """
    numbers, starts, ends = [], [], []
    for plane in decoded.planes:
        if not len(plane):
            continue
        has = plane.has_stat(STEP_STAT)
        if not has.any():
            continue
        values, present = plane.int_stat(STEP_STAT)
        rows = np.flatnonzero(has & present)
        numbers.append(values[rows])
        starts.append(plane.start_ps[rows])
        ends.append(plane.start_ps[rows] + np.maximum(plane.duration_ps[rows], 0))
    if numbers:
        number = np.concatenate(numbers)
        start = np.concatenate(starts)
        end = np.concatenate(ends)
        distinct, inverse = np.unique(number, return_inverse=True)
        merged_start = np.full(distinct.size, np.iinfo(np.int64).max, dtype=np.int64)
        merged_end = np.full(distinct.size, np.iinfo(np.int64).min, dtype=np.int64)
        np.minimum.at(merged_start, inverse, start)
        np.maximum.at(merged_end, inverse, end)
        order = np.argsort(merged_start, kind="stable")
        return Steps(distinct[order], merged_start[order], merged_end[order], "markers")
    if span_ps is None or span_ps[1] <= span_ps[0]:
        empty = np.zeros(0, dtype=np.int64)
        return Steps(empty, empty, empty, "none")
    edges = np.linspace(span_ps[0], span_ps[1], PSEUDO_STEPS + 1)
    edges = np.round(edges).astype(np.int64)
    return Steps(
        np.arange(PSEUDO_STEPS, dtype=np.int64), edges[:-1], edges[1:], "pseudo"
    )
