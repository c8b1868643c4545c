"""MXNet 1.9.1 (Gluon) training benchmark: ResNet-50 v1.5 and BERT-base pre-training."""
