"""Each rollout episode builds a trajectory recorder that registers its ``flush`` bound method with a process-global ``on_shutdown`` registry (so a crash still writes the last trajectory); the registry holds handlers strongly in a module-level list and nothing ever removes them, so every finished episode's recorder, with its observation and action buffers, is pinned for the life of the process (numpy, no TensorFlow; a burst per episode).

Source: zauberzeug/rosys PR #443 "Derive the shutdown handler lifetime
from the handler type": "``rosys.on_shutdown`` held its handlers
**strongly** in a process-global list, so every per-request module that
registers one was pinned for the life of the process. Measured: 60
page-views -> 60/60 ``Automator`` instances still alive ... With this
change they are collected"; its second commit lets "a dead shutdown
handler remove itself from the registry", so the registry "stays at 1
entry (was 501)". Fix used here (the PR's): a bound method is stored as
a ``weakref.WeakMethod`` whose callback removes the dead entry.
Summary: a policy-gradient loop on a toy 32-dimensional control task
(numpy): 1,000 steps an episode, the recorder keeps float32 observation
and action buffers preallocated for the episode (156 KiB) plus its
reward list.

Here: 500 episodes, 500,000 steps, a value baseline on 128 random
features, a linear Gaussian policy updated once
an episode. The fixed twin registers weak bound methods.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4; a do-nothing ``monitor.sample``): leaky
55.5 / 74.9 / 94.4 / 113.8 / 133.2 MiB RSS at 20 / 40 / 60 / 80 % / end
(~160 KiB an episode) with gc objects 23,906 / 24,207 / 24,506 / 24,807
/ 25,106 (three an episode: the recorder, its bound method, its reward
list), 5.0 s for 500,000 steps; fixed 36.6 MiB at every mark with
objects flat (23,616 -> 23,620), 5.0 s.
"""
import os
import weakref

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/zauberzeug/rosys/pull/443"
SLICE = "holdout14"
STEPS = 500000
EPISODE = 1000
OBS = 32
ACT = 8
HIDDEN = 128
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["TrajectoryRecorder", "method", "ndarray", "list"],
              "holder_any": ["shutdown_handlers", "on_shutdown"]},
    "fixed": {"verdict_not": "leak"},
}

shutdown_handlers = []
WEAK_HANDLERS = {"on": False}


def on_shutdown(handler):
    """Call the handler when the process shuts down."""
    if WEAK_HANDLERS["on"] and hasattr(handler, "__self__"):
        ref = weakref.WeakMethod(handler, lambda r: shutdown_handlers.remove(r))   # the fix
        shutdown_handlers.append(ref)
    else:
        shutdown_handlers.append(handler)                  # the leak: pinned for the process's life


class TrajectoryRecorder:
    def __init__(self, episode):
        self.episode = episode
        self.obs = np.zeros((EPISODE, OBS), np.float32)
        self.act = np.zeros((EPISODE, ACT), np.float32)
        self.rewards = []
        self.flushed = False
        on_shutdown(self.flush)

    def record(self, t, o, a, r):
        self.obs[t] = o
        self.act[t] = a
        self.rewards.append(float(r))

    def flush(self):
        self.flushed = True


def _train(monitor, steps, weak_handlers):
    WEAK_HANDLERS["on"] = weak_handlers
    shutdown_handlers.clear()
    rng = np.random.default_rng(0)
    target = rng.standard_normal((OBS, ACT)) * 0.5
    theta = np.zeros((OBS, ACT))
    w_feat = rng.standard_normal((OBS, HIDDEN)) / np.sqrt(OBS)
    w_value = np.zeros(HIDDEN)
    rec = o = None
    for step in range(steps):
        t = step % EPISODE
        if t == 0:
            if rec is not None:                               # policy-gradient update per episode
                adv = np.asarray(rec.rewards) - np.mean(rec.rewards)
                grad = rec.obs.T @ ((rec.act - rec.obs @ theta) * adv[:, None]) / EPISODE
                theta += 0.05 * grad
            rec = TrajectoryRecorder(step // EPISODE)
            o = rng.standard_normal(OBS)
        a = o @ theta + 0.3 * rng.standard_normal(ACT)
        h = np.tanh(o @ w_feat)                               # a value baseline on random features
        r = -float(np.sum((a - o @ target) ** 2))
        w_value += 1e-3 * (r - h @ w_value) * h
        rec.record(t, o, a, r)
        o = 0.9 * o + 0.1 * rng.standard_normal(OBS)
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, weak_handlers=False)


def fixed(monitor, steps):
    _train(monitor, steps, weak_handlers=True)
