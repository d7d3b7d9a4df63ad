"""The TensorFlow allocator probe, with a stand-in for TensorFlow: every
logical device is sampled, and a device without allocator statistics is
skipped (logged once).
"""

import sys


def test_tf_allocator_probe_covers_every_device_and_skips_silent_ones(monkeypatch):
    """A stand-in for TensorFlow: no GPU can run here, so the GPU device and an
    allocator without statistics (CPU with oneDNN off) are simulated. The real
    CPU path is covered by tests/test_monitor.py."""
    import types

    from tb_leak_plugin.capture import probes

    class Device:
        def __init__(self, name, device_type):
            self.name, self.device_type = name, device_type

    def get_memory_info(device):
        if device == "CPU:0":
            raise ValueError("No allocator statistics")
        return {"current": 3 << 30, "peak": 5 << 30}

    fake = types.SimpleNamespace(config=types.SimpleNamespace(
        list_logical_devices=lambda: [Device("/device:CPU:0", "CPU"), Device("/device:GPU:0", "GPU"),
                                      Device("/device:GPU:1", "GPU")],
        experimental=types.SimpleNamespace(get_memory_info=get_memory_info)))
    monkeypatch.setitem(sys.modules, "tensorflow", fake)
    skipped = []
    probe = probes.TFAllocatorProbe(on_skip=skipped.append)
    first = dict((info.tag, value) for info, value in probe.sample())
    assert first == {"leak/tf/GPU:0/bytes_in_use": 3 << 30, "leak/tf/GPU:0/peak_bytes": 5 << 30,
                     "leak/tf/GPU:1/bytes_in_use": 3 << 30, "leak/tf/GPU:1/peak_bytes": 5 << 30}
    probe.sample()
    assert len(skipped) == 1 and "CPU:0" in skipped[0]  # logged once, then dropped
