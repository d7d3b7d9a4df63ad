"""A numpy hyperparameter sweep submits each trial as a batch job and tracks running jobs in a collection written like Airflow's AWS Batch executor ``BatchJobCollection`` before pull request #72186: ``pop_by_id()`` runs for every job that succeeds or fails and clears ``key_to_id``, ``id_to_key`` and ``id_to_failure_count`` but leaves ``id_to_job_info``, so every finished job's ``BatchJobInfo`` (command, queue, config) stays while ``len()`` reports the collection empty (plain Python + numpy, no TensorFlow; ~1.5 KiB a step, two jobs a step).

Source: apache/airflow pull request #72186 "Fix id_to_job_info memory leak
in the AWS Batch executor" (merged): "``BatchJobCollection.pop_by_id()``
clears three of the collection's four mappings, but leaves
``id_to_job_info``. ``pop_by_id()`` runs for every job that succeeds and
every job that fails. ``__len__`` only counts ``key_to_id``, so the
collection reports itself empty while still holding objects in
``id_to_job_info``." How: "Add the missing ``del
self.id_to_job_info[job_id]`` to ``pop_by_id()``." Fix used here (the
PR's): the fourth mapping is cleared too, so finished jobs are freed
(churn without growth).
Summary: the collection is a stand-in with the executor's shape
(``add_job(job_id, airflow_task_key, airflow_cmd, queue, exec_config,
attempt_number)``, ``pop_by_id``, ``failure_count_by_id``, ``__len__``;
``BatchJobInfo`` holding the command list, queue and config dict). Each
step submits two trials (a ridge penalty and a feature subset) and
"polls" the jobs started three steps before: the job runs locally as a
numpy ridge regression on 8,192x32 data, one in twenty fails and is
retried once, and the best penalty so far is kept.

Here: 16,000 steps. The fixed collection pops all four mappings.
"""
import collections
import os
import uuid

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/apache/airflow/pull/72186"
SLICE = "holdout25"
STEPS = 16000
ROWS = 8192
FEATURES = 32
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["BatchJobInfo", "dict", "list", "str"],
              "holder_any": ["id_to_job_info", "BatchJobCollection", "active_workers"]},
    "fixed": {"verdict_not": "leak"},
}

TaskInstanceKey = collections.namedtuple("TaskInstanceKey", "dag_id task_id run_id try_number map_index")


class BatchJobInfo:
    def __init__(self, cmd, queue, config):
        self.cmd = cmd
        self.queue = queue
        self.config = config


class BatchJobCollection:
    def __init__(self, pop_job_info):
        self.pop_job_info = pop_job_info
        self.key_to_id = {}
        self.id_to_key = {}
        self.id_to_failure_count = {}
        self.id_to_job_info = {}

    def add_job(self, job_id, airflow_task_key, airflow_cmd, queue, exec_config, attempt_number):
        self.key_to_id[airflow_task_key] = job_id
        self.id_to_key[job_id] = airflow_task_key
        self.id_to_failure_count[job_id] = attempt_number
        self.id_to_job_info[job_id] = BatchJobInfo(cmd=airflow_cmd, queue=queue, config=exec_config)

    def pop_by_id(self, job_id):
        task_key = self.id_to_key[job_id]
        del self.key_to_id[task_key]
        del self.id_to_key[job_id]
        del self.id_to_failure_count[job_id]
        if self.pop_job_info:
            del self.id_to_job_info[job_id]               # the fix (airflow #72186)
        return task_key

    def failure_count_by_id(self, job_id):
        return self.id_to_failure_count[job_id]

    def __len__(self):
        return len(self.key_to_id)


def _ridge(x, y, lam, cols):
    xs = x[:, cols]
    return np.linalg.solve(xs.T @ xs + lam * np.eye(len(cols), dtype=np.float32), xs.T @ y)


def _run(monitor, steps, pop_job_info):
    rng = np.random.default_rng(0)
    active_workers = BatchJobCollection(pop_job_info)
    x = rng.standard_normal((ROWS, FEATURES)).astype(np.float32)
    y = x @ rng.standard_normal(FEATURES).astype(np.float32) + 0.5 * rng.standard_normal(ROWS).astype(np.float32)
    xv = rng.standard_normal((ROWS, FEATURES)).astype(np.float32)
    yv = xv @ np.linalg.lstsq(x, y, rcond=None)[0]
    pending = collections.deque()
    best = (np.inf, None)
    for step in range(steps):
        for k in range(2):
            lam = float(10 ** rng.uniform(-3, 2))
            cols = np.sort(rng.choice(FEATURES, 24, replace=False))
            key = TaskInstanceKey("ridge_sweep", "trial_%d" % k, "manual__%07d" % step, 1, -1)
            job_id = str(uuid.UUID(int=int(rng.integers(1 << 62)) << 64 | step * 2 + k))
            cmd = ["airflow", "tasks", "run", key.dag_id, key.task_id, key.run_id, "--local",
                   "--lambda=%.6g" % lam, "--cols=" + ",".join(map(str, cols))]
            active_workers.add_job(job_id, key, cmd, "ml-sweep-queue",
                                   {"lambda": lam, "cols": cols.tolist(), "memory": 2048, "vcpus": 2}, 1)
            pending.append((step, job_id, lam, cols))
        while pending and pending[0][0] <= step - 3:
            _, job_id, lam, cols = pending.popleft()
            failed = rng.random() < 0.05 and active_workers.failure_count_by_id(job_id) < 2
            key = active_workers.pop_by_id(job_id)
            if failed:                                      # retried once under a new job id
                new_id = job_id[:-4] + "%04x" % int(rng.integers(1 << 16))
                active_workers.add_job(new_id, key, ["airflow", "tasks", "run", "--retry"], "ml-sweep-queue",
                                       {"lambda": lam}, 2)
                pending.append((step, new_id, lam, cols))
                continue
            coef = _ridge(x, y, lam, cols)
            err = float(np.mean((xv[:, cols] @ coef - yv) ** 2))
            if err < best[0]:
                best = (err, lam)
        monitor.sample(step)


def leaky(monitor, steps):
    _run(monitor, steps, pop_job_info=False)


def fixed(monitor, steps):
    _run(monitor, steps, pop_job_info=True)
