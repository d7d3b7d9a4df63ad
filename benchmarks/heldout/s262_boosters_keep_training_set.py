"""A multi-output forecaster fits one gradient-boosted regressor per output column, one column a step, the way scikit-learn's ``MultiOutputRegressor`` wraps LightGBM; like LightGBM's sklearn boosters in issue #350, each fitted booster keeps its binned training and validation datasets after training, so every output added to the model keeps its own copy of the input data (plain Python + numpy, no TensorFlow; grows every step, large: ~50 KiB a step, one binned copy of a 1,000x32 training set and a 250x32 validation set; the trees themselves are a few hundred bytes).

Source: lightgbm-org/LightGBM issue #350 "Python sklearn boosters store the
training/validation set, increasing memory use" (closed): "It seems that the
LGBM classes include the booster which stores the training and validation
sets. If you are using a MultiOutputRegressor model, this means that each
regressor has a complete copy of the input data which adds up. ... Is there a
reason that the booster needs to store a copy of the training/validation data
after training?" Fix used here (what LightGBM's Python package did in
response: ``free_raw_data`` and freeing the booster's datasets once training
is done): the booster drops its datasets at the end of ``fit``.
Summary: the booster is a numpy stand-in with LightGBM's shape (``fit``
bins the features into a ``Dataset`` of ``uint8`` bin indices plus bin
edges, builds the validation ``Dataset`` against the same bins, grows
depth-1 trees for 20 rounds on the gradients with early stopping on the
validation set, and keeps ``train_set`` / ``valid_sets`` as attributes).
Each step fits the next output column (linear-plus-noise responses of the
same 32 features) into the multi-output model, whose estimator list and tree
table are allocated for all outputs up front (each booster writes its trees
into its row), so the fixed twin grows only by the small booster objects,
~0.3 KiB an output.

Here: 1,500 steps. The fixed booster frees its datasets after training.
"""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/lightgbm-org/LightGBM/issues/350"
SLICE = "holdout22"
STEPS = 1500
ROWS = 1000
VALID = 250
FEATURES = 32
BINS = 32
ROUNDS = 20
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["ndarray", "numpy", "Dataset"],
              "holder_any": ["train_set", "valid_sets", "estimators_", "Booster", "booster"]},
    "fixed": {"verdict_not": "leak"},
}


class Dataset:
    def __init__(self, x, y, edges=None):
        if edges is None:
            edges = np.quantile(x, np.linspace(0, 1, BINS + 1)[1:-1], axis=0).T.copy()
        self.edges = edges
        self.binned = np.stack([np.searchsorted(edges[j], x[:, j]) for j in range(x.shape[1])], 1).astype(np.uint8)
        self.label = y.astype(np.float32)


class Booster:
    def __init__(self, free_raw_data, tree_table):
        self.free_raw_data = free_raw_data
        self.trees = tree_table                          # this output's row of the model's preallocated table
        self.n_trees = 0
        self.init_score = 0.0

    def fit(self, x, y, xv, yv, lr=0.2):
        self.train_set = Dataset(x, y)
        self.valid_sets = [Dataset(xv, yv, self.train_set.edges)]
        tb, vb = self.train_set.binned, self.valid_sets[0].binned
        self.init_score = float(y.mean())
        pred = np.full(len(y), self.init_score, np.float32)
        vpred = np.full(len(yv), self.init_score, np.float32)
        best = np.inf
        for _ in range(ROUNDS):
            grad = pred - y
            best_gain, best_split = 0.0, None
            for j in range(0, FEATURES, 2):
                sums = np.bincount(tb[:, j], weights=grad, minlength=BINS)
                counts = np.bincount(tb[:, j], minlength=BINS)
                cs, cc = np.cumsum(sums)[:-1], np.cumsum(counts)[:-1]
                total_s, total_c = sums.sum(), counts.sum()
                ok = (cc > 10) & (cc < total_c - 10)
                gain = np.where(ok, cs ** 2 / np.maximum(cc, 1) + (total_s - cs) ** 2 / np.maximum(total_c - cc, 1), 0)
                k = int(np.argmax(gain))
                if gain[k] > best_gain:
                    best_gain = gain[k]
                    left = -cs[k] / cc[k]
                    right = -(total_s - cs[k]) / (total_c - cc[k])
                    best_split = (j, k, lr * left, lr * right)
            if best_split is None:
                break
            j, k, lv, rv = best_split
            self.trees[self.n_trees] = best_split
            self.n_trees += 1
            pred += np.where(tb[:, j] <= k, lv, rv)
            vpred += np.where(vb[:, j] <= k, lv, rv)
            loss = float(np.mean((vpred - yv) ** 2))
            if loss > best:
                break
            best = loss
        if self.free_raw_data:
            self.train_set = None
            self.valid_sets = []
        return self


class MultiOutputRegressor:
    def __init__(self, n_outputs):
        self.estimators_ = [None] * n_outputs
        self.tree_table = np.zeros((n_outputs, ROUNDS, 4), np.float32)


def _run(monitor, steps, free_raw_data):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((ROWS + VALID, FEATURES)).astype(np.float32)
    coefs = rng.standard_normal((FEATURES, 64)).astype(np.float32)
    model = MultiOutputRegressor(steps)
    for step in range(steps):
        col = coefs[:, step % 64] * (1.0 + 0.001 * step)
        y = (x @ col + 0.3 * rng.standard_normal(len(x))).astype(np.float32)
        booster = Booster(free_raw_data, model.tree_table[step]).fit(x[:ROWS], y[:ROWS], x[ROWS:], y[ROWS:])
        model.estimators_[step] = booster
        monitor.sample(step)
    return len(model.estimators_)


def leaky(monitor, steps):
    _run(monitor, steps, free_raw_data=False)


def fixed(monitor, steps):
    _run(monitor, steps, free_raw_data=True)
