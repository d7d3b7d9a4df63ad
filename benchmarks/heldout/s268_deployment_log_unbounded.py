"""An online-learning job retrains a click-through ranker every step (``tf.function`` train step) and lets a model registry written like ``ml_model_registry.py`` in Eshajha19/agri shift canary traffic after each update; the registry appends an event dict for every deploy, promote, rollback and traffic shift to ``self.deployment_log``, a plain ``list`` that ``get_deployment_history(limit=20)`` only ever reads the tail of, so one event (with its metrics dict and strings) is kept per step for the rest of the run (TensorFlow ``tf.function``; grows every step, ~1.2 KiB and one tracked object a step).

Source: Eshajha19/agri issue #1635 "ml_model_registry.py - deployment_log
list grows unbounded causing memory leak in long-running workers" and pull
request #1675 (merged, "fixes #1635"): "``self.deployment_log`` was a plain
list with no size cap. Every deploy, promote, rollback, and traffic-shift
event appended to it indefinitely. ``get_deployment_history()`` only sliced
the last N entries for reads but never pruned the stored list". Fix used
here (the PR's): ``self.deployment_log = deque(maxlen=1000)``; it fills in
the first ~17 % of the run and then holds 1,000 events.
Summary: the registry is a stand-in with the reported shape: ``deploy``,
``promote``, ``rollback`` and ``shift_traffic`` record ``{"timestamp",
"model_name", "version", "action", ...}`` dicts; the canary controller calls
``shift_traffic`` after every update (and ``promote`` / ``rollback`` when the
canary loss crosses the incumbent's), and a dashboard reads
``get_deployment_history(limit=20)`` every 50 steps. The model is a Keras
40-64-32-1 ranker on synthetic click logs (batches of 2,048, Adam).

Here: 6,000 steps. The fixed registry keeps a ``deque(maxlen=1000)``.
"""
import collections
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/Eshajha19/agri/issues/1635"
SLICE = "holdout23"
STEPS = 6000
BATCH = 2048
FEATURES = 40
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["dict", "str", "float"],
              "holder_any": ["deployment_log", "MLModelRegistry"]},
    "fixed": {"verdict_not": "leak"},
}


class MLModelRegistry:
    def __init__(self, bounded):
        self.deployment_log = collections.deque(maxlen=1000) if bounded else []
        self.versions = {}
        self.live = None
        self.canary = None

    def _record(self, model_name, action, **extra):
        event = {"timestamp": time.time(), "model_name": model_name, "action": action}
        event.update(extra)
        self.deployment_log.append(event)

    def deploy(self, model_name, version, metrics):
        self.versions[version] = dict(metrics)
        self.canary = version
        self._record(model_name, "deploy", version="v%05d" % version, metrics=dict(metrics))

    def promote(self, model_name, version):
        self.live = version
        self._record(model_name, "promote", version="v%05d" % version, previous="v%05d" % (self.live or 0))

    def rollback(self, model_name, version):
        self._record(model_name, "rollback", version="v%05d" % version, reason="canary loss above incumbent")

    def shift_traffic(self, model_name, version, fraction, metrics):
        self._record(model_name, "traffic_shift", version="v%05d" % version, traffic=round(fraction, 4),
                     metrics={k: round(v, 5) for k, v in metrics.items()},
                     route="canary-%s-%d" % (model_name, version % 7))

    def get_deployment_history(self, model_name, limit=20):
        return [e for e in self.deployment_log if e["model_name"] == model_name][-limit:]


def _run(monitor, steps, bounded):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    w_true = rng.standard_normal(FEATURES).astype(np.float32)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)])
    opt = keras.optimizers.Adam(1e-3)
    loss_fn = keras.losses.BinaryCrossentropy(from_logits=True)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    registry = MLModelRegistry(bounded)
    name = "ctr-ranker"
    registry.deploy(name, 0, {"loss": 0.69})
    registry.promote(name, 0)
    incumbent = collections.deque(maxlen=50)
    canary = collections.deque(maxlen=50)
    shown = []
    for step in range(steps):
        x = rng.standard_normal((BATCH, FEATURES)).astype(np.float32)
        y = (x @ w_true + 0.5 * rng.standard_normal(BATCH) > 0).astype(np.float32)[:, None]
        loss = float(train_step(x, y))
        canary.append(loss)
        incumbent.append(loss * (1.0 + 0.02 * rng.standard_normal()))
        version = step // 100 + 1
        if step % 100 == 0:
            registry.deploy(name, version, {"loss": loss})
        fraction = min(1.0, (step % 100 + 1) / 100.0)
        registry.shift_traffic(name, version, fraction,
                               {"loss": loss, "canary_mean": float(np.mean(canary)),
                                "incumbent_mean": float(np.mean(incumbent))})
        if step % 100 == 99:
            if np.mean(canary) <= np.mean(incumbent):
                registry.promote(name, version)
            else:
                registry.rollback(name, version)
        if step % 50 == 0:
            shown = registry.get_deployment_history(name, limit=20)
        monitor.sample(step)
    return len(shown)


def leaky(monitor, steps):
    _run(monitor, steps, bounded=False)


def fixed(monitor, steps):
    _run(monitor, steps, bounded=True)
