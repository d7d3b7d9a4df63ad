"""A training job reads its batches from a MySQL-backed feature store and runs a Datadog-style statement-metrics collector beside it, which keeps the latest summary row of every statement digest in ``_statement_rows[(schema, query_signature)][digest]``, a plain dict that is only ever added to; while the job reads through a dozen prepared lookups it stays small, but from 35 % of the run a backfill stage stages every batch in its own ``staging_batch_<n>`` table, so each batch brings three new query signatures and their rows (numpy, no TensorFlow; late onset, then ~3.7 KiB a step of small dicts and strings).

Source: DataDog/integrations-core pull request #21097 "SDBM-1909: Change
statement_rows dict to a TTL cache to fix mysql memory leaks": "The memory
leak problem was the statement_rows dict was a completely unbounded
object, that was only ever added to. This change fixes the issue by adding
a TTL and max size." (configs ``statement_rows_cache_max_size`` and
``statement_rows_cache_ttl``; review: "only at this point expired items
will be removed from memory", i.e. on mutating operations). Fix used here
(the PR's): the rows live in a TTL cache with a maximum size, expired on
every insertion.
Summary: each step the loader runs three feature lookups (one of 12
prepared statement shapes with literal ids) and, after the switch, three
statements on that batch's staging table; the collector reads the
summary rows of the statements run this step (digest, normalized text,
counters) and files them; the model is a ridge regression on 128 features
trained by SGD (two passes) on the assembled batch of 256 rows; the
database's own digest table is bounded (256 digests, oldest dropped).

Here: 18,000 steps, backfill from step 6,300 (35 %). The fixed collector
keeps rows in a TTL cache (TTL 200 collections, at most 512 keys).

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4; a do-nothing ``monitor.sample``; RSS and object counts
from separate runs): leaky 36.4 / 39.8 / 53.1 / 66.4 / 79.1 MiB RSS at 20
/ 40 / 60 / 80 % / end (flat at 36.4 MiB until step 6,300, then ~3.7 KiB a
step: three summary-row dicts, their digest texts and hashes in
``StatementMetrics._statement_rows``) with gc objects 23,664 / 26,608 /
37,408 / 48,208 / 59,008 at the same marks (3 a step after the onset: the
row dicts hold only strings and ints and are not tracked), 9.6 s for
18,000 steps (~0.5 ms a step); fixed 36.3 / 37.2 / 37.2 / 37.2 / 37.2 MiB
(the TTL cache fills within ~200 steps of the switch, then holds) with
objects 23,668 / 24,412 / 24,412 / 24,412 / 24,412, 8.5 s.
"""
import collections
import hashlib
import os
import re

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/DataDog/integrations-core/pull/21097"
SLICE = "holdout18"
STEPS = 18000
ONSET = 0.35
BATCH = 256
FEATURES = 128
TTL = 200
DIGEST_TABLE_SIZE = 256
MAX_KEYS = 512
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["dict", "str", "StatementMetrics"],
              "holder_any": ["_statement_rows", "statement_rows", "StatementMetrics", "collector"]},
    "fixed": {"verdict_not": "leak"},
}

ENTITIES = ("user", "item", "merchant", "device")
LOOKUP_SHAPES = (
    "SELECT f.* FROM {e}_features f WHERE f.{e}_id = {id} AND f.ds = '{ds}'",
    "SELECT f.embedding, f.updated_at FROM {e}_embeddings f WHERE f.{e}_id IN ({ids})",
    "SELECT COUNT(*), AVG(v.value) FROM {e}_events v WHERE v.{e}_id = {id} AND v.ts > {ts}",
)


class TTLCache(collections.OrderedDict):
    """cachetools-style: a key expires TTL ticks after insertion; expiry and the size bound act on insertion."""

    def __init__(self, maxsize, ttl, timer):
        super().__init__()
        self.maxsize, self.ttl, self.timer = maxsize, ttl, timer
        self._expires = {}

    def expire(self):
        now = self.timer()
        while self and self._expires[next(iter(self))] <= now:
            key = next(iter(self))
            super().__delitem__(key)
            del self._expires[key]

    def __setitem__(self, key, value):
        self.expire()
        if key in self:
            super().__delitem__(key)
        elif len(self) >= self.maxsize:
            old, _ = self.popitem(last=False)
            del self._expires[old]
        super().__setitem__(key, value)
        self._expires[key] = self.timer() + self.ttl


