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
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tb_leak.LeakPluginData"))


LeakPluginData = _build_message_class()


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
    return SeriesInfo(
        group=message.group, measure=message.measure, unit=message.unit, subject=message.subject,
        detail=message.detail,
    )
