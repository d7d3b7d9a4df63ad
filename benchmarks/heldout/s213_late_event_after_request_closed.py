"""A trainer launches an asynchronous evaluation job after every update and reports it through a saltnado-style ``EventListener``: each report request subscribes to the job's return event with a short timeout, and a timed-out request is closed and cleaned from the listener's maps; but the handler then still asks for the job's final return to log it, and that ``get_event()`` call on an already-closed request puts the request and a new future back into ``request_map`` and ``tag_map``, where nothing ever cleans them again (``tf.function``; grows on the timeout path only, half of the steps, ~0.65 KiB a step on average).

Source: saltstack/salt pull request #24965 "Fix memory leak in saltnado"
(fixes #24846): "If an event was checked after the request was closed out
it was possible for requests to get into the event_listener's mapping and
never be cleaned out. This fixes the leak by checking if the request is
open or not before adding it to the mappings." Fix used here (the PR's):
``get_event()`` on a finished request returns a resolved future and
touches no mapping.
Summary: a 32-64-64-1 regression MLP trained with Adam in a
``tf.function`` on batches of 128; each step's evaluation job (a
``tf.function`` on a held-out batch) returns its event after 0-5 steps,
the report request times out after 2; the request carries the job's
description (a ~600-byte JSON body).

Here: 12,000 steps. The fixed listener refuses subscriptions from finished
requests.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11, numpy 2.4; a do-nothing ``monitor.sample``; RSS
and object counts from separate runs): leaky 560.5 / 561.5 / 563.1 / 564.9
/ 566.6 MiB RSS at 20 / 40 / 60 / 80 % / end (~0.65 KiB a step: on each
timed-out step a closed ``Request`` with its JSON body and a new ``Future``
in ``EventListener.request_map`` and ``tag_map``) with gc objects 330,151
/ 334,969 / 339,780 / 344,639 / 349,698 at the same marks (~2 a step),
16.2 s for 12,000 steps (~1.35 ms a step); fixed 559.6 / 559.6 / 559.6 /
559.6 / 559.7 MiB with objects 325,345 / 325,345 / 325,340 / 325,342 /
325,345, 16.6 s.
"""
import collections
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/saltstack/salt/pull/24965"
SLICE = "holdout18"
STEPS = 12000
BATCH = 128
FEATURES = 32
TIMEOUT = 2
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["Future", "Request", "list", "tuple", "dict"],
              "holder_any": ["request_map", "tag_map", "EventListener", "event_listener"]},
    "fixed": {"verdict_not": "leak"},
}


class Future:
    __slots__ = ("tag", "done", "result", "__weakref__")

    def __init__(self, tag, done=False, result=None):
        self.tag, self.done, self.result = tag, done, result

    def set_result(self, value):
        self.done, self.result = True, value


class Request:
    def __init__(self, jid, body):
        self.jid = jid
        self.body = body
        self.finished = False


class EventListener:
    def __init__(self, check_finished):
        self.check_finished = check_finished
        self.tag_map = collections.defaultdict(list)
        self.request_map = collections.defaultdict(list)
        self.timeout_map = {}

    def get_event(self, request, tag, deadline=None):
        if self.check_finished and request.finished:         # the fix (salt#24965)
            return Future(tag, done=True)
        future = Future(tag)
        self.tag_map[tag].append(future)
        self.request_map[request].append((tag, future))
        if deadline is not None:
            self.timeout_map[future] = deadline
        return future

    def clean_by_request(self, request):
        for tag, future in self.request_map.pop(request, []):
            waiting = self.tag_map.get(tag)
            if waiting is not None:
                if future in waiting:
                    waiting.remove(future)
                if not waiting:
                    del self.tag_map[tag]
            self.timeout_map.pop(future, None)

    def handle_event(self, tag, data):
        for future in self.tag_map.pop(tag, []):
            future.set_result(data)
            self.timeout_map.pop(future, None)

    def timed_out(self, now):
        return [f for f, deadline in self.timeout_map.items() if deadline <= now and not f.done]


def _batch(rng, w, n):
    x = rng.standard_normal((n, FEATURES)).astype(np.float32)
    y = (np.tanh(x @ w) + 0.1 * rng.standard_normal(n)).astype(np.float32)[:, None]
    return x, y


def _train(monitor, steps, check_finished):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    w_true = rng.standard_normal(FEATURES) / np.sqrt(FEATURES)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)])
    opt = keras.optimizers.Adam(1e-3)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function
    def eval_step(x, y):
        return tf.reduce_mean(tf.square(model(x, training=False) - y))

    listener = EventListener(check_finished)
    jobs = []                                                # (return step, tag, payload)
    open_requests = {}                                       # future -> request
    for step in range(steps):
        train_step(*[tf.constant(a) for a in _batch(rng, w_true, BATCH)])
        jid = "20250625%012d" % step
        tag = "salt/job/%s/ret/trainer-eval" % jid
        body = json.dumps({"fun": "eval.holdout", "jid": jid, "tgt": "trainer-eval", "step": step,
                           "arg": ["holdout-%03d" % (step % 100), {"batch": BATCH, "metrics": ["mse", "mae"]}],
                           "kwarg": {"timeout": TIMEOUT, "full_return": True, "ret": "dashboard"},
                           "user": "ci-runner", "tgt_type": "glob", "pad": "x" * 256})
        request = Request(jid, body)
        open_requests[listener.get_event(request, tag, deadline=step + TIMEOUT)] = request
        jobs.append((step + int(rng.integers(0, 6)), tag, step))
        for due in [j for j in jobs if j[0] <= step]:        # job returns arrive
            jobs.remove(due)
            xv, yv = _batch(rng, w_true, 64)
            listener.handle_event(due[1], {"ret": float(eval_step(xv, yv)), "step": due[2]})
        for future in list(open_requests):
            req = open_requests[future]
            if future.done:                                  # answered in time
                req.finished = True
                listener.clean_by_request(req)
                del open_requests[future]
            elif future in listener.timed_out(step):         # timed out: close, then log the late return
                req.finished = True
                listener.clean_by_request(req)
                del open_requests[future]
                listener.get_event(req, "salt/job/%s/ret/trainer-eval" % req.jid)
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, check_finished=False)


def fixed(monitor, steps):
    _train(monitor, steps, check_finished=True)
