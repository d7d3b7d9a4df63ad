"""A corpus of real training loops, leaking and clean, for judging tb-leak end to end.

    python benchmarks/loops.py list                 # the matrix
    python benchmarks/loops.py run NAME LOGDIR      # one scenario, in this process

Every scenario is a real loop: a training step of real work (numpy matmuls,
small eager TensorFlow ops, a ``tf.function``, a tiny Keras model's
``train_on_batch`` or ``model.fit``), calibrated at start-up to a target step
time (0.05, 0.5, 4 or 50 ms; ``time.sleep`` pads only the 50 ms steps, like a
data loader the step waits for), and one memory behaviour:

* leaks: an EagerTensor kept per step, a numpy array per step appended to a
  global list, a dict keyed by step, a ``tf.function`` retraced on a Python
  float, records of a user class kept by a callback-like object, a list of
  bytearrays, a list of closures;
* clean twins with the same step time and shape of memory use: a bounded
  ``deque(maxlen)``, an LRU cache that fills then evicts, a cache that fills
  to its bound in the first 20% of the run, floats kept per step, a
  shuffle-buffer warm-up, a sawtooth buffer cleared every N steps, one big
  allocation at step k, a ``tf.function`` whose traces stop at a bound.

The monitor is used only through its public API at default settings:
``Monitor(logdir)``, ``sample(step)`` once per step, ``close()``.
Scenarios of framework ``no_tf`` never import TensorFlow (the ``run`` command
blocks the import and fails if it happened). Each scenario should run in a
fresh interpreter (``benchmarks/bench_loops.py`` does that); ``run_scenario``
itself runs in the current process.

This module imports only the standard library at import time.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import heapq
import json
import os
import re
import sys
import time
from typing import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

FRAMEWORKS = ("eager", "tf_function", "keras", "no_tf")


@dataclasses.dataclass(frozen=True)
class Scenario:
    name: str
    framework: str  # one of FRAMEWORKS
    step_ms: float  # target step time
    steps: int
    kind: str  # "leak" or "clean"
    expected: tuple[str, ...]  # leaks: substrings a user expects among the top-3 culprits' kind/name
    run: Callable  # run(monitor, steps) -> dict with at least "train_s"
    pattern: str
    kib: int  # size of the per-step payload
    twin: str  # the other half of the pair
    description: str


# --------------------------------------------------------------------------------------------
# The work of one training step, per framework, calibrated to a step time.

_DIM = {0.05: 8, 0.5: 32, 4: 64, 50: 64}  # matrix size of one unit of filler work (64: below OpenBLAS threading)
COMPUTE_MS_OF_SLOW_STEPS = 10.0  # a 50 ms step computes this long, then waits (sleep)


def _mean_step_s(step, reps, min_s=0.15, max_n=3000):
    """Median time of ``step(reps)`` (the median, so that a preempted step does not count)."""
    step(reps)
    times = []
    started = time.perf_counter()
    while len(times) < 5 or (time.perf_counter() - started < min_s and len(times) < max_n):
        t0 = time.perf_counter()
        step(reps)
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def _calibrate(step, target_s):
    """Filler repetitions so that ``step(reps)`` takes about ``target_s``."""
    base = _mean_step_s(step, 0)
    if base >= 0.9 * target_s:
        return 0
    probe = 8
    unit = max((_mean_step_s(step, probe) - base) / probe, 1e-7)
    reps = max(1, round((target_s - base) / unit))
    for _ in range(2):
        measured = _mean_step_s(step, reps)
        if measured <= base:
            break
        unit = (measured - base) / reps
        reps = max(1, round((target_s - base) / unit))
    return reps


class _Work:
    """``step(i) -> (batch, out, loss)``: one training step; ``out`` is a new kib-KiB array/tensor."""

    framework = ""

    def __init__(self, step_ms, kib, seed=0):
        self.step_ms = step_ms
        self.kib = kib
        self.seed = seed
        self.pad_s = step_ms / 1000.0 if step_ms >= 50 else 0.0
        compute_ms = min(step_ms, COMPUTE_MS_OF_SLOW_STEPS)
        self.build()
        self.reps = _calibrate(self._step, compute_ms / 1000.0)

    def step(self, i):
        return self._step(self.reps)

    def pad(self, started):
        """Wait (like a step waiting for its input) until ``pad_s`` has passed since ``started``."""
        if self.pad_s:
            left = started + self.pad_s - time.perf_counter()
            if left > 0:
                time.sleep(left)


class NumpyWork(_Work):
    framework = "no_tf"

    def build(self):
        import numpy as np

        self.np = np
        self.rng = np.random.default_rng(self.seed)
        d = _DIM[self.step_ms]
        self.w = self.rng.standard_normal((d, d)) / np.sqrt(d)
        self.h = self.rng.standard_normal((d, d))
        self.n = self.kib * 128  # float64 values per KiB

    def _step(self, reps):
        np = self.np
        batch = self.rng.standard_normal(self.n)
        h = self.h
        for _ in range(reps):
            h = np.tanh(h @ self.w)
        self.h = h
        out = np.tanh(batch * (1.0 + 0.01 * h[0, 0]))
        return batch, out, float(out @ out) / self.n


class EagerWork(_Work):
    framework = "eager"

    def build(self):
        import numpy as np
        import tensorflow as tf

        tf.random.set_seed(self.seed)
        self.np, self.tf = np, tf
        self.rng = np.random.default_rng(self.seed)
        d = _DIM[self.step_ms]
        self.w = tf.Variable(tf.random.normal([d, d]) / float(np.sqrt(d)))
        self.h = tf.Variable(tf.random.normal([d, d]))
        self.n = self.kib * 256  # float32 values per KiB

    def _step(self, reps):
        tf = self.tf
        batch = tf.constant(self.rng.standard_normal(self.n, dtype=self.np.float32))
        out = tf.tanh(batch)
        if reps:
            x = self.h
            for _ in range(reps):
                x = tf.tanh(tf.matmul(x, self.w))
            self.h.assign(x)
        return batch, out, tf.reduce_mean(out)


class FunctionWork(_Work):
    """A ``tf.function`` train step; ``lr_mode`` says how the learning rate is passed."""

    framework = "tf_function"

    def __init__(self, step_ms, kib, seed=0, lr_mode="tensor"):
        self.lr_mode = lr_mode
        super().__init__(step_ms, kib, seed)

    def build(self):
        import numpy as np
        import tensorflow as tf

        tf.random.set_seed(self.seed)
        self.np, self.tf = np, tf
        self.rng = np.random.default_rng(self.seed)
        d = _DIM[self.step_ms]
        w = tf.Variable(tf.random.normal([d, d]) / float(np.sqrt(d)))
        h = tf.Variable(tf.random.normal([d, d]))
        v = tf.Variable(1.0)
        self.n = self.kib * 256

        @tf.function
        def forward(reps):  # the bulk of the step's work, its own tf.function (traced once)
            x = h
            for _ in tf.range(reps):
                x = tf.tanh(tf.matmul(x, w))
            h.assign(x)
            return x

        @tf.function
        def train_step(batch, reps, learning_rate):  # reps: a Python int, fixed once calibrated
            if reps:
                forward(tf.constant(reps))
            with tf.GradientTape() as tape:
                out = tf.tanh(batch * v)
                loss = tf.reduce_mean(tf.square(out))
            v.assign_sub(learning_rate * tape.gradient(loss, v))
            return out, loss

        self.train_step = train_step
        self.fixed_lr = tf.constant(0.01)

    def _call(self, reps, learning_rate):
        batch = self.tf.constant(self.rng.standard_normal(self.n, dtype=self.np.float32))
        out, loss = self.train_step(batch, reps, learning_rate)
        return batch, out, loss

    def _step(self, reps):  # calibration: the learning rate as a tensor
        return self._call(reps, self.fixed_lr)

    def step(self, i):
        lr = 0.1 / (1.0 + 0.01 * i)  # a decaying schedule
        if self.lr_mode == "float":
            return self._call(self.reps, lr)  # a new Python float each step: a new trace each step
        if self.lr_mode == "piecewise":
            # a piecewise-constant schedule as Python floats, settled within the first 20% of the run
            bounds = [0.05, 0.1, 0.15, 0.2]
            values = [0.1, 0.05, 0.02, 0.01, 0.005]
            index = sum(i >= b * self.steps for b in bounds)
            return self._call(self.reps, values[index])
        # A numpy value: tf.constant(lr) of a new Python float each step is kept by
        # TensorFlow's scalar cache (~0.6 KiB each), a native leak of its own.
        return self._call(self.reps, self.tf.constant(self.np.float32(lr)))


class KerasWork(_Work):
    """``train_on_batch`` of a tiny Keras model, numpy augmentation as filler, predictions on a probe batch."""

    framework = "keras"

    def build(self):
        import keras
        import numpy as np
        import tensorflow as tf

        tf.random.set_seed(self.seed)
        keras.utils.set_random_seed(self.seed)
        self.np, self.tf = np, tf
        self.rng = np.random.default_rng(self.seed)
        self.model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"),
                                       keras.layers.Dense(256)])
        self.model.compile(optimizer="sgd", loss="mse")
        self.x = self.rng.standard_normal((64, 32)).astype("float32")
        self.y = self.rng.standard_normal((64, 256)).astype("float32")
        self.probe = tf.constant(self.rng.standard_normal((self.kib, 32)).astype("float32"))  # kib KiB out
        d = _DIM[self.step_ms]
        self.image = self.rng.standard_normal((d, d))
        self.kernel = self.rng.standard_normal((d, d)) / np.sqrt(d)

    def _step(self, reps):
        np = self.np
        image = self.image
        for _ in range(reps):  # augmentation of the input
            image = np.tanh(image @ self.kernel)
        self.image = image
        batch = self.x + 0.01 * self.rng.standard_normal(self.x.shape).astype("float32")
        loss = self.model.train_on_batch(batch, self.y)
        out = self.model(self.probe, training=False)  # predictions tracked on a fixed probe batch
        return batch, out, loss


_WORKS = {"no_tf": NumpyWork, "eager": EagerWork, "tf_function": FunctionWork, "keras": KerasWork}


# --------------------------------------------------------------------------------------------
# Memory behaviours: keep(step, batch, out, loss), called once per step after the step.

_ACTIVATIONS = []  # the global list of the numpy_list leak


def _as_numpy(x):
    return x if type(x).__module__ == "numpy" else x.numpy()


def _as_float(x):
    return float(x)


class BatchRecord:
    """What a user's metrics callback keeps about one batch."""

    def __init__(self, step, logs, preds):
        self.step = step
        self.logs = logs
        self.preds = preds


