"""BERT pre-training (masked LM + next-sentence prediction) as our own Keras 3 layers.

The architecture of Devlin et al. / NVIDIA's reference: post-LayerNorm encoder layers, exact
(erf) GELU, dropout 0.1, LayerNorm epsilon 1e-12, truncated-normal(0.02) initialisation, and the
masked-LM decoder tied to the word embeddings. The masked-LM head only runs at the
``max_predictions`` masked positions (gathered first), as the reference does: projecting every
position onto the vocabulary would triple the head's cost.

Written with TensorFlow ops inside Keras layers (this model only runs on the TensorFlow
backend); under a mixed-precision policy the layers compute in bf16/fp16 while variables,
softmax-free logits and the losses stay in float32.
"""

from __future__ import annotations

from collections.abc import Mapping

import keras
import tensorflow as tf
from keras import layers

from driver.workloads.bert import BertShape

IGNORE_ID = -1  # masked_lm_ids of padded prediction slots
LN_EPSILON = 1e-12
DROPOUT = 0.1


def _init() -> keras.initializers.Initializer:
    return keras.initializers.TruncatedNormal(stddev=0.02)


def _gelu(x: tf.Tensor) -> tf.Tensor:
    return tf.nn.gelu(x, approximate=False)


class SelfAttention(layers.Layer):
    """Multi-head self-attention with one fused QKV projection (one matmul instead of three)."""

    def __init__(self, hidden: int, heads: int, **kwargs) -> None:  # noqa: ANN003
        super().__init__(**kwargs)
        if hidden % heads:
            raise ValueError(f"bert_hidden {hidden} is not a multiple of bert_heads {heads}")
        self.hidden, self.heads, self.head_dim = hidden, heads, hidden // heads
        self.qkv = layers.Dense(3 * hidden, kernel_initializer=_init(), name="qkv")
        self.out = layers.Dense(hidden, kernel_initializer=_init(), name="out")
        self.dropout = layers.Dropout(DROPOUT)

    def call(self, x: tf.Tensor, mask_bias: tf.Tensor, training: bool = False) -> tf.Tensor:
        batch, seq = tf.shape(x)[0], tf.shape(x)[1]
        qkv = tf.reshape(self.qkv(x), [batch, seq, 3, self.heads, self.head_dim])
        q, k, v = tf.unstack(tf.transpose(qkv, [2, 0, 3, 1, 4]), num=3)  # [B, H, S, D] each
        scores = tf.matmul(q, k, transpose_b=True) * tf.cast(self.head_dim**-0.5, q.dtype)
        probs = tf.nn.softmax(scores + tf.cast(mask_bias, scores.dtype), axis=-1)
        context = tf.matmul(self.dropout(probs, training=training), v)
        context = tf.reshape(tf.transpose(context, [0, 2, 1, 3]), [batch, seq, self.hidden])
        return self.out(context)


class EncoderLayer(layers.Layer):
    def __init__(self, hidden: int, heads: int, intermediate: int, **kwargs) -> None:  # noqa: ANN003
        super().__init__(**kwargs)
        self.attention = SelfAttention(hidden, heads, name="attention")
        self.attention_norm = layers.LayerNormalization(epsilon=LN_EPSILON, name="attention_ln")
        self.ffn_in = layers.Dense(intermediate, kernel_initializer=_init(), name="ffn_in")
        self.ffn_out = layers.Dense(hidden, kernel_initializer=_init(), name="ffn_out")
        self.ffn_norm = layers.LayerNormalization(epsilon=LN_EPSILON, name="ffn_ln")
        self.dropout = layers.Dropout(DROPOUT)

    def call(self, x: tf.Tensor, mask_bias: tf.Tensor, training: bool = False) -> tf.Tensor:
        attended = self.attention(x, mask_bias, training=training)
        x = self.attention_norm(x + self.dropout(attended, training=training))
        ffn = self.ffn_out(_gelu(self.ffn_in(x)))
        return self.ffn_norm(x + self.dropout(ffn, training=training))


