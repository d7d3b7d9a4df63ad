"""An episodic trainer swaps a fresh classification head into a built Keras model every episode by unlocking the layer tracker and assigning the attribute; Keras tracking is append-only, so every old head (with its weights) stays in the model's ``_layers`` and ``trainable_variables`` for the rest of the run, and memory steps up once an episode (eager ``GradientTape`` loop; grows in bursts).

Source: keras-team/keras#18601 "Consider allowing sublayer reassignment"
(mattdangerw: "Tracking is currently 'append only,' not by attr name,
and locked after ``build()``. To work around this for a LoRA
implementation, we currently do the following", a ``replace`` helper
that sets ``parent._tracker.locked = False``, assigns the new layer, and
then also overwrites ``parent._layers[parent._layers.index(target)]``;
and keras-team/keras#22105 / #23124, which propose to untrack a
reassigned value "only if no other attribute still references it").
The leaky loop uses the first half of that workaround (unlock, assign)
without the ``_layers`` replacement. Fix used here: keep one head and
re-initialise its weights in place each episode, so nothing new is
tracked.
Summary: a few-shot learner shares a 128-1024 feature body across
episodes; each episode draws 64 new classes, puts a new
``Dense(64)`` head on ``model.head`` via ``swap_head`` and trains body
and head for 60 steps (the body's Adam built once, a plain SGD step on
the head). The model keeps every episode's head: a 1024 x 64 kernel and
bias and the layer object, ~256 KiB of weights and ~100 objects, each
episode.

Here: 128 input features, batches of 128 (2 per class), 60 steps an
episode, 80 episodes. The fixed twin assigns Glorot-uniform values
(drawn with numpy) to the one head's kernel and zeros to its bias.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21
/ Keras 3.15 / Python 3.11; a do-nothing ``monitor.sample``): leaky
564.8 / 578.3 / 617.0 MiB RSS at 20 % / 40 % / end (~0.65 MiB an
episode, at each swap) with gc objects 316,640 / 318,189 / 322,852 (~97
an episode); fixed 556.7 / 558.4 / 559.0 MiB, objects flat (315,077);
~6.7 ms a step (32.9 s leaky, 31.7 s fixed for 4,800 steps).
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/keras-team/keras/issues/18601"
SLICE = "holdout11"
STEPS = 4800           # steps; 60 per episode, 80 episodes
STEPS_PER_EPISODE = 60
FEATURES = 128
EMBED = 1024
WAYS = 64
SHOTS = 2
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["Dense", "KerasVariable", "ResourceVariable", "Variable", "EpisodicNet"],
              "holder_any": ["_layers", "EpisodicNet", "_tracker"]},
    "fixed": {"verdict_not": "leak"},
}


class EpisodicNet(keras.Model):
    def __init__(self):
        super().__init__()
        self.body = keras.layers.Dense(EMBED, activation="relu")
        self.head = keras.layers.Dense(WAYS)

    def call(self, x):
        return self.head(self.body(x))


def swap_head(model, new_head):
    locked = model._tracker.locked
    model._tracker.locked = False
    model.head = new_head                      # appended to model._layers; the old head stays there
    model._tracker.locked = locked


def _reinit_in_place(head, rng):
    limit = np.sqrt(6.0 / (EMBED + WAYS))
    head.kernel.assign(rng.uniform(-limit, limit, size=(EMBED, WAYS)).astype(np.float32))
    head.bias.assign(np.zeros(WAYS, np.float32))


def _train(monitor, steps, in_place):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    prototypes = rng.normal(size=(1000, FEATURES)).astype(np.float32)
    model = EpisodicNet()
    model(np.zeros((1, FEATURES), np.float32))
    body_opt = keras.optimizers.Adam(1e-3)
    body_opt.build(model.body.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    for step in range(steps):
        if step % STEPS_PER_EPISODE == 0:
            classes = rng.choice(len(prototypes), WAYS, replace=False)
            if in_place:
                _reinit_in_place(model.head, rng)                 # the fix: nothing new to track
            else:
                head = keras.layers.Dense(WAYS)
                head.build((None, EMBED))
                swap_head(model, head)                            # the leak: old heads stay tracked
        y = np.repeat(np.arange(WAYS), SHOTS)
        x = prototypes[classes[y]] + 0.5 * rng.standard_normal((WAYS * SHOTS, FEATURES), dtype=np.float32)
        head_vars = [model.head.kernel, model.head.bias]
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x))
        grads = tape.gradient(loss, model.body.trainable_variables + head_vars)
        n_body = len(model.body.trainable_variables)
        body_opt.apply_gradients(zip(grads[:n_body], model.body.trainable_variables))
        for v, g in zip(head_vars, grads[n_body:]):
            v.assign_sub(0.05 * g)
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, in_place=False)


def fixed(monitor, steps):
    _train(monitor, steps, in_place=True)
