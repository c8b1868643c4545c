"""BERT pre-training (Devlin et al., 2018): encoder, masked-LM head and next-sentence head.

Written for throughput measurement the way NVIDIA's reference does it: Q, K and V come from one
fused projection, attention runs through ``torch.nn.functional.scaled_dot_product_attention``
(flash / memory-efficient kernels where the device has them), and the MLM head only transforms
the ``max_predictions`` masked positions gathered from the sequence instead of all of them. The
decoder shares its weight with the word embeddings (weight tying), so the parameter count of
the base configuration matches the reference's 110,106,428.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from driver.bench.shapes import BertShape

IGNORE_INDEX = -1  # label of a padded masked-LM slot (no prediction there)


class BertEmbeddings(nn.Module):
    def __init__(self, config: BertShape) -> None:
        super().__init__()
        self.word = nn.Embedding(config.vocab_size, config.hidden)
        self.position = nn.Embedding(config.max_position, config.hidden)
        self.token_type = nn.Embedding(config.type_vocab_size, config.hidden)
        self.norm = nn.LayerNorm(config.hidden, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, input_ids: torch.Tensor, segment_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.word(input_ids) + self.position(positions) + self.token_type(segment_ids)
        return self.dropout(self.norm(x))


class BertLayer(nn.Module):
    """Post-LayerNorm transformer block, as in the original BERT."""

    def __init__(self, config: BertShape) -> None:
        super().__init__()
        self.heads = config.heads
        self.dropout_p = config.dropout
        self.qkv = nn.Linear(config.hidden, 3 * config.hidden)
        self.attn_out = nn.Linear(config.hidden, config.hidden)
        self.attn_norm = nn.LayerNorm(config.hidden, eps=config.layer_norm_eps)
        self.intermediate = nn.Linear(config.hidden, config.intermediate)
        self.output = nn.Linear(config.intermediate, config.hidden)
        self.out_norm = nn.LayerNorm(config.hidden, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor) -> torch.Tensor:
        batch, seq, hidden = x.shape
        # [B, S, 3H] -> 3 x [B, heads, S, head_dim]
        qkv = self.qkv(x).view(batch, seq, 3, self.heads, hidden // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        context = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, dropout_p=self.dropout_p if self.training else 0.0
        )
        context = context.transpose(1, 2).reshape(batch, seq, hidden)
        x = self.attn_norm(x + self.dropout(self.attn_out(context)))
        y = self.output(F.gelu(self.intermediate(x)))
        return self.out_norm(x + self.dropout(y))


class BertForPreTraining(nn.Module):
    """``forward`` returns ``(mlm_logits [B, P, V], nsp_logits [B, 2])``."""

    def __init__(self, config: BertShape) -> None:
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.layers = nn.ModuleList(BertLayer(config) for _ in range(config.layers))
        self.pooler = nn.Linear(config.hidden, config.hidden)
        self.nsp = nn.Linear(config.hidden, 2)
        self.mlm_transform = nn.Linear(config.hidden, config.hidden)
        self.mlm_norm = nn.LayerNorm(config.hidden, eps=config.layer_norm_eps)
        # The decoder weight is the word embedding matrix (tied); only its bias is its own.
        self.mlm_bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.apply(self._init_weights)

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=self.config.init_std)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def forward(
        self,
        input_ids: torch.Tensor,
        segment_ids: torch.Tensor,
        input_mask: torch.Tensor,
        masked_lm_positions: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # Boolean mask, True where a key may be attended to; broadcast over heads and queries.
        attn_mask = input_mask.bool()[:, None, None, :]
        x = self.embeddings(input_ids, segment_ids)
        for layer in self.layers:
            x = layer(x, attn_mask)
        nsp_logits = self.nsp(torch.tanh(self.pooler(x[:, 0])))
        # Gather the masked positions first: the vocabulary projection is the head's big matmul.
        index = masked_lm_positions.long().unsqueeze(-1).expand(-1, -1, x.shape[-1])
        masked = torch.gather(x, 1, index)
        masked = self.mlm_norm(F.gelu(self.mlm_transform(masked)))
        mlm_logits = F.linear(masked, self.embeddings.word.weight, self.mlm_bias)
        return mlm_logits, nsp_logits


def pretraining_loss(
    mlm_logits: torch.Tensor,
    nsp_logits: torch.Tensor,
    masked_lm_ids: torch.Tensor,
    next_sentence_labels: torch.Tensor,
) -> torch.Tensor:
    """Masked-LM cross entropy over the real (non-padded) predictions plus the NSP loss."""
    mlm = F.cross_entropy(
        mlm_logits.reshape(-1, mlm_logits.shape[-1]).float(),
        masked_lm_ids.reshape(-1).long(),
        ignore_index=IGNORE_INDEX,
    )
    nsp = F.cross_entropy(nsp_logits.float(), next_sentence_labels.reshape(-1).long())
    return mlm + nsp
