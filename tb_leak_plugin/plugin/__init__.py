"""The Leak tab: TensorBoard plugin routes (``leak_plugin``), the per-run report
cache (``cache``), and the pure JSON views the charts read (``views``,
``downsample``)."""
