"""``running_loss += loss`` on an autograd value keeps every step's graph (no TensorFlow).

Source: samuelyu2002/ImVisible#2 (answer: "change all of the places with
``+= loss`` into ``+= loss.item()`` ... the computational graphs were also being
stored, taking up large amounts of RAM"; the reporter confirmed the fix), the
"accumulating history across your training loop" pitfall.
Summary: the epoch's running loss is accumulated from the loss *node* of an
autograd engine, so the running sum becomes a node whose parents reach every
step's graph, with the inputs and intermediate arrays the backward pass saved.
Fix: accumulate the plain number (``loss.item()``).

Here: a tiny reverse-mode autograd on numpy arrays (a two-layer MLP on 16 x 32
float64 batches; the graph saves the input, the hidden activations and the ReLU
mask, ~13 KiB of arrays per step); the run is one long epoch, as in
the report, where memory ran out before the epoch ended.

Checked without tb-leak (psutil RSS, fresh process, TF 2.21 / Keras 3.15 /
Python 3.11): leaky +24.7 MiB RSS from 20 % of the run to the end (+24.0 MiB
tracemalloc, +41 k objects), fixed +0.0 MiB; ~0.13 ms a step.
"""
import numpy as np

SOURCE = "https://github.com/samuelyu2002/ImVisible/issues/2"
SLICE = "holdout2"
STEPS = 2000
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["Node", "ndarray", "numpy", "tuple"]},
    "fixed": {"verdict_not": "leak"},
}


class Node:
    """A value in the graph with the parents and local backward rule that produced it."""
    __slots__ = ("value", "parents", "backward_fn", "grad", "requires_grad")

    def __init__(self, value, parents=(), backward_fn=None, requires_grad=False):
        self.value = value
        self.parents = parents
        self.backward_fn = backward_fn
        self.grad = None
        self.requires_grad = requires_grad or any(p.requires_grad for p in parents)

    def __add__(self, other):
        other = other if isinstance(other, Node) else Node(np.asarray(other, dtype=np.float64))
        return Node(self.value + other.value, (self, other), lambda g: (g, g))

    __radd__ = __add__

    def item(self):
        return float(self.value)

    def backward(self):
        order, seen = [], set()

        def visit(n):
            if id(n) in seen:
                return
            seen.add(id(n))
            for p in n.parents:
                visit(p)
            order.append(n)

        visit(self)
        self.grad = np.ones_like(self.value)
        for n in reversed(order):
            if n.backward_fn is None or n.grad is None:
                continue
            for p, g in zip(n.parents, n.backward_fn(n.grad)):
                if p.requires_grad:
                    p.grad = g if p.grad is None else p.grad + g
            n.grad = None          # like PyTorch, intermediate gradients are not retained


def matmul(a, b):
    return Node(a.value @ b.value, (a, b), lambda g: (g @ b.value.T, a.value.T @ g))


def relu(a):
    mask = a.value > 0
    return Node(a.value * mask, (a,), lambda g: (g * mask,))


def mse(pred, target):
    diff = pred.value - target
    return Node(np.mean(diff ** 2), (pred,), lambda g: (g * 2.0 * diff / diff.size,))


def _loop(monitor, steps, keep_graph):
    rng = np.random.default_rng(0)
    w1 = Node(rng.standard_normal((32, 32)) * 0.1, requires_grad=True)
    w2 = Node(rng.standard_normal((32, 1)) * 0.1, requires_grad=True)
    running_loss = 0.0
    for step in range(steps):
        x = Node(rng.standard_normal((16, 32)))
        y = x.value[:, :1] * 0.5
        loss = mse(matmul(relu(matmul(x, w1)), w2), y)
        loss.backward()
        for w in (w1, w2):
            w.value -= 0.01 * w.grad
            w.grad = None
        if keep_graph:
            running_loss += loss            # a Node: links every step's graph together
        else:
            running_loss += loss.item()     # a float
        monitor.sample(step)
    return running_loss


def leaky(monitor, steps):
    _loop(monitor, steps, keep_graph=True)


def fixed(monitor, steps):
    _loop(monitor, steps, keep_graph=False)
