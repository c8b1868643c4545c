"""Training benchmark for TensorFlow 2 (Keras 3): models, cluster spec and the entry script."""
