"""A "shadow evaluation" callback stages the model's weights at every epoch end for an uploader, in a fresh directory of TensorFlow's in-memory ``ram://`` filesystem (the fallback Keras's own saving code uses when the disk is short), and never deletes the directory after the upload; the files live in the filesystem's native buffers, so every epoch's weights stay in memory while no Python object grows (``model.fit``; native memory only, gc counts flat).

Source: Keras's pickling and saving helpers, which stage models in
``ram://`` directories: ``keras/saving/pickle_utils.py``
(``serialize_model_as_bytecode``: ``temp_dir = f"ram://{uuid.uuid4()}"``,
``model.save(temp_dir)``, tar it, then ``tf.io.gfile.rmtree(temp_dir)``)
and ``saving_lib._get_temp_dir`` ("Fallback on RAM if disk is
nonwritable or if less than 2GB available"), with the later
``tf.io.gfile.rmtree(temp_path)`` "Remove the directory temporarily
used"; NVIDIA-Merlin/models#928 describes Keras pickling through "the
tf.io in-memory filesystem" and its replacement by a temporary directory
on disk in keras-team/keras commit 2ed044d. A ``ram://`` file is freed
only when it is deleted. Fix used here (Keras's): ``tf.io.gfile.rmtree``
of the staging directory once the upload has read it.
Summary: a classifier trained with ``model.fit``; a callback serialises
each weight tensor into ``ram://shadow-<uuid>/`` at the end of every
epoch and an "uploader" reads the files back and checksums them.

Here: 1,280 x 256 float32 inputs, a 256-512-10 model (~0.53 MiB of
weights), batches of 64 (20 a epoch), 300 epochs. The fixed twin
removes each staging directory after its upload.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4, TF 2.21 / Keras 3.15; a do-nothing ``monitor.sample``;
``LeakCallback`` replaced by a stub callback): leaky 605.5 / 637.5 /
669.3 / 701.0 / 732.8 MiB RSS at 20 / 40 / 60 / 80 % / end (~0.53 MiB an
epoch, a step every 20 batches) with gc objects flat (322,170 ->
322,171), 10.2 s for 6,000 batches; fixed 575.7 / 576.6 / 577.3 / 577.6
/ 578.1 MiB with objects flat (322,170 -> 322,171), 10.0 s.
"""
import os
import uuid
import zlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/NVIDIA-Merlin/models/issues/928"
SLICE = "holdout13"
STEPS = 6000           # batches; 20 per epoch, 300 epochs
STEPS_PER_EPOCH = 20
BATCH = 64
FEATURES = 256
HIDDEN = 512
CLASSES = 10
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["native", "rss", "ram", "file"]},
    "fixed": {"verdict_not": "leak"},
}


class ShadowStaging(keras.callbacks.Callback):
    def __init__(self, remove_after_upload):
        super().__init__()
        self.remove_after_upload = remove_after_upload
        self.checksums = {}

    def on_epoch_end(self, epoch, logs=None):
        stage = "ram://shadow-%s" % uuid.uuid4().hex
        tf.io.gfile.makedirs(stage)
        for i, w in enumerate(self.model.weights):
            tf.io.write_file("%s/w%02d.pb" % (stage, i), tf.io.serialize_tensor(tf.convert_to_tensor(w)))
        crc = 0
        for name in sorted(tf.io.gfile.listdir(stage)):             # the "upload"
            crc = zlib.crc32(tf.io.read_file("%s/%s" % (stage, name)).numpy(), crc)
        self.checksums = {"epoch": epoch, "crc": crc}
        if self.remove_after_upload:
            tf.io.gfile.rmtree(stage)                               # the fix: free the staged files
        # the leak: without it, the ram:// files stay for the rest of the process


def _fit(logdir, steps, remove_after_upload):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    n = STEPS_PER_EPOCH * BATCH
    centers = rng.normal(size=(CLASSES, FEATURES)).astype(np.float32)
    y = rng.integers(0, CLASSES, n)
    x = centers[y] + rng.standard_normal((n, FEATURES), dtype=np.float32)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(HIDDEN, activation="relu"),
                              keras.layers.Dense(CLASSES)])
    model.compile(optimizer=keras.optimizers.SGD(0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    epochs = max(1, steps // STEPS_PER_EPOCH)
    model.fit(x, y, batch_size=BATCH, epochs=epochs, verbose=0, shuffle=True,
              callbacks=[ShadowStaging(remove_after_upload), tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, remove_after_upload=False)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, remove_after_upload=True)
