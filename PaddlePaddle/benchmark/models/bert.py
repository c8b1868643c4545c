"""BERT pre-training (masked LM + next-sentence prediction) with paddle.nn, our own layers.

The architecture of Devlin et al. / NVIDIA's reference: post-LayerNorm encoder layers, exact
(erf) GELU, dropout 0.1, LayerNorm epsilon 1e-12, truncated-normal(0.02) initialisation, and the
masked-LM decoder tied to the word embeddings. The masked-LM head only runs at the
``max_predictions`` masked positions (gathered first), as the reference does.
"""

from __future__ import annotations

import paddle
import paddle.nn.functional as F
from paddle import nn

from driver.workloads.bert import BertShape

IGNORE_ID = -1  # masked_lm_ids of padded prediction slots
LN_EPSILON = 1e-12
DROPOUT = 0.1


def _attr() -> paddle.ParamAttr:
    return paddle.ParamAttr(initializer=nn.initializer.TruncatedNormal(std=0.02))


def _linear(cin: int, cout: int) -> nn.Linear:
    return nn.Linear(cin, cout, weight_attr=_attr())


class SelfAttention(nn.Layer):
    """Multi-head self-attention with one fused QKV projection (one matmul instead of three)."""

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        if hidden % heads:
            raise ValueError(f"bert_hidden {hidden} is not a multiple of bert_heads {heads}")
        self.hidden, self.heads, self.head_dim = hidden, heads, hidden // heads
        self.qkv = _linear(hidden, 3 * hidden)
        self.out = _linear(hidden, hidden)
        self.dropout = nn.Dropout(DROPOUT)

    def forward(self, x: paddle.Tensor, mask_bias: paddle.Tensor) -> paddle.Tensor:
        batch, seq = x.shape[0], x.shape[1]
        qkv = self.qkv(x).reshape([batch, seq, 3, self.heads, self.head_dim])
        q, k, v = paddle.unbind(qkv.transpose([2, 0, 3, 1, 4]), axis=0)  # [B, H, S, D] each
        scores = paddle.matmul(q, k, transpose_y=True) * (self.head_dim**-0.5)
        probs = F.softmax(scores + mask_bias.astype(scores.dtype), axis=-1)
        context = paddle.matmul(self.dropout(probs), v)
        return self.out(context.transpose([0, 2, 1, 3]).reshape([batch, seq, self.hidden]))


class EncoderLayer(nn.Layer):
    def __init__(self, hidden: int, heads: int, intermediate: int) -> None:
        super().__init__()
        self.attention = SelfAttention(hidden, heads)
        self.attention_norm = nn.LayerNorm(hidden, epsilon=LN_EPSILON)
        self.ffn_in = _linear(hidden, intermediate)
        self.ffn_out = _linear(intermediate, hidden)
        self.ffn_norm = nn.LayerNorm(hidden, epsilon=LN_EPSILON)
        self.dropout = nn.Dropout(DROPOUT)

    def forward(self, x: paddle.Tensor, mask_bias: paddle.Tensor) -> paddle.Tensor:
        x = self.attention_norm(x + self.dropout(self.attention(x, mask_bias)))
        ffn = self.ffn_out(F.gelu(self.ffn_in(x), approximate=False))
        return self.ffn_norm(x + self.dropout(ffn))


class BertPretraining(nn.Layer):
    """Inputs: the feature dict of the shard format; outputs: (masked-LM logits, NSP logits)."""

    def __init__(self, shape: BertShape) -> None:
        super().__init__()
        hidden = shape.hidden
        self.word_embeddings = nn.Embedding(shape.vocab_size, hidden, weight_attr=_attr())
        # One row per position of the benchmark's sequences (Paddle's table: seq_len rows).
        self.position_embeddings = nn.Embedding(shape.seq_len, hidden, weight_attr=_attr())
        self.type_embeddings = nn.Embedding(shape.type_vocab_size, hidden, weight_attr=_attr())
        self.embedding_norm = nn.LayerNorm(hidden, epsilon=LN_EPSILON)
        self.dropout = nn.Dropout(DROPOUT)
        self.encoder = nn.LayerList(
            [EncoderLayer(hidden, shape.heads, shape.intermediate) for _ in range(shape.layers)]
        )
        self.pooler = _linear(hidden, hidden)
        self.mlm_transform = _linear(hidden, hidden)
        self.mlm_norm = nn.LayerNorm(hidden, epsilon=LN_EPSILON)
        self.mlm_bias = self.create_parameter(
            [shape.vocab_size], is_bias=True, default_initializer=nn.initializer.Constant(0.0)
        )
        self.nsp = _linear(hidden, 2)

    def forward(self, features: dict[str, paddle.Tensor]) -> tuple[paddle.Tensor, paddle.Tensor]:
        input_ids = features["input_ids"]
        batch, seq = input_ids.shape[0], input_ids.shape[1]
        positions = paddle.arange(seq, dtype="int64").unsqueeze(0)
        x = (
            self.word_embeddings(input_ids)
            + self.position_embeddings(positions)
            + self.type_embeddings(features["segment_ids"])
        )
        x = self.dropout(self.embedding_norm(x))
        # Padding gets a large negative bias before the softmax; [B, 1, 1, S] for broadcasting.
        mask = features["input_mask"].astype("float32").unsqueeze([1, 2])
        mask_bias = (1.0 - mask) * -10000.0
        for layer in self.encoder:
            x = layer(x, mask_bias)
        nsp_logits = self.nsp(F.tanh(self.pooler(x[:, 0])))
        # Masked LM on the masked positions only, decoded with the tied word embeddings.
        hidden = x.shape[-1]
        offsets = (paddle.arange(batch, dtype="int64") * seq).unsqueeze(1)
        flat_positions = (features["masked_lm_positions"].astype("int64") + offsets).flatten()
        masked = paddle.gather(x.reshape([-1, hidden]), flat_positions)  # [B * P, H]
        masked = self.mlm_norm(F.gelu(self.mlm_transform(masked), approximate=False))
        mlm_logits = paddle.matmul(masked, self.word_embeddings.weight, transpose_y=True)
        return mlm_logits + self.mlm_bias, nsp_logits


def pretraining_loss(
    features: dict[str, paddle.Tensor], outputs: tuple[paddle.Tensor, paddle.Tensor]
) -> paddle.Tensor:
    """Mean masked-LM cross entropy over the real (non-padded) predictions + NSP loss (fp32)."""
    mlm_logits, nsp_logits = outputs
    mlm = F.cross_entropy(
        mlm_logits.astype("float32"),
        features["masked_lm_ids"].flatten().astype("int64"),
        ignore_index=IGNORE_ID,
    )
    nsp = F.cross_entropy(
        nsp_logits.astype("float32"), features["next_sentence_labels"].astype("int64")
    )
    return mlm + nsp
