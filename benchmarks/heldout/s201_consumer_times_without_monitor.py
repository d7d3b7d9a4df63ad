"""An online click-through model learns from a message hub: a moksha-style ``Consumer`` decodes each message and records how long it took in ``self._times``, a list that only the hub's ``MonitoringProducer`` ever reads and resets; the monitoring producer is not configured on this trainer, so the consumer keeps one float per message for the whole run (``tf.function`` train step; grows every step, 64 floats a step).

Source: mokshaproject/moksha pull request #57 "prevent a possible memory
leak in Consumer": "The moksha.api.hub.consumer.Consumer class would record
the time taken to process every message by appending it to the _times
list. It assumed the MonitoringProducer would call __json__() every 5
seconds to read out the values and reset the list. If the
MonitoringProducer was not configued to run, which is common, then the
_times list grows forever, causing a memory leak. This change replaces the
list with a deque, with a maximum size of 1024 entries." (also
fedora-infra/fedmsg#515). Fix used here (the PR's):
``collections.deque(maxlen=1024)``.
Summary: each step the consumer takes 64 JSON messages (an impression
with 20 numeric features, a campaign id and a click label) off the hub,
decodes and validates them (the campaign id hashed into 4 extra
features), and the batch trains a 24-64-1 Keras model with one
``GradientTape`` step in a ``tf.function`` (binary cross-entropy, Adam).

Here: 12,000 steps (768,000 messages, replayed from a recorded stream of
8,192). The fixed consumer keeps the last 1,024 timings.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11, numpy 2.4; a do-nothing ``monitor.sample``):
leaky 567.4 / 574.6 / 580.6 / 585.8 / 592.5 MiB RSS at 20 / 40 / 60 / 80 %
/ end (~2.7 KiB a step: 64 floats and their list slots in
``consumer._times``) with gc objects 323,701 -> 323,705 (flat: floats are
not tracked), 14.5 s for 12,000 steps (~1.2 ms a step); fixed 561.4 /
563.9 / 563.9 / 563.9 / 563.9 MiB with objects 323,701 -> 323,705, 14.0 s.
"""
import collections
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/mokshaproject/moksha/pull/57"
SLICE = "holdout17"
STEPS = 12000
BATCH = 64
FEATURES = 20
EXTRA = 4
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["float", "list"],
              "holder_any": ["_times", "Consumer", "consumer"]},
    "fixed": {"verdict_not": "leak"},
}


class Hub:
    """An in-process message hub replaying a recorded stream of impression messages (JSON bodies)."""

    def __init__(self, rng, recorded=8192):
        w = rng.standard_normal(FEATURES) / 2
        x = rng.standard_normal((recorded, FEATURES)).round(4)
        click = (rng.random(recorded) < 1 / (1 + np.exp(-(x @ w - 1.0)))).astype(int)
        self.stream = [json.dumps({"topic": "ads.impression", "msg_id": "imp-%09d" % i,
                                   "body": {"features": x[i].tolist(),
                                            "campaign": "c%05d" % rng.integers(5000),
                                            "click": int(click[i])}}) for i in range(recorded)]
        self.pos = 0

    def fetch(self, n):
        out = self.stream[self.pos:self.pos + n]
        self.pos = (self.pos + n) % len(self.stream)
        return out


class Consumer:
    topic = "ads.impression"

    def __init__(self, bounded_times):
        self._times = collections.deque(maxlen=1024) if bounded_times else []   # the fix / the leak
        self.headcount_in = self.headcount_out = 0

    def __json__(self):
        """What the MonitoringProducer would poll every 5 s (it is not running here)."""
        times = list(self._times)
        self._times.clear()
        return {"name": type(self).__name__, "times": times}

    def _consume(self, raw):
        self.headcount_in += 1
        start = time.perf_counter()
        msg = json.loads(raw)
        body = msg["body"]
        if msg["topic"] != self.topic or len(body["features"]) != FEATURES:
            return None
        h = hash(body["campaign"]) % 9973
        row = body["features"] + [((h >> k) & 7) / 7.0 for k in (0, 3, 6, 9)]
        self._times.append(time.perf_counter() - start)          # one float per message
        self.headcount_out += 1
        return row, body["click"]


def _train(monitor, steps, bounded_times):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    hub = Hub(rng)
    consumer = Consumer(bounded_times)
    model = keras.Sequential([keras.Input((FEATURES + EXTRA,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(1)])
    opt = keras.optimizers.Adam(1e-3)
    bce = keras.losses.BinaryCrossentropy(from_logits=True)

    @tf.function(input_signature=[tf.TensorSpec((None, FEATURES + EXTRA), tf.float32),
                                  tf.TensorSpec((None, 1), tf.float32)])
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = bce(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    for step in range(steps):
        rows, labels = [], []
        for raw in hub.fetch(BATCH):
            out = consumer._consume(raw)
            if out is not None:
                rows.append(out[0])
                labels.append(out[1])
        train_step(tf.constant(np.array(rows, np.float32)), tf.constant(np.array(labels, np.float32)[:, None]))
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, bounded_times=False)


def fixed(monitor, steps):
    _train(monitor, steps, bounded_times=True)
