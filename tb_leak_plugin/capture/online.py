"""While the loop runs: confirm leaks, trace who holds them, tell the user.

After each heap walk the monitor hands the walk to a :class:`LeakWatch`:

* **History.** Every point the monitor writes is kept in memory (at most
  ``WATCH.max_points`` per series, thinned evenly beyond), so the same analysis that
  the CLI runs on the logdir can run on the run so far.
* **Marks.** For the few types whose live count rises most between walks,
  the ids of their instances are noted (ids only, never the objects), so a
  later trace can tell the instances made since then from the old ones.
* **Growing containers.** The lengths of lists, dicts, sets and deques are
  compared from walk to walk (ids and lengths in two arrays); a container
  that grows at every walk is traced from a root and followed as a series
  of its own (``leak/containers/<path>/length``), so a ``kept.append(bytes)``
  that grows no gc-tracked type is named too.
* **Leak traces.** When the analysis confirms a culprit (an object type, live
  tensors), a sample of its new instances is traced to a root
  (:mod:`referrers`), once per culprit and again only when it has doubled,
  under a hard time cap. Each trace is written to the logdir as a ``held_by``
  point (JSON in the plugin data), so a saved logdir shows it.
* **Told.** The first time a culprit is confirmed the monitor logs one
  warning with the culprit, its trace and the projected time to running out
  of memory (every name in it escaped: a type or key name cannot drive the
  terminal or forge a line), and calls ``on_leak(report)``. Both are queued
  and delivered by :meth:`LeakWatch.deliver`, which the monitor calls after
  it has released its locks: a slow callback stalls no other monitor's heap
  walk, and one that closes the monitor does not deadlock.

Held-by data is bounded: every string written is cut to
``referrers.MAX_HOP_CHARS`` characters, every path to ``referrers.MAX_HOPS`` hops.

Everything else here runs inside the monitor's lock and heap-walk lock, costs at
most ``WATCH.watch_share`` (a quarter) of what the heap walks cost on top of them
(charged to them, it would leave short runs with too few walks for the
census), and never raises into the loop.
"""

from __future__ import annotations

import array
import collections
import dataclasses
import functools
import gc
import numpy as np
import itertools
import sys
import types
import json
import math
import os
import sysconfig
import time

from tb_leak_plugin.capture import referrers
from tb_leak_plugin.analysis.policy import WATCH
from tb_leak_plugin.capture.probes import _function_types, _is_library, _may_hold_arrays, live_arrays, type_name
from tb_leak_plugin.metadata import HELD_BY_FORMAT, HELD_BY_GROUP, SeriesInfo
from tb_leak_plugin.units import format_bytes, printable

# The leak watch's constants (what is traced and named, and when; the bounds
# of its own memory and time) are in analysis.policy.WatchPolicy, with their reasons.

# The interpreter's own registries and caches grow at imports, not per step.
_INTERPRETER_MODULES = frozenset((
    "sys", "re", "linecache", "functools", "typing", "importlib", "abc", "inspect", "warnings", "weakref",
    "_frozen_importlib", "_frozen_importlib_external", "copyreg", "encodings", "threading"))


def _interpreter_root(hops) -> bool:
    """Whether a path starts at a global of the interpreter's own modules, or
    is a class's namespace itself: a container with that path is the class's
    own dict, filled when the class is made, never where a leak accumulates
    (followed by address, numpy.ma's ``MaskedArray`` namespace read as a dict
    that gained 126 items between two walks, in a run where a library was
    imported while it trained, and named above the program's list)."""
    if hops and len(hops) == 1 and hops[0].get("kind") == "class_namespace":
        return True
    if not hops or hops[0].get("kind") != "global":
        return False
    return str(hops[0].get("name") or "").partition(".")[0] in _INTERPRETER_MODULES
_CONTAINER_SET = frozenset((list, dict, set, collections.deque, collections.OrderedDict, collections.defaultdict))
# The built-in container types a subclass's items are read through (with the
# base type's own C methods: a subclass's __len__ or __getitem__ is the
# program's code, never run). Libraries keep what a model holds in list and
# dict subclasses (Keras's TrackedList and TrackedDict, TensorFlow's
# ListWrapper and _DictWrapper): a leak in an attribute of a layer or metric
# accumulates in one of those.
_CONTAINER_BASES = {id(kind): kind for kind in (list, dict, set, collections.deque)}
_CONTAINER_IDS = frozenset(map(id, _CONTAINER_SET))
# Where dicts the collector has untracked are looked for: a dict whose keys
# and values are all untracked (strings, numbers, tuples of them, numpy
# arrays: a memo cache of arrays) is not in the census, so it is found
# through what holds it: closure cells and the globals of the program's own
# modules.
# functools.lru_cache's wrapper (its C type; None where functools is pure Python:
# then the cache dict is a closure's cell, already a holder).
_LRU_WRAPPER = getattr(functools, "_lru_cache_wrapper", None)
_LRU_WRAPPER = _LRU_WRAPPER if isinstance(_LRU_WRAPPER, type) else None
# What may hold a dict the collector does not track: closure cells and lru_cache wrappers.
_CELL_GROUP = frozenset(kind for kind in (types.CellType, _LRU_WRAPPER) if kind is not None)
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ()))
_MEMORY_GROUPS = frozenset(("process", "python", "tf"))
_CONTAINER_TYPES = (list, dict, set, collections.deque, collections.OrderedDict, collections.defaultdict)


class History:
    """The points written so far, per series, in one block allocated (and
    touched) when the monitor is made: keeping them never grows the process's
    memory during the run, which the program's own memory series would show
    as growth. ``WATCH.max_series`` series of ``WATCH.max_points`` points; a full series
    is thinned in place to every second point; series beyond the block are
    not kept (the logdir has them all)."""

    def __init__(self):
        self._index: dict[SeriesInfo, int] = {}
        self._steps = np.full((WATCH.max_series, WATCH.max_points), -1, np.int64)
        self._walls = np.full((WATCH.max_series, WATCH.max_points), -1.0)
        self._values = np.full((WATCH.max_series, WATCH.max_points), -1.0)
        self._counts = np.zeros(WATCH.max_series, np.int64)

    def record(self, step: int, wall_time: float, sample) -> None:
        steps, walls, values, counts = self._steps, self._walls, self._values, self._counts
        for info, value in sample:
            if info.group == HELD_BY_GROUP:
                continue
            row = self._index.get(info)
            if row is None:
                if len(self._index) >= WATCH.max_series:
                    continue
                row = self._index[info] = len(self._index)
            n = int(counts[row])
            if n and steps[row, n - 1] == step:
                walls[row, n - 1], values[row, n - 1] = wall_time, value
                continue
            if n == WATCH.max_points:
                # Keep every second point, and the newest.
                half = WATCH.max_points // 2
                for column in (steps, walls, values):
                    column[row, :half] = column[row, 0:WATCH.max_points:2]
                    column[row, half - 1] = column[row, WATCH.max_points - 1]
                n = half
            steps[row, n], walls[row, n], values[row, n] = step, wall_time, value
            counts[row] = n + 1

    def memory_grew(self, share: float) -> bool:
        """Whether a memory series has grown by ``share`` of its first value
        (a cheap check before the analysis, which allocates)."""
        for info, row in self._index.items():
            if info.group in _MEMORY_GROUPS and info.unit == "bytes":
                n = int(self._counts[row])
                first, last = self._values[row, 0], self._values[row, n - 1] if n else 0.0
                if n > 1 and first > 0 and last - first >= share * first:
                    return True
        return False

    def points(self, tag) -> tuple:
        """(steps, values) kept of the series ``tag`` (empty if none)."""
        for info, row in self._index.items():
            if info.tag == tag:
                n = int(self._counts[row])
                return self._steps[row, :n].copy(), self._values[row, :n].copy()
        return np.empty(0, np.int64), np.empty(0)

    def run_data(self, name: str, held_by=(), groups=None):
        from tb_leak_plugin.analysis.series import RunData, Series

        run = RunData(name=name, path=None)
        for info, row in self._index.items():
            if groups is not None and info.group not in groups:
                continue
            n = int(self._counts[row])
            steps, walls, values = self._steps[row, :n].copy(), self._walls[row, :n].copy(), self._values[row, :n].copy()
            earlier = run.series.get(info.tag)
            if earlier is not None and not n:
                continue
            if earlier is not None and len(earlier):
                # One series under two infos (the memory limit it is measured
                # against changed): one series, named by its newest info.
                if earlier.steps[-1] > steps[-1]:
                    info = earlier.info
                steps, walls, values = (np.concatenate((a, b)) for a, b in (
                    (earlier.steps, steps), (earlier.wall_times, walls), (earlier.values, values)))
            run.series[info.tag] = Series.from_points(info.tag, info, steps, walls, values)
        for info, step, wall_time, value in held_by:
            run.series[info.tag] = Series.from_points(info.tag, info, [step], [wall_time], [value])
        return run


class _Container:
    __slots__ = ("kind", "history", "grew", "path", "subject", "reported", "info", "made", "seen", "item_bytes",
                 "owned")

    def __init__(self, kind, made: bool = False):
        self.kind = kind
        self.history: list = []   # (step, wall_time, length)
        self.grew = 0
        # Made since the walk before it was first seen (no container had its
        # address then; one too short to be listed then was there): its first
        # growth is its length, not a growth seen (a step's batch list).
        self.made = made
        self.path: list | None = None
        self.subject: str | None = None
        self.reported = False
        self.info: SeriesInfo | None = None
        # The path from a running function's local, found while it grew (see
        # LeakWatch._seen_from_locals): (hops, step); None: not looked for
        # yet; False: no local reached it.
        self.seen: tuple | bool | None = None
        self.item_bytes = 0.0
        # (hops, step): the attribute of the program's object that held it
        # when it last grew (see LeakWatch._note_owners); None: none seen.
        self.owned: tuple | None = None


