"""A hyper-parameter search whose trial results keep every trained Keras model.

Source: maxpumperla/hyperas#16 "Memory explosion".
Summary: tuning a mid-size network with hyperas, memory kept rising with the
number of trials until the server killed the job (around 50 trials). The
objective returned ``{'loss': -acc, 'status': STATUS_OK, 'model': model}``, as
many examples do, and hyperopt's ``Trials`` keeps every result dict, so every
trained model (weights and optimizer state) stays alive. The maintainer's fix:
drop the model from the result (return only loss and status) and rebuild the
best configuration afterwards. Both variants start each trial with
``keras.backend.clear_session(free_memory=False)``, the usual practice when
models are built in a loop (see s07), so that only the kept models differ.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/maxpumperla/hyperas/issues/16"
SLICE = "holdout"
# each trial builds and briefly trains a new model (~70 ms on 2 shared cores): 200 trials keep the run in budget.
STEPS = 200            # trials
EXPECT = {
    "leaky": {"verdict": "leak",
              "culprit_any": ["Sequential", "Dense", "Variable", "Trials"]},
    "fixed": {"verdict_not": "leak"},
}

FEATURES = 64
UNITS = (32, 64, 128, 256)
LEARNING_RATES = (1e-2, 3e-2, 1e-1)


class Trials:
    """Stands in for ``hyperopt.Trials``: it keeps every result dict the objective returns."""

    def __init__(self):
        self.results = []

    def best_trial(self):
        return min(range(len(self.results)), key=lambda i: self.results[i]["loss"])


def _data():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((FEATURES, 1)).astype(np.float32)
    x = rng.standard_normal((512, FEATURES)).astype(np.float32)
    y = np.tanh(x @ w) + 0.1 * rng.standard_normal((512, 1)).astype(np.float32)
    return tf.constant(x[:384]), tf.constant(y[:384]), tf.constant(x[384:]), tf.constant(y[384:])


def _train_trial(params, data):
    x, y, x_val, y_val = data
    keras.backend.clear_session(free_memory=False)
    model = keras.Sequential([
        keras.Input(shape=(FEATURES,)),
        keras.layers.Dense(params["units"], activation="relu"),
        keras.layers.Dense(1),
    ])
    opt = keras.optimizers.SGD(params["lr"])
    for i in range(2):                               # a very short training budget per trial
        xb, yb = x[i * 128:(i + 1) * 128], y[i * 128:(i + 1) * 128]
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(xb, training=True) - yb))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
    val_loss = float(tf.reduce_mean(tf.square(model(x_val, training=False) - y_val)))
    return model, val_loss


def _params(trial):
    return {"units": UNITS[trial % len(UNITS)], "lr": LEARNING_RATES[(trial // len(UNITS)) % len(LEARNING_RATES)]}


def leaky(monitor, steps):
    data = _data()
    trials = Trials()
    for trial in range(steps):
        params = _params(trial)
        model, val_loss = _train_trial(params, data)
        trials.results.append({"loss": val_loss, "status": "ok", "model": model})
        monitor.sample(trial)


def fixed(monitor, steps):
    data = _data()
    trials = Trials()
    for trial in range(steps):
        params = _params(trial)
        _, val_loss = _train_trial(params, data)
        trials.results.append({"loss": val_loss, "status": "ok"})     # params are known from the trial index
        monitor.sample(trial)
