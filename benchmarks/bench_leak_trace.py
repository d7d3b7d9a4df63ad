"""Leak-trace cost: tb-leak's trace vs objgraph.find_backref_chain, side by side.

For heaps of about 0.3, 1 and 3 million gc-tracked objects, a program keeps
leaked instances in a list held by an attribute of an object held by a module
global (``Trainer.history``), like a callback that keeps every step's output.
Both tools are asked for the chains of the same 32 instances in the same run:
tb-leak in one trace (``tb_leak_plugin.capture.referrers.trace``), objgraph
with one ``find_backref_chain`` per instance (its breadth-first search stops
at the first module, as tb-leak stops at a module global). Prints the median
of ``--repeat`` runs of each, the ratio, and whether both found the holder.

    python benchmarks/bench_leak_trace.py [--sizes 0.3,1,3] [--repeat 3]

Target (issue 12): at most 200 ms on 1 M objects, and faster than objgraph.
objgraph is a bench-only dependency (``pip install objgraph``).
"""

from __future__ import annotations

import argparse
import gc
import inspect
import statistics
import sys
import time

from tb_leak_plugin.capture import referrers


class Leaked:
    pass


class Trainer:
    def __init__(self):
        self.history = []


TRAINER = Trainer()
JUNK: list = []


def grow_heap(million: float) -> None:
    """About ``million`` million tracked objects: dicts holding a list each."""
    target = int(million * 1e6)
    JUNK.clear()
    gc.collect()
    base = len(gc.get_objects())
    need = max(0, target - base)
    JUNK.extend({"i": [i]} for i in range(need // 2))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="0.3,1,3", help="heap sizes in millions of tracked objects")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--instances", type=int, default=32)
    args = parser.parse_args(argv)
    try:
        import objgraph
    except ImportError:
        objgraph = None
        print("objgraph is not installed (pip install objgraph): tb-leak figures only")
    for leaked in range(400):
        TRAINER.history.append(Leaked())
    print(f"{'heap objects':>13} {'tb-leak ms':>11} {'objgraph ms':>12} {'ratio':>7}  paths")
    failures = 0
    for size in (float(s) for s in args.sizes.split(",")):
        grow_heap(size)
        objects = len(gc.get_objects())
        sample = TRAINER.history[-args.instances:]
        ours, theirs, path, their_ok = [], [], None, None
        for _ in range(args.repeat):
            started = time.perf_counter()
            result = referrers.trace(sample, time_cap_s=5.0)
            ours.append(time.perf_counter() - started)
            path = result.held_by[0].path if result.held_by else None
            if objgraph is not None:
                started = time.perf_counter()
                chains = [objgraph.find_backref_chain(obj, inspect.ismodule, max_depth=20,
                                                      extra_ignore=(id(sample),)) for obj in sample]
                theirs.append(time.perf_counter() - started)
                their_ok = all(len(chain) > 1 for chain in chains)
                chains = None
        ours_ms = statistics.median(ours) * 1e3
        theirs_ms = statistics.median(theirs) * 1e3 if theirs else float("nan")
        ratio = theirs_ms / ours_ms if theirs else float("nan")
        print(f"{objects:>13,} {ours_ms:>11.1f} {theirs_ms:>12.1f} {ratio:>6.1f}x  "
              f"tb-leak: {' → '.join(path) if path else 'not found'}; objgraph found all: {their_ok}")
        if 0.8 <= size <= 1.2 and ours_ms > 200:
            failures += 1
            print("  FAIL: over 200 ms on ~1 M objects")
        if theirs and ratio < 1:
            failures += 1
            print("  FAIL: slower than objgraph")
    JUNK.clear()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
