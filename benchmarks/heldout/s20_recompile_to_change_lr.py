"""Re-compiling the model every epoch to set a new learning rate.

Source: keras-team/keras#8457 "Change lr without recompiling the model" (same
symptom in keras-team/keras#16320 / tensorflow/tensorflow#55398 "Calling
`model.compile()` multiple times leads to memory leak").
Summary: a custom training loop (``train_on_batch``) decays the learning rate
per epoch by calling ``model.compile`` with a new optimizer; every compile
throws away the traced train function and the next batch traces a new one,
while the old graphs stay alive, and the job runs out of memory after enough
re-compiles. The answer (fchollet): do not re-compile, set the optimizer's
learning rate in place (``K.set_value(model.optimizer.lr, value)``; Keras 3:
``model.optimizer.learning_rate.assign(value)``), as the
``LearningRateScheduler`` callback does.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/keras-team/keras/issues/8457"
SLICE = "holdout"
# a re-compile (and the trace that follows it, ~0.3 s on 2 shared cores) every 10 batches:
# 400 batches keep the run in budget.
STEPS = 400            # batches
STEPS_PER_EPOCH = 10
EXPECT = {
    "leaky": {"verdict": "leak",
              "culprit_any": ["retracing", "traces", "ConcreteFunction", "FuncGraph", "train_function",
                              "Operation", "SymbolicTensor"]},
    "fixed": {"verdict_not": "leak"},
}


def _setup():
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((STEPS_PER_EPOCH * 32, 16)).astype(np.float32)
    y = (x[:, :4].sum(axis=1, keepdims=True) > 0).astype(np.float32)
    model = keras.Sequential([
        keras.Input(shape=(16,)),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(1, activation="sigmoid"),
    ])
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="binary_crossentropy")
    return model, x, y


def _lr(epoch):
    return 1e-2 * 0.9 ** epoch


def _loop(monitor, steps, set_lr):
    model, x, y = _setup()
    for step in range(steps):
        epoch, batch = divmod(step, STEPS_PER_EPOCH)
        if batch == 0 and epoch > 0:
            set_lr(model, _lr(epoch))
        s = slice(batch * 32, (batch + 1) * 32)
        model.train_on_batch(x[s], y[s])
        monitor.sample(step)


def _recompile(model, lr):
    model.compile(optimizer=keras.optimizers.Adam(lr), loss="binary_crossentropy")


def _assign(model, lr):
    model.optimizer.learning_rate.assign(lr)


def leaky(monitor, steps):
    _loop(monitor, steps, _recompile)


def fixed(monitor, steps):
    _loop(monitor, steps, _assign)
