"""The profiler's XSpace format, read without TensorFlow.

``schema`` builds the message classes and defines the columnar form;
``wire`` reads protobuf wire format in place with numpy, ``stats`` decodes
XStats in bulk; ``lines`` finds the planes, lines and events, ``selection``
chooses the events to decode and ``decode`` turns a trace file's bytes into
the columnar form the trace analysis reads; ``budget`` bounds the memory all
of it (and the analysis) may take.
"""
