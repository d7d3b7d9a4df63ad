"""Every batch's YAML sidecar (normalisation constants written in scientific notation, a data root given as ``${ENV}``) is read through a helper that registers its implicit resolvers on ``yaml.SafeLoader`` on every call, so the loader class's ``yaml_implicit_resolvers`` lists gain fourteen entries a batch for the rest of the run and every numeric scalar copies the growing list (no TensorFlow; small, slow leak with a step time that grows).

Source: yaml/pyyaml#439 "safe_load with implicit_resolver slows down"
("Every time safe_load is called, it turns out to be slower than
previous one, if implicit resolver is used ... Run 1. 100 tries: 0.18
... Run 10. 100 tries: 1.07"; its fix, PR #441: "every time ``foo`` is
encountered, the 'wildcard implicit resolvers' ... will be appended to
the list of implicit resolvers ... The list
``yaml_implicit_resolvers['f']`` will keep getting longer") and
yaml/pyyaml#67 "yaml implicit resolver leak" ("making
``yaml_implicit_resolvers`` size become more and more bigger, the
``yaml.dump`` will slow down, and finally use up 100% CPU"). PyYAML no
longer appends by itself; the same class-level lists grow when a config
helper calls ``add_implicit_resolver`` each time it loads a file, as
env-interpolating loaders do (mkaranasou/pyaml_env's ``parse_config``
runs ``loader = yaml.SafeLoader; loader.add_implicit_resolver(tag,
pattern, None)`` on every call). Fix used here: register once, on a
private ``SafeLoader`` subclass created at import time.
Summary: a numpy classifier reads, for each batch, a small YAML sidecar
with the batch id, a ``scale`` and ``shift`` in scientific notation
(``2.5e-3``, which PyYAML's default float pattern does not accept, hence
the well-known extra float resolver for ``-+0123456789.``) and a source
path ``${DATA_ROOT}/shard-N`` expanded by an ``!env`` resolver.
``load_sidecar`` adds both resolvers and the constructor to
``yaml.SafeLoader`` on every call: 13 + 1 ``(tag, regexp)`` tuples a
batch, kept by the class for good.

Here: batches of 64 x 48 float32 features, a 48-32-6 MLP with plain SGD,
a 7-line sidecar per batch. The fixed twin's ``_SidecarLoader`` subclass
is configured once at import.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4, PyYAML 6.0.3; a do-nothing ``monitor.sample``): leaky
45.0 / 53.2 / 77.5 MiB RSS at 20 % / 40 % / end (~1.0 KiB a step) with
gc objects 136,721 / 248,721 / 584,721 (14 tuples a step), the step time
growing from ~0.37 ms to ~1 ms as each numeric scalar copies the longer
lists (27.6 s for 40,000 steps); fixed 36.9 / 37.1 / 37.0 MiB with
objects flat (24,837), ~0.5 ms a step (20.5 s).
"""
import os
import re

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
import yaml

SOURCE = "https://github.com/yaml/pyyaml/issues/439"
SLICE = "holdout11"
STEPS = 40000
BATCH = 64
FEATURES = 48
HIDDEN = 32
CLASSES = 6
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["tuple", "list", "yaml", "resolver", "SafeLoader"],
              "holder_any": ["yaml_implicit_resolvers", "SafeLoader", "Resolver"]},
    "fixed": {"verdict_not": "leak"},
}

# The usual fix for "1e-3 is loaded as a string": a float pattern that accepts exponents without a dot.
FLOAT_RE = re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                          |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                          |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
                          |[-+]?\.(?:inf|Inf|INF)
                          |\.(?:nan|NaN|NAN))$""", re.X)
ENV_RE = re.compile(r"^\$\{([^}]+)\}(.*)$")
FLOAT_TAG = "tag:yaml.org,2002:float"


def _expand_env(loader, node):
    value = loader.construct_scalar(node)
    m = ENV_RE.match(value)
    return os.environ.get(m.group(1), "/data") + m.group(2)


def _configure(loader):
    loader.add_implicit_resolver(FLOAT_TAG, FLOAT_RE, list("-+0123456789."))
    loader.add_implicit_resolver("!env", ENV_RE, ["$"])
    loader.add_constructor("!env", _expand_env)


class _SidecarLoader(yaml.SafeLoader):
    """The fix: a private loader, configured once."""


_configure(_SidecarLoader)


def load_sidecar(text, register_once):
    if register_once:
        return yaml.load(text, Loader=_SidecarLoader)
    loader = yaml.SafeLoader
    _configure(loader)                       # the leak: fourteen more class-level entries per call
    return yaml.load(text, Loader=loader)


def _sidecar(step, rng):
    return ("id: batch-%07d\n"
            "scale: %.3e\n"
            "shift: %.2e\n"
            "weight: %.4g\n"
            "source: ${DATA_ROOT}/shard-%d\n"
            "labels: [%d, %d]\n"
            "augment: %s\n"
            % (step, 1.0 + rng.random() * 1e-3, (rng.random() - 0.5) * 1e-2, 1.0, step % 64,
               step % CLASSES, (step + 1) % CLASSES, "true" if step % 2 else "false"))


def _train(monitor, steps, register_once):
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(CLASSES, FEATURES)).astype(np.float32)
    w1 = (rng.normal(size=(FEATURES, HIDDEN)) * 0.1).astype(np.float32)
    w2 = np.zeros((HIDDEN, CLASSES), np.float32)
    for step in range(steps):
        meta = load_sidecar(_sidecar(step, rng), register_once)
        y = rng.integers(0, CLASSES, BATCH)
        x = centers[y] + rng.standard_normal((BATCH, FEATURES), dtype=np.float32)
        x = x * np.float32(meta["scale"]) + np.float32(meta["shift"])
        h = np.maximum(x @ w1, 0.0)
        z = h @ w2
        z -= z.max(1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(1, keepdims=True)
        p[np.arange(BATCH), y] -= 1.0
        gh = (p @ w2.T) * (h > 0)
        w2 -= 0.05 * float(meta["weight"]) * (h.T @ p) / BATCH
        w1 -= 0.05 * (x.T @ gh) / BATCH
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, register_once=False)


def fixed(monitor, steps):
    _train(monitor, steps, register_once=True)
