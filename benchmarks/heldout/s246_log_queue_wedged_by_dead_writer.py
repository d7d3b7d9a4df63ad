"""A recommender's training loop logs through a ``QueueHandler`` into a ``multiprocessing.Queue(-1)`` read by a logging-listener process, as RMS does; at 40 % of the run a frame-uploader worker that writes to the same queue is killed by its watchdog while it holds the queue's writer lock, so from then on the main process's queue feeder thread waits forever for that lock and every log record the loop emits piles up in the queue's ``_buffer`` deque while the listener sits idle in ``get()`` (plain Python + numpy + multiprocessing, no TensorFlow; late onset at 40 %, then ~1.5 KiB a step: two ``LogRecord`` objects a step with their attribute dicts and messages).

Source: CroatianMeteorNetwork/RMS pull request #935 "Fix multiprocessing
deadlock cascade (OOM)" (merged): "the logging pipeline wedged: a process
died holding one of the logging queue's shared internal locks. From that
instant both stations went silently log-dark ... the listener was alive and
idle in ``queue.get()``, starved. Every producer process then buffered log
records in its ``QueueFeederThread`` without bound (~700 MB/process/day —
the \"memory leak\" we had been chasing)." Fix used here (the PR's): the
listener publishes a lock-free count of the records it has taken off the
queue; a stall check on a fixed cadence counts a strike when the backlog
is high and the count has not moved since the previous check, and after
three strikes ``_restartLogging`` builds a new queue and listener and
points the handler at it (the wedged queue is abandoned with
``cancel_join_thread()``; the records its blocked feeder already held stay
with it).
Summary: the listener is a spawned process running RMS's single-consumer
loop (``get``, sentinel check, ``handle``) into a file handler; the
uploader is a spawned process whose feeder is cut off mid-send (it takes
the queue's ``_wlock`` and is then SIGKILLed by the main process's
watchdog at 40 % of the steps). The model is a 32-factor matrix
factorization trained by SGD on 64-rating mini-batches of a synthetic
2,000-user, 1,000-item matrix; each step logs the batch loss and the
learning rate at DEBUG. In the fixed run the stall check runs every 250
steps with a backlog threshold of 200 records.

Here: 40,000 steps. The fixed run restarts the logging pipeline after three
strikes.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4; a do-nothing ``monitor.sample``; RSS read before each
object count, at the marks only): leaky 40.8 / 40.8 / 52.2 / 64.3 / 76.6 MiB
RSS at 20 / 40 / 60 / 80 % / end (40.0 MiB at the first step; flat until the
wedge at 40 %, then ~1.5 KiB a step: two ``LogRecord`` objects a step with
their dicts and formatted messages, in the feeder's ``_buffer``) with gc
objects 27,318 at the first step, then 26,819 / 26,821 / 58,752 / 70,481 /
102,435 at the same marks (four a step after the wedge), 18.6 s for 40,000
steps (~0.47 ms a step; faster once nothing is pickled or sent); fixed 41.0
/ 41.0 / 42.7 / 42.7 / 42.7 MiB with objects 26,819 / 26,860 / 30,868 /
30,879 / 30,872 (the records buffered before the third strike stay with the
abandoned queue's blocked feeder; the new pipeline then drains as before),
22.9 s. 19-23 s a variant in its process, the two spawned helpers included.
"""
import logging
import logging.handlers
import multiprocessing
import os
import shutil
import signal
import tempfile
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/CroatianMeteorNetwork/RMS/pull/935"
SLICE = "holdout21"
STEPS = 40000
USERS, ITEMS, FACTORS = 2000, 1000, 32
BATCH = 64
LR = 0.02
WEDGE_AT = 0.4
CHECK_EVERY = 250
BACKLOG_STRIKE = 200
STRIKES = 3
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["LogRecord", "dict", "str"],
              "holder_any": ["_buffer", "Queue", "QueueHandler", "queue"]},
    "fixed": {"verdict_not": "leak"},
}

_CTX = multiprocessing.get_context("spawn")


