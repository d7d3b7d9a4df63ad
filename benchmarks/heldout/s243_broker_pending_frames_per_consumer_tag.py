"""An online click-through model trains from event shards that a broker streams per shard queue: for every shard the loader starts a consumer with its own tag (``basic_consume``), takes the shard's messages and cancels the consumer (``basic_cancel``); the channel is written like pika's before pull request #132, which sets up a pending-frames list for every consumer tag and never removes it when the consumer is cancelled, so every shard leaves its tag and an empty list behind in ``Channel._pending`` (plain Python + numpy, no TensorFlow; grows every step, small: ~0.2 KiB a step; the lists are empty, so only their headers, the tag strings and the dict's slots pile up).

Source: pika/pika pull request #132 "Fix memory leak created by
accumulating pending frames lists." (merged): "Entries in the pending
frames dictionary never got removed, leading to memory usage growing
infinitely on repeated Basic.Consume and Basic.Cancel messages, even if the
lists stored in that dictionary were usually empty." Fix used here (the
PR's): ``_on_cancel_ok`` deletes ``self._pending[consumer_tag]`` together
with ``self._consumers[consumer_tag]`` (and so does the ``ChannelClosed``
path of ``basic_consume``).
Summary: the channel is a stand-in with pika 0.9.5's structure
(``basic_consume`` registers the callback in ``_consumers`` and an empty
list in ``_pending``; ``_on_basic_deliver`` flushes pending frames and
calls the consumer; ``basic_cancel`` sends ``Basic.Cancel`` and
``_on_cancel_ok`` forgets the consumer) over an in-process broker whose
``rpc`` answers synchronously. Each step consumes one shard queue (8
messages of 4 events each, 24 hashed categorical fields an event) with a
consumer tag named after the worker and the shard plus a random suffix, as
the broker's management UI shows it, cancels it, and takes one SGD step of
a 256-feature logistic regression on the 32 events. A bounded deque keeps
the last 500 losses and every 10,000 steps the weights are snapshotted
(replacing the previous snapshot), in both variants.

Here: 56,000 steps. The fixed channel deletes the pending list on
``CancelOk``.

Checked without tb-leak (psutil RSS, gc objects, tracemalloc; fresh
process, Python 3.11, numpy 2.4; a do-nothing ``monitor.sample``; RSS read
before each object count, at the marks only): leaky 38.4 / 40.9 / 42.4 /
45.0 / 47.2 MiB RSS at 20 / 40 / 60 / 80 % / end (36.1 MiB at the first
step; ~0.2 KiB a step: a consumer-tag string, an empty list and a dict slot
per shard) with gc objects 23,903 at the first step, then 34,990 / 46,190 /
57,390 / 68,590 / 79,648 at the same marks (one list a step; the tags are
strings, not tracked), 17.9 s for 56,000 steps (~0.32 ms a step); under
tracemalloc 7.35 MiB traced at the first step and 17.05 MiB at the end
(~0.18 KiB a step); fixed 36.4 / 36.4 / 36.4 / 36.4 / 36.4 MiB with objects
23,904 / 23,906 / 23,908 / 23,910 / 23,912 and 7.35 -> 7.37 MiB traced, 16.4
s. 17-18 s a variant in its process.
"""
import collections
import os
import uuid

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/pika/pika/pull/132"
SLICE = "holdout21"
STEPS = 56000
MESSAGES = 8
EVENTS = 4
FIELDS = 24
FEATURES = 256
LR = 0.05
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["list", "str", "dict"],
              "holder_any": ["_pending", "Channel", "channel"]},
    "fixed": {"verdict_not": "leak"},
}


class _Frame:
    __slots__ = ("method", "properties")

    def __init__(self, method, properties=None):
        self.method = method
        self.properties = properties


class _Method:
    __slots__ = ("name", "consumer_tag", "delivery_tag", "queue")

    def __init__(self, name, consumer_tag=None, delivery_tag=0, queue=None):
        self.name = name
        self.consumer_tag = consumer_tag
        self.delivery_tag = delivery_tag
        self.queue = queue


