"""A ``PyDataset`` fetches one image tile per batch from a tile server, and a Rollbar-style network-telemetry helper instruments each request by replacing its ``on_ready`` handler with a timing wrapper; to be able to undo the instrumentation later it records every replacement, ``(request, "on_ready", original)``, in ``telemetry.replacements``, so every request object, with the tile bytes it downloaded, stays reachable for the rest of the run (``model.fit`` on a ``PyDataset`` + ``LeakCallback``; grows every batch, ~6 KiB of ``bytes`` and 10 objects a batch).

Source: rollbar/rollbar.js pull request #414 "we should not be storing the
props for every request, only the prototype one" (fixes #413): "There is
something like a memory leak, at least it has the same effect if it is not
classically a leak. We were storing wrapped properties for every network
request rather than just the wrapped properties on the XHR prototype. While
this is maybe technically correct in some abstract sense as it allows us to
properly unwrap everything if the configuration changes, we don't really
need to unwrap those for things to still work. Also storing them will
result in a growing memory footprint without any real cleanup mechanism."
Fix used here (the PR's): the handler is wrapped once on the request class
(the prototype) and only that replacement is recorded.
Summary: tiles of 48x48 grayscale textures (4 kinds) served as raw
``bytes`` with a small header; each batch crops 32 random 16x16 patches
from its tile and a 256-64-4 Keras classifier learns the texture, trained
with ``model.fit`` (50 batches an epoch).

Here: 6,000 batches (120 epochs). The fixed telemetry instruments the
class once.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11, numpy 2.4; a stub callback in place of
``LeakCallback``; RSS and object counts from separate runs): leaky 571.7 /
579.3 / 586.7 / 593.7 / 601.4 MiB RSS at 20 / 40 / 60 / 80 % / end (~6 KiB
a batch: a ``TileRequest`` with its 2.4 KiB response, the 2.3 KiB body its
pixels view, its headers and the wrapper closure, in
``Telemetry.replacements``) with gc objects 338,969 / 350,970 / 362,969 /
374,969 / 386,969 at the same marks (10 a batch), 18.5 s for 6,000 batches
(~3.1 ms a batch); fixed 565.1 / 565.2 / 565.2 / 565.3 / 565.3 MiB with
objects 326,955 at every mark, 20.1 s.
"""
import functools
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/rollbar/rollbar.js/pull/414"
SLICE = "holdout18"
STEPS = 6000            # batches; 50 per epoch, 120 epochs
PER_EPOCH = 50
BATCH = 32
TILE = 48
PATCH = 16
KINDS = 4
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["TileRequest", "bytes", "tuple", "function", "list"],
              "holder_any": ["replacements", "Telemetry", "telemetry"]},
    "fixed": {"verdict_not": "leak"},
}


class TileServer:
    def __init__(self, rng):
        self.rng = rng
        yy, xx = np.mgrid[0:TILE, 0:TILE]
        self.bases = [np.sin(xx / 2.0), np.sin(yy / 2.0), np.sin((xx + yy) / 3.0), np.cos(xx * yy / 50.0)]

    def get(self, url):
        kind = int(url.rsplit("kind=", 1)[1])
        tile = 128 + 60 * self.bases[kind] + 30 * self.rng.standard_normal((TILE, TILE))
        header = ("HTTP/1.1 200 OK\r\nContent-Type: application/x-raw-gray8\r\n"
                  "X-Tile: %s\r\n\r\n" % url).encode()
        return header + np.clip(tile, 0, 255).astype(np.uint8).tobytes()


class TileRequest:
    def __init__(self, url, server):
        self.url = url
        self.server = server
        self.headers = {"Accept": "application/x-raw-gray8", "User-Agent": "tiles-loader/1.4"}
        self.status = 0
        self.response = None
        self.pixels = None

    def on_ready(self):
        body = self.response.split(b"\r\n\r\n", 1)[1]
        self.pixels = np.frombuffer(body, dtype=np.uint8).reshape(TILE, TILE)

    def send(self):
        self.response = self.server.get(self.url)
        self.status = 200
        self.on_ready()


class Telemetry:
    """Network telemetry: time every request's ``on_ready`` and remember how to undo it."""

    def __init__(self, instrument_class):
        self.replacements = []
        self.events = []
        self.instrument_class = instrument_class
        if instrument_class:                                 # the fix (rollbar.js#414): the prototype, once
            self._replace(TileRequest, "on_ready", self._wrap_unbound(TileRequest.on_ready))

    def _record(self, url, t0):
        self.events.append((url[-12:], time.perf_counter() - t0))
        del self.events[:-100]                               # the telemetry queue is bounded

    def _wrap_unbound(self, original):
        @functools.wraps(original)
        def on_ready(req):
            t0 = time.perf_counter()
            try:
                return original(req)
            finally:
                self._record(req.url, t0)
        return on_ready

    def _wrap_bound(self, original, url):
        @functools.wraps(original)
        def on_ready():
            t0 = time.perf_counter()
            try:
                return original()
            finally:
                self._record(url, t0)
        return on_ready

    def _replace(self, obj, name, wrapper):
        original = getattr(obj, name)
        setattr(obj, name, wrapper)
        self.replacements.append((obj, name, original))

    def instrument(self, request):
        if not self.instrument_class:                        # per request: every one is recorded
            self._replace(request, "on_ready", self._wrap_bound(request.on_ready, request.url))

    def restore(self):
        while self.replacements:
            obj, name, original = self.replacements.pop()
            setattr(obj, name, original)


class Tiles(keras.utils.PyDataset):
    def __init__(self, telemetry, **kwargs):
        super().__init__(**kwargs)
        self.rng = np.random.default_rng(0)
        self.server = TileServer(self.rng)
        self.telemetry = telemetry
        self.count = 0

    def __len__(self):
        return PER_EPOCH

    def __getitem__(self, idx):
        kind = int(self.rng.integers(KINDS))
        self.count += 1
        req = TileRequest("https://tiles.example.org/v1/textures/%08d.raw?kind=%d" % (self.count, kind), self.server)
        self.telemetry.instrument(req)
        req.send()
        ys = self.rng.integers(0, TILE - PATCH, BATCH)
        xs = self.rng.integers(0, TILE - PATCH, BATCH)
        patches = np.stack([req.pixels[y:y + PATCH, x:x + PATCH] for y, x in zip(ys, xs)])
        return (patches.reshape(BATCH, -1).astype(np.float32) / 255.0,
                np.full(BATCH, kind, np.int32))


def _fit(logdir, steps, instrument_class):
    keras.utils.set_random_seed(0)
    telemetry = Telemetry(instrument_class)
    try:
        model = keras.Sequential([keras.Input((PATCH * PATCH,)), keras.layers.Dense(64, activation="relu"),
                                  keras.layers.Dense(KINDS)])
        model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.fit(Tiles(telemetry), epochs=max(1, steps // PER_EPOCH), verbose=0,
                  callbacks=[tb_leak_plugin.keras.LeakCallback(logdir)])
    finally:
        telemetry.restore()


def leaky_fit(logdir, steps):
    _fit(logdir, steps, instrument_class=False)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, instrument_class=True)
