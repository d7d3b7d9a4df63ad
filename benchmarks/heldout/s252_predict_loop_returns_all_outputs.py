"""A pathology pipeline trains a patch encoder on a ``tf.data`` pipeline for the first 40 % of its steps, then runs the trainer's predict loop over a long stream of unlabelled patches to embed them for the next stage; a writer callback saves each batch's embeddings to disk, but, like eva's ``predict`` interface before issue #172, the loop is called with Lightning's default ``return_predictions=True``, so the trainer also appends every batch's output tensor to the list it would return at the end (TensorFlow ``tf.data`` + ``tf.function``; late onset at 40 %, then ~17 KiB a step: one 64x64 float32 ``EagerTensor`` of embeddings a batch).

Source: kaiko-ai/eva issue #172 "Fix memory leakage in predict function"
(closed): "Currently in the interface method ``predict``, we do the
following: ``trainer.predict(model=model, datamodule=predict_datamodule)``
However, this accumulates all the predicts tensors in order to return them,
causing the memory to raise unnecessary as we save them on disk. Instead,
we should disable it, by setting ``return_predictions=False``". Fix used
here (the issue's): the predict loop is called with
``return_predictions=False``; the embeddings go only to the writer.
Summary: the trainer is a stand-in with Lightning's predict-loop shape
(``predict(model, dataloader, return_predictions=True)`` running
``predict_step`` per batch, calling the callbacks'
``on_predict_batch_end`` and collecting the outputs when asked to). The
encoder is a Keras 96-128-64 MLP over flattened 96-value patch features
with a linear head, trained with a ``tf.function`` step on a shuffled,
augmented, batched and prefetched ``tf.data`` pipeline. The predict stream
is a ``tf.data`` generator of unlabelled patches; the writer buffers 32
batches and appends them to an ``.npy`` shard file (the buffer fills and
empties, in both variants).

Here: 8,000 steps (3,200 training steps, then 4,800 predict batches). The
fixed run calls the predict loop with ``return_predictions=False``.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11, numpy 2.4; a do-nothing ``monitor.sample``; RSS
read before each object count, at the marks only): leaky 576.3 / 576.6 /
605.2 / 631.3 / 658.2 MiB RSS at 20 / 40 / 60 / 80 % / end (571.2 MiB at the
first step; flat through training, then ~17 KiB a predict batch: its 64x64
float32 output tensor) with gc objects 327,625 at the first step, then
327,260 / 327,262 / 329,438 / 331,038 / 332,638 at the same marks (two a
batch after the switch), 34.5 s for 8,000 steps (~7.8 ms a training step,
~1.8 ms a predict batch); fixed 576.3 / 577.8 / 579.1 / 579.1 / 579.1 MiB
(the predict function's trace and the writer's 32-batch buffer) with objects
327,260 / 327,262 / 327,861 / 327,863 / 327,865, 28.4 s. 36-41 s a variant
in its process, imports included.
"""
import os
import shutil
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/kaiko-ai/eva/issues/172"
SLICE = "holdout21"
STEPS = 8000
TRAIN_FRACTION = 0.4
BATCH = 64
FEATURES = 96
EMBED = 64
CLASSES = 6
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["EagerTensor", "Tensor", "tensorflow"],
              "holder_any": ["_predictions", "predictions", "Trainer", "predict"]},
    "fixed": {"verdict_not": "leak"},
}


class EmbeddingsWriter:
    def __init__(self, out_dir, flush_every=32):
        self.out_dir = out_dir
        self.flush_every = flush_every
        self.buffer = []
        self.shards = 0

    def on_predict_batch_end(self, outputs, batch_idx):
        self.buffer.append(outputs.numpy())
        if len(self.buffer) >= self.flush_every:
            self.flush()

    def flush(self):
        if self.buffer:
            np.save(os.path.join(self.out_dir, "embeddings_%05d.npy" % self.shards), np.concatenate(self.buffer))
            self.shards += 1
            self.buffer = []
            if self.shards > 4:                              # the next stage consumes old shards
                os.remove(os.path.join(self.out_dir, "embeddings_%05d.npy" % (self.shards - 5)))


class Trainer:
    """Lightning-style predict loop."""

    def __init__(self, callbacks, monitor, step_offset):
        self.callbacks = callbacks
        self.monitor = monitor
        self.step_offset = step_offset
        self._predictions = []

    def predict(self, predict_step, dataloader, max_batches, return_predictions=True):
        self._predictions = []
        for batch_idx, batch in enumerate(dataloader):
            if batch_idx >= max_batches:
                break
            outputs = predict_step(batch)
            for cb in self.callbacks:
                cb.on_predict_batch_end(outputs, batch_idx)
            if return_predictions:
                self._predictions.append(outputs)
            self.monitor.sample(self.step_offset + batch_idx)
        for cb in self.callbacks:
            cb.flush()
        return self._predictions if return_predictions else None


def _run(monitor, steps, return_predictions):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((CLASSES, FEATURES)).astype(np.float32)
    labels = rng.integers(0, CLASSES, 16384)
    feats = (centers[labels] + rng.standard_normal((16384, FEATURES))).astype(np.float32)

    def augment(x, y):
        x = x * tf.random.uniform([], 0.9, 1.1) + tf.random.normal(tf.shape(x), stddev=0.05)
        return x, y

    train_ds = (tf.data.Dataset.from_tensor_slices((feats, labels.astype(np.int32))).shuffle(4096).repeat()
                .map(augment, num_parallel_calls=2).batch(BATCH).prefetch(2))

    def unlabelled():
        g = np.random.default_rng(1)
        while True:
            y = g.integers(0, CLASSES, BATCH)
            yield (centers[y] + g.standard_normal((BATCH, FEATURES))).astype(np.float32)

    predict_ds = tf.data.Dataset.from_generator(
        unlabelled, output_signature=tf.TensorSpec((BATCH, FEATURES), tf.float32)).prefetch(2)

    encoder = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(128, activation="relu"),
                                keras.layers.Dense(EMBED)])
    head = keras.layers.Dense(CLASSES)
    head.build((None, EMBED))
    params = encoder.trainable_variables + head.trainable_variables
    opt = keras.optimizers.Adam(1e-3)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            logits = head(tf.nn.relu(encoder(x, training=True)))
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
        opt.apply_gradients(zip(tape.gradient(loss, params), params))
        return loss

    @tf.function
    def predict_step(x):
        return tf.math.l2_normalize(encoder(x, training=False), axis=1)

    n_train = int(steps * TRAIN_FRACTION)
    for step, (x, y) in enumerate(train_ds.take(n_train)):
        train_step(x, y)
        monitor.sample(step)
    out_dir = tempfile.mkdtemp(prefix="s252_")
    try:
        trainer = Trainer([EmbeddingsWriter(out_dir)], monitor, n_train)
        trainer.predict(predict_step, predict_ds, steps - n_train, return_predictions=return_predictions)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


def leaky(monitor, steps):
    _run(monitor, steps, return_predictions=True)


def fixed(monitor, steps):
    _run(monitor, steps, return_predictions=False)
