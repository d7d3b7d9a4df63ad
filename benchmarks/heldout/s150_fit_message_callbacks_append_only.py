"""A ``PyDataset`` asks an augmentation service for each batch's policy over an in-process message bus and registers a reply callback (a closure over the batch) under the request's message id; the bus's callback container is append-only, so after the reply has been dispatched every batch's callback, with the batch's arrays, stays in it (``model.fit``).

Source: amyangfei/GorMW#18 "Memory leak in message callback container"
("Message callback is append only, there is no GC mechanism currently";
gor's Python middleware keeps every request's callback in a dict keyed
by message id and never removes it; the issue points to the Node.js
library's GC strategy, buger/goreplay commit debb265, as the one to copy). Fix used here: the bus
pops the callback when it dispatches the reply.
Summary: image patches are augmented according to a policy (crop scale,
brightness, flip) that an augmentation-policy service returns per batch;
``__getitem__`` publishes a request, registers ``on_reply`` (closing
over the batch's images and labels) and pumps the bus until the reply
has been applied.

Here: batches of 32 x 16 x 16 x 1 float32 patches (32 KiB), a small
conv net, 20 batches an epoch, 225 epochs; the "service" answers on the
same bus. The fixed twin's bus forgets a callback after calling it.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4, TF 2.21 / Keras 3.15; a do-nothing ``monitor.sample``; ``LeakCallback`` replaced by a stub callback): leaky
628.0 / 685.5 / 743.1 / 800.5 / 857.9 MiB RSS at 20 / 40 / 60 / 80 % /
end (~64 KiB a batch: the patches and their augmented copy) with gc
objects 333,207 / 337,708 / 342,208 / 346,708 / 351,195 (five a batch:
the closure, its cells, the output dict), 10.9 s for 4,500 batches;
fixed 571.2 / 571.5 / 571.5 / 571.5 / 571.6 MiB with objects flat
(328,922 -> 328,922), 10.0 s.
"""
import itertools
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/amyangfei/GorMW/issues/18"
SLICE = "holdout12"
STEPS = 4500           # batches; 20 per epoch, 225 epochs
STEPS_PER_EPOCH = 20
BATCH = 32
SIZE = 16
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["function", "cell", "ndarray", "closure", "on_reply"],
              "holder_any": ["_callbacks", "MessageBus"]},
    "fixed": {"verdict_not": "leak"},
}


class MessageBus:
    def __init__(self, forget_after_reply):
        self._callbacks = {}
        self._outbox = []
        self._ids = itertools.count()
        self.forget_after_reply = forget_after_reply

    def request(self, payload, callback):
        msg_id = "%08x" % next(self._ids)
        self._callbacks[msg_id] = callback                      # kept until ... never (append-only)
        self._outbox.append((msg_id, payload))
        return msg_id

    def pump(self, service):
        while self._outbox:
            msg_id, payload = self._outbox.pop(0)
            reply = service(payload)
            if self.forget_after_reply:
                callback = self._callbacks.pop(msg_id)          # the fix: forget it once handled
            else:
                callback = self._callbacks[msg_id]              # the leak: it stays in the container
            callback(reply)


def policy_service(payload):
    rng = np.random.default_rng(payload["seed"])
    return {"scale": float(rng.uniform(0.8, 1.0)), "brightness": float(rng.uniform(-0.1, 0.1)),
            "flip": bool(rng.random() < 0.5)}


class Patches(keras.utils.PyDataset):
    def __init__(self, forget_after_reply, **kw):
        super().__init__(**kw)
        self.bus = MessageBus(forget_after_reply)
        self.rng = np.random.default_rng(0)
        self.seed = itertools.count()

    def __len__(self):
        return STEPS_PER_EPOCH

    def __getitem__(self, idx):
        y = self.rng.integers(0, 2, BATCH).astype(np.float32)
        x = self.rng.standard_normal((BATCH, SIZE, SIZE, 1), dtype=np.float32)
        x[y == 1, :SIZE // 2] += 1.0
        out = {}

        def on_reply(policy):
            imgs = x * policy["scale"] + policy["brightness"]
            if policy["flip"]:
                imgs = imgs[:, :, ::-1]
            out["x"], out["y"] = imgs, y

        self.bus.request({"seed": next(self.seed), "shape": x.shape}, on_reply)
        self.bus.pump(policy_service)
        return out["x"], out["y"]


def _fit(logdir, steps, forget_after_reply):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((SIZE, SIZE, 1)), keras.layers.Conv2D(8, 3, activation="relu"),
                              keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer="adam", loss="binary_crossentropy")
    epochs = max(1, steps // STEPS_PER_EPOCH)
    model.fit(Patches(forget_after_reply), epochs=epochs, verbose=0,
              callbacks=[tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, forget_after_reply=False)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, forget_after_reply=True)
