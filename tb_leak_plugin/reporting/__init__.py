"""Logdir to reports: read runs and traces (``logdir``, ``traces``) and show
them to people and CI (``cli``)."""
