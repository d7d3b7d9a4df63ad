"""A self-play trainer for a four-in-a-row game on a 7 x 7 board picks each real move with short policy rollouts from copies of the current ``GameState``; ``GameState.copy()`` copies the board but assigns ``other.history = self.history``, so every copy appends its simulated moves to one shared list, and because each new game starts as ``self.initial.copy()``, every game of the run and every rollout of every game write into the same history list (``tf.function`` policy network; grows every move).

Source: Rochester-NRT/RocAlphaGo issue #124 "GameState.copy() doesn't
create copy of history": "Any copies created with share a single history
list ... In the copy function we have: other.history = self.history ...
Should be: other.history = list(self.history)". Fix used here (the
issue's): ``other.history = list(self.history)``.
Summary: 7 x 7 board, four in a row wins; the policy is a 147-128-49
``tf.function`` MLP over (own stones, opponent stones, last move) planes;
for each real move the 8 most probable moves are each played out 6 plies
further by sampling from the policy (one batched policy call a ply), and
the policy is trained with REINFORCE on each finished game.

Here: 5,000 real moves (about 200 games). The fixed twin copies the
history.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4, TF 2.21; a do-nothing ``monitor.sample``): leaky 561.0 /
566.6 / 570.6 / 574.4 / 577.7 MiB RSS at 20 / 40 / 60 / 80 % / end (~4 KiB
a move: ~56 simulated moves appended to the shared list) with gc objects
321,417 / 321,572 / 321,447 / 321,575 / 321,442 (flat: tuples of small
ints are not tracked), 24.3 s for 5,000 moves (~4.9 ms a move); fixed
557.1 / 558.8 / 559.6 / 559.6 / 559.6 MiB with objects 321,371 -> 321,385,
24.6 s. Both ``tf.function``s have an ``input_signature``: in a first
version the REINFORCE step retraced for every new game length, in both
twins.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

SOURCE = "https://github.com/Rochester-NRT/RocAlphaGo/issues/124"
SLICE = "holdout16"
STEPS = 5000
SIZE = 7
CELLS = SIZE * SIZE
WIN = 4
CANDIDATES = 8
DEPTH = 6
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["tuple", "list", "GameState", "int"],
              "holder_any": ["history", "GameState", "initial"]},
    "fixed": {"verdict_not": "leak"},
}


class GameState:
    def __init__(self):
        self.board = np.zeros((SIZE, SIZE), np.int8)
        self.player = 1
        self.history = []
        self.winner = 0
        self.moves = 0

    def copy(self, copy_history=False):
        other = GameState.__new__(GameState)
        other.board = self.board.copy()
        other.player = self.player
        other.winner = self.winner
        other.moves = self.moves
        other.history = list(self.history) if copy_history else self.history   # the leak: shared list
        return other

    def legal(self):
        return self.board.ravel() == 0

    def do_move(self, cell):
        x, y = divmod(int(cell), SIZE)
        self.board[x, y] = self.player
        self.history.append((x, y, self.player))
        self.moves += 1
        if self._wins(x, y):
            self.winner = self.player
        self.player = -self.player

    def _wins(self, x, y):
        p = self.board[x, y]
        for dx, dy in ((1, 0), (0, 1), (1, 1), (1, -1)):
            n = 1
            for sign in (1, -1):
                i, j = x + sign * dx, y + sign * dy
                while 0 <= i < SIZE and 0 <= j < SIZE and self.board[i, j] == p:
                    n += 1
                    i, j = i + sign * dx, j + sign * dy
            if n >= WIN:
                return True
        return False

    def over(self):
        return self.winner != 0 or self.moves == CELLS

    def features(self):
        last = np.zeros(CELLS, np.float32)
        if self.history:
            x, y, _ = self.history[-1]
            last[x * SIZE + y] = 1
        b = self.board.ravel() * self.player
        return np.concatenate([(b == 1).astype(np.float32), (b == -1).astype(np.float32), last])


def _sample(logits, legal, rng):
    z = np.where(legal, logits, -1e9)
    p = np.exp(z - z.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.array([rng.choice(CELLS, p=row) for row in p])


def _train(monitor, steps, copy_history):
    tf.random.set_seed(0)
    rng = np.random.default_rng(0)
    w1 = tf.Variable(tf.random.normal((3 * CELLS, 128), stddev=0.1))
    w2 = tf.Variable(tf.zeros((128, CELLS)))
    opt = tf.keras.optimizers.Adam(1e-3)

    @tf.function(input_signature=[tf.TensorSpec((None, 3 * CELLS), tf.float32)])
    def policy(x):
        return tf.nn.relu(x @ w1) @ w2

    @tf.function(input_signature=[tf.TensorSpec((None, 3 * CELLS), tf.float32),
                                  tf.TensorSpec((None,), tf.int32), tf.TensorSpec((None,), tf.float32)])
    def reinforce(x, actions, returns):
        with tf.GradientTape() as tape:
            logp = tf.nn.log_softmax(policy(x))
            chosen = tf.gather(logp, actions, batch_dims=1)
            loss = -tf.reduce_mean(chosen * returns)
        grads = tape.gradient(loss, [w1, w2])
        opt.apply_gradients(zip(grads, [w1, w2]))
        return loss

    initial = GameState()
    step = 0
    while step < steps:
        state = initial.copy(copy_history)                      # every game starts from the template
        feats, actions, players = [], [], []
        while not state.over() and step < steps:
            f = state.features()
            logits = policy(tf.constant(f[None]))[0].numpy()
            legal = state.legal()
            order = np.argsort(-np.where(legal, logits, -1e9))[:min(CANDIDATES, int(legal.sum()))]
            sims = []
            for cell in order:
                s = state.copy(copy_history)
                s.do_move(cell)
                sims.append(s)
            for _ in range(DEPTH):                               # batched policy rollouts
                live = [s for s in sims if not s.over()]
                if not live:
                    break
                x = np.stack([s.features() for s in live])
                moves = _sample(policy(tf.constant(x)).numpy(), np.stack([s.legal() for s in live]), rng)
                for s, m in zip(live, moves):
                    s.do_move(m)
            values = np.array([1.0 if s.winner == state.player else -1.0 if s.winner else 0.0 for s in sims])
            best = order[int(np.argmax(values + 1e-3 * logits[order]))]
            feats.append(f)
            actions.append(best)
            players.append(state.player)
            state.do_move(best)
            monitor.sample(step)
            step += 1
        if state.winner:
            returns = np.array([1.0 if p == state.winner else -1.0 for p in players], np.float32)
            reinforce(tf.constant(np.stack(feats)), tf.constant(np.array(actions, np.int32)),
                      tf.constant(returns))


def leaky(monitor, steps):
    _train(monitor, steps, copy_history=False)


def fixed(monitor, steps):
    _train(monitor, steps, copy_history=True)
