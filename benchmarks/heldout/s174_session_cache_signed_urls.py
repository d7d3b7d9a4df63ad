"""A streaming trainer downloads its data shards through a helper that caches one ``requests.Session`` per endpoint, but keys the cache by the md5 of the full shard URL, which carries the shard path and a fresh signature; every shard therefore gets a new ``Session`` (with its own adapters, connection-pool managers and cookie jar) that stays in the module-level cache for the rest of the run (numpy, no TensorFlow; grows once a shard).

Source: blockchain-etl/tezos-etl PR #1 "Fix memory leak in request.py":
"The session cache used full url as a key, which resulted in unlimited
cache growth. Fixed by using the url without the path used as a key."
(the helper ``_get_session(endpoint_uri)`` kept a ``requests.Session()``
per ``hashlib.md5(endpoint_uri...)`` in a module-level
``_session_cache``). Fix used here (the PR's): the cache key is the
scheme and host only, so one session serves every shard.
Summary: a 16-256-1 tanh regressor (numpy) trained from 256 x 16 float32
shards served by an in-process adapter mounted on the session (no
network), a shard every 20 steps, minibatches of 512 drawn from the
current shard.

Here: 1,500 shards, 30,000 steps. The fixed twin keys sessions by host.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4, requests 2.34; a do-nothing ``monitor.sample``): leaky
49.9 / 51.9 / 54.0 / 56.0 / 58.1 MiB RSS at 20 / 40 / 60 / 80 % / end
(~7 KiB a shard: a session with its adapters, pool managers, hooks and
cookie jar) with gc objects 43,835 / 51,943 / 60,482 / 69,021 / 77,142
(~28 a shard), 27.5 s for 30,000 steps (~0.9 ms a step); fixed 48.1 /
48.1 / 48.1 / 48.2 / 48.2 MiB with objects 35,349 / 35,412 / 35,596 /
35,659 / 35,857, 26.3 s (a 90,000-step check: 35,596 / 35,212 / 35,522 /
35,664 / 35,747 objects, 48.1 -> 48.2 MiB: response garbage collected in
passes, no trend).
"""
import hashlib
import io
import os
import urllib.parse

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
import requests
import requests.adapters

SOURCE = "https://github.com/blockchain-etl/tezos-etl/pull/1"
SLICE = "holdout15"
STEPS = 30000
STEPS_PER_SHARD = 20
ROWS = 256
FEATURES = 16
BATCH = 512
HIDDEN = 256
ENDPOINT = "https://shards.data.local"
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["Session", "HTTPAdapter", "PoolManager", "dict", "RequestsCookieJar"],
              "holder_any": ["_session_cache", "session"]},
    "fixed": {"verdict_not": "leak"},
}

_session_cache = {}
KEY_BY_HOST = {"on": False}


class ShardAdapter(requests.adapters.BaseAdapter):
    """Serves shard bytes from the process (stands in for the object store)."""

    def __init__(self):
        super().__init__()
        self.w = np.random.default_rng(1).standard_normal(FEATURES).astype(np.float32)

    def send(self, request, **kwargs):
        path = urllib.parse.urlsplit(request.url).path
        shard = int(path.rsplit("-", 1)[1].split(".")[0])
        rng = np.random.default_rng(shard)
        x = rng.standard_normal((ROWS, FEATURES)).astype(np.float32)
        y = x @ self.w + 0.1 * rng.standard_normal(ROWS).astype(np.float32)
        buf = io.BytesIO()
        np.savez(buf, x=x, y=y)
        resp = requests.Response()
        resp.status_code = 200
        resp._content = buf.getvalue()
        resp.url = request.url
        resp.request = request
        return resp

    def close(self):
        pass


def _get_session(url):
    if KEY_BY_HOST["on"]:
        parts = urllib.parse.urlsplit(url)
        key = "%s://%s" % (parts.scheme, parts.netloc)                    # the fix: one per host
    else:
        key = hashlib.md5(url.encode("utf-8")).hexdigest()                # the leak: one per shard URL
    if key not in _session_cache:
        session = requests.Session()
        session.mount(ENDPOINT + "/", ShardAdapter())
        _session_cache[key] = session
    return _session_cache[key]


def _fetch(shard, rng):
    sig = "%016x" % int(rng.integers(0, 2**63))
    url = "%s/train/shard-%06d.npz?expires=3600&signature=%s" % (ENDPOINT, shard, sig)
    resp = _get_session(url).get(url, timeout=10)
    resp.raise_for_status()
    with np.load(io.BytesIO(resp.content)) as z:
        return z["x"], z["y"]


def _train(monitor, steps, key_by_host):
    KEY_BY_HOST["on"] = key_by_host
    _session_cache.clear()
    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((FEATURES, HIDDEN)) / 4).astype(np.float32)
    w2 = np.zeros(HIDDEN, np.float32)
    x = y = None
    for step in range(steps):
        if step % STEPS_PER_SHARD == 0:
            x, y = _fetch(step // STEPS_PER_SHARD, rng)
        idx = rng.integers(0, ROWS, BATCH)
        xb, yb = x[idx], y[idx]
        h = np.tanh(xb @ w1)
        err = h @ w2 - yb
        g2 = h.T @ err / BATCH
        g1 = xb.T @ (np.outer(err, w2) * (1 - h * h)) / BATCH
        w2 -= 0.01 * g2
        w1 -= 0.01 * g1
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, key_by_host=False)


def fixed(monitor, steps):
    _train(monitor, steps, key_by_host=True)
