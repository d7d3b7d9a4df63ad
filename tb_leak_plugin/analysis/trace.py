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

import numpy as np

from tb_leak_plugin.xplane import budget as costs
from tb_leak_plugin.xplane import schema as xplane
from tb_leak_plugin.xplane.budget import MemoryBudget
from tb_leak_plugin.analysis.trace_events import (
    AFTER_STEPS,
    BEFORE_STEPS,
    CONCRETE_FUNCTION_PATTERN,
    FUNCTION_CALL_STAT,
    GRAPH_BUILDING_PATTERN,
    MEMORY_ALLOCATION,
    MEMORY_DEALLOCATION,
    PSEUDO_STEPS,
    STEP_STAT,
    TRACING_COUNT_STAT,
    UNKNOWN,
    VALUE_STATS,
    MemoryEvents,
    Steps,
    data_type_name,
    decode,
    extract_memory_events,
    extract_steps,
)
from tb_leak_plugin.analysis.trace_notes import (
    FULL_COVERAGE_ENV,
    MIN_RETRACING_STEPS,
    ONEDNN_ALLOCATOR,
    coverage_note,
    find_retracing,
)
from tb_leak_plugin.units import format_bytes

# The trace analysis' public names, wherever they are defined.
__all__ = [
    "MEMORY_ALLOCATION", "MEMORY_DEALLOCATION", "STEP_STAT", "TRACING_COUNT_STAT",
    "FUNCTION_CALL_STAT", "UNKNOWN", "GRAPH_BUILDING_PATTERN", "CONCRETE_FUNCTION_PATTERN",
    "VALUE_STATS", "MIN_LEAK_STEP_FRACTION", "MIN_LEAK_STEPS", "MIN_LATE_STEP_FRACTION",
    "PSEUDO_STEPS", "MIN_RETRACING_STEPS", "ONEDNN_ALLOCATOR", "FULL_COVERAGE_ENV",
    "BEFORE_STEPS", "AFTER_STEPS",
    "OpRetention", "Steps", "MemoryEvents", "TraceAnalysis", "Pairing",
    "decode", "extract_memory_events", "data_type_name", "extract_steps",
    "pair_allocations", "op_retention", "rank_ops", "format_bytes",
    "find_retracing", "coverage_note",
    "analyze_memory_events", "analyze_decoded", "analyze_space",
]

# A leak: memory left behind in at least this share of the traced steps,
# and in at least MIN_LEAK_STEPS of them.
MIN_LEAK_STEP_FRACTION = 0.5
MIN_LEAK_STEPS = 3
# ... and still growing: memory left behind in at least this share of the
# second half's steps (a cache that filled up early is not a leak).
MIN_LATE_STEP_FRACTION = 0.25


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


def op_retention(events: MemoryEvents, steps: Steps, pairing: Pairing | None = None,
                 budget: MemoryBudget | None = None) -> list[OpRetention]:
    """Per op: allocations, frees and what stayed alive, ranked (suspicious first).

    Only ops that retained memory are returned; each is charged to ``budget``.
    """
    if pairing is None:
        pairing = pair_allocations(events)
    if not pairing.allocation_rows.size:
        return []
    allocations = _Allocations.of(events, steps, pairing)
    rule = _LeakRule.of(len(steps), steps.source)
    totals = _OpTotals.of(allocations, rule)
    retaining = np.flatnonzero(totals.retained_allocations > 0)
    if budget is not None:
        budget.charge("ops that kept memory", retaining.size, costs.OP_RESULT_BYTES)
    results = []
    for k in retaining.tolist():
        evidence = totals.evidence(k, rule)
        label = [events.labels[c] for c in allocations.keys[k].tolist()]
        results.append(
            OpRetention(
                op=label[0],
                region_type=label[1],
                shape=label[2],
                data_type=label[3],
                allocator=label[4],
                allocations=int(totals.allocations[k]),
                frees=int(round(totals.frees[k])),
                retained_bytes=evidence.retained_bytes,
                retained_allocations=evidence.retained_allocations,
                steps_retained=evidence.steps_retained,
                steps_total=rule.total_steps,
                retained_bytes_per_step=evidence.per_step,
                suspicious=evidence.suspicious,
                reason=_reason(evidence, rule),
            )
        )
    return rank_ops(results)


