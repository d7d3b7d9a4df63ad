"""A run -> one report: verdict, evidence per series, ranked culprits, hints.

The CLI (text, JSON, markdown) and every route of the Leak tab are views of
the :class:`RunReport` built here; nothing else decides a verdict.
Pure: takes series already read (``RunData``) and, optionally, a profiler
trace report; does no I/O.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re

import numpy as np

from tb_leak_plugin.analysis import census, hints as hints_lib, holders
from tb_leak_plugin.analysis.census import benjamini_hochberg
from tb_leak_plugin.analysis.policy import POLICY
from tb_leak_plugin.analysis import library_leaks
from tb_leak_plugin.metadata import hop_text
from tb_leak_plugin.analysis.trend import TrendResult, assess_series, falls_back_at_end, growth_ruled_out, growth_shown
from tb_leak_plugin.analysis.results import VERDICT_ORDER, Culprit, RunReport, SeriesReport, clip01, finite_or_none as _finite_or_none, fmt
from tb_leak_plugin.analysis.series import RunData, Series
from tb_leak_plugin.metadata import AFTER_FULL_COLLECTION, BEFORE_COLLECTION, HELD_BY_GROUP, parse_limit_detail

# How a series takes part in the verdict.
ROLE_MEMORY = "memory"      # bytes of process, heap, allocator: the verdict itself
ROLE_TENSORS = "tensors"    # live tensors and arrays: evidence and clue
ROLE_OBJECTS = "objects"    # live objects by type: culprits (tested together)
ROLE_TRACES = "traces"      # tf.function traces and instances: retracing
ROLE_GC = "gc"              # uncollectable cycles
ROLE_CONTAINERS = "containers"  # lengths of growing containers: evidence, unless of numbers (a clue)
ROLE_CONTEXT = "context"    # shown, never judged: peaks, system memory, counters

def series_role(series: Series, judged_measures: frozenset = frozenset()) -> str:
    """The part a series plays in the run's verdict (one of the ROLE_* names).

    ``judged_measures`` are the process measures present in the run: when
    the anonymous part of RSS is there, it is judged and RSS (which the
    host's page cache moves) is context.
    """
    info = series.info
    if info.group == "process":
        if info.measure == "rss_bytes" and "rss_anon_bytes" in judged_measures:
            return ROLE_CONTEXT
        return ROLE_MEMORY if info.measure in ("rss_bytes", "rss_anon_bytes", "uss_bytes", "malloc_bytes") \
            else ROLE_CONTEXT
    if info.group == "python":
        return ROLE_MEMORY
    if info.group == "tf":
        return ROLE_MEMORY if info.measure == "bytes_in_use" else ROLE_CONTEXT
    if info.group == "tensors":
        return ROLE_TENSORS
    if info.group == "objects":
        return ROLE_OBJECTS
    if info.group in ("tf_function", "tf_graph", "runtime"):
        return ROLE_TRACES
    if info.group == "containers":
        return ROLE_CONTAINERS
    if info.group == "gc":
        if info.measure == "tracked_objects":
            return ROLE_OBJECTS
        if info.measure in ("uncollectable", "garbage"):
            return ROLE_GC
    return ROLE_CONTEXT


def assess(series: Series, available_bytes: float | None = None,
           judged_measures: frozenset = frozenset(), full: Series | None = None,
           collected: Series | None = None, before: Series | None = None,
           after_full: Series | None = None, whole: float | None = None) -> SeriesReport:
    """Assess one series (context series are described, not judged).

    ``full``: the ``gc/full_collection`` series (whether each heap walk's
    collection was full): the counts after full ones are of live objects,
    which tells an object count that falls at the last walk because the
    program let go of its objects, and one that grows only by garbage.
    ``collected``: the ``gc/collected`` series (unreachable objects each
    walk's collection found), which tells memory that falls at the last walk
    because the program let go of it from memory the collector freed;
    ``before``: the same memory measure read just before the last walk's
    collection (``gc/<measure>_before_collection``), which tells them apart
    where it is there; ``after_full``: the same measure read right after
    each walk's full collection (``gc/<measure>_after_full_collection``),
    live data only; ``whole``: for a part of the host's memory, the level of
    the whole (RSS) in bytes, whose share is what is material (``Policy``)."""
    role = series_role(series, judged_measures)
    values = series.values
    finite = np.isfinite(values)
    last_value = float(values[finite][-1]) if finite.any() else None
    trend = None
    if role != ROLE_CONTEXT:
        trend = assess_series(
            series.steps,
            series.values,
            series.wall_times,
            unit=series.info.unit,
            available_bytes=available_bytes if series.info.unit == "bytes" else None,
            # Live tensors, arrays and traces are not garbage a collection
            # frees: a last sample back at the start is the loop's data freed
            # after it returned. Object types and memory may drop because the
            # final census collected garbage, which must count: an object
            # count's fall is the program's only where it is larger than
            # what that collection found.
            final_release=_final_release(series, role, full, collected, before),
            whole=whole,
        )
    if role in (ROLE_OBJECTS, ROLE_CONTAINERS) and trend is not None and series.info.measure != "tracked_objects":
        trend = _held_to_full_collections(trend, series, full)
    if role == ROLE_MEMORY and trend is not None:
        trend = _fell_with_garbage(trend, series, collected, full, before, after_full, whole)
    return SeriesReport(
        tag=series.tag,
        group=series.info.group,
        measure=series.info.measure,
        subject=series.info.subject,
        unit=series.info.unit,
        role=role,
        samples=len(series),
        first_step=int(series.steps[0]) if len(series) else None,
        last_step=int(series.steps[-1]) if len(series) else None,
        last_value=last_value,
        trend=trend,
        let_go_before_collection=role == ROLE_MEMORY and _fell_before_collection(series, before),
        live_after_full=role == ROLE_MEMORY and trend is not None and trend.verdict == "leak"
        and _grew_after_full_collections(trend, series, full, after_full),
    )


def _final_release(series: Series, role: str, full: Series | None, collected: Series | None = None,
                   before: Series | None = None) -> bool:
    """Whether a last sample that falls back to the start is left out of
    ``series``' analysis (the program let go of its objects at the end)."""
    if series.info.group in ("tensors", "tf_function", "tf_graph"):
        return True
    if role == ROLE_MEMORY:
        return _released_by_program(series, collected, before)
    if role not in (ROLE_OBJECTS, ROLE_CONTAINERS) or full is None or len(series) < 3:
        return False
    # What a walk counted right after a full collection was alive then. If
    # the last of those (before the last walk) saw most of the growth, and
    # the last walk falls well below it, the program let go of live objects
    # when the loop ended: the last point is a release. (What the last
    # collection found says nothing: the garbage may have gone before it.)
    fulls = full.steps[(full.values == 1.0) & (full.steps < series.steps[-1])]
    at = np.flatnonzero(np.isin(series.steps[:-1], fulls))
    if not at.size:
        return False
    k = int(at[-1])
    y = series.values
    start = float(np.nanmin(y[:k + 1]))
    alive = float(y[k]) - start
    return bool(alive > 0 and alive >= 0.5 * (float(np.nanmax(y[:-1])) - start)
                and float(y[k] - y[-1]) > 0.5 * alive)


def _released_by_program(series: Series, collected: Series | None, before: Series | None = None) -> bool:
    """Memory read at the last walk, after its collection, may fall because
    the collector freed garbage (cycles made all run long: growth that only
    garbage explains is no leak) or because the program let go of its data
    when the loop returned, before close(). Only the second is a release
    left out: where the same memory read just before that collection had
    already lost at least half of the fall (reference counts free the loop's
    data when it returns, before any collection runs: the collector did not
    free it), or else where that collection found no more unreachable
    objects than some walk of the training before it did (the first walk's
    collection finds the set-up's garbage: imports, a model built; not the
    loop's)."""
    if _fell_before_collection(series, before):
        return True
    found = _garbage_at_last_walk(series, collected)
    return found is not None and found[0] <= found[1]


def _fell_before_collection(series: Series, before: Series | None) -> bool:
    """Whether ``before`` (the measure read just before the last walk's
    collection) had already lost at least POLICY.fell_before_collection_share
    of what the series fell by
    from its sample before the last to its last (read after the collection)."""
    if before is None or not len(before) or len(series) < 2 or float(before.steps[-1]) != float(series.steps[-1]):
        return False
    prev, last, pre = (float(v) for v in (series.values[-2], series.values[-1], before.values[-1]))
    fall = prev - last
    if not (np.isfinite([prev, last, pre]).all() and fall > 0):
        return False
    # Read between the two, it lies between them, give or take the noise of
    # a reading; one below the last by more than the whole fall (0, a
    # negative value: a corrupt file) is no reading of the same memory.
    return bool(pre >= last - fall and prev - pre >= POLICY.fell_before_collection_share * fall)


def _garbage_at_last_walk(series: Series, collected: Series | None) -> tuple[float, float] | None:
    """(unreachable objects the last walk's collection found, the most any
    walk of the training found: the first walk's finds the set-up's), or
    None where the last memory sample does not follow the last walk."""
    if collected is None or len(collected) < 3 or not len(series):
        return None
    if float(collected.steps[-1]) != float(series.steps[-1]):
        return None
    earlier = collected.values[1:-1]
    earlier = earlier[np.isfinite(earlier)]
    last = float(collected.values[-1])
    if not (earlier.size and np.isfinite(last)):
        return None
    return last, float(np.max(earlier))


def _fell_with_garbage(trend: TrendResult, series: Series, collected: Series | None,
                       full: Series | None = None, before: Series | None = None,
                       after_full: Series | None = None, whole: float | None = None) -> TrendResult:
    """Memory that fell back at the last walk, whose collection found more
    unreachable objects than any walk of the training: the fall is not left
    out (see ``_released_by_program``), and the growth before it may have
    been that garbage (cycles made all run long, freed only then) as well as
    the program's cyclic data let go when the loop returned. The growth is
    judged on the memory the training held: where memory was read just
    before that collection, the series ends on that reading (``_before_the_
    fall``: the fall, which the monitor's own collection made, then cuts no
    segment short, and the growth's own segment is where full collections
    are looked for). Unless the readings right after the full collections
    of the training's walks grew too (garbage-free readings: live data, see
    ``_grew_after_full_collections``), garbage and live data cannot be told
    apart, so the growth is no leak claim of this series: RSS, which keeps
    its pages, and the other series judge the run."""
    found = _garbage_at_last_walk(series, collected)
    if found is None or found[0] <= found[1] or not falls_back_at_end(series.steps, series.values) \
            or _fell_before_collection(series, before):
        return trend
    held = _before_the_fall(series, before, whole)
    if trend.verdict == "no_leak":
        return trend  # with the garbage collected, the memory held is flat
    if trend.verdict != "leak":
        if held is None or held.verdict != "leak":
            return trend
        trend = held
    if _grew_after_full_collections(trend, series, full, after_full) \
            or _grew_after_full_collections(held or trend, series, full, after_full):
        return dataclasses.replace(trend, reason=(
            f"{trend.reason}; it grew between the full collections of the training's walks too (live data), "
            f"and fell back at the last walk (step {int(series.steps[-1])}): let go when the loop returned"))
    last = found[0]
    reason = (f"{trend.reason}; then fell back at the last walk (step {int(series.steps[-1])}), whose collection "
              f"found {int(last):,} unreachable objects, more than any walk before: garbage or the program's "
              f"cyclic data let go, which cannot be told apart")
    return dataclasses.replace(trend, verdict="inconclusive", reason=reason, shape="unclear",
                               confidence=0.0, p_value=max(trend.p_value, POLICY.alpha_leak))


def _before_the_fall(series: Series, before: Series | None, whole: float | None = None) -> TrendResult | None:
    """The series' trend with its last reading taken just before the last
    walk's collection (``before``) instead of after it: the memory the
    training held, garbage and all. The fall is then no longer in the fit,
    whose current segment reaches back to where the growth began (with the
    fall in, the last stretch is cut short around it, and the full
    collections of the growth may fall before it). None where there is no
    such reading."""
    if before is None or not len(before) or len(series) < 2 \
            or float(before.steps[-1]) != float(series.steps[-1]) or not np.isfinite(before.values[-1]):
        return None
    values = np.array(series.values, dtype=np.float64)
    values[-1] = float(before.values[-1])
    return assess_series(series.steps, values, series.wall_times, unit=series.info.unit, whole=whole)


def _after_full_collections(trend: TrendResult, series: Series, full: Series, end: float,
                            after: Series | None = None):
    """The series' readings right after full collections (nothing
    unreachable left: live data only) up to ``end``: (steps, values, the
    step the analysed segment starts at). ``after``: the measure read right
    after every full collection (``gc/<measure>_after_full_collection``);
    the series' own readings at full walks serve where it is not there
    (a series is read at a walk only when its own schedule falls there)."""
    fit = trend.fit or {}
    start = fit.get("segment_step", fit.get("start_step", int(series.steps[0])))
    fulls = full.steps[full.values == 1.0]
    steps, values = series.steps, series.values
    if after is not None and len(after):
        own = ~np.isin(steps, after.steps)
        steps = np.concatenate([steps[own], after.steps])
        values = np.concatenate([values[own], after.values])
        order = np.argsort(steps, kind="stable")
        steps, values = steps[order], values[order]
    keep = np.isin(steps, fulls) & (steps <= end) & np.isfinite(values)
    return steps[keep], values[keep], start


def _grew_after_full_collections(trend: TrendResult, series: Series, full: Series | None,
                                 after: Series | None = None) -> bool:
    """Whether the readings right after the full collections of the walks
    before the last one grew by at least ``POLICY.full_growth_share`` of what
    the fitted rate says, over at least ``POLICY.full_span_share`` of the
    analysed segment: the test of ``_held_to_full_collections``, read for
    growth instead of against it."""
    if full is None or not len(series) or not len(full):
        return False
    fit = trend.fit or {}
    end = min(fit.get("end_step", int(series.steps[-1])), float(full.steps[-1]) - 1)
    steps, values, start = _after_full_collections(trend, series, full, end, after)
    slope = float(trend.slope_per_step)
    least = POLICY.full_growth_share * slope
    if slope <= 0 or not steps.size:
        return False
    # The readings of the segment, and before it those that grew at that
    # rate up to it: the heap walks' full collections come early in a run,
    # and a growth that goes on at one rate is one growth, wherever the fit
    # of its slight curvature (a cache of lines, 175 then 130 blocks a step)
    # starts its last segment. Where no reading is in the segment, the
    # segment's line must go on from the last of them at that rate too.
    first = int(np.searchsorted(steps, start))
    while first > 0 and (first == steps.size or float(values[first] - values[first - 1])
                         >= least * float(steps[first] - steps[first - 1])):
        first -= 1
        if first == steps.size - 1 and steps[first] < start:
            end_value = fit.get("end_value")
            if not isinstance(end_value, (int, float)) or not math.isfinite(end_value) \
                    or float(end_value) - float(values[first]) < least * (float(fit.get("end_step", end)) - steps[first]):
                return False
    steps, values = steps[first:], values[first:]
    if steps.size < 2 or steps[-1] - steps[0] < POLICY.full_span_share * max(end - start, 1):
        return False
    return float(values[-1] - values[0]) >= least * float(steps[-1] - steps[0])


def _held_to_full_collections(trend: TrendResult, series: Series, full: Series | None) -> TrendResult:
    """A count that grows only between full collections is not a leak.

    Walks that collect only the young generations count the garbage waiting
    in the oldest one (an evicted cyclic record, a dropped model). The
    counts right after full collections are of live objects: a ``leak`` of
    an object count or a container's length must grow between them too, by
    at least ``POLICY.full_growth_share`` of what its fitted rate says, where
    those walks span at least ``POLICY.full_refute_share`` of what was
    analysed. Otherwise it is ``inconclusive``, saying why (full collections
    that do not span the growth leave the verdict as it is: no evidence
    either way)."""
    if full is None or trend.verdict != "leak" or not len(series):
        return trend
    end = (trend.fit or {}).get("end_step", int(series.steps[-1]))
    steps, values, start = _after_full_collections(trend, series, full, end)
    analysed = series.steps[(series.steps >= start) & (series.steps <= end)]
    if np.all(np.isin(analysed, full.steps[full.values == 1.0])):
        return trend  # every point analysed followed a full collection
    slope = float(trend.slope_per_step)
    if steps.size < 2 or steps[-1] - steps[0] < POLICY.full_refute_share * max(end - start, 1):
        return trend  # the full collections do not span the growth: no evidence either way
    grown = float(values[-1] - values[0])
    if grown >= max(POLICY.full_growth_share * slope * float(steps[-1] - steps[0]), POLICY.count_floor):
        return trend
    why = (f"grows {slope:.3g}/step between heap walks, but by only {grown:.3g} between the full "
           f"collections at steps {int(steps[0])} and {int(steps[-1])}: may be garbage waiting for a "
           f"full collection ({trend.samples} samples)")
    return dataclasses.replace(trend, verdict="inconclusive", confidence=0.5, reason=why)


def _with_earlier_points(series: Series) -> Series:
    """A container's length series carries, in its plugin data, the lengths
    seen at the heap walks before it was named (``{"format": 1, "before":
    [[step, wall_time, length], ...]}``): they go in front of its points."""
    if series.info.group not in ("containers", "objects") or not series.info.detail:
        return series
    try:
        before = json.loads(series.info.detail)["before"]
        points = [(int(s), float(w), float(n)) for s, w, n in before]
    except (TypeError, ValueError, KeyError, OverflowError):
        return series
    first = int(series.steps[0]) if len(series) else None
    points = [p for p in points if (first is None or p[0] < first) and abs(p[0]) < 2 ** 62
              and math.isfinite(p[1]) and math.isfinite(p[2])][-256:]
    if not points:
        return series
    return Series.from_points(series.tag, series.info,
                              np.r_[[p[0] for p in points], series.steps],
                              np.r_[[p[1] for p in points], series.wall_times],
                              np.r_[[p[2] for p in points], series.values])


def _profiler_windows(run: RunData) -> list:
    """(start, stop) steps of the profiler windows the monitor recorded
    (``leak/profiler/recording``: 1 where one starts, 0 where it stops). A
    window that never closes is not one: it would hide the rest of the run."""
    series = run.series.get("leak/profiler/recording")
    if series is None or not len(series):
        return []
    windows, start = [], None
    for step, value in zip(series.steps.tolist(), series.values.tolist()):
        if value == 1.0 and start is None:
            start = step
        elif value == 0.0 and start is not None:
            windows.append((start, step))
            start = None
    return windows[:64]


# A profiler window may hide at most this share of a memory series' points:
# a window that spans most of a run (crafted data, or a program that profiles
# it all) would otherwise hide the run's memory from its verdict.
MAX_MASKED_SHARE = 0.25


def _outside(series: Series, windows, warnings: list) -> Series:
    """A memory series without its points inside profiler windows: the
    profiler's buffers are not the program's memory."""
    if not windows or not len(series):
        return series
    keep = np.ones(len(series), dtype=bool)
    for start, stop in windows:
        keep &= ~((series.steps >= start) & (series.steps < stop))
    if keep.all():
        return series
    if np.count_nonzero(~keep) > MAX_MASKED_SHARE * len(series):
        note = (f"profiler windows span more than {MAX_MASKED_SHARE:.0%} of the run's memory samples: "
                f"their memory is judged with the rest")
        if note not in warnings:
            warnings.append(note)
        return series
    return Series(series.tag, series.info, series.steps[keep], series.wall_times[keep], series.values[keep])


def _available_bytes(run: RunData) -> float | None:
    return _memory_left(run)[0]


def _memory_left(run: RunData) -> tuple[float | None, tuple | None]:
    """Memory left to the process at its last sample, and the limit it is
    left under (``(name, bytes)`` from the series' detail; None for logdirs
    written before limits were recorded, where it is the host's)."""
    series = run.series.get("leak/process/available_bytes")
    if series is None or not len(series):
        return None, None
    finite = series.values[np.isfinite(series.values)]
    if not finite.size:
        return None, None
    return float(finite[-1]), parse_limit_detail(series.info.detail)


def _left_for(series: Series, process_left: tuple) -> tuple[float | None, tuple | None]:
    """The memory a series runs out of: a device's own memory for an
    accelerator's allocator (its limit from the series' detail; none known,
    no projection), the process's limit for everything else."""
    info = series.info
    if info.group == "tf" and info.subject and not info.subject.startswith("CPU"):
        limit = parse_limit_detail(info.detail)
        finite = series.values[np.isfinite(series.values)]
        if limit is None or limit[1] is None or not finite.size:
            return None, None
        return max(limit[1] - float(finite[-1]), 0.0), limit
    return process_left


def build_run_report(run: RunData, trace_report=None) -> RunReport:
    """Build the report of one run from its series and optional trace report.

    ``trace_report`` is a ``tb_leak_plugin.reporting.traces.RunTraceReport`` (or None).
    """
    warnings = list(run.warnings)
    traces = holders.read_traces([s for s in run.series.values() if s.info.group == HELD_BY_GROUP], warnings)
    reports = _assess_all(run, warnings)
    by_role: dict[str, list[SeriesReport]] = {}
    for report in reports:
        by_role.setdefault(report.role, []).append(report)
    explained = _not_the_programs(by_role)

    culprits: list[Culprit] = []
    culprits += census.object_culprits(by_role.get(ROLE_OBJECTS, []))
    culprits += _tensor_culprits(by_role.get(ROLE_TENSORS, []))
    creations: list[Culprit] = []
    culprits += _trace_count_culprits(by_role.get(ROLE_TRACES, []), creations)
    culprits += _gc_culprits(by_role.get(ROLE_GC, []))
    culprits += _memory_culprits([r for r in by_role.get(ROLE_MEMORY, []) if r.tag not in explained], culprits,
                                 by_role.get(ROLE_TENSORS, []) + by_role.get(ROLE_OBJECTS, []))
    containers = _container_culprits(by_role.get(ROLE_CONTAINERS, []), run)
    # A container's length is an exact count, like a type's: one that keeps
    # growing is a leak (a set of fingerprints, whose strings no object count
    # sees), unless its items are numbers (a list of losses: a clue where a
    # leak accumulates, not a leak of memory). Within Python's memory
    # certified flat it is told, not called a leak (see _run_verdict).
    culprits += [c for c in containers if not str(c.name).endswith(_ATOMIC_ITEMS)]
    containers = [c for c in containers if str(c.name).endswith(_ATOMIC_ITEMS)]
    let_go = _grew_with_the_leak(by_role, run)
    traces_dict = None
    if trace_report is not None:
        culprits += _op_culprits(trace_report)
        traces_dict = trace_report.to_dict()
    culprits.sort(key=_culprit_rank)

    verdict, confidence, reason = _run_verdict(by_role, culprits, explained)
    if verdict == "leak":
        # A growing container of numbers names where a leak accumulates;
        # alone (a list of floats kept per step) it is not a leak of memory.
        culprits = sorted(culprits + containers + creations + let_go + _holding_the_growth(by_role, culprits + let_go),
                          key=_culprit_rank)
    earlier = holders.traced_earlier(traces, holders.attach(culprits, traces))
    if earlier and verdict != "leak":
        reason += " " + _told_earlier(earlier[0])
    retained = holders.retained_containers(culprits) if verdict == "leak" else []
    if retained or (verdict == "leak" and let_go):
        # What grows is named (what the containers retain, what the few
        # walks saw grow with the leak), not "too short".
        for culprit in culprits:
            if culprit.hint == "census_too_short":
                culprit.hint = None
        culprits = sorted(culprits + retained, key=_culprit_rank)
    holders.adopt_containers(culprits)
    culprits = holders.merge_by_holder(culprits)
    # Within one level of confidence, a culprit whose holder was traced comes
    # first: it says where to fix the leak (an op that retains its outputs,
    # from the profiler, names the same leak without saying who keeps them);
    # so does one that names a known mechanism with its fix (a retraced
    # tf.function, a TF1 graph that grows, Keras's global state), which the
    # types it is made of (its Operations, its traced functions) come after.
    culprits.sort(key=lambda c: (-round(c.confidence * 20) / 20,
                                 not ((c.details or {}).get("held_by") or c.kind in _MECHANISM_KINDS)))
    if verdict == "leak" and earlier:
        # After the ranking: a holder lent from a trace made while the run
        # trained explains a memory culprit; it does not move it up.
        holders.lend_earlier(culprits, earlier, {r.tag: r for r in reports})
    known = library_leaks.label(culprits)
    primary = _primary_memory_series(by_role.get(ROLE_MEMORY, []), verdict)
    hints = list({c.hint: hints_lib.HINTS[c.hint] for c in culprits if c.hint}.values())
    reports.sort(key=lambda r: (_ROLE_ORDER.get(r.role, 9), VERDICT_ORDER.get(r.verdict, 3), r.tag))
    return RunReport(
        run=run.name,
        verdict=verdict,
        confidence=confidence,
        reason=reason,
        growth_bytes_per_step=primary.trend.slope_per_step if primary is not None else None,
        growth_bytes_per_hour=primary.trend.slope_per_hour if primary is not None else None,
        primary_tag=primary.tag if primary is not None else None,
        samples=max((r.samples for r in reports), default=0),
        series=reports,
        culprits=culprits,
        hints=hints,
        warnings=warnings,
        traces=traces_dict,
        library_leaks=[{**entry.to_dict(), "culprits": [c.name for c in culprits
                                                         if c.details.get("library_leak") == entry.key]}
                       for entry in known],
        traced_earlier=earlier,
    )


def _told_earlier(entry: dict) -> str:
    """What a run that does not leak at its end had leaked while it trained."""
    path = " → ".join(entry["held_by"][0]["path"])
    return (f"While it trained, the leak watch traced a leak of {entry['name']} at step {entry['step']}, "
            f"held by {path}; it is not growing at the end of the data.")


def _assess_all(run: RunData, warnings: list) -> list[SeriesReport]:
    """Every series of the run judged (memory outside profiler windows), one
    training speed for all, and leaks held to the run's false-discovery rate."""
    process_left = _memory_left(run)
    measures = frozenset(s.info.measure for s in run.series.values() if s.info.group == "process")
    whole = _whole_level(run)
    full = run.series.get("leak/gc/full_collection")
    collected = run.series.get("leak/gc/collected")
    windows = _profiler_windows(run)
    reports = []
    for series in run.series.values():
        if series.info.group == HELD_BY_GROUP:
            continue
        available, limit = _left_for(series, process_left)
        report = assess(_outside(_with_earlier_points(series), windows, warnings)
                        if series_role(series, measures) == ROLE_MEMORY else _with_earlier_points(series),
                        available, measures, full, collected,
                        run.series.get(f"leak/gc/{series.info.measure}{BEFORE_COLLECTION}"),
                        run.series.get(f"leak/gc/{series.info.measure}{AFTER_FULL_COLLECTION}"),
                        whole if _part(series.info) else None)
        if limit is not None and report.trend is not None and report.trend.steps_to_exhaustion is not None:
            report.memory_limit, report.memory_limit_bytes = limit
        reports.append(report)
    _one_rate(reports, run)
    _false_discovery_control(reports)
    return reports


def _part(info) -> bool:
    """A part of the host's memory (see ``_PARTS``), held to the whole's materiality."""
    return info.measure in _PARTS and info.unit in ("bytes", "blocks") and _host(info)


def _whole_level(run: RunData) -> float | None:
    """The host's memory as a whole (the first of ``_WHOLES`` read): its
    median in bytes, or None."""
    for measure in _WHOLES:
        series = run.series.get(f"leak/process/{measure}")
        if series is None or not len(series):
            continue
        values = np.asarray(series.values, dtype=np.float64)
        values = values[np.isfinite(values) & (values > 0)]
        if values.size:
            return float(np.median(values))
    return None


def _steps_per_second(run: RunData) -> float | None:
    """The run's training speed: median step rate of its densest series."""
    densest = max(run.series.values(), key=len, default=None)
    if densest is None or densest.wall_times is None or len(densest) < 3:
        return None
    steps = np.asarray(densest.steps, dtype=np.float64)
    walls = np.asarray(densest.wall_times, dtype=np.float64)
    dt, dw = np.diff(steps), np.diff(walls)
    good = (dw > 0) & (dt > 0) & np.isfinite(dw)
    if not np.any(good):
        return None
    rate = float(np.median(dt[good] / dw[good]))
    return rate if rate > 0 and math.isfinite(rate) else None


def _one_rate(reports, run: RunData) -> None:
    """One training speed for every series of a run, so that series growing
    at one rate project one time to exhaustion, and one per-hour growth."""
    sps = _steps_per_second(run)
    if sps is None:
        return
    for report in reports:
        trend = report.trend
        if trend is None:
            continue
        slope_per_hour = trend.slope_per_step * sps * 3600.0 if math.isfinite(trend.slope_per_step) else None
        seconds = trend.steps_to_exhaustion / sps if trend.steps_to_exhaustion is not None else None
        report.trend = dataclasses.replace(trend, slope_per_hour=slope_per_hour, seconds_to_exhaustion=seconds)


# Items of a few dozen bytes each: a container of them growing by one a step
# (a list of losses) cannot carry memory growth of kilobytes a step.
_ATOMIC_ITEMS = (" of float", " of int", " of bool", " of NoneType")


def _atomic_container(report) -> bool:
    return report.role == ROLE_CONTAINERS and str(report.subject).endswith(_ATOMIC_ITEMS)


def _not_the_programs(by_role) -> dict:
    """Memory series that leak by their own data while the series that
    decompose them say the program's memory does not grow: tag -> why.

    RSS is the sum of the C allocator's bytes in use, Python's blocks,
    TensorFlow's allocator and what allocators keep. RSS growing while the
    C allocator's bytes in use are certified flat is freed memory kept, or
    fragmentation. Python's blocks growing while the census was judged and
    no object type, tensor or container grows is cyclic garbage awaiting the
    collector; not where the census's total of live objects (counted after
    each walk's collection, so without that garbage) is shown to grow, at
    the 95% level of "no leak": a few objects a step that no one type's
    series shows at a handful of walks are still the program's; nor where
    the blocks fell at close() before the last collection ran (reference
    counts freed them when the loop returned: live data, arrays in lists
    that no type's count shows, not garbage). Where the blocks read right
    after full collections grew with them, they are not garbage but objects
    the collector does not track, and the reason says so; they are still
    not a leak on their own, nor is RSS that grows with them while the C
    allocator does not (Python's arenas are not the C allocator's: RSS is
    read as pages an allocator keeps only where the parts cannot account for
    its growth, ``_parts_account_for``): a clean program's caches and interned strings
    grow so too (an opened fixed twin, codecs looked up per shard: 0.25
    blocks a step after every full collection, 3.7 times materiality over
    60,000 steps). The series keep their verdicts; the run rule reads this."""
    memory = [r for r in by_role.get(ROLE_MEMORY, []) if r.trend is not None]
    leaking = [r for r in memory if r.trend.verdict == "leak"]
    if not leaking:
        return {}
    others = [r for role in (ROLE_TENSORS, ROLE_OBJECTS, ROLE_TRACES, ROLE_CONTAINERS) for r in by_role.get(role, [])
              if r.trend is not None and r.trend.verdict == "leak" and not _atomic_container(r)]
    tensors = [r for r in by_role.get(ROLE_TENSORS, []) if r.measure.endswith("_count")]
    census_judged = _census_judged(by_role.get(ROLE_OBJECTS, [])) and (not tensors or _census_judged(tensors))
    malloc = next((r for r in memory if r.measure == "malloc_bytes"), None)
    tracked = next((r for r in by_role.get(ROLE_GC, []) + by_role.get(ROLE_OBJECTS, [])
                    if r.group == "gc" and r.measure == "tracked_objects" and r.trend is not None), None)
    live_grows = tracked is not None and growth_shown(
        dataclasses.replace(tracked.trend, materiality=0.0), POLICY.alpha_clean)
    def python_why(report) -> str | None:
        if not (report.group == "python" and census_judged and not others and not live_grows
                and not report.let_go_before_collection):
            return None
        return "no object type, tensor or container grows with it: " + (
            "it grew right after full collections too, so not as garbage: objects the collector does not "
            "track (strings, numbers, code objects) or pools; a clean program's caches and interned "
            "strings grow so too, so Python's blocks alone are no leak" if report.live_after_full else
            "most likely cyclic garbage awaiting the collector, or pools")

    blocks = next((r for r in memory if r.measure == "allocated_blocks"), None)
    out = {}
    for report in leaking:
        if (malloc is not None and malloc.trend.verdict == "no_leak" and report.group == "process"
                and report.measure not in ("uss_bytes", "malloc_bytes")):
            if not _parts_account_for(report, memory):
                out[report.tag] = (f"{report.tag} grows, but the C allocator's bytes in use do not "
                                   f"({malloc.trend.reason}): freed memory the allocator keeps, or fragmentation")
            elif blocks is not None and python_why(blocks) is not None:
                out[report.tag] = (f"{report.tag} grows with Python's blocks (the C allocator's bytes in use do "
                                   f"not), and {python_why(blocks)}")
        elif python_why(report) is not None:
            out[report.tag] = f"{report.tag} grows, but {python_why(report)}"
    return out


def _parts_account_for(whole, memory) -> bool:
    """Whether the parts of the host's memory (the C allocator, Python's
    blocks at up to ``Policy.large_block_bytes`` each, TensorFlow's CPU
    allocator) may grow, at their upper 95% bounds, by as much as the whole
    (RSS) grows at its lower one: then the whole's growth is not shown to be
    pages an allocator keeps, whatever the C allocator alone does (Python's
    arenas are not the C allocator's)."""
    low = whole.trend.slope_ci[0] if whole.trend.slope_ci else whole.trend.slope_per_step
    if not (math.isfinite(low) and low > 0):
        return False
    room = 0.0
    for part in memory:
        if part.measure not in _PARTS or not _host(part) or not part.trend.slope_ci:
            continue
        high = float(part.trend.slope_ci[1])
        if math.isfinite(high) and high > 0:
            room += high * (POLICY.large_block_bytes if part.unit == "blocks" else 1.0)
    return room >= low


_ROLE_ORDER = {ROLE_MEMORY: 0, ROLE_TENSORS: 1, ROLE_TRACES: 2, ROLE_OBJECTS: 3, ROLE_CONTAINERS: 3, ROLE_GC: 4,
               ROLE_CONTEXT: 5}
_MECHANISM_KINDS = ("retracing", "graph", "runtime")
_KIND_ORDER = {"op": 0, "retracing": 1, "graph": 1, "runtime": 1, "object_type": 2, "tensors": 3, "container": 3.5, "series": 4,
               "gc": 5}


# Hints that name a specific TensorFlow cause rank above those that only say
# "something grows", and a class (the program's, a library's) above a
# built-in container: when a record class and the dicts and lists inside it
# grow together, the record is where they accumulate (a graph's Operations,
# a mock's recorded calls), its dicts and lists are its parts.
_HINT_SPECIFICITY = {"objects_generic": 1, "python_container": 2, None: 3}


def _culprit_rank(culprit: Culprit):
    # The total of gc-tracked objects names no type to fix: after the
    # memory series, whose bytes say what the leak costs.
    total = str((culprit.details or {}).get("tag", "")).startswith("leak/gc/")
    return (
        -round(culprit.confidence * 20) / 20,
        _KIND_ORDER["series"] + 0.5 if total and culprit.kind == "object_type" else _KIND_ORDER.get(culprit.kind, 9),
        _HINT_SPECIFICITY.get(culprit.hint, 0),
        -abs(culprit.growth_per_step or 0.0) if culprit.unit != "bytes" else 0.0,
        culprit.name,
    )


def _leaks(reports):
    return [r for r in reports if r.trend is not None and r.trend.verdict == "leak"]


def _tensor_culprits(reports) -> list[Culprit]:
    out = []
    for report in _leaks(reports):
        hint = hints_lib.hint_for_series(report.group, report.measure)
        out.append(Culprit(
            kind="tensors", name=report.tag, growth_per_step=report.trend.slope_per_step, unit=report.unit,
            evidence=report.trend.reason, confidence=report.trend.confidence,
            hint=hint.key if hint else None,
        ))
    return out


_GRAPH_SUBJECTS = {"default_graph": "the default graph", "held_graphs": "graphs the program holds",
                   "held": "graphs the program holds", "eager_context": "the eager context's function library"}


def _graph_culprit(report) -> Culprit:
    where = _GRAPH_SUBJECTS.get(report.subject, report.subject)
    if report.subject == "eager_context":
        # Each concrete function (a trace) registers in the eager context: a
        # library that keeps growing is retracing, or tf.functions made per step.
        return Culprit(
            kind="retracing", name="tf.function traces (eager context functions)",
            growth_per_step=report.trend.slope_per_step, unit=report.unit,
            evidence=(f"the eager context gains {report.trend.slope_per_step:.3g} functions a step: "
                      f"tf.functions are traced again, or new ones made, every step; {report.trend.reason}"),
            confidence=report.trend.confidence, hint="retracing",
            details={"tag": report.tag, "measure": report.measure, "last_value": report.last_value},
        )
    what = {"ops": "operations", "functions": "functions", "graphs": "graphs"}.get(report.measure, report.measure)
    # A count of the graphs themselves is named as such, not "graphs in graphs".
    name = "tf.Graph objects the program holds" if report.measure == "graphs" else f"{what} in {where}"
    return Culprit(
        kind="graph", name=name, growth_per_step=report.trend.slope_per_step, unit=report.unit,
        evidence=f"{where} grows by {report.trend.slope_per_step:.3g} {what} a step; {report.trend.reason}",
        confidence=report.trend.confidence, hint="graph_grows",
        details={"tag": report.tag, "measure": report.measure, "last_value": report.last_value},
    )


_RUNTIME_NAMES = {
    "keras_auto_names": "Keras automatic names ({subject})",
    "keras_global_state": "Keras global state",
    "custom_gradients": "TensorFlow's custom-gradient registry",
    "graph_collection_items": "items in the default graph's collections",
    "py_funcs": "TensorFlow's py-function registry",
}


def _runtime_culprit(report) -> Culprit:
    """Runtime state of Keras or TensorFlow that grows while (often) no
    Python type does: the counter itself is the clue."""
    name = _RUNTIME_NAMES.get(report.measure, report.measure).format(subject=report.subject)
    hint = hints_lib.hint_for_series(report.group, report.measure)
    return Culprit(
        kind="runtime", name=name, growth_per_step=report.trend.slope_per_step, unit=report.unit,
        evidence=f"{name} grows by {report.trend.slope_per_step:.3g} a step; {report.trend.reason}",
        confidence=report.trend.confidence, hint=hint.key if hint else None,
        details={"tag": report.tag, "measure": report.measure, "last_value": report.last_value},
    )


# Runtime counters that count what was *made*, not what is kept: Keras's
# automatic names count every layer named since clear_session() (a
# Hashing layer made and dropped per step grows them with memory flat).
# They say why memory grows, never that it does: their culprit is added
# only to a run that leaks by other evidence, as a growing container's is.
CREATION_COUNTERS = frozenset({"keras_auto_names"})


def _trace_count_culprits(reports, creations: list | None = None) -> list[Culprit]:
    out = []
    for report in _leaks(reports):
        if report.group == "tf_graph":
            out.append(_graph_culprit(report))
            continue
        if report.group == "runtime":
            if report.measure in CREATION_COUNTERS:
                if creations is not None:
                    creations.append(_runtime_culprit(report))
                continue
            out.append(_runtime_culprit(report))
            continue
        hint = hints_lib.hint_for_series(report.group, report.measure)
        what = "traces" if report.measure == "traces" else "live instances"
        out.append(Culprit(
            kind="retracing", name=report.subject or report.tag, growth_per_step=report.trend.slope_per_step,
            unit=report.unit, evidence=f"tf.function {report.subject!r}: {what} keep growing; {report.trend.reason}",
            confidence=report.trend.confidence, hint=hint.key if hint else None,
            details={"tag": report.tag, "measure": report.measure, "last_value": report.last_value},
        ))
    return out


def _evidence_only(trend: TrendResult) -> str:
    """An undecided series' evidence (slope, interval, samples), without why
    it was undecided or how many more steps would decide: for a culprit named
    by attribution, whose series alone is not a leak."""
    return re.sub(r"; about [\d,]+ more steps would decide at this rate", "", trend.reason.split(": ", 1)[-1])


def _holding_the_growth(by_role, named) -> list[Culprit]:
    """In a run whose host memory leaks, the live tensors' and arrays' bytes
    that hold most of it (see POLICY.held_share): named with the memory
    series, ranked just above it. Attribution by bytes, as a heap analyser
    ranks what keeps memory alive; the run's verdict is the memory's."""
    memory = [r for r in _leaks(by_role.get(ROLE_MEMORY, [])) if r.unit == "bytes" and _host(r)]
    if not memory:
        return []
    top = max(memory, key=lambda r: r.trend.slope_per_step)
    rate = float(top.trend.slope_per_step)
    have = {c.name for c in named}
    # As sure as the memory's leak it holds (the memory culprit's confidence).
    confidence = float(next((c.confidence for c in named if c.kind == "series" and c.name == top.tag),
                            top.trend.confidence))
    out = []
    for report in by_role.get(ROLE_TENSORS, []):
        t = report.trend
        if (t is None or t.verdict == "leak" or report.unit != "bytes" or report.tag in have
                or not t.slope_ci or not rate > 0):
            continue
        low = float(t.slope_ci[0])
        if not low >= POLICY.held_share * rate:
            continue
        hint = hints_lib.hint_for_series(report.group, report.measure)
        evidence = _evidence_only(t)
        out.append(Culprit(
            kind="tensors", name=report.tag, growth_per_step=t.slope_per_step, unit=report.unit,
            evidence=(f"holds the run's leak: {evidence}; at least {low / rate:.0%} of what {top.tag} grows "
                      f"({fmt(rate, 'bytes')}/step)"),
            confidence=confidence, hint=hint.key if hint else None,
            details={"tag": report.tag, "holds": top.tag}))
    return out


def _grew_with_the_leak(by_role, run: RunData) -> list[Culprit]:
    """Live tensors, object types and traced containers that a few heap walks
    saw grow, in a run that leaks by other evidence (memory, sampled all
    along): naming them is attribution, not detection, so their growth needs
    only to be shown at POLICY.alpha_shown (four or five heap walks cannot
    reach alpha_leak on two degrees of freedom however exact they are). Two
    cases of too few walks to judge a series on its own:
    - it fell back at the last walk, which the walks before it ended too far
      from to leave the fall out (POLICY.release_gap_share: on a loaded
      machine the walks a budget pays for come early): the loop's data let go
      when it returned (a container a training function's local held reads
      empty then); what grew before the release is read;
    - it was seen at three walks only (a short run's baseline, one more, and
      the one at close; POLICY.min_samples is four): a line with one residual
      degree of freedom, on which exact counts of a steady leak pass
      (t > 318) and a warm-up's step does not.
    Added only to a leaking run, as growing containers are."""
    revised = {ROLE_TENSORS: [], ROLE_OBJECTS: [], ROLE_CONTAINERS: []}
    few = POLICY.min_samples - 1
    for role, reports in revised.items():
        for report in by_role.get(role, []):
            series = run.series.get(report.tag)
            # With the counts seen before it was named, as its verdict was reached.
            series = _with_earlier_points(series) if series is not None else None
            if report.trend is None or report.verdict == "leak" or series is None:
                continue
            released = len(series) >= POLICY.min_samples and falls_back_at_end(series.steps, series.values)
            if released:
                before = _grew_before_release(series)
            elif len(series) == few:
                before = assess_series(series.steps, series.values, series.wall_times, unit=series.info.unit,
                                       min_samples=few)
            else:
                continue
            if before.verdict != "leak" or not released:
                # Three walks are never a leak on their own, however exact.
                if not _grew(before):
                    continue
                evidence = _evidence_only(before)
                before = dataclasses.replace(
                    before, verdict="leak", confidence=clip01(1.0 - before.p_value),
                    reason=(f"grew with the run's leak: {evidence}; shown at p < {POLICY.alpha_shown:g}, "
                            f"short of a leak on its own"))
            if released:
                before = dataclasses.replace(before, reason=(
                    f"{before.reason}; then let go at the last walk (step {int(series.steps[-1])}), "
                    f"long after the walk before it (step {int(series.steps[-2])})"))
            reports.append(dataclasses.replace(report, trend=before))
    return (census.object_culprits(revised[ROLE_OBJECTS]) + _tensor_culprits(revised[ROLE_TENSORS])
            + _container_culprits(revised[ROLE_CONTAINERS], run, "a container grew at every heap walk"))


def _grew_before_release(series: Series):
    """The trend of the walks before a release at close: all of them, or,
    where that shows no growth, the last three. A leak that starts between
    two walks far apart (a list made at a late onset: lengths 0, 251, 2,182
    and 7,642 at steps 11,802 to 21,141, one a step from step 13,500) leaves
    three walks on its line and the one before off it, and a current segment
    has at least POLICY.min_segment points: no segment can start at the
    onset, and a line through all four is no line. The last three alone are
    the onset's line (the shortest census the release rule reads, see
    falls_back_at_end); growth shown through them is attribution only, held
    to the same alpha_shown."""
    before = assess_series(series.steps[:-1], series.values[:-1], series.wall_times[:-1],
                           unit=series.info.unit, min_samples=POLICY.min_samples - 1)
    last = POLICY.min_samples - 1
    if _grew(before) or len(series) - 1 <= last:
        return before
    recent = assess_series(series.steps[-1 - last:-1], series.values[-1 - last:-1],
                           series.wall_times[-1 - last:-1], unit=series.info.unit, min_samples=last)
    return recent if _grew(recent) else before


def _grew(trend) -> bool:
    """A leak, or growth shown at POLICY.alpha_shown (attribution's level)."""
    return trend.verdict == "leak" or bool(trend.leak_readings and growth_shown(trend, POLICY.alpha_shown))


def _container_culprits(reports, run: RunData, what: str = "a container keeps growing") -> list[Culprit]:
    out = []
    for report in _leaks(reports):
        hops = _container_series_hops(run.series.get(report.tag), report.subject)
        path = hops[:-1]
        out.append(Culprit(
            kind="container", name=report.subject, growth_per_step=report.trend.slope_per_step, unit="items",
            evidence=f"{what}: {report.trend.reason}", confidence=report.trend.confidence,
            hint="python_container",
            details={"tag": report.tag, "last_count": report.last_value, "container_hops": hops,
                     "held_by": [{"path": [hop_text(h) for h in path], "hops": path,
                                  "instances": 1, "of": 1, "sampled": 1}]},
        ))
    return out


def _container_series_hops(series, subject: str) -> list:
    """A growing container's hops, from its root to the container (the last
    hop, with what it holds), from the series' plugin data. A series
    written before hops were recorded has its subject's hops as text."""
    detail = series.info.detail if series is not None else None
    if detail:
        try:
            hops = json.loads(detail).get("hops")
        except (TypeError, ValueError, AttributeError, RecursionError):
            hops = None
        if isinstance(hops, list) and hops:
            texts = [hop_text(h) for h in hops if isinstance(h, dict)]
            return holders.clean_hops(hops, texts)
    return [{"kind": "text", "name": hop} for hop in str(subject).split(" → ") if hop]


def _gc_culprits(reports) -> list[Culprit]:
    return [
        Culprit(kind="gc", name=r.tag, growth_per_step=r.trend.slope_per_step, unit=r.unit,
                evidence=r.trend.reason, confidence=r.trend.confidence, hint="uncollectable")
        for r in _leaks(reports)
    ]


def _census_judged(census_reports) -> bool:
    """Whether the object and tensor series had samples enough to be judged."""
    return any(r.trend is not None and r.trend.shape != "too_few" for r in census_reports)


def _census_complete(census_reports) -> bool:
    """Whether object types and every live-tensor and array count were judged:
    only then can a report say that no Python-side object grows."""
    counts = [r for r in census_reports if r.group == "tensors" and r.measure.endswith("_count")]
    objects = [r for r in census_reports if r.group != "tensors"]
    return _census_judged(objects) and all(_census_judged([r]) for r in counts)


def _memory_culprits(reports, others, census_reports=()) -> list[Culprit]:
    leaking = {(r.group, r.measure): r for r in _leaks(reports)}
    explained = any(c.kind in ("object_type", "tensors", "retracing", "graph", "runtime") for c in others)
    judged = _census_complete(census_reports)
    out = []
    for report in _leaks(reports):
        hint = None
        if not explained and not judged and census_reports:
            hint = "census_too_short"
        elif report.group == "tf" and not explained and ("python", "allocated_blocks") not in leaking:
            hint = "allocator_only"
        elif (report.group == "process" and not explained
              and not any(g in ("tf", "python") for g, _m in leaking)):
            hint = "native_memory"
        elif report.measure == "malloc_bytes" and not explained:
            hint = "native_memory"
        out.append(Culprit(
            kind="series", name=report.tag, growth_per_step=report.trend.slope_per_step, unit=report.unit,
            evidence=report.trend.reason, confidence=report.trend.confidence * 0.9, hint=hint,
        ))
    return out


def _op_culprits(trace_report) -> list[Culprit]:
    out = []
    for op in trace_report.suspicious_ops():
        out.append(Culprit(
            kind="op", name=op.op, growth_per_step=float(op.retained_bytes_per_step), unit="bytes",
            evidence=op.reason, confidence=min(1.0, 0.5 + 0.5 * op.steps_retained / max(op.steps_total, 1)),
            hint="op_retains", details=op.to_dict(),
        ))
    return out


def _false_discovery_control(reports) -> None:
    """Leaks across every judged series of the run kept at ``POLICY.run_fdr``
    (Benjamini-Hochberg): a series whose leak does not survive says so."""
    judged = [r for r in reports if r.trend is not None and r.trend.shape != "too_few"]
    if len(judged) < 2:
        return
    kept = benjamini_hochberg([r.trend.p_value for r in judged], POLICY.run_fdr)
    for report, keep in zip(judged, kept):
        if report.trend.verdict == "leak" and not keep:
            report.trend = dataclasses.replace(
                report.trend, verdict="inconclusive", shape="unclear",
                reason=(f"{report.trend.reason}; but not significant among the run's {len(judged)} judged "
                        f"series at a {POLICY.run_fdr:.0%} false-discovery rate"))


# The host's memory is measured as a whole (RSS: what the host sees) and in
# parts (the C allocator, Python's blocks, TensorFlow's CPU allocator). A part
# is covered when the whole is certified flat, unless its own data show it
# growing above materiality (POLICY.alpha_shown): a part can grow for a long
# time inside memory the whole already holds (the allocator's free pages), so
# a flat whole bounds only what the host sees so far. The whole is covered when every part present is (RSS also moves with
# pools and pages the allocator keeps, and may not decide where the exact
# parts do). Device memory is its own.
_WHOLES = ("rss_anon_bytes", "rss_bytes", "uss_bytes")
_PARTS = ("malloc_bytes", "allocated_blocks", "bytes_in_use")


def _host(report) -> bool:
    return "GPU" not in str(report.subject).upper() and "TPU" not in str(report.subject).upper()


def _covered(memory) -> list:
    """The judged memory series that are certified, directly or through the whole or its parts."""
    whole_ok = any(r.measure in _WHOLES and r.trend.verdict == "no_leak" for r in memory)
    parts = [r for r in memory if r.measure in _PARTS and _host(r)]
    # Only the C allocator sees native memory: without it the parts do not add up to the whole.
    parts_ok = any(r.measure == "malloc_bytes" for r in parts) and all(r.trend.verdict == "no_leak" for r in parts)
    out = []
    for r in memory:
        through_whole = r.measure in _PARTS and _host(r) and whole_ok \
            and not growth_shown(r.trend, POLICY.alpha_shown)
        if r.trend.verdict == "no_leak" or through_whole or (r.measure in _WHOLES and parts_ok):
            out.append(r)
    return out


def _run_verdict(by_role, culprits, explained) -> tuple[str, float, str]:
    """The run rule. ``leak``: a culprit found by a test that controls false
    discoveries (a series' leak, object types through Benjamini-Hochberg),
    profiler ops aside (they name an op, a window cannot tell a leak from a
    filling buffer). ``no_leak``: every judged memory series is certified,
    directly or through the whole or the parts it belongs to (`_covered`).
    Otherwise ``inconclusive``, saying which series could not decide and
    how many more steps would."""
    evidence = [c for c in culprits if c.kind != "op"]
    # Python objects live in Python's blocks, and the large ones (a 64 KiB
    # bytearray, an array's data) in the C allocator's: where both are shown
    # to grow less than is material at the run's length so far (or the
    # blocks, where the allocator is not measured), a type (or container)
    # that grows costs no memory worth the name (a state snapshot kept per
    # epoch: 30 records in 3,000 steps; a lambda and a weak reference an
    # epoch), and is told, not called a leak. The same horizon as the
    # type's own claim: ``no_leak``'s longer one (Policy.clean_horizon) is
    # what "fixed" promises, not what a leak must overcome.
    blocks = next((r for r in by_role.get(ROLE_MEMORY, []) if r.measure == "allocated_blocks"
                   and r.trend is not None), None)
    malloc = next((r for r in by_role.get(ROLE_MEMORY, []) if r.measure == "malloc_bytes"
                   and r.trend is not None), None)

    def immaterial(r) -> bool:
        return r.trend.verdict == "no_leak" or growth_ruled_out(r.trend, POLICY.alpha_clean)

    within = []
    if blocks is not None and immaterial(blocks) and (malloc is None or immaterial(malloc)):
        # A runtime registry's items (the default graph's collections, the
        # py-function registry) are counts like a container's: in eager mode
        # every lookup table adds a None to the default graph's collections,
        # 8 bytes a step. They may also keep native state the blocks do not
        # see (a graph a custom gradient pins), so they are set aside only
        # where the C allocator is measured and immaterial too.
        within = [c for c in evidence if c.kind in ("object_type", "container")
                  or (c.kind == "runtime" and malloc is not None)]
        evidence = [c for c in evidence if c not in within]
    if evidence:
        top = evidence[0]  # culprits arrive ranked
        return "leak", float(top.confidence), f"{_describe(top)}: {top.evidence}"
    note = ""
    if within:
        t = blocks.trend
        flat = (t.reason.split(":")[0] if t.verdict == "no_leak" else
                f"{fmt(t.slope_per_step, t.unit)}/step, under the {fmt(t.clean_materiality, t.unit)}/step that is "
                f"material")
        where = "the memory measured" if within[0].kind == "runtime" else "Python's memory"
        note = (f"; {_describe(within[0])} grows ({within[0].evidence}), within {where}, which "
                f"does not grow materially ({flat}).")
    if explained:
        tag, why = next(iter(explained.items()))
        conf = min(r.trend.confidence for role in (ROLE_MEMORY,) for r in by_role.get(role, [])
                   if r.tag in explained)
        return "inconclusive", 1.0 - float(conf), why + note
    memory = [r for r in by_role.get(ROLE_MEMORY, []) if r.trend is not None]
    judged = memory or [r for role in (ROLE_TENSORS, ROLE_OBJECTS) for r in by_role.get(role, [])
                        if r.trend is not None]
    if not judged:
        return "inconclusive", 0.0, "no tb-leak memory series in this run"
    covered = _covered(judged) if memory else [r for r in judged if r.trend.verdict == "no_leak"]
    if len(covered) == len(judged):
        basis = [r for r in judged if r.trend.verdict == "no_leak"]
        conf = min(r.trend.confidence for r in basis)
        names = ", ".join(r.measure for r in basis[:4]) + (", ..." if len(basis) > 4 else "")
        rules_out = basis[0].trend.reason.split(":")[0] if basis else ""
        return "no_leak", float(conf), (f"no material growth in {len(basis)} of {len(judged)} memory series "
                                        f"({names}); {basis[0].measure}: {rules_out}" + note)
    undecided = [r for r in judged if r not in covered]
    worst = max(undecided, key=lambda r: (r.trend.decide_steps is None, r.trend.decide_steps or 0))
    conf = max(r.trend.confidence for r in undecided)
    return "inconclusive", float(conf), f"{worst.tag}: {worst.trend.reason}" + note


def _describe(culprit: Culprit) -> str:
    names = {"object_type": "objects of type", "tensors": "live tensors", "retracing": "tf.function",
             "container": "growing container", "runtime": "runtime state:",
             "graph": "TensorFlow graph:",
             "series": "series", "gc": "gc", "op": "op"}
    return f"{names.get(culprit.kind, culprit.kind)} {culprit.name}"


def _primary_memory_series(memory, verdict) -> SeriesReport | None:
    judged = [r for r in memory if r.trend is not None and r.unit == "bytes"]
    if not judged:
        return None
    leaking = [r for r in judged if r.trend.verdict == "leak"]
    if leaking:
        return max(leaking, key=lambda r: r.trend.slope_ci[0] if r.trend.slope_ci else r.trend.slope_per_step)
    for preferred in ("rss_anon_bytes", "rss_bytes", "malloc_bytes", "bytes_in_use", "uss_bytes", "tracemalloc_bytes"):
        for report in judged:
            if report.measure == preferred:
                return report
    return judged[0]
