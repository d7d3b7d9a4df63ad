"""Plugin name, plugin-data protobuf and summary metadata for tb-leak series.

Every series tb-leak writes is a scalar summary whose ``SummaryMetadata``
names the plugin ``leak``, sets ``data_class = DATA_CLASS_SCALAR`` (so
TensorBoard's data providers list it) and carries a small versioned
``LeakPluginData`` message (schema: ``plugin_data.proto``) saying what the
series measures and in which unit.

This module imports neither TensorFlow nor generated protobuf code: the
message class is built from a descriptor at import time.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from tensorboard.compat.proto import summary_pb2

PLUGIN_NAME = "leak"

# Increment when LeakPluginData changes meaning; readers reject newer ones.
PROTO_VERSION = 0

TAG_PREFIX = "leak/"

GROUPS = ("process", "python", "tf", "tensors", "objects", "tf_function", "gc", "containers", "held_by", "runtime")

# Leak traces: a ``held_by`` series point per trace, whose plugin data
# ``detail`` is this JSON format (see README "Leak traces").
HELD_BY_GROUP = "held_by"
HELD_BY_FORMAT = 1

# A memory measure read at close() just before the last walk's collection is
# written as ``gc/<measure>`` + this suffix (see Monitor._memory_before_collection).
BEFORE_COLLECTION = "_before_collection"
# ... and read right after each walk's full collection, with no garbage left
# (see Monitor._memory_after_full_collection).
AFTER_FULL_COLLECTION = "_after_full_collection"


def _build_message_class():
    fdp = descriptor_pb2.FileDescriptorProto(
        name="tb_leak_plugin/plugin_data.proto", package="tb_leak", syntax="proto3"
    )
    msg = fdp.message_type.add(name="LeakPluginData")
    field_type = descriptor_pb2.FieldDescriptorProto
    for number, name, kind in (
        (1, "version", field_type.TYPE_INT32),
        (2, "group", field_type.TYPE_STRING),
        (3, "measure", field_type.TYPE_STRING),
        (4, "unit", field_type.TYPE_STRING),
        (5, "subject", field_type.TYPE_STRING),
        (6, "detail", field_type.TYPE_STRING),
    ):
        msg.field.add(name=name, number=number, type=kind, label=field_type.LABEL_OPTIONAL)
    # Which task of a distributed job wrote the run (only on the "run" series).
    msg.field.add(name="task", number=7, type=field_type.TYPE_MESSAGE, type_name=".tb_leak.TaskIdentity",
                  label=field_type.LABEL_OPTIONAL)
    task = fdp.message_type.add(name="TaskIdentity")
    for number, name, kind, label in (
        (1, "task_type", field_type.TYPE_STRING, field_type.LABEL_OPTIONAL),
        (2, "task_index", field_type.TYPE_INT32, field_type.LABEL_OPTIONAL),
        (3, "cluster_size", field_type.TYPE_INT32, field_type.LABEL_OPTIONAL),
        (4, "host", field_type.TYPE_STRING, field_type.LABEL_OPTIONAL),
        (5, "pid", field_type.TYPE_INT64, field_type.LABEL_OPTIONAL),
        (6, "cluster_id", field_type.TYPE_STRING, field_type.LABEL_OPTIONAL),
        (7, "task_counts", field_type.TYPE_STRING, field_type.LABEL_REPEATED),
        (8, "run_named_by", field_type.TYPE_STRING, field_type.LABEL_OPTIONAL),
    ):
        task.field.add(name=name, number=number, type=kind, label=label)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return (message_factory.GetMessageClass(pool.FindMessageTypeByName("tb_leak.LeakPluginData")),
            message_factory.GetMessageClass(pool.FindMessageTypeByName("tb_leak.TaskIdentity")))


LeakPluginData, TaskIdentity = _build_message_class()

# The series that records which task of a distributed job wrote a run: its
# value is the task index, its plugin data carries the whole TaskIdentity.
# Readers take it out of the run's series (it measures nothing); a tb-leak
# that predates it reads it as one more flat series.
TASK_GROUP, TASK_MEASURE, TASK_UNIT = "run", "task", "index"
TASK_TAG = TAG_PREFIX + TASK_GROUP + "/" + TASK_MEASURE


class PluginDataError(ValueError):
    """Plugin data that this version of tb-leak cannot read."""


@dataclasses.dataclass(frozen=True)
class SeriesInfo:
    """What one series measures: probe group, measure, unit and subject."""

    group: str
    measure: str
    unit: str
    subject: str = ""
    #: Structured data of a ``held_by`` point (JSON); empty for series.
    detail: str = ""

    @property
    def tag(self) -> str:
        return series_tag(self.group, self.measure, self.subject)

    @property
    def is_memory(self) -> bool:
        """True for series in bytes of process, heap or allocator memory."""
        return self.unit == "bytes" and self.group in ("process", "python", "tf", "tensors")


@dataclasses.dataclass(frozen=True)
class TaskSeriesInfo(SeriesInfo):
    """The task-identity series: a :class:`SeriesInfo` whose metadata also
    carries a serialized ``TaskIdentity`` (see :func:`task_identity`)."""

    task_bytes: bytes = b""

    @property
    def task(self) -> dict:
        return task_identity_dict(self.task_bytes)


def task_series_info(identity: dict) -> TaskSeriesInfo:
    """The SeriesInfo of the task-identity series for ``identity`` (keys as
    :func:`task_identity_dict` returns them)."""
    message = TaskIdentity(
        task_type=str(identity.get("task_type", "")),
        task_index=int(identity.get("task_index", 0)),
        cluster_size=int(identity.get("cluster_size", 0)),
        host=str(identity.get("host", "")),
        pid=int(identity.get("pid", 0)),
        cluster_id=str(identity.get("cluster_id", "")),
        task_counts=[f"{name}={count}" for name, count in sorted((identity.get("task_counts") or {}).items())],
        run_named_by=str(identity.get("run_named_by", "")),
    )
    return TaskSeriesInfo(TASK_GROUP, TASK_MEASURE, TASK_UNIT, "", task_bytes=message.SerializeToString())


def task_identity_dict(content: bytes) -> dict:
    """A serialized ``TaskIdentity`` as a plain dict; ``task_counts`` is
    task type -> number of tasks (entries that do not parse are left out)."""
    message = TaskIdentity.FromString(bytes(content))
    counts = {}
    for entry in message.task_counts:
        name, _, count = entry.rpartition("=")
        if name and count.isdigit():
            counts[name] = int(count)
    return {
        "task_type": message.task_type,
        "task_index": int(message.task_index),
        "cluster_size": int(message.cluster_size),
        "host": message.host,
        "pid": int(message.pid),
        "cluster_id": message.cluster_id,
        "task_counts": counts,
        "run_named_by": message.run_named_by,
    }


def series_tag(group: str, measure: str, subject: str = "") -> str:
    """Return the stable tag name for a series.

    ``leak/<group>/<measure>`` without a subject, ``leak/<group>/<subject>/<measure>``
    with one, except live-object counts, which are ``leak/objects/<type name>``.
    """
    if group == "objects" and subject:
        return f"{TAG_PREFIX}objects/{subject}"
    if subject:
        return f"{TAG_PREFIX}{group}/{subject}/{measure}"
    return f"{TAG_PREFIX}{group}/{measure}"


def create_summary_metadata(info: SeriesInfo, display_name: str = "", description: str = ""):
    """Return a ``SummaryMetadata`` proto for a tb-leak series."""
    content = LeakPluginData(
        version=PROTO_VERSION,
        group=info.group,
        measure=info.measure,
        unit=info.unit,
        subject=info.subject,
        detail=info.detail,
    )
    task_bytes = getattr(info, "task_bytes", b"")
    if task_bytes:
        content.task.MergeFromString(task_bytes)
    return summary_pb2.SummaryMetadata(
        display_name=display_name or info.tag,
        summary_description=description,
        plugin_data=summary_pb2.SummaryMetadata.PluginData(
            plugin_name=PLUGIN_NAME, content=content.SerializeToString()
        ),
        data_class=summary_pb2.DATA_CLASS_SCALAR,
    )


def parse_plugin_metadata(content: bytes) -> SeriesInfo:
    """Parse ``plugin_data.content`` bytes into a :class:`SeriesInfo`.

    Raises:
      PluginDataError: the bytes are not a LeakPluginData message, were
        written by a newer tb-leak (``version`` > ``PROTO_VERSION``) or lack
        the group, measure or unit.
    """
    if not isinstance(content, (bytes, bytearray)):
        raise PluginDataError(f"plugin content must be bytes, got {type(content).__name__}")
    message = LeakPluginData()
    try:
        message.ParseFromString(bytes(content))
    except Exception as error:  # DecodeError and friends
        raise PluginDataError(f"plugin data is not a LeakPluginData message: {error}") from None
    if message.version > PROTO_VERSION:
        raise PluginDataError(
            f"series written by a newer tb-leak (plugin data version {message.version}, "
            f"this reader understands up to {PROTO_VERSION}); upgrade tb-leak"
        )
    if message.version < 0:
        raise PluginDataError(f"invalid plugin data version {message.version}")
    if not (message.group and message.measure and message.unit):
        raise PluginDataError("plugin data lacks group, measure or unit")
    if message.HasField("task"):
        return TaskSeriesInfo(group=message.group, measure=message.measure, unit=message.unit,
                              subject=message.subject, task_bytes=message.task.SerializeToString())
    return SeriesInfo(
        group=message.group, measure=message.measure, unit=message.unit, subject=message.subject,
        detail=message.detail,
    )


# A series measured against a memory limit (``process/available_bytes``, a
# device's ``tf/<device>/bytes_in_use``) names it in ``detail``:
# ``{"limit": name, "limit_bytes": size}``.

def limit_detail(name: str, limit_bytes: float) -> str:
    """The ``detail`` (JSON) of a series measured against a limit."""
    out = {"limit": name}
    if isinstance(limit_bytes, (int, float)) and math.isfinite(limit_bytes) and limit_bytes > 0:
        out["limit_bytes"] = int(limit_bytes)
    return json.dumps(out, sort_keys=True)


def parse_limit_detail(detail: str) -> tuple[str, float | None] | None:
    """``(limit name, limit bytes or None)`` from a series' detail, or None
    when it names no limit (series written before limits were recorded)."""
    if not detail or '"limit"' not in detail:
        return None
    try:
        data = json.loads(detail)
    except (ValueError, TypeError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("limit"), str) or not data["limit"]:
        return None
    size = data.get("limit_bytes")
    if isinstance(size, bool) or not isinstance(size, (int, float)) or not (math.isfinite(size) and size > 0):
        size = None
    return data["limit"][:80], (float(size) if size is not None else None)


# ------------------------------------------------------------------ typed hops
#
# A leak trace is a list of hops from a root to the direct holder. Each hop is
# a small dict, a value the CLI, the JSON and the Leak tab render; nothing
# parses a rendered path back. Kinds:
#   global            name="pkg.mod.var"                 a module global (root)
#   local             owner=function, name, where         a running function's local (root)
#   class_attribute   owner=class qualname, name          (root)
#   class_namespace   owner=class qualname                a class's C slots (root)
#   frame_local       owner=function, name, where         a finished frame (a traceback's)
#   generator_local   owner=generator qualname, name
#   attribute         owner=type, name                    obj.name
#   key               name, key_type "str"|"other"; keys (wildcard: that many keys matching name)
#   dict_key          the object is a key of the dict
#   item              owner="list"|"tuple"|"set"|"frozenset"|"deque"
#   cell, function (owner), closure (owner=function, name=variable)
#   object            owner=type                          held by an object, attribute unknown
#   registry          name                                an interpreter registry's entry (root):
#                                                         ``signal handler of SIGTERM``
#   native            owner=type                          an object no Python object refers to (root):
#                                                         held by the interpreter or C code (fork hooks,
#                                                         an extension's state, a running frame's stack)
#   repeat            name=the repeated hops' text, count, min_count
#                                                         a chain of the same hops (a wrapper wrapping the
#                                                         last one, a handler chaining to the one before)
#   elided            name=count                          hops left out in the middle
#   text              name                                a label as it is (older traces, suffixes)

ROOT_KINDS = frozenset({"global", "local", "class_attribute", "class_namespace", "registry", "native"})
# Hops through which one holder can keep any number of objects (a chain of
# the same hops keeps one object per link: a handler chaining to the one it
# replaced, a wrapper wrapping the last one).
FAN_OUT_KINDS = frozenset({"key", "dict_key", "item", "frame_local", "generator_local", "repeat"})


MAX_HOP_CHARS = 300  # the longest text of one hop (a module or key name may be megabytes)


def _bound(text: str) -> str:
    text = str(text)
    return text if len(text) <= MAX_HOP_CHARS else text[: MAX_HOP_CHARS - 1] + "…"


def hop_text(hop) -> str:
    """A hop as one line of text (``dict['cache']``, ``Trainer.history``)."""
    if not isinstance(hop, dict):
        return _bound(hop)
    kind, owner, name = hop.get("kind"), hop.get("owner") or "?", hop.get("name") or "?"
    if kind == "global":
        keys = hop.get("keys")
        text = f"global `{name}` ({keys:,} names)" if isinstance(keys, int) and keys > 1 else f"global `{name}`"
    elif kind == "local":
        text = f"{owner}() local `{name}` ({hop.get('where') or '?'})"
    elif kind == "class_attribute":
        text = f"class attribute `{owner}.{name}`"
    elif kind == "class_namespace":
        text = f"namespace of class `{owner}`"
    elif kind == "frame_local":
        text = f"frame of finished {owner}() local `{name}` ({hop.get('where') or '?'})"
    elif kind == "generator_local":
        text = f"generator `{owner}` local `{name}`"
    elif kind == "attribute":
        text = f"{owner}.{name}"
    elif kind == "key":
        label = repr(name) if hop.get("key_type") == "str" else name
        keys = hop.get("keys")
        text = f"dict[<{keys:,} keys {label}>]" if isinstance(keys, int) and keys > 1 else f"dict[{label}]"
    elif kind == "dict_key":
        text = "dict (key)"
    elif kind in ("item", "object"):
        text = f"{owner} of {hop['holds']}" if hop.get("holds") else owner
    elif kind == "cell":
        text = "cell"
    elif kind == "function":
        text = f"function `{owner}`"
    elif kind == "closure":
        text = f"closure of `{owner}` `{name}`"
    elif kind == "registry":
        text = f"interpreter registry `{name}`"
    elif kind == "native":
        text = f"{owner} held outside Python (interpreter or C state, another thread's running function)"
    elif kind == "repeat":
        count, low = hop.get("count"), hop.get("min_count")
        if not isinstance(count, int):
            times = "n"
        elif isinstance(low, int) and low < count:
            times = f"{low}-{count}"
        else:
            times = f"{count}"
        text = f"({name}) × {times}"
    elif kind == "elided":
        text = f"… {name} hops …"
    else:
        text = str(name)
    return _bound(text)


def text_hop(text) -> dict:
    """A label kept as it is (an older trace's hop, a suffix such as ``tuple``)."""
    return {"kind": "text", "name": _bound(text)}


_DIGITS = re.compile(r"[0-9]+")


def wildcard(hop: dict) -> dict:
    """The hop with the digits of a string key made ``*`` (``'pyfunc_1200'``
    -> ``'pyfunc_*'``), and a chain's length made ``n``: one leak reached
    through a thousand keys, or along a chain, is one path."""
    if hop.get("kind") == "repeat":
        return {"kind": "repeat", "name": hop.get("name")}
    if hop.get("kind") == "elided":
        return {"kind": "elided", "name": "n"}  # paths of different lengths with the same two ends
    if hop.get("kind") == "global":
        # A module's global is a string key of the module's dict: modules
        # made at run time under numbered names (``pf_description28``, one
        # imported per trial and kept in sys.modules) are one path too.
        pattern = _DIGITS.sub("*", hop.get("name") or "")
        return hop if pattern == hop.get("name") else {**hop, "name": pattern}
    if hop.get("kind") != "key" or hop.get("key_type") != "str":
        return hop
    pattern = _DIGITS.sub("*", hop.get("name") or "")
    return hop if pattern == hop.get("name") else {**hop, "name": pattern}
