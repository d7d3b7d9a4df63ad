"""Leaky training loops for tests/test_leak_traces.py, each run in a fresh
process (``python tests/leak_loops.py CASE LOGDIR``) at default Monitor
settings: a heap that other tests filled would change how many heap walks
the budget buys, and a user's loop starts from its own heap.

A step's training is 1.2 ms on a simulated clock (capture/clock.py) with
real costs: the monitor reads the time a job with 1.2 ms steps would show
(its own walks, traces and writes, and the loop's Python work, at what they
really cost), without the suite sleeping through it. Sleeping was 36 of a
loop's 45 s; the schedule, the walks and the traces are the same. Except in
REAL_TIME's loops, whose steps sleep: their holder is named from what the
numpy scan and the buffers' growth show over many walks, and on a loaded
machine a sleeping step takes longer (its wake-up waits for a core), which
buys the monitor more of its 1% a step, as in a user's job; at a load of
five on 2 cores the pool's holder was named in 4 of 8 simulated runs and in
2 of 2 sleeping ones.
"""

from __future__ import annotations

import functools
import json
import logging
import sys
import time

import numpy as np

from tb_leak_plugin import Monitor
from tb_leak_plugin.capture import clock

STEPS = 1500
# A loop goes on past STEPS until the monitor has walked the heap this many
# times (at most 20 x STEPS): a loaded machine makes each walk slower, and the
# test is about naming the holder, not about how many walks 2 s can buy.
# Eight: with six, the walk at close() came a thousand steps after the last
# one, and a count that rose faster in that stretch (1.33 lists a step
# against 1.0 before) was one sample off the line: an exact count of seven
# walks with one bend is `inconclusive` (its df collapse is a known limit).
MIN_WALKS = 8
# Once told, a leaky loop goes on until a holder trace is written, for at
# most this many more walks (the trace at close() may still name it: a
# loaded machine's budget may leave no time for one while the loop runs).
HOLDER_WALKS = 8


STEP_S = 0.0012  # a step's training, on the simulated clock


REAL_TIME = {"loop_scratch_pool"}


def _pause():
    current = clock.current()
    if isinstance(current, clock.SimulatedClock):
        current.advance(STEP_S)
    else:
        time.sleep(STEP_S)


def _steps(monitor, told=None, most=20 * STEPS):
    """Steps of a loop: STEPS, then on (at most 20 x STEPS) until the monitor
    has walked the heap MIN_WALKS times and, for a leaky loop (``told``: the
    list its ``on_leak`` fills), until the leak was told and its holder named
    in the live report. A loaded machine gives fewer, later walks and noisier
    points; a verdict that says "about N more steps would decide" gets them,
    as a user's job would, and so does a holder that the walks after the
    leak was confirmed name (a buffer must be seen growing at two of them:
    a run whose leak was confirmed at its last walks had none left), for at
    most HOLDER_WALKS walks. At most ``most`` steps."""
    step = 0
    told_at = None  # the walks done when the leak was first seen told (read every 50 steps)
    while True:
        if step >= most:
            return
        if step % 50 == 0 and (step >= STEPS or told):
            walks = _walks(monitor)
            if told and told_at is None:
                told_at = walks
            waiting = told is not None and (not told or (not _named(monitor) and walks < told_at + HOLDER_WALKS))
            if step >= STEPS and walks >= MIN_WALKS and not waiting:
                return
        yield step
        step += 1


def _named(monitor) -> bool:
    """Whether the leak watch has written a holder trace (the saved report
    reads it; the live report shows it only at its next analysis)."""
    try:
        return bool(monitor._watch._held_by)
    except Exception:
        return True


def _walks(monitor) -> int:
    try:
        return int(monitor.stats()["units"]["heap"]["runs"])
    except Exception:
        return MIN_WALKS


class Record:
    def __init__(self, step):
        self.step = step
        self.payload = [step]


# -- the loops ------------------------------------------------------------


def loop_local(logdir, seen):
    history = []
    monitor = Monitor(str(logdir), on_leak=seen.append)
    for step in _steps(monitor, seen):
        history.append(Record(step))
        _pause()
        monitor.sample(step)
    monitor.close()
    return monitor


