"""Network definitions written against a torch-like library passed in, and no import of torch.

``oneflow`` mirrors ``torch`` (``nn.Conv2d``, ``nn.init``, ``gather``...) closely enough that
OneFlow's benchmark builds the very same ResNet-50 v1.5 and BERT (layers, shapes,
initialisation) from these classes as the PyTorch benchmark does: one definition, no copy to
drift. The module sits
outside ``PyTorch.benchmark.models`` because that package imports torch, which OneFlow's
environment does not have.

ResNet-50 v1.5 differs from the original v1 only in where the downsampling bottleneck strides:
on the 3x3 convolution instead of the first 1x1. That is the variant NVIDIA's and torchvision's
ResNet-50 implement, and the one DLPerf measures (about 4.1 GMACs per 224x224 image).
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from driver.workloads.bert import BertShape


def resnet_classes(lib: ModuleType) -> tuple[type, type]:
    """``(Bottleneck, ResNet)`` built on ``lib.nn`` (``torch`` or ``oneflow``)."""
    nn = lib.nn

    class Bottleneck(nn.Module):
        expansion = 4

        def __init__(self, in_channels: int, width: int, stride: int, downsample: Any) -> None:
            super().__init__()
            out_channels = width * self.expansion
            self.conv1 = nn.Conv2d(in_channels, width, kernel_size=1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            # v1.5: the stride sits here, on the 3x3, not on conv1.
            self.conv2 = nn.Conv2d(
                width, width, kernel_size=3, stride=stride, padding=1, bias=False
            )
            self.bn2 = nn.BatchNorm2d(width)
            self.conv3 = nn.Conv2d(width, out_channels, kernel_size=1, bias=False)
            self.bn3 = nn.BatchNorm2d(out_channels)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = downsample

        def forward(self, x: Any) -> Any:
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            return self.relu(out + identity)

    class ResNet(nn.Module):
        def __init__(
            self,
            layers: tuple[int, ...] = (3, 4, 6, 3),
            num_classes: int = 1000,
            zero_init_residual: bool = False,
        ) -> None:
            super().__init__()
            self.in_channels = 64
            self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
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
            if zero_init_residual:
                # Each residual branch starts as identity (Goyal et al.); NVIDIA's recipe does this.
                for module in self.modules():
                    if isinstance(module, Bottleneck):
                        nn.init.zeros_(module.bn3.weight)

        def _make_layer(self, width: int, blocks: int, stride: int) -> Any:
            out_channels = width * Bottleneck.expansion
            downsample = None
            if stride != 1 or self.in_channels != out_channels:
                downsample = nn.Sequential(
                    nn.Conv2d(
                        self.in_channels, out_channels, kernel_size=1, stride=stride, bias=False
                    ),
                    nn.BatchNorm2d(out_channels),
                )
            layers = [Bottleneck(self.in_channels, width, stride, downsample)]
            self.in_channels = out_channels
            layers += [Bottleneck(out_channels, width, 1, None) for _ in range(1, blocks)]
            return nn.Sequential(*layers)

        def forward(self, x: Any) -> Any:
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(lib.flatten(self.avgpool(x), 1))

    return Bottleneck, ResNet


# --------------------------------------------------------------------------------------------
# BERT pre-training (Devlin et al., 2018): encoder, masked-LM head and next-sentence head.

IGNORE_INDEX = -1  # label of a padded masked-LM slot (no prediction there)


def bert_classes(
    lib: ModuleType, attention: Callable[..., Any] | None = None
) -> tuple[type, Callable[..., Any]]:
    """``(BertForPreTraining, pretraining_loss)`` built on ``lib.nn`` (``torch`` or ``oneflow``).

    Attention is ``lib.nn.functional.scaled_dot_product_attention`` (flash / memory-efficient
    kernels where the device has them) with a boolean key mask (True: may be attended to);
    oneflow 0.9 lacks that function, so OneFlow passes ``attention``, its spelled-out equivalent
    with the same arguments.
    """
    nn = lib.nn
    F = lib.nn.functional

    class BertEmbeddings(nn.Module):
        def __init__(self, config: BertShape) -> None:
            super().__init__()
            self.word = nn.Embedding(config.vocab_size, config.hidden)
            self.position = nn.Embedding(config.max_position, config.hidden)
            self.token_type = nn.Embedding(config.type_vocab_size, config.hidden)
            self.norm = nn.LayerNorm(config.hidden, eps=config.layer_norm_eps)
            self.dropout = nn.Dropout(config.dropout)

        def forward(self, input_ids: Any, segment_ids: Any) -> Any:
            # The position rows are sliced from the table rather than looked up with an arange:
            # the same values and gradient, and OneFlow's nn.Graph would need a placement for a
            # global arange tensor.
            positions = self.position.weight[: input_ids.shape[1]].unsqueeze(0)
            x = self.word(input_ids) + positions + self.token_type(segment_ids)
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

        def forward(self, x: Any, attn_mask: Any) -> Any:
            batch, seq, hidden = x.shape
            # [B, S, 3H] -> 3 x [B, heads, S, head_dim]
            qkv = self.qkv(x).reshape(batch, seq, 3, self.heads, hidden // self.heads)
            qkv = qkv.permute(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]
            attend = attention or F.scaled_dot_product_attention
            context = attend(
                q, k, v, attn_mask=attn_mask, dropout_p=self.dropout_p if self.training else 0.0
            )
            context = context.transpose(1, 2).reshape(batch, seq, hidden)
            x = self.attn_norm(x + self.dropout(self.attn_out(context)))
            y = self.output(F.gelu(self.intermediate(x)))
            return self.out_norm(x + self.dropout(y))

    class BertForPreTraining(nn.Module):
        """``forward`` returns ``(mlm_logits [B, P, V], nsp_logits [B, 2])``.

        The MLM head only transforms the ``max_predictions`` masked positions gathered from the
        sequence, as NVIDIA's reference does, and its decoder shares the word-embedding matrix
        (weight tying): BERT-base has the reference's 110,106,428 parameters.
        """

        def __init__(self, config: BertShape) -> None:
            super().__init__()
            self.config = config
            self.embeddings = BertEmbeddings(config)
            self.layers = nn.ModuleList([BertLayer(config) for _ in range(config.layers)])
            self.pooler = nn.Linear(config.hidden, config.hidden)
            self.nsp = nn.Linear(config.hidden, 2)
            self.mlm_transform = nn.Linear(config.hidden, config.hidden)
            self.mlm_norm = nn.LayerNorm(config.hidden, eps=config.layer_norm_eps)
            # The decoder weight is the word embedding matrix (tied); only its bias is its own.
            self.mlm_bias = nn.Parameter(lib.zeros(config.vocab_size))
            self.apply(self._init_weights)

        def _init_weights(self, module: Any) -> None:
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=self.config.init_std)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

        def forward(
            self, input_ids: Any, segment_ids: Any, input_mask: Any, masked_lm_positions: Any
        ) -> tuple[Any, Any]:
            # Boolean mask, True where a key may be attended to; broadcast over heads and queries.
            attn_mask = input_mask.bool().unsqueeze(1).unsqueeze(2)
            x = self.embeddings(input_ids, segment_ids)
            for layer in self.layers:
                x = layer(x, attn_mask)
            nsp_logits = self.nsp(lib.tanh(self.pooler(x[:, 0])))
            # Gather the masked positions first: the vocabulary projection is the big matmul.
            index = masked_lm_positions.long().unsqueeze(-1).expand(-1, -1, x.shape[-1])
            masked = lib.gather(x, 1, index)
            masked = self.mlm_norm(F.gelu(self.mlm_transform(masked)))
            mlm_logits = F.linear(masked, self.embeddings.word.weight, self.mlm_bias)
            return mlm_logits, nsp_logits

    def pretraining_loss(
        mlm_logits: Any, nsp_logits: Any, masked_lm_ids: Any, next_sentence_labels: Any
    ) -> Any:
        """Masked-LM cross entropy over the real (non-padded) predictions plus the NSP loss."""
        mlm = F.cross_entropy(
            mlm_logits.reshape(-1, mlm_logits.shape[-1]).float(),
            masked_lm_ids.reshape(-1).long(),
            ignore_index=IGNORE_INDEX,
        )
        nsp = F.cross_entropy(nsp_logits.float(), next_sentence_labels.reshape(-1).long())
        return mlm + nsp

    return BertForPreTraining, pretraining_loss


# --------------------------------------------------------------------------------------------
# Training step


def backward_and_step(
    lib: ModuleType, loss: Any, optimizer: Any, scaler: Any, params: list[Any], grad_clip: float
) -> None:
    """Backward pass and optimizer step, through the fp16 loss ``scaler`` when there is one.

    Gradients are clipped to a global norm of ``grad_clip`` when it is positive (unscaled
    first, so the norm is the true one). The caller zeroes the gradients.
    """
    if scaler is not None:
        scaler.scale(loss).backward()
        if grad_clip > 0:
            scaler.unscale_(optimizer)
            lib.nn.utils.clip_grad_norm_(params, grad_clip)
        # Fused optimizers take the scale and inf flags on the device: no sync here.
        scaler.step(optimizer)
        scaler.update()
    else:
        loss.backward()
        if grad_clip > 0:
            lib.nn.utils.clip_grad_norm_(params, grad_clip)
        optimizer.step()