@dataclasses.dataclass
class _Allocations:
    """The allocations of a trace (one entry each), with the op each belongs to."""

    key_of: np.ndarray  # dense op id of each allocation
    keys: np.ndarray  # (ops, 5) label codes: op, region, shape, data type, allocator
    size: np.ndarray  # float64 bytes
    freed: np.ndarray  # bool: released before the trace ended
    step: np.ndarray  # step index; BEFORE_STEPS / AFTER_STEPS outside the steps

    @property
    def n_keys(self) -> int:
        return int(self.keys.shape[0])

    @classmethod
    def of(cls, events: MemoryEvents, steps: Steps, pairing: Pairing) -> "_Allocations":
        rows = pairing.allocation_rows
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
        return cls(
            key_of=key_of,
            keys=np.stack([c[first] for c in columns], axis=1),
            size=events.bytes[rows].astype(np.float64),
            freed=pairing.freed,
            step=steps.index_of(events.time_ps[rows]),
        )


@dataclasses.dataclass(frozen=True)
class _LeakRule:
    """What a leak looks like in a window of ``total_steps`` steps (see the
    MIN_* constants): memory kept in ``needed`` steps, ``needed_late`` of
    them from ``late_half`` on."""

    total_steps: int
    needed: int
    late_half: int
    needed_late: int
    step_kind: str  # "steps" or "pseudo-steps", for the reasons

    @classmethod
    def of(cls, total_steps: int, source: str) -> "_LeakRule":
        late_half = total_steps // 2  # steps from here on are the second half
        return cls(
            total_steps=total_steps,
            needed=max(MIN_LEAK_STEPS, math.ceil(MIN_LEAK_STEP_FRACTION * total_steps)),
            late_half=late_half,
            needed_late=max(1, math.ceil(MIN_LATE_STEP_FRACTION * (total_steps - late_half))),
            step_kind="pseudo-steps" if source == "pseudo" else "steps",
        )


@dataclasses.dataclass
class _OpEvidence:
    """What one op kept, and whether that is the pattern of a leak."""

    steps_retained: int
    retained_bytes: int
    retained_allocations: int
    per_step: float  # bytes per step
    first_only: bool  # kept only from the first traced step
    last_only: bool  # ... only from the last
    before: int  # kept allocations made before the first traced step
    after: int  # ... after the last
    still_growing: bool
    suspicious: bool


