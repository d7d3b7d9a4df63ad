"""Turn probe samples into TensorBoard summaries.

Two writing paths share one format (see ``metadata.py``):

* :class:`EventWriter` writes event files itself (``eventfile.writer``);
  it needs no TensorFlow (plain Python, PyTorch).
* :class:`TFSummaryWriter` writes through ``tf.summary`` to the default
  writer (or a given one), for programs that already use ``tf.summary``.

The one-shot functions :func:`memory` and :func:`live_objects` behave like
``tf.summary.scalar``: they write to the default ``tf.summary`` writer and
return whether anything was written. :func:`memory_pb` and
:func:`live_objects_pb` build ``Summary`` protos without TensorFlow.
"""

from __future__ import annotations

import gc
import sys
import time

import numpy as np

from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, types_pb2

from tb_leak_plugin import metadata
from tb_leak_plugin.capture import probes
from tb_leak_plugin.eventfile.records import VALUE as _VALUE, value_prefix as _value_prefix
from tb_leak_plugin.metadata import SeriesInfo

Sample = list[tuple[SeriesInfo, float]]


def _scalar_tensor(value: float) -> tensor_pb2.TensorProto:
    return tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, float_val=[float(value)])


def sample_to_summary_pb(sample: Sample, with_metadata=lambda info: True) -> summary_pb2.Summary:
    """Build a ``Summary`` proto holding every value of a sample.

    ``with_metadata(info)`` says whether to attach the series' metadata
    (TensorBoard needs it on the first point of a tag in a file).
    """
    summary = summary_pb2.Summary()
    for info, value in sample:
        entry = summary.value.add(tag=info.tag, tensor=_scalar_tensor(value))
        if with_metadata(info):
            entry.metadata.CopyFrom(metadata.create_summary_metadata(info))
    return summary


class EventWriter:
    """Writes samples into event files under ``logdir`` without TensorFlow."""

    def __init__(self, logdir: str, flush_secs: float = 30.0, name_tag: str = ""):
        from tb_leak_plugin.eventfile.writer import open_event_writer

        self.logdir = logdir
        self._writer = open_event_writer(logdir, flush_secs=flush_secs, name_tag=name_tag)
        self._generation = self._writer.generation
        # SeriesInfo -> encoded Summary.Value prefix, once its metadata is out.
        self._prefixes: dict[SeriesInfo, bytes] = {}

    @property
    def record_writer(self):
        """The underlying record writer (its failure counters and notices)."""
        return self._writer

    def write(self, step: int, sample: Sample, wall_time: float | None = None) -> None:
        if not sample:
            return
        if self._writer.generation != self._generation:
            # A new file replaced a deleted one: its first points carry metadata again.
            self._generation = self._writer.generation
            self._prefixes.clear()
        prefixes = self._prefixes
        event = event_pb2.Event(step=int(step), wall_time=time.time() if wall_time is None else wall_time)
        fresh = [(info, value) for info, value in sample if info not in prefixes]
        pack = _VALUE.pack
        known = b"".join(prefixes[info] + pack(value) for info, value in sample if info in prefixes)
        if fresh:
            event.summary.CopyFrom(sample_to_summary_pb(fresh))
            for info, _value in fresh:
                if info.detail:
                    # A series whose detail changed (the memory limit it is
                    # measured against): forget the tag's other metadata, so
                    # that a change back is written again too.
                    for other in [known for known in prefixes if known.tag == info.tag]:
                        del prefixes[other]
                prefixes[info] = _value_prefix(info.tag)
        if known:
            event.summary.MergeFromString(known)
        dropped = getattr(self._writer, "dropped_records", 0)
        accepted = None
        try:
            accepted = self._writer.add_event(event)
        finally:
            lost = accepted is False or getattr(self._writer, "dropped_records", 0) != dropped
            if fresh and lost:
                # The record carrying these series' metadata was dropped (a
                # full backlog while the store hangs): their next points carry
                # it again, or every later point would be unreadable.
                for info, _value in fresh:
                    prefixes.pop(info, None)

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


def _tf():
    """TensorFlow if the program imported it, else None (we never import it)."""
    return sys.modules.get("tensorflow")


class TFSummaryWriter:
    """Writes samples with ``tf.summary.write`` to a ``tf.summary`` writer.

    With ``writer=None`` it uses whatever default writer is active at write
    time, like ``tf.summary.scalar``.
    """

    def __init__(self, writer=None):
        tf = _tf()
        if tf is None:
            raise RuntimeError(
                "writing through tf.summary needs TensorFlow imported; "
                "give Monitor a logdir to write without TensorFlow"
            )
        self._tf = tf
        self._writer = writer
        self._metadata: dict[SeriesInfo, bytes] = {}

    def _metadata_bytes(self, info: SeriesInfo) -> bytes:
        encoded = self._metadata.get(info)
        if encoded is None:
            encoded = self._metadata[info] = metadata.create_summary_metadata(info).SerializeToString()
        return encoded

    def write(self, step: int, sample: Sample, wall_time: float | None = None) -> bool:
        tf = self._tf
        if self._writer is not None:
            with self._writer.as_default():
                return self._write_all(tf, step, sample)
        return self._write_all(tf, step, sample)

    def _write_all(self, tf, step, sample) -> bool:
        written = False
        # Outside tf.function the ops run eagerly; a recording condition of
        # the user's (tf.summary.record_if) is honoured by tf.summary.write.
        # Numbers go in as numpy values: TensorFlow caches every Python number
        # it converts to a tensor for good (~0.6 KiB each), and every value
        # and step here is new.
        step_value = np.int64(step)
        for info, value in sample:
            written = bool(
                tf.summary.write(
                    info.tag,
                    tf.constant(np.float32(value)),
                    step=step_value,
                    metadata=self._metadata_bytes(info),
                )
            ) or written
        return written

    def flush(self) -> None:
        if self._writer is not None:
            self._writer.flush()
        else:
            self._tf.summary.flush()  # the default writer, if one is active

    def close(self) -> None:
        self.flush()


