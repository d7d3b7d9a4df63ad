"""A numpy claims-risk model is trained on FHIR-style bundles streamed per beneficiary, and the export stage writes each bundle's resources as NDJSON through a buffered writer written like BCDA's ``fhirBundleToResourceNDJSON`` before pull request #938: the writer is flushed only when the whole job ends, so every resource line written during training stays in the writer's in-memory buffer (plain Python + numpy, no TensorFlow; ~1.2 KiB a step inside a single growing ``bytearray``, no new Python object).

Source: CMSgov/bcda-app pull request #938 "BCDA-8088: Ensure
fhirBundleToResourceNDJSON properly flushes buffer" (merged): "Ensure that
buffer is flushed after each beneficiary's data is written ... Was able to
ssh into workers while observing memory explosion. This should prevent
runaway buffer size during job execution by ensuring that the buffer is
flushed after each execution of fhirBundleToResourceNDJSON." Fix used here
(the PR's): the export flushes the writer after each beneficiary's
bundles, every 6 steps here, so the buffer empties periodically.
Summary: the writer is a stand-in for a buffered writer over the job's
output file (a ``bytearray`` buffer written to ``os.devnull`` on flush, so
no disk is used); each step converts one bundle (a coverage, a claim and
an explanation-of-benefit resource, ~1.2 KiB of JSON lines) and writes it;
a beneficiary has 6 bundles. The model is a numpy logistic regression on
40 claim features (batches of 4,096, SGD) fitted on the same bundles'
synthetic feature rows.

Here: 10,000 steps. The fixed export flushes after each beneficiary.
"""
import collections
import json
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/CMSgov/bcda-app/pull/938"
SLICE = "holdout24"
STEPS = 10000
BUNDLES_PER_BENEFICIARY = 6
BATCH = 4096
FEATURES = 40
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["bytearray", "native", "malloc", "heap", "unexplained"],
              "holder_any": ["_buf", "BufferedNDJSONWriter", "writer"]},
    "fixed": {"verdict_not": "leak"},
}


class BufferedNDJSONWriter:
    """bufio-like writer: bytes are staged in memory until flush()."""

    def __init__(self, path):
        self._fh = open(path, "wb")
        self._buf = bytearray()
        self.flushed = 0

    def write(self, data):
        self._buf += data

    def flush(self):
        self._fh.write(self._buf)
        self.flushed += len(self._buf)
        del self._buf[:]

    def close(self):
        self.flush()
        self._fh.close()


def fhir_bundle_to_resource_ndjson(writer, bundle):
    for resource in bundle["entry"]:
        writer.write(json.dumps(resource["resource"], separators=(",", ":")).encode() + b"\n")


def _bundle(rng, bene, k):
    claim_id = "claim-%07d-%02d" % (bene, k)
    amounts = [round(float(v), 2) for v in rng.gamma(2.0, 80.0, 6)]
    return {"resourceType": "Bundle", "entry": [
        {"resource": {"resourceType": "Coverage", "id": "cov-%07d" % bene, "status": "active",
                      "beneficiary": {"reference": "Patient/%07d" % bene},
                      "payor": [{"identifier": {"value": "medicare-part-a"}}], "period": {"start": "2026-01-01"}}},
        {"resource": {"resourceType": "Claim", "id": claim_id, "status": "active", "use": "claim",
                      "patient": {"reference": "Patient/%07d" % bene}, "created": "2026-03-%02d" % (k + 1),
                      "item": [{"sequence": i + 1, "productOrService": {"coding": [{"code": "%05d" % (97110 + i)}]},
                                "net": {"value": a, "currency": "USD"}} for i, a in enumerate(amounts)]}},
        {"resource": {"resourceType": "ExplanationOfBenefit", "id": "eob-" + claim_id, "status": "active",
                      "outcome": "complete", "claim": {"reference": "Claim/" + claim_id},
                      "total": [{"category": {"coding": [{"code": "submitted"}]},
                                 "amount": {"value": round(sum(amounts), 2), "currency": "USD"}}]}},
    ]}


def _run(monitor, steps, flush_per_beneficiary):
    rng = np.random.default_rng(0)
    writer = BufferedNDJSONWriter(os.devnull)
    true_w = rng.standard_normal(FEATURES).astype(np.float32)
    w = np.zeros(FEATURES, np.float32)
    losses = collections.deque(maxlen=100)
    try:
        for step in range(steps):
            bene, k = divmod(step, BUNDLES_PER_BENEFICIARY)
            fhir_bundle_to_resource_ndjson(writer, _bundle(rng, bene, k))
            if flush_per_beneficiary and k == BUNDLES_PER_BENEFICIARY - 1:
                writer.flush()                                 # the fix (BCDA #938)
            x = rng.standard_normal((BATCH, FEATURES)).astype(np.float32)
            y = (x @ true_w + 0.5 * rng.standard_normal(BATCH) > 0).astype(np.float32)
            p = 1.0 / (1.0 + np.exp(-(x @ w)))
            losses.append(float(-np.mean(y * np.log(p + 1e-7) + (1 - y) * np.log(1 - p + 1e-7))))
            w -= 0.05 * x.T @ (p - y) / BATCH
            monitor.sample(step)
    finally:
        writer.close()                                         # the only flush in the leaky build


def leaky(monitor, steps):
    _run(monitor, steps, flush_per_beneficiary=False)


def fixed(monitor, steps):
    _run(monitor, steps, flush_per_beneficiary=True)
