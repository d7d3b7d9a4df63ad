"""Two behaviours train against each other in a striker-versus-goalie game (ML-Agents style: one trainer per behaviour, eager Keras policies); the goalie's trainer reaches its ``max_steps`` at 40 % of the run and stops updating, but the environment keeps running for the striker, and ``process_trajectory`` still appends every goalie trajectory to the goalie trainer's ``update_buffer``, which only an update ever clears (eager TensorFlow + ``tf.function``; late onset, grows every step).

Source: Unity-Technologies/ml-agents pull request #3422 "Fix clear update
buffer when trainer stops training, add test": "Clear update buffer when
trainer isn't training to avoid memory leak. Note the right way would be
not to add the trajectory at all (TBD for future release), but this is
closest to existing functionality in 0.13.1" (after #2722, "We don't clear
the update buffer if we don't update the policy"). Fix used here (the
PR's): a trainer that should no longer train clears its update buffer
after each trajectory.
Summary: a 2-D field with a ball, a goal on the right edge, a striker and a
goalie; each agent sees 48 "rays" x 7 values (distance-weighted directions
to ball, opponent, goal posts and walls) stacked over two frames (672
floats) and picks one of 5 moves from a 672-128-5 Keras policy (both
forward passes in one ``tf.function``). Trajectories of 32 steps go to
each trainer's buffer; at 256 experiences a trainer runs one eager
REINFORCE update (``GradientTape``, Adam) on reward-to-go and clears the
buffer.

Here: 12,000 environment steps; the goalie stops training after 4,800 (the
striker's budget is the whole run). The fixed trainer clears the buffer
once it stops training.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11, numpy 2.4; a do-nothing ``monitor.sample``):
leaky 561.8 / 561.9 / 567.1 / 574.1 / 581.1 MiB RSS at 20 / 40 / 60 / 80 %
/ end (flat until the goalie stops training at 40 %, then ~2.7 KiB a step:
the goalie's stacked observation, action probabilities and scalars kept in
``update_buffer``) with gc objects 317,869 -> 317,870 (flat: numpy arrays
and floats are not tracked, the buffer is a few lists), 16.1 s for 12,000
steps (~1.3 ms a step); fixed 561.8 / 562.8 / 562.8 / 562.8 / 562.9 MiB
with objects 317,869 -> 317,864, 14.5 s.
"""
import collections
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/Unity-Technologies/ml-agents/pull/3422"
SLICE = "holdout17"
STEPS = 12000
GOALIE_MAX_STEPS = 0.40
RAYS = 48
RAY_VALUES = 7
STACK = 2
OBS = RAYS * RAY_VALUES * STACK
ACTIONS = 5
HORIZON = 32
BUFFER_SIZE = 256
GAMMA = 0.99
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["ndarray", "numpy", "list", "AgentBuffer"],
              "holder_any": ["update_buffer", "Trainer", "trainer", "AgentBuffer"]},
    "fixed": {"verdict_not": "leak"},
}

MOVES = np.array([[0, 0], [0, 1], [0, -1], [-1, 0], [1, 0]], np.float64) * 0.02
ANGLES = np.linspace(0, 2 * np.pi, RAYS, endpoint=False)
RAY_DIRS = np.stack([np.cos(ANGLES), np.sin(ANGLES)], 1)
SAFE_DIRS = np.where(np.abs(RAY_DIRS) < 1e-6, 1e-6, RAY_DIRS)


class Soccer:
    def __init__(self, rng):
        self.rng = rng
        self.reset()

    def reset(self):
        self.ball = np.array([0.5, self.rng.uniform(0.3, 0.7)])
        self.vel = np.zeros(2)
        self.striker = np.array([0.2, self.rng.uniform(0.2, 0.8)])
        self.goalie = np.array([0.95, 0.5])
        self.t = 0

    def _rays(self, me, other):
        objs = [self.ball, other, np.array([1.0, 0.35]), np.array([1.0, 0.65])]
        out = np.zeros((RAYS, RAY_VALUES), np.float32)
        for j, o in enumerate(objs):
            d = o - me
            dist = np.hypot(*d) + 1e-6
            out[:, j] = np.maximum(0.0, RAY_DIRS @ (d / dist)) ** 4 * np.exp(-2 * dist)
        tx = np.where(SAFE_DIRS[:, 0] > 0, 1 - me[0], me[0]) / np.abs(SAFE_DIRS[:, 0])
        ty = np.where(SAFE_DIRS[:, 1] > 0, 1 - me[1], me[1]) / np.abs(SAFE_DIRS[:, 1])
        out[:, 4] = np.minimum(np.minimum(tx, ty), 2.0)
        out[:, 5] = self.vel @ RAY_DIRS.T
        out[:, 6] = self.t / 200.0
        return out.ravel()

    def observe(self):
        return self._rays(self.striker, self.goalie), self._rays(self.goalie, self.striker)

    def step(self, a_striker, a_goalie):
        self.striker = np.clip(self.striker + MOVES[a_striker], 0, 1)
        self.goalie = np.clip(self.goalie + MOVES[a_goalie] * np.array([0.3, 1.0]), [0.85, 0], [1, 1])
        if np.hypot(*(self.ball - self.striker)) < 0.05:       # kick towards the goal, with noise
            aim = np.array([1.0, 0.5 + self.rng.normal(0, 0.15)]) - self.ball
            self.vel = 0.03 * aim / np.hypot(*aim)
        self.ball = np.clip(self.ball + self.vel, 0, 1)
        self.vel *= 0.97
        self.t += 1
        if np.hypot(*(self.ball - self.goalie)) < 0.06 and self.vel[0] > 0:
            return -1.0, 1.0, True                             # saved
        if self.ball[0] >= 0.999 and 0.35 < self.ball[1] < 0.65:
            return 1.0, -1.0, True                             # goal
        done = self.t >= 200
        return -0.001, 0.001, done


