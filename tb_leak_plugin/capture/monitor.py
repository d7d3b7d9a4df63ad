"""The Monitor: when to sample, within an overhead budget, never hurting the loop.

``Monitor.sample(step)`` is called once per training step. It measures the
training time between calls and its own time, and runs each probe group
(cheap counters; one walk of the heap for the object census, live tensors
and tf.function traces) when the group's share of the budget pays for its
next run's foreseen cost, keeping room for the final run at ``close()``.
Everything the monitor does is charged: the leak watch's container
comparison, analyses and traces are part of the heap walk they follow, and
take only what the budget has free at that walk.

The budget is 1% of the training time so far plus an allowance of 2 s per
run that is released over the first seconds of training (the heap walks'
part half in the first second or two and half over tens of seconds): a 2-second repro gets four or
five heap walks, a 30-second one has them spread over its length, a 3-day
job stays at 1%. The allowance is seconds of the monitor's own work: on a
contended machine it is scaled by the contention the heap walks measure
(see MAX_CONTENTION). So that samples stay spread out whatever the run's
length, a group also waits after its n-th run until training time has grown
by a factor 1 + 2/(n + 1) (the heap walk: about sqrt(T) walks in T seconds),
and the cheap counters, after 100 points or 4 s, wait 2*sqrt(t)/16 s between
points at training time t (about 16*sqrt(T) points in T seconds), so that a
long job's event file grows with the square root of its length. The first sample and ``close()``
always run every group: a baseline and a final point. The final heap walk is
foreseen from its measured parts (collection, walk, numpy scan, analysis);
at ``close()`` its optional parts run only while the run's budget (1% plus
the whole allowance) has room for them.

A probe that raises is logged once and dropped; ``sample`` never raises into
the training loop. The monitor keeps no references to user objects.
"""

from __future__ import annotations

import gc
import logging
import math
import os
import sys
import threading
import weakref

from tb_leak_plugin.analysis.policy import POLICY
from tb_leak_plugin.capture import cluster as cluster_lib
from tb_leak_plugin.capture import probes as probes_lib
# time.perf_counter() and time.time() below read capture/clock.py: real time,
# or the simulated clock a test or benchmark installs.
from tb_leak_plugin.capture import clock as time
from tb_leak_plugin.capture import runtime_state  # noqa: F401 - registers the runtime_state probe
from tb_leak_plugin.metadata import AFTER_FULL_COLLECTION, BEFORE_COLLECTION, SeriesInfo, task_series_info
from tb_leak_plugin.summary import EventWriter, TFSummaryWriter
from tb_leak_plugin.units import printable

logger = logging.getLogger("tb_leak_plugin")

# Census cost per allocated memory block, measured on CPython 3.11 with
# TensorFlow loaded (about 60 ns); only a prior until the first census runs.
_CENSUS_SECONDS_PER_BLOCK = 60e-9

# Consecutive failed writes (or flushes) after which the monitor stops sampling.
_MAX_WRITE_FAILURES = 3

# One heap walk at a time in the process: a census must not count (and scan)
# another thread's object list. A walk that finds another running skips.
_HEAP_WALK = threading.Lock()


def _heap_walk_lock_after_fork() -> None:
    # A child forked while another thread walked the heap inherits the lock
    # held by a thread that does not exist there: a Monitor made in the
    # child would skip every walk.
    global _HEAP_WALK
    _HEAP_WALK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_heap_walk_lock_after_fork)
# Heap walks between full garbage collections (see Monitor._collect_garbage),
# and the share of tracked objects found as garbage that makes every one full.
_FULL_COLLECT_EVERY = 4
_GARBAGE_SHARE_FOR_FULL = 0.01
# The last walk's collection is full (and its room kept in the budget) unless
# the last full one found less garbage than this share: cyclic garbage
# promoted to the oldest generation since then (Keras models dropped by
# clear_session(free_memory=False)) would end every object count high.
_GARBAGE_SHARE_FOR_FULL_LAST = 0.001
# A full collection this cheap (seconds, or share of the rest of the walk)
# runs at every walk: the counts it leaves are of live objects only, so a
# count that falls at the last walk is the program letting go of them.
_FULL_COLLECT_CHEAP_S = 0.05
_FULL_COLLECT_CHEAP_SHARE = 0.25
# A full collection's cost per tracked object (about 0.2-0.6 µs here).
_FULL_COLLECT_SECONDS_PER_OBJECT = 0.3e-6
# How long a heap walk waits for another thread's to finish before it skips.
_HEAP_WALK_WAIT_S = 2.0

DEFAULT_PROBES = ("process", "python", "malloc", "tf", "tf_graph", "runtime_state", "gc", "objects", "tensors",
                  "tf_function", "tf_graphs_held")

# The fixed allowance (seconds of monitor time per run) is released over
# training time t as allowance * sum(w * t / (t + h)) over a group's
# release components (w, h). It pays for about five heap walks of a
# TensorFlow heap (0.2-0.3 s each, the final one at close() foreseen at
# twice that), and the length of the run is unknown when they are spent.
# Released all in the first half second, they fell in the first 2 s of any
# run, and a 10-60 s run (the length of most repros) was seen again only at
# close(), its last part (the segment the analysis judges) by one walk.
# Released all over seconds, a 2-second repro had too few walks to judge a
# type's count (four are needed). So half of the heap walks' part serves
# the first second or two and half follows the run over tens of seconds
# (0.25-s walks: at about 0, 0.6, 1.6, 3.8, 8.8, 26 s of training). The cheap
# counters' part (about 1 ms a point in a TensorFlow process, 13% of the
# budget) is released the same way: all of it in the first half second
# paid for ~200 points in the first seconds and left a 10-30 s run 12-17 in
# its last third, where the analysis reads the current trend; half over
# tens of seconds leaves 22-26 there (1-ms points, simulated), while a
# 3-second repro still gets ~150.
DEFAULT_ALLOWANCE_S = 2.0
ALLOWANCE_RELEASE = ((0.5, 0.5), (0.5, 8.0))
# The allowance is seconds of the monitor's own work: on a machine where
# other processes take the cores, a heap walk's wall time grows by their
# share (2.2x at a load of 4.5 on 2 cores), and an allowance counted in wall
# seconds would buy a short run half its walks, so that what the monitor
# finds would depend on the neighbours. The heap walks' wall time over their
# thread CPU time measures that contention, and the allowance is scaled by
# it, up to this factor (the allowance then costs at most 4x its seconds of
# wall time, when the loop itself runs at a quarter of its pace). The 1%
# share needs no such care: the training time it is a share of slows alike.
MAX_CONTENTION = 4.0