def _listener_process(queue, records_processed, log_path):
    """RMS's listener loop: strict FIFO, one consumer, SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    handler = logging.FileHandler(log_path)
    handler.setFormatter(logging.Formatter("%(asctime)s-%(levelname)s-%(module)s-line: %(message)s"))
    while True:
        record = queue.get()
        if record is None:
            break
        handler.handle(record)
        records_processed.value += 1
    handler.close()


def _uploader_process(queue, hang, holding):
    """A worker that logs through the same queue; its feeder is cut off while it holds the writer lock."""
    queue.put(logging.makeLogRecord({"name": "uploader", "levelno": logging.INFO, "levelname": "INFO",
                                     "msg": "uploader started", "args": None}))
    hang.wait()
    queue._wlock.acquire()                                   # mid-send when the watchdog kills it
    holding.set()
    while True:
        time.sleep(1.0)


class LoggingPipeline:
    def __init__(self, log_dir):
        self.log_dir = log_dir
        self.generation = 0
        self.queue = None
        self.listener = None
        self.records_processed = None
        self.handler = logging.handlers.QueueHandler(None)
        self.handler.setFormatter(logging.Formatter("%(message)s"))
        self.abandoned = []
        self._start()
        self.last_processed = 0
        self.strikes = 0

    def _start(self):
        self.generation += 1
        self.queue = _CTX.Queue(-1)
        self.records_processed = _CTX.Value("q", 0, lock=False)
        self.listener = _CTX.Process(
            target=_listener_process, daemon=True,
            args=(self.queue, self.records_processed, os.path.join(self.log_dir, "log_%d.log" % self.generation)))
        self.listener.start()
        self.handler.queue = self.queue
        self.put = 0
        self.last_processed = 0

    def emit_count(self):
        self.put += 1

    def check_stall(self, logger):
        """The PR's stall detection: high backlog and no progress since the previous check."""
        processed = self.records_processed.value
        backlog = self.put - processed
        if backlog > BACKLOG_STRIKE and processed == self.last_processed:
            self.strikes += 1
        else:
            self.strikes = 0
        self.last_processed = processed
        if self.strikes >= STRIKES:
            self._restart("backlog of %d records is not draining" % backlog)
            logger.warning("logging restarted")

    def _restart(self, reason):
        old_queue, old_listener = self.queue, self.listener
        old_queue.cancel_join_thread()
        self.abandoned.append(old_queue)
        if old_listener.is_alive():
            old_listener.terminate()
            old_listener.join(timeout=2)
        self.strikes = 0
        self._start()

    def shutdown(self):
        self.queue.put(None)
        self.listener.join(timeout=1.0)
        if self.listener.is_alive():
            self.listener.terminate()
            self.listener.join(timeout=2)
        for q in [self.queue] + self.abandoned:
            q.cancel_join_thread()


class _CountingFilter(logging.Filter):
    def __init__(self, pipeline):
        super().__init__()
        self.pipeline = pipeline

    def filter(self, record):
        self.pipeline.emit_count()
        return True


def _run(monitor, steps, stall_detection):
    log_dir = tempfile.mkdtemp(prefix="s246_")
    pipeline = LoggingPipeline(log_dir)
    root = logging.getLogger("rms.train")
    root.setLevel(logging.DEBUG)
    root.propagate = False
    root.handlers = [pipeline.handler]
    pipeline.handler.addFilter(_CountingFilter(pipeline))
    hang, holding = _CTX.Event(), _CTX.Event()
    uploader = _CTX.Process(target=_uploader_process, args=(pipeline.queue, hang, holding), daemon=True)
    uploader.start()
    rng = np.random.default_rng(0)
    u_true = rng.standard_normal((USERS, 8)) / 2
    v_true = rng.standard_normal((ITEMS, 8)) / 2
    P = 0.1 * rng.standard_normal((USERS, FACTORS))
    Q = 0.1 * rng.standard_normal((ITEMS, FACTORS))
    wedge_step = int(steps * WEDGE_AT)
    try:
        for step in range(steps):
            users = rng.integers(0, USERS, BATCH)
            items = rng.integers(0, ITEMS, BATCH)
            r = np.einsum("ij,ij->i", u_true[users], v_true[items]) + 0.1 * rng.standard_normal(BATCH)
            pu, qi = P[users], Q[items]
            err = np.einsum("ij,ij->i", pu, qi) - r
            np.subtract.at(P, users, LR * (err[:, None] * qi + 0.01 * pu))
            np.subtract.at(Q, items, LR * (err[:, None] * pu + 0.01 * qi))
            root.debug("step %d batch loss %.5f", step, float(np.mean(err ** 2)))
            root.debug("step %d lr %.5f users %d items %d", step, LR, len(np.unique(users)), len(np.unique(items)))
            if step == wedge_step:
                hang.set()                                   # the uploader hangs mid-send ...
                holding.wait(timeout=30)
                os.kill(uploader.pid, signal.SIGKILL)        # the watchdog kills the hung uploader
                uploader.join(timeout=5)
                root.warning("uploader killed by watchdog")
            if stall_detection and step % CHECK_EVERY == CHECK_EVERY - 1:
                pipeline.check_stall(root)
            monitor.sample(step)
    finally:
        pipeline.shutdown()
        if uploader.is_alive():
            uploader.kill()
        root.handlers = []
        shutil.rmtree(log_dir, ignore_errors=True)


def leaky(monitor, steps):
    _run(monitor, steps, stall_detection=False)


def fixed(monitor, steps):
    _run(monitor, steps, stall_detection=True)
