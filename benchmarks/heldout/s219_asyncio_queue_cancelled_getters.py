"""An asyncio online learner checks two control queues (operator commands and learning-rate overrides) at every step with ``asyncio.wait_for(queue.get(), timeout)``; the queues are almost always empty, and the queue, written like ``asyncio.Queue`` before Python 3.7, leaves the cancelled getter future of every timed-out ``get()`` in its ``_getters`` deque, where nothing removes it until an item arrives (numpy + asyncio, no TensorFlow; grows every step, ~0.3 KiB a step).

Source: python/cpython issue #75801 (bpo-31620) "asyncio.Queue leaks memory
if the queue is empty and consumers poll it frequently": a consumer that
polls an empty queue with ``wait_for(queue.get(), timeout)`` cancels the
``get()`` on every timeout, and the cancelled getter future stays in the
queue's ``_getters`` deque (the aiortc report that led back to it found
"hundreds of thousands of canceled Futures in that queue"). Fix used here
(the one merged for 3.7, PR #3813): when ``get()`` is interrupted, the
getter is removed from ``_getters`` (``self._getters.remove(getter)``)
before the cancellation propagates.
Summary: a streaming logistic-regression click model (64 hashed features,
batches of 32, plain numpy SGD) runs inside one ``asyncio`` event loop; a
producer coroutine would push operator commands ("pause", "checkpoint")
and learning-rate overrides into two queues, and the training coroutine
polls both after every update with a 0.2 ms timeout. No command is sent in
the run, so both queues stay empty.

Here: 12,000 steps, two polls a step. The fixed queue removes the getter of
a cancelled ``get()``.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4; a do-nothing ``monitor.sample``; RSS read before each
object count, at the marks only): leaky 39.6 / 40.2 / 41.1 / 41.8 / 42.5
MiB RSS at 20 / 40 / 60 / 80 % / end (38.7 MiB at the first step; ~0.3 KiB
a step: two cancelled getter futures in the two queues' ``_getters``) with
gc objects 27,275 at the first step, then 31,881 / 36,675 / 41,475 /
46,275 / 51,075 at the same marks (2 a step), 30.3 s for 12,000 steps
(~2.5 ms a step: each 0.2 ms timeout is rounded up by the event loop's
clock); fixed 38.9 / 38.9 / 39.0 / 39.0 / 39.0 MiB with objects 27,273 ->
27,283 (+2 a mark: the check's own records), 29.7 s. Each variant took
30-31 s in its process.
"""
import asyncio
import collections
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/python/cpython/issues/75801"
SLICE = "holdout19"
STEPS = 12000
BATCH = 32
FEATURES = 64
LR = 0.05
POLL_TIMEOUT = 0.0002
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["Future", "deque", "asyncio"],
              "holder_any": ["_getters", "ControlQueue", "commands", "overrides"]},
    "fixed": {"verdict_not": "leak"},
}


class ControlQueue:
    """A FIFO queue for coroutines, written the way asyncio.Queue was before 3.7."""

    def __init__(self, remove_cancelled_getters):
        self._remove = remove_cancelled_getters
        self._queue = collections.deque()
        self._getters = collections.deque()

    def _wakeup_next(self):
        while self._getters:
            waiter = self._getters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                break

    def put_nowait(self, item):
        self._queue.append(item)
        self._wakeup_next()

    async def get(self):
        while not self._queue:
            getter = asyncio.get_running_loop().create_future()
            self._getters.append(getter)
            try:
                await getter
            except BaseException:
                getter.cancel()                              # just in case getter is not done yet
                if self._remove:                             # the fix (bpo-31620)
                    try:
                        self._getters.remove(getter)
                    except ValueError:
                        pass
                if self._queue and not getter.cancelled():
                    self._wakeup_next()
                raise
        return self._queue.popleft()


async def _poll(queue):
    try:
        return await asyncio.wait_for(queue.get(), timeout=POLL_TIMEOUT)
    except asyncio.TimeoutError:
        return None


async def _train(monitor, steps, fixed):
    rng = np.random.default_rng(0)
    w_true = rng.standard_normal(FEATURES) / 4.0
    w = np.zeros(FEATURES)
    b = 0.0
    commands = ControlQueue(fixed)
    overrides = ControlQueue(fixed)
    lr = LR
    for step in range(steps):
        x = rng.standard_normal((BATCH, FEATURES))
        y = (x @ w_true + 0.3 * rng.standard_normal(BATCH) > 0).astype(np.float64)
        p = 1.0 / (1.0 + np.exp(-(x @ w + b)))
        g = p - y
        w -= lr * (x.T @ g) / BATCH
        b -= lr * float(g.mean())
        command = await _poll(commands)                      # operator commands: none arrive
        new_lr = await _poll(overrides)                      # learning-rate overrides: none arrive
        if command == "pause":
            await asyncio.sleep(0.01)
        if new_lr is not None:
            lr = new_lr
        monitor.sample(step)


def _run(monitor, steps, fixed):
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(_train(monitor, steps, fixed))
    finally:
        loop.close()


def leaky(monitor, steps):
    _run(monitor, steps, fixed=False)


def fixed(monitor, steps):
    _run(monitor, steps, fixed=True)
