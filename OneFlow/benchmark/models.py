"""OneFlow models of the benchmark: ResNet-50 v1.5 and BERT pre-training, written out.

``oneflow.nn`` mirrors ``torch.nn``, so these follow the kit's PyTorch definitions layer for layer
(same shapes, initialisation and parameter counts: 25,557,032 and 110,106,428 at full size).
Where oneflow 0.9.0 lacks a PyTorch function (``scaled_dot_product_attention``), the
computation is spelled out. Each model's ``forward`` returns the training loss and the logits,
so the same module serves eager mode and ``nn.Graph``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import oneflow as flow
import oneflow.nn.functional as F
from oneflow import nn

IMAGE_MODELS = ("resnet50",)

# --------------------------------------------------------------------------------------------
# ResNet-50 v1.5


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(
        self, in_channels: int, width: int, stride: int, downsample: nn.Module | None
    ) -> None:
        super().__init__()
        out_channels = width * self.expansion
        self.conv1 = nn.Conv2d(in_channels, width, kernel_size=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        # v1.5: the stride sits here, on the 3x3, not on conv1 (as in v1).
        self.conv2 = nn.Conv2d(width, width, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out_channels, kernel_size=1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU()
        self.downsample = downsample

    def forward(self, x: flow.Tensor) -> flow.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet50V15(nn.Module):
    def __init__(
        self,
        num_classes: int = 1000,
        layers: tuple[int, ...] = (3, 4, 6, 3),
        zero_init_residual: bool = False,
    ) -> None:
        super().__init__()
        self.in_channels = 64
        self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(64, layers[0], stride=1)
        self.layer2 = self._make_layer(128, layers[1], stride=2)
        self.layer3 = self._make_layer(256, layers[2], stride=2)
        self.layer4 = self._make_layer(512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * Bottleneck.expansion, num_classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
        if zero_init_residual:  # each residual branch starts as identity (Goyal et al.)
            for module in self.modules():
                if isinstance(module, Bottleneck):
                    nn.init.zeros_(module.bn3.weight)

    def _make_layer(self, width: int, blocks: int, stride: int) -> nn.Sequential:
        out_channels = width * Bottleneck.expansion
        downsample = None
        if stride != 1 or self.in_channels != out_channels:
            downsample = nn.Sequential(
                nn.Conv2d(self.in_channels, out_channels, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(out_channels),
            )
        layers = [Bottleneck(self.in_channels, width, stride, downsample)]
        self.in_channels = out_channels
        layers += [Bottleneck(out_channels, width, 1, None) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: flow.Tensor) -> flow.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(flow.flatten(self.avgpool(x), 1))


class ImageClassifierLoss(nn.Module):
    """Model + cross entropy: ``forward(images, labels) -> (loss, logits)``."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, images: flow.Tensor, labels: flow.Tensor) -> tuple[flow.Tensor, flow.Tensor]:
        logits = self.model(images)
        return F.cross_entropy(logits.float(), labels), logits


# --------------------------------------------------------------------------------------------
# BERT pre-training


@dataclass(frozen=True)
class BertConfig:
    vocab_size: int = 30522
    hidden: int = 768
    layers: int = 12
    heads: int = 12
    intermediate: int = 3072
    max_position: int = 512
    type_vocab_size: int = 2
    dropout: float = 0.1
    layer_norm_eps: float = 1e-12
    init_std: float = 0.02

    def __post_init__(self) -> None:
        if self.hidden % self.heads:
            raise ValueError(f"bert_hidden {self.hidden} is not a multiple of heads {self.heads}")


