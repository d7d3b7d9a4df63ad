"""An eager image-classifier loop publishes a "training health" event every step (the loss, per-variable gradient norms and a slice of penultimate activations, all as ``EagerTensor``s) on a Prefect-style in-memory message broker; the log writer drains its subscription every step, but the anomaly monitor's subscription was created at start-up while its consumer only runs with ``--monitor``, so its unbounded queue keeps every event and the tensors in it (eager TensorFlow; grows every step, ~20 KiB of tensors a step).

Source: PrefectHQ/prefect pull request #19136 "Mitigate memory leak in
in-memory messaging system": "Fixes a potential memory leak in the Prefect
server when running without Redis by capping the in-memory queue size. This
doesn't fix the underlying problem where consumers are not pulling messages
off the queue, but it should prevent memory bloat with clear logging where
the failure is happening. ... Added bounded queues (10k main, 1k retry) ...
Added ``Consumer.cleanup()`` method to unsubscribe from topics ... Messages
dropped gracefully with warnings when queues are full" (related #18605).
Fix used here (the PR's): subscriptions get a bounded queue (100 messages
here), a full queue drops the message and counts it, and ``cleanup()``
unsubscribes at shutdown.
Summary: a small CNN (two 3x3 convolutions of 8 and 16 channels, max
pooling, a 128-unit dense layer, 10 classes) trained eagerly with
``GradientTape`` and SGD with momentum on batches of 32 synthetic 32x32x3 images (class
templates plus noise); each step's event holds the loss, 8 gradient norms,
the 32x10 logits and a 32x64 slice of the dense activations.

Here: 1,000 steps. The fixed broker's queues hold at most 100 messages.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11, numpy 2.4; a do-nothing ``monitor.sample``):
leaky 566.0 / 569.4 / 571.9 / 575.5 / 579.8 MiB RSS at 20 / 40 / 60 / 80 %
/ end (~18 KiB a step: a message with 11 eager tensors in the anomaly
monitor's queue) with gc objects 318,798 / 321,800 / 324,799 / 327,799 /
330,799 (~15 a step), 23.5 s for 1,000 steps (~23 ms a step); fixed 562.6
/ 562.7 / 562.7 / 562.7 / 563.9 MiB (the 100-message queue is full from
step 100) with objects 317,267 -> 317,270, 23.0 s; a fixed run of 2,500
steps crept by 1.0 MiB (563.3 -> 564.3 MiB, objects flat), allocator drift
of the eager step.
"""
import collections
import os
import queue

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/PrefectHQ/prefect/pull/19136"
SLICE = "holdout17"
STEPS = 1000
BATCH = 32
CLASSES = 10
QUEUE_BOUND = 100
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["EagerTensor", "Tensor", "dict", "deque", "Message"],
              "holder_any": ["_queue", "queue", "Subscription", "broker", "subscriptions"]},
    "fixed": {"verdict_not": "leak"},
}


class Message:
    __slots__ = ("topic", "data", "attributes")

    def __init__(self, topic, data, attributes):
        self.topic, self.data, self.attributes = topic, data, attributes


class Subscription:
    def __init__(self, name, bounded):
        self.name = name
        self._queue = queue.Queue(maxsize=QUEUE_BOUND) if bounded else queue.Queue()
        self.dropped = 0

    def deliver(self, message):
        try:
            self._queue.put_nowait(message)
        except queue.Full:                                     # the fix: drop, count, warn once
            self.dropped += 1

    def get_nowait(self):
        return self._queue.get_nowait()


class Broker:
    """An in-memory topic broker (the no-Redis mode)."""

    def __init__(self, bounded):
        self.bounded = bounded
        self.subscriptions = collections.defaultdict(list)

    def subscribe(self, topic, name):
        sub = Subscription(name, self.bounded)
        self.subscriptions[topic].append(sub)
        return sub

    def unsubscribe(self, topic, sub):
        self.subscriptions[topic].remove(sub)

    def publish(self, topic, data, **attributes):
        msg = Message(topic, data, attributes)
        for sub in self.subscriptions[topic]:
            sub.deliver(msg)


class LogWriter:
    def __init__(self, sub):
        self.sub = sub
        self.lines = collections.deque(maxlen=200)

    def drain(self):
        while True:
            try:
                msg = self.sub.get_nowait()
            except queue.Empty:
                return
            self.lines.append("step=%d loss=%.4f" % (msg.attributes["step"], float(msg.data["loss"])))


def _images(rng, templates, n):
    y = rng.integers(CLASSES, size=n)
    x = templates[y] + 0.8 * rng.standard_normal((n, 32, 32, 3)).astype(np.float32)
    return x, y


def _train(monitor, steps, bounded):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    templates = rng.standard_normal((CLASSES, 32, 32, 3)).astype(np.float32)
    inp = keras.Input((32, 32, 3))
    h = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(inp)
    h = keras.layers.MaxPooling2D(2)(h)
    h = keras.layers.Conv2D(16, 3, padding="same", activation="relu")(h)
    h = keras.layers.MaxPooling2D(4)(h)
    acts_out = keras.layers.Dense(128, activation="relu")(keras.layers.Flatten()(h))
    model = keras.Model(inp, [keras.layers.Dense(CLASSES)(acts_out), acts_out])
    momenta = [tf.Variable(tf.zeros_like(v)) for v in model.trainable_variables]
    xent = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    broker = Broker(bounded)
    log = LogWriter(broker.subscribe("training.health", "log-writer"))
    anomaly = broker.subscribe("training.health", "anomaly-monitor")   # its consumer never starts
    for step in range(steps):
        x, y = _images(rng, templates, BATCH)
        with tf.GradientTape() as tape:
            logits, acts = model(x, training=True)
            loss = xent(y, logits)
        grads = tape.gradient(loss, model.trainable_variables)
        for v, g, m in zip(model.trainable_variables, grads, momenta):   # SGD with momentum
            m.assign(0.9 * m + g)
            v.assign_sub(0.01 * m)
        broker.publish("training.health", {"loss": loss, "grad_norms": [tf.norm(g) for g in grads],
                                           "logits": logits, "activations": acts[:, :64]},
                       step=step, run="cnn-health")
        log.drain()
        monitor.sample(step)
    if bounded:
        broker.unsubscribe("training.health", anomaly)                  # the fix's cleanup()


def leaky(monitor, steps):
    _train(monitor, steps, bounded=False)


def fixed(monitor, steps):
    _train(monitor, steps, bounded=True)
