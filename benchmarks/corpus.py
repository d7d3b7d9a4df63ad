"""A labelled synthetic corpus of training-memory series, leaking and clean.

`make_corpus` returns ``(name, shape, label, steps, values, leak_info)`` tuples
with ``label`` in {"leak", "clean"}: 55% clean, shapes in turn. Lengths are
log-uniform between 50 and 100,000 samples; steps start anywhere and are either
evenly spaced (every 1-100 steps) or irregular. Values are whole bytes around a
base of 10 MB - 10 GB, with noise sd 0.01% - 1% of the base. Every size is drawn
relative to the noise sd, since detectability depends on growth against noise,
not on absolute bytes. Shapes are functions of the training step (memory grows
per iteration), noise is per sample.

Noise: white (40%), AR(1) with a correlation time up to 20 samples but at most
1/50 of the run (40%), or strongly autocorrelated, phi 0.8 - 0.95 whatever the
length (20%); 15% of series also carry upward spikes (0.5% of samples, 5-20 sd).

Clean shapes, which must not be called leaks:
  flat; warmup_plateau (rise of 3-300 sd settling within 2-30% of the run:
  exponential, linear or overshooting); saturating_cache (A*(1 - exp(-t/tau)),
  tau 2-20% of the run, so still creeping at the end when A is large);
  shuffle_buffer (linear fill over 2-50% of the run, then flat); sawtooth
  (3-50 cycles of 3-100 sd, cleared to the same floor, at least 4 samples
  each, sometimes after a warm-up); step_change (one jump of 3-300 sd at 10-95%
  of the run); allocator_pool (2-6 doubling stairs at geometric times, the last
  by 60% of the run); autocorrelated (AR(1), phi 0.8-0.95); mean_reverting_walk
  (AR(1) with a correlation time of 1/200 - 1/20 of the run: random-walk-like
  segments that revert).

Leak shapes (total growth from onset to end, in noise sd: log-uniform 3-100;
12% "subtle" 1-3): linear; stepwise (6-60 equal stairs); late_onset (onset at
40-75% of the run, at least 30 samples after it); buried_in_noise (3-8 sd);
leak_after_warmup; leak_on_sawtooth (the floor rises); leak_on_cache.

``leak_info`` (a dict for every series) holds ``noise_sd``, ``phi`` and, when
drawn, ``amplitude_over_noise`` and ``tau_over_length``; for leaks also
``growth_over_noise``, ``onset_index``, ``onset_step``, ``slope_per_step``
(bytes/step), ``effective_samples`` and ``tier``:
  "standard": growth >= 3 noise sd and >= 30 effective samples after onset;
  "subtle":   growth below 3 noise sd (reported separately, for honesty);
  "hard":     growth >= 3 noise sd but fewer than 30 effective samples
              (samples after onset * (1 - phi) / (1 + phi)): the noise wanders
              as far as the leak grows, and no test separates the two at a 1%
              false-alarm rate; reported separately.

Run as a script to print a summary of the corpus.
"""

from __future__ import annotations

import math

import numpy as np

CLEAN_SHAPES = ("flat", "warmup_plateau", "saturating_cache", "shuffle_buffer", "sawtooth",
                "step_change", "allocator_pool", "autocorrelated", "mean_reverting_walk")
LEAK_SHAPES = ("linear", "stepwise", "late_onset", "buried_in_noise", "leak_after_warmup",
               "leak_on_sawtooth", "leak_on_cache")
CLEAN_FRACTION = 0.55
MIN_EFFECTIVE_SAMPLES = 30


def make_corpus(seed=0, n_series=2000, *, min_length=50, max_length=100_000):
    """Build ``n_series`` labelled series; deterministic for a given seed.

    Lengths are log-uniform in [min_length, max_length] samples.
    Returns a list of (name, shape, label, steps, values, leak_info); steps are
    int64 training steps, values float64 bytes.
    """
    rng = np.random.default_rng(seed)
    n_clean = round(n_series * CLEAN_FRACTION)
    out = []
    for i in range(n_series):
        if i < n_clean:
            shape = CLEAN_SHAPES[i % len(CLEAN_SHAPES)]
            label = "clean"
        else:
            shape = LEAK_SHAPES[(i - n_clean) % len(LEAK_SHAPES)]
            label = "leak"
        n = round(math.exp(rng.uniform(math.log(min_length), math.log(max_length))))
        steps, values, info = _make_series(rng, shape, label, n)
        out.append((f"{label}-{shape}-{i:05d}", shape, label, steps, values, info))
    return out