class BertPretraining(keras.Model):
    """Inputs: the feature dict of the shard format; outputs: (masked-LM logits, NSP logits)."""

    def __init__(self, shape: BertShape, **kwargs) -> None:  # noqa: ANN003
        super().__init__(**kwargs)
        hidden = shape.hidden
        self.word_embeddings = layers.Embedding(
            shape.vocab_size, hidden, embeddings_initializer=_init(), name="word_embeddings"
        )
        # One row per position of the benchmark's sequences (TensorFlow's table: seq_len rows).
        self.position_embeddings = layers.Embedding(
            shape.seq_len, hidden, embeddings_initializer=_init(), name="position_embeddings"
        )
        self.type_embeddings = layers.Embedding(
            shape.type_vocab_size,
            hidden,
            embeddings_initializer=_init(),
            name="token_type_embeddings",
        )
        self.embedding_norm = layers.LayerNormalization(epsilon=LN_EPSILON, name="embedding_ln")
        self.dropout = layers.Dropout(DROPOUT)
        self.encoder = [
            EncoderLayer(hidden, shape.heads, shape.intermediate, name=f"layer_{i}")
            for i in range(shape.layers)
        ]
        self.pooler = layers.Dense(
            hidden, activation="tanh", kernel_initializer=_init(), name="pooler"
        )
        self.mlm_transform = layers.Dense(hidden, kernel_initializer=_init(), name="mlm_dense")
        self.mlm_norm = layers.LayerNormalization(epsilon=LN_EPSILON, name="mlm_ln")
        self.mlm_bias = self.add_weight(
            shape=(shape.vocab_size,), initializer="zeros", name="mlm_bias"
        )
        self.nsp = layers.Dense(2, kernel_initializer=_init(), dtype="float32", name="nsp")

    def call(
        self, features: Mapping[str, tf.Tensor], training: bool = False
    ) -> tuple[tf.Tensor, tf.Tensor]:
        input_ids = features["input_ids"]
        seq = tf.shape(input_ids)[1]
        x = (
            self.word_embeddings(input_ids)
            + self.position_embeddings(tf.range(seq))[tf.newaxis]
            + self.type_embeddings(features["segment_ids"])
        )
        x = self.dropout(self.embedding_norm(x), training=training)
        # Padding gets a large negative bias before the softmax; [B, 1, 1, S] for broadcasting.
        mask = tf.cast(features["input_mask"], tf.float32)[:, tf.newaxis, tf.newaxis, :]
        mask_bias = (1.0 - mask) * -10000.0
        for layer in self.encoder:
            x = layer(x, mask_bias, training=training)
        nsp_logits = self.nsp(self.pooler(x[:, 0]))
        # Masked LM on the masked positions only, decoded with the tied word embeddings.
        masked = tf.gather(x, features["masked_lm_positions"], batch_dims=1)  # [B, P, H]
        masked = self.mlm_norm(_gelu(self.mlm_transform(masked)))
        table = tf.cast(self.word_embeddings.embeddings, masked.dtype)
        # Keras autocasts the bias to the compute dtype; the logits go to the loss in float32.
        mlm_logits = tf.matmul(masked, table, transpose_b=True) + self.mlm_bias
        return tf.cast(mlm_logits, tf.float32), nsp_logits


def pretraining_loss(
    features: Mapping[str, tf.Tensor], outputs: tuple[tf.Tensor, tf.Tensor]
) -> tf.Tensor:
    """Mean masked-LM cross entropy over the real (non-padded) predictions + NSP loss."""
    mlm_logits, nsp_logits = outputs
    ids = tf.cast(features["masked_lm_ids"], tf.int32)
    weights = tf.cast(ids != IGNORE_ID, tf.float32)
    per_token = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.maximum(ids, 0), logits=mlm_logits
    )
    mlm = tf.reduce_sum(per_token * weights) / tf.maximum(tf.reduce_sum(weights), 1.0)
    nsp = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.cast(features["next_sentence_labels"], tf.int32), logits=nsp_logits
    )
    return mlm + tf.reduce_mean(nsp)
