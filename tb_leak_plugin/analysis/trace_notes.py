"""Plain notes on a trace: tf.function retracing, and what the allocators can show.

`find_retracing` reads the tracing of tf.functions inside the traced steps
(each trace builds and keeps a new graph); `coverage_note` says which
allocations the traced allocators can and cannot show. Pure functions: no
I/O, no TensorFlow.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tb_leak_plugin.xplane import schema as xplane
from tb_leak_plugin.units import format_bytes
from tb_leak_plugin.analysis.trace_events import (
    CONCRETE_FUNCTION_PATTERN,
    FUNCTION_CALL_STAT,
    GRAPH_BUILDING_PATTERN,
    TRACING_COUNT_STAT,
    UNKNOWN,
    Steps,
)

# A tf.function traced in at least this many steps keeps retracing.
MIN_RETRACING_STEPS = 3

ONEDNN_ALLOCATOR = "mklcpu"
FULL_COVERAGE_ENV = "TF_ENABLE_ONEDNN_OPTS=0 TF_CPU_ALLOCATOR_USE_BFC=1"


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
    found: dict[str, _Evidence] = {}
    for plane in decoded.planes:
        if not len(plane):
            continue
        calls = _FunctionCalls.of(plane, steps)
        _add_call_evidence(found, plane, calls)
        if calls.unattributed.size:
            _add_unattributed_tracing(found, plane, calls.unattributed, steps)
        _add_concrete_functions(found, plane, steps)
    results = [r for r in (_summarize(item, len(steps)) for item in found.values()) if r]
    results.sort(key=lambda r: (not r["growing"], -r["tracing_steps"], r["function"]))
    return results


@dataclasses.dataclass
class _Evidence:
    """What a trace says about one tf.function's tracing."""

    function: str
    calls: int = 0
    traces: int = 0
    steps: set = dataclasses.field(default_factory=set)  # step indexes with tracing
    counts: list = dataclasses.field(default_factory=list)  # tracing_count per call
    concrete: set = dataclasses.field(default_factory=set)  # (number, first step) per concrete fn
    graph_building: int = 0


def _evidence(found: dict[str, _Evidence], name: str) -> _Evidence:
    if name not in found:
        found[name] = _Evidence(name)
    return found[name]


@dataclasses.dataclass
class _FunctionCalls:
    """The tf.function calls of one plane (events with a ``tracing_count``)."""

    rows: np.ndarray  # event rows of the calls
    counts: np.ndarray  # tracing_count per call
    said: np.ndarray  # tf_function_call code per call (-1: absent)
    said_table: list[str]
    step: np.ndarray  # step index per call
    traced: np.ndarray  # bool per call: graph building happened inside it
    unattributed: np.ndarray  # graph-building event rows inside no call

    @classmethod
    def of(cls, plane: xplane.PlaneEvents, steps: Steps) -> "_FunctionCalls":
        rows = np.flatnonzero(plane.has_stat(TRACING_COUNT_STAT))
        counts, _ = plane.int_stat(TRACING_COUNT_STAT)
        codes, table = plane.str_stat(FUNCTION_CALL_STAT)
        traced, unattributed = _traced_by_graph_building(plane, rows)
        return cls(rows, counts[rows], codes[rows], table, steps.index_of(plane.start_ps[rows]),
                   traced, unattributed)


def _traced_by_graph_building(plane: xplane.PlaneEvents, calls: np.ndarray):
    """Tracing events inside a call mark that call (the innermost) as traced.

    Returns (bool per call, rows of tracing events inside no call).
    """
    graph_ids = [m for m, n in plane.event_names.items() if GRAPH_BUILDING_PATTERN.search(n)]
    traced = np.zeros(calls.size, dtype=bool)
    unattributed = []
    for row in np.flatnonzero(np.isin(plane.metadata_id, graph_ids)).tolist():
        inside = np.flatnonzero(
            (plane.line[calls] == plane.line[row])
            & (plane.start_ps[calls] <= plane.start_ps[row])
            & (plane.start_ps[calls] + plane.duration_ps[calls] >= plane.start_ps[row])
        )
        if inside.size:
            traced[inside[np.argmax(plane.start_ps[calls][inside])]] = True
        else:
            unattributed.append(row)
    return traced, np.array(unattributed, dtype=np.int64)


