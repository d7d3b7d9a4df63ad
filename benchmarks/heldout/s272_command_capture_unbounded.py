"""A numpy trainer pulls its training shards through one long-running remote streaming command (a Fabric-style ``run("stream-shards ...")`` on the data host) whose stdout carries the transfer progress, and the runner captures that output the way Fabric 1.x did before the fix for issue #800: every chunk read from the channel is appended to a plain capture list kept for the command's whole lifetime, which here is the whole training run, so every progress line stays in memory (plain Python + numpy, no TensorFlow; ~0.6 KiB and 4 strings a step).

Source: fabric/fabric issue #800 "Fabric very high memory usage" (closed).
Maintainer (bitprophet): "what we need is the following: Change the naive
list object to a buffer class with a controllable size ... Its default size
should be None or something else signifying 'no limit' - that is the
current behavior ... We will expose that size so users can control it";
"I did find that we already wrote one and are using it ... So reusing that
class for our capture buffers ought to work well." Fix used here (the
thread's): the capture buffer is a ring buffer with a size limit (16,384
chunks here), which fills in the first ~34 % of the run and then holds.
Summary: the channel is a stand-in that yields the command's output in
chunks (four ~110-byte progress lines per shard batch: bytes transferred,
rate, shard name, checksum); the runner keeps ``self.capture`` (a list, or
the ring buffer) and the trainer parses the latest line for throughput. The
model is a numpy 128-512-10 MLP trained with SGD on batches of 512 decoded
from the streamed bytes.

Here: 12,000 steps. The fixed runner's capture is a 16,384-chunk ring buffer.
"""
import collections
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/fabric/fabric/issues/800"
SLICE = "holdout23"
STEPS = 12000
BATCH = 512
FEATURES = 128
HIDDEN = 512
CLASSES = 10
RING = 16384
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["str", "list"],
              "holder_any": ["capture", "RemoteCommand", "runner"]},
    "fixed": {"verdict_not": "leak"},
}


class RingBuffer(collections.deque):
    """Fabric's capture ring buffer (a bounded list-like)."""

    def __init__(self, maxlen):
        super().__init__(maxlen=maxlen)


class Channel:
    def __init__(self, rng):
        self.rng = rng
        self.sent = 0

    def recv_chunks(self, shard):
        out = []
        for k in range(4):
            self.sent += int(self.rng.integers(900_000, 1_100_000))
            out.append("[data-host] stream-shards: shard=%s part=%d sent=%d bytes rate=%.2f MB/s crc=%08x\n"
                       % (shard, k, self.sent, float(self.rng.uniform(80, 120)), int(self.rng.integers(0, 2 ** 32))))
        return out


class RemoteCommand:
    def __init__(self, command, channel, ring_size):
        self.command = command
        self.channel = channel
        self.capture = RingBuffer(ring_size) if ring_size else []

    def read(self, shard):
        chunks = self.channel.recv_chunks(shard)
        for chunk in chunks:
            self.capture.append(chunk)          # the reported code: capture = [] grows for the command's life
        return chunks[-1]


def _run(monitor, steps, ring_size):
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((CLASSES, FEATURES)).astype(np.float32)
    w1 = (rng.standard_normal((FEATURES, HIDDEN)) * 0.05).astype(np.float32)
    w2 = (rng.standard_normal((HIDDEN, CLASSES)) * 0.05).astype(np.float32)
    runner = RemoteCommand("stream-shards --from s3://train/ --format npy", Channel(rng), ring_size)
    rates = collections.deque(maxlen=100)
    for step in range(steps):
        last = runner.read("train-%05d" % (step // 16))
        rates.append(float(last.split("rate=")[1].split()[0]))
        y = rng.integers(0, CLASSES, BATCH)
        x = centers[y] + rng.standard_normal((BATCH, FEATURES)).astype(np.float32)
        h = np.maximum(x @ w1, 0)
        logits = h @ w2
        p = np.exp(logits - logits.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        p[np.arange(BATCH), y] -= 1
        gh = (p @ w2.T) * (h > 0)
        w2 -= 0.02 * (h.T @ p / BATCH)
        w1 -= 0.02 * (x.T @ gh / BATCH)
        monitor.sample(step)


def leaky(monitor, steps):
    _run(monitor, steps, ring_size=None)


def fixed(monitor, steps):
    _run(monitor, steps, ring_size=RING)
