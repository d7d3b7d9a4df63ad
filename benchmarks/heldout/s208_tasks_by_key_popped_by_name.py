"""An asyncio shard loader, built like a docket ``Worker``, runs one execution per batch (read and decode the next slice of a shard into a queue the training loop consumes) and tracks the running task in ``_tasks_by_key[execution.key]``; the done-callback removes it with ``_tasks_by_key.pop(task.get_name())``, but task names are ``"<worker> - task:<key>"`` while the dict is keyed by the bare key, so nothing is ever removed and every finished ``asyncio.Task`` stays, with its ``Execution`` (numpy + asyncio, no TensorFlow; grows every step, ~0.9 KiB and 4 objects a step).

Source: chrisguidry/docket pull request #309 "Fix memory leak in
_tasks_by_key cleanup": "The worker was storing tasks in
``_tasks_by_key[execution.key]`` but then trying to remove them with
``_tasks_by_key.pop(task.get_name())``. Since task names are formatted as
``\\"docket-name - task:key\\"`` while the dict key is just ``\\"key\\"``, the
pop never found a match and entries accumulated forever. Each leaked entry
held a reference to the asyncio.Task and its associated Execution, so
memory grew linearly with task count." Fix used here (the PR's): remove
the entry by the execution's key.
Summary: a softmax regression (32 features, 6 classes) trained by SGD
with momentum on batches of 128 decoded from synthetic shards; each step the
training loop runs the worker's event loop until that step's load task
is done, then takes the batch from the queue.

Here: 60,000 steps. The leaky worker pops by task name; the fixed one by
the execution's key.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4; a do-nothing ``monitor.sample``; RSS and object counts
from separate runs): leaky 49.7 / 61.1 / 70.5 / 80.8 / 90.2 MiB RSS at 20
/ 40 / 60 / 80 % / end (~0.9 KiB a step: a finished ``asyncio.Task``, its
``Execution`` and their key strings in ``Worker._tasks_by_key``) with gc
objects 27,097 at the first step, 75,093 / 123,093 / 171,093 / 219,093 /
267,093 at the same marks (4 a step), 13.4 s for 60,000 steps (~0.22 ms a
step); fixed 39.2 MiB at every mark with objects 27,092 throughout, 11.7 s.
"""
import asyncio
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/chrisguidry/docket/pull/309"
SLICE = "holdout18"
STEPS = 60000
BATCH = 128
FEATURES = 32
CLASSES = 6
SHARD_ROWS = 8192
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["Task", "Execution", "dict", "coroutine"],
              "holder_any": ["_tasks_by_key", "Worker", "worker"]},
    "fixed": {"verdict_not": "leak"},
}


class Execution:
    def __init__(self, key, function, args, attempt=1):
        self.key = key
        self.function = function
        self.args = args
        self.attempt = attempt
        self.when = None


class Worker:
    def __init__(self, name, by_key):
        self.name = name
        self.by_key = by_key
        self._tasks_by_key = {}
        self.completed = 0

    def _task_done(self, task, execution):
        if self.by_key:
            self._tasks_by_key.pop(execution.key, None)        # the fix (docket#309)
        else:
            self._tasks_by_key.pop(task.get_name(), None)      # "docket - task:<key>": never a key
        self.completed += 1

    async def dispatch(self, execution):
        task = asyncio.get_running_loop().create_task(
            execution.function(*execution.args), name="%s - task:%s" % (self.name, execution.key))
        self._tasks_by_key[execution.key] = task
        task.add_done_callback(lambda t, e=execution: self._task_done(t, e))
        return await task


class ShardReader:
    """Synthetic shards: class centroids plus noise, rows decoded from 'bytes' per slice."""

    def __init__(self, rng):
        self.rng = rng
        self.centroids = rng.standard_normal((CLASSES, FEATURES)).astype(np.float32)

    async def load_slice(self, queue, shard, offset):
        labels = self.rng.integers(0, CLASSES, BATCH)
        raw = (self.centroids[labels] + 0.9 * self.rng.standard_normal((BATCH, FEATURES))).astype(np.float32)
        await asyncio.sleep(0)                                  # the read yields to the loop
        x = (raw - raw.mean(axis=0)) / (raw.std(axis=0) + 1e-6)
        await queue.put((x, labels))
        return int(x.nbytes)


def _train(monitor, steps, by_key):
    rng = np.random.default_rng(0)
    loop = asyncio.new_event_loop()
    try:
        queue = asyncio.Queue()
        reader = ShardReader(rng)
        worker = Worker("shard-loader", by_key)
        W = np.zeros((FEATURES, CLASSES), np.float32)
        b = np.zeros(CLASSES, np.float32)
        mW, mb = np.zeros_like(W), np.zeros_like(b)
        for step in range(steps):
            shard, offset = divmod(step * BATCH, SHARD_ROWS)
            key = "shard-%05d/offset-%04d" % (shard, offset)
            execution = Execution(key, reader.load_slice, (queue, shard, offset))
            loop.run_until_complete(worker.dispatch(execution))
            x, y = queue.get_nowait()
            logits = x @ W + b
            logits -= logits.max(axis=1, keepdims=True)
            p = np.exp(logits)
            p /= p.sum(axis=1, keepdims=True)
            p[np.arange(BATCH), y] -= 1.0
            gW, gb = x.T @ p / BATCH, p.mean(axis=0)
            mW = 0.9 * mW + gW
            mb = 0.9 * mb + gb
            W -= 0.05 * mW
            b -= 0.05 * mb
            monitor.sample(step)
    finally:
        loop.close()


def leaky(monitor, steps):
    _train(monitor, steps, by_key=False)


def fixed(monitor, steps):
    _train(monitor, steps, by_key=True)
