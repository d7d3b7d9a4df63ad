"""Find and analyse a run's profiler traces, without TensorFlow.

TensorFlow's profiler writes ``<run_dir>/plugins/profile/<session>/<host>.xplane.pb``:
one session per ``tf.profiler.experimental.start()`` / ``stop()`` window,
one file per host. Directories are listed and remote files read through
TensorBoard's ``gfile`` (so ``gs://`` and ``s3://`` work where their
clients are installed; local files take one plain read). Each file is
checked against a size limit *before* it is read, and analysed on its own:
a truncated, empty or garbage file gets an error naming it, and the others
are still analysed.

Memory: a file is held once as bytes while it is decoded, plus numpy
arrays for the events the analysis keeps. Every element (plane, line,
event, stat, text) is charged to a memory budget of ``memory_ratio`` (4) times
the file, so the peak stays under 4x the file size plus 16 MiB whatever the
file holds; a file whose structure would need more gets an error naming the
limit (about 2.5x measured on a 43 MiB trace, see benchmarks/bench_traces.py).
"""

from __future__ import annotations

import dataclasses
import math
import os
import posixpath

from tensorboard.compat.tensorflow_stub.io import gfile

from tb_leak_plugin.xplane import schema as xplane
from tb_leak_plugin.xplane.budget import DEFAULT_MEMORY_RATIO, MemoryBudget
from tb_leak_plugin.analysis import trace
from tb_leak_plugin.analysis.trace import OpRetention, format_bytes, rank_ops

__all__ = [
    "DEFAULT_MAX_TRACE_BYTES",
    "OpRetention",
    "RunTraceReport",
    "SessionTraceReport",
    "TraceError",
    "analyze_run_traces",
    "analyze_trace_file",
    "find_trace_files",
    "read_trace_file",
]

DEFAULT_MAX_TRACE_BYTES = 512 << 20
READ_CHUNK_BYTES = 16 << 20
PROFILE_DIR = ("plugins", "profile")
TRACE_SUFFIX = ".xplane.pb"


class TraceError(ValueError):
    """A run directory or trace file that cannot be read (the message says why)."""


@dataclasses.dataclass
class SessionTraceReport:
    """The analysis of one trace file (one profiling session on one host).

    ``error`` is None when the file was analysed; otherwise it says what was
    wrong with the file, and the other fields are empty. See
    :class:`tb_leak_plugin.analysis.trace.TraceAnalysis` for the fields.
    """

    session: str
    host: str
    path: str
    error: str | None = None
    steps: int = 0
    allocators: list[str] = dataclasses.field(default_factory=list)
    memory_events: int = 0
    coverage_note: str = ""
    ops: list[OpRetention] = dataclasses.field(default_factory=list)
    suspicious: list[OpRetention] = dataclasses.field(default_factory=list)
    retracing: list[dict] = dataclasses.field(default_factory=list)
    unmatched_frees: int = 0
    step_source: str = "none"
    step_note: str = ""
    file_bytes: int = 0

    @classmethod
    def from_analysis(cls, session, host, path, analysis: trace.TraceAnalysis, file_bytes=0):
        return cls(
            session=session,
            host=host,
            path=path,
            steps=analysis.steps,
            allocators=list(analysis.allocators),
            memory_events=analysis.memory_events,
            coverage_note=analysis.coverage_note,
            ops=list(analysis.ops),
            suspicious=list(analysis.suspicious),
            retracing=list(analysis.retracing),
            unmatched_frees=analysis.unmatched_frees,
            step_source=analysis.step_source,
            step_note=analysis.step_note,
            file_bytes=file_bytes,
        )

    def to_dict(self) -> dict:
        result = dataclasses.asdict(self)
        result["ops"] = [o.to_dict() for o in self.ops]
        result["suspicious"] = [o.to_dict() for o in self.suspicious]
        return result