# Shares of the budget, and how runs are spread. A unit waits after its n-th
# run until the training time has grown by a factor 1 + spread / (n + 1)
# (and at least ``min_gap_s``): with spread 2 a run of T seconds gets about
# sqrt(T) heap walks, spread evenly enough whatever T turns out to be; the
# cheap counters are limited by the budget in short runs and by
# _CHEAP_POINTS_PER_SQRT_S in long ones. The heap walk is the most
# informative and the most expensive group.
#
# The C allocator's counter (glibc's mallinfo2) is a unit of its own, spaced
# like the cheap counters: it walks every arena's free lists, and where a
# library's threads have made many arenas (XLA compiling a kernel per shape)
# it costs 5-6 ms a point against about 1 ms for all the others together.
# Run with them, it cut the cheap counters' points to a fifth (45 in a 27-s
# run, 7 in its last 70%: a leak there had a current segment of five
# points); on its own it spends its own share, and where it is as cheap as
# usual (0.05-0.2 ms) its points are where the others' are.
_GROUPS = {
    "cheap": {"share": 0.13, "spread": 0.01, "min_gap_s": 0.0, "release": ALLOWANCE_RELEASE},
    "malloc": {"share": 0.04, "spread": 0.01, "min_gap_s": 0.0, "release": ALLOWANCE_RELEASE},
    "heap": {"share": 0.80, "spread": 2.0, "min_gap_s": 0.05, "release": ALLOWANCE_RELEASE},
    "uss": {"share": 0.03, "spread": 0.5, "min_gap_s": 0.05, "release": ALLOWANCE_RELEASE},
}
# The cheap counters wait, between points at training time t since their
# first run, the shorter of t/N (N = _CHEAP_POINTS_PER_E_FOLD) and 2*sqrt(t)/K
# (K = _CHEAP_POINTS_PER_SQRT_S), and never less than the budget allows.
# Early on that is t/N: about N points each time the run's length grows by a
# factor e, so whatever the run's length so far its last third always holds
# about N*ln(1.5) = 40 points (the analysis judges the current trend on the
# last third of the run, and a short repro needs them there, not in its first
# seconds). From (2N/K)^2 = 156 s on it is 2*sqrt(t)/K: about K*sqrt(T)
# points in T seconds, so a long job's output grows with the square root of
# its length (a point every 3.1 s at 10 min, 64 s at 3 days: ~8,700 points a
# series), the whole run covered and the recent past dense.
_CHEAP_POINTS_PER_SQRT_S = 16.0
_CHEAP_POINTS_PER_E_FOLD = 100.0
# The largest share of a stretch of training time one unit's runs may take.
_MAX_DUTY = 0.5
# Share of the budget no probe group spends (see Monitor.__init__).
_SLACK = 0.05
# Seconds kept after the leak watch's work at a walk: writing the sample,
# releasing the object list.
_AFTER_WATCH_S = 0.05
# Room kept in the budget for the final run at close(), in runs of the unit.
_FINAL_RESERVE = 0.5
# The final heap walk's foreseen cost is its measured parts times this: the
# heap has grown since they were measured.
_FORESIGHT_MARGIN = 1.25


_COLLECTED_INFO = SeriesInfo("gc", "collected", "count")
_MEMORY_PROBES = (probes_lib.ProcessProbe, probes_lib.MallocProbe, probes_lib.PythonHeapProbe)
_MEMORY_MEASURES = frozenset({"rss_bytes", "rss_anon_bytes", "malloc_bytes", "allocated_blocks"})
# The memory whose growth since the last full collection makes the next one
# full (Monitor._grew_since_full): RSS's anonymous part where it is read,
# the C allocator's, Python's.
_GROWTH_MEASURES = frozenset({"rss_anon_bytes", "malloc_bytes", "allocated_blocks"})
_FULL_INFO = SeriesInfo("gc", "full_collection", "count")
# 1 where the profiler window the program asked for starts recording, 0 where
# it stops: the profiler's own buffers grow memory inside the window and are
# freed when it stops, which the analysis leaves out of memory series.
_PROFILER_INFO = SeriesInfo("profiler", "recording", "flag")


class _Unit:
    """A group of probes run together, with its share of the overhead budget.

    ``spent_s`` is the monitor time the unit has used so far; the unit is
    due at the training time ``due_train_s`` at which its share of the
    budget pays for one more run at its last measured cost (keeping room
    for the final run), and which is far enough past its last run.
    """

    __slots__ = ("name", "probes", "share", "spread", "min_gap_s", "min_steps", "cost_s", "spent_s",
                 "due_train_s", "last_step", "last_train_s", "first_train_s", "runs", "needs_objects",
                 "points_per_sqrt_s", "release")

    def __init__(self, name, probes, share, spread, min_gap_s, min_steps, points_per_sqrt_s=None,
                 release=ALLOWANCE_RELEASE):
        self.release = release
        self.name = name
        self.probes = probes
        self.share = share
        self.spread = spread
        self.min_gap_s = min_gap_s
        self.min_steps = max(1, int(min_steps))
        self.cost_s = 0.0
        self.spent_s = 0.0
        self.due_train_s = 0.0
        self.last_step = None
        self.last_train_s = 0.0
        self.first_train_s = 0.0
        self.runs = 0
        self.needs_objects = any(p.needs_objects for p in probes)
        self.points_per_sqrt_s = points_per_sqrt_s

    def schedule(self, budget: float | None, allowance_s: float, reserve_s: float | None = None,
                 next_s: float | None = None, loop_start_s: float = 0.0, cap_s: float | None = None) -> None:
        """``reserve_s``: room kept for the final run at close() (default:
        ``_FINAL_RESERVE`` runs at the last measured cost); ``next_s``: the
        next run's foreseen cost (default: the last measured); ``cap_s``: the
        most of the allowance the units may still release (the allowance less
        the leak watch's overdraft, see Monitor._unit_cap_s). The next
        run must fit in the budget released so far, and with the final run in
        what the run may cost if it ended then (the whole allowance: close()
        pays the final run from what has not been released yet)."""
        cap = allowance_s if cap_s is None else min(cap_s, allowance_s)
        if budget is None:
            self.due_train_s = self.last_train_s
            return
        reserve = _FINAL_RESERVE * self.cost_s if reserve_s is None else reserve_s
        need = self.spent_s + (self.cost_s if next_s is None else next_s)
        # The allowance is released from the first sample on (the set-up
        # before it counts towards the 1% only).
        paid = loop_start_s + _train_time_paying(self.share, budget, allowance_s,
                                                 need - self.share * budget * loop_start_s, self.release, cap)
        with_final = ((need + reserve) / self.share - cap) / budget
        paid = max(paid, with_final)
        # Spacing grows with the training time since the unit's first run (the
        # program may have trained, or set up, long before its first sample).
        since = self.last_train_s - self.first_train_s
        # At most _MAX_DUTY of any stretch of training goes to this unit: the
        # loop never runs at a third of its pace, and a short run's walks are
        # not all taken in its first second.
        gap = max(self.min_gap_s, (self.cost_s if next_s is None else next_s) * (1.0 / _MAX_DUTY - 1.0))
        spaced = self.first_train_s + max(since * (1.0 + self.spread / (self.runs + 1)), since + gap)
        if self.points_per_sqrt_s:
            # About N points per e-fold of the run, then K*sqrt(T) in T
            # seconds (see _CHEAP_POINTS_PER_SQRT_S).
            wait = min(since / _CHEAP_POINTS_PER_E_FOLD, 2.0 * math.sqrt(since) / self.points_per_sqrt_s)
            spaced = max(spaced, self.last_train_s + wait)
        self.due_train_s = max(paid, spaced)


