"""Which ops keep memory alive across training steps, from a profiler trace.

Pure functions: an XSpace (bytes or message) or arrays of memory events in,
results out. No I/O, no TensorFlow.

How it works. TensorFlow's tracing allocators write a ``MemoryAllocation``
event for each allocation and a ``MemoryDeallocation`` for each free, with
the address, size, allocator and producing op as stats. Pairing each free
with the allocation it releases (same plane, allocator and address, in time
order) leaves the allocations still alive when the trace stopped. An op
that leaves memory behind in most traced steps, more with every step, is
what a leak looks like (a list that keeps every step's output, a cache
without eviction). One-off retention is not: variables and optimizer slots
created in the first step, and the last step's outputs, which the program
still holds when the trace stops; nor is a cache that filled up during the
first half of the window and then stopped growing.

Steps come from step markers (events carrying a ``step_num`` stat, as
written by ``tf.profiler.experimental.Trace('train', step_num=k, _r=1)``);
without them the trace's time is split into equal pseudo-steps.
"""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np

from tb_leak_plugin import xplane

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

# A leak: memory left behind in at least this share of the traced steps,
# and in at least MIN_LEAK_STEPS of them.
MIN_LEAK_STEP_FRACTION = 0.5
MIN_LEAK_STEPS = 3
# ... and still growing: memory left behind in at least this share of the
# second half's steps (a cache that filled up early is not a leak).
MIN_LATE_STEP_FRACTION = 0.25
# Pseudo-steps when the trace has no step markers.
PSEUDO_STEPS = 20
# A tf.function traced in at least this many steps keeps retracing.
MIN_RETRACING_STEPS = 3

ONEDNN_ALLOCATOR = "mklcpu"
FULL_COVERAGE_ENV = "TF_ENABLE_ONEDNN_OPTS=0 TF_CPU_ALLOCATOR_USE_BFC=1"

# Step index of times outside the traced steps.
BEFORE_STEPS = -1
AFTER_STEPS = -2


# -- results --------------------------------------------------------------------


@dataclasses.dataclass
class OpRetention:
    """Memory one op kept alive to the end of the trace.

    An op is identified by (op, region_type, shape, data_type, allocator).

    Attributes:
      op: the ``tf_op`` that allocated (node name), or ``"unknown"``.
      region_type: ``output``, ``temp``, ``persist`` ... or ``"unknown"``.
      shape, data_type, allocator: as recorded, or ``"unknown"``.
      allocations: allocations made in the trace.
      frees: of those, how many were freed before it ended.
      retained_bytes: bytes of the allocations never freed.
      retained_allocations: how many allocations were never freed.
      steps_retained: traced steps in which the op allocated memory that
        was never freed.
      steps_total: traced steps (or pseudo-steps) in the trace.
      retained_bytes_per_step: least-squares slope of the cumulative
        retained bytes against the step index, in bytes per step.
      suspicious: the pattern of a leak (see module docstring).
      reason: one sentence saying why it is, or is not, suspicious.
    """

    op: str
    region_type: str
    shape: str
    data_type: str
    allocator: str
    allocations: int
    frees: int
    retained_bytes: int
    retained_allocations: int
    steps_retained: int
    steps_total: int
    retained_bytes_per_step: float
    suspicious: bool
    reason: str

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        return (self.op, self.region_type, self.shape, self.data_type, self.allocator)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


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


@dataclasses.dataclass
class TraceAnalysis:
    """Everything the trace analysis found in one XSpace (one host, one session).

    Attributes:
      steps: traced steps (or pseudo-steps).
      step_source: ``"markers"``, ``"pseudo"`` or ``"none"``.
      step_note: a plain sentence when steps are not from markers, else "".
      allocators: names of the allocators seen in memory events.
      memory_events: allocation and deallocation events.
      coverage_note: what the traced allocators can and cannot show.
      ops: every op that retained memory, most suspicious first.
      suspicious: the ops flagged as leaking.
      retracing: one dict per tf.function traced inside the window.
      unmatched_frees: frees of memory allocated before the trace started.
      planes: names of the planes read.
    """

    steps: int
    step_source: str
    step_note: str
    allocators: list[str]
    memory_events: int
    coverage_note: str
    ops: list[OpRetention]
    suspicious: list[OpRetention]
    retracing: list[dict]
    unmatched_frees: int
    planes: list[str]


