"""OneFlow 0.9.0 training benchmark: ResNet-50 v1.5 and BERT-base pre-training."""
