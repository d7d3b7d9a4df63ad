"""A ranking model pulls each batch's features from a REST feature service through an Airbyte-CDK-style ``HttpClient`` that counts retry attempts per request in ``_request_attempt_count[request]``; the count is read to decide whether a 503 may be retried, but no entry is ever removed, and the key is the prepared request itself, so the client keeps every request it ever sent, with its URL, headers and JSON body (``tf.function``; grows every step, ~1.4 KiB and one tracked object a step).

Source: airbytehq/airbyte-python-cdk pull request #92 "fix: add request
count with eviction for not retriable requests to fix memory problem":
"Addresses high memory consumption when enabling concurrency ... The
``_request_attempt_count`` attribute keeps growing as multiple requests are
made using the same ``http_client``. To mitigate this issue, we evict keys
for completed requests once we confirm that no further retries are
needed." (released to connectors in airbytehq/airbyte#48748). Fix used here
(the PR's): the entry is evicted once the response needs no further retry.
Summary: a 40-64-1 scoring MLP trained with Adam in a ``tf.function`` on
batches of 64 query-item pairs; each batch is one POST to
``/v2/features:batchGet`` with the 64 entity ids in the body; the
simulated service answers 503 to about 4 % of calls, which the client
retries (at most 3 attempts).

Here: 12,000 steps. The fixed client evicts the count of a finished
request.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11, numpy 2.4; a do-nothing ``monitor.sample``; RSS
and object counts from separate runs): leaky 559.0 / 562.3 / 565.7 / 569.0
/ 572.6 MiB RSS at 20 / 40 / 60 / 80 % / end (~1.4 KiB a step: one
``PreparedRequest`` with its URL, headers dict and ~1 KiB JSON body, and
its count, in ``HttpClient._request_attempt_count``) with gc objects
325,579 / 327,979 / 330,379 / 332,779 / 335,179 at the same marks (1 a
step: the headers dict of strings is not tracked), 8.5 s for 12,000 steps
(~0.7 ms a step); fixed 557.3 MiB at every mark with objects 323,178 at
every mark, 10.0 s.
"""
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/airbytehq/airbyte-python-cdk/pull/92"
SLICE = "holdout18"
STEPS = 12000
BATCH = 64
FEATURES = 40
MAX_ATTEMPTS = 3
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["PreparedRequest", "dict", "str", "bytes"],
              "holder_any": ["_request_attempt_count", "HttpClient", "http_client"]},
    "fixed": {"verdict_not": "leak"},
}


class PreparedRequest:
    """Just enough of ``requests.PreparedRequest`` (hashable by identity, as in requests)."""

    def __init__(self, method, url, headers, body):
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body


class Response:
    def __init__(self, status_code, content):
        self.status_code = status_code
        self.content = content


class FeatureService:
    """The remote end: deterministic features per entity id, a transient 503 now and then."""

    def __init__(self, rng):
        self.rng = rng
        self.proj = rng.standard_normal((8, FEATURES)).astype(np.float32)

    def send(self, request):
        if self.rng.random() < 0.04:
            return Response(503, b'{"error": "backend overloaded, retry later"}')
        ids = np.array(json.loads(request.body)["entity_ids"], dtype=np.int64)
        base = np.stack([np.sin(ids * (k + 1) * 1e-4) for k in range(8)], axis=1).astype(np.float32)
        return Response(200, (base @ self.proj).astype(np.float32).tobytes())


class HttpClient:
    def __init__(self, name, transport, evict_finished):
        self._name = name
        self._transport = transport
        self._evict_finished = evict_finished
        self._request_attempt_count = {}

    def _send_with_retry(self, request):
        while True:
            self._request_attempt_count[request] = self._request_attempt_count.get(request, 0) + 1
            response = self._transport.send(request)
            retriable = response.status_code in (429, 500, 502, 503)
            if retriable and self._request_attempt_count[request] < MAX_ATTEMPTS:
                continue
            if self._evict_finished:                         # the fix (airbyte-python-cdk#92)
                del self._request_attempt_count[request]
            return response

    def send_request(self, method, path, body):
        headers = {"User-Agent": "airbyte-cdk/6.7.0 (%s)" % self._name, "Accept": "application/json",
                   "Content-Type": "application/json", "Authorization": "Bearer " + "t0k3n" * 12,
                   "X-Request-Source": "trainer", "Accept-Encoding": "gzip, deflate"}
        request = PreparedRequest(method, "https://features.internal.example.com" + path, headers,
                                  json.dumps(body).encode())
        return self._send_with_retry(request)


def _train(monitor, steps, evict_finished):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    client = HttpClient("ranker-features", FeatureService(rng), evict_finished)
    w_true = rng.standard_normal(FEATURES).astype(np.float32) / 6.0
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(1)])
    opt = keras.optimizers.Adam(1e-3)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(keras.losses.binary_crossentropy(y, model(x, training=True), from_logits=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    for step in range(steps):
        ids = rng.integers(0, 10 ** 9, BATCH)
        response = client.send_request("POST", "/v2/features:batchGet?view=dense&version=%d" % (step // 500),
                                       {"entity_ids": ids.tolist(), "feature_set": "ranker_v3"})
        if response.status_code != 200:
            monitor.sample(step)
            continue
        x = np.frombuffer(response.content, dtype=np.float32).reshape(BATCH, FEATURES)
        y = (x @ w_true + 0.2 * rng.standard_normal(BATCH) > 0).astype(np.float32)[:, None]
        train_step(tf.constant(x), tf.constant(y))
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, evict_finished=False)


def fixed(monitor, steps):
    _train(monitor, steps, evict_finished=True)