def _normalize(sql):
    sql = re.sub(r"'[^']*'", "?", sql)
    sql = re.sub(r"\b\d+\b", "?", sql)
    return re.sub(r"\(\?(, \?)*\)", "(?)", sql)


class StatementMetrics:
    """The collector's cache of the last row seen per (schema, query_signature) and digest."""

    def __init__(self, bounded):
        self.clock = 0
        self._statement_rows = TTLCache(MAX_KEYS, TTL, lambda: self.clock) if bounded else {}

    def collect(self, rows):
        self.clock += 1
        for row in rows:
            key = (row["schema_name"], row["query_signature"])
            digest_rows = self._statement_rows.get(key, {})
            digest_rows[row["digest"]] = row
            self._statement_rows[key] = digest_rows
        return len(rows)


class FeatureStore:
    def __init__(self, rng):
        self.rng = rng
        self.w_true = rng.standard_normal(FEATURES)
        self.counters = collections.OrderedDict()      # performance_schema's digest table (bounded)

    def run(self, sql):
        norm = _normalize(sql)
        digest = hashlib.md5(norm.encode()).hexdigest()
        c = self.counters.get(digest)
        if c is None:
            if len(self.counters) >= DIGEST_TABLE_SIZE:
                self.counters.popitem(last=False)
            c = self.counters[digest] = [0, 0]
        c[0] += 1
        c[1] += int(self.rng.integers(50_000, 900_000))
        return {
            "schema_name": "features", "digest": digest, "digest_text": norm,
            "query_signature": hashlib.sha1(norm.encode()).hexdigest()[:16],
            "count_star": c[0], "sum_timer_wait": c[1], "sum_lock_time": c[0] * 1200,
            "sum_errors": 0, "sum_rows_affected": 0, "sum_rows_sent": BATCH,
            "sum_rows_examined": BATCH * 7, "sum_select_scan": 0, "sum_no_index_used": 0,
            "last_seen": "2025-08-18 10:%02d:%02d" % (c[0] // 60 % 60, c[0] % 60),
        }

    def batch(self):
        x = self.rng.standard_normal((BATCH, FEATURES))
        y = x @ self.w_true + 0.3 * self.rng.standard_normal(BATCH)
        return x, y


def _train(monitor, steps, bounded):
    rng = np.random.default_rng(0)
    store = FeatureStore(rng)
    collector = StatementMetrics(bounded)
    w = np.zeros(FEATURES)
    onset = int(steps * ONSET)
    for step in range(steps):
        rows = []
        for _ in range(3):
            e = ENTITIES[int(rng.integers(len(ENTITIES)))]
            shape = LOOKUP_SHAPES[int(rng.integers(len(LOOKUP_SHAPES)))]
            ids = ", ".join(str(int(i)) for i in rng.integers(1, 10 ** 7, 8))
            rows.append(store.run(shape.format(e=e, id=int(rng.integers(1, 10 ** 7)), ids=ids,
                                               ds="2025-08-%02d" % (1 + step % 28), ts=step)))
        if step >= onset:                                   # backfill: a staging table per batch
            table = "staging_batch_%d" % step
            rows.append(store.run("CREATE TEMPORARY TABLE %s (entity_id BIGINT, f BLOB)" % table))
            rows.append(store.run("INSERT INTO %s SELECT user_id, payload FROM user_features "
                                  "WHERE ds = '2025-08-01' LIMIT 64" % table))
            rows.append(store.run("SELECT s.entity_id, s.f FROM %s s JOIN item_features i "
                                  "ON i.item_id = s.entity_id" % table))
        collector.collect(rows)
        x, y = store.batch()
        for _ in range(2):                                   # two SGD passes over the batch
            w -= 0.005 * (x.T @ (x @ w - y) / BATCH + 1e-3 * w)
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, bounded=False)


def fixed(monitor, steps):
    _train(monitor, steps, bounded=True)
