"""A ``PyDataset`` builds two API clients of a metered data service for every batch (one reports the batch's usage, one fetches its sample weights), and the client, like paddle-python-sdk's ``Client``, falls back to ``Client.null_logger()`` when no logger is passed, which calls ``addHandler(NullHandler())`` on the shared ``null_logger`` logger every time; the handlers, each with its lock and its entries in the logging module's handler and at-fork registries, pile up on the logger (``model.fit`` on a ``PyDataset`` + ``LeakCallback``; grows every batch, small: ~0.7 KiB a batch).

Source: PaddleHQ/paddle-python-sdk issue #144 "Memory leak:
Client.null_logger() adds a new NullHandler on every instantiation":
"``Client.null_logger()`` calls ``addHandler(NullHandler())`` on the shared
``"null_logger"`` logger every time a Client is instantiated without an
explicit logger argument. The NullHandler instances accumulate indefinitely
in ``logger.handlers`` (and in the global ``logging._handlerList`` weakref
set), each bringing its own ``threading.RLock`` ... RSS grows ~5 MB per 10k
Client instantiations". Fix used here (the issue's): the handler is added
only when the shared logger has none (``if not null_logger.handlers``).
Summary: a 48-96-4 softmax classifier trained with ``model.fit`` (Adam,
50 batches an epoch) on a ``PyDataset`` that synthesizes each batch of 64
rows and, per batch, instantiates ``UsageClient(api_key)`` twice (usage
report, sample-weight lookup; both requests are answered in-process).

Here: 6,000 batches (120 epochs). The fixed client adds the NullHandler
once.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11, numpy 2.4; a stub callback in place of
``LeakCallback``; RSS read before each object count, at the marks only):
leaky 565.1 / 565.9 / 566.6 / 567.4 / 568.2 MiB RSS at 20 / 40 / 60 / 80 %
/ end (562.3 MiB at the first batch; ~0.7 KiB a batch: two ``NullHandler``
objects with their locks and filter lists in the ``null_logger`` logger's
``handlers``, and their weak references in ``logging._handlerList`` and
the at-fork registry) with gc objects 327,414 at the first batch, then
334,619 / 341,819 / 349,019 / 356,219 / 363,419 at the same marks (6 a
batch), 19.4 s for 6,000 batches (~3.2 ms a batch); fixed 564.1 / 564.3 /
564.3 / 564.3 / 564.3 MiB with objects 327,410 / 327,411 / 327,413 /
327,415 / 327,418 (+2 a mark: the check's own records), 17.7 s (~2.9 ms a
batch). 22-24 s a variant in its process, imports included.
"""
import logging
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/PaddleHQ/paddle-python-sdk/issues/144"
SLICE = "holdout19"
STEPS = 6000            # batches; 50 per epoch, 120 epochs
PER_EPOCH = 50
BATCH = 64
FEATURES = 48
CLASSES = 4
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["NullHandler", "Handler", "RLock", "weakref"],
              "holder_any": ["handlers", "null_logger", "_handlerList", "Logger"]},
    "fixed": {"verdict_not": "leak"},
}


class UsageClient:
    """Shaped like paddle_billing.Client: a logger is optional."""

    guard_null_handler = False

    def __init__(self, api_key, environment="sandbox", logger=None):
        self.api_key = api_key
        self.environment = environment
        self.log = logger if logger else UsageClient.null_logger()
        self.requests = 0

    @staticmethod
    def null_logger():
        null_logger = logging.getLogger("null_logger")
        if UsageClient.guard_null_handler and null_logger.handlers:   # the fix (paddle-python-sdk#144)
            return null_logger
        null_logger.addHandler(logging.NullHandler())
        return null_logger

    def post(self, path, payload):
        self.requests += 1
        self.log.debug("POST %s %d bytes", path, len(payload))
        if path.endswith("/weights"):
            rng = np.random.default_rng(payload["batch"])
            return {"weights": (0.5 + rng.random(payload["rows"])).tolist()}
        return {"status": "accepted"}


class MeteredBatches(keras.utils.PyDataset):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        rng = np.random.default_rng(0)
        self.centers = rng.standard_normal((CLASSES, FEATURES)).astype(np.float32)
        self.served = 0

    def __len__(self):
        return PER_EPOCH

    def __getitem__(self, idx):
        self.served += 1
        rng = np.random.default_rng(self.served)
        y = rng.integers(0, CLASSES, BATCH)
        x = self.centers[y] + 1.3 * rng.standard_normal((BATCH, FEATURES)).astype(np.float32)
        usage = UsageClient("pdl_sdbx_apikey_01h8x3m4qz")
        usage.post("/usage", {"batch": self.served, "rows": BATCH, "bytes": int(x.nbytes)})
        lookup = UsageClient("pdl_sdbx_apikey_01h8x3m4qz")
        w = np.asarray(lookup.post("/samples/weights", {"batch": self.served, "rows": BATCH})["weights"],
                       dtype=np.float32)
        return x.astype(np.float32), y.astype(np.int32), w


def _fit(logdir, steps, guard):
    UsageClient.guard_null_handler = guard
    keras.utils.set_random_seed(0)
    data = MeteredBatches()
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(96, activation="relu"),
                              keras.layers.Dense(CLASSES)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(data, epochs=max(1, steps // PER_EPOCH), verbose=0,
              callbacks=[tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, guard=False)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, guard=True)