class BertEmbeddings(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.word = nn.Embedding(config.vocab_size, config.hidden)
        self.position = nn.Embedding(config.max_position, config.hidden)
        self.token_type = nn.Embedding(config.type_vocab_size, config.hidden)
        self.norm = nn.LayerNorm(config.hidden, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, input_ids: flow.Tensor, segment_ids: flow.Tensor) -> flow.Tensor:
        # The position row block is sliced from the table (no arange: a global tensor would
        # need a placement of its own in nn.Graph).
        positions = self.position.weight[: input_ids.shape[1]].unsqueeze(0)
        x = self.word(input_ids) + positions + self.token_type(segment_ids)
        return self.dropout(self.norm(x))


class BertLayer(nn.Module):
    """Post-LayerNorm transformer block, as in the original BERT."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.heads = config.heads
        self.scale = 1.0 / math.sqrt(config.hidden // config.heads)
        self.qkv = nn.Linear(config.hidden, 3 * config.hidden)
        self.attn_out = nn.Linear(config.hidden, config.hidden)
        self.attn_norm = nn.LayerNorm(config.hidden, eps=config.layer_norm_eps)
        self.intermediate = nn.Linear(config.hidden, config.intermediate)
        self.output = nn.Linear(config.intermediate, config.hidden)
        self.out_norm = nn.LayerNorm(config.hidden, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)
        self.attn_dropout = nn.Dropout(config.dropout)

    def forward(self, x: flow.Tensor, mask_bias: flow.Tensor) -> flow.Tensor:
        batch, seq, hidden = x.shape
        # [B, S, 3H] -> 3 x [B, heads, S, head_dim]
        qkv = self.qkv(x).reshape(batch, seq, 3, self.heads, hidden // self.heads)
        qkv = qkv.permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = flow.matmul(q * self.scale, k.transpose(-1, -2)) + mask_bias
        probs = self.attn_dropout(F.softmax(scores, dim=-1))
        context = flow.matmul(probs, v).transpose(1, 2).reshape(batch, seq, hidden)
        x = self.attn_norm(x + self.dropout(self.attn_out(context)))
        y = self.output(F.gelu(self.intermediate(x)))
        return self.out_norm(x + self.dropout(y))


class BertPretrainingLoss(nn.Module):
    """BERT + masked-LM and next-sentence heads + their loss: ``forward(...) -> (loss, logits)``.

    The MLM head transforms only the gathered masked positions, and its decoder shares the
    word-embedding matrix (weight tying), as the reference does.
    """

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.layers = nn.ModuleList([BertLayer(config) for _ in range(config.layers)])
        self.pooler = nn.Linear(config.hidden, config.hidden)
        self.nsp = nn.Linear(config.hidden, 2)
        self.mlm_transform = nn.Linear(config.hidden, config.hidden)
        self.mlm_norm = nn.LayerNorm(config.hidden, eps=config.layer_norm_eps)
        self.mlm_bias = nn.Parameter(flow.zeros(config.vocab_size))
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
        input_ids: flow.Tensor,
        segment_ids: flow.Tensor,
        input_mask: flow.Tensor,
        masked_lm_positions: flow.Tensor,
        masked_lm_ids: flow.Tensor,
        next_sentence_labels: flow.Tensor,
    ) -> tuple[flow.Tensor, flow.Tensor]:
        # Additive mask over the keys, broadcast over heads and queries: [B, 1, 1, S].
        mask_bias = ((1.0 - input_mask.to(flow.float32)) * -10000.0).unsqueeze(1).unsqueeze(2)
        x = self.embeddings(input_ids, segment_ids)
        for layer in self.layers:
            x = layer(x, mask_bias)
        nsp_logits = self.nsp(flow.tanh(self.pooler(x[:, 0])))
        # Gather the masked positions first: the vocabulary projection is the head's big matmul.
        index = masked_lm_positions.unsqueeze(-1).expand(-1, -1, x.shape[-1])
        masked = flow.gather(x, 1, index)
        masked = self.mlm_norm(F.gelu(self.mlm_transform(masked)))
        mlm_logits = flow.matmul(masked, self.embeddings.word.weight, transpose_b=True)
        mlm_logits = mlm_logits + self.mlm_bias
        mlm = F.cross_entropy(
            mlm_logits.reshape(-1, mlm_logits.shape[-1]).float(), masked_lm_ids.reshape(-1)
        )
        nsp = F.cross_entropy(nsp_logits.float(), next_sentence_labels)
        return mlm + nsp, mlm_logits


# --------------------------------------------------------------------------------------------


def build_training_model(name: str, options: Mapping[str, Any]) -> nn.Module:
    """The model ``name`` with its loss, at the shapes in ``options``."""
    if name == "resnet50":
        return ImageClassifierLoss(
            ResNet50V15(
                num_classes=int(options["num_classes"]),
                zero_init_residual=bool(options.get("zero_init_residual", False)),
            )
        )
    if name == "bert":
        seq_len = int(options["seq_len"])
        return BertPretrainingLoss(
            BertConfig(
                vocab_size=int(options["vocab_size"]),
                hidden=int(options["bert_hidden"]),
                layers=int(options["bert_layers"]),
                heads=int(options["bert_heads"]),
                intermediate=int(options["bert_intermediate"]),
                max_position=max(512, seq_len),
            )
        )
    raise ValueError(f"unknown model {name!r}")


def count_parameters(model: nn.Module) -> int:
    """Trainable parameters; the tied decoder weight counts once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
