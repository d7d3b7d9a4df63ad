"""Shared test set-up: quiet TensorFlow logs, a data-provider reader."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# TensorFlow turns oneDNN on by default only on CPUs with AVX-512 and the
# like; elsewhere its CPU allocator keeps no statistics and the profiler
# records no memory events. The tests fix it on, so that they check the same
# probes on every CI machine (subprocesses inherit it); tests of the other
# setting pass TF_ENABLE_ONEDNN_OPTS=0 to their own subprocess.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")

import pytest


def read_through_data_provider(logdir):
    """Every leak series of ``logdir`` as TensorBoard's data provider serves it.

    Returns {run: {tag: (plugin_content, [(step, value), ...])}}.
    """
    from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
    from tensorboard import context

    multiplexer = plugin_event_multiplexer.EventMultiplexer(tensor_size_guidance={"leak": 0})
    multiplexer.AddRunsFromDirectory(logdir)
    multiplexer.Reload()
    provider = data_provider.MultiplexerDataProvider(multiplexer, logdir)
    ctx = context.RequestContext()
    listing = provider.list_scalars(ctx, experiment_id="", plugin_name="leak")
    out = {}
    for run, tags in listing.items():
        data = provider.read_scalars(ctx, experiment_id="", plugin_name="leak",
                                     downsample=10**9, run_tag_filter=_filter(run, list(tags)))
        out[run] = {tag: (tags[tag].plugin_content, [(d.step, d.value) for d in data[run][tag]])
                    for tag in tags}
    return out


def _filter(run, tags):
    from tensorboard.data import provider

    return provider.RunTagFilter(runs=[run], tags=tags)


@pytest.fixture
def data_provider_reader():
    return read_through_data_provider
