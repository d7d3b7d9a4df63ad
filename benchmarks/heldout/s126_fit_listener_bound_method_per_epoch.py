"""Once calibration starts (after 40 % of the epochs), a callback builds a temperature-scaling head every epoch and the head subscribes its bound method to a shared, observable temperature parameter; the parameter's listener list holds each head strongly, so every epoch's head and its copy of the validation logits stay alive (``model.fit``; late onset, grows once an epoch).

Source: limix/glimix-core#14 "Memory leak due to bound callback" ("LMM
passes a bound method as a callback to an optimix Scalar /
ndarray-listener. I believe this leads to a memory leak as
instantiations of LMM will not be removed by the GC unless _logistic is
de-referenced as well"; the maintainer's fix in limix/ndarray-listener
9c52cbc: listeners held through weak references), and
pyepics/pyepics#10 ("Callbacks are added to ca._cache, and any callback
that is a bound method holds a reference back to the object it's bound
to ... no PV object with callbacks is ever garbage collected"). Fix:
the observable keeps ``weakref.WeakMethod`` listeners and drops dead
ones when it notifies.
Summary: a classifier is trained with ``model.fit``; its callback
calibrates confidence on a held-out set. The shared ``Observable``
temperature (a 1-element array wrapper reused across epochs so the
dashboard can follow it) notifies listeners on every change. From 40 %
of the epochs on, ``on_epoch_end`` predicts the held-out set, builds a
``TemperatureHead(logits, labels)`` that fits the temperature by a few
steps of gradient descent and calls ``temperature.listen(self._on_change)``.
The head is dropped after the epoch, but the listener list keeps the
bound method, so each epoch leaves a head with 4,096 x 10 float32 logits
(160 KiB) and its labels.

Here: 64 features, a 64-128-10 Keras MLP, 50 batches of 32 an epoch, 80
epochs; a 4,096-sample held-out set. The fixed twin's ``Observable``
stores ``WeakMethod``s.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11; ``LeakCallback`` replaced by a stub callback): leaky
570.4 / 570.5 / 581.5 MiB RSS at 20 % / 40 % / end (the onset is at 40 %
of the epochs: +11.0 MiB over the last 48 epochs, ~230 KiB an epoch, in
steps at each epoch end) with gc objects 326,981 / 326,981 / 327,586, and
the epoch-end time growing as every kept head recomputes its loss at each
notification (16.8 s for 4,000 batches); fixed 570.4 / 570.5 / 574.2 MiB
(the first ``predict_on_batch`` and a few MiB of allocator warm-up at the
onset, then flat), objects 326,981 / 326,981 / 327,499 (the predict
trace); ~1.5 ms a batch (6.0 s).
"""
import os
import weakref

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/limix/glimix-core/issues/14"
SLICE = "holdout10"
STEPS = 4000           # batches; 50 per epoch, 80 epochs
STEPS_PER_EPOCH = 50
CALIBRATE_FROM = 0.4   # fraction of the epochs before calibration starts
BATCH = 32
FEATURES = 64
CLASSES = 10
HELD_OUT = 4096
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["TemperatureHead", "ndarray", "numpy", "method"],
              "holder_any": ["_listeners", "Observable", "temperature"]},
    "fixed": {"verdict_not": "leak"},
}


class Observable:
    def __init__(self, value, weak):
        self.value = np.array([value], np.float64)
        self.weak = weak
        self._listeners = []

    def listen(self, method):
        self._listeners.append(weakref.WeakMethod(method) if self.weak else method)

    def set(self, value):
        self.value[0] = value
        alive = []
        for listener in self._listeners:
            fn = listener() if self.weak else listener
            if fn is None:
                continue                                  # the fix: dead listeners dropped
            alive.append(listener)
            fn(self.value)
        self._listeners = alive


class TemperatureHead:
    def __init__(self, logits, labels, temperature):
        self.logits, self.labels = logits, labels
        self.temperature = temperature
        self.nll = None
        temperature.listen(self._on_change)

    def _on_change(self, value):
        z = self.logits / value[0]
        z = z - z.max(1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(1, keepdims=True))
        self.nll = float(-logp[np.arange(len(self.labels)), self.labels].mean())

    def fit(self, steps=5, lr=0.05):
        t = float(self.temperature.value[0])
        for _ in range(steps):
            self.temperature.set(t)
            base = self.nll
            self.temperature.set(t + 1e-3)
            t = max(0.05, t - lr * (self.nll - base) / 1e-3)
        self.temperature.set(t)
        return t


class Calibrate(keras.callbacks.Callback):
    def __init__(self, x, y, start_epoch, weak):
        super().__init__()
        self.x, self.y, self.start_epoch = x, y, start_epoch
        self.temperature = Observable(1.0, weak)
        self.history = []

    def on_epoch_end(self, epoch, logs=None):
        if epoch < self.start_epoch:
            return
        logits = self.model.predict_on_batch(self.x)
        head = TemperatureHead(np.asarray(logits), self.y, self.temperature)
        self.history.append(head.fit())
        self.history = self.history[-5:]


class Stream(keras.utils.PyDataset):
    def __init__(self, centers, **kwargs):
        super().__init__(**kwargs)
        self.centers = centers
        self.rng = np.random.default_rng(1)

    def __len__(self):
        return STEPS_PER_EPOCH

    def __getitem__(self, idx):
        y = self.rng.integers(0, CLASSES, BATCH)
        return self.centers[y] + self.rng.standard_normal((BATCH, FEATURES), dtype=np.float32), y


def _fit(logdir, steps, weak):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(CLASSES, FEATURES)).astype(np.float32)
    hy = rng.integers(0, CLASSES, HELD_OUT)
    hx = centers[hy] + 1.5 * rng.standard_normal((HELD_OUT, FEATURES), dtype=np.float32)
    epochs = max(1, steps // STEPS_PER_EPOCH)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(128, activation="relu"),
                              keras.layers.Dense(CLASSES)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(Stream(centers), epochs=epochs, verbose=0,
              callbacks=[Calibrate(hx, hy, int(epochs * CALIBRATE_FROM), weak),
                         tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, weak=False)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, weak=True)
