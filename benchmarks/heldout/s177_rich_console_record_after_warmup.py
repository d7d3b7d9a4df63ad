"""An eager training loop reports through a ``rich`` console created with ``record=True`` so that the session can be saved as HTML when training ends; once the learning-rate warm-up is over (30 % of the run) it prints a small table of per-layer statistics every step, and a recording console keeps every rendered segment of everything it prints in its record buffer until the buffer is exported, so from 30 % on the buffer grows by a table a step (eager ``GradientTape`` + Keras layers; late onset).

Source: Textualize/rich issue #245 "Impossible to save_html after
save_text and vice versa", where the maintainer (willmcgugan) explains
the recording console: "The buffer is normally cleared after a save.
Set ``clear=False`` to preserve the buffer" (rich's ``Console``
docstring: ``record`` is a "Boolean to enable recording of terminal
output, required to call ``export_html``, ``export_svg``, and
``export_text``"; ``export_text(clear=True)`` will "Clear record buffer
after exporting"); a console that records a whole run and saves only at
the end holds the run's output in memory. Fix used here
(the maintainer's): export the recorded text at every epoch end with
``export_text(clear=True)`` and append it to the log file, so the buffer
holds at most one epoch.
Summary: a 32-128-128-10 Keras MLP trained with ``tf.GradientTape`` on
synthetic classification batches; the diagnostics table lists each
layer's weight norm, gradient norm and update ratio.

Here: batches of 64, 2,000 steps, 100 steps an epoch, the table from
step 600 on. The console writes to ``os.devnull`` (the terminal); the
fixed twin exports and clears the record every epoch.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4, TF 2.21 / Keras 3.15, rich 15; a do-nothing
``monitor.sample``): leaky 564.4 / 568.8 / 573.7 / 578.9 / 583.6 MiB RSS
at 20 / 40 / 60 / 80 % / end (flat to 30 %, then ~12 KiB a step: the
rendered table's segments) with gc objects 314,988 / 333,134 / 368,968 /
404,945 / 441,038 (~90 a step after the onset), 23.6 s for 2,000 steps
(~9 ms a step before the onset, ~13 ms after); fixed 564.3 / 567.8 /
568.9 / 569.5 / 569.5 MiB with objects 314,972 / 315,074 / 315,062 /
314,853 / 314,922, 26.1 s. The fixed twin's RSS settles after the
onset (a 5,000-step check: 564.3 / 568.5 / 568.9 / 569.6 / 569.7 MiB,
objects 314,984 -> 314,911): the allocator taking in one epoch of
rendered text, not a growth.
"""
import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras
from rich.console import Console
from rich.table import Table

SOURCE = "https://github.com/Textualize/rich/issues/245"
SLICE = "holdout15"
STEPS = 2000
STEPS_PER_EPOCH = 100
WARMUP = 0.3
BATCH = 64
FEATURES = 32
CLASSES = 10
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["Segment", "Style", "str", "tuple", "list", "Console"],
              "holder_any": ["_record_buffer", "console", "Console"]},
    "fixed": {"verdict_not": "leak"},
}


def _table(step, model, grads, lr):
    table = Table(title="step %d" % step, show_edge=False)
    for col in ("layer", "|w|", "|g|", "update/|w|"):
        table.add_column(col, justify="right")
    for var, g in zip(model.trainable_variables, grads):
        wn = float(tf.norm(var))
        gn = float(tf.norm(g))
        table.add_row(var.path, "%.4f" % wn, "%.4f" % gn, "%.2e" % (lr * gn / (wn + 1e-12)))
    return table


def _train(monitor, steps, export_each_epoch):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    devnull = open(os.devnull, "w")
    console = Console(record=True, file=devnull, width=100, color_system="truecolor",
                      force_terminal=True)
    log_path = os.path.join(tempfile.mkdtemp(prefix="richlog-"), "train.log")
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(128, activation="relu"),
                              keras.layers.Dense(128, activation="relu"), keras.layers.Dense(CLASSES)])
    opt = keras.optimizers.SGD(0.05)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    w_true = rng.standard_normal((FEATURES, CLASSES)).astype(np.float32)
    warmup_steps = int(steps * WARMUP)
    try:
        for step in range(steps):
            x = rng.standard_normal((BATCH, FEATURES)).astype(np.float32)
            y = np.argmax(x @ w_true, axis=1)
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            if step >= warmup_steps:
                console.print(_table(step, model, grads, 0.05))        # the leak: recorded for the run
            if step % STEPS_PER_EPOCH == STEPS_PER_EPOCH - 1:
                console.print("epoch %d  loss %.4f" % (step // STEPS_PER_EPOCH, float(loss)))
                if export_each_epoch:
                    with open(log_path, "a") as f:                     # the fix: export and clear
                        f.write(console.export_text(clear=True))
            monitor.sample(step)
    finally:
        devnull.close()


def leaky(monitor, steps):
    _train(monitor, steps, export_each_epoch=False)


def fixed(monitor, steps):
    _train(monitor, steps, export_each_epoch=True)
