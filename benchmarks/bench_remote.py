"""Remote logdirs on a local S3 server: what a flush costs, and the CLI over 1,000 runs.

    python benchmarks/bench_remote.py [--runs 1000] [--jobs 1,4,16] [--repeat 3]

Starts moto's S3 server (``moto[server]``) on 127.0.0.1 in its own process
(``tests/s3_server.py``), then:

1. **Flush cost.** A ``SegmentedEventWriter`` (what ``Monitor("s3://...")``
   writes with) gets one sample of 60 series per flush; each flush is a put
   of the current segment. Prints the median put time while the segment is
   small, near full (256 KiB), and how many objects a run's bytes become;
   and, for comparison, what a put of the whole file would cost once the run
   has written 4 MiB (the rewrite-everything way of "appending" to an object
   store, which grows without bound).
2. **1,000 runs.** Writes RUNS small runs (10 series x 200 points each, as
   tb-leak's writer writes them; every fourth one leaks) under
   ``s3://bench/runs``, then times the real CLI, ``python -m tb_leak_plugin
   analyze s3://bench/runs --format json --jobs N``, REPEAT times per N
   (interleaved), checks every run's verdict, and prints medians and runs/s.

The server is in-process Python (moto): a real S3 endpoint has more latency
per request and far more throughput; the figures say what tb-leak itself
costs per run and how it scales with --jobs, not what S3 would do.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests"))

import numpy as np  # noqa: E402

from s3_server import S3Server  # noqa: E402

BUCKET = "bench"


def _series(count: int):
    from tb_leak_plugin.metadata import SeriesInfo

    infos = [SeriesInfo("process", "rss_bytes", "bytes"), SeriesInfo("process", "malloc_bytes", "bytes"),
             SeriesInfo("python", "allocated_blocks", "blocks")]
    infos += [SeriesInfo("objects", "live_count", "count", f"pkg.Type{k}") for k in range(count)]
    return infos[:count]


def bench_flush(s3) -> dict:
    from tb_leak_plugin.eventfile import writer as writer_lib
    from tb_leak_plugin.summary import EventWriter

    writer = EventWriter(f"s3://{BUCKET}/flush/run", flush_secs=1e9)
    record_writer = writer.record_writer
    infos = _series(60)
    rng = np.random.default_rng(0)
    small, full, sizes = [], [], []
    step = 0
    while record_writer.segments < 4:
        writer.write(step, list(zip(infos, (1e8 + rng.normal(0, 1e5, len(infos))).tolist())))
        before = record_writer.upload_seconds
        writer.flush()
        spent = record_writer.upload_seconds - before
        size = len(record_writer._segment_data)
        sizes.append(size)
        (small if size < 16 << 10 else full if size > writer_lib.SEGMENT_BYTES * 3 // 4 else []).append(spent)
        step += 1
    writer.close()
    per_sample = record_writer.uploaded_bytes / max(1, record_writer.uploads)
    # The alternative: rewrite the whole event file (4 MiB by now) at every flush.
    fs = record_writer._fs
    blob = os.urandom(4 << 20)
    whole = []
    for _ in range(5):
        started = time.perf_counter()
        fs.write(f"s3://{BUCKET}/flush/whole", blob, binary_mode=True)
        whole.append(time.perf_counter() - started)
    return {
        "samples": step, "segments": record_writer.segments,
        "put_small_ms": 1e3 * statistics.median(small) if small else None,
        "put_full_ms": 1e3 * statistics.median(full) if full else None,
        "put_whole_4mib_ms": 1e3 * statistics.median(whole),
        "mean_put_bytes": per_sample,
    }


def make_runs(s3, runs: int, points: int = 200, series: int = 10) -> None:
    """RUNS runs of SERIES x POINTS under s3://bench/runs (every fourth leaks)."""
    from tb_leak_plugin.summary import EventWriter

    infos = _series(series)
    bodies = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind in range(4):
            rng = np.random.default_rng(kind)
            values = 1e8 + rng.normal(0, 2e4, size=(points, series))
            if kind == 0:
                values[:, 1] += np.arange(points) * 256e3  # the C allocator grows 256 KiB a step
            writer = EventWriter(os.path.join(tmp, str(kind)), flush_secs=1e9)
            for step in range(points):
                writer.write(step, list(zip(infos, values[step].tolist())), wall_time=1.7e9 + step)
            writer.close()
            (name,) = os.listdir(os.path.join(tmp, str(kind)))
            with open(os.path.join(tmp, str(kind), name), "rb") as handle:
                bodies.append((name, handle.read()))
    client = s3.client()

    def put(index):
        name, body = bodies[index % 4]
        client.put_object(Bucket=BUCKET, Key=f"runs/job{index // 100:02d}/run{index:04d}/{name}", Body=body)

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(put, range(runs)))


def time_cli(s3, jobs: int, runs: int) -> float:
    env = s3.env()
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "tb_leak_plugin", "analyze", f"s3://{BUCKET}/runs",
                           "--format", "json", "--jobs", str(jobs)], capture_output=True, text=True, env=env)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    report = json.loads(done.stdout)
    verdicts = {run["run"]: run["verdict"] for run in report["runs"]}
    assert len(verdicts) == runs, len(verdicts)
    wrong = [name for name, verdict in verdicts.items()
             if (verdict == "leak") != (int(name[-4:]) % 4 == 0)]
    assert not wrong, wrong[:5]
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--jobs", default="1,4,16")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    jobs = [int(j) for j in args.jobs.split(",")]
    with S3Server() as s3:
        for key, value in s3.env(base={}, s3_endpoint=False).items():
            os.environ[key] = value
        s3.client().create_bucket(Bucket=BUCKET)
        flush = bench_flush(s3)
        print(f"flush: {flush['samples']} samples of 60 series -> {flush['segments']} segment objects; "
              f"put of a small segment {flush['put_small_ms']:.1f} ms, of a near-full one "
              f"{flush['put_full_ms']:.1f} ms (mean put {flush['mean_put_bytes'] / 1024:.0f} KiB); "
              f"rewriting a 4 MiB file whole instead: {flush['put_whole_4mib_ms']:.1f} ms a flush", flush=True)
        started = time.perf_counter()
        make_runs(s3, args.runs)
        print(f"wrote {args.runs} runs in {time.perf_counter() - started:.1f} s", flush=True)
        times = {n: [] for n in jobs}
        for _ in range(args.repeat):
            for n in jobs:
                times[n].append(time_cli(s3, n, args.runs))
                print(f"  (--jobs {n}: {times[n][-1]:.1f} s)", flush=True)
        print(f"tb-leak analyze s3://{BUCKET}/runs ({args.runs} runs, 10 series x 200 points each; "
              f"{os.cpu_count()} cores), medians of {args.repeat}:")
        for n in jobs:
            median = statistics.median(times[n])
            print(f"  --jobs {n:>2}: {median:6.1f} s  {args.runs / median:6.1f} runs/s  "
                  f"(all: {', '.join(f'{t:.1f}' for t in times[n])})")


if __name__ == "__main__":
    main()