class MetricsLogger:
    """A callback-like object: ``on_batch_end`` is called after every batch."""

    def __init__(self, keep_best=None):
        self.keep_best = keep_best
        self.records = []  # all records, or a heap of the best ``keep_best``

    def on_batch_end(self, step, logs, preds):
        record = BatchRecord(step, dict(logs), preds)
        if self.keep_best is None:
            self.records.append(record)  # LEAK: a record per batch, never dropped
        elif len(self.records) < self.keep_best:
            heapq.heappush(self.records, (-logs["loss"], step, record))
        else:
            heapq.heappushpop(self.records, (-logs["loss"], step, record))  # the best K stay


class PredictionHistory:
    """Keeps the predictions of each step (all, or the last ``maxlen``)."""

    def __init__(self, maxlen=None):
        self.history = [] if maxlen is None else collections.deque(maxlen=maxlen)

    def __call__(self, step, batch, out, loss):
        self.history.append(out)


def eager_history(fw, steps, kib):
    """LEAK: ``history.append(predictions)``: every step's EagerTensor stays alive."""
    return PredictionHistory()


def eager_deque(fw, steps, kib):
    """CLEAN: the same predictions in a ``deque(maxlen=64)``."""
    return PredictionHistory(maxlen=64)


def float_history(fw, steps, kib):
    """CLEAN: ``history.append(float(loss))``: a Python float per step."""
    history = []

    def keep(step, batch, out, loss):
        history.append(_as_float(loss))

    return keep