KEPT_GLOBAL: list = []


def loop_global(logdir, seen):
    monitor = Monitor(str(logdir), on_leak=seen.append)
    for step in _steps(monitor, seen):
        KEPT_GLOBAL.append(Record(step))
        _pause()
        monitor.sample(step)
    monitor.close()
    return monitor


def loop_closure(logdir, seen):
    def make_logger():
        store = []

        def log(item):
            store.append(item)
        return log

    log_step = make_logger()
    monitor = Monitor(str(logdir), on_leak=seen.append)
    for step in _steps(monitor, seen):
        log_step(Record(step))
        _pause()
        monitor.sample(step)
    monitor.close()
    return monitor


def loop_dict_by_step(logdir, seen):
    outputs = {}
    monitor = Monitor(str(logdir), on_leak=seen.append)
    for step in _steps(monitor, seen):
        outputs[step] = [float(step)] * 256  # a step's outputs, kept
        _pause()
        monitor.sample(step)
    monitor.close()
    return monitor


def loop_bytearrays(logdir, seen):
    buffers = []
    monitor = Monitor(str(logdir), on_leak=seen.append)
    for step in _steps(monitor, seen):
        buffers.append(bytearray(4096))
        _pause()
        monitor.sample(step)
    monitor.close()
    return monitor


def loop_arrays_in_tuples(logdir, seen):
    batches = []
    monitor = Monitor(str(logdir), on_leak=seen.append)
    for step in _steps(monitor, seen):
        batches.append((np.full(512, step, dtype=np.float32), step))
        _pause()
        monitor.sample(step)
    monitor.close()
    return monitor


class Tracked(list):
    """A list subclass as libraries keep a model's state (Keras's TrackedList,
    TensorFlow's ListWrapper), whose own methods must never run in a trace."""

    def __len__(self):
        raise AssertionError("the monitor ran Tracked.__len__")

    def __getitem__(self, index):
        raise AssertionError("the monitor ran Tracked.__getitem__")

    def __iter__(self):
        raise AssertionError("the monitor ran Tracked.__iter__")


class Model:
    def __init__(self):
        self.activations = Tracked()


def _train(monitor, seen):
    model = Model()
    for step in _steps(monitor, seen):
        list.append(model.activations, Record(step))  # kept by the model, every step
        _pause()
        monitor.sample(step)


def loop_model_returned(logdir, seen):
    # The model and its list are locals of a function that has returned
    # before close(): the leak is gone at the last walk, and only a trace
    # taken while the loop ran can name its holder.
    monitor = Monitor(str(logdir), on_leak=seen.append)
    _train(monitor, seen)
    monitor.close()
    return monitor


def _memoized(func):
    cache = {}  # ints -> arrays: a dict the collector stops tracking

    def wrapper(key):
        if key not in cache:
            cache[key] = func(key)
        return cache[key]
    return wrapper


def loop_memo_closure(logdir, seen):
    load = _memoized(lambda key: np.full(4096, key, dtype=np.float32))  # 16 KiB a step
    monitor = Monitor(str(logdir), on_leak=seen.append)
    for step in _steps(monitor, seen):
        load(step)  # a new key every step: the cache never hits
        _pause()
        monitor.sample(step)
    monitor.close()
    return monitor


class Parser:
    """A streaming parser whose buffer keeps every byte fed (nothing compacts it)."""

    def __init__(self):
        self.buf = bytearray()
        self.pos = 0

    def feed(self, chunk):
        self.buf.extend(chunk)


def loop_parser_buffer(logdir, seen):
    parser = Parser()
    monitor = Monitor(str(logdir), on_leak=seen.append)
    for step in _steps(monitor, seen):
        parser.feed(bytes(4096))  # one bytearray grows: no object count does
        parser.pos = len(parser.buf)
        _pause()
        monitor.sample(step)
    monitor.close()
    return monitor


class Bank:
    """A memory bank re-bound to a bigger array each step."""

    def __init__(self):
        self.rows = np.zeros((0, 64), np.float32)

    def add(self, batch):
        self.rows = np.concatenate((self.rows, batch))


