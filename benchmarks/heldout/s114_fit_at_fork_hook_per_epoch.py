"""A ``PyDataset`` builds a new prefetcher every epoch, and each prefetcher registers ``os.register_at_fork(after_in_child=self._reset_after_fork)``; fork hooks cannot be unregistered, so every epoch's prefetcher, with its shuffled index and prefetch ring, stays alive for the rest of the process (``model.fit``; grows once an epoch).

Source: open-telemetry/opentelemetry-python#4449 "fix: log and trace
processor memory leak" ("Strong references in ``register_at_fork``
persist after the processor objects are deleted. This prevents garbage
collection as the reference count for the processor object never drops to
0. Update ``register_at_fork`` calls in processors to use weak
references"; a reviewer: "Since there is no way to unregister the actual
at fork hook, this still leaks those lambdas but I imagine it's
negligible"; fixes #4422), and getsentry/sentry-python#6159 ("Each
``Monitor.__init__`` call registers a new callback holding a bound method
reference to ``self``, preventing the ``Monitor`` ... from ever being
garbage collected"; the same residue is noted in
langfuse/langfuse-python#1654: "the lambda+WeakMethod wrapper pair is not
collectible"). Fix, the OpenTelemetry one: register a lambda over
a ``weakref.WeakMethod`` of the hook, so only the small lambda stays.
Summary: the training data come from a ``keras.utils.PyDataset`` whose
``on_epoch_end`` replaces its ``Prefetcher`` with a new one for the next
epoch's shuffled order. A prefetcher owns the epoch's index permutation
and a ring of 16 prefetched batches, and, so that forked data workers can
reset its lock and counters, registers its bound method
``_reset_after_fork`` with ``os.register_at_fork``. The interpreter keeps
that bound method in its list of after-fork hooks, which has no
unregister, so each replaced prefetcher (~230 KiB of arrays) survives: the leak
grows by one prefetcher per epoch.

Here: batches of 32 x 64 float32 features from a 12,800-sample in-memory
set, a 64-128-10 Keras MLP, 100 batches an epoch, 40 epochs. The fixed
twin registers ``lambda: ref() and ref()()`` with ``ref =
weakref.WeakMethod(self._reset_after_fork)`` (a lambda and a weak
reference, ~0.3 KiB, stay per epoch).

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11; ``LeakCallback`` replaced by a stub callback):
leaky +4.9 MiB RSS from 20 % of the run to the end, in steps at epoch ends
(~155 KiB an epoch; 565.7 / 567.3 / 570.7 MiB at 20 % / 40 % / end) and +3
gc-tracked objects an epoch (327,124 / 327,149 / 327,222; the arrays are
not tracked), fixed 565.3 / 565.4 / 565.6 MiB with ~10 objects an epoch
(327,189 / 327,270 / 327,510: the lambdas and weak references the fix
leaves, plus Keras' own per-epoch objects); ~4 ms a batch (17-18 s for
4,000 batches, with another job on the machine).
"""
import os
import threading
import weakref

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/open-telemetry/opentelemetry-python/pull/4449"
SLICE = "holdout9"
STEPS = 4000           # batches; 100 per epoch, 40 epochs
STEPS_PER_EPOCH = 100
BATCH = 32
FEATURES = 64
CLASSES = 10
RING = 16
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["Prefetcher", "ndarray", "numpy", "method"],
              "holder_any": ["register_at_fork", "_reset_after_fork", "Prefetcher", "fork"]},
    "fixed": {"verdict_not": "leak"},
}


class Prefetcher:
    def __init__(self, x, y, rng, weak_fork_hook):
        self.x, self.y = x, y
        self.order = rng.permutation(len(x))
        self.ring = np.empty((RING, BATCH, FEATURES), np.float32)
        self.ring_y = np.empty((RING, BATCH), np.int64)
        self.filled = 0
        self._lock = threading.Lock()
        if weak_fork_hook:                                   # the fix: the hook holds the method weakly
            ref = weakref.WeakMethod(self._reset_after_fork)
            os.register_at_fork(after_in_child=lambda: ref() and ref()())
        else:
            os.register_at_fork(after_in_child=self._reset_after_fork)

    def _reset_after_fork(self):
        self._lock = threading.Lock()
        self.filled = 0

    def batch(self, idx):
        with self._lock:
            slot = idx % RING
            take = self.order[idx * BATCH:(idx + 1) * BATCH]
            self.ring[slot] = self.x[take]
            self.ring_y[slot] = self.y[take]
            self.filled = min(RING, self.filled + 1)
            return self.ring[slot].copy(), self.ring_y[slot].copy()


class ShuffledSet(keras.utils.PyDataset):
    def __init__(self, weak_fork_hook, **kwargs):
        super().__init__(**kwargs)
        self.weak_fork_hook = weak_fork_hook
        self.rng = np.random.default_rng(0)
        centers = self.rng.normal(size=(CLASSES, FEATURES)).astype(np.float32)
        self.y = self.rng.integers(0, CLASSES, BATCH * STEPS_PER_EPOCH)
        self.x = centers[self.y] + self.rng.standard_normal((len(self.y), FEATURES), dtype=np.float32)
        self.prefetcher = Prefetcher(self.x, self.y, self.rng, weak_fork_hook)

    def __len__(self):
        return STEPS_PER_EPOCH

    def __getitem__(self, idx):
        return self.prefetcher.batch(idx)

    def on_epoch_end(self):
        self.prefetcher = Prefetcher(self.x, self.y, self.rng, self.weak_fork_hook)   # a new one per epoch


def _fit(logdir, steps, weak_fork_hook):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(128, activation="relu"),
                              keras.layers.Dense(CLASSES)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(ShuffledSet(weak_fork_hook), epochs=max(1, steps // STEPS_PER_EPOCH), verbose=0,
              callbacks=[tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, weak_fork_hook=False)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, weak_fork_hook=True)
