"""Which task of a distributed job this process is, and where its run goes.

``tf.distribute`` (``MultiWorkerMirroredStrategy``, ``ParameterServerStrategy``)
learns the cluster from the ``TF_CONFIG`` environment variable: JSON with a
``cluster`` (task type -> addresses) and this process's ``task`` (``type``,
``index``). Every task runs the same script, so ``Monitor(logdir)`` on each
would write into one directory, and TensorBoard (and tb-leak) would read the
tasks' files as one run. Here:

* :func:`current_task` reads ``TF_CONFIG`` (never TensorFlow) into a
  :class:`Task`; a missing variable is no cluster, a malformed one is
  reported (the monitor logs it once) and treated as no cluster.
* :func:`resolve_run_dir` picks the run directory: in a cluster of more than
  one task, ``<logdir>/<type>-<index>`` unless the user names the run
  (``run_name=``, which may use ``{task_type}``, ``{task_index}`` and
  ``{task}``).
* :meth:`Task.identity` is what the monitor records in the run (task type,
  index, cluster size and shape, a cluster fingerprint, host, pid), so the
  report can group a job's tasks.

Task types come from the environment and end up in paths: they are
sanitized (:func:`safe_name`), so ``TF_CONFIG`` cannot point a run outside
the logdir or give it a name a file system or a terminal trips over.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import socket

ENV_VAR = "TF_CONFIG"

# Characters kept in a path component made from TF_CONFIG; the rest become "_".
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
MAX_NAME_CHARS = 64
# The identity is recorded as protobuf int32 fields (task index, cluster size).
MAX_INDEX = 2**31 - 1

# The default run name of a task in a cluster of several tasks.
DEFAULT_RUN_NAME = "{task_type}-{task_index}"
_FIELDS = ("task_type", "task_index", "task")


@dataclasses.dataclass(frozen=True)
class Task:
    """This process's place in a ``tf.distribute`` cluster (from ``TF_CONFIG``).

    ``task_counts`` is task type -> number of tasks in the cluster spec;
    ``cluster_size`` their sum (plus this task when its type is not in the
    spec, as an evaluator's is not).
    """

    task_type: str
    task_index: int
    task_counts: dict
    cluster_id: str

    @property
    def cluster_size(self) -> int:
        size = sum(self.task_counts.values())
        return size if self.task_type in self.task_counts else size + 1

    @property
    def name(self) -> str:
        """``<type>-<index>``, safe as a path component."""
        return f"{safe_name(self.task_type)}-{self.task_index}"

    @property
    def shared(self) -> bool:
        """True when other tasks run beside this one (each needs its own run)."""
        return self.cluster_size > 1

    def identity(self, run_named_by: str) -> dict:
        """What the monitor records in the run: task, cluster, host and pid."""
        try:
            host = socket.gethostname()
        except OSError:
            host = ""
        return {
            "task_type": self.task_type,
            "task_index": self.task_index,
            "cluster_size": self.cluster_size,
            "host": host,
            "pid": os.getpid(),
            "cluster_id": self.cluster_id,
            "task_counts": dict(self.task_counts),
            "run_named_by": run_named_by,
        }


class ClusterConfigError(ValueError):
    """``TF_CONFIG`` is set but cannot be understood."""


def safe_name(text: str) -> str:
    """``text`` as one safe path component: letters, digits, ``_.-`` only
    (others become ``_``), at most 64 characters, never ``.``/``..`` or
    hidden, never empty."""
    name = _UNSAFE.sub("_", str(text))[:MAX_NAME_CHARS]
    name = name.lstrip(".")
    return name or "task"


def current_task(environ=None) -> Task | None:
    """The task ``TF_CONFIG`` describes, or None when it is unset or empty.

    Raises:
      ClusterConfigError: ``TF_CONFIG`` is set but is not the JSON
        ``tf.distribute`` reads (a message saying what is wrong).
    """
    environ = os.environ if environ is None else environ
    raw = environ.get(ENV_VAR)
    if raw is None or not raw.strip():
        return None
    return parse_tf_config(raw)


def parse_tf_config(raw: str) -> Task | None:
    """Parse a ``TF_CONFIG`` value (see :func:`current_task`). A config
    without a ``task`` (a cluster spec alone) describes no task: None."""
    try:
        config = json.loads(raw)
    except (TypeError, ValueError) as error:
        raise ClusterConfigError(f"{ENV_VAR} is not JSON ({error})") from None
    if not isinstance(config, dict):
        raise ClusterConfigError(f"{ENV_VAR} must be a JSON object, not {type(config).__name__}")
    cluster = config.get("cluster")
    cluster = {} if cluster is None else cluster
    task = config.get("task")
    if not isinstance(cluster, dict):
        raise ClusterConfigError(f"{ENV_VAR} 'cluster' must map task types to addresses")
    if task is None or task == {}:
        return None
    if not isinstance(task, dict):
        raise ClusterConfigError(f"{ENV_VAR} 'task' must be an object with 'type' and 'index'")
    task_type = task.get("type")
    if not isinstance(task_type, str) or not task_type:
        raise ClusterConfigError(f"{ENV_VAR} 'task' has no 'type'")
    index = task.get("index", 0)
    if isinstance(index, str) and index.strip().isdigit():
        index = int(index)
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ClusterConfigError(f"{ENV_VAR} task 'index' must be an integer >= 0, not {_short(index)}")
    if index > MAX_INDEX:
        raise ClusterConfigError(f"{ENV_VAR} task 'index' {_short(index)} is out of range (at most {MAX_INDEX})")
    if not _encodable(task_type):
        raise ClusterConfigError(f"{ENV_VAR} task 'type' {_short(task_type)} is not valid Unicode text")
    counts = {}
    for name, addresses in cluster.items():
        if not _encodable(name):
            raise ClusterConfigError(f"{ENV_VAR} cluster task type {_short(name)} is not valid Unicode text")
        if isinstance(addresses, (list, tuple, dict)):
            # A dict is a sparse cluster (index -> address), as tf.train.ClusterSpec allows.
            counts[str(name)] = len(addresses)
        elif isinstance(addresses, str):
            counts[str(name)] = 1
        else:
            raise ClusterConfigError(f"{ENV_VAR} cluster entry {_short(name)} must list addresses")
    if task_type in counts and isinstance(cluster[task_type], (list, tuple)) and index >= counts[task_type]:
        raise ClusterConfigError(
            f"{ENV_VAR} task {_short(task_type)[1:-1]}-{index} is not in the cluster "
            f"({counts[task_type]} {_short(task_type)[1:-1]} tasks)")
    if sum(counts.values()) + 1 > MAX_INDEX:
        raise ClusterConfigError(f"{ENV_VAR} cluster of {sum(counts.values())} tasks is out of range")
    return Task(task_type=task_type, task_index=index, task_counts=counts, cluster_id=cluster_fingerprint(cluster))


def _encodable(text) -> bool:
    """Whether ``text`` can be recorded (UTF-8: no lone surrogates)."""
    try:
        str(text).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _short(value, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters, for messages (ASCII-safe)."""
    text = ascii(value)
    return text if len(text) <= limit else text[:limit] + "..."


def cluster_fingerprint(cluster: dict) -> str:
    """A short hash of the cluster spec: every task of one job computes the same."""
    canonical = json.dumps(cluster, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def format_run_name(template: str, task: Task | None) -> str:
    """``template`` with ``{task_type}``, ``{task_index}`` and ``{task}``
    filled in (sanitized); without a task (no cluster) they are empty and
    left out of the name (``"exp/{task}"`` is then ``"exp"``).

    Raises ValueError for other ``{fields}``, absolute paths or ``..``.
    """
    values = {"task_type": safe_name(task.task_type), "task_index": str(task.task_index),
              "task": task.name} if task is not None else {"task_type": "", "task_index": "", "task": ""}
    try:
        name = template.format_map(_Strict(values))
    except (KeyError, ValueError, IndexError, AttributeError) as error:
        raise ValueError(f"run_name {template!r}: only {{task_type}}, {{task_index}} and {{task}} "
                         f"can be filled in ({error})") from None
    parts = [part for part in name.replace("\\", "/").split("/") if part not in ("", ".")]
    if template.startswith(("/", "\\")) or any(part == ".." for part in parts):
        raise ValueError(f"run_name {template!r} must be a relative name inside the logdir (no '..')")
    if task is None:  # fields left empty leave dangling separators: tidy them
        parts = [part.strip("-_") or part for part in parts]
    return "/".join(part for part in parts if part)


class _Strict(dict):
    def __missing__(self, key):
        raise KeyError(key)


def uses_task_fields(template: str) -> bool:
    return any("{" + field + "}" in template for field in _FIELDS)


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where a monitor writes and what it records about its task.

    ``run_dir`` is the directory of the event file (None: through
    ``tf.summary``); ``identity`` is recorded in the run when the process is
    a task of a cluster; ``file_tag`` goes into event file names so that
    tasks sharing a directory never write one file; ``notice`` is a message
    to log once (a malformed TF_CONFIG, a run name every task shares).
    """

    run_dir: str | None
    identity: dict | None
    file_tag: str
    notice: str | None = None


def resolve_run_dir(logdir: str | None, run_name: str | None, environ=None) -> Placement:
    """Decide the run directory and the identity for a monitor.

    * ``run_name`` given: ``<logdir>/<run_name>`` with the task fields filled
      in (``""`` or ``"."``: the logdir itself).
    * no ``run_name``, a cluster of several tasks: ``<logdir>/<type>-<index>``.
    * otherwise: the logdir itself.

    Never raises for the environment (a bad ``TF_CONFIG`` gives a notice and
    a single run); raises ValueError for a bad ``run_name``.
    """
    notice = None
    try:
        task = current_task(environ)
    except ClusterConfigError as error:
        task = None
        notice = f"{error}; writing a single run (set {ENV_VAR} as tf.distribute expects it to get one run per task)"
    except Exception as error:  # never hurt the training job over its environment
        task = None
        notice = f"{ENV_VAR} could not be read ({type(error).__name__}: {_short(str(error))}); writing a single run"
    if task is not None:
        try:  # what the monitor records must serialize, whatever TF_CONFIG held
            from tb_leak_plugin.metadata import task_series_info

            task_series_info(task.identity("tf_config"))
        except Exception as error:
            task = None
            notice = (f"{ENV_VAR} describes a task that cannot be recorded ({type(error).__name__}: "
                      f"{_short(str(error))}); writing a single run")
    if run_name is not None:
        name = format_run_name(str(run_name), task)
        named_by = "user"
        if task is not None and task.shared and not uses_task_fields(str(run_name)):
            notice = (f"run_name {run_name!r} is the same on every task of this {task.cluster_size}-task job: "
                      "the tasks' series will be read as one run (their event files stay apart); "
                      "put {task} in the name to keep them apart")
    elif task is not None and task.shared:
        name = format_run_name(DEFAULT_RUN_NAME, task)
        named_by = "tf_config"
    else:
        name = ""
        named_by = "logdir"
    run_dir = None
    if logdir is None and run_name is not None:
        notice = "run_name needs a logdir (Monitor() writes where the tf.summary writer does); it is ignored"
    if logdir is not None:
        logdir = os.fspath(logdir)
        if not name:
            run_dir = logdir
        elif "://" in logdir:
            run_dir = logdir.rstrip("/") + "/" + name
        else:
            run_dir = os.path.join(logdir, *name.split("/"))
    identity = task.identity(named_by) if task is not None else None
    return Placement(run_dir=run_dir, identity=identity, file_tag=task.name if task is not None else "",
                     notice=notice)
