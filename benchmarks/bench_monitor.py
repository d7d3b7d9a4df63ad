"""Cost of the Monitor: per-probe cost, census cost, overhead on a real loop.

    python benchmarks/bench_monitor.py [--blocks 12] [--block-steps 150]

Prints:
  * cost of one sample of each cheap probe (µs, median);
  * census cost per million gc-tracked objects (ms, median);
  * the monitor's overhead on a small tf.function training loop, measured
    A/B in one run: blocks of steps without the monitor, with the monitor at
    defaults, and with tracemalloc running (the peer), interleaved so that
    machine noise hits all three alike. Medians of per-block step times.
Targets: overhead <= 1% of step time at defaults; census <= 100 ms per
million tracked objects.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
import timeit
import tracemalloc

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def probe_costs() -> dict[str, float]:
    from tb_leak_plugin.capture import probes

    costs = {}
    for factory in (probes.ProcessProbe, probes.PythonHeapProbe, probes.TFAllocatorProbe, probes.GCProbe):
        probe = factory()
        probe.sample()
        runs = [timeit.timeit(probe.sample, number=200) / 200 for _ in range(7)]
        costs[probe.name] = statistics.median(runs) * 1e6
    return costs


def census_cost_per_million(extra_objects: int = 1_000_000) -> tuple[float, int, float]:
    """Median ms of (gc walk + type census) scaled to one million tracked objects."""
    from tb_leak_plugin.capture import probes

    ballast = [[] for _ in range(extra_objects)]  # gc-tracked objects
    probe = probes.ObjectCensusProbe()
    probe.sample(probes.collect_objects())  # baseline census, like a monitor's first
    timings = []
    count = 0
    for _ in range(5):
        started = time.perf_counter()
        census = probes.collect_objects()
        count = len(census.objects)
        probe.sample(census)
        census.release()
        timings.append(time.perf_counter() - started)
    del ballast
    gc.collect()
    median_s = statistics.median(timings)
    return median_s * 1e3 / (count / 1e6), count, median_s * 1e3


def build_loop():
    import tensorflow as tf

    import keras

    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(128, activation="relu"),
                              keras.layers.Dense(10)])
    optimizer = keras.optimizers.SGD(0.01)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    x = tf.random.normal([64, 64])
    y = tf.random.uniform([64], maxval=10, dtype=tf.int32)

    @tf.function
    def train_step():
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    train_step()
    return train_step


def ab_overhead(blocks: int, block_steps: int) -> dict:
    import tb_leak_plugin as tbleak

    train_step = build_loop()
    for _ in range(200):  # warm up caches and the allocator
        train_step()
    logdir = tempfile.mkdtemp(prefix="tbleak-bench-")
    monitor = tbleak.Monitor(logdir)  # defaults: 1% budget, all default probes
    times = {"baseline": [], "monitor": [], "tracemalloc": []}
    step = 0

    def block(mode):
        nonlocal step
        if mode == "tracemalloc":
            tracemalloc.start()
        started = time.perf_counter()
        for _ in range(block_steps):
            train_step()
            if mode == "monitor":
                monitor.sample(step)
            step += 1
        elapsed = time.perf_counter() - started
        if mode == "tracemalloc":
            tracemalloc.stop()
        times[mode].append(elapsed / block_steps)

    # A/B pairs in alternating order (ABBA...), so drift cancels; the peer
    # (tracemalloc) runs in its own blocks afterwards, since stopping it
    # leaves the allocator and caches disturbed for the block that follows.
    for pair in range(blocks):
        for mode in (("baseline", "monitor") if pair % 2 == 0 else ("monitor", "baseline")):
            block(mode)
    for _ in range(max(3, blocks // 3)):
        block("baseline")
        block("tracemalloc")
    monitor.close()
    medians = {mode: statistics.median(values) for mode, values in times.items()}
    # Paired: each monitor block against the baseline block beside it.
    paired = [m / b - 1 for m, b in zip(times["monitor"], times["baseline"][:blocks])]
    paired_tm = [t / b - 1 for t, b in zip(times["tracemalloc"], times["baseline"][blocks:])]
    return {
        "step_ms": {mode: value * 1e3 for mode, value in medians.items()},
        "monitor_overhead": statistics.median(paired),
        "median_ratio_overhead": medians["monitor"] / statistics.median(times["baseline"][:blocks]) - 1,
        "tracemalloc_overhead": statistics.median(paired_tm),
        "self_measured": monitor.stats(),
        "steps": step,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, default=16)
    parser.add_argument("--block-steps", type=int, default=300)
    args = parser.parse_args()

    __import__("tensorflow")  # the TF allocator probe reads it

    print("== cheap probes: cost of one sample (median)")
    for name, micros in probe_costs().items():
        print(f"  {name:<10} {micros:8.1f} µs")

    per_million, count, total_ms = census_cost_per_million()
    verdict = "PASS" if per_million <= 100 else "FAIL"
    print("== object census (gc walk + count by type)")
    print(f"  {count:,} tracked objects: {total_ms:.1f} ms -> {per_million:.1f} ms per million "
          f"(target <= 100) {verdict}")

    result = ab_overhead(args.blocks, args.block_steps)
    steps = result["step_ms"]
    overhead = result["monitor_overhead"]
    print(f"== A/B on a tf.function training loop ({result['steps']} steps, "
          f"{args.blocks} alternating pairs of {args.block_steps}-step blocks, then tracemalloc blocks)")
    print(f"  step time, median: baseline {steps['baseline']:.3f} ms | monitor {steps['monitor']:.3f} ms | "
          f"tracemalloc {steps['tracemalloc']:.3f} ms")
    print(f"  monitor overhead: median of paired blocks {overhead:+.2%}, ratio of medians "
          f"{result['median_ratio_overhead']:+.2%} (target <= 1%) {'PASS' if overhead <= 0.01 else 'FAIL'}")
    print(f"  monitor's own accounting: {result['self_measured']['overhead']:.2%} of training time; "
          + ", ".join(f"{k}: {v['runs']} runs" for k, v in result["self_measured"]["units"].items()))
    print(f"  tracemalloc slowdown on the same loop: {result['tracemalloc_overhead']:+.1%}")
    own = result["self_measured"]["overhead"]
    if own > 0:
        print(f"  tracemalloc / monitor (own accounting): {result['tracemalloc_overhead'] / own:.0f}x")
    # How often the census runs at the default 1% budget on this heap.
    census_share = 0.45 * 0.01
    print(f"  at defaults the census ({total_ms / 1e3 * count / count:.3f} s on {count:,} objects) runs every "
          f"~{total_ms / 1e3 / census_share:.0f} s of training on a heap that size")
    return 0


if __name__ == "__main__":
    sys.exit(main())
