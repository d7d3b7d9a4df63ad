"""A plateau callback reads the run's own TensorBoard event files back at every epoch end with one long-lived ``EventAccumulator`` to smooth the per-batch curves, created with ``size_guidance={"tensors": 0}`` (its docstring: "If the size is 0, all events are stored"); each ``Reload()`` adds the new events and nothing is ever dropped, so the accumulator holds every scalar of every batch for the whole run (``model.fit`` + ``LeakCallback``; grows once an epoch).

Source: tensorflow/tensorboard issue #1002 "Dealing with many large event
logs", where the maintainer (nfelt) explains that "TensorBoard should be
keeping only a fixed-size sample of the loaded data in memory, not the
full size of the original log directory" (the reservoirs sized by
``size_guidance``), and tensorflow/tensorboard issue #2361, where a user
who saw only the last histogram raised ``size_guidance`` to load every
step. Fix used here (the maintainer's): a bounded reservoir
(``size_guidance={"tensors": 500}``), which fills and then holds a
uniform sample of each tag.
Summary: a 32-64-64-1 Keras MLP trained with ``model.fit``; a callback
writes four scalars a batch (loss, learning rate and two weight norms)
with ``tf.summary`` to the run's event file, flushes at every epoch end
and reloads the accumulator to decide whether the loss has plateaued.

Here: 40 batches of 32 an epoch, 150 epochs (6,000 batches). The fixed
twin keeps 500 events a tag.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4, TF 2.21 / Keras 3.15, TensorBoard 2.21; a do-nothing
``monitor.sample``; ``LeakCallback`` replaced by a stub callback): leaky
591.7 / 599.0 / 606.8 / 613.5 / 620.5 MiB RSS at 20 / 40 / 60 / 80 % /
end (~6 KiB a batch, added at each epoch's ``Reload()``: four
``TensorEvent`` records with their ``TensorProto``) with gc objects
347,248 / 356,848 / 366,201 / 375,801 / 385,401 (8 a batch), 31.3 s for
6,000 batches (~5 ms a batch); fixed 588.1 / 588.0 / 588.2 / 587.7 /
588.3 MiB with objects 341,968 -> 341,970 (the reservoirs are full after
500 batches), 29.9 s. The summaries take their step from a
``tf.Variable`` advanced with ``assign_add(1)`` and their values as
tensors: with a Python int step and Python floats both twins' C heap
grew (~2.5 KiB a batch in a first version of the fixed twin), the eager
scalar conversion the README notes for ``holdout12``.
"""
import os
import shutil
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras
from tensorboard.backend.event_processing import event_accumulator

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/tensorflow/tensorboard/issues/1002"
SLICE = "holdout15"
STEPS = 6000           # batches; 40 per epoch, 150 epochs
STEPS_PER_EPOCH = 40
BATCH = 32
FEATURES = 32
RESERVOIR = 500
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["TensorEvent", "TensorProto", "tuple", "list", "Reservoir"],
              "holder_any": ["accumulator", "tensors", "_buckets", "Reservoir"]},
    "fixed": {"verdict_not": "leak"},
}


class CurveLogger(keras.callbacks.Callback):
    """Per-batch scalars with tf.summary, read back at each epoch end."""

    def __init__(self, logdir, keep):
        super().__init__()
        self.writer = tf.summary.create_file_writer(logdir)
        self.accumulator = event_accumulator.EventAccumulator(
            logdir, size_guidance={event_accumulator.TENSORS: keep})   # 0: the leak, keep everything
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False)
        self.plateaus = 0

    def on_train_batch_end(self, batch, logs=None):
        with self.writer.as_default(step=self.step):
            tf.summary.scalar("batch/loss", np.asarray(logs["loss"], np.float32))
            tf.summary.scalar("batch/lr", tf.convert_to_tensor(self.model.optimizer.learning_rate))
            tf.summary.scalar("weights/dense_0", tf.norm(self.model.layers[0].kernel))
            tf.summary.scalar("weights/dense_2", tf.norm(self.model.layers[2].kernel))
        self.step.assign_add(1)

    def on_epoch_end(self, epoch, logs=None):
        self.writer.flush()
        self.accumulator.Reload()
        losses = np.array([e.tensor_proto.float_val[0] if e.tensor_proto.float_val
                           else tf.make_ndarray(e.tensor_proto).item()
                           for e in self.accumulator.Tensors("batch/loss")])
        if len(losses) > 200 and abs(losses[-100:].mean() - losses[-200:-100].mean()) < 1e-4:
            self.plateaus += 1

    def on_train_end(self, logs=None):
        self.writer.close()


def _fit(logdir, steps, keep):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    n = STEPS_PER_EPOCH * BATCH
    x = rng.standard_normal((n, FEATURES)).astype(np.float32)
    y = np.tanh(x @ rng.standard_normal(FEATURES).astype(np.float32) / 4)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    events = tempfile.mkdtemp(prefix="curves-")
    try:
        model.fit(x, y, batch_size=BATCH, epochs=max(1, steps // STEPS_PER_EPOCH), shuffle=True, verbose=0,
                  callbacks=[CurveLogger(events, keep), tb_leak_plugin.keras.LeakCallback(logdir)])
    finally:
        shutil.rmtree(events, ignore_errors=True)


def leaky_fit(logdir, steps):
    _fit(logdir, steps, keep=0)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, keep=RESERVOIR)
