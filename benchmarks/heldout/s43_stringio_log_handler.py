"""A log-forwarding handler built on ``StreamHandler(StringIO())`` keeps the text of every record (no TensorFlow).

Source: hatchet-dev/hatchet#4432 "fix: memory leak in Python SDK worker
logging" (the worker captured each task's logs with a
``LogForwardingHandler(logging.StreamHandler)`` whose stream was a
``StringIO``; besides forwarding each record to the log sender, every
``emit`` also wrote the formatted line into the ``StringIO``, and
``StringIO.flush()`` is a no-op, so the buffer grew by every line for as
long as the worker ran; the author's reproduction compared ``StringIO`` vs
``/dev/null`` vs a plain ``Handler``). Fix from the PR: derive the handler
from ``logging.Handler`` with no stream, so records are only forwarded.
Summary: a long training job logs one metrics line per step through a
handler that forwards records to a sender; the sender buffers and ships
them in batches, but the ``StringIO`` behind the handler keeps every line.

Here: a numpy softmax-regression step on a 32 x 16 batch and one ~170
character log line per step; the sender ships its buffer every 500 records.
A small, slow leak: a couple of hundred bytes a step.

Checked without tb-leak (psutil RSS, fresh process, Python 3.11, numpy
2.4): leaky +15.7 MiB RSS from 20 % of the run to the end (~205 B per step),
fixed +0.1 MiB (the sender's buffer fills and empties every 500 steps);
~0.2 ms a step.
"""
import io
import logging

import os

# Single-threaded BLAS: on 2 shared cores, OpenBLAS worker threads spinning next to other
# threads make each small matmul up to ~10x slower.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/hatchet-dev/hatchet/pull/4432"
SLICE = "holdout4"
STEPS = 100000
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["StringIO", "str", "native", "LogForwardingHandler"],
              "holder_any": ["stream", "StringIO", "handlers", "LogForwardingHandler"]},
    "fixed": {"verdict_not": "leak"},
}


class LogSender:
    """Buffers formatted records and ships them in batches (stands in for the gRPC log stream)."""

    def __init__(self, batch=500):
        self.batch = batch
        self.buffer = []
        self.shipped = 0

    def send(self, line):
        self.buffer.append(line)
        if len(self.buffer) >= self.batch:
            self.shipped += sum(len(s) for s in self.buffer)
            self.buffer = []


class LogForwardingHandler(logging.StreamHandler):
    """As in the report: a ``StreamHandler`` on a ``StringIO`` that also forwards each record."""

    def __init__(self, sender):
        super().__init__(io.StringIO())
        self.sender = sender

    def emit(self, record):
        super().emit(record)                          # writes the line into the StringIO, kept forever
        self.sender.send(self.format(record))


class ForwardOnlyHandler(logging.Handler):
    """The fix: a plain ``Handler`` with no stream; records are only forwarded."""

    def __init__(self, sender):
        super().__init__()
        self.sender = sender

    def emit(self, record):
        self.sender.send(self.format(record))


def _train(monitor, steps, handler_cls):
    logger = logging.getLogger("trainer.%s" % handler_cls.__name__)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    handler = handler_cls(LogSender())
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    logger.addHandler(handler)
    rng = np.random.default_rng(0)
    w = np.zeros((16, 4))
    true_w = rng.standard_normal((16, 4))
    try:
        for step in range(steps):
            x = rng.standard_normal((32, 16))
            y = (x @ true_w).argmax(1)
            z = x @ w
            p = np.exp(z - z.max(1, keepdims=True))
            p /= p.sum(1, keepdims=True)
            loss = float(-np.log(p[np.arange(32), y] + 1e-9).mean())
            p[np.arange(32), y] -= 1.0
            g = x.T @ p / 32
            w -= 0.1 * g
            logger.info("step=%d loss=%.5f lr=%.2e grad_norm=%.5f w_norm=%.4f", step, loss, 0.1,
                        float(np.abs(g).sum()), float(np.abs(w).sum()))
            monitor.sample(step)
    finally:
        logger.removeHandler(handler)


def leaky(monitor, steps):
    _train(monitor, steps, LogForwardingHandler)


def fixed(monitor, steps):
    _train(monitor, steps, ForwardOnlyHandler)