@dataclasses.dataclass
class _OpTotals:
    """Per op (arrays indexed by the op id of :class:`_Allocations`)."""

    allocations: np.ndarray
    frees: np.ndarray
    retained_allocations: np.ndarray
    retained_bytes: np.ndarray
    steps_retained: np.ndarray
    steps_retained_late: np.ndarray
    per_step: np.ndarray  # bytes per step
    first_only: np.ndarray
    last_only: np.ndarray
    before: np.ndarray
    after: np.ndarray

    @classmethod
    def of(cls, allocations: _Allocations, rule: _LeakRule) -> "_OpTotals":
        key_of, n_keys, step, size = (allocations.key_of, allocations.n_keys, allocations.step,
                                      allocations.size)
        total_steps = rule.total_steps
        retained = ~allocations.freed
        in_steps = retained & (step >= 0)
        pairs = np.unique(key_of[in_steps] * max(total_steps, 1) + step[in_steps])
        late = pairs[pairs % max(total_steps, 1) >= rule.late_half]
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
        first_only, last_only, before, after = _retained_where(allocations, retained, total_steps)
        return cls(
            allocations=np.bincount(key_of, minlength=n_keys),
            frees=np.bincount(key_of, weights=allocations.freed, minlength=n_keys),
            retained_allocations=np.bincount(key_of, weights=retained, minlength=n_keys),
            retained_bytes=np.bincount(key_of, weights=size * retained, minlength=n_keys),
            steps_retained=np.bincount(pairs // max(total_steps, 1), minlength=n_keys),
            steps_retained_late=np.bincount(late // max(total_steps, 1), minlength=n_keys),
            per_step=per_step,
            first_only=first_only,
            last_only=last_only,
            before=before,
            after=after,
        )

    def evidence(self, k: int, rule: _LeakRule) -> _OpEvidence:
        """The evidence about op ``k``, judged by ``rule``."""
        still_growing = bool(self.steps_retained_late[k] >= rule.needed_late)
        per_step = float(self.per_step[k])
        return _OpEvidence(
            steps_retained=int(self.steps_retained[k]),
            retained_bytes=int(round(self.retained_bytes[k])),
            retained_allocations=int(round(self.retained_allocations[k])),
            per_step=per_step,
            first_only=bool(self.first_only[k]),
            last_only=bool(self.last_only[k]),
            before=int(self.before[k]),
            after=int(self.after[k]),
            still_growing=still_growing,
            suspicious=bool(self.steps_retained[k] >= rule.needed and per_step > 0
                            and still_growing),
        )


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


def _retained_where(allocations: _Allocations, retained: np.ndarray, total_steps: int):
    """Per op: retained only in the first step, only in the last, and counts
    of retained allocations made before / after the traced steps."""
    key_of, step, n_keys = allocations.key_of, allocations.step, allocations.n_keys
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


def _reason(evidence: _OpEvidence, rule: _LeakRule) -> str:
    """One sentence: why this op's retention is, or is not, the pattern of a leak."""
    e, kind, total = evidence, rule.step_kind, rule.total_steps
    count = e.retained_allocations
    held = f"{format_bytes(e.retained_bytes)} in {count} allocation{'s' if count != 1 else ''}"
    if e.suspicious:
        return (
            f"left memory behind in {e.steps_retained} of {total} {kind} and never freed it "
            f"({held}, about {format_bytes(e.per_step)} more each step): the pattern of a leak"
        )
    if e.first_only:
        return (
            f"{held} kept from the first traced step only: one-off state such as "
            "variables, optimizer slots or caches built once"
        )
    if e.last_only:
        return (
            f"{held} kept from the last traced step only: outputs the program still "
            "held when the trace stopped"
        )
    if e.steps_retained == 0 and e.before and not e.after:
        return f"{held} allocated before the first traced step and still held"
    if e.steps_retained == 0 and e.after:
        return f"{held} allocated after the last traced step"
    if e.steps_retained == 0:
        return f"{held} kept, outside the traced steps"
    if e.steps_retained < rule.needed:
        return (
            f"{held} kept from {e.steps_retained} of {total} {kind}; a leak keeps memory "
            f"from at least {rule.needed} of them"
        )
    if not e.still_growing:
        return (
            f"{held} kept from {e.steps_retained} of {total} {kind}, but hardly any in the "
            "second half: the growth stopped, as when a cache fills up"
        )
    return f"{held} kept from {e.steps_retained} of {total} {kind}, but not growing with the steps"


# -- everything ------------------------------------------------------------------------------


def analyze_memory_events(events: MemoryEvents, steps: Steps,
                          budget: MemoryBudget | None = None) -> tuple[list[OpRetention], Pairing]:
    """Pair, then rank ops by retention (see :func:`op_retention`)."""
    pairing = pair_allocations(events)
    return op_retention(events, steps, pairing, budget), pairing


def analyze_decoded(decoded: xplane.DecodedSpace, budget: MemoryBudget | None = None) -> TraceAnalysis:
    """Run the whole analysis on an already decoded space.

    With ``budget`` (the one it was decoded with), the analysis' own memory
    is charged to it first.

    Raises:
      xplane.XPlaneMemoryLimitError: the analysis would pass ``budget``.
    """
    if budget is not None:
        budget.charge("events analysed", sum(len(p) for p in decoded.planes),
                      costs.ANALYSED_EVENT_BYTES)
        budget.charge("stats analysed", sum(p.stat_event.size for p in decoded.planes),
                      costs.ANALYSED_STAT_BYTES)
    events = extract_memory_events(decoded)
    span = (int(events.time_ps.min()), int(events.time_ps.max())) if len(events) else None
    steps = extract_steps(decoded, span)
    ops, pairing = analyze_memory_events(events, steps, budget)
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


def analyze_space(space, budget: MemoryBudget | None = None) -> TraceAnalysis:
    """Analyse one XSpace (serialized bytes, or an XSpace message).

    Memory is bounded by ``budget`` (default: 4x the serialized size plus
    working space, see :mod:`tb_leak_plugin.xplane.budget`).

    Raises:
      xplane.XPlaneDecodeError: the bytes are not a readable XSpace.
      xplane.XPlaneMemoryLimitError: (a subclass) they would take more memory than allowed.
    """
    if hasattr(space, "SerializeToString"):
        space = space.SerializeToString()
    if budget is None:
        budget = MemoryBudget(len(space))
    return analyze_decoded(decode(space, budget), budget)
