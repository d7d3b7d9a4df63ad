"""Cross-validation builds a new model object per fold whose train step is a ``@tf.function``-decorated method; each fold traces the method again for the new instance, and the traced graphs (with the fold's model and optimizer state they capture) stay alive after the model is deleted and the Keras session cleared, so memory and live objects step up once a fold (``tf.function`` method; grows in bursts).

Source: tensorflow/tensorflow#62854 "RAM memory leak with tf.function
when training multiple models in a loop" ("When I train multiple models
in a loop, if I decorate the ``train()`` function with ``@tf.function``,
then the memory usage keeps on increasing after each loop iteration,
even when I delete the model at the end of each loop and clear the
TensorFlow graph/session. The memory leak does not occur when
``@tf.function`` is removed"; the report's ``MyModel`` holds a
``tf.keras.Sequential`` and an Adam optimizer and decorates its
``train`` method). Still reproducible with TF 2.21 / Keras 3.15. Fix
used here: build the model, its optimizer and the traced step once and
reset them per fold (initial weights restored, optimizer slots zeroed),
so there is one trace for the whole run.
Summary: 5-fold-style cross-validation repeated over many random splits
(60 folds in all) of a tabular regression set. Each fold creates
``FoldModel()`` (a 32-128-128-1 MLP and Adam) and calls its decorated
``train`` for 200 batches, then evaluates and deletes the model (with
``keras.backend.clear_session()``). Every fold leaves its traced
function behind: ~1.5 MiB and ~2,100 objects a fold.

Here: 32 features, batches of 128, 200 steps a fold, 60 folds. The fixed
twin keeps one ``FoldModel`` and resets it at each fold.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21
/ Keras 3.15 / Python 3.11; a do-nothing ``monitor.sample``): leaky
574.8 / 592.9 / 646.5 MiB RSS at 20 % / 40 % / end (~1.5 MiB a fold, at
each new fold's first step) with gc objects 342,090 / 367,134 / 442,266
(~2,090 a fold); fixed 558.9 / 560.7 / 561.4 MiB, objects flat
(319,260); ~2.4 ms a batch leaky including a ~0.3 s trace per fold (29.4
s for 12,000 batches), ~0.5 ms fixed (6.2 s).
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/tensorflow/tensorflow/issues/62854"
SLICE = "holdout11"
STEPS = 12000          # training batches; 200 per fold, 60 folds
STEPS_PER_FOLD = 200
BATCH = 128
FEATURES = 32
ROWS = 4096
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["ConcreteFunction", "FuncGraph", "SymbolicTensor", "Operation",
                                                 "traces", "retrac", "FoldModel"]},
    "fixed": {"verdict_not": "leak"},
}


class FoldModel:
    def __init__(self):
        self.dnn = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(128, activation="relu"),
                                     keras.layers.Dense(128, activation="relu"), keras.layers.Dense(1)])
        self.optimizer = keras.optimizers.Adam(1e-3)
        self.optimizer.build(self.dnn.trainable_variables)
        self.initial = [w.copy() for w in self.dnn.get_weights()]

    @tf.function
    def train(self, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((self.dnn(x, training=True) - y) ** 2)
        grads = tape.gradient(loss, self.dnn.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.dnn.trainable_variables))
        return loss

    def reset(self):
        self.dnn.set_weights(self.initial)
        for v in self.optimizer.variables:
            v.assign(tf.zeros_like(v))


def _train(monitor, steps, reuse):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    w_true = rng.normal(size=(FEATURES, 1)).astype(np.float32)
    X = rng.standard_normal((ROWS, FEATURES), dtype=np.float32)
    Y = (np.tanh(X @ w_true) + 0.1 * rng.standard_normal((ROWS, 1))).astype(np.float32)
    shared = FoldModel() if reuse else None
    model = None
    scores = []
    for step in range(steps):
        if step % STEPS_PER_FOLD == 0:
            if model is not None:
                held = model.dnn(X[val_idx], training=False)
                scores.append(float(tf.reduce_mean((held - Y[val_idx]) ** 2)))
            perm = rng.permutation(ROWS)
            train_idx, val_idx = perm[ROWS // 5:], perm[:ROWS // 5]
            if reuse:
                shared.reset()                                  # the fix: one model, one trace
                model = shared
            else:
                del model
                keras.backend.clear_session()
                model = FoldModel()                             # the leak: a new traced method per fold
        idx = rng.choice(train_idx, BATCH)
        model.train(tf.constant(X[idx]), tf.constant(Y[idx]))
        monitor.sample(step)
    return scores


def leaky(monitor, steps):
    _train(monitor, steps, reuse=False)


def fixed(monitor, steps):
    _train(monitor, steps, reuse=True)
