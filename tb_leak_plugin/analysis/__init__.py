"""Pure analysis: arrays in, results out. No I/O, no TensorFlow, no globals."""
