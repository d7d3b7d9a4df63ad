"""A hard-example dashboard subscribes to the trainer's event bus with a bounded queue and coalesces ``UPDATED`` events per example id in ``latest_by_key``; the subscriber writes the dict entry before ``put_nowait`` and keeps it when the put fails on a full queue, so once the dashboard starts falling behind (from 35 % of the run, when it begins rendering per-example curves) every example id whose update hits the full queue leaves its event stranded in ``latest_by_key`` forever (numpy, no TensorFlow; late onset, grows a few events a step).

Source: gpustack/gpustack pull request #5255 "fix: server memory leak",
leak point 1: "``Subscriber.latest_by_key`` strands entries on
``QueueFull``. ... for an UPDATED event the dict is set *before*
``put_nowait``. If the queue is full the put raises ``QueueFull``, but the
dict entry stays. Every later UPDATED for the same id short-circuits on
``if id in latest_by_key`` and never tries to put again — there is no
queue token, so ``receive()`` never pops the entry. One permanent entry
per id that ever hit a full queue. Ramps with churn." (gpustack #4794).
Fix used here (gpustack's bus keeps the invariant "``id in latest_by_key``
iff there is a queue token whose ``receive()`` will pop it"): when the put
fails the entry is rolled back, so a dropped update leaves nothing behind.
Summary: a 32-64-4 numpy MLP trained on batches of 64 examples drawn from
a stream of two million ids; after each step the trainer publishes an
``UPDATED`` event (loss, margin, gradient norm, epoch and the example's 4
class probabilities) for the 8 hardest examples of the batch. The
dashboard consumer pops 16 events a step, then from 35 % of the run only
4 (its 256-token queue fills within ~60 steps).

Here: 40,000 steps. The fixed subscriber rolls the entry back when the
queue is full.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4; a do-nothing ``monitor.sample``): leaky 37.1 / 41.9 /
60.4 / 78.8 / 94.1 MiB RSS at 20 / 40 / 60 / 80 % / end (flat until the
dashboard slows at 35 %, then ~2.2 KiB a step: about 4 stranded events,
each with its stats dict and probability array) with gc objects 24,034 /
31,855 / 62,876 / 92,751 / 121,572 (~3.7 a step after the onset), 10.1 s
for 40,000 steps (~0.25 ms a step); fixed 36.9 / 37.2 / 37.2 / 37.3 / 37.3
MiB with objects 24,034 -> 24,168, 10.3 s.
"""
import enum
import os
import queue

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/gpustack/gpustack/pull/5255"
SLICE = "holdout17"
STEPS = 40000
SLOWDOWN = 0.35
BATCH = 64
FEATURES = 32
HIDDEN = 64
CLASSES = 4
HARDEST = 8
QUEUE_SIZE = 256
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["Event", "dict", "ndarray", "float", "list"],
              "holder_any": ["latest_by_key", "Subscriber", "subscriber"]},
    "fixed": {"verdict_not": "leak"},
}


class EventType(enum.Enum):
    CREATED = 1
    UPDATED = 2
    DELETED = 3


class Event:
    __slots__ = ("type", "id", "data")

    def __init__(self, type, id, data):
        self.type, self.id, self.data = type, id, data


class Subscriber:
    def __init__(self, rollback_on_full):
        self.queue = queue.Queue(maxsize=QUEUE_SIZE)
        self.latest_by_key = {}
        self.rollback_on_full = rollback_on_full
        self.dropped = 0

    def enqueue(self, event):
        if event.type == EventType.UPDATED:
            if event.id in self.latest_by_key:               # coalesce with the queued update
                self.latest_by_key[event.id] = event
                return
            self.latest_by_key[event.id] = event               # written before the put
            try:
                self.queue.put_nowait(event.id)
            except queue.Full:
                self.dropped += 1
                if self.rollback_on_full:
                    self.latest_by_key.pop(event.id, None)      # the fix: no token, no entry
            return
        try:
            self.queue.put_nowait(event)
        except queue.Full:
            self.dropped += 1

    def receive_nowait(self):
        token = self.queue.get_nowait()
        if isinstance(token, Event):
            return token
        return self.latest_by_key.pop(token)


class EventBus:
    def __init__(self):
        self.subscribers = {}

    def subscribe(self, topic, subscriber):
        self.subscribers.setdefault(topic, []).append(subscriber)
        return subscriber

    def publish(self, topic, event):
        for sub in self.subscribers.get(topic, ()):
            sub.enqueue(event)


class Dashboard:
    """Consumes the example events and keeps a small, bounded summary of them."""

    def __init__(self, sub):
        self.sub = sub
        self.recent_loss = np.zeros(512)
        self.n = 0

    def poll(self, budget):
        for _ in range(budget):
            try:
                ev = self.sub.receive_nowait()
            except queue.Empty:
                return
            self.recent_loss[self.n % 512] = ev.data["loss"]
            self.n += 1


def _softmax(z):
    z = z - z.max(1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(1, keepdims=True)


def _train(monitor, steps, rollback_on_full):
    rng = np.random.default_rng(0)
    proto = rng.standard_normal((CLASSES, FEATURES))
    w1 = rng.standard_normal((FEATURES, HIDDEN)) / np.sqrt(FEATURES)
    w2 = np.zeros((HIDDEN, CLASSES))
    bus = EventBus()
    dashboard = Dashboard(bus.subscribe("examples", Subscriber(rollback_on_full)))
    slow_from = int(steps * SLOWDOWN)
    for step in range(steps):
        ids = rng.integers(0, 2_000_000, BATCH)
        y = ids % CLASSES
        x = proto[y] + 1.5 * rng.standard_normal((BATCH, FEATURES))
        h = np.tanh(x @ w1)
        p = _softmax(h @ w2)
        loss = -np.log(p[np.arange(BATCH), y] + 1e-9)
        g = p.copy()
        g[np.arange(BATCH), y] -= 1
        gh = (g @ w2.T) * (1 - h ** 2)
        w2 -= 0.05 * h.T @ g / BATCH
        w1 -= 0.05 * x.T @ gh / BATCH
        for i in np.argsort(-loss)[:HARDEST]:                # publish the hardest examples
            bus.publish("examples", Event(EventType.UPDATED, int(ids[i]), {
                "loss": float(loss[i]), "margin": float(p[i, y[i]] - np.max(np.delete(p[i], y[i]))),
                "grad_norm": float(np.linalg.norm(g[i])), "step": step,
                "probs": p[i].astype(np.float32)}))
        dashboard.poll(16 if step < slow_from else 4)       # the dashboard falls behind
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, rollback_on_full=False)


def fixed(monitor, steps):
    _train(monitor, steps, rollback_on_full=True)
