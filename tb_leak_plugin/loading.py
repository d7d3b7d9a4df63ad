"""Read tb-leak series back out of a logdir, without TensorFlow.

Files are opened through TensorBoard's own I/O layer (its ``gfile``, which
also speaks ``s3://`` and ``gs://`` when their client libraries are
installed), records are framed here with CRC checks, and each record is
decoded with TensorBoard's ``Event`` protobuf. Every point is kept.

A half-written last record (a job still writing) ends a file quietly; a
corrupt record ends that file with a warning naming file and offset, and
everything read before it is kept.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import re
import struct

import numpy as np
from tensorboard.compat.proto import event_pb2, types_pb2
from tensorboard.compat.tensorflow_stub.io import gfile

from tb_leak_plugin import metadata
from tb_leak_plugin.data import RunData, Series

try:  # A C implementation; the pure-Python fallback only checks lengths.
    import google_crc32c as _crc

    def masked_crc(data: bytes) -> int:
        crc = _crc.value(data)
        return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF

    HAVE_FAST_CRC = True
except ImportError:  # pragma: no cover - exercised only without the wheel
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c as _masked

    def masked_crc(data: bytes) -> int:
        return _masked(data)

    HAVE_FAST_CRC = False

EVENT_FILE_PATTERN = re.compile(r"tfevents")
READ_CHUNK_BYTES = 8 << 20
# A record longer than this is treated as corruption rather than allocated.
MAX_RECORD_BYTES = 256 << 20

_HEADER = struct.Struct("<QI")
_FOOTER = struct.Struct("<I")


class LogdirError(Exception):
    """The logdir cannot be read at all (missing, not a directory, no access)."""


@dataclasses.dataclass
class LogdirData:
    """Runs read from one logdir, in run-name order."""

    logdir: str
    runs: list[RunData]
    warnings: list[str] = dataclasses.field(default_factory=list)


def is_remote(path: str) -> bool:
    return "://" in path


def _join(*parts: str) -> str:
    return "/".join(p.rstrip("/") for p in parts) if is_remote(parts[0]) else os.path.join(*parts)


def discover_runs(logdir: str) -> dict[str, str]:
    """Return run name -> run directory for every directory holding event files.

    Run names are paths relative to ``logdir`` with ``/`` separators; the
    logdir itself is ``.``. Raises LogdirError when ``logdir`` is not a
    readable directory.
    """
    try:
        exists = gfile.exists(logdir)
        is_dir = exists and gfile.isdir(logdir)
    except Exception as error:
        raise LogdirError(f"cannot read logdir {logdir!r}: {error}") from None
    if not exists:
        raise LogdirError(f"logdir {logdir!r} does not exist")
    if not is_dir:
        raise LogdirError(f"logdir {logdir!r} is not a directory")
    runs = {}
    try:
        for directory, _subdirs, files in gfile.walk(logdir):
            if any(EVENT_FILE_PATTERN.search(name) for name in files):
                rel = _relative(logdir, directory)
                runs[rel] = directory
    except Exception as error:
        raise LogdirError(f"cannot list logdir {logdir!r}: {error}") from None
    return dict(sorted(runs.items()))


def _relative(logdir: str, directory: str) -> str:
    if is_remote(logdir):
        rel = directory[len(logdir.rstrip("/")) :].strip("/")
    else:
        rel = os.path.relpath(directory, logdir)
        rel = "." if rel == os.curdir else rel.replace(os.sep, "/")
    return rel or "."


def event_files(run_dir: str) -> list[str]:
    """Event files directly inside ``run_dir``, in name (= creation) order."""
    names = sorted(n for n in gfile.listdir(run_dir) if EVENT_FILE_PATTERN.search(n))
    return [_join(run_dir, n) for n in names if not gfile.isdir(_join(run_dir, n))]


def iter_records(path: str, warnings: list[str]):
    """Yield the payload bytes of each complete, CRC-valid record of a file.

    Problems are appended to ``warnings``; iteration then stops for that
    file. A truncated tail is not a problem (the writer may still be busy).
    """
    try:
        handle = gfile.GFile(path, "rb")
    except Exception as error:
        warnings.append(f"{path}: cannot open: {error}")
        return
    buffer = b""
    base = 0  # file offset of buffer[0]
    pos = 0
    eof = False
    with handle:
        while True:
            if len(buffer) - pos < _HEADER.size and not eof:
                buffer, base, pos, eof = _refill(handle, buffer, base, pos, path, warnings)
                if buffer is None:
                    return
                continue
            if len(buffer) - pos < _HEADER.size:
                return  # clean end, or a header cut short by a live writer
            length, length_crc = _HEADER.unpack_from(buffer, pos)
            if masked_crc(buffer[pos : pos + 8]) != length_crc:
                warnings.append(
                    f"{path}: corrupt record header at byte {base + pos}; "
                    "kept the records before it, skipped the rest of this file"
                )
                return
            if length > MAX_RECORD_BYTES:
                warnings.append(f"{path}: record at byte {base + pos} claims {length} bytes; skipped the rest")
                return
            end = pos + _HEADER.size + length + _FOOTER.size
            if end > len(buffer):
                if eof:
                    return  # half-written last record
                buffer, base, pos, eof = _refill(handle, buffer, base, pos, path, warnings, need=end - pos)
                if buffer is None:
                    return
                continue
            payload = buffer[pos + _HEADER.size : end - _FOOTER.size]
            (data_crc,) = _FOOTER.unpack_from(buffer, end - _FOOTER.size)
            if HAVE_FAST_CRC and masked_crc(payload) != data_crc:
                warnings.append(
                    f"{path}: corrupt record data at byte {base + pos}; "
                    "kept the records before it, skipped the rest of this file"
                )
                return
            yield payload
            pos = end


def _refill(handle, buffer, base, pos, path, warnings, need=0):
    try:
        chunk = handle.read(max(READ_CHUNK_BYTES, need))
    except Exception as error:
        warnings.append(f"{path}: read failed at byte {base + len(buffer)}: {error}")
        return None, base, pos, True
    rest = buffer[pos:]
    return rest + chunk, base + pos, 0, not chunk


_DTYPES = {
    types_pb2.DT_FLOAT: np.float32,
    types_pb2.DT_DOUBLE: np.float64,
    types_pb2.DT_HALF: np.float16,
    types_pb2.DT_INT32: np.int32,
    types_pb2.DT_INT64: np.int64,
}


def scalar_value(value) -> float | None:
    """The float held by a ``Summary.Value`` (tensor or simple_value), or None."""
    if value.HasField("tensor"):
        tensor = value.tensor
        if tensor.double_val:
            return tensor.double_val[0]
        if tensor.float_val:
            return tensor.float_val[0]
        if tensor.int64_val:
            return float(tensor.int64_val[0])
        if tensor.int_val:
            return float(tensor.int_val[0])
        if tensor.tensor_content and tensor.dtype in _DTYPES:
            array = np.frombuffer(tensor.tensor_content, dtype=_DTYPES[tensor.dtype])
            return float(array[0]) if array.size else None
        if tensor.half_val:
            return float(np.array(tensor.half_val[0], dtype=np.uint16).view(np.float16))
        return None
    if value.WhichOneof("value") == "simple_value":
        return value.simple_value
    return None


class _Column:
    __slots__ = ("info", "steps", "wall_times", "values")

    def __init__(self, info):
        self.info = info
        self.steps = []
        self.wall_times = []
        self.values = []


def load_run(name: str, run_dir: str) -> RunData:
    """Read every tb-leak series of one run directory (all event files)."""
    run = RunData(name=name, path=run_dir)
    columns: dict[str, _Column] = {}
    rejected: set[str] = set()
    parse = event_pb2.Event.FromString
    try:
        files = event_files(run_dir)
    except Exception as error:
        run.warnings.append(f"{run_dir}: cannot list event files: {error}")
        files = []
    for path in files:
        for payload in iter_records(path, run.warnings):
            try:
                event = parse(payload)
            except Exception:
                run.warnings.append(f"{path}: undecodable event record; skipped it")
                continue
            if not event.HasField("summary"):
                continue
            step = event.step
            wall_time = event.wall_time
            for value in event.summary.value:
                tag = value.tag
                column = columns.get(tag)
                if column is None:
                    if tag in rejected:
                        continue
                    column = _new_column(value, tag, path, rejected, run.warnings)
                    if column is None:
                        continue
                    columns[tag] = column
                number = scalar_value(value)
                if number is None:
                    continue
                column.steps.append(step)
                column.wall_times.append(wall_time)
                column.values.append(number)
    for tag in sorted(columns):
        column = columns[tag]
        if column.values:
            run.series[tag] = Series.from_points(
                tag, column.info, column.steps, column.wall_times, column.values
            )
    return run


def _new_column(value, tag, path, rejected, warnings):
    plugin_data = value.metadata.plugin_data
    if plugin_data.plugin_name != metadata.PLUGIN_NAME:
        # Not ours (or metadata only on a first event we did not see).
        rejected.add(tag)
        return None
    try:
        info = metadata.parse_plugin_metadata(plugin_data.content)
    except metadata.PluginDataError as error:
        warnings.append(f"{path}: series {tag!r} skipped: {error}")
        rejected.add(tag)
        return None
    return _Column(info)


def load_logdir(logdir: str, run_filter: str | None = None) -> LogdirData:
    """Read every run of ``logdir`` whose name matches ``run_filter`` (a regex).

    Raises LogdirError when the logdir cannot be read; problems inside runs
    become warnings on those runs.
    """
    pattern = re.compile(run_filter) if run_filter else None
    runs = []
    for name, run_dir in discover_runs(logdir).items():
        if pattern is not None and not pattern.search(name):
            continue
        runs.append(load_run(name, run_dir))
    return LogdirData(logdir=logdir, runs=runs)


def group_runs(runs: list[RunData]) -> dict[str, list[str]]:
    """Group run names by parent directory (e.g. the workers of one job).

    Returns parent -> run names, only for parents with two or more runs.
    """
    groups = collections.defaultdict(list)
    for run in runs:
        parent = run.name.rsplit("/", 1)[0] if "/" in run.name else "."
        groups[parent].append(run.name)
    return {parent: names for parent, names in groups.items() if len(names) > 1}
