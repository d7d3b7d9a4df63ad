"""A ``PyDataset`` reads robot recordings whose messages are protobuf records described by a schema stored in each recording (a ``FileDescriptorProto`` with a per-recording version in its file name); the decoder adds every recording's schema to protobuf's process-wide default ``DescriptorPool`` and builds the message classes from it, and a descriptor pool never forgets a file, so every recording's descriptors, message classes and their native tables stay for the rest of the run (``model.fit`` on a ``PyDataset`` + ``LeakCallback``; grows once a recording, mostly in native memory).

Source: foxglove/mcap PR #730 "mcap_protobuf: add MessageFactory
internal to Decoder": "``GetMessages`` uses an internal global
MessageFactory which is shared between all callers ... This PR uses an
internal MessageFactory for each decoder instance, which should ensure
that a given DescriptorPool only gets each FileDescriptorProto once."
Fix used here (the PR's): each recording's decoder owns a private
``descriptor_pool.DescriptorPool()``; the pool, its descriptors and its
classes go away with the decoder.
Summary: a 24-64-3 action regressor over joint-state messages (24 float
fields in a ``JointState`` message, 3 in an ``Action`` message); a new
recording every 4 batches, decoded from 32 serialized messages a batch.

Here: 20 batches an epoch, 150 epochs (3,000 batches, 750 recordings).
The fixed twin gives each recording's decoder its own pool.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4, protobuf 7.36 (upb), TF 2.21 / Keras 3.15; a do-nothing
``monitor.sample``; ``LeakCallback`` replaced by a stub callback): leaky
582.1 / 584.9 / 587.7 / 590.6 / 593.5 MiB RSS at 20 / 40 / 60 / 80 % /
end (~19 KiB a recording, ~5 KiB a batch) with gc objects flat within a
saw-tooth (327,956 / 327,644 / 327,812 / 328,028 / 327,932: the growth is in the
pool's native memory), 11.6 s for 3,000 batches (~4 ms a batch); fixed 580.7 / 581.7 /
581.8 / 582.4 / 581.9 MiB with objects 328,185 / 327,848 / 327,678 /
328,368 / 327,925, 12.3 s.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import keras
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/foxglove/mcap/pull/730"
SLICE = "holdout15"
STEPS = 3000           # batches; 20 per epoch, 150 epochs
STEPS_PER_EPOCH = 20
BATCHES_PER_RECORDING = 4
BATCH = 32
JOINTS = 24
ACTIONS = 3
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["native", "rss", "malloc", "MessageMeta", "Descriptor",
                                                 "type", "dict"]},
    "fixed": {"verdict_not": "leak"},
}

F = descriptor_pb2.FieldDescriptorProto


def _schema(recording):
    """The schema stored in a recording: versioned file and package names."""
    fdp = descriptor_pb2.FileDescriptorProto(name="robot/rec_%06d/state.proto" % recording,
                                             package="robot.rec%06d" % recording, syntax="proto3")
    js = fdp.message_type.add(name="JointState")
    for j in range(JOINTS):
        js.field.add(name="q%02d" % j, number=j + 1, type=F.TYPE_FLOAT, label=F.LABEL_OPTIONAL)
    js.field.add(name="stamp_ns", number=JOINTS + 1, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    act = fdp.message_type.add(name="Action")
    for a in range(ACTIONS):
        act.field.add(name="u%d" % a, number=a + 1, type=F.TYPE_FLOAT, label=F.LABEL_OPTIONAL)
    return fdp


class RecordingDecoder:
    def __init__(self, recording, private_pool):
        fdp = _schema(recording)
        # the leak: the default pool keeps every recording's file; the fix: a pool per decoder
        self.pool = descriptor_pool.DescriptorPool() if private_pool else descriptor_pool.Default()
        self.pool.Add(fdp)
        self.JointState = message_factory.GetMessageClass(
            self.pool.FindMessageTypeByName(fdp.package + ".JointState"))
        self.Action = message_factory.GetMessageClass(self.pool.FindMessageTypeByName(fdp.package + ".Action"))

    def decode(self, states, actions):
        x = np.empty((len(states), JOINTS), np.float32)
        y = np.empty((len(actions), ACTIONS), np.float32)
        for i, (s, a) in enumerate(zip(states, actions)):
            m = self.JointState.FromString(s)
            x[i] = [getattr(m, "q%02d" % j) for j in range(JOINTS)]
            u = self.Action.FromString(a)
            y[i] = (u.u0, u.u1, u.u2)
        return x, y


class Recordings(keras.utils.PyDataset):
    def __init__(self, private_pool, **kwargs):
        super().__init__(**kwargs)
        self.private_pool = private_pool
        self.epoch = 0
        self.decoder = None
        self.decoder_for = -1
        self.w = np.random.default_rng(1).standard_normal((JOINTS, ACTIONS)).astype(np.float32) / 4

    def __len__(self):
        return STEPS_PER_EPOCH

    def _messages(self, recording, index):
        rng = np.random.default_rng((recording, index))
        q = rng.standard_normal((BATCH, JOINTS)).astype(np.float32)
        u = np.tanh(q @ self.w)
        writer = self.decoder
        states = [writer.JointState(stamp_ns=i, **{"q%02d" % j: float(v) for j, v in enumerate(row)})
                  .SerializeToString() for i, row in enumerate(q)]
        actions = [writer.Action(u0=float(r[0]), u1=float(r[1]), u2=float(r[2])).SerializeToString()
                   for r in u]
        return states, actions

    def __getitem__(self, index):
        recording = (self.epoch * STEPS_PER_EPOCH + index) // BATCHES_PER_RECORDING
        if recording != self.decoder_for:
            self.decoder = RecordingDecoder(recording, self.private_pool)
            self.decoder_for = recording
        return self.decoder.decode(*self._messages(recording, index))

    def on_epoch_end(self):
        self.epoch += 1


def _fit(logdir, steps, private_pool):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((JOINTS,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(ACTIONS)])
    model.compile(optimizer="adam", loss="mse")
    model.fit(Recordings(private_pool), epochs=max(1, steps // STEPS_PER_EPOCH), verbose=0,
              callbacks=[tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, private_pool=False)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, private_pool=True)
