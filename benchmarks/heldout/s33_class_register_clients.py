"""Every short-lived client object kept alive by a class-level ``Register`` dict (no TensorFlow).

Source: icatproject/python-icat#111 "Potential memory leak caused by
Client.Register?" (the class attribute ``Client.Register`` holds a reference
to every client so that ``Client.cleanupall()`` can log them out at exit; an
application that creates and drops a plugin with its own client on each cycle
never frees them), fixed in icatproject/python-icat#121 "Fix a memory leak in
Client.Register" by making the registry a ``weakref.WeakValueDictionary``.
Summary: a training job pushes each step's metrics and a weight digest to a
tracking service through a small client created per upload; the client class
registers every instance in a class-level dict for clean shutdown, so every
client, with its request buffer, stays alive. Fix from the PR: a
``WeakValueDictionary`` registry, which forgets clients nobody else holds.

Here: a numpy two-layer MLP step on a 32 x 64 batch; each upload serializes
the 64 x 32 float32 first layer (8 KiB) into the client's buffer.

Checked without tb-leak (psutil RSS, fresh process, TF 2.21 / Keras 3.15 /
Python 3.11): leaky +26.4 MiB RSS from 20 % of the run to the end (~8.4 KiB per step),
fixed +0.5 MiB; ~0.24 ms a step.
"""
import weakref

import numpy as np

SOURCE = "https://github.com/icatproject/python-icat/issues/111"
SLICE = "holdout3"
STEPS = 4000
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["TrackingClient", "bytes", "dict"],
              "holder_any": ["Register"]},
    "fixed": {"verdict_not": "leak"},
}


class TrackingClient:
    """A tracking-service client; like python-icat's ``Client`` it registers itself for ``cleanupall()``."""

    Register = {}

    def __init__(self, url):
        self.url = url
        self.session_id = None
        self.buffer = b""
        self.Register[id(self)] = self

    def login(self):
        self.session_id = "session-%x" % id(self)

    def upload(self, step, metrics, weights):
        self.buffer = weights.tobytes() + repr(sorted(metrics.items())).encode()
        return len(self.buffer)                          # stands in for the HTTP request

    def logout(self):
        self.session_id = None

    @classmethod
    def cleanupall(cls):
        for client in list(cls.Register.values()):
            client.logout()


class WeakTrackingClient(TrackingClient):
    """The fix: the registry holds its clients weakly."""

    Register = weakref.WeakValueDictionary()


def _loop(monitor, steps, client_cls):
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((64, 32)).astype(np.float32) * 0.1
    w2 = rng.standard_normal((32, 1)).astype(np.float32) * 0.1
    for step in range(steps):
        x = rng.standard_normal((32, 64)).astype(np.float32)
        y = x[:, :1] * 0.5
        h = np.maximum(x @ w1, 0.0)
        err = h @ w2 - y
        w2 -= 0.01 * h.T @ err / 32
        w1 -= 0.01 * x.T @ ((err @ w2.T) * (h > 0)) / 32
        client = client_cls("https://tracking.example/api")     # one client per upload
        client.login()
        client.upload(step, {"loss": float((err ** 2).mean())}, w1)
        client.logout()
        monitor.sample(step)
    client_cls.cleanupall()


def leaky(monitor, steps):
    _loop(monitor, steps, TrackingClient)


def fixed(monitor, steps):
    _loop(monitor, steps, WeakTrackingClient)