class AgentBuffer:
    """ML-Agents' buffer: one list per field."""

    def __init__(self):
        self.fields = collections.defaultdict(list)

    def append(self, **experience):
        for k, v in experience.items():
            self.fields[k].append(v)

    def __len__(self):
        return len(self.fields["obs"])

    def reset_agent(self):
        self.fields.clear()


def _policy():
    return keras.Sequential([keras.Input((OBS,)), keras.layers.Dense(128, activation="relu"),
                             keras.layers.Dense(ACTIONS)])


class Trainer:
    def __init__(self, name, max_steps, clear_when_not_training):
        self.name = name
        self.policy = _policy()
        self.optimizer = keras.optimizers.Adam(3e-4)
        self.max_steps = max_steps
        self.clear_when_not_training = clear_when_not_training
        self.update_buffer = AgentBuffer()
        self.step = 0
        self.updates = 0

    @property
    def should_still_train(self):
        return self.step < self.max_steps

    def process_trajectory(self, trajectory):
        for exp in trajectory:
            self.update_buffer.append(**exp)                  # appended whether training or not
        self.step += len(trajectory)
        if self.should_still_train:
            if len(self.update_buffer) >= BUFFER_SIZE:
                self._update_policy()
        elif self.clear_when_not_training:
            self.update_buffer.reset_agent()                  # the fix (ml-agents#3422)

    def _update_policy(self):
        f = self.update_buffer.fields
        rewards, dones = f["reward"], f["done"]
        ret = np.zeros(len(rewards), np.float32)
        g = 0.0
        for i in range(len(rewards) - 1, -1, -1):
            g = rewards[i] + GAMMA * g * (0.0 if dones[i] else 1.0)
            ret[i] = g
        adv = (ret - ret.mean()) / (ret.std() + 1e-6)
        obs = tf.constant(np.stack(f["obs"]))
        actions = tf.constant(np.array(f["action"], np.int32))
        with tf.GradientTape() as tape:
            logp = tf.nn.log_softmax(self.policy(obs, training=True))
            chosen = tf.gather(logp, actions, batch_dims=1)
            loss = -tf.reduce_mean(chosen * adv)
        grads = tape.gradient(loss, self.policy.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.policy.trainable_variables))
        self.updates += 1
        self.update_buffer.reset_agent()


def _sample(logits, rng):
    p = np.exp(logits - logits.max())
    p /= p.sum()
    return int(rng.choice(ACTIONS, p=p)), p.astype(np.float32)


def _train(monitor, steps, clear_when_not_training):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    env = Soccer(rng)
    striker = Trainer("Striker", steps + 1, clear_when_not_training)
    goalie = Trainer("Goalie", int(steps * GOALIE_MAX_STEPS), clear_when_not_training)
    trajs = {striker: [], goalie: []}

    @tf.function(input_signature=[tf.TensorSpec((1, OBS), tf.float32)] * 2)
    def act(o_s, o_g):                                        # both policies' forward passes
        return striker.policy(o_s, training=False), goalie.policy(o_g, training=False)

    raw_s, raw_g = env.observe()
    prev_s, prev_g = raw_s, raw_g
    obs_s, obs_g = np.concatenate([prev_s, raw_s]), np.concatenate([prev_g, raw_g])
    for step in range(steps):
        l_s, l_g = act(obs_s[None], obs_g[None])
        a_s, p_s = _sample(l_s[0].numpy(), rng)
        a_g, p_g = _sample(l_g[0].numpy(), rng)
        r_s, r_g, done = env.step(a_s, a_g)
        if done:
            env.reset()
        new_s, new_g = env.observe()
        next_s, next_g = np.concatenate([raw_s, new_s]), np.concatenate([raw_g, new_g])
        trajs[striker].append(dict(obs=obs_s, next_obs=next_s, action=a_s, action_probs=p_s,
                                   reward=r_s, done=done))
        trajs[goalie].append(dict(obs=obs_g, next_obs=next_g, action=a_g, action_probs=p_g,
                                  reward=r_g, done=done))
        raw_s, raw_g, obs_s, obs_g = new_s, new_g, next_s, next_g
        if done or len(trajs[striker]) >= HORIZON:
            for trainer, traj in trajs.items():
                trainer.process_trajectory(traj)
                trajs[trainer] = []
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, clear_when_not_training=False)


def fixed(monitor, steps):
    _train(monitor, steps, clear_when_not_training=True)
