"""Training benchmark for PaddlePaddle: models and the entry script."""
