"""A numpy trainer runs inside an asyncio service that also serves a live training dashboard; every dashboard page subscribes its client's ``notify`` to a module-level ``TRAINING_EVENT`` and, like NiceGUI's ``Event.subscribe`` before pull request #5581, registers the unsubscription from a background task that first awaits ``client.connected()`` with no timeout; health checks and scrapers fetch the page without ever opening the websocket, so their tasks wait forever and their callbacks (with each page's client and its sparkline data) stay subscribed (plain Python + numpy + asyncio, no TensorFlow; ~2 KiB and ~8 objects a step, one page request a step, a third of them never connect).

Source: zauberzeug/nicegui pull request #5581 "Fix automatic event
unsubscription" (merged): "@ftilde noticed a memory leak in our ``Event``
class ... when requesting the page with curl (no JavaScript, no handshake,
no socket connection), the unsubscription fails ... The default ``timeout``
for ``client.connected`` is ``None``, so it waits indefinitely and the
``on_delete`` handler is never registered." Fix used here (the PR's): the
background task awaits ``client.connected(timeout=...)`` and, when the
client never connects, unsubscribes the callback right away; browsers that
do connect unsubscribe when their client is deleted. With a 0.4 s timeout
the fixed twin holds a few hundred pending pages after its first second.
Summary: the event, client and background-task helpers are stand-ins with
NiceGUI's shape (``Event.callbacks`` list, ``Event.subscribe`` /
``unsubscribe``, ``Client.connected(timeout)`` awaiting an ``asyncio.Event``,
``Client.on_delete``, ``background_tasks.create`` keeping a set of running
tasks). Each step trains a numpy 64-256-8 MLP on a batch of 256, serves one
page (its client keeps a 256-point loss sparkline and a dict of element
props) and, every 100 steps, emits a training event to all subscribers.
Browser clients connect a few steps after the request and disconnect ~50
steps later.

Here: 24,000 steps. The fixed subscription times out its connection wait.
"""
import asyncio
import collections
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/zauberzeug/nicegui/pull/5581"
SLICE = "holdout23"
STEPS = 24000
BATCH = 256
FEATURES = 64
CLASSES = 8
CONNECT_TIMEOUT = 0.4
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["Client", "Task", "ndarray", "method", "dict", "coroutine"],
              "holder_any": ["callbacks", "TRAINING_EVENT", "running_tasks", "Event"]},
    "fixed": {"verdict_not": "leak"},
}


class ClientConnectionTimeout(Exception):
    pass


class Client:
    def __init__(self, page_id, losses):
        self.page_id = page_id
        self.sparkline = np.array(losses, dtype=np.float32)
        self.props = {"id": "dash-%d" % page_id, "classes": "q-pa-md row", "title": "run %d" % page_id,
                      "elements": ["chart", "table", "log"]}
        self._connected = asyncio.Event()
        self._delete_handlers = []
        self.notifications = collections.deque(maxlen=4)

    async def connected(self, timeout=None):
        if timeout is None:
            await self._connected.wait()
            return
        try:
            await asyncio.wait_for(self._connected.wait(), timeout)
        except asyncio.TimeoutError:
            raise ClientConnectionTimeout(self.page_id) from None

    def on_delete(self, handler):
        self._delete_handlers.append(handler)

    def delete(self):
        for handler in self._delete_handlers:
            handler()
        self._delete_handlers.clear()

    def notify(self, message):
        self.notifications.append(message)


class background_tasks:
    running_tasks = set()

    @classmethod
    def create(cls, coro):
        task = asyncio.get_running_loop().create_task(coro)
        cls.running_tasks.add(task)
        task.add_done_callback(cls.running_tasks.discard)
        return task


class Event:
    def __init__(self, timeout):
        self.callbacks = []
        self.timeout = timeout

    def subscribe(self, callback, client):
        self.callbacks.append(callback)

        async def register_unsubscribe():
            try:
                await client.connected(timeout=self.timeout)
                client.on_delete(lambda: self.unsubscribe(callback))
            except ClientConnectionTimeout:             # the fix (nicegui #5581)
                self.unsubscribe(callback)

        background_tasks.create(register_unsubscribe())

    def unsubscribe(self, callback):
        try:
            self.callbacks.remove(callback)
        except ValueError:
            pass

    def emit(self, message):
        for callback in list(self.callbacks):
            callback(message)


TRAINING_EVENT = Event(None)


async def _main(monitor, steps, timeout):
    global TRAINING_EVENT
    TRAINING_EVENT = Event(timeout)
    background_tasks.running_tasks = set()
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((CLASSES, FEATURES)).astype(np.float32)
    w1 = (rng.standard_normal((FEATURES, 256)) * 0.05).astype(np.float32)
    w2 = (rng.standard_normal((256, CLASSES)) * 0.05).astype(np.float32)
    losses = collections.deque([0.0] * 256, maxlen=256)
    connecting = collections.deque()
    live = collections.deque()
    for step in range(steps):
        y = rng.integers(0, CLASSES, BATCH)
        x = centers[y] + rng.standard_normal((BATCH, FEATURES)).astype(np.float32)
        h = np.maximum(x @ w1, 0)
        logits = h @ w2
        p = np.exp(logits - logits.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        losses.append(float(-np.log(p[np.arange(BATCH), y] + 1e-9).mean()))
        p[np.arange(BATCH), y] -= 1
        gh = (p @ w2.T) * (h > 0)
        w2 -= 0.02 * (h.T @ p / BATCH)
        w1 -= 0.02 * (x.T @ gh / BATCH)

        client = Client(step, losses)                   # one dashboard page request
        TRAINING_EVENT.subscribe(client.notify, client)
        if step % 3 != 0:                               # browsers; every third request is a health check
            connecting.append((step + 3, client))
        del client
        while connecting and connecting[0][0] <= step:
            _, c = connecting.popleft()
            c._connected.set()
            live.append((step + 50, c))
        while live and live[0][0] <= step:
            live.popleft()[1].delete()
        if step % 100 == 0:
            TRAINING_EVENT.emit({"step": step, "loss": losses[-1]})
        await asyncio.sleep(0)
        monitor.sample(step)
    for _, c in list(live):
        c.delete()
    for task in list(background_tasks.running_tasks):
        task.cancel()
    await asyncio.sleep(0)


def leaky(monitor, steps):
    asyncio.run(_main(monitor, steps, None))


def fixed(monitor, steps):
    asyncio.run(_main(monitor, steps, CONNECT_TIMEOUT))