# -- from an XSpace to arrays ------------------------------------------------------------


def _select_event(name: str) -> bool:
    return (
        name in (MEMORY_ALLOCATION, MEMORY_DEALLOCATION)
        or GRAPH_BUILDING_PATTERN.search(name) is not None
        or "__inference_" in name
    )


def decode(space) -> xplane.DecodedSpace:
    """Decode what the analysis needs from an XSpace (bytes or a message).

    Raises:
      xplane.XPlaneDecodeError: the bytes are not a readable XSpace.
    """
    data = space.SerializeToString() if hasattr(space, "SerializeToString") else space
    return xplane.decode_space(
        data,
        select_names=_select_event,
        select_stats=(STEP_STAT, TRACING_COUNT_STAT),
        value_stats=VALUE_STATS,
        # A free is paired by allocator and address; its other stats are not read.
        value_stats_by_event={MEMORY_DEALLOCATION: ("addr", "allocator_name")},
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


# -- pairing and retention ---------------------------------------------------------------


@dataclasses.dataclass
class Pairing:
    """What happened to each allocation (rows of ``MemoryEvents``)."""

    allocation_rows: np.ndarray  # rows that are allocations, in row order
    freed: np.ndarray  # bool per allocation row: released before the trace ended
    unmatched_frees: int  # frees with no allocation in the trace (made before it)
    implicit_frees: int  # allocations whose address was reused without a traced free


def pair_allocations(events: MemoryEvents) -> Pairing:
    """Pair frees with allocations by (plane, allocator, address) in time order.

    At equal times a free sorts before an allocation (the address must be
    free to be handed out again). An allocation followed by another
    allocation at the same address was released without a traced free.
    """
    n = len(events)
    if not n:
        z = np.zeros(0, dtype=np.int64)
        return Pairing(z, np.zeros(0, dtype=bool), 0, 0)
    group = events.plane.astype(np.int64) * (int(events.allocator_code.max()) + 1) + events.allocator_code
    order = np.lexsort((events.is_allocation, events.time_ps, events.address, group))  # frees first
    plane = events.plane[order]
    allocator = events.allocator_code[order]
    address = events.address[order]
    is_alloc = events.is_allocation[order]
    same_as_next = np.zeros(n, dtype=bool)
    same_as_next[:-1] = (
        (plane[1:] == plane[:-1]) & (allocator[1:] == allocator[:-1]) & (address[1:] == address[:-1])
    )
    next_is_alloc = np.zeros(n, dtype=bool)
    next_is_alloc[:-1] = is_alloc[1:]
    freed_sorted = is_alloc & same_as_next
    implicit = int(np.count_nonzero(is_alloc & same_as_next & next_is_alloc))
    previous_is_alloc_same = np.zeros(n, dtype=bool)
    previous_is_alloc_same[1:] = same_as_next[:-1] & is_alloc[:-1]
    unmatched = int(np.count_nonzero(~is_alloc & ~previous_is_alloc_same))
    freed = np.zeros(n, dtype=bool)
    freed[order] = freed_sorted
    rows = np.flatnonzero(events.is_allocation)
    return Pairing(rows, freed[rows], unmatched, implicit)


def op_retention(events: MemoryEvents, steps: Steps, pairing: Pairing | None = None) -> list[OpRetention]:
    """Per op: allocations, frees and what stayed alive, ranked (suspicious first).

    Only ops that retained memory are returned.
    """
    if pairing is None:
        pairing = pair_allocations(events)
    rows = pairing.allocation_rows
    if not rows.size:
        return []
    columns = [
        events.op_code[rows],
        events.region_code[rows],
        events.shape_code[rows],
        events.dtype_code[rows],
        events.allocator_code[rows],
    ]
    key_of = _combined_key(columns)
    n_keys = int(key_of.max()) + 1
    first = np.full(n_keys, rows.size, dtype=np.int64)
    np.minimum.at(first, key_of, np.arange(rows.size))
    keys = np.stack([c[first] for c in columns], axis=1)
    size = events.bytes[rows].astype(np.float64)
    retained = ~pairing.freed
    step = steps.index_of(events.time_ps[rows])
    total_steps = len(steps)

    allocations = np.bincount(key_of, minlength=n_keys)
    frees = np.bincount(key_of, weights=pairing.freed, minlength=n_keys)
    retained_allocations = np.bincount(key_of, weights=retained, minlength=n_keys)
    retained_bytes = np.bincount(key_of, weights=size * retained, minlength=n_keys)

    in_steps = retained & (step >= 0)
    pairs = np.unique(key_of[in_steps] * max(total_steps, 1) + step[in_steps])
    steps_retained = np.bincount(pairs // max(total_steps, 1), minlength=n_keys)
    late_half = total_steps // 2  # steps from here on are the second half
    late = pairs[pairs % max(total_steps, 1) >= late_half]
    steps_retained_late = np.bincount(late // max(total_steps, 1), minlength=n_keys)
    # Slope of cumulative retained bytes against the step index: with r_s
    # bytes left behind in step s of S, it is 6 * sum(r_s * s * (S - s)) /
    # (S * (S^2 - 1)); a one-off in the first step weighs nothing.
    s = step[in_steps].astype(np.float64)
    weights = size[in_steps] * s * (total_steps - s)
    numerator = np.bincount(key_of[in_steps], weights=weights, minlength=n_keys)
    if total_steps >= 2:
        per_step = 6.0 * numerator / (total_steps * (total_steps**2 - 1.0))
    else:
        per_step = np.zeros(n_keys)
    first_only, last_only, before, after = (
        _retained_where(key_of, retained, step, n_keys, total_steps)
    )

    needed = max(MIN_LEAK_STEPS, math.ceil(MIN_LEAK_STEP_FRACTION * total_steps))
    needed_late = max(1, math.ceil(MIN_LATE_STEP_FRACTION * (total_steps - late_half)))
    results = []
    for k in np.flatnonzero(retained_allocations > 0).tolist():
        still_growing = bool(steps_retained_late[k] >= needed_late)
        suspicious = bool(steps_retained[k] >= needed and per_step[k] > 0 and still_growing)
        label = [events.labels[c] for c in keys[k].tolist()]
        results.append(
            OpRetention(
                op=label[0],
                region_type=label[1],
                shape=label[2],
                data_type=label[3],
                allocator=label[4],
                allocations=int(allocations[k]),
                frees=int(round(frees[k])),
                retained_bytes=int(round(retained_bytes[k])),
                retained_allocations=int(round(retained_allocations[k])),
                steps_retained=int(steps_retained[k]),
                steps_total=total_steps,
                retained_bytes_per_step=float(per_step[k]),
                suspicious=suspicious,
                reason=_reason(
                    suspicious,
                    int(steps_retained[k]),
                    total_steps,
                    needed,
                    int(round(retained_bytes[k])),
                    int(round(retained_allocations[k])),
                    float(per_step[k]),
                    bool(first_only[k]),
                    bool(last_only[k]),
                    int(before[k]),
                    int(after[k]),
                    steps.source,
                    still_growing,
                ),
            )
        )
    return rank_ops(results)


def _combined_key(columns: list[np.ndarray]) -> np.ndarray:
    """Dense int64 id (0..k-1) of each distinct row of the given code columns."""
    key = np.zeros(columns[0].size, dtype=np.int64)
    for column in columns:
        _, rank = _dense(column.astype(np.int64))
        _, key = _dense(key * (int(rank.max(initial=0)) + 1) + rank)
    return key


def _dense(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct values, index of each among them); O(n) for small non-negative ints."""
    if values.size and int(values.min()) >= 0 and int(values.max()) < 1 << 22:
        seen = np.zeros(int(values.max()) + 1, dtype=bool)
        seen[values] = True
        distinct = np.flatnonzero(seen)
        slot = np.zeros(seen.size, dtype=np.int64)
        slot[distinct] = np.arange(distinct.size)
        return distinct, slot[values]
    distinct, inverse = np.unique(values, return_inverse=True)
    return distinct, inverse.ravel().astype(np.int64)


def rank_ops(ops: list[OpRetention]) -> list[OpRetention]:
    """Suspicious first, then by growth per step, then by bytes retained."""
    return sorted(
        ops,
        key=lambda o: (not o.suspicious, -o.retained_bytes_per_step, -o.retained_bytes, o.key),
    )


def _retained_where(key_of, retained, step, n_keys, total_steps):
    """Per op: retained only in the first step, only in the last, and counts
    of retained allocations made before / after the traced steps."""
    in_steps = retained & (step >= 0)
    lowest = np.full(n_keys, np.iinfo(np.int64).max)
    highest = np.full(n_keys, -1)
    np.minimum.at(lowest, key_of[in_steps], step[in_steps])
    np.maximum.at(highest, key_of[in_steps], step[in_steps])
    first_only = (highest == 0) & (lowest == 0)
    last_only = (lowest == total_steps - 1) & (highest == total_steps - 1) & (total_steps > 1)
    before = np.bincount(key_of, weights=retained & (step == BEFORE_STEPS), minlength=n_keys)
    after = np.bincount(key_of, weights=retained & (step == AFTER_STEPS), minlength=n_keys)
    return first_only, last_only, before, after


def format_bytes(count: float) -> str:
    """``1536`` -> ``"1.5 KiB"``."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def _reason(suspicious, steps_retained, total, needed, retained, count, per_step,
            first_only, last_only, before, after, source, still_growing) -> str:
    kind = "pseudo-steps" if source == "pseudo" else "steps"
    held = f"{format_bytes(retained)} in {count} allocation{'s' if count != 1 else ''}"
    if suspicious:
        return (
            f"left memory behind in {steps_retained} of {total} {kind} and never freed it "
            f"({held}, about {format_bytes(per_step)} more each step): the pattern of a leak"
        )
    if first_only:
        return (
            f"{held} kept from the first traced step only: one-off state such as "
            "variables, optimizer slots or caches built once"
        )
    if last_only:
        return (
            f"{held} kept from the last traced step only: outputs the program still "
            "held when the trace stopped"
        )
    if steps_retained == 0 and before and not after:
        return f"{held} allocated before the first traced step and still held"
    if steps_retained == 0 and after:
        return f"{held} allocated after the last traced step"
    if steps_retained == 0:
        return f"{held} kept, outside the traced steps"
    if steps_retained < needed:
        return (
            f"{held} kept from {steps_retained} of {total} {kind}; a leak keeps memory "
            f"from at least {needed} of them"
        )
    if not still_growing:
        return (
            f"{held} kept from {steps_retained} of {total} {kind}, but hardly any in the "
            "second half: the growth stopped, as when a cache fills up"
        )
    return f"{held} kept from {steps_retained} of {total} {kind}, but not growing with the steps"


# -- retracing -----------------------------------------------------------------------------


def find_retracing(decoded: xplane.DecodedSpace, steps: Steps) -> list[dict]:
    """tf.functions traced during the traced steps, most retraced first.

    Evidence per function: calls whose ``tf_function_call`` stat says
    ``traced...`` (or whose ``tracing_count`` went up), graph-building
    events inside its calls, and new ``__inference_<name>_<n>`` concrete
    functions. ``growing`` is True when tracing happened in at least
    ``MIN_RETRACING_STEPS`` different steps.

    Each dict: function, calls, traces, tracing_steps, steps_total,
    tracing_count_first, tracing_count_last, concrete_functions, growing,
    reason.
    """
    found: dict[str, dict] = {}

    def entry(name: str) -> dict:
        return found.setdefault(
            name,
            dict(function=name, calls=0, traces=0, steps=set(), counts=[],
                 concrete=set(), graph_building=0),
        )

    for plane in decoded.planes:
        if not len(plane):
            continue
        names = plane.event_names
        graph_ids = [m for m, n in names.items() if GRAPH_BUILDING_PATTERN.search(n)]
        has_count = plane.has_stat(TRACING_COUNT_STAT)
        calls = np.flatnonzero(has_count)
        counts, _ = plane.int_stat(TRACING_COUNT_STAT)
        call_codes, call_table = plane.str_stat(FUNCTION_CALL_STAT)
        call_step = steps.index_of(plane.start_ps[calls])
        traced_call = np.zeros(calls.size, dtype=bool)
        # Tracing events inside a call mark that call as traced.
        graph_rows = np.flatnonzero(np.isin(plane.metadata_id, graph_ids))
        unattributed = []
        for row in graph_rows.tolist():
            inside = np.flatnonzero(
                (plane.line[calls] == plane.line[row])
                & (plane.start_ps[calls] <= plane.start_ps[row])
                & (plane.start_ps[calls] + plane.duration_ps[calls] >= plane.start_ps[row])
            )
            if inside.size:
                traced_call[inside[np.argmax(plane.start_ps[calls][inside])]] = True
            else:
                unattributed.append(row)
        by_name: dict[str, list[int]] = {}
        for i, mid in enumerate(plane.metadata_id[calls].tolist()):
            by_name.setdefault(names.get(mid, UNKNOWN), []).append(i)
        for name, members in by_name.items():
            members = np.array(members)
            members = members[np.argsort(plane.start_ps[calls][members], kind="stable")]
            item = entry(name)
            count = counts[calls][members]
            said = call_codes[calls][members]
            traced = traced_call[members].copy()
            for j, code in enumerate(said.tolist()):
                if code >= 0 and call_table[code].lower().startswith("traced"):
                    traced[j] = True
            if (said < 0).any():
                went_up = np.zeros(members.size, dtype=bool)
                went_up[1:] = count[1:] > count[:-1]
                traced |= went_up & (said < 0)
            member_steps = call_step[members]
            item["calls"] += int(members.size)
            item["traces"] += int(np.count_nonzero(traced))
            item["steps"].update(member_steps[traced & (member_steps >= 0)].tolist())
            item["counts"].extend(count.tolist())
        if unattributed:
            item = entry("(graph building outside a traced call)")
            rows = np.array(unattributed)
            item["graph_building"] += rows.size
            item["traces"] += rows.size
            s = steps.index_of(plane.start_ps[rows])
            item["steps"].update(s[s >= 0].tolist())
        # New concrete functions, by first appearance.
        concrete = {
            mid: match
            for mid, match in ((m, CONCRETE_FUNCTION_PATTERN.search(n)) for m, n in names.items())
            if match
        }
        rows = np.flatnonzero(np.isin(plane.metadata_id, list(concrete)))
        if rows.size:
            order = np.lexsort((plane.start_ps[rows], plane.metadata_id[rows]))
            rows = rows[order]
            mids, first = np.unique(plane.metadata_id[rows], return_index=True)
            first_steps = steps.index_of(plane.start_ps[rows[first]])
            for mid, step in zip(mids.tolist(), first_steps.tolist()):
                match = concrete[mid]
                entry(match.group(1))["concrete"].add((match.group(2), int(step)))

    results = []
    for item in found.values():
        # The earliest concrete function may predate the trace: not evidence.
        later = sorted(item["concrete"], key=lambda c: (c[1] < 0, c[1]))[1:]
        concrete_steps = {s for _, s in later if s >= 0}
        new_concrete = sum(1 for _, s in later if s >= 0)
        tracing_steps = item["steps"] | concrete_steps
        if not tracing_steps and not item["traces"]:
            continue
        growing = len(tracing_steps) >= MIN_RETRACING_STEPS
        counts = item["counts"]
        result = dict(
            function=item["function"],
            calls=item["calls"],
            traces=max(item["traces"], new_concrete),
            tracing_steps=len(tracing_steps),
            steps_total=len(steps),
            tracing_count_first=counts[0] if counts else None,
            tracing_count_last=counts[-1] if counts else None,
            concrete_functions=len({n for n, _ in item["concrete"]}),
            growing=growing,
        )
        result["reason"] = (
            f"traced again in {len(tracing_steps)} of {len(steps)} steps: each trace builds "
            "and keeps a new graph; pass tensors (not Python values) and fixed shapes, "
            "or use reduce_retracing=True"
            if growing
            else f"traced in {len(tracing_steps)} of {len(steps)} steps (warm-up tracing is normal)"
        )
        results.append(result)
    results.sort(key=lambda r: (not r["growing"], -r["tracing_steps"], r["function"]))
    return results


# -- coverage --------------------------------------------------------------------------------


def coverage_note(allocators: list[str], memory_events: int, smallest_bytes: int | None,
                  without_address: int = 0) -> str:
    """Say plainly what the traced allocators can and cannot show."""
    note = _coverage(allocators, memory_events, smallest_bytes)
    if without_address:
        note += (f" {without_address} memory event{'s' if without_address != 1 else ''} "
                 "had no address and could not be paired; left out.")
    return note


def _coverage(allocators, memory_events, smallest_bytes) -> str:
    if not memory_events:
        return (
            "This trace has no memory events, so it cannot show which ops keep memory. "
            "TensorFlow traces allocations only through some allocators: with its default "
            "oneDNN build on x86 only allocations of about 256 KiB and up (allocator mklcpu); "
            "with TF_ENABLE_ONEDNN_OPTS=0 alone, none. For every allocation set "
            f"{FULL_COVERAGE_ENV} in the environment before TensorFlow starts."
        )
    names = ", ".join(allocators)
    if ONEDNN_ALLOCATOR in allocators:
        smallest = f" (smallest traced: {format_bytes(smallest_bytes)})" if smallest_bytes else ""
        return (
            f"Traced allocators: {names}. The oneDNN allocator mklcpu (TensorFlow's default "
            "on x86) traces only large allocations, about 256 KiB and up; smaller tensors "
            f"are invisible here{smallest}. For full coverage set {FULL_COVERAGE_ENV} in "
            "the environment before TensorFlow starts."
        )
    return f"Traced allocators: {names}. Every allocation through them is in the trace."


# -- everything ------------------------------------------------------------------------------


def analyze_memory_events(events: MemoryEvents, steps: Steps) -> tuple[list[OpRetention], Pairing]:
    """Pair, then rank ops by retention (see :func:`op_retention`)."""
    pairing = pair_allocations(events)
    return op_retention(events, steps, pairing), pairing


def analyze_decoded(decoded: xplane.DecodedSpace) -> TraceAnalysis:
    """Run the whole analysis on an already decoded space."""
    events = extract_memory_events(decoded)
    span = (int(events.time_ps.min()), int(events.time_ps.max())) if len(events) else None
    steps = extract_steps(decoded, span)
    ops, pairing = analyze_memory_events(events, steps)
    allocators = sorted({events.labels[c] for c in np.unique(events.allocator_code).tolist()})
    sizes = events.bytes[events.is_allocation]
    smallest = int(sizes[sizes > 0].min()) if (sizes > 0).any() else None
    if steps.source == "pseudo":
        step_note = (
            f"No step markers in this trace: its time was split into {len(steps)} equal "
            "pseudo-steps. Wrap each training step in "
            "tf.profiler.experimental.Trace('train', step_num=step, _r=1) (tb-leak's "
            "ProfilerWindow does) for per-step results."
        )
    elif steps.source == "none":
        step_note = "No step markers and no memory events: nothing to split into steps."
    else:
        step_note = ""
    return TraceAnalysis(
        steps=len(steps),
        step_source=steps.source,
        step_note=step_note,
        allocators=allocators,
        memory_events=len(events),
        coverage_note=coverage_note(allocators, len(events), smallest, events.without_address),
        ops=ops,
        suspicious=[o for o in ops if o.suspicious],
        retracing=find_retracing(decoded, steps),
        unmatched_frees=pairing.unmatched_frees,
        planes=[p.name for p in decoded.planes],
    )


def analyze_space(space) -> TraceAnalysis:
    """Analyse one XSpace (serialized bytes, or an XSpace message).

    Raises:
      xplane.XPlaneDecodeError: the bytes are not a readable XSpace.
    """
    return analyze_decoded(decode(space))
