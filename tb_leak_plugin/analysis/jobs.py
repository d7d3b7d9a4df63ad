"""Distributed jobs: group the runs of one job's tasks and say how they leak.

Each task of a ``tf.distribute`` job writes its own run and records its
identity in it (``metadata.TASK_TAG``; see ``capture/cluster.py``). Runs
whose identities come from one cluster (the same cluster fingerprint) under
one parent directory are one job. The job's verdict is a leak when any task
leaks, and the pattern says where to look:

* ``alike``: every task leaks at about the same rate (within a factor of 2):
  code that every task runs (the training step, the input pipeline, a
  callback).
* ``uneven``: every task leaks, at rates far apart: the same code, fed
  differently (data shards of different sizes or content).
* ``role``: the tasks of one role leak and those of the others do not (the
  chief alone, say): what only that role does (checkpoints, summaries,
  evaluation, variable placement on parameter servers).
* ``one`` / ``some``: one task (or a few) of a role leaks and its peers do
  not: that task's data shard, its host, or state only it builds.
* ``coordinator``: under ``ParameterServerStrategy`` only the chief runs
  the training loop (and a Monitor); its leak is the loop's.
* ``none``: no task leaks; ``inconclusive``: none leaks but some could not
  be judged.

Pure: dicts in, dicts out (the CLI and the Leak tab share it).
"""

from __future__ import annotations

import collections

from tb_leak_plugin import metadata

# Task types that run the training loop (and so a Monitor). Parameter servers
# and, under ParameterServerStrategy, workers run only a server.
_TRAINING_TYPES = ("chief", "master", "worker")
# Leak rates within this factor of each other are "alike".
ALIKE_FACTOR = 2.0
# A task identity comes from a file: what it claims is bounded before use.
# Tasks without a run are listed up to this many (``missing_count`` counts
# them all), task types of a cluster up to MAX_TASK_TYPES, texts cut.
MAX_MISSING_LISTED = 20
MAX_TASK_TYPES = 64
MAX_TEXT_CHARS = 300
MAX_INT32 = 2**31 - 1

PATTERN_TEXT = {
    "alike": "all tasks leak alike: the leak is in code every task runs (the training step, "
             "the input pipeline, a callback)",
    "uneven": "all tasks leak, at different rates: code every task runs, fed differently "
              "(compare the tasks' data shards)",
    "role": "only the tasks of one role leak: look at what only that role does",
    "one": "one task leaks: look at its data shard or its role (what only it does), or its host",
    "some": "some tasks leak: look at their data shards, hosts or state only they build",
    "coordinator": "the coordinator leaks: the training loop it runs for every worker (under parameter "
                   "servers only the chief runs Python; workers and parameter servers are not watched)",
    "none": "no task leaks",
    "inconclusive": "no task leaks, but not every task could be judged",
}


def take_task(run) -> dict | None:
    """Remove the task-identity series from ``run`` (a ``RunData``) and
    return the identity it carries (bounded: see :func:`bounded_task`), or
    None for a run of no cluster."""
    series = run.series.pop(metadata.TASK_TAG, None)
    if series is None:
        return None
    info = series.info
    if not isinstance(info, metadata.TaskSeriesInfo) or not info.task_bytes:
        return None
    try:
        return bounded_task(info.task)
    except Exception:  # undecodable identity: the run is judged alone
        run.warnings.append("the run's task identity is unreadable; it is not grouped with a job")
        return None


def _cut(value, limit: int = MAX_TEXT_CHARS) -> str:
    value = "" if value is None else str(value)
    return value if len(value) <= limit else value[:limit - 1] + "…"


def _bounded_int(value, low: int = 0, high: int = MAX_INT32) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        return low
    return min(max(value, low), high)


def bounded_task(task: dict) -> dict:
    """A task identity with every field checked and bounded: texts cut to
    300 characters, numbers in range, at most 64 task types (those that run
    a training loop first). Idempotent."""
    counts = task.get("task_counts") if isinstance(task.get("task_counts"), dict) else {}
    kept = sorted(((str(name), count) for name, count in counts.items()),
                  key=lambda item: (_type_order(item[0]), item[0]))[:MAX_TASK_TYPES]
    return {
        "task_type": _cut(task.get("task_type")),
        "task_index": _bounded_int(task.get("task_index")),
        "cluster_size": _bounded_int(task.get("cluster_size")),
        "host": _cut(task.get("host")),
        "pid": _bounded_int(task.get("pid"), 0, 2**63 - 1),
        "cluster_id": _cut(task.get("cluster_id"), 64),
        "task_counts": {_cut(name): _bounded_int(count) for name, count in kept},
        "run_named_by": _cut(task.get("run_named_by"), 32),
    }