def ar1_noise(rng, n, phi, sd):
    """AR(1) noise with marginal sd ``sd``; vectorised in chunks short enough that
    phi**-chunk stays finite."""
    if n <= 0:
        return np.empty(0)
    if phi <= 1e-6:
        return rng.normal(0.0, sd, n)
    innov = rng.normal(0.0, sd * math.sqrt(1.0 - phi * phi), n)
    chunk = max(1, min(n, int(100 * math.log(10) / -math.log(phi))))
    out = np.empty(n)
    prev = rng.normal(0.0, sd)
    for start in range(0, n, chunk):
        e = innov[start:start + chunk]
        j = np.arange(e.size, dtype=np.float64)
        powers = phi ** j
        acc = np.cumsum(e / powers)
        out[start:start + e.size] = powers * (phi * prev + acc)
        prev = out[start + e.size - 1]
    return out


def _make_series(rng, shape, label, n):
    n = max(n, 2)
    base = 10 ** rng.uniform(7, 10)
    sd = base * 10 ** rng.uniform(-4, -2)
    phi = _draw_phi(rng, n, shape)
    if shape == "late_onset":
        onset_frac = rng.uniform(0.4, 0.75)
        # A late leak needs some samples after onset to be a leak at all.
        n = max(n, math.ceil(30 / (1 - onset_frac)))
    steps = _draw_steps(rng, n)
    # Shapes are functions of the training step (memory grows per iteration),
    # expressed in sample-equivalent units so that sizes read as sample counts.
    i = (steps - steps[0]).astype(np.float64) * ((n - 1) / max(float(steps[-1] - steps[0]), 1.0))
    noise = ar1_noise(rng, n, phi, sd)
    if rng.random() < 0.15:
        spikes = rng.random(n) < 0.005
        noise[spikes] += rng.uniform(5, 20, np.count_nonzero(spikes)) * sd
    level = np.full(n, base)
    info = {"noise_sd": sd, "phi": phi, "growth_over_noise": 0.0}

    def amp(lo=3.0, hi=300.0):
        value = sd * 10 ** rng.uniform(math.log10(lo), math.log10(hi))
        info.setdefault("amplitude_over_noise", value / sd)
        return value

    if shape == "warmup_plateau" or (shape == "leak_after_warmup"):
        warm_end = int(n * rng.uniform(0.02, 0.3))
        level += _warmup(rng, i, warm_end, amp())
    elif shape in ("saturating_cache", "leak_on_cache"):
        tau = n * rng.uniform(0.02, 0.2)
        info["tau_over_length"] = tau / n
        level += amp() * (1 - np.exp(-i / tau))
    elif shape == "shuffle_buffer":
        fill = max(1.0, n * rng.uniform(0.02, 0.5))
        level += amp() * np.minimum(1.0, i / fill)
    elif shape in ("sawtooth", "leak_on_sawtooth"):
        period = max(4.0, n / rng.uniform(3, 50))
        phase = rng.uniform(0, period)
        level += amp(3, 100) * (((i + phase) % period) / period)
        if rng.random() < 0.3:
            level += _warmup(rng, i, int(n * rng.uniform(0.02, 0.2)), amp())
    elif shape == "step_change":
        at = int(n * rng.uniform(0.1, 0.95))
        level[at:] += amp()
    elif shape == "allocator_pool":
        level += _pool(rng, i, n, amp())
    elif shape == "mean_reverting_walk":
        tau = math.exp(rng.uniform(math.log(n / 200), math.log(n / 20)))
        info["phi"] = phi = math.exp(-1.0 / max(tau, 1e-3))
        noise = ar1_noise(rng, n, phi, sd)

    if label == "leak":
        onset = 0
        if shape == "late_onset":
            onset = int(n * onset_frac)
        elif shape == "leak_after_warmup":
            onset = warm_end
        onset = int(np.searchsorted(i, onset))
        span = max(i[-1] - i[onset], 1.0)
        growth_sd = _draw_growth(rng, shape)
        growth = growth_sd * sd
        if shape == "stepwise":
            stairs = int(rng.integers(6, 61))
            every = max(1.0, span / stairs)
            stairs = max(1, int(span // every))
            level += np.floor(np.maximum(0.0, i - i[onset]) / every) * (growth / stairs)
        else:
            level += np.maximum(0.0, i - i[onset]) * (growth / span)
        slope = growth / max(float(steps[-1] - steps[onset]), 1.0)
        eff = (n - onset) * (1 - phi) / (1 + phi)
        tier = "subtle" if growth_sd < 3 else (
            "hard" if eff < MIN_EFFECTIVE_SAMPLES else "standard")
        info.update(growth_over_noise=growth_sd, onset_index=onset, slope_per_step=slope,
                    tier=tier, effective_samples=eff, onset_step=int(steps[onset]))
    values = np.round(level + noise)
    return steps, values, info


def _draw_phi(rng, n, shape):
    if shape == "autocorrelated":
        return rng.uniform(0.8, 0.95)
    u = rng.random()
    if u < 0.4:
        return 0.0
    if u < 0.8:
        tau_max = max(0.5, min(20.0, n / 50))
        tau = math.exp(rng.uniform(math.log(0.5), math.log(tau_max))) if tau_max > 0.5 else 0.5
        return min(0.95, math.exp(-1.0 / tau))
    return rng.uniform(0.8, 0.95)


def _draw_growth(rng, shape):
    if shape == "buried_in_noise":
        return rng.uniform(3, 8)
    if rng.random() < 0.12:
        return rng.uniform(1, 3)
    return 10 ** rng.uniform(math.log10(3), 2)


def _draw_steps(rng, n):
    start = int(rng.choice([0, 1, int(rng.integers(0, 50_000))]))
    every = int(rng.choice([1, 5, 10, 50, 100]))
    if rng.random() < 0.5:
        gaps = np.full(n - 1, every)
    else:
        gaps = rng.integers(1, 2 * every + 1, n - 1)
    return start + np.concatenate(([0], np.cumsum(gaps))).astype(np.int64)


def _warmup(rng, i, end, amplitude):
    """A rise of ``amplitude`` that settles by sample ``end``: exponential, linear or overshoot."""
    end = max(end, 2)
    kind = rng.integers(3)
    if kind == 0:
        return amplitude * (1 - np.exp(-5 * i / end))
    if kind == 1:
        return amplitude * np.minimum(1.0, i / end)
    # Overshoot: memory peaks during the first iterations then settles lower.
    return amplitude * ((1 - np.exp(-8 * i / end)) + 0.5 * np.exp(-5 * i / end) * (i > 0))


def _pool(rng, i, n, total):
    """Allocator pool growth: a few doubling stairs at geometric times, the last by 60%."""
    stairs = int(rng.integers(2, 7))
    first = n * rng.uniform(0.005, 0.05)
    last = n * rng.uniform(max(0.06, first / n * 1.5), 0.6)
    times = np.geomspace(first, last, stairs)
    sizes = 2.0 ** np.arange(stairs)
    sizes *= total / sizes.sum()
    out = np.zeros_like(i)
    for at, size in zip(times, sizes):
        out[int(at):] += size
    return out


def _summary(corpus):
    from collections import Counter

    shapes = Counter((label, shape) for _, shape, label, *_ in corpus)
    tiers = Counter(c[5]["tier"] for c in corpus if c[2] == "leak")
    lengths = [c[4].size for c in corpus]
    print(f"{len(corpus)} series, lengths {min(lengths)}-{max(lengths)} "
          f"(median {int(np.median(lengths))})")
    for (label, shape), count in sorted(shapes.items()):
        print(f"  {label:5s} {shape:20s} {count}")
    print("  leak tiers:", dict(tiers))


if __name__ == "__main__":
    _summary(make_corpus())
