"""A Keras callback serves the run's live metrics over HTTP from a Prometheus-client-style exporter built on ``ThreadingMixIn`` as it behaved in Python 3.7 (non-daemon request threads, ``block_on_close``), and a dashboard polls it after every batch; the mixin appends each request's thread to ``self._threads`` so that ``server_close()`` can join it, and never drops finished ones, so the server keeps a ``Thread`` object (with its started event, condition and locks) for every scrape of the run (``model.fit`` + ``LeakCallback``; grows every batch, small: ~2.5 KiB a batch).

Source: prometheus/client_python pull request #356 "Fix thread leak in
Python 3.7 #340": "The leak is caused by the fact that in Python 3.7, the
default behavior of the ``ThreadingMixin`` is to use no daemon threads, but
to request to block on threads on close. Because of that, it collects
references to all created threads, creating the 'leak' ... Fix by setting
``daemon_threads`` to ``True``" (CPython's own fix is bpo-37193 / issue
#81374, "Memory leak while running TCP/UDPServer with
socketserver.ThreadingMixIn"). Fix used here (the PR's): the exporter's
server sets ``daemon_threads = True``; daemon request threads are not
tracked.
Summary: a 32-64-3 softmax classifier trained with ``model.fit`` (Adam, 50
batches an epoch) on in-memory synthetic data; the callback updates its
gauges (loss, batch, learning rate, throughput) at every batch end and the
dashboard's poll is an ``http.client`` GET of ``/metrics`` on 127.0.0.1
(text exposition format, ~0.6 KB). The mixin is written out as 3.7's,
since 3.11's reaps finished threads itself.

Here: 5,000 batches (100 epochs). The fixed exporter uses daemon request
threads.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11, numpy 2.4; a stub callback in place of
``LeakCallback``; RSS read before each object count, at the marks only):
leaky 569.8 / 572.5 / 574.7 / 577.2 / 580.1 MiB RSS at 20 / 40 / 60 / 80 %
/ end (563.0 MiB at the first batch; ~2.5 KiB a batch: a finished
``Thread`` with its started ``Event``, condition and locks in
``ExporterServer._threads``) with gc objects 328,391 at the first batch,
then 344,388 / 360,385 / 375,967 / 391,988 / 407,967 at the same marks (16
a batch), 25.5 s for 5,000 batches (~5.1 ms a batch, the poll included);
fixed 567.7 / 568.0 / 568.1 / 568.2 / 568.3 MiB with objects 328,421 /
328,384 / 328,386 / 328,388 / 328,390, 21.7 s (~4.3 ms a batch); a
10,000-batch fixed run: 567.6 MiB at 20 %, 568.0 at 60 % and 568.1 from 80
% to the end, objects flat (Keras's and the sockets' settling). 26-30 s a
variant in its process, imports included.
"""
import http.client
import http.server
import os
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/prometheus/client_python/pull/356"
SLICE = "holdout19"
STEPS = 5000            # batches; 50 per epoch, 100 epochs
PER_EPOCH = 50
BATCH = 64
FEATURES = 32
CLASSES = 3
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["Thread", "Event", "Condition", "lock"],
              "holder_any": ["_threads", "ExporterServer", "server", "MetricsExporter"]},
    "fixed": {"verdict_not": "leak"},
}


class ThreadingMixIn37:
    """socketserver.ThreadingMixIn as shipped in Python 3.7."""

    daemon_threads = False
    block_on_close = True
    _threads = None

    def process_request_thread(self, request, client_address):
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)

    def process_request(self, request, client_address):
        t = threading.Thread(target=self.process_request_thread, args=(request, client_address))
        t.daemon = self.daemon_threads
        if not t.daemon and self.block_on_close:
            if self._threads is None:
                self._threads = []
            self._threads.append(t)                          # kept until server_close()
        t.start()

    def server_close(self):
        super().server_close()
        if self.block_on_close:
            threads = self._threads
            self._threads = None
            if threads:
                for thread in threads:
                    thread.join()


class ExporterServer(ThreadingMixIn37, http.server.HTTPServer):
    pass


class MetricsExporter(keras.callbacks.Callback):
    def __init__(self, daemon_threads):
        super().__init__()
        self.gauges = {}
        self.started = time.time()
        exporter = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = exporter.exposition().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ExporterServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = daemon_threads          # the fix (client_python#356)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                       name="metrics-exporter", daemon=True)
        self.thread.start()
        self.scrapes = 0

    def exposition(self):
        lines = []
        for name, (help_text, value) in sorted(self.gauges.items()):
            lines.append("# HELP %s %s" % (name, help_text))
            lines.append("# TYPE %s gauge" % name)
            lines.append("%s{job=\"trainer\",run=\"r0417\"} %r" % (name, value))
        return "\n".join(lines) + "\n"

    def on_train_batch_end(self, batch, logs=None):
        logs = logs or {}
        self.gauges["trainer_loss"] = ("training loss of the last batch", float(logs.get("loss", 0.0)))
        self.gauges["trainer_batch"] = ("batch index within the epoch", batch)
        self.gauges["trainer_learning_rate"] = ("optimizer learning rate",
                                                float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate)))
        self.gauges["trainer_uptime_seconds"] = ("seconds since training started", time.time() - self.started)
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)   # the dashboard's poll
        conn.request("GET", "/metrics")
        conn.getresponse().read()
        conn.close()
        self.scrapes += 1

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _fit(logdir, steps, daemon_threads):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((CLASSES, FEATURES)).astype(np.float32)
    y = rng.integers(0, CLASSES, PER_EPOCH * BATCH)
    x = (centers[y] + 1.2 * rng.standard_normal((len(y), FEATURES))).astype(np.float32)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(CLASSES)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    exporter = MetricsExporter(daemon_threads)
    try:
        model.fit(x, y.astype(np.int32), batch_size=BATCH, epochs=max(1, steps // PER_EPOCH), verbose=0,
                  shuffle=True, callbacks=[exporter, tb_leak_plugin.keras.LeakCallback(logdir)])
    finally:
        exporter.close()


def leaky_fit(logdir, steps):
    _fit(logdir, steps, daemon_threads=False)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, daemon_threads=True)
