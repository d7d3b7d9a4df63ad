"""An ad-segment classifier is trained online from a podcast pipeline's writer process: each command stores one chunk of an episode (its transcript segments, the labelling model's call with prompt and response, and the segment identifications) through a long-lived scoped ORM session and commits, and the classifier takes one numpy SGD step on the chunk's segment features; like podly's writer before its fix, the command commits or rolls back but never clears the session, so every ORM object it has added or loaded stays pinned in the session's identity map (plain Python + numpy + sqlite3, no TensorFlow; grows every step, ~5.5 KiB a step).

Source: podly-pure-podcasts/podly_pure_podcasts issue #199 "Writer process
memory leak: SQLAlchemy identity map never cleared": "The writer process
(``src/app/writer/executor.py``) leaks memory proportional to the number of
episodes processed. After processing ~700 episodes, the writer grows from
~300MB to ~10GB RSS ... ``CommandExecutor.process_command()`` calls
``db.session.commit()`` and ``db.session.rollback()`` but never clears the
SQLAlchemy identity map. Every ORM object loaded during processing
(TranscriptSegment, ModelCall, Identification, Post) stays pinned in the
session's identity map indefinitely." Fix used here (pull request #200,
"fix: clear SQLAlchemy identity map after each writer command"):
``db.session.expire_all()`` after each ``commit()`` and ``rollback()``,
which "evicts all objects from the identity map while keeping the scoped
session usable for the next command".
Summary: the ORM is a small stand-in with SQLAlchemy's shape (a scoped
``db.session`` with ``add``/``get``/``commit``/``rollback``/``expire_all``,
an identity map keyed by class and primary key, holding its objects as the
report describes) over a real sqlite3 database in a temporary file (WAL off,
``synchronous=OFF``; sqlite's page cache fills in the first few hundred
commands and then holds). Each command loads the episode's ``Post`` (one
post per 40 chunks), adds 8 ``TranscriptSegment`` rows (~70-character
text), one ``ModelCall`` (a ~240-character prompt and a ~60-character
response) and 3 ``Identification`` rows, commits, and the classifier (16
hashed text features, logistic regression) takes one SGD step on the 8
segments; one command in 50 fails validation and is rolled back.

Here: 40,000 steps (commands). The fixed executor calls
``db.session.expire_all()`` after each commit and rollback.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4; a do-nothing ``monitor.sample``; RSS read before each
object count, at the marks only): leaky 82.6 / 127.0 / 166.3 / 215.6 /
254.9 MiB RSS at 20 / 40 / 60 / 80 % / end (37.4 MiB at the first step;
~5.5 KiB a step: twelve ORM objects a command, their attribute dicts and
strings, and one Post in 40) with gc objects 24,285 at the first step, then
212,495 / 401,099 / 589,703 / 778,307 / 966,710 at the same marks (~24 a
step), 11.4 s for 40,000 steps (~0.29 ms a step); fixed 40.0 / 40.1 / 40.2
/ 40.2 / 40.2 MiB with objects 24,047 / 24,053 / 24,056 / 24,062 / 24,069
(each command's objects fill the identity map and leave it at
``expire_all``), 10.7 s. 11-12 s a variant in its process.
"""
import hashlib
import os
import shutil
import sqlite3
import tempfile

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/podly-pure-podcasts/podly_pure_podcasts/issues/199"
SLICE = "holdout20"
STEPS = 40000
SEGMENTS = 8
IDENTIFICATIONS = 3
CHUNKS_PER_POST = 40
FEATURES = 16
LR = 0.05
EXPECT = {
    "leaky": {"verdict": "leak",
              "culprit_any": ["TranscriptSegment", "ModelCall", "Identification", "str", "dict"],
              "holder_any": ["identity_map", "Session", "session", "db"]},
    "fixed": {"verdict_not": "leak"},
}

_WORDS = ("sponsor", "episode", "listener", "promo", "code", "today", "history", "story",
          "offer", "discount", "guest", "welcome", "back", "mattress", "vpn", "podcast",
          "question", "answer", "research", "archive")


class Model:
    __tablename__ = None
    __columns__ = ()

    def __init__(self, **values):
        self.id = None
        for name, value in values.items():
            setattr(self, name, value)


class Post(Model):
    __tablename__ = "post"
    __columns__ = ("guid", "title")


class TranscriptSegment(Model):
    __tablename__ = "transcript_segment"
    __columns__ = ("post_id", "sequence_num", "start_time", "end_time", "text")


class ModelCall(Model):
    __tablename__ = "model_call"
    __columns__ = ("post_id", "first_segment", "last_segment", "prompt", "response", "status")


class Identification(Model):
    __tablename__ = "identification"
    __columns__ = ("segment_id", "model_call_id", "label", "confidence")


