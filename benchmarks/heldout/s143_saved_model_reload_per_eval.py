"""A distillation loop reloads its teacher with ``tf.saved_model.load`` at every evaluation round "to pick up the newest export"; every load restores the SavedModel's functions and objects again and part of each load is never released, so memory steps up once a round (eager ``GradientTape`` loop; grows in bursts).

Source: tensorflow/tensorflow#40171 "Memory leak when repeatedly loading
and deleting keras models" ("If a Keras model is saved using
``tf.saved_model.save`` and then repeatedly loaded with
``tf.saved_model.load`` and deleted with ``del`` it becomes apparent
that there is a slow memory leak. ``keras.backend.clear_session`` does
not resolve this issue") and tensorflow/tensorflow#45453 "Suspected
memory leak - when loading multiple models with tf.saved_model.load".
Fix used here: load the SavedModel once
and, at each round, restore only its variables from the export's
checkpoint (``tf.train.Checkpoint(teacher).read(...)``).
Summary: a student MLP is distilled from a teacher exported once as a
SavedModel (a ``tf.Module`` with a ``serve`` signature); every 50 steps
the evaluation round re-reads the teacher from disk and scores the
student against it on a held-out batch.

Here: batches of 64 x 32 float32, a 32-64-10 teacher and a 32-32-10
student, 120 evaluation rounds. The fixed twin restores the variables
into the teacher it loaded once.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4, TF 2.21 / Keras 3.15; a do-nothing ``monitor.sample``): leaky
560.3 / 565.2 / 570.0 / 575.0 / 577.8 MiB RSS at 20 / 40 / 60 / 80 % /
end (~0.19 MiB a reload round, 120 rounds) with gc objects 329,913 /
336,261 / 342,669 / 349,077 and 323,718 at the end (much of each load
is cyclic garbage that a collection frees; the native part stays),
16.1 s for 6,000 steps; fixed 552.8 / 555.3 / 555.3 / 555.3 / 555.3 MiB
with objects flat (319,954 -> 319,958), 14.3 s.
"""
import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

SOURCE = "https://github.com/tensorflow/tensorflow/issues/40171"
SLICE = "holdout12"
STEPS = 6000
EVAL_EVERY = 50
BATCH = 64
FEATURES = 32
CLASSES = 10
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["native", "rss", "Function", "Loader", "Variable", "AutoTrackable",
                                                 "TensorSpec", "dict"]},
    "fixed": {"verdict_not": "leak"},
}


class Teacher(tf.Module):
    def __init__(self):
        super().__init__()
        init = tf.random.stateless_normal
        self.w1 = tf.Variable(init((FEATURES, 64), seed=(1, 2)) * 0.3)
        self.w2 = tf.Variable(init((64, CLASSES), seed=(3, 4)) * 0.3)

    @tf.function(input_signature=[tf.TensorSpec([None, FEATURES], tf.float32)])
    def serve(self, x):
        return tf.nn.softmax(tf.matmul(tf.nn.relu(tf.matmul(x, self.w1)), self.w2) / 2.0)


def _export():
    path = os.path.join(tempfile.mkdtemp(prefix="teacher-"), "export")
    tf.saved_model.save(Teacher(), path)
    return path


def _train(monitor, steps, reload):
    path = _export()
    teacher = tf.saved_model.load(path)
    ckpt_prefix = os.path.join(path, "variables", "variables")
    rng = np.random.default_rng(0)
    student = [tf.Variable(rng.normal(size=(FEATURES, 32)).astype(np.float32) * 0.2),
               tf.Variable(np.zeros((32, CLASSES), np.float32))]
    opt = tf.keras.optimizers.SGD(0.1)
    x_val = tf.constant(rng.standard_normal((256, FEATURES), dtype=np.float32))
    agreement = []
    for step in range(steps):
        x = tf.constant(rng.standard_normal((BATCH, FEATURES), dtype=np.float32))
        target = teacher.serve(x)
        with tf.GradientTape() as tape:
            logits = tf.matmul(tf.nn.relu(tf.matmul(x, student[0])), student[1])
            loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(target, logits))
        opt.apply_gradients(zip(tape.gradient(loss, student), student))
        if (step + 1) % EVAL_EVERY == 0:
            if reload:
                teacher = tf.saved_model.load(path)                # the leak: a full reload every round
            else:
                tf.train.Checkpoint(teacher).read(ckpt_prefix).expect_partial()   # the fix: variables only
            t = tf.argmax(teacher.serve(x_val), 1)
            s = tf.argmax(tf.matmul(tf.nn.relu(tf.matmul(x_val, student[0])), student[1]), 1)
            agreement.append(float(tf.reduce_mean(tf.cast(t == s, tf.float32))))
        monitor.sample(step)
    return agreement


def leaky(monitor, steps):
    _train(monitor, steps, reload=True)


def fixed(monitor, steps):
    _train(monitor, steps, reload=False)