def task_label(task: dict) -> str:
    return f"{task.get('task_type') or 'task'}-{task.get('task_index', 0)}"


def _parent(run: str) -> str:
    return run.rsplit("/", 1)[0] if "/" in run else "."


def group_jobs(rows: list[dict]) -> list[dict]:
    """The jobs among ``rows``, one dict per job (see :func:`job_summary`).

    Each row is ``{"run", "verdict", "task", "growth_bytes_per_step",
    "primary_tag", "top_culprit"}`` (``task`` None for runs of no cluster).
    A job is the runs sharing a parent directory and a cluster fingerprint,
    in a cluster of more than one task (or with more than one run).
    """
    buckets = collections.OrderedDict()
    for row in sorted(rows, key=lambda r: r["run"]):
        task = row.get("task")
        if not task:
            continue
        row = dict(row, task=bounded_task(task))
        key = (_parent(row["run"]), task.get("cluster_id", ""))
        buckets.setdefault(key, []).append(row)
    jobs = []
    names = collections.Counter(parent for parent, _cluster in buckets)
    for (parent, cluster_id), members in buckets.items():
        if len(members) < 2 and max(int(m["task"].get("cluster_size") or 0) for m in members) < 2:
            continue
        name = parent if names[parent] == 1 else f"{parent} (cluster {cluster_id[:8]})"
        jobs.append(job_summary(name, members))
    jobs.sort(key=lambda j: ({"leak": 0, "inconclusive": 1}.get(j["verdict"], 2), j["job"]))
    return jobs


def job_summary(name: str, members: list[dict]) -> dict:
    """One job: its tasks, which leak, the pattern and what it usually means."""
    members = sorted(members, key=lambda m: (_type_order(m["task"].get("task_type")),
                                             m["task"].get("task_type") or "", m["task"].get("task_index", 0),
                                             m["run"]))
    tasks = []
    labels = collections.Counter(task_label(m["task"]) for m in members)
    for member in members:
        task = member["task"]
        tasks.append({
            "task": task_label(task),
            "task_type": task.get("task_type", ""),
            "task_index": task.get("task_index", 0),
            "run": member["run"],
            "verdict": member["verdict"],
            "growth_bytes_per_step": member.get("growth_bytes_per_step"),
            "primary_tag": member.get("primary_tag"),
            "top_culprit": member.get("top_culprit"),
            "host": task.get("host", ""),
            "pid": task.get("pid", 0),
        })
    leaking = [t for t in tasks if t["verdict"] == "leak"]
    clean = [t for t in tasks if t["verdict"] == "no_leak"]
    other = [t for t in tasks if t["verdict"] not in ("leak", "no_leak")]
    pattern, role = _pattern(tasks, leaking, other)
    cluster = _cluster_of(members)
    if pattern == "one" and len(tasks) == 1 and cluster.get("ps") and tasks[0]["task_type"] in ("chief", "master"):
        pattern = "coordinator"
    missing, missing_count = _missing_tasks(cluster, tasks)
    duplicated = sorted(label for label, count in labels.items() if count > 1)
    verdict = "leak" if leaking else ("inconclusive" if other else "no_leak")
    summary = _summary_text(name, tasks, leaking, clean, other, pattern, role)
    if pattern == "one" and leaking[0]["task"] == "worker-0" and cluster and not (
            cluster.get("chief") or cluster.get("master")):
        summary += " (worker-0 is the chief of a job without one: it alone saves checkpoints and summaries)"
    return {
        "job": name,
        "cluster_id": members[0]["task"].get("cluster_id", ""),
        "cluster_size": max(int(m["task"].get("cluster_size") or 0) for m in members),
        "task_counts": cluster,
        "verdict": verdict,
        "pattern": pattern,
        "role": role,
        "summary": summary,
        "advice": _advice(pattern, role),
        "tasks": tasks,
        "leaking": [t["task"] for t in leaking],
        "clean": [t["task"] for t in clean],
        "undecided": [t["task"] for t in other],
        "missing": missing,
        "missing_count": missing_count,
        "duplicated": duplicated,
        "runs": [t["run"] for t in tasks],
        "tag": _chart_tag(leaking or tasks),
    }


def _type_order(task_type) -> int:
    return {"chief": 0, "master": 0, "worker": 1, "ps": 2, "evaluator": 3}.get(task_type, 4)


