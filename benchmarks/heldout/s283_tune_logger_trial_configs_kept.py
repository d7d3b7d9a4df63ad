"""A random hyperparameter search runs many short trials of a ``tf.function`` regression step under a trial runner whose default logger callbacks are written like Ray Tune's before the fix discussed in issue #64231: ``JsonLoggerCallback._trial_configs`` maps every ``Trial`` to its config and is written in ``update_config()`` but never deleted in ``log_trial_end()``, and ``CSVLoggerCallback._trial_continue`` keeps a flag per trial, so every finished trial stays pinned with its config, last result and metric history (TensorFlow ``tf.function``; ~1.1 KiB a trial, a trial every 4 steps, ~0.3 KiB a step).

Source: ray-project/ray issue #64231 "[Tune] Ray Tune memory leak: RSS
grows linearly with trial count in tune.run()" (open), follow-up
investigation: "Default auto loggers pin every ``Trial`` -
``JsonLoggerCallback._trial_configs: Dict[Trial, Dict]`` - written in
``update_config()``, never deleted in ``log_trial_end()`` (only the file
handle is closed). ``CSVLoggerCallback._trial_continue: Dict[Trial, bool]``
- left behind after ``log_trial_end()``." Fix used here (the one that
investigation points to for the loggers): ``log_trial_end`` pops the trial
from both dicts; the runner here keeps only the best trial, so finished
trials are freed.
Summary: the runner and callbacks are stand-ins with Tune's shape
(``Trial`` with ``trial_id``, ``config``, ``last_result`` and a metric
history; ``JsonLoggerCallback`` and ``CSVLoggerCallback`` with
``log_trial_start``, ``log_trial_result``, ``log_trial_end`` writing to
in-memory sinks). Each trial samples a learning rate, weight decay and
noise scale, re-initialises a 32-feature linear model's variables (no
retracing: hyperparameters are variables) and runs 4 ``tf.function``
steps on batches of 256.

Here: 24,000 steps (6,000 trials). The fixed callbacks forget each trial
at its end.
"""
import collections
import io
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

SOURCE = "https://github.com/ray-project/ray/issues/64231"
SLICE = "holdout24"
STEPS = 24000
STEPS_PER_TRIAL = 4
BATCH = 256
FEATURES = 32
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["Trial", "dict", "float", "list"],
              "holder_any": ["_trial_configs", "_trial_continue", "JsonLoggerCallback", "CSVLoggerCallback"]},
    "fixed": {"verdict_not": "leak"},
}


class Trial:
    def __init__(self, trial_id, config):
        self.trial_id = trial_id
        self.config = config
        self.status = "PENDING"
        self.last_result = {}
        self.metric_history = []
        self.logdir = "/tmp/ray_results/search/trial_%s" % trial_id

    def __hash__(self):
        return hash(self.trial_id)

    def __eq__(self, other):
        return isinstance(other, Trial) and other.trial_id == self.trial_id


class JsonLoggerCallback:
    def __init__(self, forget_on_end):
        self.forget_on_end = forget_on_end
        self._trial_configs = {}
        self._trial_files = {}

    def update_config(self, trial, config):
        self._trial_configs[trial] = config

    def log_trial_start(self, trial):
        self.update_config(trial, trial.config)
        self._trial_files[trial] = io.StringIO()

    def log_trial_result(self, iteration, trial, result):
        self._trial_files[trial].write(json.dumps(result) + "\n")

    def log_trial_end(self, trial, failed=False):
        self._trial_files.pop(trial).close()               # only the file handle is closed ...
        if self.forget_on_end:
            self._trial_configs.pop(trial, None)          # ... the fix drops the config entry too


class CSVLoggerCallback:
    def __init__(self, forget_on_end):
        self.forget_on_end = forget_on_end
        self._trial_continue = {}
        self._trial_csv = {}

    def log_trial_start(self, trial):
        self._trial_continue[trial] = False
        self._trial_csv[trial] = io.StringIO()

    def log_trial_result(self, iteration, trial, result):
        if not self._trial_continue[trial]:
            self._trial_csv[trial].write(",".join(result) + "\n")
            self._trial_continue[trial] = True
        self._trial_csv[trial].write(",".join(str(v) for v in result.values()) + "\n")

    def log_trial_end(self, trial, failed=False):
        self._trial_csv.pop(trial).close()
        if self.forget_on_end:
            self._trial_continue.pop(trial, None)


def _run(monitor, steps, forget):
    tf.random.set_seed(0)
    rng = np.random.default_rng(0)
    true_w = rng.standard_normal((FEATURES, 1)).astype(np.float32)
    w = tf.Variable(tf.zeros((FEATURES, 1)))
    b = tf.Variable(0.0)
    lr = tf.Variable(0.01)
    wd = tf.Variable(0.0)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            pred = tf.matmul(x, w) + b
            loss = tf.reduce_mean(tf.square(pred - y)) + wd * tf.reduce_sum(tf.square(w))
        gw, gb = tape.gradient(loss, [w, b])
        w.assign_sub(lr * gw)
        b.assign_sub(lr * gb)
        return loss

    callbacks = [JsonLoggerCallback(forget), CSVLoggerCallback(forget)]
    best = None
    trial = None
    recent = collections.deque(maxlen=50)
    for step in range(steps):
        k = step % STEPS_PER_TRIAL
        if k == 0:
            config = {"lr": float(10 ** rng.uniform(-3, -1)), "weight_decay": float(10 ** rng.uniform(-6, -2)),
                      "noise": float(rng.uniform(0.05, 0.5)), "batch_size": BATCH, "model": "linear",
                      "features": FEATURES, "seed": int(rng.integers(1 << 30))}
            trial = Trial("%05d_%08x" % (step // STEPS_PER_TRIAL, config["seed"]), config)
            trial.status = "RUNNING"
            lr.assign(config["lr"])
            wd.assign(config["weight_decay"])
            w.assign(tf.zeros((FEATURES, 1)))
            b.assign(0.0)
            for cb in callbacks:
                cb.log_trial_start(trial)
        x = rng.standard_normal((BATCH, FEATURES)).astype(np.float32)
        y = x @ true_w + trial.config["noise"] * rng.standard_normal((BATCH, 1)).astype(np.float32)
        loss = float(train_step(tf.constant(x), tf.constant(y)))
        result = {"training_iteration": k + 1, "loss": loss, "trial_id": trial.trial_id,
                  "time_this_iter_s": 0.001, "done": k == STEPS_PER_TRIAL - 1}
        trial.last_result = result
        trial.metric_history.append(loss)
        for cb in callbacks:
            cb.log_trial_result(k + 1, trial, result)
        if k == STEPS_PER_TRIAL - 1:
            trial.status = "TERMINATED"
            for cb in callbacks:
                cb.log_trial_end(trial)
            recent.append(loss)
            if best is None or loss < best.last_result["loss"]:
                best = trial                                   # the runner keeps only the best trial
        monitor.sample(step)


def leaky(monitor, steps):
    _run(monitor, steps, forget=False)


def fixed(monitor, steps):
    _run(monitor, steps, forget=True)