def numpy_list(fw, steps, kib):
    """LEAK: each step's activations as a numpy array appended to a module-level list."""

    def keep(step, batch, out, loss):
        _ACTIVATIONS.append(_as_numpy(out))

    return keep


def numpy_sawtooth(fw, steps, kib):
    """CLEAN: the activations gathered in a list that is cleared every N steps (an epoch buffer)."""
    every = max(20, steps // 10)
    buffer = []

    def keep(step, batch, out, loss):
        buffer.append(_as_numpy(out))
        if len(buffer) >= every:
            buffer.clear()

    return keep


def dict_by_step(fw, steps, kib):
    """LEAK: ``cache[step] = outputs``: a dict keyed by step, never trimmed."""
    cache = {}

    def keep(step, batch, out, loss):
        cache[step] = out

    return keep


def lru_cache(fw, steps, kib):
    """CLEAN: ``functools.lru_cache`` over a sample id: fills to maxsize, then evicts."""
    import numpy as np

    maxsize = max(64, steps // 10)
    rng = np.random.default_rng(1)

    @functools.lru_cache(maxsize=maxsize)
    def features(sample_id):
        return np.tanh(np.random.default_rng(sample_id).standard_normal(kib * 128))

    def keep(step, batch, out, loss):
        features(int(rng.integers(0, 4 * maxsize))).sum()

    return keep


def numpy_lru(fw, steps, kib):
    """CLEAN: an ``OrderedDict`` LRU of per-sample outputs (as numpy) keyed by sample id."""
    import numpy as np

    maxsize = max(64, steps // 10)
    rng = np.random.default_rng(1)
    cache = collections.OrderedDict()

    def keep(step, batch, out, loss):
        key = int(rng.integers(0, 4 * maxsize))
        if key in cache:
            cache.move_to_end(key)
        else:
            cache[key] = _as_numpy(out)
            if len(cache) > maxsize:
                cache.popitem(last=False)

    return keep


def dataset_cache(fw, steps, kib):
    """CLEAN: a per-example cache over a dataset of steps/5 examples: full after the first epoch (20%)."""
    examples = max(1, steps // 5)
    cache = {}

    def keep(step, batch, out, loss):
        key = step % examples
        if key not in cache:
            cache[key] = out

    return keep


def user_records(fw, steps, kib):
    """LEAK: a callback-like ``MetricsLogger`` keeps a ``BatchRecord`` per batch in an attribute."""
    logger = MetricsLogger()

    def keep(step, batch, out, loss):
        logger.on_batch_end(step, {"loss": _as_float(loss), "step": step}, _as_numpy(out))

    return keep


def topk_records(fw, steps, kib):
    """CLEAN: the same logger keeping the best steps/5 records (full after 20% of the run)."""
    logger = MetricsLogger(keep_best=max(1, steps // 5))

    def keep(step, batch, out, loss):
        logger.on_batch_end(step, {"loss": _as_float(loss), "step": step}, _as_numpy(out))

    return keep


def bytearray_list(fw, steps, kib):
    """LEAK: each step's serialized outputs (a bytearray) appended to a write buffer never flushed."""
    buffer = []

    def keep(step, batch, out, loss):
        buffer.append(bytearray(_as_numpy(out).tobytes()))

    return keep


def bytearray_shuffle(fw, steps, kib):
    """CLEAN: a shuffle buffer of serialized examples: fills (warm-up), then one in, one out."""
    import random

    size = max(32, steps // 10)
    buffer = []
    chooser = random.Random(0)

    def keep(step, batch, out, loss):
        record = bytearray(_as_numpy(out).tobytes())
        if len(buffer) < size:
            buffer.append(record)
        else:
            index = chooser.randrange(size)
            emitted, buffer[index] = buffer[index], record
            len(emitted)

    return keep


def bytearray_sawtooth(fw, steps, kib):
    """CLEAN: a write buffer of bytearrays flushed to a file every N steps."""
    every = max(20, steps // 10)
    buffer = []
    sink = open(os.devnull, "wb")

    def keep(step, batch, out, loss):
        buffer.append(bytearray(_as_numpy(out).tobytes()))
        if len(buffer) >= every:
            sink.write(b"".join(buffer))
            buffer.clear()

    return keep


def _summarize(step, out):
    return step, float(out.sum() if hasattr(out, "sum") else out.numpy().sum())


def closure_list(fw, steps, kib):
    """LEAK: a deferred-logging closure per step (capturing the outputs) appended to a list, never run."""
    pending = []

    def keep(step, batch, out, loss):
        pending.append(lambda: _summarize(step, out))

    return keep


def closure_sawtooth(fw, steps, kib):
    """CLEAN: the same deferred closures, run and cleared every N steps."""
    every = max(20, steps // 10)
    pending = []

    def keep(step, batch, out, loss):
        pending.append(lambda: _summarize(step, out))
        if len(pending) >= every:
            for callback in pending[-2:]:
                callback()
            pending.clear()

    return keep


def closure_deque(fw, steps, kib):
    """CLEAN: the same deferred closures in a ``deque(maxlen=64)``."""
    pending = collections.deque(maxlen=64)

    def keep(step, batch, out, loss):
        pending.append(lambda: _summarize(step, out))

    return keep


def big_alloc_at_k(fw, steps, kib):
    """CLEAN: one 32 MiB allocation kept from step steps/3 on (a lazily built table), nothing else kept."""
    at = steps // 3
    state = {"mean": 0.0}

    def keep(step, batch, out, loss):
        if step == at:
            if fw == "no_tf":
                import numpy as np

                state["table"] = np.ones(4 * 1024 * 1024)  # 32 MiB
            else:
                import tensorflow as tf

                state["table"] = tf.Variable(tf.ones([8 * 1024 * 1024]))  # 32 MiB
        state["mean"] += (_as_float(loss) - state["mean"]) / (step + 1)

    return keep


def running_mean(fw, steps, kib):
    """Nothing kept but a running mean of the loss."""
    state = {"mean": 0.0}

    def keep(step, batch, out, loss):
        state["mean"] += (_as_float(loss) - state["mean"]) / (step + 1)

    return keep


BEHAVIOURS = {f.__name__: f for f in (
    eager_history, eager_deque, float_history, numpy_list, numpy_sawtooth, dict_by_step, lru_cache,
    numpy_lru, dataset_cache, user_records, topk_records, bytearray_list, bytearray_shuffle,
    bytearray_sawtooth, closure_list, closure_sawtooth, closure_deque, big_alloc_at_k, running_mean)}


# ``run NAME LOGDIR --min-walks N`` (the tests): a loop run by ``_train`` goes on
# past its steps, 50 at a time and up to 5 times its length, until the
# monitor has walked the heap N times, the last of them in the second half of
# the steps run (the walk at close() then follows walks that reach close to
# it, see POLICY.release_gap_share). How many walks a 1-s run buys, and when,
# depends on how loaded the machine is (the allowance pays for a few walks at
# the start; after it, a walk every cost/0.8% seconds of training); a test of
# verdicts needs a known amount of evidence, not a race against the clock.
# Five times at most: a scenario run far past its length is another scenario
# (a clean twin keeping a float a step, run ~17 times its 2,000 steps on a
# loaded machine, kept ~35,000 floats: 2.4% of its process's Python blocks,
# material by the policy at that length). And 30 s of the loop at most: a
# loop whose walks grow dear with its heap (a tf.function retraced each step
# keeps every graph: three walks in 300 steps, still three in 1,500, 85 s
# later) gets no more walks from stretching; the test then reads its
# "census too short" hint, as for a loaded machine.
MIN_WALKS = 0
MAX_STRETCH = 5
MAX_STRETCH_S = 30.0


def _heap_walks(monitor) -> int:
    try:
        return int(monitor.stats()["units"]["heap"]["runs"])
    except Exception:
        return MIN_WALKS


def _steps(monitor, steps):
    step = 0
    walks, last_walk = 0, 0
    started = time.perf_counter()
    while True:
        if MIN_WALKS and step:
            now = _heap_walks(monitor)
            if now != walks:
                walks, last_walk = now, step - 1
        enough = not MIN_WALKS or (walks >= MIN_WALKS and 2 * last_walk >= step)
        if step >= steps and (step >= MAX_STRETCH * steps or (step % 50 == 0 and (
                enough or time.perf_counter() - started >= MAX_STRETCH_S))):
            return
        yield step
        step += 1


def _train(monitor, steps, work, keep):
    """The training loop; returns (seconds of the loop, seconds of it inside ``monitor.sample``, steps run)."""
    in_monitor = 0.0
    started = time.perf_counter()
    step = -1
    for step in _steps(monitor, steps):
        t0 = time.perf_counter()
        batch, out, loss = work.step(step)
        keep(step, batch, out, loss)
        del batch, out, loss
        work.pad(t0)
        t1 = time.perf_counter()
        monitor.sample(step)
        in_monitor += time.perf_counter() - t1
    return time.perf_counter() - started, in_monitor, step + 1


def _loop_run(framework, step_ms, kib, behaviour, lr_mode=None):
    def run(monitor, steps):
        if framework == "tf_function":
            work = FunctionWork(step_ms, kib, lr_mode=lr_mode or "tensor")
            work.steps = steps
        else:
            work = _WORKS[framework](step_ms, kib)
        keep = BEHAVIOURS[behaviour](framework, steps, kib)
        train_s, monitor_s, done = _train(monitor, steps, work, keep)
        return {"train_s": train_s, "monitor_s": monitor_s, "filler_reps": work.reps, "steps": done}

    return run


def _keras_fit_run(step_ms, kib, maxlen):
    """``model.fit`` with a callback keeping predictions (all, or the last ``maxlen``) and a sampling callback."""

    def run(monitor, steps):
        import keras
        import numpy as np
        import tensorflow as tf

        keras.utils.set_random_seed(0)
        rng = np.random.default_rng(0)
        x = rng.standard_normal((32 * steps, 32)).astype("float32")
        y = np.tanh(x @ rng.standard_normal((32, 256)).astype("float32"))
        model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"),
                                  keras.layers.Dense(256)])
        model.compile(optimizer="sgd", loss="mse")
        probe = tf.constant(rng.standard_normal((kib, 32)).astype("float32"))

        d = _DIM[step_ms]
        kernel = rng.standard_normal((d, d)) / np.sqrt(d)
        state = {"image": rng.standard_normal((d, d))}

        def augment(reps):  # per-batch numpy work of the user's callback
            image = state["image"]
            for _ in range(reps):
                image = np.tanh(image @ kernel)
            state["image"] = image

        reps = _calibrate(augment, min(step_ms, COMPUTE_MS_OF_SLOW_STEPS) / 1000.0 * 0.7)
        pad_s = step_ms / 1000.0 if step_ms >= 50 else 0.0

        class TrackPredictions(keras.callbacks.Callback):
            def __init__(self):
                super().__init__()
                self.history = [] if maxlen is None else collections.deque(maxlen=maxlen)

            def on_train_batch_end(self, batch, logs=None):
                augment(reps)
                self.history.append(self.model(probe, training=False))

        class Sample(keras.callbacks.Callback):
            def __init__(self):
                super().__init__()
                self.step = 0
                self.began = None
                self.first = None
                self.in_monitor = 0.0

            def on_train_batch_begin(self, batch, logs=None):
                self.began = time.perf_counter()
                if self.first is None:
                    self.first = self.began

            def on_train_batch_end(self, batch, logs=None):
                if pad_s:
                    left = self.began + pad_s - time.perf_counter()
                    if left > 0:
                        time.sleep(left)
                t1 = time.perf_counter()
                monitor.sample(self.step)
                self.in_monitor += time.perf_counter() - t1
                self.step += 1

        sampler = Sample()
        model.fit(x, y, batch_size=32, epochs=1, verbose=0, shuffle=False,
                  callbacks=[TrackPredictions(), sampler])
        return {"train_s": time.perf_counter() - sampler.first, "monitor_s": sampler.in_monitor,
                "filler_reps": reps}

    return run


# --------------------------------------------------------------------------------------------
# The matrix.

EAGER = ("EagerTensor", "eager")
NUMPY = ("ndarray", "numpy")
RETRACING = ("retrac", "traces", "ConcreteFunction")  # a retraced function's concrete functions, held by its cache, name it too
CLOSURE = ("function", "cell", "closure")

# (leak pattern, clean twin, framework, step_ms, steps, kib, expected culprits of the leak)
PAIRS = [
    # no TensorFlow at all
    ("numpy_list", "numpy_sawtooth", "no_tf", 0.05, 20000, 1, NUMPY),
    ("numpy_list", "numpy_sawtooth", "no_tf", 0.5, 300, 64, NUMPY),
    ("numpy_list", "big_alloc_at_k", "no_tf", 50, 300, 16, NUMPY),
    ("dict_by_step", "lru_cache", "no_tf", 0.5, 20000, 4, NUMPY),
    ("user_records", "topk_records", "no_tf", 0.05, 2000, 1, ("BatchRecord",)),
    ("user_records", "topk_records", "no_tf", 4, 2000, 4, ("BatchRecord",)),
    ("bytearray_list", "bytearray_shuffle", "no_tf", 0.5, 2000, 32, ("bytearray",)),
    ("bytearray_list", "bytearray_sawtooth", "no_tf", 4, 2000, 1, ("bytearray",)),
    ("closure_list", "closure_sawtooth", "no_tf", 0.05, 300, 4, CLOSURE + NUMPY),
    ("closure_list", "closure_deque", "no_tf", 50, 600, 2, CLOSURE + NUMPY),
    # TensorFlow eager
    ("eager_history", "eager_deque", "eager", 0.05, 20000, 1, EAGER),
    ("eager_history", "float_history", "eager", 0.5, 2000, 16, EAGER),
    ("eager_history", "eager_deque", "eager", 4, 300, 256, EAGER),
    ("numpy_list", "numpy_lru", "eager", 4, 2000, 8, NUMPY),
    ("closure_list", "closure_deque", "eager", 0.5, 20000, 1, CLOSURE + EAGER),
    ("dict_by_step", "big_alloc_at_k", "eager", 50, 300, 64, EAGER),
    # tf.function
    ("retrace_float", "retrace_bounded", "tf_function", 0.5, 300, 1, RETRACING),
    ("retrace_float", "retrace_tensor", "tf_function", 4, 300, 1, RETRACING),
    ("retrace_float", "retrace_tensor", "tf_function", 50, 300, 1, RETRACING),
    ("eager_history", "big_alloc_at_k", "tf_function", 0.5, 20000, 2, EAGER),
    ("dict_by_step", "dataset_cache", "tf_function", 4, 2000, 16, EAGER),
    # Keras
    ("eager_history", "eager_deque", "keras", 4, 2000, 16, EAGER),
    ("user_records", "float_history", "keras", 4, 300, 8, ("BatchRecord",)),
    ("fit_eager_history", "fit_eager_deque", "keras", 50, 600, 4, EAGER),
]

_DESCRIPTIONS = {
    "retrace_float": "LEAK: a tf.function called with a new Python float learning rate each step",
    "retrace_bounded": "CLEAN: the learning rate as a Python float of a piecewise schedule (5 values, all "
                       "within the first 20%): 5 traces, then none",
    "retrace_tensor": "CLEAN: the learning rate passed as tf.constant(np.float32(lr))",
    "fit_eager_history": "LEAK: model.fit with a callback keeping each batch's predictions as tensors",
    "fit_eager_deque": "CLEAN: model.fit with the callback keeping the last 32 predictions",
}

_FW_LABEL = {"eager": "eager", "tf_function": "tffn", "keras": "keras", "no_tf": "notf"}


def _name(pattern, framework, step_ms, steps):
    return f"{pattern}-{_FW_LABEL[framework]}-{step_ms:g}ms-{steps}"


def _runner(pattern, framework, step_ms, kib):
    if pattern.startswith("retrace_"):
        mode = {"retrace_float": "float", "retrace_bounded": "piecewise", "retrace_tensor": "tensor"}[pattern]
        return _loop_run(framework, step_ms, kib, "running_mean", lr_mode=mode)
    if pattern.startswith("fit_"):
        return _keras_fit_run(step_ms, kib, None if pattern == "fit_eager_history" else 32)
    return _loop_run(framework, step_ms, kib, pattern)


def _build_matrix():
    scenarios = {}
    for leak, clean, framework, step_ms, steps, kib, expected in PAIRS:
        names = (_name(leak, framework, step_ms, steps), _name(clean, framework, step_ms, steps))
        for pattern, kind, name, twin in ((leak, "leak", names[0], names[1]), (clean, "clean", names[1], names[0])):
            if name in scenarios:
                raise ValueError(f"duplicate scenario {name}")
            doc = _DESCRIPTIONS.get(pattern) or (BEHAVIOURS[pattern].__doc__ or "").strip()
            scenarios[name] = Scenario(
                name=name, framework=framework, step_ms=step_ms, steps=steps, kind=kind,
                expected=tuple(expected) if kind == "leak" else (), run=_runner(pattern, framework, step_ms, kib),
                pattern=pattern, kib=kib, twin=twin, description=doc)
    return scenarios


SCENARIOS = _build_matrix()

# The quick slice: 4 leaks and their clean twins; TensorFlow and not, fast and slow steps.
QUICK = [
    "numpy_list-notf-0.05ms-20000", "numpy_sawtooth-notf-0.05ms-20000",
    "numpy_list-notf-50ms-300", "big_alloc_at_k-notf-50ms-300",
    "eager_history-eager-0.5ms-2000", "float_history-eager-0.5ms-2000",
    "retrace_float-tffn-0.5ms-300", "retrace_bounded-tffn-0.5ms-300",
]


def culprit_label(culprit):
    return f"{culprit.get('kind', '')}:{culprit.get('name', '')}"


def culprit_right(scenario, culprits, top=3):
    """Whether one of the top culprits' kind or name contains an expected substring (case-insensitive)."""
    labels = [culprit_label(c).lower() for c in culprits[:top]]
    return any(needle.lower() in label for needle in scenario.expected for label in labels)


def run_scenario(name, logdir):
    """Run scenario ``name`` in this process, writing tb-leak summaries into ``logdir``."""
    scenario = SCENARIOS[name]
    tf_before = "tensorflow" in sys.modules
    import tb_leak_plugin

    started = time.perf_counter()
    monitor = tb_leak_plugin.Monitor(logdir)
    try:
        result = dict(scenario.run(monitor, scenario.steps))
    finally:
        monitor.close()
    result["wall_s"] = time.perf_counter() - started
    steps = result.setdefault("steps", scenario.steps)
    result["heap_walks"] = _heap_walks(monitor)
    result["contention"] = monitor.stats().get("contention", 1.0)
    result["ms_per_step"] = 1000.0 * result["train_s"] / steps  # the loop, monitor included
    result["work_ms_per_step"] = 1000.0 * (result["train_s"] - result["monitor_s"]) / steps
    if scenario.framework == "no_tf" and not tf_before and "tensorflow" in sys.modules:
        raise RuntimeError(f"{name}: TensorFlow was imported by a no_tf scenario")
    return result


def _block_tensorflow():
    class _Block:
        def find_spec(self, fullname, path=None, target=None):
            if fullname == "tensorflow" or fullname.startswith(("tensorflow.", "keras")):
                raise ImportError(f"{fullname}: this scenario runs without TensorFlow")
            return None

    sys.meta_path.insert(0, _Block())


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["list"]:
        pattern = re.compile(argv[1]) if len(argv) > 1 else None
        for s in SCENARIOS.values():
            if pattern is None or pattern.search(s.name):
                print(f"{s.name:40s} {s.kind:5s} {s.framework:11s} {s.step_ms:>5g} ms {s.steps:>6d} steps "
                      f"{s.kib:>3d} KiB  {s.description}")
        return 0
    global MIN_WALKS
    if len(argv) == 5 and argv[3] == "--min-walks" and argv[4].isdigit():
        MIN_WALKS = int(argv[4])
        argv = argv[:3]
    if len(argv) != 3 or argv[0] != "run":
        print("usage: python benchmarks/loops.py run NAME LOGDIR [--min-walks N] | list [REGEX]", file=sys.stderr)
        return 2
    name, logdir = argv[1], argv[2]
    if name not in SCENARIOS:
        print(f"unknown scenario {name!r}; see `python benchmarks/loops.py list`", file=sys.stderr)
        return 2
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    if SCENARIOS[name].framework == "no_tf":
        _block_tensorflow()
    result = run_scenario(name, logdir)
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
