"""TensorFlow 2 benchmark scripts of the dlperf kit (a package so tests can import the models)."""
