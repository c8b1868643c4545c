"""PaddlePaddle benchmark scripts of the dlperf kit (a package so tests can import the models)."""