# When a group is next due is found to a millisecond of training time or a
# part in 10^5 of it: a schedule needs no more, and the search runs at every
# sample a group takes (60 halvings were a third of the cheap counters' cost
# a point).
_DUE_ABS_S = 1e-3
_DUE_REL = 1e-5


def _release_share(release, t: float) -> float:
    """The share of the allowance released after ``t`` seconds of the loop."""
    return sum(w * t / (t + h) for w, h in release) if t > 0 else 0.0


def _train_time_paying(share, budget, allowance_s, need_s, release=ALLOWANCE_RELEASE, cap_s=None) -> float:
    """Training time T at which share * (budget*T + min(allowance*released(T), cap))
    reaches need_s (``cap_s``: see _Unit.schedule; default the allowance)."""
    cap = allowance_s if cap_s is None else cap_s
    need = need_s / share
    if need <= 0:
        return 0.0
    # The paid amount grows monotonically with T, and without bound
    # (budget > 0), so doubling finds a T past it.
    if not math.isfinite(need):
        return math.inf
    lo, hi = 0.0, 1.0
    while budget * hi + min(allowance_s * _release_share(release, hi), cap) < need:
        hi *= 2.0
    while hi - lo > max(_DUE_ABS_S, _DUE_REL * hi):
        mid = 0.5 * (lo + hi)
        if budget * mid + min(allowance_s * _release_share(release, mid), cap) < need:
            lo = mid
        else:
            hi = mid
    return hi


def _released(units, loop_s: float) -> float:
    """The share of the allowance released after ``loop_s`` seconds of the
    loop: each group's part of it on the group's own time scale."""
    total = sum(u.share for u in units)
    if total <= 0:
        return _release_share(ALLOWANCE_RELEASE, loop_s)
    return sum(u.share * _release_share(u.release, loop_s) for u in units) / total


