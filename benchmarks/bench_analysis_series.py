"""How long does one verdict take?

Times `assess_series` on a 1,000,000-point series (target: at most 100 ms) and
on a 10,000-point series, both leaking slowly under AR(1) noise with a few
NaNs, and, for comparison in the same run, one pass of numpy's own median over
the same million points (a floor: any robust method reads every sample).

    python benchmarks/bench_analysis_series.py [--repeats 15]

Prints the median and p95 in milliseconds and PASS/FAIL against the target.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from corpus import ar1_noise  # noqa: E402

from tb_leak_plugin.analysis.trend import assess_series  # noqa: E402

TARGET_MS_1M = 100.0


def make_series(n, seed=0):
    """A slow leak (3 noise sd over the run) in AR(1) noise, 0.1% NaN, wall times."""
    rng = np.random.default_rng(seed)
    steps = np.arange(n, dtype=np.int64) * 10
    values = 2e9 + ar1_noise(rng, n, 0.9, 1e6) + np.linspace(0.0, 3e6, n)
    values[rng.random(n) < 0.001] = np.nan
    walls = 1.7e9 + steps * 0.05
    return steps, values, walls


def time_ms(fn, repeats):
    fn()  # warm caches and lazy imports
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return float(np.median(samples)), float(np.percentile(samples, 95))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args(argv)

    steps, values, walls = make_series(1_000_000)
    result = assess_series(steps, values, walls, available_bytes=8e9)
    med_1m, p95_1m = time_ms(lambda: assess_series(steps, values, walls), args.repeats)
    med_np, _ = time_ms(lambda: np.nanmedian(values), args.repeats)
    s10, v10, w10 = make_series(10_000, seed=1)
    med_10k, p95_10k = time_ms(lambda: assess_series(s10, v10, w10), args.repeats)

    print(f"assess_series timing, {args.repeats} runs each")
    print(f"  1,000,000 points: median {med_1m:6.1f} ms   p95 {p95_1m:6.1f} ms   "
          f"(verdict {result.verdict}, {result.reason})")
    print(f"     10,000 points: median {med_10k:6.1f} ms   p95 {p95_10k:6.1f} ms")
    print(f"  numpy nanmedian over the same 1,000,000 points: {med_np:.1f} ms "
          f"(assess_series costs {med_1m / med_np:.1f}x one median)")
    verdict = "PASS" if med_1m <= TARGET_MS_1M else "FAIL"
    print(f"  target: 1,000,000 points in <= {TARGET_MS_1M:.0f} ms (median): {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
