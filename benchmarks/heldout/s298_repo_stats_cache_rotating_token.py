"""A numpy ranking model of repository health is trained on statistics fetched through a GitHub-App client whose cache is written like Clevis's ``_stats_cache`` before pull request #258: a module-level dict keyed by ``(owner, repo, token_hash)`` whose TTL is only checked on a hit, so stale entries are skipped but never removed, and since installation tokens rotate (every 100 steps here) every rotation starts a fresh set of keys while the old ones stay (plain Python + numpy, no TensorFlow; ~5 KiB a step in ``dict``\s, ``list``\s and ``tuple`` keys).

Source: nazarli-shabnam/clevis pull request #258 "fix(api): unbounded
in-process caches never evict expired entries" (merged, closes #247):
"``_stats_cache`` ... module-level dicts keyed by ``(owner, repo,
token_hash)`` ... with TTL-based staleness checks - but expired entries
were only ever *skipped* on a cache-hit check, never actually removed from
the dict. Installation tokens rotate hourly, changing ``token_hash``, so
every org x repo x hour of uptime added a new entry that was never
pruned." What changed: "added ``_evict_expired_stats(now)``, called right
after inserting a fresh entry on every cache miss - sweeps any entry whose
TTL has already elapsed." Fix used here (the PR's): the same sweep, so the
cache holds only the last TTL's worth of entries (~320).
Summary: the client is a stand-in (a simulated clock of 6 s a step, a
token minted every 100 steps, ``get_repo_stats(owner, repo)`` generating
stars, forks, open issues and a 52-week commit-activity list from a seed
on a miss; TTL 300 s). Each step fetches 8 of 800 repositories, and a
numpy two-layer network (16-64-1, batches of 2,048 with the fetched rows
mixed in) takes one SGD step on a synthetic health score.

Here: 13,000 steps. The fixed cache sweeps expired entries after each miss.
"""
import hashlib
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/nazarli-shabnam/clevis/pull/258"
SLICE = "holdout25"
STEPS = 13000
REPOS = 800
PER_STEP = 8
TTL = 300.0
ROTATE_EVERY = 100
BATCH = 2048
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["dict", "list", "tuple", "str"],
              "holder_any": ["_stats_cache"]},
    "fixed": {"verdict_not": "leak"},
}

_stats_cache = {}


def _evict_expired_stats(now):
    for key in [k for k, (ts, _) in _stats_cache.items() if now - ts >= TTL]:
        del _stats_cache[key]


class AppClient:
    def __init__(self, evict):
        self.evict = evict
        self.now = 0.0
        self.token = ""

    def rotate(self, n):
        self.token = hashlib.sha256(b"installation-token-%d" % n).hexdigest()[:16]

    def _fetch(self, owner, repo):
        r = np.random.default_rng(int(hashlib.md5((owner + repo).encode()).hexdigest()[:8], 16) + int(self.now))
        activity = [int(v) for v in r.poisson(12, 52)]
        return {"stars": int(r.integers(0, 50000)), "forks": int(r.integers(0, 5000)),
                "open_issues": int(r.integers(0, 900)), "commit_activity": activity,
                "default_branch": "main", "full_name": "%s/%s" % (owner, repo)}

    def get_repo_stats(self, owner, repo):
        key = (owner, repo, self.token)
        hit = _stats_cache.get(key)
        if hit is not None and self.now - hit[0] < TTL:
            return hit[1]                                  # stale entries are skipped, never removed
        stats = self._fetch(owner, repo)
        _stats_cache[key] = (self.now, stats)
        if self.evict:
            _evict_expired_stats(self.now)                 # the fix (clevis #258)
        return stats


def _features(stats):
    a = np.asarray(stats["commit_activity"], np.float32)
    return np.concatenate([[np.log1p(stats["stars"]), np.log1p(stats["forks"]), np.log1p(stats["open_issues"]),
                            a.mean(), a.std(), a[-4:].mean()], a[-10:] / 20.0]).astype(np.float32)


def _run(monitor, steps, evict):
    _stats_cache.clear()
    rng = np.random.default_rng(0)
    client = AppClient(evict)
    repos = [("org%02d" % (i % 37), "repo-%04d" % i) for i in range(REPOS)]
    w1 = (rng.standard_normal((16, 64)) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((64, 1)) * 0.1).astype(np.float32)
    true_w = rng.standard_normal((16, 1)).astype(np.float32)
    pool = rng.standard_normal((BATCH, 16)).astype(np.float32)
    for step in range(steps):
        client.now = step * 6.0
        if step % ROTATE_EVERY == 0:
            client.rotate(step // ROTATE_EVERY)
        rows = [_features(client.get_repo_stats(*repos[int(i)])) for i in rng.integers(0, REPOS, PER_STEP)]
        pool[rng.integers(0, BATCH, PER_STEP)] = np.stack(rows)
        x = pool
        y = np.tanh(x @ true_w)
        h = np.maximum(x @ w1, 0)
        err = (h @ w2 - y) / BATCH
        w1 -= 0.05 * x.T @ ((err @ w2.T) * (h > 0))
        w2 -= 0.05 * h.T @ err
        monitor.sample(step)


def leaky(monitor, steps):
    _run(monitor, steps, evict=False)


def fixed(monitor, steps):
    _run(monitor, steps, evict=True)
