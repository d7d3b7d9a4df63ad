"""Every constant that decides a verdict, in one place, each with its reason
(``Policy``); and every constant of the leak watch that decides what is traced
and named as a holder (``WatchPolicy``).

The series model (`analysis.trend`) estimates the current growth rate of a
series with an interval; the decision compares that interval with a
*materiality*: the growth rate below which nobody would call it a leak. A
series is a ``leak`` when even the lower bound of its growth is material,
``no_leak`` when even the upper bound is not (an equivalence test: the verdict
says what it rules out), and ``inconclusive`` otherwise. The run rule
(`analysis.report`) combines series verdicts with a false-discovery control.
"""

from __future__ import annotations

import dataclasses
import math


@dataclasses.dataclass(frozen=True)
class Policy:
    # ---------------------------------------------------------------- materiality
    # A memory series (bytes) is a material leak when, at its current rate, it
    # grows by this share of its level over a span as long as the run so far:
    # a list of floats or an allocator settling moves RSS by a few KiB a step,
    # which is real but not what anyone means by a leak, and any leak that is
    # still growing passes this bar once the run is a little longer.
    bytes_share: float = 0.01
    # ... and by at least this many bytes over that span: a few pages of
    # allocator granularity are not a leak anyone can act on, even in a series
    # whose level is near zero (TensorFlow's allocator on a small model).
    bytes_floor: float = 256 * 1024
    # Python's allocated blocks are memory too (a block is an object's
    # memory, ~64 bytes on average): held to the same share of their level,
    # with a floor of about the same bytes.
    blocks_floor: float = 4096.0
    # ... and a part of the process's memory (Python's blocks, the C
    # allocator's bytes in use, TensorFlow's CPU allocator) leaks materially
    # only where its growth is also material to the whole (RSS) it is part
    # of: what anyone calls a leak is a share of the memory the process
    # holds, not of one allocator's. Held to its own level alone, a list of
    # floats (one 32-byte block a step) in a TensorFlow process whose Python
    # heap is a third of its 300 MB was a material leak of Python's blocks
    # after 13,000 steps, at 0.3% of the process's memory. A block's bytes
    # are not known: a leak must be material at the smallest (a float or an
    # int, 32 bytes). "No leak" stays held to the part's own level, which is
    # stricter (a part is smaller than the whole it is in).
    small_block_bytes: float = 32.0
    # ... and the largest block Python's own allocator hands out: RSS that
    # grows while the C allocator does not is read as pages an allocator
    # keeps only where the other parts cannot account for the growth even at
    # this size a block (a set of fingerprint strings grows Python's arenas,
    # which the C allocator does not see, by 2.5 KiB a step).
    large_block_bytes: float = 512.0
    # A count (objects of a type, live tensors, traces, a container's length)
    # is a material leak when it grows by more than this over the run so far:
    # counts are exact, and one or two increments (a function traced once more
    # as model.fit ends) are events, not a leak.
    count_floor: float = 2.5
    # ... and by at least one every this many steps: a few objects a library
    # makes now and then over a long run (a clean loop watched for minutes
    # gained four OrderedDicts in 15,000 steps) weigh nothing, while every
    # leak of objects worth fixing (a tensor or a record a step, a model an
    # epoch: hundreds of objects each) is far above it.
    count_rate_floor: float = 1e-3
    # ------------------------------------------------------------------ decision
    # One-sided level of the lower bound that must clear materiality for a
    # leak. Strict: where the current segment starts is searched for (which
    # biases its slope upward), and false alarms cost users' trust most.
    alpha_leak: float = 1e-4
    # One-sided level of the upper bound that must stay under materiality for
    # no_leak: the usual 95% of an equivalence test ("no leak above X, 95%").
    alpha_clean: float = 0.05
    # A part of the host's memory (the C allocator, Python's blocks) grows
    # inside what the whole (RSS) already holds for as long as the allocator
    # has free pages, so a flat whole does not certify a part whose own data
    # show growth at this one-sided level under every reading. Ten times the
    # leak's level: evidence of "maybe a leak", not of one. Like the leak's,
    # strict because the current segment's start is searched for: a part that
    # only wanders inside a flat whole (an allocator's level as a random walk)
    # shows p ~ 0.01 on its searched last segment and is still vouched for; a
    # dict keeping a 2 KiB list a step, on a loaded machine, showed p 2.8e-4
    # while RSS stayed flat (tests/test_run_report.py).
    alpha_shown: float = 1e-3
    # no_leak rules out growth that would be material over a run this many
    # times as long as the one so far: a user told "fixed" must not see
    # "leak" after training three times longer at the same rate.
    clean_horizon: float = 3.0
    # Across the series of one run, leaks are kept at this false-discovery
    # rate (Benjamini-Hochberg): a run follows dozens of series.
    run_fdr: float = 0.01
    # -------------------------------------------------------------------- model
    # Penalty of one more segment, in units of the noise variance times
    # log(points): about twice BIC's, so that autocorrelated wander between
    # two breaks is not read as a new regime.
    segment_penalty: float = 6.0
    # Segmentation runs on at most this many block means (bounded cost);
    # the final segment's slope is then fitted on the finer blocks.
    segment_points: int = 256
    # The current (last) segment spans at least this share of the run's
    # steps: the growth a user asks about is the run's recent trend, not the
    # slope of the last stair of a staircase; a one-off step near the end is
    # allowed for by the step the segment may carry (see trend._fit_current).
    # Steps, not points: the monitor spaces its points further apart as the
    # run ages, so a third of the points can reach back over most of it.
    final_share: float = 0.33
    # Two level changes are "of like size" within this factor: a rise in the
    # current segment is read as one more stair where the series kept two
    # rises of like size before, and a later fall of like size gives a rise
    # back (a level toggled, not a stair). Pages and allocator regions come
    # in sizes that repeat, not exactly; a factor of two keeps a stair of
    # half or twice the size apart from a different step.
    like_step_ratio: float = 2.0
    # Where the current segment starts is uncertain: this share of its first
    # points is left out of its slope, so that the end of the regime before
    # (a ramp, a fill) does not bias it.
    trim_share: float = 0.1
    # The noise is re-estimated around each segmentation it produced until it
    # stops growing (trend._segment_with_noise), at most this many times: it
    # settles within two rounds on the synthetic corpus; a bound keeps the
    # cost bounded.
    noise_rounds: int = 4
    # At most this many segments: a training run has a handful of regimes;
    # more is noise being fitted.
    max_segments: int = 12
    # Every segment but the first has at least this many points (a slope needs
    # a few); the first may be a single baseline sample. The current segment
    # too, however short the series: a line through the last two of five heap
    # walks is exact, with no noise left to judge it by.
    min_segment: int = 4
    # Long series are reduced to 512-1,023 block medians before fitting:
    # bounded cost whatever the length, and spikes are defused.
    max_blocks: int = 512
    # A drop of this many sd of the point-to-point noise that does not rebound
    # is a reset (a buffer cleared).
    reset_sd: float = 5.0
    # Resets that make a sawtooth: a line through its floors needs three
    # (fewer: the growth since the last reset may be a buffer refilling, see
    # trend._fit_current).
    sawtooth_resets: int = 3
    # ... and a reset drops by at least this share of the series' range.
    reset_range_share: float = 0.05
    # ... and empties what filled: between resets the series rose by at
    # least this share of what they drop (over the cycles together). Drops
    # with nothing refilled between them (RSS stepping down as the allocator
    # hands pages back: 4, 0.9 and 1.8 MiB in a flat clean run) are not a
    # buffer's cycles, and a floor line through them said nothing for 7,000
    # steps.
    refill_share: float = 0.5
    # The samples after a sawtooth's last floor ride its ramp, above the
    # floor line. When half of them lie this many of its noise sd below it,
    # the line goes on where the floors were not seen (resets blurred by
    # sparser samples later in a run): the sawtooth reading is refuted and
    # the series is read as lines. (A recorded buffer of episode frames: the
    # floor line at 94.9 MB at the end, every later sample under 93.3 MB.)
    floor_refute_sd: float = 5.0
    # A point this many noise sd from both neighbours, which agree, is a bad
    # reading, left out so that one point cannot flip a verdict.
    spike_sd: float = 25.0
    # A last sample that falls back after a rise is the loop's data freed when
    # it returned, and left out, only when the samples before it reach this
    # close to it: the gap from the one before it to it is at most this share
    # of the steps those samples span. Further back, most of the run before
    # the release was never seen, and a buffer that filled and stopped (a
    # deque(maxlen=500) on heap walks at steps 59, 152 and 328 of 5,000)
    # cannot be told from a leak.
    release_gap_share: float = 1.0
    # Memory read at close() just before the last walk's collection that has
    # already lost at least this share of what the memory fell by at the last
    # walk was let go by the program (reference counts free the loop's data
    # when it returns, before any collection runs), not freed by the
    # collector: the fall is a release, left out (report._released_by_program).
    # Half: the larger part of the fall came before the collection (a list of
    # floats and a queue of events kept by a training function's locals had
    # lost 99% of it; garbage freed by the collector loses none).
    fell_before_collection_share: float = 0.5
    # Memory read right after a full collection holds no garbage. Growth at
    # least this share of the fitted rate between such readings is live
    # data's (report._grew_after_full_collections keeps a leak whose fall at
    # the last walk may otherwise be garbage freed only then) ...
    full_growth_share: float = 0.5
    # ... over at least this share of the analysed segment: the fitted rate
    # is already shown, those readings only have to say it is not garbage
    # (a quarter: two full walks 150 steps apart in a 360-step segment).
    full_span_share: float = 0.25
    # A leak of a count whose readings right after full collections grew by
    # less than full_growth_share of its fitted rate is garbage waiting for
    # the oldest generation's collection (report._held_to_full_collections),
    # where those readings span at least this share of the analysed segment:
    # refuting a rate the data show needs more than two readings close
    # together, which one cycle of garbage can fall between.
    full_refute_share: float = 0.5
    # In a run whose host memory leaks, live tensors' or arrays' bytes whose
    # growth is, at its 95% lower bound, at least this share of the memory's
    # growth rate hold that leak and are named with it (report._holding_the_
    # growth): most of what memory gained is theirs, whether or not their
    # few heap-walk points reach a leak's level on their own (eager tensors
    # 31, 31, 31, 322, 944, 1,958 at six walks: +69 KiB a step, 49-89 KiB,
    # of a C heap growing 75 KiB a step).
    held_share: float = 0.5
    # Fewer finite samples than this are never judged.
    min_samples: int = 4
    # Multiples of the run's length tried when saying how much longer a run
    # must be for an inconclusive series to be decided.
    decide_horizons: tuple = (1.25, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 32.0, 64.0)

    def materiality(self, unit: str, level: float, span_steps: float, whole: float | None = None) -> float:
        """The growth per step that is material for a series of ``unit``
        whose level is ``level`` and whose samples span ``span_steps`` steps;
        ``whole``: for a part of the process's memory, the bytes of the whole
        it is part of, to which a leak must be material too (the bar a leak
        claim must clear; "no leak" is held to the part's own, ``whole=None``)."""
        span = max(float(span_steps), 1.0)
        level = abs(level) if math.isfinite(level) else 0.0
        if whole is not None and math.isfinite(whole) and whole > 0 and unit in ("bytes", "blocks"):
            level = max(level, whole / self.small_block_bytes if unit == "blocks" else whole)
        if unit == "bytes":
            return max(self.bytes_share * level, self.bytes_floor) / span
        if unit == "blocks":
            return max(self.bytes_share * level, self.blocks_floor) / span
        return max(self.count_floor / span, self.count_rate_floor)


