"""The profiler's XSpace format, read without TensorFlow.

``schema`` builds the message classes and defines the columnar form;
``wire`` reads protobuf wire format in place with numpy; ``decode`` turns a
trace file's bytes into the columnar form the trace analysis reads.
"""