@dataclasses.dataclass
class RunTraceReport:
    """Every trace of one run, one entry per (session, host) file."""

    sessions: list[SessionTraceReport] = dataclasses.field(default_factory=list)

    @property
    def errors(self) -> list[str]:
        return [s.error for s in self.sessions if s.error]

    def suspicious_ops(self) -> list[OpRetention]:
        """Suspicious ops merged across sessions and hosts, most suspicious first.

        Counts and bytes are summed; steps too (a step of each session
        counts); bytes per step is the step-weighted mean.
        """
        merged: dict[tuple, list[OpRetention]] = {}
        for session in self.sessions:
            for op in session.suspicious:
                merged.setdefault(op.key, []).append(op)
        results = []
        for group in merged.values():
            if len(group) == 1:
                results.append(group[0])
                continue
            steps_total = sum(o.steps_total for o in group)
            weighted = sum(o.retained_bytes_per_step * o.steps_total for o in group)
            per_step = weighted / steps_total if steps_total else 0.0
            first = group[0]
            results.append(
                OpRetention(
                    op=first.op,
                    region_type=first.region_type,
                    shape=first.shape,
                    data_type=first.data_type,
                    allocator=first.allocator,
                    allocations=sum(o.allocations for o in group),
                    frees=sum(o.frees for o in group),
                    retained_bytes=sum(o.retained_bytes for o in group),
                    retained_allocations=sum(o.retained_allocations for o in group),
                    steps_retained=sum(o.steps_retained for o in group),
                    steps_total=steps_total,
                    retained_bytes_per_step=per_step,
                    suspicious=True,
                    reason=(
                        f"leaked in {len(group)} traces: left memory behind in "
                        f"{sum(o.steps_retained for o in group)} of {steps_total} steps "
                        f"({format_bytes(sum(o.retained_bytes for o in group))} never freed, "
                        f"about {format_bytes(per_step)} more each step)"
                    ),
                )
            )
        return rank_ops(results)

    def to_dict(self) -> dict:
        return {
            "sessions": [s.to_dict() for s in self.sessions],
            "suspicious_ops": [o.to_dict() for o in self.suspicious_ops()],
        }


def _is_remote(path: str) -> bool:
    return "://" in path


def _join(*parts: str) -> str:
    if _is_remote(parts[0]):
        return posixpath.join(parts[0].rstrip("/"), *parts[1:])
    return os.path.join(*parts)


def find_trace_files(run_dir: str) -> list[tuple[str, str, str]]:
    """Return (session, host, path) for every ``*.xplane.pb`` of the run.

    Sessions are sorted by name (their names are start times); hosts too.
    A run without ``plugins/profile`` has none.

    Raises:
      TraceError: ``run_dir`` is missing, not a directory or unreadable.
    """
    try:
        if not gfile.isdir(run_dir):
            raise TraceError(f"run directory {run_dir!r} does not exist or is not a directory")
        profile_dir = _join(run_dir, *PROFILE_DIR)
        if not gfile.isdir(profile_dir):
            return []
        found = []
        for session in sorted(gfile.listdir(profile_dir)):
            session = session.rstrip("/")
            session_dir = _join(profile_dir, session)
            if not gfile.isdir(session_dir):
                continue
            for name in sorted(gfile.listdir(session_dir)):
                name = name.rstrip("/")
                if name.endswith(TRACE_SUFFIX):
                    found.append((session, name[: -len(TRACE_SUFFIX)], _join(session_dir, name)))
        return found
    except TraceError:
        raise
    except Exception as error:
        raise TraceError(f"cannot list the traces of {run_dir!r}: {error}") from None


def read_trace_file(path: str, *, max_bytes: int = DEFAULT_MAX_TRACE_BYTES,
                    name: str | None = None) -> bytes | bytearray:
    """Read one trace file, refusing one larger than ``max_bytes``.

    Raises:
      TraceError: the file is too large, empty or unreadable (the message
        names the file, as ``name`` when given, and says what to do).
    """
    shown = name or path
    try:
        size = gfile.stat(path).length
    except Exception as error:
        raise TraceError(f"{shown}: cannot read the file size: {_named(error, path, shown)}") from None
    if size is not None and size > max_bytes:
        raise TraceError(
            f"{shown}: trace file is {size} bytes ({format_bytes(size)}), over the limit of "
            f"{max_bytes} bytes ({format_bytes(max_bytes)}); not read. Analysing it takes up "
            f"to about 4x its size in memory; to analyse it anyway raise the limit "
            f"(tb-leak analyze --max-trace-mib {math.ceil(size / (1 << 20))}, or "
            f"analyze_run_traces(..., max_bytes={size}))."
        )
    if size == 0:
        raise TraceError(
            f"{shown}: the trace file is empty (0 bytes); the profiler may have been stopped "
            "before it wrote anything, or the copy failed"
        )
    try:
        data = _read_all(path, size, max_bytes, shown)
    except TraceError:
        raise
    except Exception as error:
        raise TraceError(f"{shown}: cannot read the file: {_named(error, path, shown)}") from None
    if not data:
        raise TraceError(f"{shown}: the trace file is empty (0 bytes)")
    return data


def _named(error: Exception, path: str, shown: str) -> str:
    """An OS error's text with the file's path as it is shown (never the server's)."""
    return str(error).replace(path, shown)


