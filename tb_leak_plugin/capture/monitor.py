"""The Monitor: when to sample, within an overhead budget, never hurting the loop.

``Monitor.sample(step)`` is called once per training step. It measures the
training time between calls and its own time, and runs each probe group only
when the group's share of the overhead budget (default 1% of step time) has
paid for the group's last measured cost. Cheap counters therefore run often
and the object census, whose cost grows with the heap, is spaced out.

A probe that raises is logged once and dropped; ``sample`` never raises into
the training loop. The monitor keeps no references to user objects.
"""

from __future__ import annotations

import gc
import logging
import sys
import time
import weakref

from tb_leak_plugin.capture import probes as probes_lib
from tb_leak_plugin.summary import EventWriter, TFSummaryWriter

logger = logging.getLogger("tb_leak_plugin")

# Census cost per allocated memory block, measured on CPython 3.11 with
# TensorFlow loaded (about 60 ns); only a prior until the first census runs.
_CENSUS_SECONDS_PER_BLOCK = 60e-9

# Consecutive failed writes after which the monitor stops sampling.
_MAX_WRITE_FAILURES = 3

DEFAULT_PROBES = ("process", "python", "tf", "gc", "objects", "tensors", "tf_function")


class _Unit:
    """A group of probes run together, with its share of the overhead budget.

    The unit is due once the training time since its last run, times its
    share of the budget, pays for its measured cost: ``due_train_s`` is the
    training time (seconds) at which that happens.
    """

    __slots__ = ("name", "probes", "share", "min_steps", "cost_s", "due_train_s", "last_step", "runs",
                 "needs_objects")

    def __init__(self, name, probes, share, min_steps):
        self.name = name
        self.probes = probes
        self.share = share
        self.min_steps = max(1, int(min_steps))
        self.cost_s = 0.0
        self.due_train_s = 0.0
        self.last_step = None
        self.runs = 0
        self.needs_objects = any(p.needs_objects for p in probes)

    def schedule(self, now_train_s: float, budget: float | None) -> None:
        if budget is None:
            self.due_train_s = now_train_s
        else:
            self.due_train_s = now_train_s + self.cost_s / (self.share * budget)


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
      overhead_budget: fraction of step time the monitor may use (0.01 = 1%);
        ``None`` runs every probe on its step schedule alone (for tests and
        short demos, where dense series matter more than overhead).
      top_k: object types picked per census (commonest first, then fastest
        growing); ``max_object_types`` bounds the number of type series.
      profile_steps: ``(start, stop)`` steps between which a TensorFlow
        profiler trace is recorded into ``<logdir>/plugins/profile``.
      profile_dir: where to record the trace when ``logdir`` is None.
      writer: a ``tf.summary`` writer to use when ``logdir`` is None.
      flush_secs: how often the event file is flushed.
      census_collects_garbage: run ``gc.collect()`` before each census, so
        that unreachable cycles waiting for the collector are not counted as
        live objects (its cost is part of the census cost and budget).
    """

    def __init__(
        self,
        logdir: str | None = None,
        *,
        every_n_steps: int = 1,
        census_every_n_steps: int = 1,
        probes=DEFAULT_PROBES,
        overhead_budget: float | None = 0.01,
        top_k: int = 20,
        max_object_types: int = 64,
        profile_steps: tuple[int, int] | None = None,
        profile_dir: str | None = None,
        writer=None,
        flush_secs: float = 30.0,
        census_collects_garbage: bool = True,
    ):
        if overhead_budget is not None and not 0 < overhead_budget <= 1:
            raise ValueError(f"overhead_budget must be in (0, 1] or None, got {overhead_budget!r}")
        if every_n_steps < 1 or census_every_n_steps < 1:
            raise ValueError("every_n_steps and census_every_n_steps must be >= 1")
        self.logdir = logdir
        self.overhead_budget = None if overhead_budget is None else float(overhead_budget)
        self.census_collects_garbage = bool(census_collects_garbage)
        self._logged: set[str] = set()
        if logdir is not None:
            self._writer = EventWriter(logdir, flush_secs=flush_secs)
        else:
            self._writer = TFSummaryWriter(writer)
        self._finalizer = weakref.finalize(self, _close_quietly, self._writer)

        made = probes_lib.make_probes(
            list(probes), on_skip=self._log_once, top_k=top_k, max_types=max_object_types
        )
        cheap = [p for p in made if not p.needs_objects and p.name != "uss"]
        census = [p for p in made if p.needs_objects and p.name != "tensors"]
        self._units = []
        # Shares of the budget: the census is the most informative and the
        # most expensive, so it gets the largest share.
        if cheap:
            self._units.append(_Unit("cheap", cheap, 0.25, every_n_steps))
        if census:
            self._units.append(_Unit("census", census, 0.45, census_every_n_steps))
        for probe in made:
            if probe.name == "tensors":
                self._units.append(_Unit("tensors", [probe], 0.2, census_every_n_steps))
            elif probe.name == "uss":
                self._units.append(_Unit("uss", [probe], 0.1, census_every_n_steps))
        # Before a unit has run, its cost is estimated from the heap size, so
        # even the first (baseline) census waits until the budget pays for it.
        blocks = sys.getallocatedblocks()
        for unit in self._units:
            if unit.name in ("census", "tensors"):
                unit.cost_s = blocks * _CENSUS_SECONDS_PER_BLOCK * (2.0 if unit.name == "tensors" else 1.0)
            unit.schedule(0.0, self.overhead_budget)
        self._next_due_train_s = min((u.due_train_s for u in self._units), default=float("inf"))

        self._profiler = None
        if profile_steps is not None:
            self._profiler = self._make_profiler(profile_steps, logdir or profile_dir)

        self._step = -1
        self._train_s = 0.0
        self._monitor_s = 0.0
        self._last_return = time.perf_counter()
        self._closed = False
        self._write_failures = 0

    # -- public API -------------------------------------------------------

    def sample(self, step: int | None = None) -> None:
        """Record a sample for ``step`` (default: one more than the last).

        Call once per training step. Cheap (about a microsecond when no
        probe is due); decides itself which probes run. Never raises.
        """
        entered = time.perf_counter()
        try:
            if self._closed:
                return
            self._train_s += entered - self._last_return
            step = self._step + 1 if step is None else int(step)
            self._step = step
            if self._profiler is not None:
                self._profiler.on_step_end(step)
            if self._train_s >= self._next_due_train_s:
                self._run_due_units(step)
        except Exception as error:  # never into the training loop
            self._log_once(f"monitor failed: {type(error).__name__}: {error}")
        finally:
            done = time.perf_counter()
            self._monitor_s += done - entered
            self._last_return = done

    def close(self) -> None:
        """Stop any profiler window, flush and close the writer. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._profiler is not None:
            try:
                self._profiler.close()
            except Exception as error:
                self._log_once(f"profiler stop failed: {error}")
        self._finalizer()

    def flush(self) -> None:
        try:
            self._writer.flush()
        except Exception as error:
            self._log_once(f"flush failed: {error}")

    def __enter__(self) -> "Monitor":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    @property
    def overhead(self) -> float:
        """The monitor's time as a fraction of the training time so far."""
        return self._monitor_s / self._train_s if self._train_s > 0 else 0.0

    def stats(self) -> dict:
        """Per probe group: runs and last cost in seconds; overall overhead."""
        return {
            "overhead": self.overhead,
            "monitor_seconds": self._monitor_s,
            "train_seconds": self._train_s,
            "units": {u.name: {"runs": u.runs, "cost_seconds": u.cost_s, "probes": [p.name for p in u.probes]}
                      for u in self._units},
        }

    # -- scheduling -------------------------------------------------------

    def _run_due_units(self, step: int) -> None:
        now = self._train_s
        due = [
            unit for unit in self._units
            if now >= unit.due_train_s
            and (unit.last_step is None or abs(step - unit.last_step) >= unit.min_steps)
        ]
        if not due:
            return
        objects = None
        sample = []
        costs = {}
        try:
            if any(u.needs_objects for u in due):
                started = time.perf_counter()
                if self.census_collects_garbage:
                    gc.collect()
                objects = probes_lib.collect_objects()
                walk_cost = time.perf_counter() - started
            for unit in due:
                started = time.perf_counter()
                for probe in list(unit.probes):
                    try:
                        sample.extend(probe.sample(objects) if probe.needs_objects else probe.sample())
                    except Exception as error:
                        unit.probes.remove(probe)
                        self._log_once(
                            f"probe {probe.name!r} failed ({type(error).__name__}: {error}); "
                            "it is switched off for the rest of this run"
                        )
                costs[unit.name] = time.perf_counter() - started
                if unit.needs_objects:
                    costs[unit.name] += walk_cost / sum(u.needs_objects for u in due)
        finally:
            # Release the object list before writing: the census keeps nothing.
            if objects is not None:
                objects.release()
        started = time.perf_counter()
        try:
            if sample:
                self._writer.write(step, sample)
            self._write_failures = 0
        except Exception as error:
            # A full disk or a vanished directory: the units are still
            # rescheduled below (so the budget holds), and after a few
            # failures in a row the monitor stops sampling altogether.
            self._write_failures += 1
            self._log_once(f"writing summaries failed ({type(error).__name__}: {error})")
            if self._write_failures >= _MAX_WRITE_FAILURES:
                self._log_once(f"{_MAX_WRITE_FAILURES} writes failed in a row; the monitor stops sampling")
                self._units = []
        write_cost = (time.perf_counter() - started) / len(due)
        for unit in due:
            # Writing is paid for by the groups that produced the values.
            cost = costs.get(unit.name, 0.0) + write_cost
            unit.cost_s = cost if unit.runs == 0 else 0.5 * unit.cost_s + 0.5 * cost
            unit.last_step = step
            unit.runs += 1
            unit.schedule(now, self.overhead_budget)
        self._units = [u for u in self._units if u.probes]
        self._next_due_train_s = min((u.due_train_s for u in self._units), default=float("inf"))

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

    def _log_once(self, message: str) -> None:
        if message in self._logged:
            return
        self._logged.add(message)
        logger.warning("tb-leak: %s", message)


def _close_quietly(writer) -> None:
    try:
        writer.close()
    except Exception:
        pass
