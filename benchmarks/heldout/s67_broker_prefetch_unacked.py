"""A queue consumer with no prefetch limit lets the broker push its whole backlog into the client, where every unacknowledged message waits in memory (no TensorFlow).

Source: zulip/zulip#20243 "queue_processors: Set a bounded prefetch size on
rabbitmq queues" (with the default prefetch of 0 "the server must send them
every message in the queue. This itself may cause unbounded memory usage in
the client"). Fix from the PR: a bounded prefetch (``prefetch_count=100``).
Summary: a trainer consumes feature records from a message queue. The
producers publish three records for every two the trainer consumes, so a
backlog builds. With an unlimited prefetch the broker delivers all of it,
and each delivered but unacknowledged message sits in the consumer's
``unacked`` dict; with a prefetch of 100 the backlog stays on the broker
(a counter here) and the client holds at most 100 messages.

Here: ~1 KiB messages (a JSON header and 96 float64 features), batches of 2,
a numpy logistic-regression step. The fixed twin's window of 100 fills in
the first ~1 % of the run and stays full.

Checked without tb-leak (psutil RSS, gc objects, tracemalloc; fresh
process, Python 3.11, numpy; a do-nothing ``monitor.sample``): leaky +52.7 MiB RSS from 20 % of the run to the end (~1.1 KiB per step,
+1 gc-tracked object a step, steady), fixed +0.01 MiB (gc objects flat once
the window of 100 is full, after ~0.3 % of the run); ~0.2 ms a step (10-14 s
for 60,000 steps).
"""
import itertools
import json
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/zulip/zulip/pull/20243"
SLICE = "holdout6"
STEPS = 60000
PUBLISHED_PER_STEP = 3
CONSUMED_PER_STEP = 2
PREFETCH = 100
FEATURES = 96
HIDDEN = 512
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["bytes", "dict", "Delivery"],
              "holder_any": ["unacked", "Consumer"]},
    "fixed": {"verdict_not": "leak"},
}


class Delivery:
    __slots__ = ("tag", "body")

    def __init__(self, tag, body):
        self.tag = tag
        self.body = body


class Consumer:
    def __init__(self, prefetch_count):
        self.prefetch_count = prefetch_count          # 0: unlimited, as in the report
        self.unacked = {}                            # delivery tag -> Delivery
        self.next_tag = 0
        self.backlog = 0                             # messages still on the broker
        self.rng = np.random.default_rng(0)

    def _publish_body(self):
        head = json.dumps({"tag": self.next_tag, "source": "worker-%d" % (self.next_tag % 7)}).encode()
        return head + b"\n" + self.rng.standard_normal(FEATURES).tobytes()

    def pump(self, published):
        self.backlog += published
        room = self.backlog if self.prefetch_count == 0 else max(0, self.prefetch_count - len(self.unacked))
        for _ in range(min(room, self.backlog)):
            self.unacked[self.next_tag] = Delivery(self.next_tag, self._publish_body())
            self.next_tag += 1
            self.backlog -= 1

    def ack(self, tag):
        del self.unacked[tag]


def _train(monitor, steps, prefetch_count):
    consumer = Consumer(prefetch_count)
    rng = np.random.default_rng(1)
    w1 = rng.standard_normal((FEATURES, HIDDEN)) * 0.05
    w2 = np.zeros(HIDDEN)
    for step in range(steps):
        consumer.pump(PUBLISHED_PER_STEP)
        rows, tags = [], []
        for tag in list(itertools.islice(consumer.unacked, CONSUMED_PER_STEP)):   # oldest first
            msg = consumer.unacked[tag]
            rows.append(np.frombuffer(msg.body[msg.body.index(b"\n") + 1:], dtype=np.float64))
            tags.append(tag)
        x = np.stack(rows)
        y = (x[:, :8].sum(1) > 0).astype(float)
        h = np.tanh(x @ w1)
        p = 1.0 / (1.0 + np.exp(-h @ w2))
        g = (p - y) / len(y)
        w2 -= 0.05 * h.T @ g
        w1 -= 0.05 * x.T @ (np.outer(g, w2) * (1 - h * h))
        for tag in tags:
            consumer.ack(tag)
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, prefetch_count=0)


def fixed(monitor, steps):
    _train(monitor, steps, prefetch_count=PREFETCH)