def _read_all(path: str, size: int | None, max_bytes: int,
              shown: str | None = None) -> bytes | bytearray:
    """The file's bytes: a local file in one read, a remote one in chunks into
    one buffer (never a second full copy). Errors name the file as ``shown``."""
    shown = shown or path
    if not _is_remote(path):
        # A local file in one read: one copy (gfile would copy each chunk twice).
        with open(path, "rb") as handle:
            # read(n) reserves n bytes up front: ask for what stat() said is there.
            data = handle.read(min(max_bytes, size if size is not None else max_bytes) + 1)
        if len(data) > max_bytes or (size is not None and len(data) > size):
            raise TraceError(
                f"{shown}: trace file grew while being read (a profiler or copy still "
                "writing?); not analysed. Try again once it is complete."
            )
        return data
    data = bytearray(size or 0)
    filled = 0
    with gfile.GFile(path, "rb") as handle:
        while True:
            chunk = handle.read(READ_CHUNK_BYTES)
            if not chunk:
                break
            if filled + len(chunk) > max_bytes:  # grew after stat (a writer still busy)
                raise TraceError(
                    f"{shown}: trace file grew past the limit of {max_bytes} bytes while "
                    "being read; not analysed. Raise max_bytes to analyse it."
                )
            if filled + len(chunk) <= len(data):
                data[filled : filled + len(chunk)] = chunk
            else:
                del data[filled:]
                data += chunk
            filled += len(chunk)
            del chunk
    del data[filled:]
    return data


def analyze_trace_file(
    path: str, *, session: str = "", host: str = "", max_bytes: int = DEFAULT_MAX_TRACE_BYTES,
    memory_ratio: float = DEFAULT_MEMORY_RATIO, name: str | None = None,
) -> SessionTraceReport:
    """Analyse one ``*.xplane.pb`` file; problems go to ``report.error``, never raised.

    The report (its ``path`` and its errors) names the file as ``name`` when
    given, else as ``path``. Memory stays under ``memory_ratio`` times the
    file size plus 16 MiB (see :mod:`tb_leak_plugin.xplane.budget`): a file
    whose structure would need more is refused with an error naming the limit.
    """
    shown = name or path
    try:
        data = read_trace_file(path, max_bytes=max_bytes, name=shown)
    except TraceError as error:
        return SessionTraceReport(session=session, host=host, path=shown, error=str(error))
    size = len(data)

    def failed(error: str) -> SessionTraceReport:
        return SessionTraceReport(session=session, host=host, path=shown, file_bytes=size,
                                  error=error)

    budget = MemoryBudget(size, ratio=memory_ratio)
    try:
        decoded = trace.decode(data, budget)
        del data  # the decoded arrays no longer point into the file's bytes
        budget.release(1, size)
        analysis = trace.analyze_decoded(decoded, budget)
        del decoded
    except xplane.XPlaneMemoryLimitError as error:
        return failed(f"{shown}: not analysed: {error}")
    except xplane.XPlaneDecodeError as error:
        return failed(
            f"{shown}: not a readable profiler trace ({error}). The file may be truncated "
            "(a profiler still writing, or a copy cut short), or not an XSpace trace at all."
        )
    except MemoryError:
        return failed(f"{shown}: out of memory analysing this {format_bytes(size)} trace; "
                      "use a smaller profiling window or a machine with more memory")
    except Exception as error:  # a bug or a trace shape never seen: keep the others going
        return failed(f"{shown}: could not analyse this trace: {type(error).__name__}: {error}")
    return SessionTraceReport.from_analysis(session, host, shown, analysis, file_bytes=size)


def analyze_run_traces(run_dir: str, *, max_bytes: int = DEFAULT_MAX_TRACE_BYTES,
                       memory_ratio: float = DEFAULT_MEMORY_RATIO) -> RunTraceReport:
    """Analyse every profiler trace of a run (all sessions, all hosts).

    Files are read one at a time. A file that cannot be analysed (unreadable,
    or needing more than ``memory_ratio`` times its size in memory) gets a
    report whose ``error`` says why; the others are still analysed. Files
    are named relative to ``run_dir`` (``plugins/profile/<session>/<host>.xplane.pb``),
    in ``path`` and in errors alike.

    Raises:
      TraceError: ``run_dir`` is missing or unreadable. A run without
        traces gives an empty report.
    """
    report = RunTraceReport()
    for session, host, path in find_trace_files(run_dir):
        # Named relative to the run directory: reports never carry server paths.
        name = posixpath.join(*PROFILE_DIR, session, host + TRACE_SUFFIX)
        report.sessions.append(
            analyze_trace_file(path, session=session, host=host, max_bytes=max_bytes,
                               memory_ratio=memory_ratio, name=name)
        )
    return report
