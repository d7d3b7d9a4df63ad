"""In-memory shapes of what tb-leak reads back: series and runs.

These are plain containers shared by the loaders (event files on disk, or
TensorBoard's data provider inside the plugin) and the pure analysis code.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tb_leak_plugin.metadata import SeriesInfo


@dataclasses.dataclass
class Series:
    """One tb-leak series: values of one measure over training steps.

    Attributes:
      tag: the summary tag, e.g. ``leak/process/rss_bytes``.
      info: group, measure, unit and subject from the plugin data.
      steps: int64 training steps, ascending.
      wall_times: float64 seconds since the epoch, one per step.
      values: float64 values in ``info.unit``.
    """

    tag: str
    info: SeriesInfo
    steps: np.ndarray
    wall_times: np.ndarray
    values: np.ndarray

    def __len__(self) -> int:
        return int(self.values.shape[0])

    @classmethod
    def from_points(cls, tag, info, steps, wall_times, values) -> "Series":
        """Build a series from unordered points: sorted by step, the last
        point written for a repeated step wins (a restarted job rewrites steps)."""
        steps = np.asarray(steps, dtype=np.int64)
        wall_times = np.asarray(wall_times, dtype=np.float64)
        values = np.asarray(values, dtype=np.float64)
        if steps.size and np.any(np.diff(steps) <= 0):
            # Stable sort keeps write order among equal steps; keep the last one.
            order = np.argsort(steps, kind="stable")
            steps, wall_times, values = steps[order], wall_times[order], values[order]
            last = np.ones(steps.size, dtype=bool)
            last[:-1] = steps[1:] != steps[:-1]
            steps, wall_times, values = steps[last], wall_times[last], values[last]
        return cls(tag=tag, info=info, steps=steps, wall_times=wall_times, values=values)


@dataclasses.dataclass
class RunData:
    """All tb-leak series of one run, plus what went wrong reading it.

    Attributes:
      name: run name relative to the logdir (``.`` for the logdir itself).
      path: the run's directory, or None when read through a data provider.
      series: tag -> Series.
      warnings: human-readable problems met while reading (corrupt records,
        unreadable plugin data); the series read before them are kept.
      task: the task of a distributed job that wrote the run (see
        ``analysis.jobs.take_task``), or None.
    """

    name: str
    path: str | None
    series: dict[str, Series] = dataclasses.field(default_factory=dict)
    warnings: list[str] = dataclasses.field(default_factory=list)
    task: dict | None = None
