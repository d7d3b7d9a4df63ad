"""The clock the monitor reads: real time, or a simulated one a test drives.

``capture/monitor.py`` reads every time through this module
(``perf_counter()``: training time and the cost of its own work;
``time()``: the wall time written with each point), so that a test or a
benchmark can run the schedule of a three-day job in seconds::

    from tb_leak_plugin.capture import clock

    with clock.use(clock.SimulatedClock()) as sim:
        monitor = Monitor(logdir)
        for step in range(steps):
            sim.advance(0.5)          # half a second of training
            monitor.sample(step)
        monitor.close()

The clock is one per process (a module-level hook, not a Monitor option):
nothing in a training job sets it.
"""

from __future__ import annotations

import contextlib
import time as _time


class SystemClock:
    """Real time: ``time.perf_counter`` and ``time.time``."""

    perf_counter = staticmethod(_time.perf_counter)
    time = staticmethod(_time.time)
    # CPU seconds of the calling thread: with perf_counter around the same
    # work, how much of its wall time other processes took (contention).
    thread_time = staticmethod(_time.thread_time)


class SimulatedClock:
    """Training time that passes only when :meth:`advance` says so.

    With ``real_costs`` (default) the real time spent since the clock was
    made is added: the monitor's own work (probes, heap walks, writes) costs
    what it really costs, so its overhead budget behaves as in a real job,
    while the training in between is simulated. With ``real_costs=False``
    time stands still between ``advance`` calls (every cost reads as zero:
    the schedule's spacing rules alone decide, fully deterministic).
    ``time()`` is ``start_wall`` plus the same seconds.
    """

    def __init__(self, start_wall: float = 1.7e9, real_costs: bool = True):
        self._simulated = 0.0
        self._start_wall = float(start_wall)
        self._real_costs = bool(real_costs)
        self._real_start = _time.perf_counter()
        self._real_cpu_start = _time.thread_time()

    def advance(self, seconds: float) -> None:
        self._simulated += float(seconds)

    def perf_counter(self) -> float:
        real = _time.perf_counter() - self._real_start if self._real_costs else 0.0
        return self._simulated + real

    def time(self) -> float:
        return self._start_wall + self.perf_counter()

    def thread_time(self) -> float:
        """The simulated seconds plus, with ``real_costs``, the calling
        thread's real CPU seconds: over the monitor's own work it reads what
        the work really got of a core, so that other processes on the machine
        count as contention, as they do in a real job (see
        ``Monitor._contention``); without, the same as ``perf_counter``."""
        if not self._real_costs:
            return self.perf_counter()
        return self._simulated + (_time.thread_time() - self._real_cpu_start)


_current = SystemClock()


def perf_counter() -> float:
    return _current.perf_counter()


def time() -> float:
    return _current.time()


def thread_time() -> float:
    # A clock a test installs may not have it: it then reads as uncontended.
    read = getattr(_current, "thread_time", None)
    return read() if read is not None else _current.perf_counter()


def current():
    """The clock in use."""
    return _current


@contextlib.contextmanager
def use(clock):
    """Make ``clock`` the process's clock for the ``with`` block (tests, benchmarks)."""
    global _current
    previous, _current = _current, clock
    try:
        yield clock
    finally:
        _current = previous