class Monitor:
    """Samples memory and live objects from a training loop into TensorBoard.

    Args:
      logdir: run directory to write event files to (no TensorFlow needed).
        ``None`` writes through ``tf.summary`` to ``writer`` or the default
        ``tf.summary`` writer active at each sample (TensorFlow required).
      every_n_steps: sample the cheap probes at most every N steps.
      census_every_n_steps: run the object census at most every N steps.
      probes: probe names or ``probes.Probe`` instances; default all of
        ``DEFAULT_PROBES`` (``"uss"`` is available on request: it reads
        /proc smaps and costs milliseconds).
      overhead_budget: fraction of training time the monitor may use (0.01 =
        1%), on top of ``overhead_allowance_s``; ``None`` runs every probe on
        its step schedule alone (dense series; a heap walk every step costs
        ~100-300 ms on a TensorFlow heap).
      overhead_allowance_s: seconds of the monitor's own work per run (on a
        contended machine, up to ``MAX_CONTENTION`` times as many wall
        seconds, as its heap walks measure the contention) on top of the
        budget, released over the first seconds of training, so that short
        runs get enough samples to judge.
      top_k: object types picked per census (commonest first, then fastest
        growing); ``max_object_types`` bounds the number of type series.
      profile_steps: ``(start, stop)`` steps between which a TensorFlow
        profiler trace is recorded into ``<logdir>/plugins/profile``.
      profile_dir: where to record the trace when ``logdir`` is None.
      writer: a ``tf.summary`` writer to use when ``logdir`` is None.
      flush_secs: how often the event file is flushed (TensorBoard and the
        CLI see new points after a flush).
      census_collects_garbage: collect garbage before each census, so that
        unreachable cycles waiting for the collector are not counted as live
        objects: a full ``gc.collect()`` on the first and last census, every
        4th, every one while the program makes cyclic garbage, every one
        after memory grew materially since the last full one, and every one
        where a full collection is cheap (a small heap); the young generations
        in between (its cost is part of the census cost and budget).
      run_name: the run under ``logdir`` to write to; may use ``{task_type}``,
        ``{task_index}`` and ``{task}`` from ``TF_CONFIG``; ``"."`` is the
        logdir itself. Default: the logdir itself, except in a
        ``tf.distribute`` cluster of several tasks (``TF_CONFIG``), where each
        task writes ``<logdir>/<type>-<index>``. A task of a cluster records
        its identity in its run (``monitor.task``; see ``capture/cluster.py``).
    """

    def __init__(
        self,
        logdir: str | None = None,
        *,
        every_n_steps: int = 1,
        census_every_n_steps: int = 1,
        probes=DEFAULT_PROBES,
        overhead_budget: float | None = 0.01,
        overhead_allowance_s: float = DEFAULT_ALLOWANCE_S,
        top_k: int = 20,
        max_object_types: int = 64,
        profile_steps: tuple[int, int] | None = None,
        profile_dir: str | None = None,
        writer=None,
        flush_secs: float = 5.0,
        census_collects_garbage: bool = True,
        on_leak=None,
        trace_leaks: bool = True,
        run_name: str | None = None,
    ):
        if overhead_budget is not None and not 0 < overhead_budget <= 1:
            raise ValueError(f"overhead_budget must be in (0, 1] or None, got {overhead_budget!r}")
        if not (isinstance(overhead_allowance_s, (int, float)) and 0 <= overhead_allowance_s < math.inf):
            raise ValueError(f"overhead_allowance_s must be seconds >= 0, got {overhead_allowance_s!r}")
        if every_n_steps < 1 or census_every_n_steps < 1:
            raise ValueError("every_n_steps and census_every_n_steps must be >= 1")
        # A task of a tf.distribute job writes its own run (capture/cluster.py).
        placement = cluster_lib.resolve_run_dir(logdir, run_name)
        logdir = placement.run_dir
        self.task = placement.identity
        self._task_sample = [(task_series_info(self.task), float(self.task["task_index"]))] if self.task else []
        self.logdir = logdir
        self.overhead_budget = None if overhead_budget is None else float(overhead_budget)
        self.overhead_allowance_s = float(overhead_allowance_s)
        self._walk_wall_s = 0.0  # heap walks' wall and thread CPU seconds (contention)
        self._walk_cpu_s = 0.0
        self.census_collects_garbage = bool(census_collects_garbage)
        self._logged: set[str] = set()
        if placement.notice:
            self._log_once(placement.notice)
        self._lock = threading.Lock()
        # The thread holding _lock (sample() or close()), and a close() that
        # code run inside them asked for (see close()).
        self._lock_owner: int | None = None
        self._close_pending = False
        self._pid = os.getpid()
        self._stopped = False
        try:
            if logdir is not None:
                self._writer = EventWriter(logdir, flush_secs=flush_secs, name_tag=placement.file_tag)
            else:
                self._writer = TFSummaryWriter(writer)
        except OSError as error:
            # A read-only or missing logdir must not end the job: training
            # matters more than our summaries.
            self._log_once(f"cannot write to {logdir!r} ({type(error).__name__}: {error}); "
                           "the monitor does not sample in this run")
            self._writer = _NullWriter()
            self._stopped = True
        self._finalizer = weakref.finalize(self, _close_quietly, self._writer)

        made = probes_lib.make_probes(
            list(probes), on_skip=self._log_once, top_k=top_k, max_types=max_object_types
        )
        groups = {
            "cheap": ([p for p in made if not p.needs_objects and p.name not in ("uss", "malloc")], every_n_steps),
            "malloc": ([p for p in made if p.name == "malloc"], every_n_steps),
            "heap": ([p for p in made if p.needs_objects], census_every_n_steps),
            "uss": ([p for p in made if p.name == "uss"], census_every_n_steps),
        }
        present = {name: members for name, members in groups.items() if members[0]}
        # The groups share all but _SLACK of the budget: the rest pays for
        # what no group is charged (each step's call, the write of a sample).
        total_share = (sum(_GROUPS[name]["share"] for name in present) or 1.0) / (1.0 - _SLACK)
        self._units = [
            _Unit(name, members, _GROUPS[name]["share"] / total_share, _GROUPS[name]["spread"],
                  _GROUPS[name]["min_gap_s"], min_steps,
                  _CHEAP_POINTS_PER_SQRT_S if name in ("cheap", "malloc") else None, _GROUPS[name]["release"])
            for name, (members, min_steps) in present.items()
        ]
        # Before the heap walk has run, its cost is estimated from the heap size.
        blocks = sys.getallocatedblocks()
        for unit in self._units:
            if unit.name == "heap":
                unit.cost_s = blocks * _CENSUS_SECONDS_PER_BLOCK * 2.0
        # The first sample runs every unit (a baseline); schedules start after it.
        self._next_due_train_s = 0.0

        self._profiler = None
        if profile_steps is not None:
            self._profiler = self._make_profiler(profile_steps, logdir or profile_dir)

        self._step = -1
        self._train_s = 0.0
        self._loop_start_s = 0.0  # training time at the first sample
        self._requested_s = 0.0  # the profiler window's start and stop (profile_steps)
        # What the leak watch spent beyond the spare time it was given (its
        # first trace, its early analyses: see WatchPolicy.first_trace_s and
        # WatchPolicy.early_analyses): past the budget, not out of the heap walks'.
        self._overdraft_s = 0.0
        self._monitor_s = 0.0
        self._last_return = time.perf_counter()
        self._closed = False
        self._finalizing = False
        self._garbage_share: float | None = None  # of the last full collection
        self._walks_since_full = 0
        # The memory read last, and read right after the last full collection
        # (see _grew_since_full): measure -> value.
        self._memory_now: dict[str, float] = {}
        self._memory_at_full: dict[str, float] = {}
        self._awaiting_full_reading = False
        self._garbage_found: int | None = None
        # Unreachable objects the last walk's collection found (full or young).
        self._collected: int | None = None
        self._write_failures = 0
        # Online confirmation, leak traces and on_leak (see capture/online.py).
        self._watch = None
        if trace_leaks or on_leak is not None:
            from tb_leak_plugin.capture.online import LeakWatch

            name = os.path.basename(os.path.normpath(logdir)) if logdir else "."
            self._watch = LeakWatch(name, on_leak=on_leak, log=self._log_once)
        self._task_written = False
        self._watch_s = 0.0  # the watch's own time (part of monitor_seconds)
        self._sample_started = time.perf_counter()
        # Measured parts of a heap walk, from which the final walk's cost is
        # foreseen: a full collection, the walk itself (object list, probes,
        # container comparison); the numpy scan's cost is the tensors probe's.
        self._full_gc_s: float | None = None
        self._full_gc_cheap_s: float | None = None  # what decides "cheap" (see _learn_walk)
        self._full_gc_first = True
        self._young_gc_s: float | None = None
        self._walk_base_s: float | None = None

    # -- public API -------------------------------------------------------

    def sample(self, step: int | None = None) -> None:
        """Record a sample for ``step`` (default: one more than the last).

        Call once per training step. Cheap (about a microsecond when no
        probe is due); decides itself which probes run. Never raises.
        """
        entered = time.perf_counter()
        if not self._lock.acquire(blocking=False):
            return  # another thread is sampling this monitor right now
        self._lock_owner = threading.get_ident()
        self._sample_started = entered
        try:
            if self._closed or self._stopped:
                return
            if os.getpid() != self._pid:
                self._stop(f"this process (pid {os.getpid()}) was forked from the one that made the Monitor; "
                           "it stops sampling here (create a Monitor in the child to follow it)")
                return
            self._train_s += entered - self._last_return
            if self._step < 0:
                # The time from the Monitor's creation to the first sample is
                # the program's set-up: the allowance is released from here.
                self._loop_start_s = self._train_s
            step = self._step + 1 if step is None else int(step)
            self._step = step
            if self._profiler is not None:
                started = time.perf_counter()
                was = self._profiler.recording
                self._profiler.on_step_end(step)
                if self._profiler.recording != was:
                    self._write_extra(step, [(_PROFILER_INFO, 1.0 if not was else 0.0)], time.time())
                # The trace the program asked for (profile_steps) is not the
                # monitor's to pay from its budget.
                self._requested_s += time.perf_counter() - started
            if self._train_s >= self._next_due_train_s:
                self._run_due_units(step)
        except Exception as error:  # never into the training loop
            self._log_once(f"monitor failed: {type(error).__name__}: {error}")
        finally:
            done = time.perf_counter()
            self._monitor_s += done - entered
            self._last_return = done
            self._lock_owner = None
            self._lock.release()
        self._after_unlock()

    def _after_unlock(self) -> None:
        """What waits for the monitor's locks to be free: the leak warnings
        and ``on_leak`` calls (a slow callback stalls no heap walk), and a
        close() asked for from inside the monitor. Never raises."""
        if self._watch is not None:
            try:
                self._watch.deliver()
            except Exception as error:
                self._log_once(f"on_leak delivery failed: {type(error).__name__}: {error}")
        if self._close_pending and not self._closed:
            self._close_pending = False
            self.close()

    def close(self) -> None:
        """Take a last sample of every probe group (at the last step sampled,
        so the series end where training did), stop any profiler window,
        flush and close the writer. Idempotent; never raises.

        Called from inside the monitor's own sample (a ``weakref.finalize``
        or ``__del__`` that the monitor's garbage collection runs), it
        returns at once and the monitor closes as soon as that sample
        returns (waiting would deadlock). ``on_leak`` runs outside the
        monitor's locks: it may call close() directly."""
        if os.getpid() != self._pid:
            # A forked child: the lock may be held by a thread of the parent
            # that does not exist here (a sample in progress at the fork),
            # and the run's series are the parent's to end.
            self._closed = True
            try:
                self._finalizer()
            except Exception as error:
                self._log_once(f"closing the event file failed: {type(error).__name__}: {error}")
            return
        if self._lock_owner == threading.get_ident():
            self._close_pending = True
            self._log_once("close() was called from inside the monitor's own sample (a finalizer run by its "
                           "garbage collection?); the monitor closes when that sample returns")
            return
        with self._lock:
            self._lock_owner = threading.get_ident()
            try:
                if self._closed:
                    return
                if self.overhead_budget is not None and not self._stopped and os.getpid() == self._pid:
                    try:
                        self._final_sample()
                    except Exception as error:
                        self._log_once(f"final sample failed: {type(error).__name__}: {error}")
                self._closed = True
            finally:
                self._lock_owner = None
        self._after_unlock()
        if self._profiler is not None:
            try:
                was = self._profiler.recording
                self._profiler.close()
                if was and self._step >= 0:
                    # The window ends here: the analysis leaves out only what it spanned.
                    self._write_extra(self._step, [(_PROFILER_INFO, 0.0)], time.time())
            except Exception as error:
                self._log_once(f"profiler stop failed: {error}")
        try:
            self._finalizer()
        except Exception as error:
            self._log_once(f"closing the event file failed: {type(error).__name__}: {error}")
        self._report_writer()

    def flush(self) -> None:
        """Write pending points now (the CLI and TensorBoard see them). Never raises."""
        try:
            self._writer.flush()
        except Exception as error:
            self._log_once(f"flush failed: {error}")

    def _stop(self, message: str) -> None:
        self._stopped = True
        self._units = []
        self._log_once(message)

    def _report_writer(self) -> None:
        record_writer = getattr(self._writer, "record_writer", None)
        if record_writer is None:
            return
        for notice in list(record_writer.notices):
            self._log_once(notice)
        if record_writer.dropped_records:
            self._log_once(f"{record_writer.dropped_records} samples were dropped: the event file could not "
                           f"be written and the backlog is full")

    def __enter__(self) -> "Monitor":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    @property
    def overhead(self) -> float:
        """The monitor's time as a fraction of the training time so far."""
        return self._monitor_s / self._train_s if self._train_s > 0 else 0.0

    def stats(self) -> dict:
        """Per probe group: runs, last cost and total seconds; overall overhead
        and the budget so far (``budget_seconds``: 1% of training plus the
        allowance released so far, at most the allowance less the leak
        watch's ``overdraft_seconds``)."""
        budget_s = self._budget_s()
        return {
            "overhead": self.overhead,
            "monitor_seconds": self._monitor_s,
            "train_seconds": self._train_s,
            "budget_seconds": budget_s,
            # The leak watch's first traces and early analyses, past the budget.
            "overdraft_seconds": self._overdraft_s,
            "contention": self._contention(),
            "units": {u.name: {"runs": u.runs, "cost_seconds": u.cost_s, "spent_seconds": u.spent_s,
                               "probes": [p.name for p in u.probes]}
                      for u in self._units},
            "watch": None if self._watch is None else {
                "seconds": self._watch_s, "analysis_seconds": self._watch.analysis_seconds,
                "trace_seconds": self._watch.trace_seconds},
        }

    # -- scheduling -------------------------------------------------------

    def _final_sample(self) -> None:
        if self._step < 0:
            return
        step = self._step
        started = time.perf_counter()
        self._sample_started = started
        self._train_s += started - self._last_return
        # Heap walk first: its collection runs before the cheap probes read
        # the heap, so the last point of every series counts no garbage.
        wants_walk = self._watch is not None and self._watch.wants_walk
        final = sorted((u for u in self._units if u.last_step != step or (u.needs_objects and wants_walk)),
                       key=lambda u: not u.needs_objects)
        if final:
            self._finalizing = True
            self._run_units(step, final)
        self._monitor_s += time.perf_counter() - started

    def _run_due_units(self, step: int) -> None:
        now = self._train_s
        wants_walk = self._watch is not None and self._watch.wants_walk and self._can_walk_now()
        due = [
            unit for unit in self._units
            if unit.runs == 0 or (unit.needs_objects and wants_walk) or (
                now >= unit.due_train_s
                and (unit.last_step is None or abs(step - unit.last_step) >= unit.min_steps))
        ]
        if due:
            self._run_units(step, due)
        self._next_due_train_s = min((u.due_train_s for u in self._units), default=float("inf"))

    def _run_units(self, step: int, due: list) -> None:
        run_started = time.perf_counter()
        now = self._train_s
        paid_elsewhere = 0.0  # time charged to a unit that is not running now
        census = None
        sample = []
        costs = {}
        walking = any(u.needs_objects for u in due)
        wall_time = time.time()
        heap_walk = _HEAP_WALK  # (the one acquired is the one released, whatever a fork does)
        if walking and not heap_walk.acquire(timeout=_HEAP_WALK_WAIT_S):
            # Another monitor (another thread) is still walking the heap: take
            # the cheap probes now and the heap walk at a later sample.
            due = [u for u in due if not u.needs_objects]
            walking = False
            if not due:
                return
        try:
            walk_cost = 0.0
            gc_s = 0.0
            full_gc = False
            if walking:
                started = walk_wall0 = time.perf_counter()
                walk_cpu0 = time.thread_time()
                if self.census_collects_garbage:
                    if self._finalizing:
                        sample.extend(self._memory_before_collection(due))
                    full_gc = self._collect_garbage()
                    if full_gc:
                        sample.extend(self._memory_after_full_collection())
                    # What the collection freed: the analysis tells a count
                    # that falls at the last walk because the program let go
                    # of its objects from one the collector took.
                    sample.append((_COLLECTED_INFO, float(self._collected)))
                    sample.append((_FULL_INFO, 1.0 if full_gc else 0.0))
                walk_cost = gc_s = time.perf_counter() - started
            # The cheap probes read memory after the collection and before the
            # walk's object list exists (~8 bytes per tracked object).
            cheap_sample = []
            for unit in due:
                if not unit.needs_objects:
                    started = time.perf_counter()
                    for probe in list(unit.probes):
                        cheap_sample.extend(self._sampled(unit, probe))
                    costs[unit.name] = time.perf_counter() - started
            if walking:
                started = time.perf_counter()
                census = probes_lib.collect_objects(
                    read_locals=self._watch is not None and self._watch.wants_locals)
                census.final = self._finalizing
                census.step, census.wall_time = step, time.time()
                census.spare_s = self._walk_spare_s(due, gc_s)
                if self._garbage_found is not None:
                    self._garbage_share = self._garbage_found / max(len(census.objects), 1)
                for unit in due:
                    for probe in unit.probes:
                        if probe.needs_objects:
                            self._guarded(unit, probe, probe.announce, census)
                if self._watch is not None:
                    self._watch.announce(census)
                walk_cost += time.perf_counter() - started
                heap_units = [u for u in due if u.needs_objects]
                for unit in heap_units:
                    started = time.perf_counter()
                    for probe in list(unit.probes):
                        if probe.needs_objects:
                            sample.extend(self._sampled(unit, probe, census))
                    costs[unit.name] = time.perf_counter() - started + walk_cost / len(heap_units)
                self._walk_wall_s += time.perf_counter() - walk_wall0
                self._walk_cpu_s += time.thread_time() - walk_cpu0
                if cheap_sample and sample:
                    # What the walk sampled (a tf.function's traces) stands over
                    # the cheap reading of the same series.
                    walked = {info for info, _value in sample}
                    cheap_sample = [item for item in cheap_sample if item[0] not in walked]
            sample.extend(cheap_sample)
            self._note_memory(cheap_sample, walking and full_gc)
            wall_time = time.time()
            optional = 0.0  # the watch's analysis and traces at this walk
            over = 0.0
            if self._watch is not None:
                self._watch.history.record(step, wall_time, sample)
                if walking:
                    # Charged to the heap walk: the watch's analyses and
                    # traces take what the budget has free (and at most
                    # WatchPolicy.watch_share of what the walks cost).
                    before = self._watch.analysis_seconds + self._watch.trace_seconds
                    self._watch.contention = self._contention()
                    spare = self._watch_spare_s(due)
                    spent = self._watch.after_walk(step, wall_time, census, self._write_extra,
                                                   costs.get("heap", 0.0), spare_s=spare,
                                                   advance_s=None if self._finalizing else self._advance_s())
                    self._watch_s += spent
                    optional_now = self._watch.analysis_seconds + self._watch.trace_seconds - before
                    # Past the budget: only the analyses and traces run beyond it
                    # (a first trace, an early analysis), never the walk's own work.
                    over = max(min(spent - max(spare, 0.0), optional_now), 0.0) \
                        if spare is not None and not self._finalizing else 0.0
                    self._overdraft_s += over
                    paid_elsewhere += over  # by the overdraft: no unit's cost
                    heap = next((u for u in due if u.needs_objects), None)
                    if heap is not None:
                        costs[heap.name] = costs.get(heap.name, 0.0) + spent - over
                    optional = self._watch.analysis_seconds + self._watch.trace_seconds - before
                else:
                    cheap = next((u for u in due if u.name == "cheap"), None)
                    if cheap is not None:
                        spent = self._watch.between_walks(cheap.runs + 1)
                        self._watch_s += spent
                        # Paid by the heap walks (the watch's share), not by
                        # the cheap counters: their points must stay even.
                        payer = next((u for u in self._units if u.needs_objects), cheap)
                        if payer is cheap:
                            costs["cheap"] = costs.get("cheap", 0.0) + spent
                        elif spent > 0:
                            paid_elsewhere += spent
                            payer.spent_s += spent
                            payer.schedule(self.overhead_budget, self._allowance_s(), self._final_walk_s(),
                                           self._next_walk_s(), self._loop_start_s, self._unit_cap_s(payer))
                        if self._watch.wants_walk:
                            payer.due_train_s = min(payer.due_train_s, now)
            if walking:
                # The watch's container comparison is part of every walk; its
                # analysis and traces are foreseen on their own.
                self._learn_walk(census, gc_s, full_gc,
                                 sum(costs[u.name] for u in due if u.needs_objects) - (optional - over))
        except Exception as error:
            # Whatever failed, the groups that ran are rescheduled below (a
            # run that raised would otherwise stay due: a heap walk at every
            # sample), and what was sampled is written.
            self._log_once(f"monitor failed: {type(error).__name__}: {error}")
        finally:
            # Release the object list before writing: the census keeps nothing.
            if census is not None:
                census.release()
            if walking:
                heap_walk.release()
        started = time.perf_counter()
        try:
            if sample and self._task_sample and (self._finalizing or not self._task_written):
                sample.extend(self._task_sample)  # the task's identity: first and last points
                self._task_written = True
            if sample:
                self._writer.write(step, sample, wall_time)
            record_writer = getattr(self._writer, "record_writer", None)
            if (record_writer is not None and record_writer.failed_flushes
                    and not getattr(record_writer, "retries_in_background", False)):
                raise OSError(f"{record_writer.failed_flushes} flushes of the event file failed in a row")
            self._write_failures = 0
        except Exception as error:
            # A full disk or a vanished directory: the units are still
            # rescheduled below (so the budget holds), and after a few
            # failures in a row the monitor stops sampling altogether.
            self._write_failures += 1
            self._log_once(f"writing summaries failed ({type(error).__name__}: {error})")
            if self._write_failures >= _MAX_WRITE_FAILURES:
                self._stop(f"{_MAX_WRITE_FAILURES} writes failed in a row; the monitor stops sampling "
                           "(what is pending is written at close() if space returns)")
        # Writing, the history, releasing the object list: paid for by the
        # groups that ran, in proportion to their own work. Split alike, a
        # heap walk's share of it (its many series written, its object list
        # released) fell on the cheap counters, whose own work is a
        # hundredth of it: a loaded machine's first sample charged them a
        # quarter of a second, and a 60-s run had no cheap point after it.
        shared = max(time.perf_counter() - run_started - sum(costs.values()) - paid_elsewhere, 0.0)
        own = sum(costs.get(unit.name, 0.0) for unit in due)
        for unit in due:
            mine = costs.get(unit.name, 0.0)
            cost = mine + shared * (mine / own if own > 0 else 1.0 / len(due))
            if unit.runs == 0:
                # The first run pays one-time costs (the collector's first full
                # pass over a young heap, TensorFlow's first eager op): schedule
                # on the heap-size estimate until a second run is measured.
                unit.cost_s = min(cost, unit.cost_s) if unit.cost_s > 0 else cost
            elif unit.runs == 1:
                unit.cost_s = cost
            else:
                unit.cost_s = 0.5 * unit.cost_s + 0.5 * cost
            unit.spent_s += cost
            unit.last_step = step
            unit.last_train_s = now
            if unit.runs == 0:
                unit.first_train_s = now
            unit.runs += 1
            if unit.needs_objects:
                unit.schedule(self.overhead_budget, self._allowance_s(), self._final_walk_s(),
                              self._next_walk_s(), self._loop_start_s, self._unit_cap_s(unit))
            else:
                unit.schedule(self.overhead_budget, self._allowance_s(), loop_start_s=self._loop_start_s)
        self._units = [u for u in self._units if u.probes]

    def _can_walk_now(self) -> bool:
        """Whether a heap walk out of schedule (the leak watch asks for one to
        name a holder) fits in the budget, with the final walk's room kept;
        if not, the final walk names the holder."""
        if self.overhead_budget is None:
            return True
        unit = next((u for u in self._units if u.needs_objects), None)
        if unit is None:
            return False
        need = unit.spent_s + unit.cost_s + (self._final_walk_s() or unit.cost_s)
        return need <= unit.share * self._run_budget_s()

    def _learn_walk(self, census, gc_s: float, full_gc: bool, walk_s: float) -> None:
        """Note the measured parts of this walk (see ``_final_walk_s``)."""
        numpy_s = getattr(census, "numpy_s", 0.0)
        if full_gc:
            self._full_gc_s = gc_s
            # The first full collection also frees the program's set-up:
            # whether later ones are cheap is judged on the heap's size too.
            # (That estimate is held to the absolute bar only.)
            tracked = len(census.objects) if census is not None else 0
            first = self._full_gc_cheap_s is None
            self._full_gc_cheap_s = min(gc_s, _FULL_COLLECT_SECONDS_PER_OBJECT * tracked) if first else gc_s
            self._full_gc_first = first
        else:
            self._young_gc_s = gc_s
        base = max(walk_s - gc_s - numpy_s, 0.0)
        self._walk_base_s = base if self._walk_base_s is None else 0.5 * (self._walk_base_s + base)

    def _tensors_probe(self):
        return next((p for u in self._units for p in u.probes if isinstance(p, probes_lib.LiveTensorsProbe)), None)

    def _full_collection_next(self) -> bool:
        cheap = self._full_gc_cheap_s is not None and self._full_gc_cheap_s <= (
            _FULL_COLLECT_CHEAP_S if self._full_gc_first
            else max(_FULL_COLLECT_CHEAP_S, _FULL_COLLECT_CHEAP_SHARE * (self._walk_base_s or 0.0)))
        return (cheap or self._walks_since_full >= _FULL_COLLECT_EVERY - 1 or self._garbage_share is None
                or self._garbage_share > _GARBAGE_SHARE_FOR_FULL or self._grew_since_full())

    def _note_memory(self, readings, after_full: bool) -> None:
        """Keep the memory just read (the process's and Python's), and, at
        a walk whose collection was full, that reading as the live level
        (see _grew_since_full)."""
        try:
            read = False
            for info, value in readings:
                if info.measure in _GROWTH_MEASURES and info.group in ("process", "python") \
                        and math.isfinite(value):
                    self._memory_now[info.measure] = float(value)
                    read = True
            if after_full or self._awaiting_full_reading:
                # (No memory read at the full walk itself: the next reading.)
                self._awaiting_full_reading = not read
                if read:
                    self._memory_at_full = dict(self._memory_now)
        except Exception:
            pass

    def _grew_since_full(self) -> bool:
        """Whether memory grew by a material amount (the share of its level
        and the floor a leak must pass, POLICY.bytes_share / bytes_floor /
        blocks_floor) since the reading right after the last full
        collection. The next walk's collection is then full too: memory that
        grows between young collections may be garbage waiting in the oldest
        generation or live data, and only a full collection tells them
        apart. A training function that returns before close() lets its
        model's cycles go at the last walk; unless full collections ran while
        its memory grew, the analysis cannot tell that fall from garbage
        freed (report._fell_with_garbage)."""
        for measure, now in self._memory_now.items():
            live = self._memory_at_full.get(measure)
            if live is None:
                continue
            floor = POLICY.blocks_floor if measure == "allocated_blocks" else POLICY.bytes_floor
            if now - live > max(floor, POLICY.bytes_share * abs(live)):
                return True
        return False

    def _next_walk_s(self) -> float | None:
        """The next walk's foreseen cost: the walk, its collection (full or
        young, as it will be), and the numpy scan where it is cheap enough to
        run at every walk (a dear one waits for spare budget, see
        ``_walk_spare_s``). None: no walk measured yet."""
        if self._walk_base_s is None:
            return None
        collect = 0.0
        if self.census_collects_garbage:
            collect = (self._full_gc_s if self._full_collection_next() else self._young_gc_s) or 0.0
        tensors = self._tensors_probe()
        numpy_s = 0.0
        if tensors is not None and tensors._numpy_cost_s <= tensors.NUMPY_SCAN_SECONDS:
            numpy_s = tensors._numpy_cost_s
        return self._walk_base_s + collect + numpy_s

    def _final_walk_s(self) -> float | None:
        """The foreseen cost of the walk at close(): its collection (full
        while the program makes cyclic garbage worth counting), the walk, the
        numpy scan, the watch's last analysis and a trace (None: no walk
        measured yet)."""
        if self._walk_base_s is None:
            return None
        young = self._garbage_share is not None and self._garbage_share <= _GARBAGE_SHARE_FOR_FULL_LAST
        collect = ((self._young_gc_s if young else self._full_gc_s) or 0.0) if self.census_collects_garbage else 0.0
        analysis = self._watch.final_work_s() if self._watch is not None else 0.0
        tensors = self._tensors_probe()
        numpy_s = tensors.final_scan_s() if tensors is not None else 0.0
        return _FORESIGHT_MARGIN * (collect + self._walk_base_s + numpy_s + analysis)

    def _walk_spare_s(self, due, gc_s: float = 0.0) -> float | None:
        """What the budget still has free now for this walk's optional part
        (the numpy scan), beyond the walk's own cost and, before close(), the
        final walk's (None: no budget)."""
        if self.overhead_budget is None:
            return None
        unit = next((u for u in due if u.needs_objects), None)
        if unit is None:
            return None
        if unit.runs == 0:
            return 0.0  # the first walk: a dear scan waits until the walk's cost is known
        base = self._walk_base_s or 0.0
        if self._finalizing:
            return self._run_budget_s() - self._spent_now() - base
        walk = unit.spent_s + gc_s + base
        return min(unit.share * self._budget_s() - walk,
                   unit.share * self._run_budget_s() - walk - (self._final_walk_s() or 0.0))

    def _watch_spare_s(self, due) -> float | None:
        """Seconds the leak watch may spend after this walk (None: no limit)."""
        if self.overhead_budget is None:
            return None
        if self._finalizing:
            return self._run_budget_s() - self._spent_now() - 2 * _AFTER_WATCH_S
        unit = next((u for u in due if u.needs_objects), None)
        if unit is None:
            return None
        walk = unit.spent_s + time.perf_counter() - self._sample_started + _AFTER_WATCH_S
        return min(unit.share * self._budget_s() - walk,
                   unit.share * self._run_budget_s() - walk - (self._final_walk_s() or 0.0))

    def _spent_now(self) -> float:
        """Monitor seconds so far charged to the budget (the watch's
        overdraft aside), the sample in progress included."""
        return self._monitor_s - self._overdraft_s + (time.perf_counter() - self._sample_started)

    def _contention(self) -> float:
        """Wall seconds per CPU second of the heap walks so far (1 on an idle
        machine; see MAX_CONTENTION)."""
        if not self._walk_cpu_s > 0.0:
            return 1.0
        return min(max(self._walk_wall_s / self._walk_cpu_s, 1.0), MAX_CONTENTION)

    def _allowance_s(self) -> float:
        """The allowance in wall seconds: its seconds of the monitor's work
        at the contention the heap walks measured."""
        return self.overhead_allowance_s * self._contention()

    def _allowance_cap_s(self) -> float:
        """The most of the allowance the probe groups may still release: the
        leak watch's overdraft (a first trace, an early analysis, past what the
        budget had released then) is an advance on the allowance, repaid from
        the part not yet released, so that the run as a whole stays within its
        share of the training time plus the allowance."""
        # At least nothing: the overdraft was booked in wall seconds at the
        # contention then, and the allowance shrinks with the contention.
        return max(self._allowance_s() - self._overdraft_s, 0.0)

    def _advance_s(self) -> float | None:
        """What the leak watch may still spend past the budget released so
        far: the allowance not released yet, less what it advanced before
        (None: no budget)."""
        if self.overhead_budget is None:
            return None
        loop = max(self._train_s - self._loop_start_s, 0.0)
        unreleased = self._allowance_s() * (1.0 - _released(self._units, loop))
        # Never the final walk's room: what the run may still cost, less it.
        room = self._run_budget_s() - self._spent_now() - (self._final_walk_s() or 0.0)
        return max(min(unreleased - self._overdraft_s, room), 0.0)

    def _unit_cap_s(self, unit) -> float | None:
        """The most of the allowance ``unit`` may release (see _Unit.schedule):
        the heap walks repay the whole overdraft from their share (the watch's
        work belongs to them), so that no other probe group's series is
        thinned by it; the other groups release all of their share."""
        if not unit.needs_objects or not self._overdraft_s:
            return None
        return max(self._allowance_s() - self._overdraft_s / max(unit.share, 1e-9), 0.0)

    def _run_budget_s(self) -> float:
        """What the whole run may cost when it ends, the watch's overdraft
        aside: its share of the training time plus the allowance less the
        overdraft."""
        return self.overhead_budget * self._train_s + self._allowance_cap_s() + self._requested_s

    def _budget_s(self) -> float | None:
        """Monitor seconds the budget allows so far: the share of the training
        time plus the allowance released so far (None: no budget)."""
        if self.overhead_budget is None:
            return None
        t = self._train_s
        loop = max(t - self._loop_start_s, 0.0)
        return (self.overhead_budget * t + min(self._allowance_s() * _released(self._units, loop),
                                               self._allowance_cap_s())
                + self._requested_s)

    def _write_extra(self, step, sample, wall_time) -> None:
        try:
            self._writer.write(step, sample, wall_time)
        except Exception as error:
            self._log_once(f"writing summaries failed ({type(error).__name__}: {error})")

    @property
    def report(self):
        """The analysis of the run so far (a ``RunReport``, as ``tb-leak
        analyze`` would give), from the last heap walk that had budget for
        it; after close(), of the whole run. None before the second walk."""
        if self._watch is None:
            return None
        if self._closed:
            try:
                self._watch.bring_report_up_to_date()  # the run is over: no budget to keep
            except Exception as error:
                self._log_once(f"analysis failed: {type(error).__name__}: {error}")
        return self._watch.last_report

    def _memory_before_collection(self, due) -> list:
        """The process's and Python's memory read just before the last
        walk's collection (``gc/<measure>_before_collection``): the last
        reading of each, taken after it, may fall because the collector
        freed garbage or because the program let go of its data when the
        loop returned (reference counts free that at once, before any
        collection). What this reading had already lost tells them apart
        (see analysis.report._released_by_program)."""
        return [(SeriesInfo("gc", f"{info.measure}{BEFORE_COLLECTION}", info.unit), value)
                for info, value in self._memory_readings(due)]

    def _memory_readings(self, units) -> list:
        """The process's and Python's memory (``_MEMORY_MEASURES``) read now
        by the cheap probes of ``units``."""
        out = []
        for unit in units:
            if unit.needs_objects:
                continue
            for probe in list(unit.probes):
                if isinstance(probe, _MEMORY_PROBES):
                    out.extend((info, value) for info, value in self._sampled(unit, probe)
                               if info.measure in _MEMORY_MEASURES)
        return out

    def _memory_after_full_collection(self) -> list:
        """The process's and Python's memory read right after a walk's full
        collection (``gc/<measure>_after_full_collection``), whether or not
        their own schedule reads them at this step: with no garbage left,
        such readings tell memory that grows as live data (objects the census
        does not see included: code objects, strings) from garbage waiting
        for the collector (see analysis.report._grew_after_full_collections).
        They are written only: when the next collection is full
        (``_grew_since_full``) is decided as before, on the memory series'
        own readings."""
        readings = self._memory_readings(self._units)
        return [(SeriesInfo("gc", f"{info.measure}{AFTER_FULL_COLLECTION}", info.unit), value)
                for info, value in readings]

    def _collect_garbage(self) -> bool:
        """Collect before a census, so waiting cycles are not counted as live.

        A full collection traverses the whole heap (about half of a heap
        walk on a TensorFlow heap). It runs on the first and last walks, on
        every ``_FULL_COLLECT_EVERY``-th, whenever the last full one found
        cyclic garbage worth counting, after memory grew materially since
        the last full one (see _grew_since_full), and at every walk where one is cheap
        (a small heap); in between, collecting the young
        generations catches the cycles made since the last walk. Under a
        budget, the last walk's is young when the last full one found almost
        no cyclic garbage (``_GARBAGE_SHARE_FOR_FULL_LAST``) and the run's
        budget has no room left for a full one.
        Returns whether it was full.
        """
        full = self._finalizing or self._full_collection_next()
        if full and self._finalizing and self.overhead_budget is not None and self._full_gc_s is not None \
                and self._garbage_share is not None and self._garbage_share <= _GARBAGE_SHARE_FOR_FULL_LAST:
            # The last walk, when the last full collection found little cyclic
            # garbage: full only while the run's budget has room for it and
            # the rest of the walk (garbage that reached the oldest generation
            # since then would otherwise end every series high).
            rest = (self._walk_base_s or 0.0) + (self._watch.analysis_cost_s if self._watch is not None else 0.0)
            full = self._run_budget_s() - self._spent_now() >= self._full_gc_s + rest
        if full:
            self._garbage_found = self._collected = gc.collect()
            self._walks_since_full = 0
        else:
            self._garbage_found = None
            self._collected = gc.collect(1)
            self._walks_since_full += 1
        return full

    def _sampled(self, unit, probe, census=None) -> list:
        """A probe's sample as a list of (SeriesInfo, float), read within the
        guard: a probe that raises, or whose result is anything else (a
        generator that raises as it is read, a triple, a string for a series'
        info), is switched off and logged once."""
        def read():
            out = []
            for info, value in (probe.sample(census) if census is not None else probe.sample()) or ():
                if not isinstance(info, SeriesInfo):
                    raise TypeError(f"a sample's series must be a SeriesInfo, not {type(info).__name__}")
                out.append((info, float(value)))
            return out

        return self._guarded(unit, probe, read, None) or []

    def _guarded(self, unit, probe, call, argument):
        """``call(argument)``; a probe that raises is switched off and logged once."""
        try:
            return call(argument) if argument is not None else call()
        except Exception as error:
            if probe in unit.probes:
                unit.probes.remove(probe)
            self._log_once(
                f"probe {probe.name!r} failed ({type(error).__name__}: {error}); "
                "it is switched off for the rest of this run"
            )
            return None

    def _make_profiler(self, profile_steps, directory):
        try:
            start, stop = (int(s) for s in profile_steps)
        except Exception:
            raise ValueError(f"profile_steps must be (start, stop) steps, got {profile_steps!r}") from None
        if stop <= start:
            raise ValueError(f"profile_steps stop ({stop}) must be after start ({start})")
        if directory is None:
            raise ValueError("profile_steps needs a logdir or profile_dir to write the trace to")
        from tb_leak_plugin.capture.profiling import ProfilerWindow

        return ProfilerWindow(directory, start, stop)

    def _log_once(self, message) -> None:
        """Log ``message`` once per run, made inert (names and errors come
        from the program: control characters, bidirectional overrides and
        line breaks are shown escaped). A tuple is several lines, each
        escaped on its own."""
        if message in self._logged:
            return
        self._logged.add(message)
        if isinstance(message, tuple):
            text = "\n".join(printable(line) for line in message)
        else:
            text = printable(message)
        logger.warning("tb-leak: %s", text)


class _NullWriter:
    """Stands in for a writer that could not be created: writes nothing."""

    def write(self, step, sample, wall_time=None) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def _close_quietly(writer) -> None:
    try:
        writer.close()
    except Exception:
        pass