def _add_call_evidence(found, plane: xplane.PlaneEvents, calls: _FunctionCalls) -> None:
    """Per function: its calls, which of them traced, in which steps."""
    by_name: dict[str, list[int]] = {}
    for i, mid in enumerate(plane.metadata_id[calls.rows].tolist()):
        by_name.setdefault(plane.event_names.get(mid, UNKNOWN), []).append(i)
    start_ps = plane.start_ps[calls.rows]
    for name, members in by_name.items():
        members = np.array(members)
        members = members[np.argsort(start_ps[members], kind="stable")]
        count = calls.counts[members]
        said = calls.said[members]
        traced = calls.traced[members].copy()
        for j, code in enumerate(said.tolist()):
            if code >= 0 and calls.said_table[code].lower().startswith("traced"):
                traced[j] = True
        if (said < 0).any():
            went_up = np.zeros(members.size, dtype=bool)
            went_up[1:] = count[1:] > count[:-1]
            traced |= went_up & (said < 0)
        member_steps = calls.step[members]
        item = _evidence(found, name)
        item.calls += int(members.size)
        item.traces += int(np.count_nonzero(traced))
        item.steps.update(member_steps[traced & (member_steps >= 0)].tolist())
        item.counts.extend(count.tolist())


def _add_unattributed_tracing(found, plane, rows: np.ndarray, steps: Steps) -> None:
    item = _evidence(found, "(graph building outside a traced call)")
    item.graph_building += rows.size
    item.traces += rows.size
    step = steps.index_of(plane.start_ps[rows])
    item.steps.update(step[step >= 0].tolist())


def _add_concrete_functions(found, plane: xplane.PlaneEvents, steps: Steps) -> None:
    """New concrete functions (``__inference_<name>_<n>``), by first appearance."""
    concrete = {
        mid: match
        for mid, match in ((m, CONCRETE_FUNCTION_PATTERN.search(n))
                           for m, n in plane.event_names.items())
        if match
    }
    rows = np.flatnonzero(np.isin(plane.metadata_id, list(concrete)))
    if not rows.size:
        return
    rows = rows[np.lexsort((plane.start_ps[rows], plane.metadata_id[rows]))]
    mids, first = np.unique(plane.metadata_id[rows], return_index=True)
    first_steps = steps.index_of(plane.start_ps[rows[first]])
    for mid, step in zip(mids.tolist(), first_steps.tolist()):
        match = concrete[mid]
        _evidence(found, match.group(1)).concrete.add((match.group(2), int(step)))


def _summarize(item: _Evidence, steps_total: int) -> dict | None:
    """The result dict of one function, or None when it was not traced in the window."""
    # The earliest concrete function may predate the trace: not evidence.
    later = sorted(item.concrete, key=lambda c: (c[1] < 0, c[1]))[1:]
    concrete_steps = {s for _, s in later if s >= 0}
    new_concrete = sum(1 for _, s in later if s >= 0)
    tracing_steps = item.steps | concrete_steps
    if not tracing_steps and not item.traces:
        return None
    growing = len(tracing_steps) >= MIN_RETRACING_STEPS
    counts = item.counts
    result = dict(
        function=item.function,
        calls=item.calls,
        traces=max(item.traces, new_concrete),
        tracing_steps=len(tracing_steps),
        steps_total=steps_total,
        tracing_count_first=counts[0] if counts else None,
        tracing_count_last=counts[-1] if counts else None,
        concrete_functions=len({n for n, _ in item.concrete}),
        growing=growing,
    )
    result["reason"] = (
        f"traced again in {len(tracing_steps)} of {steps_total} steps: each trace builds "
        "and keeps a new graph; pass tensors (not Python values) and fixed shapes, "
        "or use reduce_retracing=True"
        if growing
        else f"traced in {len(tracing_steps)} of {steps_total} steps (warm-up tracing is normal)"
    )
    return result


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