def memory_pb() -> summary_pb2.Summary:
    """A ``Summary`` proto with process, Python-heap and TF-allocator memory now.

    Needs no TensorFlow; TensorFlow allocator series appear only when the
    program has imported TensorFlow. A Summary carries no step: wrap it in an
    ``Event`` with one to write it.
    """
    return sample_to_summary_pb(_memory_sample())


def _memory_sample() -> Sample:
    sample: Sample = []
    for make in (probes.ProcessProbe, probes.PythonHeapProbe, probes.MallocProbe, probes.TFAllocatorProbe):
        try:
            sample.extend(make().sample())
        except Exception:  # a probe that cannot run here adds nothing
            continue
    return sample


def _census_sample(top_k: int) -> Sample:
    census = probes.ObjectCensusProbe(top_k=top_k, max_types=top_k)
    tensors = probes.LiveTensorsProbe()
    gc.collect()  # count live objects, not cycles waiting for the collector
    objects = probes.collect_objects()
    try:
        return census.sample(objects) + tensors.sample(objects)
    finally:
        objects.release()


def _write_in_graph(tf, step, sample, writer, take_sample):
    """``tf.summary.write`` ops whose values are measured when the graph runs.

    The series are the ones a sample has at trace time (their tags must be
    fixed in the graph); each run measures them again through
    ``tf.py_function`` (a series gone by then writes NaN).
    """
    infos = [info for info, _value in sample]

    def measure():
        now = dict((info, value) for info, value in take_sample())
        return np.asarray([now.get(info, np.nan) for info in infos], dtype=np.float32)

    values = tf.py_function(tf.autograph.experimental.do_not_convert(measure), [], tf.float32)
    if step is None:
        step = tf.summary.experimental.get_step()
        if step is None:
            raise ValueError("no step given and tf.summary.experimental.get_step() is None")
    step = tf.cast(step, tf.int64)

    def write_all():
        written = tf.constant(False)
        for index, info in enumerate(infos):
            metadata_bytes = metadata.create_summary_metadata(info).SerializeToString()
            ok = tf.summary.write(info.tag, values[index], step=step, metadata=metadata_bytes)
            written = tf.logical_or(written, ok)
        return written

    if writer is not None:
        with writer.as_default():
            return write_all()
    return write_all()


def live_objects_pb(top_k: int = 20) -> summary_pb2.Summary:
    """A ``Summary`` proto with live-object counts of the ``top_k`` commonest types
    and live tensors (count and bytes). Needs no TensorFlow."""
    return sample_to_summary_pb(_census_sample(top_k))


def memory(step: int | None = None, writer=None) -> bool:
    """Write process, heap and TF-allocator memory through ``tf.summary``.

    Like ``tf.summary.scalar``: writes to ``writer`` or the default writer,
    at ``step`` or ``tf.summary.experimental.get_step()``. Returns True when
    a summary was written (False with no default writer). Inside a
    ``tf.function`` the values are measured each time the function runs
    (through ``tf.py_function``), and a bool tensor is returned.
    """
    return _write_tf(step, _memory_sample(), writer, _memory_sample)


def live_objects(step: int | None = None, top_k: int = 20, writer=None) -> bool:
    """Write a census of live objects (top ``top_k`` types by count) and live
    tensors through ``tf.summary``. Returns True when written."""
    if _tf() is not None and _tf().inside_function():
        raise RuntimeError(
            "tb_leak_plugin.summary.live_objects cannot run inside a tf.function: a census walks "
            "every Python object. Call it (or Monitor.sample) outside the tf.function, after each step.")
    return _write_tf(step, _census_sample(top_k), writer)


def _write_tf(step, sample, writer, take_sample=None) -> bool:
    tf = _tf()
    if tf is None:
        raise RuntimeError("tb_leak_plugin.summary.memory/live_objects need TensorFlow imported; "
                           "use memory_pb()/live_objects_pb() or Monitor(logdir) without it")
    if tf.inside_function():
        return _write_in_graph(tf, step, sample, writer, take_sample)
    if step is None:
        step = tf.summary.experimental.get_step()
        if step is None:
            raise ValueError("no step given and tf.summary.experimental.get_step() is None")
    return TFSummaryWriter(writer).write(int(step), sample)
