"""Plain notes on a trace: tf.function retracing, and what the allocators can show.

`find_retracing` reads the tracing of tf.functions inside the traced steps
(each trace builds and keeps a new graph); `coverage_note` says which
allocations the traced allocators can and cannot show. Pure functions: no
I/O, no TensorFlow.
"""

from __future__ import annotations

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