POLICY = Policy()


@dataclasses.dataclass(frozen=True)
class WatchPolicy:
    """Every constant of the leak watch (``capture.online``) that decides
    what is traced and named as a leak's holder, and when, each with its
    reason; and the bounds that keep the watch's own memory and time flat."""

    # Points kept per series for the analysis while the loop runs.
    max_points: int = 256
    max_series: int = 192
    # Types whose instances' ids are noted at each walk, and the largest count noted.
    # A type with more instances (a TensorFlow heap holds ~80,000 functions and
    # ~300,000 tuples) has a hashed subset of its ids noted, one in ``share``: a
    # later trace samples its new instances from that subset (an unbiased sample
    # of what is new, at the same memory), instead of from every instance, where
    # a leak's few thousand are lost among the library's own.
    marked_types: int = 3
    max_marked_instances: int = 20_000
    # The ids of every object at the second heap walk are kept (8 bytes each,
    # for heaps of at most this many objects): a trace then climbs through the
    # objects made since (at most max_fresh of them) in memory, instead of one
    # pass of the heap per level (see referrers._through_fresh), which on a
    # TensorFlow heap (~50 ms a pass) reached four levels within its cap.
    max_baseline_objects: int = 1_500_000
    max_fresh: int = 300_000
    baseline_walk: int = 2
    # What the watch keeps from a walk to the next (those ids; the heap's
    # containers' ids and lengths, in two blocks used in turn, the last walk's
    # read while this walk's are written) goes into blocks reserved (and
    # touched) at the first walk, the run's start, this many times what it
    # counted. Allocated at the second walk, they were a step in the program's
    # memory series there, mid-run in a short run: 2.6 MiB of the C heap's and
    # 4-17 MiB of resident memory at the second walk of every opened fixed twin
    # (its pages kept), where a leak's last segment read besides that shift
    # stayed undecided (s200). Past the room, only the excess is new.
    kept_room: float = 1.5
    # Instances traced per culprit, the time cap of one trace, and of all traces of one walk.
    trace_sample: int = 32
    trace_cap_s: float = 0.25
    walk_trace_cap_s: float = 0.5
    # A trace climbs one pass of the heap per level, and a pass costs what the
    # heap's size makes it (and more the more objects it looks for: CPython
    # compares every reference with each of them): on a TensorFlow heap of
    # 300,000 objects 35-60 ms for one object, 100-110 ms for 32. A path from a
    # module global to a list's item is five levels (global → object → its
    # dict → the list → the item): 0.22 s for one object, 0.43 s for 32
    # sessions on an idle machine, where the cap of 0.25 s named nothing (the
    # demo's default-session stack). So a trace's cap is at least this many
    # passes, as long as its first one took, and at most max_trace_s (both
    # times the contention): small heaps keep trace_cap_s.
    trace_passes: int = 6
    max_trace_s: float = 0.75
    # Traces written per run (a bounded logdir whatever the run's length).
    max_traces: int = 48
    # Containers: the smallest length followed, how many are followed at once,
    # walks of growth in a row before one is traced, and how many are reported.
    min_container_length: int = 8
    # A container is named as a leak's holder only when it grew by at least this
    # many items per training step over the walks that saw it (a list appended to
    # every step: 1; a module registry filling up at imports: far less).
    min_items_per_step: float = 0.2
    # ... or by items that carry at least this many bytes a step: what a
    # container's growth costs is its items' bytes, and a cache that keeps a
    # 192 KiB mask every 20 steps (0.05 items, 9.6 KiB a step) holds a leak
    # as surely as a list of floats appended every step; a registry filling
    # at imports adds neither. Several times the materiality of a typical
    # run's memory (1% of 250 MB over 10,000 steps is 250 B a step).
    min_bytes_per_step: float = 1024.0
    followed_containers: int = 16
    growing_walks: int = 3
    # The cap of the search, down from the running functions' locals only, for
    # the followed containers that grew at a walk (times the contention): no
    # pass of the heap, it reads at most referrers.MAX_DOWN objects in 15% of
    # it; a short run's walks have no budget for a trace of the heap, and
    # a container a training function holds is gone at the last walk.
    seen_trace_s: float = 0.1
    max_containers: int = 8
    max_container_ids: int = 2_000_000
    # The analysis runs from this many heap walks on.
    min_walks_for_analysis: int = 2
    # Between heap walks the memory series are analysed only once one of them has
    # grown by this share of its first value (the analysis allocates: run for
    # nothing, it would move the C allocator's bytes of a clean run).
    memory_growth_to_analyse: float = 0.02
    # The watch (analysis and traces, on top of the walks) spends at most this
    # share of what the heap walks themselves cost.
    watch_share: float = 0.25
    # A trace is not started with less time than this left to the watch.
    min_trace_s: float = 0.02
    # Room the monitor keeps for one trace at its last walk, before any was
    # measured (seconds; the first culprit is often confirmed only there).
    final_trace_s: float = 0.25
    # A run that leaks and has no trace yet gets one trace of up to trace_cap_s at
    # the first walk that has something to trace, and one more at its last walk
    # if none named a holder or the culprit that leads the report then has no
    # trace (with that walk's analysis), even when the budget is spent (it is
    # the answer the user needs): the monitor's time may exceed its budget by
    # this much, twice.
    # The first walk that finds it, because by the last the loop's function may
    # have returned and what held the leak in its locals be gone (an array
    # re-bound to a bigger one each step); the last, because a trace cut short
    # on a loaded machine names nothing.
    # (derived: see the property first_trace_s)
    # A container that grew at every one of growing_walks walks, by items per
    # step, is traced when it is seen, not when the run ends: by then the loop's
    # function may have returned and its containers be gone (a model, its layers
    # and their lists are locals of a ``train()`` that returned before close()).
    # Those traces may take the monitor past its budget by at most this much in
    # all, once per run (one trace of a container costs a pass of the heap per
    # hop of its path: tens of milliseconds on a TensorFlow heap).
    # (derived: see the property container_overdraft_s)
    # Walks that read the running functions' locals (a leaking run with no holder
    # named: see LeakWatch.wants_locals) run their analysis whatever the budget
    # has left at most this many times per run: an array that grew is told from
    # one that did not by two readings, and the trace then runs while the loop's
    # frames are alive.
    locals_analyses: int = 2
    # A type that rose at each of growing_walks walks in a row, in a run with no
    # leak confirmed yet, gets its analysis (and, when that finds a leak, its one
    # trace) whatever the budget has left, at most this many times per run: in a
    # short run whose heap walks take the whole budget, the analysis would
    # otherwise wait for close(), when a leak a training function held in its
    # locals has been let go and no trace can name its holder. The same for
    # the walk asked for when memory alone showed a leak (between walks) and
    # nothing named its holder yet: arrays kept in a list grow no type the
    # census counts, and the walk the watch asked for to name their holder
    # would otherwise find the budget spent (a pool's list of every worker
    # thread's scratch array: 18 walks, no analysis after the third).
    early_analyses: int = 2
    # A local array is named as the holder of a series' growth only when it holds
    # at least this share of the growth over the series' current segment (the
    # array that accumulates a leak holds nearly all of it; a step's batch a
    # sliver), and at most this many such arrays are traced.
    local_array_growth_share: float = 0.5
    local_arrays_traced: int = 3
    # Walks in a row at which an attribute's buffer, or a class's buffers
    # summed, must have grown to be named as holding a memory leak's growth
    # (with half the growth since first seen): one walk's gain is also what a
    # pool of a fixed size shows when it is refilled.
    buffer_growth_walks: int = 2
    # A buffer that grew so and is, at the last walk, under this share of its
    # size at the walk before (or gone) was emptied or freed at close: it held
    # what grew (a writer's staging buffer flushed only when the job ends);
    # the same "more than half way back" a series' fall at its end is read by.
    buffer_emptied_share: float = 0.5
    # An object's attribute that is a dict of at most this many entries is
    # read as part of the object (an instance's ``__dict__``, a dict of named
    # buffers): bounded reading per object at each walk; a larger dict is a
    # container, followed by its length instead.
    small_dict_items: int = 256
    # The same for one object that grows in place or is re-bound to a bigger one
    # in an attribute of one of the program's own objects or a global of its own
    # modules (a parser's bytearray extended by every chunk received, a memory
    # bank an attribute re-binds to ``tf.concat((bank, batch))``): read at every
    # walk (no frame is touched), from the instances of the program's own classes
    # (a class with more than this many is a leak of its own count, traced as
    # such, and at most this many instances in all are read: a walk is not made
    # dearer by them), looking at most at max_buffer_values values per walk
    # (about 10 ms), each buffer of at least buffer_min_bytes noted (a buffer
    # named holds half of a material growth, at least half of
    # Policy.bytes_floor: noted from half that on, its growth is seen; a
    # model's thousands of small weight arrays are not), at most
    # max_buffers of them. An attribute or global is named
    # only when it grew at each of the last two walks and by half the growth
    # since first seen: an attribute re-bound to a new sample of the same size
    # is not a holder, nor is a dataset loaded once.
    max_buffer_owners: int = 2_000
    max_buffer_values: int = 100_000
    max_buffers: int = 1_000
    buffer_min_bytes: int = 64 * 1024
    # The trace caps above are seconds of the monitor's own work, as its allowance
    # is: on a machine where other processes take the cores, a trace's search
    # takes more wall time for the same levels (a cap in wall seconds found
    # nothing at a load of 3-4 on 2 cores where it named the holder on an idle
    # machine). The monitor sets ``LeakWatch.contention`` from its heap walks'
    # wall time over their CPU time (at most its MAX_CONTENTION) and the caps
    # are scaled by it.

    @property
    def first_trace_s(self) -> float:
        """A run that leaks and has no trace yet gets one trace of up to
        trace_cap_s at the first walk that has something to trace, and one
        more at its last walk if none named a holder or the culprit that leads
        the report then has no trace, even when the budget is spent: the
        monitor's time may exceed its budget by this much, twice
        (a trace checks its cap between levels, hence the margin). Its cap
        may reach max_trace_s on a large heap (see trace_passes)."""
        return self.max_trace_s / 0.7 + self.min_trace_s

    @property
    def container_overdraft_s(self) -> float:
        """What container traces may take past the budget, in all, once per run."""
        return self.first_trace_s


WATCH = WatchPolicy()
