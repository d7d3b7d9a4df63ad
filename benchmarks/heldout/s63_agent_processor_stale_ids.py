"""An RL experience processor keeps per-agent state in dicts keyed by agent id, and agent ids change at every episode (``tf.function`` policy).

Source: Unity-Technologies/ml-agents#3383 "Change AgentProcessor logic to
fix memory leak" ("the Agent ID now changes after every episode reset. This
caused the dictionary of keys to grow inside the AgentProcessor"; the
``last_step_result``, ``last_take_action_outputs``, ``episode_steps`` and
``episode_rewards`` dicts and the per-agent experience buffers got a new
key per agent per episode and never lost the old ones), followed by
ml-agents#3437 (old agents also kept after a forced reset). Fix from the
PRs: delete an agent's entries when its episode is done.
Summary: a multi-agent environment with 8 agents resets its episodes every
8-16 steps and gives the agents fresh global ids each time. The processor
that turns policy outputs into trajectories stores each agent's last
observation and the policy's outputs for it, keyed by id, and only resets
(never removes) them when the episode ends.

Here: 24 x 24 x 3 float32 visual observations (6.75 KiB), a small Keras
conv policy with action logits and value heads (a ``tf.function`` acting
step) on the 8 agents each step, trajectories emitted at episode end. Each
finished agent leaves its last observation, its action-output tensors and
its counters behind: ~75 KiB per episode.

Checked without tb-leak (psutil RSS, gc objects, fresh process, TF 2.21 /
Keras 3.15 / Python 3.11): leaky +15.1 MiB RSS from 20 % of the run to the
end (~6.4 KiB per step, ~+32 live objects per episode), fixed +0.1 MiB (gc
objects flat, ±300 within an episode); ~3-5 ms a step.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/Unity-Technologies/ml-agents/pull/3383"
SLICE = "holdout5"
STEPS = 3000           # environment steps (8 agents each)
AGENTS = 8
ACTIONS = 5
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["ndarray", "numpy", "EagerTensor", "Tensor", "dict"],
              "holder_any": ["last_step_result", "last_take_action_outputs", "AgentProcessor"]},
    "fixed": {"verdict_not": "leak"},
}


class AgentProcessor:
    def __init__(self, delete_done_agents):
        self.delete_done_agents = delete_done_agents
        self.last_step_result = {}
        self.last_take_action_outputs = {}
        self.experience_buffers = {}
        self.episode_steps = {}
        self.episode_rewards = {}
        self.trajectories = 0

    def add_experiences(self, agent_ids, obs, rewards, dones, action_outputs):
        for i, gid in enumerate(agent_ids):
            if gid in self.last_step_result:
                self.experience_buffers.setdefault(gid, []).append(
                    (self.last_step_result[gid], rewards[i], self.last_take_action_outputs[gid]))
            self.last_step_result[gid] = obs[i]
            self.last_take_action_outputs[gid] = {"log_probs": action_outputs["log_probs"][i],
                                                  "value": action_outputs["value"][i]}
            self.episode_steps[gid] = self.episode_steps.get(gid, 0) + 1
            self.episode_rewards[gid] = self.episode_rewards.get(gid, 0.0) + float(rewards[i])
            if dones[i]:
                self.trajectories += len(self.experience_buffers.get(gid, ()))   # emitted to the trainer
                self.experience_buffers[gid] = []
                if self.delete_done_agents:           # the fix: forget finished agents
                    for d in (self.last_step_result, self.last_take_action_outputs,
                              self.experience_buffers, self.episode_steps, self.episode_rewards):
                        d.pop(gid, None)


def _policy():
    inp = keras.Input(shape=(24, 24, 3))
    h = keras.layers.Conv2D(8, 3, strides=2, activation="relu")(inp)
    h = keras.layers.Flatten()(h)
    h = keras.layers.Dense(32, activation="relu")(h)
    return keras.Model(inp, [keras.layers.Dense(ACTIONS)(h), keras.layers.Dense(1)(h)])


def _collect(monitor, steps, delete_done_agents):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    policy = _policy()

    @tf.function
    def act(obs):
        logits, value = policy(obs, training=False)
        return tf.nn.log_softmax(logits), value

    processor = AgentProcessor(delete_done_agents)
    ids, left = list(range(AGENTS)), int(rng.integers(8, 17))
    next_id = AGENTS
    for step in range(steps):
        obs = rng.random((AGENTS, 24, 24, 3), dtype=np.float32)
        log_probs, value = act(tf.constant(obs))
        left -= 1
        dones = [left == 0] * AGENTS
        rewards = rng.standard_normal(AGENTS).astype(np.float32)
        outputs = {"log_probs": tf.unstack(log_probs), "value": tf.unstack(value)}   # one tensor per agent
        processor.add_experiences(ids, obs, rewards, dones, outputs)
        if left == 0:                                 # episode reset: every agent gets a new id
            ids = list(range(next_id, next_id + AGENTS))
            next_id += AGENTS
            left = int(rng.integers(8, 17))
        monitor.sample(step)
    return processor.trajectories


def leaky(monitor, steps):
    _collect(monitor, steps, delete_done_agents=False)


def fixed(monitor, steps):
    _collect(monitor, steps, delete_done_agents=True)