class LeakWatch:
    """Online leak confirmation and tracing for one Monitor."""

    def __init__(self, run_name: str, on_leak=None, log=None):
        # The analysis is imported now, before the first (baseline) heap
        # walk: imported at the first analysis, its modules (hundreds of
        # lists, dicts and functions) appeared in the census between two
        # walks as a one-off rise of the program's own counts.
        from tb_leak_plugin.analysis import report as _report  # noqa: F401
        from tb_leak_plugin.analysis import series as _series  # noqa: F401
        _warm_up_analysis()

        self.run_name = run_name
        self.on_leak = on_leak
        self._log = log or (lambda message: None)
        self.history = History()
        self._held_by: list = []           # (info, step, wall, value) written
        self._walks = 0
        self._counts: dict[int, int] = {}  # id(type) -> count at the last walk
        self._marks: dict[int, tuple] = {}  # id(type) -> (step, sorted ids, name, slot, share)
        # Ids of marked instances, in a block allocated (and touched) once.
        self._mark_ids = np.full((WATCH.marked_types, WATCH.max_marked_instances), -1, np.int64)
        self._traced: dict[str, tuple] = {}  # culprit key -> (walk, live count)
        self._told: set[str] = set()
        self._containers: dict[int, _Container] = {}
        # Followed containers gone since (the training function that held
        # them returned) that grew at every walk and had a path from a local.
        self._gone: list[_Container] = []
        self._walk_grown: list = []  # (entry, container) grown at this walk, no path yet
        self._container_ids = None
        self._container_lengths = None
        self._container_all = None    # sorted ids of every container at the last walk, short ones too
        self.trace_seconds = 0.0
        self.analysis_seconds = 0.0
        #: What the last analysis of the whole run cost (foresees the next).
        self.analysis_cost_s = 0.0
        self._analysed_walks = 0
        self._stale = False
        #: What the last trace of a culprit cost (foresees the next).
        self.trace_cost_s = 0.0
        # perf_counter() time by which this walk's optional work must end.
        self._deadline = math.inf
        # The latest any work past the budget may end (see after_walk's advance_s).
        self._limit = math.inf
        self._first_trace_owed_paid = False
        self.last_report = None
        self._failed = False
        self._container_traces = 0
        self._walk_seconds = 0.0
        self._rising = False          # a census count rose at the last walk
        self._rose: set = set()       # ids of the types that rose at the last walk
        self._memory_leaks = False    # the last memory-only analysis said leak
        #: A leak was confirmed between walks: the monitor walks the heap at
        #: its next sample (once per run), or at close().
        self.wants_walk = False
        self._walk_asked = False
        #: The run leaks and no holder is named yet: the next walks read the
        #: running functions' locals (see _growth_holding_arrays). A clean
        #: run's frames are never read (see _locals_for).
        self.wants_locals = False
        # key -> bytes of the buffers in those locals and in the program's
        # objects (see _buffers) at the walk before, and at this one; and this
        # walk's buffers themselves (dropped when the walk ends).
        self._buffer_history: dict = {}  # key -> (first, last, growths in a row, first step) (see _note_sizes)
        # An object's growing buffer -> its hops from the object (see _read_buffers) ...
        self._buffer_hops: dict = {}
        # ... and those gone or emptied since the walk before, having grown at
        # each of the walks before: key -> (hops, bytes grown, step first seen, steps seen)
        self._buffers_gone: dict = {}
        # The program's classes' buffers by owner class at the last walk and
        # at this one: id(class) -> (bytes, ids of the owners) (see _owner_classes).
        self._owners_before: dict = {}
        self._owners_now: dict = {}
        self._owner_totals: dict = {}  # id(class) -> (first, last, growths in a row, first step) of its buffers' bytes
        self._chosen: list = []          # indices of the buffers a culprit is traced through
        self._from_scan = False          # the culprit's targets are the numpy scan's arrays
        self._own = None                 # the program's own classes in the census announced
        self._walk_sizes: list = []    # [(key, bytes)] of this walk's buffers
        self._walk_buffers: list = []  # ... what a trace starts from (a buffer, or its object)
        self._walk_held: list = []     # ... and an object's buffer (None for the others)
        # id(untracked dict) -> (the program's object holding it, hops from it) at this walk
        self._walk_via: dict = {}
        self._walk_untracked: list = []  # the untracked dicts followed at this walk (see _untracked_dicts)
        self._locals_analyses = 0
        self._rise_streak = 0         # walks in a row at which a census count rose
        self._baseline = None         # sorted keys (see _object_keys) of the objects at WATCH.baseline_walk
        self._baseline_step = 0
        self._baseline_room = None    # the block the baseline's keys go into (WATCH.kept_room)
        self._kept_all = _TwoBlocks()   # every container's id at the last walk, in turn (WATCH.kept_room)
        self._kept_big = _TwoBlocks()   # ... the long ones' ids and lengths
        self._fresh = None            # the objects made since the baseline, during one walk
        self._early_analyses = 0
        self._ignored: set[int] = set()
        self._last_step, self._last_wall = 0, 0.0
        # (warning lines, report) told but not yet delivered (see deliver()).
        self._to_tell: list = []
        # Subclasses of the built-in containers in the census being walked.
        self._subclasses = frozenset()
        # What the container traces may still take beyond the budget (see WATCH.container_overdraft_s).
        self._overdraft_s = WATCH.container_overdraft_s
        #: Wall seconds per second of the monitor's own work (set by the monitor).
        self.contention = 1.0

    # -- called by the monitor -----------------------------------------------

    def announce(self, census) -> None:
        """Ask the census for the groups of objects the watch reads at this
        walk. Never raises: a failure switches the watch off for the run."""
        if self._failed:
            return
        try:
            self._announce(census)
        except Exception as error:
            self._failed = True
            self._log(f"leak tracing failed ({type(error).__name__}: {error}); it is switched off for this run")

    def _announce(self, census) -> None:
        kinds = [kind for kind in census.by_type() if id(kind) in self._marks]
        census.want(*kinds)
        census.want_group(_CONTAINER_SET)
        census.want_group(_CELL_GROUP)
        self._own = _own_kinds(census)
        census.want_group(self._own)
        self._subclasses = _container_subclasses(census)
        if self._subclasses:
            census.want_group(self._subclasses)

    def _worth_analysing(self, walk_s: float) -> bool:
        """Whether the analysis is worth its cost at this walk: something rose
        since the first walk, and the watch has spent under ``WATCH.watch_share`` of
        what the walks themselves cost."""
        self._walk_seconds += walk_s
        if self.trace_seconds + self.analysis_seconds > WATCH.watch_share * self._walk_seconds:
            return False
        return self._rising or self._memory_leaks

    def final_work_s(self) -> float:
        """The foreseen cost of the watch's work at the last walk: an
        analysis, and one trace while a culprit may still need one."""
        work = self.analysis_cost_s
        leaking = self.last_report is not None and self.last_report.verdict == "leak"
        if (self._held_by or leaking or self._memory_leaks) and len(self._held_by) < WATCH.max_traces:
            # Before any leak is seen the first trace is not foreseen: if the
            # last analysis finds one, that trace runs anyway (WATCH.first_trace_s).
            work += min(WATCH.max_trace_s * self.contention, max(self.trace_cost_s, WATCH.final_trace_s))
        return work

    def _leaked(self) -> bool:
        """Whether an analysis of this run found a leak."""
        return self._memory_leaks or (self.last_report is not None and self.last_report.verdict == "leak")

    def _left(self) -> float:
        """Seconds left to this walk's optional work (analysis, traces)."""
        return self._deadline - time.perf_counter()

    def _trace_cap(self) -> float:
        """A trace's time cap: a trace checks its cap between levels of its
        search, and a level can take a tenth of a second on a large heap."""
        return min(WATCH.trace_cap_s * self.contention, 0.7 * self._left())

    def _trace_limits(self) -> dict:
        """A trace's time cap, and what it may grow to on a large heap (see
        WATCH.trace_passes), as referrers.trace takes them."""
        return {"time_cap_s": self._trace_cap(), "passes": WATCH.trace_passes,
                "max_cap_s": min(WATCH.max_trace_s * self.contention, 0.7 * self._left())}

    def after_walk(self, step: int, wall_time: float, census, write, walk_s: float = 0.0,
                   spare_s: float | None = None, advance_s: float | None = None) -> float:
        """Run after the probes sampled ``census``; returns the seconds spent.

        ``write(step, sample, wall_time)`` writes extra points (containers,
        traces). ``spare_s``: what the monitor's budget has free for this
        walk's analysis and traces (None: no limit); an analysis foreseen to
        cost more waits, and traces stop when it is spent. ``advance_s``: the
        most the work that runs whatever the budget has left (a first trace,
        an early analysis) may take beyond ``spare_s`` (the allowance the
        monitor has not released yet; None: no limit). Never raises.
        """
        if self._failed:
            return 0.0
        started = time.perf_counter()
        self._deadline = math.inf if spare_s is None else started + spare_s
        self._limit = math.inf if spare_s is None or advance_s is None \
            else started + max(spare_s, 0.0) + max(advance_s, 0.0)
        self.wants_walk = False
        try:
            self._walks += 1
            if self._walks < WATCH.baseline_walk and self._baseline_room is None:
                # Before this walk's own peak, which later walks reach with these held.
                if len(census.objects) <= WATCH.max_baseline_objects:
                    self._baseline_room = _reserve(len(census.objects))
                counts = census.by_type()
                containers = sum(counts.get(kind, 0) for kind in _CONTAINER_SET)
                if containers <= WATCH.max_container_ids:
                    self._kept_all.reserve(containers)
                counts = None
            self._read_buffers(census, step)
            pending: list = []
            extra = self._follow_containers(step, wall_time, census, pending)
            if self._walk_grown and not census.final and census.local_hops is not None:
                self._seen_from_locals(step, census)
            self._mark(step, census)
            self._rise_streak = self._rise_streak + 1 if self._rising else 0
            self._fresh = None
            if self._walks == WATCH.baseline_walk:
                if len(census.objects) <= WATCH.max_baseline_objects:
                    self._baseline = _sorted_keys(census.objects, self._baseline_room)
                    self._baseline_step = step
                self._baseline_room = None
            if extra:
                write(step, extra, wall_time)
                self.history.record(step, wall_time, extra)
            due = census.final or (self._walks >= WATCH.min_walks_for_analysis and self._worth_analysing(walk_s))
            # The last walk of a run with no trace yet: its analysis, and one
            # trace if it finds a leak, run whatever the budget has left
            # (WATCH.first_trace_s): who holds a leak is the answer the user needs.
            # So does the last walk of a run that leaked: the report at close
            # may lead with a culprit no trace was written for (a run told
            # from the C allocator's bytes and traced then, whose report at
            # close leads with RSS, the allocator's bytes undecided: no holder).
            owed = (not self._held_by or (census.final and self._leaked())) and (census.final or (
                census.local_hops is not None and not self._first_trace_owed_paid
                and self._locals_analyses < WATCH.locals_analyses))
            # What an analysis past the budget is foreseen to cost: its last
            # measured cost, or before any, the watch's share of a walk.
            foreseen = max(self.analysis_cost_s, WATCH.watch_share * walk_s)
            if owed and not census.final:
                owed = self._limit - time.perf_counter() >= foreseen
                self._locals_analyses += owed
            early = not owed and not census.final and self._early_analyses < WATCH.early_analyses \
                and (self._rise_streak >= WATCH.growing_walks or (self._memory_leaks and not self._held_by)) \
                and self._walks >= WATCH.min_walks_for_analysis \
                and not (self.last_report is not None and self.last_report.verdict == "leak") \
                and not (due and self._left() >= self.analysis_cost_s) \
                and self._limit - time.perf_counter() >= foreseen
            if early:
                self._early_analyses += 1
            if owed or early or (due and self._left() >= self.analysis_cost_s):
                self._analyse(step, wall_time, census, write)
            if pending:
                extra = self._report_containers(pending, census)
                pending = None
                if extra:
                    write(step, extra, wall_time)
                    self.history.record(step, wall_time, extra)
        except Exception as error:  # never into the loop: switch off
            self._failed = True
            self._log(f"leak tracing failed ({type(error).__name__}: {error}); it is switched off for this run")
        finally:
            self._fresh = None  # never holds the program's objects past the walk
            self._walk_sizes, self._walk_buffers, self._walk_held = [], [], []
            self._walk_via, self._walk_untracked = {}, []
            self._walk_grown = []
            self._own = None  # (classes of the program: not kept past the walk)
        return time.perf_counter() - started

    def bring_report_up_to_date(self) -> None:
        """After the run: analyse the points of walks that had no budget left
        for an analysis (no traces: the objects are gone)."""
        behind = self._walks > self._analysed_walks or self._stale
        if behind and self._walks >= WATCH.min_walks_for_analysis and not self._failed:
            from tb_leak_plugin.analysis.report import build_run_report

            self.last_report = build_run_report(self.history.run_data(self.run_name, self._held_by))
            self._analysed_walks = self._walks
            self._stale = False

    def between_walks(self, runs: int) -> float:
        """After a run of the cheap probes: at their 32nd, 128th, 512th, ...
        run, the analysis runs on the memory series so far (no census, no
        trace), so that memory growth is told without waiting for a heap walk."""
        # At runs 32, 128, 512, ... (powers of 4), until memory growth is told.
        if self._failed or self._memory_leaks or runs < 32 or runs & (runs - 1) or (runs.bit_length() - 1) % 2 == 0:
            return 0.0
        if not self.history.memory_grew(WATCH.memory_growth_to_analyse):
            return 0.0
        started = time.perf_counter()
        try:
            from tb_leak_plugin.analysis.report import build_run_report

            # Memory series only (a few, cheap to judge): the census's
            # series are judged after the heap walks.
            report = build_run_report(self.history.run_data(self.run_name, groups=_MEMORY_GROUPS))
            self._memory_leaks = report.verdict == "leak"
            if report.verdict == "leak":
                self._tell(report)
                if not self._held_by and not self._walk_asked:
                    # Confirmed from memory: one heap walk soon, to name the
                    # holder, reading the running functions' locals first.
                    self.wants_walk = self._walk_asked = self.wants_locals = True
        except Exception as error:
            self._failed = True
            self._log(f"leak tracing failed ({type(error).__name__}: {error}); it is switched off for this run")
        spent = time.perf_counter() - started
        self.analysis_seconds += spent
        return spent

    # -- marks ----------------------------------------------------------------

    def _mark(self, step, census) -> None:
        counts = census.by_type()
        previous = self._counts
        rising = []
        for kind, count in counts.items():
            gain = count - previous.get(id(kind), 0)
            if gain >= 8 and not referrers.is_own_type(kind):
                rising.append((gain, id(kind), kind))
        rising.sort(key=lambda item: -item[0])
        self._rising = bool(rising) and bool(previous)
        rising_all = rising
        # Marked: types that rose at this walk and the one before (not on the
        # first walk: everything is new there).
        rising = [item for item in rising if item[1] in self._rose]
        self._rose = {key for _gain, key, _kind in rising_all}
        if previous:
            fresh = [kind for _gain, key, kind in rising[:WATCH.marked_types] if key not in self._marks]
            if fresh:
                census.instances_of(*fresh)  # one pass selects them all
            for _gain, key, kind in rising[:WATCH.marked_types]:
                if key in self._marks:
                    continue  # keep the earliest mark of a type that keeps rising
                if len(self._marks) >= WATCH.marked_types:
                    oldest = min(self._marks, key=lambda k: self._marks[k][0])
                    slot = self._marks.pop(oldest)[3]
                else:
                    slot = (set(range(WATCH.marked_types)) - {m[3] for m in self._marks.values()}).pop()
                instances = census.instances_of(kind)
                row = self._mark_ids[slot]
                share = _mark_share(len(instances), row.size)
                ids = _in_share(np.fromiter(map(id, instances), np.int64, len(instances)), share)
                instances = None
                n = min(ids.size, row.size)
                row[:n] = ids[:n]
                row[:n].sort()
                ids = None
                self._marks[key] = (step, row[:n], type_name(kind), slot, share)
        self._counts = {id(kind): count for kind, count in counts.items()}

    # -- containers -----------------------------------------------------------

    def _follow_containers(self, step, wall_time, census, pending: list) -> list:
        """Compare the containers' lengths with the last walk's; returns the
        points of the containers followed as series, and appends to
        ``pending`` those to trace now ``(key, entry, container)``."""
        containers = self._containers_of(census)
        if len(containers) > WATCH.max_container_ids:
            return []
        # Module namespaces grow at imports; they are roots, not leaks.
        namespaces = set()
        own_globals = []
        for name, module in referrers.modules():
            namespace = referrers.module_namespace(module)
            if namespace is not None:
                namespaces.add(id(namespace))
                if type(name) is str and not _is_library(name) and name.partition(".")[0] not in _STDLIB and (
                        name == "__main__" or not name.startswith((referrers._PACKAGE, "_"))):
                    own_globals.append(namespace)
        owners = census.where_type_in(self._own if self._own is not None else _own_kinds(census))
        untracked, self._walk_via = _untracked_dicts(census.where_type_in(_CELL_GROUP), own_globals,
                                                     owners[:WATCH.max_buffer_owners])
        containers = containers + untracked
        self._walk_untracked = untracked  # (not in the census: a trace at this walk may want them)
        own_globals = untracked = None
        n = len(containers)
        all_ids = np.fromiter(map(id, containers), np.int64, n)
        all_lens = np.fromiter(map(_length, containers), np.int64, n)
        if namespaces:
            # (np.isin sorts both arrays together: temporaries of the heap's size.)
            all_lens[~_absent(np.sort(np.fromiter(namespaces, np.int64, len(namespaces))), all_ids)] = 0
        big = np.flatnonzero(all_lens >= WATCH.min_container_length)
        self._kept_big.reserve(2 * big.size)
        every = np.sort(all_ids)
        order = np.argsort(all_ids[big], kind="stable")
        big = big[order]
        ids, lens = all_ids[big], all_lens[big]   # sorted by id
        all_ids = all_lens = None

        def find(key):
            at = int(np.searchsorted(ids, key))
            return at if at < ids.size and ids[at] == key else None

        extra = []
        # Containers followed: still there (same id, same type), grown?
        for key in list(self._containers):
            entry = self._containers[key]
            index = find(key)
            obj = containers[big[index]] if index is not None else None
            if obj is None or type(obj) is not entry.kind:
                if entry.reported and entry.subject:
                    extra.append((entry.info, 0.0))
                elif (entry.seen or entry.owned) and entry.grew >= 1 + entry.made and _per_step(entry) \
                        and not _listed(every, key):
                    self._keep_gone(entry)
                del self._containers[key]
                continue
            length = int(lens[index])
            last = entry.history[-1][2]
            entry.grew = entry.grew + 1 if length > last else 0
            entry.history.append((step, wall_time, length))
            if length > last:
                entry.item_bytes = _item_bytes(obj)  # (what its growth costs: see _per_step)
            if entry.seen is None and not entry.reported and entry.grew >= 1 + entry.made and _per_step(entry):
                self._walk_grown.append((entry, obj))
            if not entry.reported and entry.grew == 0:
                # Stopped growing: make room for others.
                del self._containers[key]
                continue
            if entry.reported:
                if entry.subject:
                    extra.append((entry.info, float(length)))
            elif entry.grew >= WATCH.growing_walks and len(entry.history) > WATCH.growing_walks:
                # Traced after the analysis and the culprits' traces, with
                # the time this walk has left (see _report_containers).
                pending.append((key, entry, obj))
            if len(entry.history) > 64:
                del entry.history[:-64]
                entry.made = False  # (its first point, the one it was made after, is gone)
        # New candidates: grown the most since the last walk (a container new
        # since then, or too short to be listed, counts from empty).
        if self._container_ids is not None and len(self._containers) < WATCH.followed_containers:
            # (Each array here is of the heap's containers: as few at once as
            # can be, the walks' peak of memory is the process's from then on.)
            prev_ids, prev_lens = self._container_ids, self._container_lengths
            if prev_ids.size:
                at = np.searchsorted(prev_ids, ids)
                at[at >= prev_ids.size] = 0
                known = prev_ids[at] == ids
                before = prev_lens[at]
                at = None
                before[~known] = 0
            else:
                known, before = np.zeros(ids.size, bool), np.zeros(ids.size, np.int64)
            gain = lens - before
            room = WATCH.followed_containers - len(self._containers)
            # Half the room goes to those that were there at the last walk
            # and grew, half to those made since (ranked by gain each): a
            # container made since the last walk (a step's list of 256
            # outputs) has a length, not a growth, and a few of them each walk
            # would crowd out the dict they are kept in, which grows by one a
            # step; but a list made since (a callback's, at the start of
            # fit) may be the leak.
            by_gain = np.flatnonzero(gain > 0)
            by_gain = by_gain[np.argsort(-gain[by_gain], kind="stable")]
            grown, made = by_gain[known[by_gain]], by_gain[~known[by_gain]]
            half = room // 2
            order = np.concatenate((grown[: room - half], made[:half], grown[room - half: room + 16],
                                    made[half: room + 16]))
            for index in order:
                key = int(ids[index])
                if room <= 0:
                    break
                if key in self._containers or key in self._ignored:
                    continue
                if _bounded(containers[big[index]]):
                    # A deque with a maxlen cannot accumulate: refilled from
                    # empty (a prefetch pool drained at one walk, full at the
                    # next), it was named as the holder of a C heap's growth.
                    # (Checked at each walk, not remembered by address: a
                    # deque made later may reuse it.)
                    continue
                # Made since the last walk: no container had its address then.
                unseen = self._container_all is not None and bool(_absent(self._container_all, ids[index:index + 1])[0])
                entry = _Container(type(containers[big[index]]), made=unseen)
                entry.history = [(self._last_step, self._last_wall, int(before[index])),
                                 (step, wall_time, int(lens[index]))]
                entry.grew = 1
                entry.item_bytes = _item_bytes(containers[big[index]])
                self._containers[key] = entry
                room -= 1
                if not entry.made and _per_step(entry):
                    self._walk_grown.append((entry, containers[big[index]]))
        self._note_owners(owners[:WATCH.max_buffer_owners], step, containers, big, find)
        owners = None
        turn = self._walks % 2
        self._container_ids, self._container_lengths = self._kept_big.keep(turn, ids, lens)
        self._container_all, = self._kept_all.keep(turn, every)
        ids = lens = every = None
        self._last_step, self._last_wall = step, wall_time
        containers = None
        return extra

    def _note_owners(self, owners: list, step: int, containers: list, big, find) -> None:
        """Note, on each followed container that grew at this walk, the
        attribute of the program's object that holds it (no pass of the
        heap: the referents of at most WATCH.max_buffer_owners objects, as for
        their buffers). A container the training function's object holds
        (``simulator.all_errors``) is gone at the last walk, after the
        function returned, and a short run's walks may have had no budget for
        a trace while it grew: at the last walk, the attribute is its holder
        (see _name_gone)."""
        grown = {}
        for key, entry in self._containers.items():
            if entry.reported or entry.grew < 1 + entry.made:
                continue
            via = self._walk_via.get(key)
            index = find(key)
            obj = containers[big[index]] if index is not None else None
            if via is not None and obj is not None:
                entry.owned = (_bounded_hops(via[1] + [_container_hop(_name_of(entry.kind), _item_kind(obj))]), step)
                entry.item_bytes = _item_bytes(obj)
            elif obj is not None:
                grown[key] = (entry, obj)
        if not grown or not owners:
            return
        for owner in owners:
            try:
                referents = gc.get_referents(owner)
                inner = [d for d in referents if type(d) is dict and dict.__len__(d) <= WATCH.small_dict_items and id(d) not in grown]
                hits = [r for r in referents + (gc.get_referents(*inner) if inner else []) if id(r) in grown]
                referents = inner = None
                for obj in hits:
                    entry = grown[id(obj)][0]
                    hops = _attribute_hops(owner, obj)
                    if hops and hops[0].get("kind") == "attribute":
                        entry.owned = (_bounded_hops(hops + [_container_hop(_name_of(entry.kind), _item_kind(obj))]),
                                       step)
                        entry.item_bytes = _item_bytes(obj)
                hits = None
            except Exception:
                continue
        grown = None

    def _locals_for(self, census):
        """The running functions' locals a trace at this walk may start from:
        those the walk read before it listed the objects; else, in a run
        that leaked, read now (None); else none. A clean run's frames are
        never read: on CPython before 3.13, reading them re-syncs a frame's
        snapshot the program keeps (``config = locals()`` gained the
        function's later variables, itself among them, and ``json.dumps``
        raised in the program)."""
        if census.local_hops is not None:
            return census.local_hops
        return None if self._leaked() else []

    def _keep_gone(self, entry) -> None:
        """Keep a container gone since the last walk (no container has its
        address: not one emptied or shortened), its class let go; the
        WATCH.max_containers that grew the most bytes are kept."""
        entry.kind = None
        self._gone.append(entry)
        if len(self._gone) > WATCH.max_containers:
            self._gone.remove(min(self._gone, key=lambda e: _items_grown(e)[0] * e.item_bytes))

    def _seen_from_locals(self, step, census) -> None:
        """The followed containers that grew at this walk, looked for down
        from the running functions' locals this walk read (no pass of the
        heap: a few milliseconds, within WATCH.seen_trace_s). A container a training
        function holds (``consumer._times``, a list of floats no census
        counts) is gone at the last walk, after the function returned, and
        the walks of a short run before it have no budget left for a trace
        of the heap. The path is kept with the container: at the last walk
        of a run whose memory leaked and nothing else names the holder, it
        is that holder, as seen while it grew (see _trace_containers_for)."""
        grown = self._walk_grown[:WATCH.followed_containers]
        objs = [obj for _entry, obj in grown]
        # Only the locals this walk read before it listed the objects (a run
        # that leaks with no holder named, see wants_locals): read now, with
        # every object listed, a frame's snapshot the program keeps (``config
        # = locals()``) would be re-synced under it, and one it once made
        # (``exec``) would keep a local the function let go of.
        result = referrers.trace(objs, time_cap_s=WATCH.seen_trace_s * self.contention, max_depth=0,
                                 exclude=_census_lists(census) + [objs, grown, self._walk_grown],
                                 local_hops=census.local_hops, containers=True)
        self.trace_seconds += result.seconds
        by_signature = {h.signature: h for h in result.held_by}
        for (entry, obj), signature in zip(grown, result.signatures or ()):
            held = by_signature.get(signature) if signature is not None else None
            if held is not None and held.hops and held.hops[0].get("kind") == "local" \
                    and held.signature not in result.own:
                entry.seen = (_bounded_hops(held.hops + [_container_hop(_name_of(entry.kind), _item_kind(obj))]),
                              int(step))
                entry.item_bytes = _item_bytes(obj)
            else:
                entry.seen = False  # no local reached it (a global's, a registry's): looked for once
        objs = grown = None

    def _containers_of(self, census) -> list:
        """The census's containers: the built-in types (one pass in C, with
        every announced group), then their subclasses."""
        containers = census.where_type_in(_CONTAINER_SET)
        if self._subclasses:
            containers = containers + census.where_type_in(self._subclasses)
        return containers

    def _report_containers(self, pending: list, census) -> list:
        """Trace the containers that grew at every walk (found by
        ``_follow_containers``), all in one search (a level of the search is
        one pass of the heap whatever the number of targets, and one that
        leads nowhere does not use up the time of the others), while this walk
        has time left; returns the points of those named."""
        extra = []
        deadline = self._deadline
        started = time.perf_counter()
        if self._overdraft_s >= WATCH.min_trace_s:
            self._deadline = max(deadline, min(started + self._overdraft_s * self.contention, self._limit))
        try:
            chosen = [item for item in pending
                      if item[1].history[-1][2] - item[1].history[0][2] >= WATCH.min_container_length
                      and _per_step(item[1])]
            room = WATCH.max_containers - sum(bool(e.subject) for e in self._containers.values())
            if not chosen or room <= 0 or self._container_traces >= 2 * WATCH.max_containers \
                    or self._left() < WATCH.min_trace_s:
                return extra  # (no time left: tried again at a later walk)
            # The containers whose new items carry the most bytes first.
            chosen.sort(key=lambda item: -(item[1].history[-1][2] - item[1].history[0][2]) * _item_bytes(item[2]))
            del chosen[room:]
            self._container_traces += 1
            # A dict the collector does not track, held by the program's
            # object: traced from that object, with the hops down to it known.
            via = [self._walk_via.get(key) for key, _entry, _obj in chosen]
            objs = [obj if found is None else found[0] for (_key, _entry, obj), found in zip(chosen, via)]
            suffixes = [None if found is None else found[1] for found in via] if any(via) else None
            result = referrers.trace(objs, **self._trace_limits(), suffixes=suffixes,
                                     exclude=_census_lists(census) + [pending, chosen] + pending + chosen,
                                     local_hops=self._locals_for(census), containers=True)
            objs = None
            self.trace_seconds += result.seconds
            by_signature = {h.signature: h for h in result.held_by}
            signatures = result.signatures or (None,) * len(chosen)
            for (key, entry, obj), signature, found in zip(chosen, signatures, via):
                held = by_signature.get(signature) if signature is not None else None
                if held is None and found is not None:
                    # Its holder's root not reached in time: named from the
                    # program's object that holds it, which is known.
                    hops = [dict(hop) for hop in found[1]]
                    held = referrers.HeldBy([referrers.hop_text(hop) for hop in hops], 1,
                                            tuple(map(referrers.hop_text, hops)), hops)
                if held is None and not result.complete:
                    continue  # cut short: tried again at a later walk
                self._name_container(entry, obj, held, result, extra)
                if not entry.subject:
                    self._containers.pop(key, None)
                    if len(self._ignored) < 4096:
                        self._ignored.add(key)
            chosen = via = None
        finally:
            # Only the time past the walk's own deadline is overdrawn.
            self._overdraft_s -= max(0.0, time.perf_counter() - max(deadline, started)) / self.contention
            self._deadline = deadline
        return extra

    def _name_container(self, entry, obj, held, result, extra) -> None:
        """Follow a traced container as a series of its own, named by its path
        (``held``: its path, None when no root was reached)."""
        entry.reported = True
        if held is None or held.signature in result.own or _interpreter_root(held.hops):
            # Not reached from a root, or one of tb-leak's own: not followed.
            entry.subject = None
            return
        path = held.path
        entry.path = path
        items = _item_kind(obj)
        kind = _name_of(entry.kind) + (f" of {items}" if items else "")
        entry.subject = " → ".join(path + [kind])[:240]
        hops = _bounded_hops(held.hops + [_container_hop(_name_of(entry.kind), items)])
        # The lengths seen before go into the series' plugin data (points at
        # past steps would make TensorBoard drop the later points of every
        # series, as after a restart); the series goes on from this walk.
        before = [[int(s), round(float(w), 3), int(n)] for s, w, n in entry.history[:-1]]
        entry.info = SeriesInfo("containers", "length", "count", entry.subject,
                                detail=json.dumps({"format": 1, "before": before, "hops": hops},
                                                  ensure_ascii=False, separators=(",", ":")))
        extra.append((entry.info, float(entry.history[-1][2])))

    # -- analysis and traces --------------------------------------------------

    def _analyse(self, step, wall_time, census, write) -> None:
        from tb_leak_plugin.analysis.report import build_run_report

        started = time.perf_counter()
        report = build_run_report(self.history.run_data(self.run_name, self._held_by))
        self.analysis_cost_s = time.perf_counter() - started
        self.analysis_seconds += self.analysis_cost_s
        self.last_report = report
        self._analysed_walks = self._walks
        self._stale = False
        self.wants_locals = False
        if report.verdict != "leak":
            return
        traced_any = False
        spent = 0.0
        # id(type) -> (trace, live, new, since) at this walk: culprits of one
        # type (live tensors by count and by bytes) share one trace.
        done_here: dict = {}
        deadline = self._deadline
        lead = report.culprits[0] if report.culprits else None
        owed = (not self._held_by and (census.final or not self._first_trace_owed_paid)) or (
            census.final and lead is not None and f"{lead.kind}:{lead.name}" not in self._traced)
        if owed:
            # A leaking run whose holder is still unnamed gets its one trace
            # now, whatever the budget has left (see WATCH.first_trace_s): paid
            # when a trace runs (a walk with nothing to trace keeps it).
            self._deadline = max(deadline, min(time.perf_counter() + WATCH.first_trace_s * self.contention,
                                               self._limit))
        for culprit in report.culprits[:6]:
            key = f"{culprit.kind}:{culprit.name}"
            if spent > WATCH.walk_trace_cap_s * self.contention or len(self._held_by) >= WATCH.max_traces \
                    or self._left() < WATCH.min_trace_s:
                break
            if census.final and culprit.kind in ("object_type", "tensors") and key not in self._traced \
                    and self._let_go(culprit) and self._name_gone(culprit, key, step, wall_time, write):
                # Its instances were let go with the containers gone since the
                # walk before: a trace now finds none of them.
                traced_any = True
                continue
            kind, instances = self._culprit_targets(culprit, census, report)
            if kind is None and not instances:
                continue
            self._first_trace_owed_paid = True
            live = len(instances)
            done = self._traced.get(key)
            if done is not None and (live < 2 * max(done[1], 1) or self._walks - done[0] < 4):
                continue
            if kind is not None and id(kind) in done_here:
                result, live, new, since = done_here[id(kind)]
                instances = None
                self._traced[key] = (self._walks, live)
                self._write_trace(key, _trace_detail(culprit, step, live, new, since, result), step, wall_time,
                                  result.traced, write)
                continue
            # Arrays a running function's local holds (see _growth_holding_arrays):
            # their paths end in that local, which is marked as holding arrays.
            arrays = kind is None and culprit.kind in ("series", "tensors") and bool(instances)
            chosen = self._chosen if arrays else []
            if arrays:
                # A buffer an object holds is traced from the object (see _buffers).
                first = self._walk_held[chosen[0]] if chosen else None
                arrays = _name_of(type(first if first is not None else instances[0]))
            mark = self._marks.get(id(kind)) if kind is not None else None
            if mark is not None and mark[2] == type_name(kind) and mark[0] < step:
                # (A mark made at this walk tells nothing new apart yet.)
                fresh = _not_marked(instances, mark[1], mark[4])
                since = mark[0]
            elif kind is not None and self._baseline is not None and self._baseline_step < step:
                fresh = _not_in_baseline(instances, self._baseline)
                since = self._baseline_step
            else:
                fresh, since = instances, None
            instances = None
            # The newest instances are the step's own (a local, this step's
            # loss, the model a step builds): what leaks is what is still
            # alive a while after it was made, so the newest tenth is left
            # out of the sample. (Along a chain, where older links are
            # deeper, the climb through what is new reaches them: see
            # referrers._through_fresh.)
            sample = _spread(fresh[: len(fresh) - len(fresh) // 10] if len(fresh) >= 10 else fresh, WATCH.trace_sample)
            new = len(fresh)
            fresh = None
            # (Buffers are at most three: the sample is all of them, in order.)
            suffixes = [_attribute_hops(self._walk_buffers[index], self._walk_held[index])
                        if self._walk_held[index] is not None else None for index in chosen] \
                if chosen and len(chosen) == len(sample) else None
            chosen = None
            result = referrers.trace(sample, **self._trace_limits(), suffixes=suffixes,
                                     exclude=_census_lists(census) + [sample, self._walk_buffers],
                                     local_hops=census.local_hops,
                                     fresh=self._fresh_objects(census))
            sample = None
            spent += result.seconds
            self.trace_seconds += result.seconds
            self.trace_cost_s = result.seconds
            self._deadline = deadline  # only one trace beyond the budget
            if not result.held_by and not result.complete:
                continue  # cut short by the time left: tried again at a later walk
            if self._from_scan:
                # Arrays reached through what the collector untracks (tuples
                # of arrays and numbers in a running function's list, an
                # instance's dict of arrays only) show no referrer, and the
                # scan also reaches a library's own arrays (numpy's
                # ``ma.masked_singleton``): a path that names nothing, or a
                # library's global, would stand before the program's holder.
                # Only paths into the program are kept; with none, the
                # culprit is traced again at a later walk (by then a buffer
                # the scan of the program's objects saw grow, see
                # _growth_holding_arrays).
                kept = [h for h in result.held_by if _into_the_program(h.hops)]
                if not kept:
                    continue
                result = dataclasses.replace(result, held_by=kept)
            detail = _trace_detail(culprit, step, live, new, since, result)
            if arrays and not detail["held_by"]:
                # Every path was left out (tb-leak's own, or one object bound
                # at import among many arrays): the buffers chosen, or the
                # scan's arrays, are another set at a later walk, traced then.
                # Taken for the culprit's trace, this one named nothing and
                # kept the holder a later walk saw grow from being traced.
                continue
            self._traced[key] = (self._walks, live)
            if kind is not None:
                done_here[id(kind)] = (result, live, new, since)
            if arrays:
                for entry in detail["held_by"]:
                    hops = entry.get("hops")
                    if hops and isinstance(hops[-1], dict) and not hops[-1].get("holds"):
                        hops[-1]["holds"] = arrays
            self._write_trace(key, detail, step, wall_time, result.traced, write)
            traced_any = True
        # Memory whose growth a traceable culprit explains is traced through
        # it; the total of gc-tracked objects names no type to trace.
        explained = any(c.kind in ("object_type", "tensors", "retracing", "container")
                        and not str((c.details or {}).get("tag", "")).startswith("leak/gc/")
                        for c in report.culprits)
        memory = next((c for c in report.culprits if c.kind == "series"), None)
        if memory is not None and not explained and len(self._held_by) < WATCH.max_traces:
            before = len(self._held_by)
            self._trace_containers_for(memory, step, wall_time, census, write)
            traced_any = traced_any or len(self._held_by) > before
        if traced_any and self._left() >= self.analysis_cost_s:
            report = build_run_report(self.history.run_data(self.run_name, self._held_by))
            self.last_report = report
            self._stale = False
        # Memory leaks and nothing named its holder: it may be an array a
        # running function's local holds, read at the next walks (and now,
        # the first time, as what they grow from: before this walk listed
        # the objects no frame had a snapshot its list could hold).
        self.wants_locals = memory is not None and not self._held_by and not census.final
        if self.wants_locals and census.local_hops is None \
                and not any(key[0] == "local" for key in self._buffer_history):
            self._read_locals_now(step)
        self._tell(report)

    def _read_buffers(self, census, step=None) -> None:
        """Note this walk's buffers (see _buffers), their keys and sizes apart
        from them (a trace must find no tuple of ours on their paths), and
        their history. Read at every walk, like the census: their cost is the
        walk's (the watch's share of the walks' cost is not spent on them)."""
        started = time.perf_counter()
        found = _buffers(census.local_hops, census, self._own)
        # An object's buffer that grew at the walk before: how it is held (see _note_buffers_gone).
        found_hops = {key: (target, buffer) for key, _size, target, buffer in found
                      if key[0] == "object" and buffer is not None and self._buffer_history.get(key, (0, 0, 0))[2] >= 1}
        self._walk_sizes = [(key, size) for key, size, _target, _buffer in found]
        self._walk_buffers = [target for _key, _size, target, _buffer in found]
        self._walk_held = [buffer for _key, _size, _target, buffer in found]
        found = None
        before = self._buffer_history
        self._buffer_history = _note_sizes(self._buffer_history, self._walk_sizes, step)
        self._note_buffers_gone(before, found_hops, step)
        self._owners_before = self._owners_now
        self._owners_now = _owner_classes(self._walk_sizes, self._walk_buffers)
        self._owner_totals = _note_sizes(self._owner_totals,
                                         [(kind, total) for kind, (total, _owners) in self._owners_now.items()],
                                         step)
        self._walk_seconds += time.perf_counter() - started

    def _note_buffers_gone(self, before: dict, found: dict, step) -> None:
        """Keep the hops of the objects' buffers that keep growing (``found``:
        key -> (object, buffer)), and note those gone or emptied at this walk
        after growing at each of the WATCH.buffer_growth_walks before it: a
        writer's staging buffer flushed, or freed with the loop's function,
        at close is what held the memory that grew (see _name_gone)."""
        for key, (owner, buffer) in found.items():
            hops = _attribute_hops(owner, buffer)
            if hops and hops[0].get("kind") == "attribute":
                self._buffer_hops[key] = hops + [{"kind": "object", "owner": _name_of(type(buffer))}]
        now = self._buffer_history
        for key in [k for k in self._buffer_hops if k not in before and k not in now]:
            del self._buffer_hops[key]
        found = None
        for key, (first, last, streak, seen) in before.items():
            hops = self._buffer_hops.get(key)
            if hops is None or streak < WATCH.buffer_growth_walks:
                continue
            size = now[key][1] if key in now else 0
            if size < WATCH.buffer_emptied_share * last:
                self._buffers_gone[key] = (hops, float(last - first), seen, step)
                if len(self._buffers_gone) > WATCH.max_containers:
                    del self._buffers_gone[min(self._buffers_gone, key=lambda k: self._buffers_gone[k][1])]

    def _read_locals_now(self, step=None) -> None:
        """The running functions' local buffers, read for the first time at
        this walk (their first reading: what they grow from)."""
        started = time.perf_counter()
        found = _buffers(referrers.running_locals())
        sizes = [(key, size) for key, size, _target, _buffer in found]
        found = None
        self._buffer_history.update(_note_sizes({}, sizes, step))
        self.trace_seconds += time.perf_counter() - started

    def _fresh_objects(self, census):
        """The census's objects made since the baseline walk (by address
        and type, see _object_keys: one at the address an older object of
        its type had is taken for old), or None."""
        if self._baseline is None or len(census.objects) > WATCH.max_baseline_objects:
            return None
        if self._fresh is None:
            started = time.perf_counter()
            objects = census.objects
            new = _not_in(self._baseline, objects)
            self._fresh = [objects[i] for i in new] if new.size <= WATCH.max_fresh else []
            self.trace_seconds += time.perf_counter() - started  # part of the traces' cost
        return self._fresh or None

    def _culprit_targets(self, culprit, census, report=None):
        """(the culprit's type, its live instances) to trace; a retracing
        tf.function is traced itself (who holds the function holds its traces);
        numpy bytes and memory, through a running function's local array that
        holds most of their growth (see _growth_holding_arrays)."""
        self._from_scan = False
        if (culprit.kind == "tensors" and culprit.unit == "bytes") or \
                (culprit.kind == "series" and culprit.unit == "bytes"):
            self._chosen = _growth_holding_arrays(culprit, report, self._walk_sizes, self._buffer_history) \
                or _owners_holding_growth(culprit, report, self._walk_sizes, self._walk_buffers,
                                          self._owners_before, self._owner_totals)
            if self._chosen or ("eager" not in culprit.name and "numpy" not in culprit.name):
                return None, [self._walk_buffers[index] for index in self._chosen]
            # Live tensors' bytes that no one buffer holds: traced by type.
        if culprit.kind == "tensors" and "numpy" in culprit.name:
            # numpy arrays (not gc-tracked: no object list has them) that no
            # one buffer holds: traced from the arrays the holders reach, the
            # ones the numpy scan counts (a list keeping a thread's scratch
            # array an epoch grows too slowly to be a container followed).
            # Kept only where it reaches a holder (see _analyse).
            self._chosen = []
            self._from_scan = True
            numpy = sys.modules.get("numpy")
            ndarray = getattr(numpy, "ndarray", None) if numpy is not None else None
            return None, (live_arrays(ndarray, census) if isinstance(ndarray, type) else [])
        if culprit.kind == "retracing":
            # The named tf.function; for the eager context's library growing,
            # the tf.functions traced most often.
            functions = []
            for kind in _function_types(census):
                for function in census.instances_of(kind):
                    try:
                        name = object.__getattribute__(function, "_name")
                        count = int(function.experimental_get_tracing_count())
                    except Exception:
                        continue
                    if name == culprit.name or (culprit.name.startswith("tf.function traces") and count >= 3):
                        functions.append((count, function))
            functions.sort(key=lambda item: -item[0])
            return None, [function for _count, function in functions[:3]]
        if culprit.kind == "object_type":
            name = culprit.name
        elif culprit.kind == "tensors" and "eager" in culprit.name:
            name = "tensorflow.python.framework.ops.EagerTensor"
        else:
            return None, []
        for kind in census.by_type():
            if type_name(kind) == name:
                return kind, census.instances_of(kind)
        return None, []

    def _name_gone(self, culprit, key, step, wall_time, write) -> bool:
        """At the last walk: the containers gone since the walk before, while
        none alive grows, are what the training function held, seen from its
        locals while they grew (see _seen_from_locals); named as the
        culprit's holders. Whether any was."""
        buffers = [item for item in self._buffers_gone.values() if item[3] == step]  # (gone at this walk)
        if not (self._gone or buffers) \
                or any(e.grew >= 1 + e.made and _per_step(e) for e in self._containers.values()):
            return False
        gone = sorted(self._gone, key=lambda e: -_items_grown(e)[0] * e.item_bytes)[:3]
        # Seen from a local while it grew, else from the object holding it.
        seen = [e.seen if e.seen else e.owned for e in gone]
        entries = [{"path": [referrers.hop_text(h) for h in hops], "hops": hops, "sampled": 1,
                    "instances": _items_grown(e)[0], "items_per_step": round(_items_grown(e)[1], 4),
                    "item_bytes": round(e.item_bytes, 1)}
                   for e, (hops, _step) in zip(gone, seen)]
        # An object's buffer emptied or gone at this walk after growing: by its attribute.
        buffers.sort(key=lambda item: -item[1])
        entries = sorted(entries + [{"path": [referrers.hop_text(h) for h in hops], "hops": hops, "sampled": 1,
                                     "instances": 1, "bytes_grown": round(grown)}
                                    for hops, grown, _seen, _at in buffers[:3]],
                         key=lambda e: -(e.get("bytes_grown") or e["instances"] * e.get("item_bytes", 0)))[:3]
        seen = seen + [(None, at if at is not None else step) for _h, _g, at, _s in buffers[:3]]
        self._traced[key] = (self._walks, 0)
        detail = {"format": HELD_BY_FORMAT,
                  "culprit": {"kind": referrers.bound(culprit.kind), "name": referrers.bound(culprit.name)},
                  "step": int(min(at for _hops, at in seen)), "live": None, "new": None,
                  "new_since_step": None, "traced": len(entries), "found": len(entries), "seconds": 0.0,
                  "complete": True, "containers": True, "held_by": entries}
        self._write_trace(key, detail, step, wall_time, len(entries), write)
        return True

    def _let_go(self, culprit) -> bool:
        """Whether the culprit's series fell back at this walk after a rise
        (its instances let go when the training function returned)."""
        tag = (culprit.details or {}).get("tag")
        if not isinstance(tag, str):
            return False
        from tb_leak_plugin.analysis.trend import falls_back_at_end

        steps, values = self.history.points(tag)
        return steps.size >= 3 and falls_back_at_end(steps, values)

    def _trace_containers_for(self, culprit, step, wall_time, census, write) -> None:
        """Memory grows and no traced type explains it: name the containers
        that grew at every walk (``kept.append(bytes(...))``) as its holders."""
        key = f"{culprit.kind}:{culprit.name}"
        if key in self._traced or not (self._containers or self._gone or self._buffers_gone):
            return
        if census.final and self._name_gone(culprit, key, step, wall_time, write):
            return
        # Grown at the last walk, and seen growing: a container made since
        # the walk before shows a length, not a growth, until it grows again
        # (a step's working list, 64 rows at the one walk that saw it, was
        # named as the holder of a run's memory growth).
        growing = sorted(((e.history[-1][2] - e.history[0][2], k, e) for k, e in self._containers.items()
                          if e.grew >= 1 + e.made and _per_step(e)), key=lambda item: -item[0])
        if not growing:
            return
        gains = {k: g for g, k, _e in growing[:WATCH.followed_containers]}
        objs = [obj for obj in self._containers_of(census) + self._walk_untracked if id(obj) in gains]
        if not objs:
            return
        # The containers whose new items carry the most bytes first: a list
        # of 64 KiB buffers before a dict of a thousand small entries.
        objs.sort(key=lambda obj: -gains[id(obj)] * _item_bytes(obj))
        del objs[3:]
        if self._left() < WATCH.min_trace_s:
            return  # no time left at this walk: tried at a later one
        exclude = _census_lists(census) + [objs]
        entries, seconds, traced = [], 0.0, 0
        for obj in objs:
            if self._left() < WATCH.min_trace_s:
                break
            found = self._walk_via.get(id(obj))  # (an untracked dict: from the object holding it)
            result = referrers.trace([obj if found is None else found[0]], **self._trace_limits(), exclude=exclude,
                                     suffixes=None if found is None else [found[1]],
                                     local_hops=census.local_hops, containers=True)
            found = None
            seconds += result.seconds
            traced += 1
            if result.held_by and result.held_by[0].signature not in result.own \
                    and not _interpreter_root(result.held_by[0].hops):
                growth = gains.get(id(obj), 0)
                items = _item_kind(obj)
                hops = _bounded_hops(result.held_by[0].hops + [_container_hop(_name_of(type(obj)), items)])
                entries.append({"path": [referrers.hop_text(h) for h in hops], "hops": hops, "sampled": 1,
                                "instances": int(growth)})
        objs = exclude = None
        self.trace_seconds += seconds
        if not entries and traced == 0:
            return  # no time was left to trace: tried again at a later walk
        if not entries:
            # Not yet: containers named at a later walk (three tries).
            self._container_tries = getattr(self, "_container_tries", 0) + 1
            if self._container_tries >= 3:
                self._traced[key] = (self._walks, 0)
            return
        self._traced[key] = (self._walks, 0)
        detail = {"format": HELD_BY_FORMAT,
                  "culprit": {"kind": referrers.bound(culprit.kind), "name": referrers.bound(culprit.name)},
                  "step": int(step), "live": None, "new": None, "new_since_step": None,
                  "traced": traced, "found": len(entries), "seconds": round(seconds, 4),
                  "complete": True, "containers": True, "held_by": entries}
        self._write_trace(key, detail, step, wall_time, traced, write)

    def _write_trace(self, key, detail, step, wall_time, value, write) -> None:
        info = SeriesInfo(HELD_BY_GROUP, f"t{len(self._held_by)}", "instances", key[:200],
                          detail=json.dumps(detail, ensure_ascii=False, separators=(",", ":")))
        write(step, [(info, float(value))], wall_time)
        self._held_by.append((info, step, wall_time, float(value)))
        self._stale = True  # the last report does not show this trace yet

    def _tell(self, report) -> None:
        """Queue the warning and the ``on_leak`` call for newly confirmed
        culprits; :meth:`deliver` makes them, outside the monitor's locks."""
        new = [c for c in report.culprits if c.kind != "op" and f"{c.kind}:{c.name}" not in self._told]
        if not new:
            return
        for culprit in new:
            self._told.add(f"{culprit.kind}:{culprit.name}")
        top = new[0]
        # Each line is made inert on its own (names come from the program).
        lines = [f"memory leak in run {printable(self.run_name)!r}: {printable(summarize(top))}"]
        held = top.details.get("held_by") if isinstance(top.details, dict) else None
        if held:
            lines.append("  held by: " + printable(" → ".join(map(str, held[0]["path"]))))
        for other in new[1:3]:
            lines.append(f"  also: {printable(summarize(other))}")
        lines.append("  " + printable(time_left(report)))
        if len(self._to_tell) < 16:
            self._to_tell.append((tuple(lines), report))

    def deliver(self) -> None:
        """Log the queued warnings and call ``on_leak`` with their reports;
        called by the monitor once it holds no lock. Never raises."""
        while True:
            try:
                lines, report = self._to_tell.pop(0)
            except IndexError:
                return
            try:
                self._log(lines)
            except Exception:
                pass
            if self.on_leak is not None:
                try:
                    self.on_leak(report)
                except Exception as error:
                    self._log(f"on_leak callback failed ({type(error).__name__}: {error})")


def _warm_up_analysis() -> None:
    """Run the trend analysis once on a made-up series, so that what it
    imports lazily is imported before the baseline walk too: numpy's
    ``median`` imports ``numpy.ma`` and the noise estimate ``numpy.fft``
    at their first call, which grew numpy's registry of array functions
    (285 to 301 entries) between two walks of a loop without TensorFlow,
    and that set was named as the holder of the program's memory growth."""
    from tb_leak_plugin.analysis.trend import assess_series

    steps = np.arange(48, dtype=np.float64)
    try:
        assess_series(steps, 1e6 + 64.0 * steps + 4096.0 * (steps % 12 == 0), unit="bytes")
    except Exception:
        pass


def summarize(culprit) -> str:
    rate = culprit.growth_per_step
    rate_text = f" {rate:+.3g} {culprit.unit}/step" if rate is not None and math.isfinite(rate) else ""
    return f"{referrers.bound(culprit.name)}{rate_text}"


def time_left(report) -> str:
    primary = next((s for s in report.series if s.tag == report.primary_tag), None)
    trend = primary.trend if primary is not None else None
    seconds = getattr(trend, "seconds_to_exhaustion", None)
    if seconds is None or not math.isfinite(seconds):
        return "time to running out of memory: not projected (no memory series grows, or none is known)"
    hours = seconds / 3600.0
    when = f"{hours / 24:.1f} days" if hours >= 48 else f"{hours:.1f} h" if hours >= 1 else f"{seconds / 60:.0f} min"
    limit = getattr(primary, "memory_limit", None)
    if limit:
        size = getattr(primary, "memory_limit_bytes", None)
        of = f" of {format_bytes(size)}" if size else ""
        return f"out of memory in ~{when} at this rate ({limit}{of})"
    return f"out of memory in ~{when} at this rate"


def _container_base(kind):
    """The built-in container type ``kind`` is or derives from (None: not a
    container), read from the type's own ``__mro__`` slot and compared by identity."""
    if id(kind) in _CONTAINER_BASES:
        return kind
    mro = referrers._type_attr(kind, "__mro__")
    if type(mro) is not tuple:
        return None
    for base in mro:
        found = _CONTAINER_BASES.get(id(base))
        if found is not None:
            return found
    return None


def _container_subclasses(census) -> frozenset:
    """The census's subclasses of list, dict, set and deque (other than the
    built-in ones already followed), tb-leak's own types left out."""
    kinds = []
    for kind in census.by_type():
        if id(kind) in _CONTAINER_IDS or _container_base(kind) is None or referrers.is_own_type(kind):
            continue
        kinds.append(kind)
    return frozenset(kinds)


def _untracked_dicts(cells: list, namespaces: list, owners: list = ()) -> tuple[list, dict]:
    """Dicts of at least WATCH.min_container_length items that the collector does
    not track (only atomic keys and values: a memo of strings or numbers),
    held by ``cells`` (closure cells; lru_cache wrappers with no maxsize), by
    a global of ``namespaces``, or by an attribute of ``owners`` (the
    program's own objects; see _owned_dicts); and, for those an owner holds,
    ``{id(dict): (owner, hops from the owner to it)}`` (C passes: the
    holders' referents in one call, the namespaces' values)."""
    holders = [cell for cell in cells if type(cell) is not _LRU_WRAPPER or not _lru_bounded(cell)]
    referents = gc.get_referents(*holders) if holders else []
    holders = None
    for namespace in namespaces:
        referents.extend(dict.values(namespace))
    kinds = np.fromiter(map(id, map(type, referents)), np.uintp, len(referents))
    dicts = [referents[i] for i in np.flatnonzero(kinds == id(dict)).tolist()]
    referents = kinds = None
    found, via = {}, {}
    for d in dicts:
        if not gc.is_tracked(d) and dict.__len__(d) >= WATCH.min_container_length:
            found[id(d)] = d
    for owner in owners:
        for d, hops in _owned_dicts(owner):
            found[id(d)] = d
            via[id(d)] = (owner, hops)
    return list(found.values()), via


def _untracked(value) -> bool:
    return type(value) is dict and not gc.is_tracked(value) and dict.__len__(value) >= WATCH.min_container_length


def _owned_dicts(owner) -> list:
    """``(dict, hops)`` of the untracked dicts (see _untracked_dicts) an object
    holds as an attribute, or as the cache of an lru_cache wrapper with no
    maxsize that is one (a memoised method); the names are read only where
    its referents (its attributes' values, or its ``__dict__``'s) hold one."""
    try:
        referents = gc.get_referents(owner)
        inner = [d for d in referents if type(d) is dict and gc.is_tracked(d) and dict.__len__(d) <= WATCH.small_dict_items]
        values = referents + (gc.get_referents(*inner) if inner else [])
        referents = inner = None
        if not any(_untracked(v) or (type(v) is _LRU_WRAPPER and _LRU_WRAPPER is not None) for v in values):
            return []
        values = None
        label = _name_of(type(owner))
        namespace = referrers._instance_dict(owner)
        out = []
        for name, value in (list(dict.items(namespace)) if namespace is not None else []) + _slot_values(owner):
            if type(name) is not str:
                continue
            hops = [{"kind": "attribute", "owner": label, "name": referrers.bound(name)}]
            if _untracked(value):
                out.append((value, hops))
            elif _LRU_WRAPPER is not None and type(value) is _LRU_WRAPPER and not _lru_bounded(value):
                out.extend((d, hops + [{"kind": "object", "owner": _name_of(_LRU_WRAPPER)}])
                           for d in gc.get_referents(value) if _untracked(d))
        return out
    except Exception:
        return []


def _lru_bounded(wrapper) -> bool:
    """Whether an lru_cache wrapper has a maxsize: it cannot accumulate (like a
    deque with a maxlen). Read from the cell of the ``cache_parameters``
    function functools sets on it; no code runs. Unknown: not bounded."""
    namespace = referrers._instance_dict(wrapper)
    params = dict.get(namespace, "cache_parameters") if namespace is not None else None
    if type(params) is not types.FunctionType:
        return False
    try:
        names, cells = params.__code__.co_freevars, params.__closure__ or ()
        maxsize = cells[names.index("maxsize")].cell_contents
    except (ValueError, IndexError):
        return False
    return type(maxsize) is int


def _length(container) -> int:
    """A container's length through its built-in base type's C method."""
    kind = type(container)
    if id(kind) in _CONTAINER_IDS:
        return len(container)
    base = _container_base(kind)
    try:
        return base.__len__(container) if base is not None else 0
    except Exception:
        return 0


def _last_items(container, count: int) -> list:
    """Up to ``count`` of the newest items (values of a dict), read with the
    built-in base type's C methods."""
    base = _container_base(type(container))
    if base is dict:
        return list(itertools.islice(reversed(dict.values(container)), count))
    if base is list or base is collections.deque:
        n = base.__len__(container)
        return [base.__getitem__(container, -i) for i in range(1, min(count, n) + 1)]
    if base is set:
        return list(itertools.islice(set.__iter__(container), count))
    return []


def _item_kind(container) -> str | None:
    """What a container holds, from its newest item: ``ndarray``, ``EagerTensor``,
    ``tuple(ndarray, int)``; None when empty or unknown (a set's items have no order)."""
    try:
        if _container_base(type(container)) is set:
            return None
        items = _last_items(container, 1)
        if not items:
            return None
        item = items[0]
        name = _name_of(type(item))
        if type(item) is tuple:
            name = "tuple(" + ", ".join(_name_of(type(part)) for part in item[:3]) + (", …" if len(item) > 3 else "") + ")"
        return referrers.bound(name, 120)
    except Exception:
        return None


class _BufferKinds:
    """The buffer types of one walk (an array, a tensor, a bytearray, bytes,
    a string), looked up once, matched by id: ``type(x) in kinds`` would
    hash the type, and a metaclass's ``__hash__`` is the program's code."""

    def __init__(self):
        numpy = sys.modules.get("numpy")
        self.ndarray = getattr(numpy, "ndarray", None) if numpy is not None else None
        self.eager = _eager_type()
        self.ids = frozenset(id(kind) for kind in (bytearray, bytes, str, self.ndarray, self.eager)
                             if kind is not None)

    def size(self, value) -> int:
        """The bytes of one buffer (by its exact type: a subclass's methods
        never run); 0 for anything else."""
        kind = type(value)
        if id(kind) not in self.ids:
            return 0
        try:
            if kind is bytearray or kind is bytes:
                return len(value)
            if kind is str:
                return str.__len__(value)
            if kind is self.ndarray:
                return int(value.nbytes)
            return int(value._num_elements()) * int(value.dtype.size)
        except Exception:
            return 0


def _eager_type():
    ops = sys.modules.get("tensorflow.python.framework.ops")
    kind = getattr(ops, "EagerTensor", None) if ops is not None else None
    return kind if isinstance(kind, type) else None


_INSTALLED = tuple({os.path.normcase(form(path)) + os.sep for path in
                    (sysconfig.get_paths().get(key) for key in ("stdlib", "platstdlib", "purelib", "platlib"))
                    if path for form in (os.path.realpath, os.path.abspath)})
_program_modules: dict = {}


def _program_module(name) -> bool:
    """Whether the module ``name`` is the program's own: ``__main__``, or a
    module loaded from a file outside the interpreter's installation and
    its site-packages (a package installed for the program is a library)."""
    if type(name) is not str:
        return False
    known = _program_modules.get(name)
    if known is not None:
        return known
    own = False
    if name == "__main__":
        own = True
    elif not name.startswith(referrers._PACKAGE) and not _is_library(name) \
            and name.partition(".")[0] not in _STDLIB:
        namespace = referrers.module_namespace(sys.modules.get(name))
        path = dict.get(namespace, "__file__") if type(namespace) is dict else None
        if type(path) is str:
            # (Not resolved: a stat per part of thousands of paths at the first
            # walk; the installation's paths are listed both ways instead.)
            path = os.path.normcase(os.path.abspath(path))
            own = not path.startswith(_INSTALLED) and os.sep + "site-packages" + os.sep not in path \
                and os.sep + "dist-packages" + os.sep not in path
    if len(_program_modules) < 100_000:
        _program_modules[name] = own
    return own


_program_names_cache: tuple = (-1, ())


def _into_the_program(hops) -> bool:
    """Whether a path starts anywhere but outside Python (``native``) or at a
    global of a library's module."""
    if not hops or not isinstance(hops[0], dict):
        return False
    first = hops[0]
    if first.get("kind") == "native":
        return False
    if first.get("kind") == "global":
        # (One of the names, where modules of numbered names were one path.)
        return _program_module(str(first.get("first") or first.get("name", "")).rpartition(".")[0])
    return True


def _program_module_names() -> tuple:
    """The names of the program's own modules in sys.modules, recomputed only
    when the number of modules changes (read with dict's own methods, no
    tuple per module: at a heap walk, thousands of new objects would set off
    a collection that goes through the census's list of every object)."""
    global _program_names_cache
    modules = sys.modules
    if _program_names_cache[0] != len(modules):
        names = tuple(name for name in list(dict.keys(modules)) if _program_module(name))
        _program_names_cache = (len(modules), names)
    return _program_names_cache[1]


def _own_kinds(census) -> frozenset:
    """The program's own classes among the census's types (defined in Python,
    in one of the program's own modules), each with at most WATCH.max_buffer_owners
    instances."""
    kinds = []
    for kind, count in census.by_type().items():
        if count > WATCH.max_buffer_owners or not _may_hold_arrays(kind) or issubclass(kind, _CONTAINER_TYPES):
            continue
        if _program_module(referrers._type_attr(kind, "__module__")):
            kinds.append(kind)
    return frozenset(kinds)


def _name_key(name):
    """A dict key as part of a buffer's key: a copy of a string's text (the
    program's key object is neither kept nor hashed), else None."""
    return name.encode("utf-8", "surrogatepass") if type(name) is str else None


def _buffers(local_hops, census=None, own=None) -> list:
    """``(key, bytes, target, buffer)`` of the buffers a leak may grow in, of
    at least WATCH.buffer_min_bytes each: the running functions' locals and
    the globals of the program's own modules (``target`` is the buffer,
    ``buffer`` None), and each attribute of the program's own objects (or an
    entry of a small dict one holds), keyed by the object and the attribute
    (``target`` is the object, ``buffer`` the attribute's value). At most
    WATCH.max_buffer_values values are looked at per walk."""
    kinds = _BufferKinds()
    floor = WATCH.buffer_min_bytes
    out = []
    for hop, value in local_hops or ():
        size = kinds.size(value)
        if size >= floor:
            out.append((("local", hop.get("where"), hop.get("owner"), hop.get("name")), size, value, None))
    if census is None:
        return out
    budget = WATCH.max_buffer_values
    seen = set()
    modules = sys.modules
    for name in _program_module_names():
        namespace = referrers.module_namespace(dict.get(modules, name)) if budget > 0 else None
        if type(namespace) is not dict or id(namespace) in seen:
            continue
        seen.add(id(namespace))
        items = list(itertools.islice(dict.items(namespace), budget))
        budget -= len(items)
        for key, value in items:
            size = kinds.size(value)
            if size >= floor and type(key) is str:
                out.append((("global", name, _name_key(key)), size, value, None))
        items = None
    owners = census.where_type_in(own if own is not None else _own_kinds(census))
    for owner in itertools.islice(owners, WATCH.max_buffer_owners):
        if budget <= 0:
            break
        try:
            referents = gc.get_referents(owner)
            budget -= len(referents)
            if not any(_holds_buffer(value, kinds, floor) for value in referents):
                continue
            referents = None
            for names, size, buffer in _named_buffers(owner, kinds, floor):
                out.append((("object", id(owner)) + names, size, owner, buffer))
            if len(out) >= WATCH.max_buffers:
                break
        except Exception:
            continue
        finally:
            referents = None
    owners = None
    return out


def _holds_buffer(value, kinds, floor, depth: int = 2) -> bool:
    """Whether ``value`` is a buffer of at least ``floor`` bytes, or a small
    dict (an instance's __dict__, a dict attribute in it) holds one, at most
    ``depth`` dicts down (copied first: another thread may change them)."""
    if kinds.size(value) >= floor:
        return True
    if depth and type(value) is dict and dict.__len__(value) <= WATCH.small_dict_items:
        return any(_holds_buffer(item, kinds, floor, depth - 1) for item in list(dict.values(value)))
    return False


def _named_buffers(owner, kinds, floor) -> list:
    """``(names, bytes, buffer)`` of the buffers an object holds: by
    attribute (its __dict__, read through the type's descriptor, which makes
    it exist if it did not: then the names are the same at every walk), by
    attribute and key in a small dict attribute, or by slot."""
    out = []
    namespace = referrers._instance_dict(owner)
    for name, value in list(dict.items(namespace)) if namespace is not None else ():
        key = _name_key(name)
        if key is None:
            continue
        size = kinds.size(value)
        if size >= floor:
            out.append(((key,), size, value))
        elif type(value) is dict and dict.__len__(value) <= WATCH.small_dict_items:
            for entry, item in list(dict.items(value)):
                size = kinds.size(item)
                if size >= floor and _name_key(entry) is not None:
                    out.append(((key, _name_key(entry)), size, item))
    for name, value in _slot_values(owner):
        size = kinds.size(value)
        if size >= floor:
            out.append(((_name_key(name),), size, value))
    return out


def _slot_values(owner) -> list:
    """``(name, value)`` of an object's slots, read through its classes'
    member descriptors (C getters: none of the program's code runs)."""
    out = []
    mro = referrers._type_attr(type(owner), "__mro__")
    for kind in mro if type(mro) is tuple else ():
        members = referrers._type_attr(kind, "__dict__")
        try:
            slots = [d for d in itertools.islice(members.values(), 4096)
                     if type(d) is types.MemberDescriptorType] if members is not None else []
        except Exception:
            continue
        for member in slots:
            try:
                out.append((str(member.__name__), member.__get__(owner, type(owner))))
            except Exception:
                continue
    return out


def _note_sizes(history: dict, sizes: list, step: int | None = None) -> dict:
    """Each buffer's (first, last, growths in a row, step first seen) across
    walks, from its sizes at this walk (at ``step``; None: not known);
    buffers not seen at this walk are forgotten."""
    out = {}
    for key, size in sizes:
        old = history.get(key)
        out[key] = (size, size, 0, step) if old is None else (old[0], size, old[2] + 1 if size > old[1] else 0,
                                                                old[3])
    return out


def _growth_since(trend, first_step) -> float:
    """The growth the series' fitted line gives over the steps a buffer has
    been watched: from its first sighting (or the segment's start, if later)
    to the segment's end; the whole segment's when the sighting is not known.
    A buffer first seen when half the segment had gone by cannot have grown
    by half the segment's growth since, and need not: it is held to the same
    stretch of steps as the series."""
    total = float(trend.total_growth)
    fit = getattr(trend, "fit", None)
    if first_step is None or not isinstance(fit, dict) or not {"start_step", "end_step"} <= fit.keys():
        return total
    start, end = fit["start_step"], fit["end_step"]
    if not end > start:
        return total
    return total * min(max((end - max(start, first_step)) / (end - start), 0.0), 1.0)


def _attribute_hops(owner, buffer) -> list:
    """The hops from ``owner`` to the ``buffer`` it holds: an attribute (in
    its __dict__ or a slot), or an entry of a dict in one of its attributes."""
    namespace = referrers._instance_dict(owner)
    label = _name_of(type(owner))
    items = list(dict.items(namespace)) if namespace is not None else []
    for key, value in items:
        if value is buffer and type(key) is str:
            return [{"kind": "attribute", "owner": label, "name": referrers.bound(key)}]
    for key, value in items:
        if type(value) is dict and type(key) is str and dict.__len__(value) <= WATCH.small_dict_items:
            for entry, item in list(dict.items(value)):
                if item is buffer:
                    text = referrers.bound(entry if type(entry) is str else type(entry).__name__)
                    return [{"kind": "attribute", "owner": label, "name": referrers.bound(key)},
                            {"kind": "key", "name": text, "key_type": "str" if type(entry) is str else "other"}]
    for name, value in _slot_values(owner):
        if value is buffer:
            return [{"kind": "attribute", "owner": label, "name": referrers.bound(name)}]
    return [{"kind": "object", "owner": label}]


def _growth_holding_arrays(culprit, report, sizes: list, history: dict) -> list:
    """The buffers (see _buffers) that hold at least half of the growth of
    the culprit's series (numpy bytes, or memory) over its current segment
    and grew: a running function's local since the walk before (a loop
    re-binds it to a new, bigger array each step: it is held by nothing the
    collector lists, so no growing container names it), an object's
    attribute or a global at each of the last two walks and, since it was
    first seen, by half of what the series grew since then (see
    _growth_since; a parser extends its bytearray; an attribute
    re-bound to a new sample of the same size, or a dataset loaded once,
    never is). At most three; returns their indices in ``sizes``."""
    series = next((r for r in (report.series if report is not None else ())
                   if r.tag == culprit.name and r.trend is not None), None)
    if series is None or not series.trend.total_growth > 0:
        return []
    share = WATCH.local_array_growth_share
    bar = share * float(series.trend.total_growth)
    grown = []
    for index, (key, size) in enumerate(sizes):
        entry = history.get(key)
        if entry is None or size < bar:
            continue
        first, _last, streak, seen = entry
        if key[0] == "local" and streak >= 1 or key[0] != "local" and streak >= WATCH.buffer_growth_walks \
                and size - first >= share * _growth_since(series.trend, seen):
            grown.append((size, index))
    grown.sort(key=lambda item: -item[0])
    return [index for _size, index in grown[:WATCH.local_arrays_traced]]


def _owner_classes(sizes: list, targets: list) -> dict:
    """The buffers of the program's objects (see _buffers) by the owner's
    class: id(class) -> (bytes, sorted ids of its owners)."""
    groups: dict = {}
    for (key, size), target in zip(sizes, targets):
        if key[0] == "object":
            total, owners = groups.get(id(type(target)), (0, []))
            owners.append(key[1])
            groups[id(type(target))] = (total + size, owners)
    return {kind: (total, np.unique(np.asarray(owners, np.int64))) for kind, (total, owners) in groups.items()}


def _owners_holding_growth(culprit, report, sizes: list, targets: list, before: dict, totals: dict) -> list:
    """Where no one buffer holds the growth of the culprit's series (see
    _growth_holding_arrays): the buffers of the program's objects of one
    class, summed, that grew since the last walk by at least
    WATCH.local_array_growth_share of that growth, the way a heap analyser
    counts what is retained per path rather than per object (a registry
    keeping a processor per domain, each with 0.5 MiB of tables: no one
    table grows). As for one buffer, the sum must have grown at each of the
    last two walks and, since first seen, by half of what the series grew
    since then (``totals``, see _growth_since): a pool
    of a fixed number of batches, full at one walk, empty at the next and
    full again, holds no growth. Returns the indices in ``sizes`` of one buffer each of at
    most WATCH.local_arrays_traced owners of that class made since the last
    walk (their address was no owner's then), the largest buffers first."""
    series = next((r for r in (report.series if report is not None else ())
                   if r.tag == culprit.name and r.trend is not None), None)
    if series is None or not series.trend.total_growth > 0 or not before:
        return []
    bar = WATCH.local_array_growth_share * float(series.trend.total_growth)
    now = _owner_classes(sizes, targets)
    grown = [(total - before.get(kind, (0, None))[0], kind) for kind, (total, _owners) in now.items()]
    grown = [(gain, kind) for gain, kind in grown if gain >= bar and kind in totals
             and totals[kind][2] >= WATCH.buffer_growth_walks
             and totals[kind][1] - totals[kind][0] >= WATCH.local_array_growth_share
             * _growth_since(series.trend, totals[kind][3])]
    if not grown:
        return []
    kind = max(grown)[1]
    old = before.get(kind, (0, np.zeros(0, np.int64)))[1]
    best: dict = {}
    for index, ((key, size), target) in enumerate(zip(sizes, targets)):
        if key[0] == "object" and id(type(target)) == kind and (key[1] not in best or size > best[key[1]][0]):
            best[key[1]] = (size, index)
    new = [item for owner, item in best.items() if _absent(old, np.array([owner], np.int64))[0]]
    new.sort(key=lambda item: -item[0])
    return [index for _size, index in new[:WATCH.local_arrays_traced]]


def _mark_share(count: int, room: int) -> int:
    """One in how many of ``count`` ids is noted so that they fit in
    ``room`` (with a margin for the hash's spread)."""
    return max(1, math.ceil(1.25 * count / max(room, 1)))


_HASH = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing: spreads aligned addresses


def _share_mask(ids: np.ndarray, share: int) -> np.ndarray:
    """Which ``ids`` fall in the hashed one-in-``share`` subset (every id for 1).
    Addresses are 16-byte aligned and objects of one type sit at a fixed
    stride in their pools, so the address is hashed before it is bucketed."""
    if share <= 1:
        return np.ones(ids.size, bool)
    hashed = (ids.view(np.uint64) >> np.uint64(4)) * _HASH
    return (hashed >> np.uint64(40)) % np.uint64(share) == 0


def _object_keys(objects) -> np.ndarray:
    """A key per object from its address and its type's, for telling the
    objects made since a baseline walk from those it saw. The address alone
    is not enough: the allocator hands a freed object's block to the next
    object of its size, of whatever type, so in a program that churns most
    addresses in use later were in use at the baseline too (900 module specs
    registered after it, every one at the address of some object of the
    baseline that had since been freed, were all taken for old and the trace
    of the leak found nothing new). Keyed with the type as well, a new object
    is taken for old only where an object of its own type lay before it."""
    return _keys_into(objects, np.empty(len(objects), np.int64))


# Objects keyed at a time: the temporaries of a walk's keys stay a few
# hundred KiB whatever the heap's size (computed whole, 340,000 objects took
# four arrays of 2.7 MiB at once, a step in the process's resident memory at
# the walk that first did it; its pages are not given back).
_KEY_CHUNK = 1 << 15


def _keys_into(objects, out: np.ndarray) -> np.ndarray:
    """The keys of ``objects`` (see _object_keys) written into ``out``."""
    for start in range(0, len(objects), _KEY_CHUNK):
        part = objects[start:start + _KEY_CHUNK]
        ids = np.fromiter(map(id, part), np.int64, len(part)).view(np.uint64)
        kinds = np.fromiter(map(id, map(type, part)), np.int64, len(part)).view(np.uint64)
        kinds *= _HASH
        np.bitwise_xor(ids, kinds, out=out[start:start + len(part)].view(np.uint64))
        part = None
    return out


class _TwoBlocks:
    """Two blocks reserved (and touched) once, used in turn: what a walk keeps
    for the next goes into the one the last walk's is not in, so that no
    later walk needs more memory at once than the first (WATCH.kept_room)."""

    __slots__ = ("blocks",)

    def __init__(self):
        self.blocks = [None, None]

    def reserve(self, size: int) -> None:
        if self.blocks[0] is None:
            self.blocks = [_reserve(size), _reserve(size)]

    def keep(self, turn: int, *arrays) -> tuple:
        """``arrays`` (int64) copied into block ``turn``; views of it."""
        need = sum(a.size for a in arrays)
        if self.blocks[turn] is None or self.blocks[turn].size < need:
            self.blocks[turn] = _reserve(need)
        block, views, at = self.blocks[turn], [], 0
        for a in arrays:
            block[at:at + a.size] = a
            views.append(block[at:at + a.size])
            at += a.size
        return tuple(views)


def _reserve(objects: int) -> np.ndarray:
    """A block for the keys of ``WATCH.kept_room`` times ``objects``,
    every page touched: the process's memory holds it from now on."""
    room = np.empty(int(objects * WATCH.kept_room) + 1, np.int64)
    room.fill(0)
    return room


def _sorted_keys(objects, room) -> np.ndarray:
    """The sorted keys of ``objects``, written into the reserved block where
    they fit (a view of it) and sorted in place: no temporary of their size."""
    keys = room[:len(objects)] if room is not None and len(objects) <= room.size \
        else np.empty(len(objects), np.int64)
    _keys_into(objects, keys).sort()
    return keys


def _not_in(baseline: np.ndarray, objects) -> np.ndarray:
    """Indices of the ``objects`` whose key is not among the sorted
    ``baseline`` keys, a chunk at a time (see _KEY_CHUNK)."""
    found = []
    keys = np.empty(min(len(objects), _KEY_CHUNK), np.int64)
    for start in range(0, len(objects), _KEY_CHUNK):
        part = objects[start:start + _KEY_CHUNK]
        found.append(np.flatnonzero(_absent(baseline, _keys_into(part, keys[:len(part)]))) + start)
        part = None
    return np.concatenate(found) if found else np.zeros(0, np.int64)


def _not_in_baseline(instances: list, baseline: np.ndarray) -> list:
    """The instances whose key (see _object_keys) is not among the sorted
    ``baseline`` keys."""
    if not instances:
        return []
    return [instances[i] for i in np.flatnonzero(_absent(baseline, _object_keys(instances)))]


def _absent(known: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Which ``keys`` are not among the sorted ``known`` ones."""
    if not known.size:
        return np.ones(keys.size, bool)
    where = np.searchsorted(known, keys)
    where[where >= known.size] = 0
    return known[where] != keys


def _in_share(ids: np.ndarray, share: int) -> np.ndarray:
    return ids if share <= 1 else ids[_share_mask(ids, share)]


def _not_marked(instances: list, marked: np.ndarray, share: int = 1) -> list:
    """The instances, of the hashed subset the mark noted (one in
    ``share``), whose id is not among the sorted ``marked`` ids."""
    if not instances:
        return []
    ids = np.fromiter(map(id, instances), np.int64, len(instances))
    new = _share_mask(ids, share) & _absent(marked, ids)
    return [instances[i] for i in np.flatnonzero(new)]


def _item_bytes(container) -> float:
    """Mean size of the last (up to 8) items of a container, in bytes; an
    object among them more than once counts once (a list that appends the
    same large string each step keeps one string, not one a step)."""
    try:
        items = _last_items(container, 8)
        distinct = {id(item): item for item in items}
        return sum(map(_size_of, distinct.values())) / max(len(items), 1)
    except Exception:
        return 0.0


_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class defined in Python
_TYPE_FLAGS = type.__dict__["__flags__"]


def _size_of(item) -> int:
    """``sys.getsizeof`` for objects of C types (an ndarray counts its data);
    for a class defined in Python, ``object.__sizeof__`` (its own
    ``__sizeof__`` is the program's code, never run)."""
    try:
        if _TYPE_FLAGS.__get__(type(item), type) & _HEAPTYPE:
            return object.__sizeof__(item)
        return sys.getsizeof(item)
    except Exception:
        return 0


def _name_of(kind) -> str:
    name = referrers._type_attr(kind, "__name__")
    return str.__str__(name) if issubclass(type(name), str) else "?"


def _bounded(container) -> bool:
    """Whether ``container`` is a deque with a maxlen (read with the C
    type's own descriptor: a subclass's property never runs)."""
    if not issubclass(type(container), collections.deque):
        return False
    try:
        return collections.deque.maxlen.__get__(container, collections.deque) is not None
    except Exception:
        return False


def _per_step(entry) -> bool:
    """Whether a container grew by ``WATCH.min_items_per_step`` a step over
    the walks that saw it, or by items of ``WATCH.min_bytes_per_step`` a step
    (its newest items' size, ``entry.item_bytes``). One made since the walk before it was first seen
    counts from that first sighting: its length then is not a growth (a dict
    of 967 entries made between the first two walks, one more at the third
    4,000 steps later, read as 0.2 items a step from empty, was named as the
    holder of a run's memory growth)."""
    history = entry.history[1:] if entry.made else entry.history
    if len(history) < 2:
        return False
    (first_step, _w, first), (last_step, _w2, last) = history[0], history[-1]
    steps = last_step - first_step
    return steps > 0 and (last - first >= WATCH.min_items_per_step * steps
                          or (last - first) * entry.item_bytes >= WATCH.min_bytes_per_step * steps)


def _listed(sorted_ids: np.ndarray, key: int) -> bool:
    """Whether ``key`` is among ``sorted_ids``."""
    at = int(np.searchsorted(sorted_ids, key))
    return at < sorted_ids.size and int(sorted_ids[at]) == key


def _items_grown(entry) -> tuple[int, float]:
    """Items a followed container grew by over the walks that saw it, and
    per step (one made since the walk before it was first seen: from that
    sighting, as in _per_step)."""
    history = entry.history[1:] if entry.made and len(entry.history) > 2 else entry.history
    (first_step, _w, first), (last_step, _w2, last) = history[0], history[-1]
    return int(last - first), (last - first) / max(last_step - first_step, 1)


def _spread(items: list, count: int) -> list:
    """Up to ``count`` items, evenly spread, the newest (last) included."""
    n = len(items)
    if n <= count:
        return list(items)
    step = n / count
    return [items[min(n - 1, int(n - 1 - i * step))] for i in range(count)]


def _census_lists(census) -> list:
    return census.lists()


def _trace_detail(culprit, step, live, new, since, result) -> dict:
    # Instances that tb-leak's own state holds (points it keeps) are left out,
    # and so are paths that cannot be where anything accumulates (see _accumulates).
    held = [h for h in result.held_by if h.signature not in result.own and _accumulates(h, result)]
    ours = sum(h.instances for h in result.held_by) - sum(h.instances for h in held)
    found = max(result.found - ours, 1)
    base = max((new if since is not None else live) - int(round(ours / max(result.found, 1) *
                                                               (new if since is not None else live))), 0)
    if since is not None:
        new = base
    return {
        "format": HELD_BY_FORMAT,
        "culprit": {"kind": referrers.bound(culprit.kind), "name": referrers.bound(culprit.name)},
        "step": int(step),
        "live": int(live),
        "new": int(new) if since is not None else None,
        "new_since_step": int(since) if since is not None else None,
        "traced": int(result.traced),
        "found": int(result.found),
        "seconds": round(result.seconds, 4),
        "complete": bool(result.complete),
        "held_by": [_held_entry(h, int(round(h.instances / found * base))) for h in held[:8]],
    }


def _accumulates(held, result) -> bool:
    """Whether a path can be where a leak accumulates. A path through no hop
    that holds many objects (a list's items, a dict's keys or values, a
    frame's locals) holds one object: the instance bound to a module global
    or a class attribute, created at import. Among many traced instances, one
    on such a path is not part of what grows; alone (a tf.function traced
    itself, a single leaking object), it is the answer."""
    hops = held.hops or []
    if hops and hops[0].get("kind") == "class_namespace" and len(hops) == 1:
        return False  # the instance is a class's own namespace: it holds nothing
    if held.instances > 1 or result.traced < 4:
        return True
    return any(h.get("kind") in referrers.FAN_OUT_KINDS for h in hops)


def _held_entry(held, instances: int) -> dict:
    """A path of the trace as written: its hops, its text, and the instances
    estimated under it. A wildcard key whose every sampled instance had a key
    of its own (``dict['pyfunc_*']``) counts the keys as the instances."""
    hops = [dict(h) for h in _bounded_hops(held.hops)]
    for hop in hops:
        if isinstance(hop.get("keys"), int) and hop["keys"] >= held.instances:
            hop["keys"] = max(hop["keys"], instances)
    return {"path": [referrers.hop_text(h) for h in hops], "hops": hops, "sampled": held.instances,
            "instances": instances}


def _container_hop(name: str, items) -> dict:
    """The last hop of a container's path: the container, and what it holds."""
    hop = {"kind": "object", "owner": name}
    if items:
        hop["holds"] = str(items)
    return hop


def _bounded_hops(hops) -> list:
    """At most ``referrers.MAX_HOPS`` hops (cut in the middle), each text
    field at most ``referrers.MAX_HOP_CHARS`` characters."""
    out = []
    for hop in referrers.cut_hops(list(hops)):
        out.append({k: (referrers.bound(v) if isinstance(v, str) else v) for k, v in hop.items()
                    if k in ("kind", "owner", "name", "where", "key_type", "keys", "holds", "count", "min_count")})
    return out
