"""Training benchmark for PyTorch: models, data pipelines, FLOP counting and the entry script."""
