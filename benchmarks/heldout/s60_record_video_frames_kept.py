"""A video-recording env wrapper writes each episode's video but never clears its frame list (eager policy).

Source: isaac-sim/IsaacLab#3387 "Fixes memory leak in video recorder"
("gymnasium still doesn't clear the video frames correctly", the memory
plot climbing through training; the PR swaps in its own wrapper until
Farama-Foundation/Gymnasium#1444 is merged). ``RecordVideo`` appends the
rendered frame of every recorded step to ``self.recorded_frames`` and, at
the end of an episode, encodes them into a video file; the frames were
kept after the file was written. Fix from the PRs: empty the frame list
when the video is closed.
Summary: a policy is evaluated with video recording on every episode, as in
a training script that records its evaluation rollouts. Each step renders a
64 x 64 RGB frame (12 KiB) that the wrapper keeps for good, so memory grows
by one frame a step, across episodes.

Here: a numpy cart-pole with a 64 x 64 renderer, a 4-64-64-2 Keras policy
called eagerly each step, episodes of up to 200 steps, each "video" zlib
encoded when the episode ends (standing in for the ffmpeg writer). The
untrained policy's episodes last ~10-40 steps; the fixed twin holds at most
one episode of frames (a small sawtooth).

Checked without tb-leak (psutil RSS, gc objects, fresh process, TF 2.21 /
Keras 3.15 / Python 3.11): leaky +31.8 MiB RSS from 20 % of the run to the
end (~13.5 KiB per step: one frame and its list slot; ``gc.get_objects()``
stays flat, as numpy arrays are not gc-tracked), fixed +0.0 MiB; ~6-7 ms a
step (an eager Keras call and a render).
"""
import os
import zlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/isaac-sim/IsaacLab/pull/3387"
SLICE = "holdout5"
STEPS = 3000           # environment steps
MAX_EPISODE = 200
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["ndarray", "numpy", "list"],
              "holder_any": ["recorded_frames", "RecordVideo"]},
    "fixed": {"verdict_not": "leak"},
}


class CartPole:
    """Classic cart-pole dynamics with a small RGB renderer."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.state = None

    def reset(self):
        self.state = self.rng.uniform(-0.05, 0.05, size=4)
        self.t = 0
        return self.state.astype(np.float32)

    def step(self, action):
        x, x_dot, theta, theta_dot = self.state
        force = 10.0 if action == 1 else -10.0
        cos, sin = np.cos(theta), np.sin(theta)
        temp = (force + 0.05 * theta_dot ** 2 * sin) / 1.1
        theta_acc = (9.8 * sin - cos * temp) / (0.5 * (4.0 / 3.0 - 0.1 * cos ** 2 / 1.1))
        x_acc = temp - 0.05 * theta_acc * cos / 1.1
        self.state = np.array([x + 0.02 * x_dot, x_dot + 0.02 * x_acc,
                               theta + 0.02 * theta_dot, theta_dot + 0.02 * theta_acc])
        self.t += 1
        done = abs(self.state[0]) > 2.4 or abs(self.state[2]) > 0.21 or self.t >= MAX_EPISODE
        return self.state.astype(np.float32), 1.0, done

    def render(self):
        frame = np.full((64, 64, 3), 255, dtype=np.uint8)
        cx = int(32 + self.state[0] * 10)
        frame[48:52, max(0, cx - 6):min(64, cx + 6)] = (40, 40, 200)
        for r in range(24):
            px = int(cx + r * np.sin(self.state[2]))
            py = int(48 - r * np.cos(self.state[2]))
            if 0 <= px < 64 and 0 <= py < 64:
                frame[py, px] = (200, 120, 40)
        return frame


class RecordVideo:
    """Records every episode; at the episode's end encodes the frames as one video."""

    def __init__(self, env, clear_on_close):
        self.env = env
        self.clear_on_close = clear_on_close
        self.recorded_frames = []
        self._episode_start = 0
        self.videos_written = 0
        self.bytes_written = 0

    def reset(self):
        obs = self.env.reset()
        self.recorded_frames.append(self.env.render())
        return obs

    def step(self, action):
        obs, reward, done = self.env.step(action)
        self.recorded_frames.append(self.env.render())
        if done:
            self.close_video_recorder()
        return obs, reward, done

    def close_video_recorder(self):
        start = 0 if self.clear_on_close else self._episode_start
        clip = np.stack(self.recorded_frames[start:])
        self.bytes_written += len(zlib.compress(clip.tobytes(), 1))
        self.videos_written += 1
        if self.clear_on_close:
            self.recorded_frames = []                 # the fix
        else:
            self._episode_start = len(self.recorded_frames)


def _evaluate(monitor, steps, clear_on_close):
    keras.utils.set_random_seed(0)
    policy = keras.Sequential([
        keras.Input(shape=(4,)),
        keras.layers.Dense(64, activation="tanh"),
        keras.layers.Dense(64, activation="tanh"),
        keras.layers.Dense(2),
    ])
    env = RecordVideo(CartPole(seed=0), clear_on_close)
    obs = env.reset()
    for step in range(steps):
        logits = policy(tf.constant(obs[None]), training=False)
        action = int(tf.argmax(logits[0]))
        obs, _, done = env.step(action)
        if done:
            obs = env.reset()
        monitor.sample(step)
    return env.videos_written


def leaky(monitor, steps):
    _evaluate(monitor, steps, clear_on_close=False)


def fixed(monitor, steps):
    _evaluate(monitor, steps, clear_on_close=True)
