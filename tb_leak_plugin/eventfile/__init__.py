"""Event files on disk: TFRecord framing, tb-leak's writer and readers.

``records`` holds the byte-level pieces every other module here shares (the
TFRecord frame with its masked CRC-32C, protobuf varints, and the fixed layout
of a tb-leak sample value); ``writer`` appends records without TensorFlow;
``reader`` reads a logdir's runs back; ``fast_decode`` decodes tb-leak's own
records in bulk.
"""
