"""A forward hook registered per forward pass, and only the last one removed: hooks pile up on the model.

Source: huggingface/peft#2761 "FIX X-LoRA forward hook issue during generate"
("forward hooks would accumulate during generation, since one hook per forward
step was being registered ... only the last hook was removed, resulting in
hooks accumulating"); the fix keeps every handle and removes all of them in a
``try ... finally``. The same leak as NeuroBench/neurobench#184 (hooks added on
each run and never removed) and fffasttime/MRFI#5 (handles discarded, every
hook's closure kept).
Summary: a gated model injects per-batch scalings into its hidden layer
through a forward pre-hook registered just before each forward call; a
training step makes two forward passes (the task loss and a consistency loss
on a perturbed copy) and its clean-up removes only the last handle. Every
step leaves one hook, whose closure holds that step's scalings tensor, in the
model's hook dict. Fix from the PR: remove all the step's hooks.

Here: the hook API is the model's own (a ``tf.Module`` with a
``_forward_pre_hooks`` dict, the same design as PyTorch's); a 32 x 128 float32
scalings tensor (16 KiB) per hook; eager ``GradientTape`` steps.

Checked without tb-leak (psutil RSS, fresh process, TF 2.21 / Keras 3.15 /
Python 3.11): leaky +30.9 MiB RSS from 20 % of the run to the end (~20 KiB per step),
fixed +0.3 MiB; ~11-12 ms a step.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

SOURCE = "https://github.com/huggingface/peft/pull/2761"
SLICE = "holdout3"
STEPS = 2000
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["EagerTensor", "Tensor", "function", "cell", "HookHandle"],
              "holder_any": ["_forward_pre_hooks", "hooks"]},
    "fixed": {"verdict_not": "leak"},
}


class HookHandle:
    def __init__(self, hooks, key):
        self.hooks, self.key = hooks, key

    def remove(self):
        self.hooks.pop(self.key, None)


class GatedMLP(tf.Module):
    def __init__(self):
        super().__init__()
        tf.random.set_seed(0)
        self.w1 = tf.Variable(tf.random.normal((64, 128), stddev=0.1))
        self.w2 = tf.Variable(tf.random.normal((128, 1), stddev=0.1))
        self.gate = tf.Variable(tf.random.normal((64, 128), stddev=0.1))
        self._forward_pre_hooks = {}
        self._next_hook = 0

    def register_forward_pre_hook(self, fn):
        key = self._next_hook
        self._next_hook += 1
        self._forward_pre_hooks[key] = fn
        return HookHandle(self._forward_pre_hooks, key)

    def __call__(self, x):
        ctx = {}
        for hook in list(self._forward_pre_hooks.values()):     # in registration order; the last one wins
            hook(ctx)
        h = tf.nn.relu(tf.matmul(x, self.w1)) * ctx.get("scalings", 1.0)
        return tf.matmul(h, self.w2)


def _inject(scalings):
    def hook(ctx):
        ctx["scalings"] = scalings
    return hook


def _batches(steps):
    rng = np.random.default_rng(0)
    true_w = rng.standard_normal((64, 1)).astype(np.float32)
    for _ in range(steps):
        x = rng.standard_normal((32, 64)).astype(np.float32)
        yield tf.constant(x), tf.constant(x @ true_w)


def _step(model, x, y, remove_all):
    scalings = tf.sigmoid(tf.matmul(x, model.gate))              # per-batch scalings, 32 x 128
    handles = []
    try:
        with tf.GradientTape() as tape:
            handles.append(model.register_forward_pre_hook(_inject(scalings)))
            task = tf.reduce_mean(tf.square(model(x) - y))
            handles.append(model.register_forward_pre_hook(_inject(scalings)))
            consistency = tf.reduce_mean(tf.square(model(x + 0.01) - model(x)))
            loss = task + 0.1 * consistency
    finally:
        if remove_all:
            for handle in handles:
                handle.remove()
        else:
            handles[-1].remove()                                  # the bug: only the last hook is removed
    variables = [model.w1, model.w2]
    for v, g in zip(variables, tape.gradient(loss, variables)):
        v.assign_sub(0.01 * g)


def leaky(monitor, steps):
    model = GatedMLP()
    for step, (x, y) in enumerate(_batches(steps)):
        _step(model, x, y, remove_all=False)
        monitor.sample(step)


def fixed(monitor, steps):
    model = GatedMLP()
    for step, (x, y) in enumerate(_batches(steps)):
        _step(model, x, y, remove_all=True)
        monitor.sample(step)
