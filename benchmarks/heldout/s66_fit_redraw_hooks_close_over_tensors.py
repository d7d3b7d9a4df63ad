"""A live-plot callback queues a redraw closure per batch that closes over the batch's tensors, and runs but never releases them (``model.fit``).

Source: cdtools-developers/cdtools#87 "Fix a memory leak in the plotting"
("This memory leak had to do with callbacks which closed over stale tensors
that would never be released, and only appeared in panel plot mode. The fix
is to just check explicitly for new callbacks after each iteration and
release them within the ``model.inspect()`` code"). Fix from the PR:
release the update callbacks once they have run.
Summary: a callback keeps a panel of validation predictions up to date.
After every batch it predicts a rotating slice of validation images and
queues a redraw closure over those images and predictions; at the end of
each epoch it runs the queued closures to refresh the panel, but keeps
them, so every batch's tensors stay reachable through the closures' cells.

Here: a small Keras CNN (two 3 x 3 convolutions, 16 and 32 filters) on
64 x 32 x 32 x 3 batches, 50 batches an epoch; each closure holds 4
validation images and their predictions as eager tensors (~48 KiB). The
fixed twin clears the queue after the refresh: it grows within an epoch
and empties at its end (a sawtooth of up to ~2.4 MiB).

Checked without tb-leak (psutil RSS, gc objects, fresh process, TF 2.21 /
Keras 3.15 / Python 3.11): leaky +37.8 MiB RSS from 20 % of the run to the
end (~60 KiB per batch, +8 gc-tracked objects a batch), fixed +0.4 to
+3.2 MiB from 20 % (three runs; the allocator settles within the first
half, then +0.2 MiB over the second half; gc objects back to the same count
every epoch); ~40 ms a batch.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/cdtools-developers/cdtools/pull/87"
SLICE = "holdout5"
STEPS = 800            # batches; 50 batches per epoch, 16 epochs
STEPS_PER_EPOCH = 50
BATCH = 64
PANEL = 4
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["EagerTensor", "Tensor", "function", "cell"],
              "holder_any": ["_redraw_hooks", "LivePanel"]},
    "fixed": {"verdict_not": "leak"},
}


class LivePanel(keras.callbacks.Callback):
    def __init__(self, x_val, release_after_run):
        super().__init__()
        self.x_val = x_val
        self.release_after_run = release_after_run
        self._redraw_hooks = []
        self.panel = None
        self._cursor = 0

    def _draw(self, images, preds):
        # stands in for updating the panel's image grid and labels
        self.panel = (float(tf.reduce_mean(images)), int(tf.argmax(preds[0])))

    def on_train_batch_end(self, batch, logs=None):
        start = self._cursor % (len(self.x_val) - PANEL)
        self._cursor += PANEL
        images = tf.constant(self.x_val[start:start + PANEL])
        preds = tf.nn.softmax(self.model(images, training=False))
        self._redraw_hooks.append(lambda: self._draw(images, preds))   # closes over this batch's tensors

    def on_epoch_end(self, epoch, logs=None):
        for hook in self._redraw_hooks:
            hook()
        if self.release_after_run:                    # the fix: release the hooks once run
            self._redraw_hooks = []


def _fit(logdir, steps, release_after_run):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    n = STEPS_PER_EPOCH * BATCH
    y = rng.integers(0, 10, size=n)
    x = (rng.random((n, 32, 32, 3), dtype=np.float32) + y[:, None, None, None] / 10.0).astype(np.float32)
    x_val = rng.random((512, 32, 32, 3), dtype=np.float32)
    model = keras.Sequential([
        keras.Input(shape=(32, 32, 3)),
        keras.layers.Conv2D(16, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(10),
    ])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=BATCH, epochs=max(1, steps // STEPS_PER_EPOCH), verbose=0, shuffle=True,
              callbacks=[LivePanel(x_val, release_after_run), tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, release_after_run=False)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, release_after_run=True)
