"""An eager training loop asks an in-process tool service (MCP-style, served on a background asyncio loop) for each batch's augmentation policy; the service's request handler builds a new protocol adapter for every request, and each adapter starts its session manager's ``run()`` background task, which waits for a stop signal that only cache eviction would send, while the service keeps its background tasks in a strong set (as the asyncio docs advise), so every request's adapter, session manager and event store with the request's replay payload stays alive (eager TensorFlow; grows every step, ~6.5 KiB a step).

Source: amun-ai/hypha pull request #984 "fix(mcp): cache adapter per service
on POST path - real per-request OOM": "``MCPRoutingMiddleware._handle_mcp_request``
built a **new** ``HyphaMCPAdapter`` for **every** POST request ... So each
request's adapter started a ``run()`` background task that awaits
``_mgr_stop`` forever - and ``_mgr_stop`` is only set by ``shutdown()``,
which only runs on **cache eviction**, which per-request adapters never
undergo. The event loop pinned each orphaned task -> pinned the whole MCP
stack ... 1:1 per request, ~178 KB/req, gc-reachable ... linear RSS growth
-> OOM". Fix used here (the PR's): requests go through a per-service adapter
cache (``_get_or_create_mcp_app``), one adapter per service, reused.
Summary: a 20-64-64-1 regression MLP trained eagerly (``GradientTape``,
SGD with momentum) on batches of 64; before each batch the loop calls the
``augmentation-policy`` tool (JSON-RPC ``tools/call``; the reply carries the
noise scale and feature dropout for the batch) through
``asyncio.run_coroutine_threadsafe`` on the service loop's thread; the
request carries the last 128 losses, and each session's event store keeps
a replay window of its last 100 messages.

Here: 2,000 steps. The fixed handler reuses one adapter per service.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11, numpy 2.4; a do-nothing ``monitor.sample``; RSS
read before each object count, at the marks only): leaky 550.7 / 553.3 /
555.8 / 558.6 / 561.1 MiB RSS at 20 / 40 / 60 / 80 % / end (545.0 MiB at
the first step; ~6.5 KiB a step: a ``ToolAdapter`` with its
``SessionManager``, its stop event and waiter future, its ``EventStore``
holding the request's and the reply's JSON (~1.5 KiB each), the pending
``run()`` task and its coroutine, in ``ToolService._background_tasks``)
with gc objects 315,321 at the first step, then 321,708 / 328,124 /
334,540 / 340,900 / 347,316 at the same marks (16 a step), 16.2 s for
2,000 steps (~8.1 ms a step); fixed 548.6 / 548.6 / 548.7 / 548.7 / 548.8
MiB with objects 315,412 / 315,412 / 315,414 / 315,413 / 315,412, 17.5 s
(~8.7 ms a step); a 5,000-step fixed run stayed within 548.7-549.0 MiB
after its first 20 % (objects flat). 20-21 s a variant in its process,
imports included.
"""
import asyncio
import collections
import json
import os
import threading

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/amun-ai/hypha/pull/984"
SLICE = "holdout19"
STEPS = 2000
BATCH = 64
FEATURES = 20
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["Task", "ToolAdapter", "SessionManager", "EventStore", "bytes",
                                                 "coroutine"],
              "holder_any": ["_background_tasks", "ToolService", "service"]},
    "fixed": {"verdict_not": "leak"},
}


class EventStore:
    """Keeps the session's events so that a reconnecting client can replay them."""

    def __init__(self, max_events=100):
        self.events = collections.deque(maxlen=max_events)   # the replay window

    def store(self, stream_id, message):
        self.events.append((stream_id, json.dumps(message).encode()))


class SessionManager:
    def __init__(self, event_store):
        self.event_store = event_store
        self.sessions = {}
        self._mgr_stop = asyncio.Event()

    async def run(self):
        self.sessions["default"] = {"initialized": True}
        await self._mgr_stop.wait()                          # set only by shutdown()
        self.sessions.clear()

    def shutdown(self):
        self._mgr_stop.set()


class ToolAdapter:
    def __init__(self, service_id, tools):
        self.service_id = service_id
        self.tools = tools
        self.session_manager = SessionManager(EventStore())

    def handle(self, request):
        self.session_manager.event_store.store("default", request)
        params = request["params"]
        result = self.tools[params["name"]](**params["arguments"])
        reply = {"jsonrpc": "2.0", "id": request["id"], "result": {"content": [{"type": "json", "json": result}]}}
        self.session_manager.event_store.store("default", reply)
        return reply


class ToolService:
    def __init__(self, loop, cache_adapters):
        self.loop = loop
        self.cache_adapters = cache_adapters
        self._adapters = {}
        self._background_tasks = set()
        self.tools = {"augmentation_policy": self._policy}
        self._rng = np.random.default_rng(1)

    def _policy(self, step, recent_loss, history):
        scale = float(np.clip(0.05 + 0.5 * recent_loss, 0.05, 0.4))
        return {"noise": scale, "dropout": float(self._rng.uniform(0.0, 0.15)), "step": step,
                "history": history}

    def _start(self, adapter):
        task = self.loop.create_task(adapter.session_manager.run())
        self._background_tasks.add(task)                     # keep a strong reference (asyncio docs)
        task.add_done_callback(self._background_tasks.discard)

    def _get_or_create_adapter(self, service_id):           # the fix (hypha#984)
        adapter = self._adapters.get(service_id)
        if adapter is None:
            adapter = self._adapters[service_id] = ToolAdapter(service_id, self.tools)
            self._start(adapter)
        return adapter

    async def handle_post(self, service_id, request):
        if self.cache_adapters:
            adapter = self._get_or_create_adapter(service_id)
        else:
            adapter = ToolAdapter(service_id, self.tools)     # a new adapter per request
            self._start(adapter)
        await asyncio.sleep(0)
        return adapter.handle(request)

    async def close(self):
        for adapter in self._adapters.values():
            adapter.session_manager.shutdown()
        for task in list(self._background_tasks):
            task.cancel()


def _train(monitor, steps, cache_adapters):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    w_true = rng.standard_normal(FEATURES) / np.sqrt(FEATURES)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="tool-service", daemon=True)
    thread.start()
    service = ToolService(loop, cache_adapters)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)])
    opt = keras.optimizers.SGD(0.01, momentum=0.9)
    recent = [1.0] * 128
    try:
        for step in range(steps):
            request = {"jsonrpc": "2.0", "id": step, "method": "tools/call",
                       "params": {"name": "augmentation_policy",
                                  "arguments": {"step": step, "recent_loss": float(np.mean(recent[-8:])),
                                                "history": [round(v, 5) for v in recent]}}}
            reply = asyncio.run_coroutine_threadsafe(
                service.handle_post("augment-svc", request), loop).result(timeout=30)
            policy = reply["result"]["content"][0]["json"]
            x = rng.standard_normal((BATCH, FEATURES)).astype(np.float32)
            y = (np.tanh(x @ w_true) + 0.1 * rng.standard_normal(BATCH)).astype(np.float32)[:, None]
            x = x * (rng.random(x.shape) > policy["dropout"]) + policy["noise"] * rng.standard_normal(x.shape)
            xt = tf.constant(x.astype(np.float32))
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(xt, training=True) - y))
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            recent = recent[1:] + [float(loss)]
            monitor.sample(step)
    finally:
        asyncio.run_coroutine_threadsafe(service.close(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)


def leaky(monitor, steps):
    _train(monitor, steps, cache_adapters=False)


def fixed(monitor, steps):
    _train(monitor, steps, cache_adapters=True)