def _pattern(tasks, leaking, other):
    if not leaking:
        return ("inconclusive" if other else "none"), None
    if len(leaking) == len(tasks):
        if len(tasks) == 1:
            return "one", None
        rates = [t["growth_bytes_per_step"] for t in leaking if t["growth_bytes_per_step"]]
        rates = [r for r in rates if r > 0]
        if len(rates) == len(leaking) and max(rates) > ALIKE_FACTOR * min(rates):
            return "uneven", None
        return "alike", None
    by_type = collections.defaultdict(list)
    for task in tasks:
        by_type[task["task_type"]].append(task)
    leaking_types = {t["task_type"] for t in leaking}
    if len(by_type) > 1 and all(all(t["verdict"] == "leak" for t in by_type[kind]) for kind in leaking_types) \
            and all(t["verdict"] != "leak" for kind in by_type if kind not in leaking_types for t in by_type[kind]):
        return "role", ", ".join(sorted(leaking_types, key=_type_order))
    return ("one" if len(leaking) == 1 else "some"), None


def _summary_text(name, tasks, leaking, clean, other, pattern, role) -> str:
    """``job 'exp1': 2 tasks; worker-1 leaks, worker-0 clean -> one task leaks: ...``"""
    states = []
    if leaking:
        states.append(", ".join(t["task"] for t in leaking) + (" leaks" if len(leaking) == 1 else " leak"))
    if clean:
        states.append(", ".join(t["task"] for t in clean) + " clean")
    if other:
        states.append(", ".join(t["task"] for t in other) + " undecided")
    head = f"job {name!r}: {len(tasks)} task{'s' if len(tasks) != 1 else ''}"
    return f"{head}; {', '.join(states)} -> {_advice(pattern, role)}"


def _advice(pattern, role) -> str:
    if pattern != "role":
        return PATTERN_TEXT[pattern]
    roles = [r.strip() for r in (role or "").split(",") if r.strip()]
    if roles == ["chief"] or roles == ["master"]:
        who, verb, does = f"the {roles[0]}", "leaks", f"the {roles[0]} does"
    elif len(roles) == 1:
        who, verb, does = f"the {roles[0]} tasks", "leak", f"the {roles[0]} tasks do"
    else:
        who, verb, does = "the " + " and ".join(roles) + " tasks", "leak", "they do"
    return (f"only {who} {verb}: look at what only {does} (checkpoints, summaries, evaluation, "
            "the variables it holds)")


def _cluster_of(members) -> dict:
    for member in members:
        counts = member["task"].get("task_counts") or {}
        if counts:
            return dict(counts)
    return {}


def _missing_tasks(counts: dict, tasks: list[dict]) -> tuple[list[str], int]:
    """The tasks of a cluster that run a training loop (chief/master and
    workers, except under parameter servers, where only the chief does) and
    have no run: the first ``MAX_MISSING_LISTED`` of them, and how many in
    all. The cost is bounded by the runs and the list, never by the size a
    cluster claims."""
    if not counts:
        return [], 0
    types = ("chief", "master") if counts.get("ps") else _TRAINING_TYPES
    listed, total = [], 0
    for kind in sorted(counts, key=_type_order):
        if kind not in types:
            continue
        size = _bounded_int(counts[kind], 0, 2**63 - 1)
        present = {t["task_index"] for t in tasks if t["task_type"] == kind
                   and isinstance(t["task_index"], int) and 0 <= t["task_index"] < size}
        total += size - len(present)
        index = 0
        while len(listed) < MAX_MISSING_LISTED and index < size:
            if index not in present:
                listed.append(f"{kind}-{index}")
            index += 1
    return listed, total


def _chart_tag(tasks) -> str | None:
    tags = collections.Counter(t["primary_tag"] for t in tasks if t.get("primary_tag"))
    return tags.most_common(1)[0][0] if tags else None


def leak_count(runs: list[dict], jobs: list[dict]) -> tuple[int, list[str]]:
    """How many leaks ``--fail-on-leak`` counts: a leaking job once (however
    many of its tasks leak), each leaking run outside a job once. Returns the
    count and one phrase per leak."""
    in_jobs = {run for job in jobs for run in job["runs"]}
    phrases = []
    for job in jobs:
        if job["verdict"] == "leak":
            phrases.append(f"job {job['job']!r} ({', '.join(job['leaking'])} of {len(job['tasks'])} tasks)")
    for run in runs:
        if run["verdict"] == "leak" and run["run"] not in in_jobs:
            phrases.append(f"run {run['run']!r}")
    return len(phrases), phrases
