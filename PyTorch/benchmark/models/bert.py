"""BERT pre-training (Devlin et al., 2018) on torch: encoder, masked-LM and next-sentence heads.

Written for throughput measurement the way NVIDIA's reference does it: Q, K and V come from one
fused projection, attention runs through ``torch.nn.functional.scaled_dot_product_attention``
(flash / memory-efficient kernels where the device has them), and the MLM head only transforms
the ``max_predictions`` masked positions gathered from the sequence instead of all of them. The
decoder shares its weight with the word embeddings (weight tying), so the parameter count of
the base configuration matches the reference's 110,106,428.

The definition is ``PyTorch.benchmark.torchlike.bert_classes``, shared with OneFlow.
"""

from __future__ import annotations

import torch

from PyTorch.benchmark.torchlike import IGNORE_INDEX, bert_classes

__all__ = ["IGNORE_INDEX", "BertForPreTraining", "pretraining_loss"]

BertForPreTraining, pretraining_loss = bert_classes(torch)