def loop_rebound_attribute(logdir, seen):
    bank = Bank()
    monitor = Monitor(str(logdir), on_leak=seen.append)
    # Each step copies the whole bank: the time of a step grows with the run,
    # and once the allowance is spent a walk waits for 1% of training to pay
    # for it, so 20 x STEPS steps would copy terabytes (a CI run of this loop
    # ran past its 240 s). Four times STEPS: 6,000 steps, at most a few tens
    # of seconds; the holder is named within the first thousand.
    for step in _steps(monitor, seen, most=4 * STEPS):
        bank.add(np.ones((16, 64), np.float32))  # +4 KiB a step, one array
        _pause()
        monitor.sample(step)
    monitor.close()
    return monitor


class Pool:
    """Scratch arrays per worker, and a list of every one made (to report a
    total): a worker's array outlives the worker in that list."""

    def __init__(self):
        self.all_values = []

    def scratch(self):
        array = np.zeros(16 * 1024, np.float32)  # 64 KiB
        self.all_values.append(array)
        return array


def loop_scratch_pool(logdir, seen):
    pool = Pool()
    monitor = Monitor(str(logdir), on_leak=seen.append)
    for step in _steps(monitor, seen):
        if step % 20 == 0:
            pool.scratch()  # a new worker every 20 steps: 3.2 KiB a step, a list too slow to follow
        _pause()
        monitor.sample(step)
    monitor.close()
    return monitor


class Cleaner:
    """Text normalisation memoised with ``functools.lru_cache(maxsize=None)``
    on a method: strings to strings, a dict the collector does not track."""

    def __init__(self):
        self.normalize = functools.lru_cache(maxsize=None)(self._normalize)

    def _normalize(self, text):
        return " ".join(text.lower().split())


def loop_lru_strings(logdir, seen):
    cleaner = Cleaner()
    monitor = Monitor(str(logdir), on_leak=seen.append)
    for step in _steps(monitor, seen):
        for i in range(16):  # sixteen new captions a step: the cache never hits
            cleaner.normalize(f"A Caption  {step:07d} of Sample {i:02d}  Seen Once")
        _pause()
        monitor.sample(step)
    monitor.close()
    return monitor


CASES = [
    (loop_local, "loop_local() local `history`"),
    (loop_global, "global `__main__.KEPT_GLOBAL`"),
    (loop_closure, "`store`"),
    (loop_dict_by_step, "loop_dict_by_step() local `outputs`"),
    (loop_bytearrays, "loop_bytearrays() local `buffers`"),
    (loop_arrays_in_tuples, "loop_arrays_in_tuples() local `batches`"),
    (loop_model_returned, "Model.activations"),
    (loop_memo_closure, "`cache`"),
    (loop_parser_buffer, "Parser.buf"),
    (loop_rebound_attribute, "Bank.rows"),
    (loop_scratch_pool, "Pool.all_values"),
    (loop_lru_strings, "Cleaner.normalize"),
]




def loop_bounded(logdir, seen):
    window = []
    monitor = Monitor(str(logdir), on_leak=seen.append)
    for step in _steps(monitor):
        window.append(Record(step))
        del window[:-50]
        _pause()
        monitor.sample(step)
    monitor.close()
    return monitor


class _Warnings(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


class _Told(list):
    """What ``on_leak`` was told: each report's verdict only. Keeping whole
    reports would add their lists and dicts to the very counts under test
    (a hundred lists a tell, a step in the last walk's count)."""

    def append(self, report) -> None:
        super().append(report.verdict)


def main(case: str, logdir: str) -> None:
    handler = _Warnings()
    logging.getLogger("tb_leak_plugin").addHandler(handler)
    seen = _Told()
    with clock.use(clock.current() if case in REAL_TIME else clock.SimulatedClock(start_wall=time.time())):
        monitor = globals()[case](logdir, seen)
    report = monitor.report
    print(json.dumps({"verdict": report.verdict if report else None, "told": len(seen),
                      "warned": any("memory leak in run" in m for m in handler.messages),
                      "warnings": [m[:2000] for m in handler.messages if "memory leak in run" in m][:8]}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