class Broker:
    """In-process broker: one queue per shard, filled on demand."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.delivery_tag = 0
        self.w_true = self.rng.standard_normal(FEATURES) / 4.0

    def shard_messages(self, shard):
        for _ in range(MESSAGES):
            ids = self.rng.integers(0, 1 << 20, size=(EVENTS, FIELDS), dtype=np.int64)
            self.delivery_tag += 1
            yield self.delivery_tag, ids.tobytes()


class Transport:
    def __init__(self, broker):
        self.broker = broker
        self.channel = None

    def rpc(self, method, callback, acceptable_replies):
        reply = {"Basic.Consume": "Basic.ConsumeOk", "Basic.Cancel": "Basic.CancelOk"}[method.name]
        callback(_Frame(_Method(reply, consumer_tag=method.consumer_tag, queue=method.queue)))
        if method.name == "Basic.Consume":
            for delivery_tag, body in self.broker.shard_messages(method.queue):
                self.channel._on_basic_deliver(
                    _Frame(_Method("Basic.Deliver", consumer_tag=method.consumer_tag, delivery_tag=delivery_tag)),
                    _Frame(None, properties={"content_type": "application/x-int64"}), body)

    def _on_event_ok(self, frame):
        pass


class Channel:
    """pika 0.9.5's Channel bookkeeping for consumers."""

    def __init__(self, transport, channel_number, forget_pending):
        self.transport = transport
        self.channel_number = channel_number
        self.forget_pending = forget_pending
        self._consumers = dict()
        self._pending = dict()
        self.closing = False

    def basic_consume(self, consumer_callback, queue="", no_ack=False, exclusive=False, consumer_tag=None):
        if not consumer_tag:
            consumer_tag = "ctag%i.%i" % (self.channel_number, len(self._consumers))
        if consumer_tag in self._consumers:
            raise ValueError("duplicate consumer tag %s" % consumer_tag)
        self._consumers[consumer_tag] = consumer_callback
        self._pending[consumer_tag] = list()                # a list for frames that arrive early
        self.transport.rpc(_Method("Basic.Consume", consumer_tag=consumer_tag, queue=queue),
                           self.transport._on_event_ok, ["Basic.ConsumeOk"])
        return consumer_tag

    def basic_cancel(self, consumer_tag, nowait=False, callback=None):
        if consumer_tag not in self._consumers:
            return
        self.transport.rpc(_Method("Basic.Cancel", consumer_tag=consumer_tag), self._on_cancel_ok,
                           ["Basic.CancelOk"])

    def _on_basic_deliver(self, method_frame, header_frame, body):
        tag = method_frame.method.consumer_tag
        if tag in self._consumers:
            while self._pending[tag]:
                method, properties, pending_body = self._pending[tag].pop(0)
                self._consumers[tag](self, method, properties, pending_body)
            self._consumers[tag](self, method_frame.method, header_frame.properties, body)
        else:
            self._pending[tag].append((method_frame.method, header_frame.properties, body))

    def _on_cancel_ok(self, frame):
        if frame.method.consumer_tag in self._consumers:
            del self._consumers[frame.method.consumer_tag]
            if self.forget_pending:                          # the fix (pika #132)
                del self._pending[frame.method.consumer_tag]


def _features(ids):
    x = np.zeros((ids.shape[0], FEATURES))
    rows = np.repeat(np.arange(ids.shape[0]), ids.shape[1])
    np.add.at(x, (rows, (ids % FEATURES).ravel()), 1.0)
    return x / np.sqrt(ids.shape[1])


def _run(monitor, steps, forget_pending):
    broker = Broker(0)
    transport = Transport(broker)
    channel = Channel(transport, 1, forget_pending)
    transport.channel = channel
    worker = "trainer-%s" % uuid.UUID(int=7).hex[:8]
    w = np.zeros(FEATURES)
    losses = collections.deque(maxlen=500)
    snapshot = None
    rng = np.random.default_rng(1)
    for step in range(steps):
        received = []

        def on_message(ch, method, properties, body, received=received):
            received.append(np.frombuffer(body, dtype=np.int64).reshape(EVENTS, FIELDS))

        tag = channel.basic_consume(on_message, queue="events.shard-%06d" % step,
                                    consumer_tag="%s.shard-%06d.%s" % (worker, step, uuid.UUID(int=int(rng.integers(1 << 62))).hex[:12]))
        channel.basic_cancel(tag)
        x = _features(np.concatenate(received))
        y = (x @ broker.w_true + 0.1 * rng.standard_normal(x.shape[0]) > 0).astype(float)
        p = 1.0 / (1.0 + np.exp(-(x @ w)))
        w -= LR * x.T @ (p - y) / len(y)
        losses.append(float(-np.mean(y * np.log(p + 1e-9) + (1 - y) * np.log(1 - p + 1e-9))))
        if step % 10000 == 9999:
            snapshot = w.copy()
        monitor.sample(step)
    return snapshot


def leaky(monitor, steps):
    _run(monitor, steps, forget_pending=False)


def fixed(monitor, steps):
    _run(monitor, steps, forget_pending=True)
