"""DQN-style experience replay memory kept in a plain list (no TensorFlow).

Source: "Is it necessary to clear the replay memory regularly in a DQN when an
agent plays against itself?" (AI Stack Exchange,
https://ai.stackexchange.com/questions/4080), following "Demystifying Deep
Reinforcement Learning", whose pseudo-code never clears the replay memory.
Summary: appending every transition to the replay memory grows it without bound
("besides the obvious issue of growing too large for the available memory");
the accepted practice is a fixed-capacity buffer that forgets the oldest
experiences, e.g. ``collections.deque(maxlen=N)``. Here it fills after a third of
the run and then stays flat.
"""
import collections

import numpy as np

SOURCE = "https://ai.stackexchange.com/questions/4080"
SLICE = "tune"
STEPS = 3000
CAPACITY = 1000
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["ndarray", "numpy", "tuple"]},
    "fixed": {"verdict_not": "leak"},
}


class Env:
    """A toy board game: 16x16 float32 observations (1 KiB)."""

    def __init__(self, seed=0):
        self.rng = np.random.default_rng(seed)
        self.state = self.rng.random((16, 16), dtype=np.float32)

    def step(self, action):
        nxt = np.roll(self.state, action, axis=1) * 0.9 + self.rng.random((16, 16), dtype=np.float32) * 0.1
        reward = float(nxt[0, action])
        done = reward > 0.95
        self.state = self.rng.random((16, 16), dtype=np.float32) if done else nxt
        return nxt, reward, done


def _loop(monitor, steps, memory):
    env = Env()
    rng = np.random.default_rng(1)
    q = rng.standard_normal((256, 4)).astype(np.float32) * 0.01
    for step in range(steps):
        state = env.state
        action = int(np.argmax(state.reshape(-1) @ q)) if rng.random() > 0.1 else int(rng.integers(4))
        nxt, reward, done = env.step(action)
        memory.append((state, action, reward, nxt, done))
        if len(memory) >= 32:
            idx = rng.integers(0, len(memory), size=32)
            s = np.stack([memory[i][0].reshape(-1) for i in idx])
            r = np.array([memory[i][2] for i in idx], dtype=np.float32)
            target = r - (s @ q).max(axis=1)
            q += 1e-4 * s.T @ np.repeat(target[:, None], 4, axis=1)
        monitor.sample(step)


def leaky(monitor, steps):
    _loop(monitor, steps, [])


def fixed(monitor, steps):
    _loop(monitor, steps, collections.deque(maxlen=CAPACITY))
