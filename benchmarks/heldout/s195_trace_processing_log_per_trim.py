"""A real-time seismic event detector keeps one rolling ``Trace`` for its station, appends every SeedLink packet to it and trims it back to a 30 s window; like ObsPy's ``Trace``, every ``trim()``, ``detrend()`` and ``filter()`` call records itself as a string in ``trace.stats.processing``, so the one long-lived trace gains three processing lines a packet for as long as the detector runs (numpy, no TensorFlow; grows once a step).

Source: sbonaime/seedlink_plotter issue #19 "need to clear processing list
of traces after trim() in plot_graph()": "Every time the trim() method of a
Stream or Trace object is used an entry is added to the list
Trace.stats.processing, thus if the seedlink_plotter is run 24/7 with an
update time of 1s this list will eventually grow large"; megies: "We can
just set the processing to an empty list whenever we append packages to
it." (the same leak as obspy/obspy#2882, "Memory leak through creation of
'hidden' lists of strings in long-running application"). Fix used here
(the thread's): ``trace.stats.processing = []`` after every packet.
Summary: 100 Hz noise with a few seismic-like bursts a minute; each step
appends a 1 s packet (100 samples), trims the trace to its last 3,000
samples, removes a linear trend, band-passes it (FFT mask, 1-20 Hz) and
feeds 16 log band energies plus an STA/LTA ratio to a logistic-regression
detector trained by SGD on whether the packet holds an event onset.

Here: 60,000 packets. The leaky detector keeps the processing history on
the trace held by the training function; the fixed one clears it after
every packet.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4; a do-nothing ``monitor.sample``): leaky 43.5 / 49.2 /
54.8 / 60.4 / 66.0 MiB RSS at 20 / 40 / 60 / 80 % / end (~0.5 KiB a step:
three ~150-character processing strings in ``trace.stats.processing``)
with gc objects 24,038 -> 24,042 (flat: strings are not tracked, the list
is one object), 17.5 s for 60,000 steps (~0.29 ms a step); fixed 38.0 MiB
at every mark with objects 24,038 -> 24,042, 17.4 s.
"""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/sbonaime/seedlink_plotter/issues/19"
SLICE = "holdout17"
STEPS = 60000
RATE = 100.0
PACKET = 100
WINDOW = 3000
BANDS = 16
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["str", "list", "Stats", "Trace"],
              "holder_any": ["processing", "trace", "stats"]},
    "fixed": {"verdict_not": "leak"},
}


def _utc(t):
    """ObsPy-like ``repr`` of a UTCDateTime, from seconds since the start of 2013-11-15."""
    sec = int(t)
    return "UTCDateTime(2013, 11, 15, %d, %d, %d, %d)" % (sec // 3600 % 24, sec // 60 % 60, sec % 60,
                                                        int(round((t - sec) * 1e6)))


class Stats:
    def __init__(self, sampling_rate, starttime):
        self.network, self.station, self.channel = "G", "CCD", "BHZ"
        self.sampling_rate = sampling_rate
        self.starttime = starttime
        self.npts = 0
        self.processing = []


class Trace:
    """Just enough of ``obspy.Trace``: data, stats and the processing record."""

    def __init__(self, sampling_rate, starttime):
        self.data = np.zeros(0)
        self.stats = Stats(sampling_rate, starttime)

    def _add_processing_info(self, name, **kwargs):
        args = "::".join("%s=%s" % (k, v) for k, v in sorted(kwargs.items()))
        self.stats.processing.append("ObsPy 1.2.2: %s(%s)" % (name, args))

    def append_packet(self, samples):
        self.data = np.concatenate([self.data, samples])
        self.stats.npts = len(self.data)

    def trim(self, starttime):
        cut = max(0, int(round((starttime - self.stats.starttime) * self.stats.sampling_rate)))
        self.data = self.data[cut:]
        self.stats.starttime += cut / self.stats.sampling_rate
        self.stats.npts = len(self.data)
        self._add_processing_info("trim", endtime=None, fill_value=None, nearest_sample=True, pad=False,
                                  starttime=_utc(starttime))

    def detrend(self, type="linear"):
        t = np.arange(len(self.data))
        slope, icept = np.polyfit(t, self.data, 1)
        self.data = self.data - (slope * t + icept)
        self._add_processing_info("detrend", options="{}", type=repr(type))

    def filter(self, type, freqmin, freqmax):
        spec = np.fft.rfft(self.data)
        freqs = np.fft.rfftfreq(len(self.data), 1.0 / self.stats.sampling_rate)
        spec[(freqs < freqmin) | (freqs > freqmax)] = 0
        self.data = np.fft.irfft(spec, len(self.data))
        self._add_processing_info("filter", options="{'freqmin': %r, 'freqmax': %r, 'corners': 4, "
                                  "'zerophase': False}" % (freqmin, freqmax), type=repr(type))
        return spec, freqs


class Station:
    """Microseismic noise with event bursts (decaying 4-12 Hz wavelets) now and then."""

    def __init__(self, rng):
        self.rng = rng
        self.t = 0.0
        self.pending = np.zeros(0)

    def packet(self):
        x = 0.3 * self.rng.standard_normal(PACKET)
        x += 0.2 * np.sin(2 * np.pi * 0.2 * (self.t + np.arange(PACKET) / RATE))
        onset = 0.0
        if self.rng.random() < 0.03:
            tt = np.arange(600) / RATE
            f = self.rng.uniform(4, 12)
            burst = self.rng.uniform(2, 6) * np.exp(-tt / 1.5) * np.sin(2 * np.pi * f * tt)
            self.pending = np.concatenate([self.pending, np.zeros(max(0, 600 - len(self.pending)))])
            self.pending[:600] += burst
            onset = 1.0
        if len(self.pending):
            n = min(PACKET, len(self.pending))
            x[:n] += self.pending[:n]
            self.pending = self.pending[n:]
        self.t += PACKET / RATE
        return x, onset


def _features(trace, spec, freqs):
    power = np.abs(spec) ** 2
    edges = np.linspace(1.0, 20.0, BANDS + 1)
    idx = np.searchsorted(freqs, edges)
    bands = np.add.reduceat(power, idx[:-1])[:BANDS]
    sta = np.mean(trace.data[-PACKET:] ** 2)
    lta = np.mean(trace.data ** 2) + 1e-9
    return np.concatenate([np.log1p(bands) / 10.0, [sta / lta / 10.0, 1.0]])


def _train(monitor, steps, clear_processing):
    rng = np.random.default_rng(0)
    station = Station(rng)
    trace = Trace(RATE, 0.0)                       # one long-lived trace, a local of the loop
    w = np.zeros(BANDS + 2)
    for step in range(steps):
        samples, onset = station.packet()
        trace.append_packet(samples)
        if trace.stats.npts > WINDOW:
            trace.trim(station.t - WINDOW / RATE)  # records a processing line
        trace.detrend("linear")                    # ... and another
        spec, freqs = trace.filter("bandpass", 1.0, 20.0)  # ... and another
        x = _features(trace, spec, freqs)
        p = 1.0 / (1.0 + np.exp(-x @ w))
        w += 0.05 * (onset - p) * x
        if clear_processing:
            trace.stats.processing = []            # the fix (seedlink_plotter#19)
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, clear_processing=False)


def fixed(monitor, steps):
    _train(monitor, steps, clear_processing=True)
