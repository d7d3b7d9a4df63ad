"""The summary format: stable tags, strict versioned plugin metadata, and the
hand-encoded sample values, byte for byte protobuf's encoding.

No TensorFlow needed.
"""

import struct

import pytest
from tensorboard.compat.proto import summary_pb2

from tb_leak_plugin import metadata, summary
from tb_leak_plugin.eventfile import records
from tb_leak_plugin.metadata import SeriesInfo

RSS = SeriesInfo("process", "rss_bytes", "bytes")
DICTS = SeriesInfo("objects", "live_count", "count", "builtins.dict")


def test_tags_are_stable_and_documented():
    assert RSS.tag == "leak/process/rss_bytes"
    assert SeriesInfo("tf", "bytes_in_use", "bytes", "GPU:0").tag == "leak/tf/GPU:0/bytes_in_use"
    assert DICTS.tag == "leak/objects/builtins.dict"
    assert SeriesInfo("tf_function", "traces", "traces", "step").tag == "leak/tf_function/step/traces"


def test_metadata_round_trip_and_data_class():
    meta = metadata.create_summary_metadata(DICTS)
    assert meta.plugin_data.plugin_name == "leak"
    assert meta.data_class == summary_pb2.DATA_CLASS_SCALAR
    assert metadata.parse_plugin_metadata(meta.plugin_data.content) == DICTS


@pytest.mark.parametrize(
    "content, message",
    [
        (metadata.LeakPluginData(version=7, group="process", measure="rss_bytes", unit="bytes").SerializeToString(),
         "newer tb-leak"),
        (b"\xff\xff\xff", "not a LeakPluginData"),
        (metadata.LeakPluginData(version=0, group="process").SerializeToString(), "lacks"),
        ("text", "must be bytes"),
    ],
)
def test_parse_plugin_metadata_is_strict(content, message):
    with pytest.raises(metadata.PluginDataError, match=message):
        metadata.parse_plugin_metadata(content)


def test_hand_encoded_values_equal_protobuf_encoding():
    for tag in ("leak/process/rss_bytes", "leak/objects/" + "x" * 300, "leak/objects/ünïcode.Type"):
        value = 123456789.0
        expected = summary_pb2.Summary()
        expected.value.add(tag=tag, tensor=summary._scalar_tensor(value))
        encoded = records.value_prefix(tag) + struct.pack("<f", value)
        assert summary_pb2.Summary.FromString(encoded) == expected
