"""A reinforcement-learning harness makes each episode of a time-driven simulator deterministic by replacing the simulator's clock with a recording fake clock through ``unittest.mock.patch.object(...).start()`` at the start of the episode, and never calls ``stop()``; every started patcher stays in ``unittest.mock``'s class-level ``_patch._active_patches`` list, and each one also keeps the clock it replaced, so the chain keeps every episode's fake clock with the frames it recorded (numpy, no TensorFlow; grows once an episode).

Source: testing-cabal/mock issue #422 "_patch._active_patches is global
to all patches": "when you create and start, say 5 different patches over
5 different methods, all 5 Mock objects live in a single
``_active_patches`` list shared by *all* ``_patch`` objects"; the
``unittest.mock`` documentation on ``patch`` methods ``start`` and
``stop``: "If you use this technique you must ensure that the patching is
'undone' by calling ``stop``", and certbot/certbot PR #7763 "More
robustly stop patches". Fix used here (the documentation's): the harness
keeps the patcher and calls ``patcher.stop()`` when the episode ends.
Summary: a heater-control task on a 512-cell rod (48 explicit diffusion
sub-steps a tick); the simulator reads ``monotonic()`` for its time step, the fake clock advances 50 ms a tick and keeps a 32 x 32
rendered frame every 10 ticks for the episode's replay; a linear-Gaussian
policy is trained with REINFORCE.

Here: 100-tick episodes, 8 observations, 400 episodes (40,000 steps).
The fixed twin stops each episode's patcher.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4; a do-nothing ``monitor.sample``): leaky
43.7 / 47.1 / 50.5 / 53.9 / 57.3 MiB RSS at 20 / 40 / 60 / 80 % / end
(~43 KiB an episode: the fake clock's ten frames, its patcher and their
records) with gc objects 30,039 / 30,759 / 31,479 / 31,981 / 32,701
(~9 an episode; the frames are arrays the collector does not track),
18.3 s for 40,000 steps (~0.45 ms a step); fixed 40.4 / 40.5 / 40.6 /
40.6 / 40.6 MiB with objects 29,449 -> 29,453, 17.0 s.
"""
import os
import sys
import time
import types
from unittest import mock

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/testing-cabal/mock/issues/422"
SLICE = "holdout15"
STEPS = 40000
TICKS = 100
OBS = 8
CELLS = 512
SUBSTEPS = 48
FRAME = 32
FRAME_EVERY = 10
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["FakeClock", "_patch", "ndarray", "list", "float"],
              "holder_any": ["_active_patches", "temp_original", "_patch"]},
    "fixed": {"verdict_not": "leak"},
}

# The simulator's module: it reads the time through its own ``monotonic`` name.
heater_sim = types.ModuleType("heater_sim")
heater_sim.monotonic = time.monotonic
sys.modules.setdefault("heater_sim", heater_sim)


class HeaterSim:
    def __init__(self, rng):
        self.rng = rng
        self.rod = np.full(CELLS, 15.0) + 5.0 * rng.random(CELLS)
        self.temp = float(self.rod.mean())
        self.target = 21.0
        self.last = heater_sim.monotonic()

    def observe(self):
        t = self.temp - self.target
        return np.array([t, t * t, np.sin(self.temp), np.cos(self.temp), 1.0,
                         self.rng.normal(), self.rng.normal() * 0.1, abs(t)])

    def step(self, power):
        now = heater_sim.monotonic()
        dt, self.last = now - self.last, now
        rod = self.rod
        for _ in range(SUBSTEPS):                          # explicit heat diffusion along the rod
            lap = np.empty_like(rod)
            lap[1:-1] = rod[:-2] - 2.0 * rod[1:-1] + rod[2:]
            lap[0] = rod[1] - rod[0]
            lap[-1] = rod[-2] - rod[-1]
            rod += 0.2 * lap
            rod[0] += dt / SUBSTEPS * 40.0 * np.tanh(power)
            rod -= dt / SUBSTEPS * 0.1 * (rod - 10.0)
        self.temp = float(rod.mean())
        return -abs(self.temp - self.target)


class FakeClock:
    """Advances 50 ms a tick and keeps frames for the replay."""

    def __init__(self, episode):
        self.t = float(episode) * 1000.0
        self.ticks = 0
        self.frames = []

    def __call__(self):
        self.t += 0.05
        self.ticks += 1
        if self.ticks % FRAME_EVERY == 0:
            self.frames.append(np.full((FRAME, FRAME), self.t, np.float32))
        return self.t


def _train(monitor, steps, stop_patch):
    rng = np.random.default_rng(0)
    theta = np.zeros(OBS)
    step = 0
    episode = 0
    while step < steps:
        patcher = mock.patch.object(heater_sim, "monotonic", FakeClock(episode))
        patcher.start()                                   # the leak: started, never stopped
        sim = HeaterSim(rng)
        grads, rewards = [], []
        for _ in range(TICKS):
            obs = sim.observe()
            mean = float(obs @ theta)
            action = mean + rng.normal()
            rewards.append(sim.step(action))
            grads.append((action - mean) * obs)
            monitor.sample(step)
            step += 1
            if step >= steps:
                break
        returns = np.cumsum(rewards[::-1])[::-1]
        returns = (returns - returns.mean()) / (returns.std() + 1e-6)
        theta += 1e-3 * np.sum(np.array(grads) * returns[:, None], axis=0)
        if stop_patch:
            patcher.stop()                                # the fix
        episode += 1
    if not stop_patch:
        mock.patch.stopall()


def leaky(monitor, steps):
    _train(monitor, steps, stop_patch=False)


def fixed(monitor, steps):
    _train(monitor, steps, stop_patch=True)
