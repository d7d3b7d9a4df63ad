"""Capture, inside the training process: what one sample measures (``probes``),
when samples are taken (``monitor``), and the profiler window (``profiling``).

Nothing here imports TensorFlow; TensorFlow probes work when the program has
imported it.
"""