class Session:
    """The stand-in's session: identity map keyed by (class, primary key)."""

    def __init__(self, conn):
        self.conn = conn
        self.identity_map = {}
        self.new = []
        self._flushed = []                                   # rows inserted in the open transaction

    def add(self, obj):
        self.new.append(obj)

    def get(self, cls, pk):
        key = (cls, pk)
        obj = self.identity_map.get(key)
        if obj is None:
            row = self.conn.execute(
                f"SELECT {', '.join(cls.__columns__)} FROM {cls.__tablename__} WHERE id = ?", (pk,)).fetchone()
            if row is None:
                return None
            obj = cls(**dict(zip(cls.__columns__, row)))
            obj.id = pk
            self.identity_map[key] = obj
        return obj

    def flush(self):
        for obj in self.new:
            cols = obj.__columns__
            cur = self.conn.execute(
                f"INSERT INTO {obj.__tablename__} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                tuple(getattr(obj, c) for c in cols))
            obj.id = cur.lastrowid
            self.identity_map[(type(obj), obj.id)] = obj
            self._flushed.append(obj)
        self.new = []

    def commit(self):
        self.flush()
        self.conn.commit()                                   # persistent now; not evicted
        self._flushed = []

    def rollback(self):
        for obj in self._flushed:                            # rolled-back inserts leave the map
            self.identity_map.pop((type(obj), obj.id), None)
        self._flushed = []
        self.new = []
        self.conn.rollback()

    def expire_all(self):                                    # the fix (podly #200)
        self.identity_map.clear()


class _DB:
    session = None


db = _DB()


def _schema(conn):
    conn.execute("PRAGMA synchronous=OFF")
    conn.execute("PRAGMA journal_mode=MEMORY")
    conn.execute("CREATE TABLE post (id INTEGER PRIMARY KEY, guid TEXT, title TEXT)")
    conn.execute("CREATE TABLE transcript_segment (id INTEGER PRIMARY KEY, post_id INTEGER, sequence_num INTEGER,"
                 " start_time REAL, end_time REAL, text TEXT)")
    conn.execute("CREATE TABLE model_call (id INTEGER PRIMARY KEY, post_id INTEGER, first_segment INTEGER,"
                 " last_segment INTEGER, prompt TEXT, response TEXT, status TEXT)")
    conn.execute("CREATE TABLE identification (id INTEGER PRIMARY KEY, segment_id INTEGER, model_call_id INTEGER,"
                 " label TEXT, confidence REAL)")
    conn.commit()


def _features(text):
    v = np.zeros(FEATURES)
    for word in text.split():
        h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=2).digest(), "little")
        v[h % FEATURES] += 1.0
    return v / max(1.0, np.linalg.norm(v))


def _run(monitor, steps, expire):
    tmp = tempfile.mkdtemp(prefix="s231_")
    conn = sqlite3.connect(os.path.join(tmp, "podly.db"))
    _schema(conn)
    db.session = Session(conn)
    rng = np.random.default_rng(0)
    w = np.zeros(FEATURES)
    b = 0.0
    word_ids = rng.integers(0, len(_WORDS), size=(4096, 10))
    try:
        for step in range(steps):
            session = db.session
            chunk = step % CHUNKS_PER_POST
            if chunk == 0:
                post = Post(guid=f"urn:episode:{step // CHUNKS_PER_POST:06d}",
                            title=f"Episode {step // CHUNKS_PER_POST}: stuff you should know")
                session.add(post)
                session.commit()
                post_id = post.id
            post = session.get(Post, post_id)
            segments = []
            for k in range(SEGMENTS):
                words = word_ids[(step * SEGMENTS + k) % 4096]
                text = " ".join(_WORDS[i] for i in words) + f" #{step}-{k}"
                seg = TranscriptSegment(post_id=post.id, sequence_num=chunk * SEGMENTS + k,
                                        start_time=float(chunk * 80 + k * 10), end_time=float(chunk * 80 + k * 10 + 9.5),
                                        text=text)
                session.add(seg)
                segments.append(seg)
            session.flush()
            x = np.stack([_features(s.text) for s in segments])
            y = np.array([1.0 if ("sponsor" in s.text or "promo" in s.text) else 0.0 for s in segments])
            p = 1.0 / (1.0 + np.exp(-(x @ w + b)))
            w -= LR * x.T @ (p - y) / len(y)
            b -= LR * float(np.mean(p - y))
            prompt = ("Classify each transcript segment as ad or content.\n"
                      + "\n".join(f"[{s.sequence_num}] {s.text[:20]}" for s in segments))
            call = ModelCall(post_id=post.id, first_segment=segments[0].id, last_segment=segments[-1].id,
                             prompt=prompt, response=" ".join(f"{s.sequence_num}:{q:.2f}" for s, q in zip(segments, p)),
                             status="success")
            session.add(call)
            session.flush()
            for s, q in sorted(zip(segments, p), key=lambda t: -t[1])[:IDENTIFICATIONS]:
                session.add(Identification(segment_id=s.id, model_call_id=call.id,
                                           label="ad" if q > 0.5 else "content", confidence=float(q)))
            if step % 50 == 49:
                session.rollback()                           # a command that fails validation
            else:
                session.commit()
            if expire:
                session.expire_all()
            monitor.sample(step)
    finally:
        conn.close()
        db.session = None
        shutil.rmtree(tmp, ignore_errors=True)


def leaky(monitor, steps):
    _run(monitor, steps, expire=False)


def fixed(monitor, steps):
    _run(monitor, steps, expire=True)
