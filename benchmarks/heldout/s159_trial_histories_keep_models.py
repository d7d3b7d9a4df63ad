"""A small hyper-parameter search trains a fresh Keras classifier per trial with ``model.fit`` and keeps each trial's return value, the ``History`` callback, in a list to pick the best trial at the end; a ``History`` keeps ``history.model``, so the list keeps every trial's model (its weights, optimizer slots and traced train function) alive (Keras ``model.fit`` per trial; one trial every 60 batches).

Source: matterport/Mask_RCNN PR #1507 "Return history object after the
training", where a reviewer warned: "One thing to note is that
``history`` has a ``history.model`` member, which points to the model.
This leads to python garbage collection not releasing the GPU handles
for the model, if you delete ``model`` without deleting ``history``";
keras-team/keras#646 (fchollet): "You will pretty much never need the
``History`` object, what you are most likely looking for is the
``History.history`` attribute, which is a simple data dictionary."
Fix used here (the thread's): keep ``history.history`` (a dict of
per-epoch floats) and drop the ``History`` object.
Summary: each trial draws a learning rate, builds a
64-256-10 MLP, trains it for 3 epochs of 20 batches and records the
result; ``keras.backend.clear_session()`` is called before each build,
as search loops usually do, and does not help because the list still
references the models. The trials compile with ``run_eagerly=True``, the
workaround suggested in tensorflow/tensorflow#43702 for TensorFlow's own
per-model graph growth (with compiled train functions every trial's
traced graph stays behind even without the list, ~4 MiB a trial here),
so that only the kept ``History`` objects grow.

Here: 40 trials of 60 batches (2,400 batches),
batches of 64 x 64 float32; ``monitor.sample`` is called once per
batch from a one-line callback. The fixed twin keeps only the dicts.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4, TF 2.21 / Keras 3.15; a do-nothing ``monitor.sample``): leaky
559.4 / 563.7 / 566.8 / 570.7 / 574.5 MiB RSS at 20 / 40 / 60 / 80 % /
end (~0.45 MiB a trial) with gc objects 324,279 / 331,215 / 338,151 /
345,087 / 352,023 (867 a trial: the model, its layers, variables and
optimizer), 45.4 s for 2,400 batches (~17 ms a batch, eager); fixed
557.3 / 559.9 / 558.1 / 560.7 / 561.4 MiB with objects 319,089 /
319,105 / 319,121 / 319,137 / 319,153 (two a trial: the kept dict and
its loss list), 42.7 s. The fixed twin's RSS moves within about 2 MiB
without a trend (a 4,800-batch check: 559.3 / 559.8 / 560.2 / 560.0 /
562.8 MiB, objects 319,105 -> 319,233): eager allocations of each new
model, not a growth; its gc counts are flat but for the dicts.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import keras

SOURCE = "https://github.com/matterport/Mask_RCNN/pull/1507"
SLICE = "holdout14"
STEPS = 2400           # batches; 60 per trial
BATCHES_PER_EPOCH = 20
EPOCHS_PER_TRIAL = 3
BATCH = 64
FEATURES = 64
CLASSES = 10
WIDTH = 256
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["History", "Sequential", "Dense", "Variable", "Model",
                                                 "native", "function"],
              "holder_any": ["histories", "model"]},
    "fixed": {"verdict_not": "leak"},
}


class _Sampler(keras.callbacks.Callback):
    def __init__(self, monitor, start):
        super().__init__()
        self.monitor = monitor
        self.step = start

    def on_train_batch_end(self, batch, logs=None):
        self.monitor.sample(self.step)
        self.step += 1


def _search(monitor, steps, keep_history_object):
    rng = np.random.default_rng(0)
    n = BATCHES_PER_EPOCH * BATCH
    centers = rng.normal(size=(CLASSES, FEATURES)).astype(np.float32)
    y = rng.integers(0, CLASSES, n)
    x = centers[y] + rng.standard_normal((n, FEATURES), dtype=np.float32)
    per_trial = BATCHES_PER_EPOCH * EPOCHS_PER_TRIAL
    histories = []
    step = 0
    for trial in range(max(1, steps // per_trial)):
        keras.backend.clear_session()
        width = WIDTH
        lr = float(10 ** rng.uniform(-3, -1.5))
        model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(width, activation="relu"),
                                  keras.layers.Dense(CLASSES)])
        model.compile(optimizer=keras.optimizers.Adam(lr),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      run_eagerly=True)               # no per-model traced graphs (tensorflow#43702)
        sampler = _Sampler(monitor, step)
        history = model.fit(x, y, batch_size=BATCH, epochs=EPOCHS_PER_TRIAL, verbose=0, shuffle=True,
                            callbacks=[sampler])
        step = sampler.step
        if keep_history_object:
            histories.append(history)                 # the leak: History.model keeps the whole model
        else:
            histories.append(history.history)         # the fix: only the per-epoch numbers
        del model, history
    final = [h.history["loss"][-1] if keep_history_object else h["loss"][-1] for h in histories]
    return int(np.argmin(final))


def leaky(monitor, steps):
    _search(monitor, steps, keep_history_object=True)


def fixed(monitor, steps):
    _search(monitor, steps, keep_history_object=False)
