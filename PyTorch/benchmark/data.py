"""Input pipelines: synthetic tensors, an ImageNet-layout JPEG folder, and BERT pre-training shards.

Synthetic data is made once on the device and reused by every step, so it measures the model
alone. Real data goes through a ``torch.utils.data.DataLoader`` with ``--loader-workers``
processes and is part of every step's time, as in DLPerf's real-data columns.

Images: ``<data-dir>/train/<class>/*.JPEG`` (``<data-dir>/<class>/`` also works), decoded with
Pillow, random-resized-crop (scale 0.08-1, ratio 3/4-4/3) and horizontal flip, as in the
reference training recipe. The workers hand over uint8 pixels and the normalisation runs on the
device by default (``normalize_on=device``), like NVIDIA's PyTorch reference: a quarter of the
host-to-device bytes and no float work in the workers. ``normalize_on=loader`` normalises in
numpy in the workers instead.

BERT: ``*.npz`` shards written by ``dlperf data bert-kit`` (see :data:`BERT_FEATURES`).
"""

from __future__ import annotations

import json
import math
import os
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, DistributedSampler

from driver.workloads.llama import llama_shape
from PyTorch.benchmark.models import IMAGE_MODELS, Batch
from PyTorch.benchmark.models.bert import IGNORE_INDEX

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
IMAGE_EXTENSIONS = (".jpeg", ".jpg", ".png")

# The shard format: one uncompressed .npz per shard, every array with N rows, plus a JSON
# ``meta`` string (seq_len, max_predictions, vocab_size, tokenizer). Padded masked-LM slots have
# position 0 and label IGNORE_INDEX (-1).
BERT_FEATURES: dict[str, str] = {
    "input_ids": "[N, seq_len] int32",
    "segment_ids": "[N, seq_len] int8 (0: sentence A, 1: sentence B)",
    "input_mask": "[N, seq_len] int8 (1: token, 0: padding)",
    "masked_lm_positions": "[N, max_predictions] int32",
    "masked_lm_ids": "[N, max_predictions] int32, -1 where padded",
    "next_sentence_labels": "[N] int8 (1: B is a random sentence, 0: B follows A)",
}
BERT_SHARD_SUFFIX = ".npz"


# --------------------------------------------------------------------------------------------
# Synthetic data


def synthetic_batch(
    model: str, options: Mapping[str, Any], batch_size: int, device: torch.device | str
) -> Batch:
    """A random batch with the real inputs' shapes and dtypes, made directly on ``device``."""
    if model in IMAGE_MODELS:
        size = int(options["image_size"])
        return {
            "images": torch.randn(batch_size, 3, size, size, device=device),
            "labels": torch.randint(0, int(options["num_classes"]), (batch_size,), device=device),
        }
    if model == "bert":
        seq_len, vocab = int(options["seq_len"]), int(options["vocab_size"])
        predictions = min(int(options["max_predictions"]), seq_len - 1)
        # Distinct masked positions per sequence, never the [CLS] slot 0, in increasing order.
        scores = torch.rand(batch_size, seq_len - 1, device=device)
        positions = scores.argsort(dim=1)[:, :predictions].sort(dim=1).values + 1
        segment_ids = torch.zeros(batch_size, seq_len, dtype=torch.long, device=device)
        segment_ids[:, seq_len // 2 :] = 1
        return {
            "input_ids": torch.randint(0, vocab, (batch_size, seq_len), device=device),
            "segment_ids": segment_ids,
            "input_mask": torch.ones(batch_size, seq_len, dtype=torch.long, device=device),
            "masked_lm_positions": positions,
            "masked_lm_ids": torch.randint(0, vocab, (batch_size, predictions), device=device),
            "next_sentence_labels": torch.randint(0, 2, (batch_size,), device=device),
        }
    if model == "llama":
        vocab = llama_shape(options).vocab_size
        stream = torch.randint(0, vocab, (batch_size, int(options["seq_len"]) + 1), device=device)
        return {"tokens": stream[:, :-1], "labels": stream[:, 1:]}
    raise ValueError(f"unknown model {model!r}")


# --------------------------------------------------------------------------------------------
# Images


def find_images(data_dir: str | os.PathLike[str]) -> tuple[list[tuple[str, int]], list[str]]:
    """``(path, class index)`` of every image under ``<data_dir>/train`` (or ``data_dir``)."""
    root = Path(data_dir)
    if (root / "train").is_dir():
        root = root / "train"
    classes = sorted(entry.name for entry in os.scandir(root) if entry.is_dir())
    samples = []
    for index, name in enumerate(classes):
        for entry in sorted(os.scandir(root / name), key=lambda e: e.name):
            if entry.is_file() and entry.name.lower().endswith(IMAGE_EXTENSIONS):
                samples.append((entry.path, index))
    if not samples:
        raise FileNotFoundError(f"no images in class folders under {root}")
    return samples, classes


def random_resized_crop_box(
    width: int,
    height: int,
    rng: random.Random,
    scale: tuple[float, float] = (0.08, 1.0),
    ratio: tuple[float, float] = (3 / 4, 4 / 3),
) -> tuple[int, int, int, int]:
    """``(left, top, crop width, crop height)``, sampled like the reference RandomResizedCrop."""
    area = width * height
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target = area * rng.uniform(*scale)
        aspect = math.exp(rng.uniform(*log_ratio))
        w = round(math.sqrt(target * aspect))
        h = round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            return rng.randint(0, width - w), rng.randint(0, height - h), w, h
    # Fallback after ten misses: the largest centred crop within the ratio range.
    in_ratio = width / height
    if in_ratio < ratio[0]:
        w, h = width, round(width / ratio[0])
    elif in_ratio > ratio[1]:
        w, h = round(height * ratio[1]), height
    else:
        w, h = width, height
    return (width - w) // 2, (height - h) // 2, w, h


def load_train_image(path: str, size: int, rng: random.Random) -> np.ndarray:
    """Decode, random-resized-crop to ``size`` and maybe flip: an HWC uint8 RGB array."""
    from PIL import Image  # imported here: only real image data needs Pillow

    with Image.open(path) as image:
        image = image.convert("RGB")
        left, top, w, h = random_resized_crop_box(image.width, image.height, rng)
        image = image.resize(
            (size, size), Image.Resampling.BILINEAR, box=(left, top, left + w, top + h)
        )
        if rng.random() < 0.5:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        return np.asarray(image, dtype=np.uint8)


class ImageFolderDataset(Dataset):
    """Training images; each item is ``(HWC array, label)``, uint8 or normalised float32."""

    def __init__(self, data_dir: str, image_size: int, normalize: bool) -> None:
        self.samples, self.classes = find_images(data_dir)
        self.image_size = image_size
        self.normalize = normalize
        self._rng: random.Random | None = None
        self._rng_seed: int | None = None

    def __len__(self) -> int:
        return len(self.samples)

    def _random(self) -> random.Random:
        # DataLoader seeds torch differently in every worker; follow that seed so the crops of
        # the workers differ yet stay reproducible for a given --seed.
        seed = torch.initial_seed()
        if self._rng is None or self._rng_seed != seed:
            self._rng, self._rng_seed = random.Random(seed), seed
        return self._rng

    def __getitem__(self, index: int) -> tuple[np.ndarray, int]:
        path, label = self.samples[index]
        pixels = load_train_image(path, self.image_size, self._random())
        if self.normalize:
            mean = np.asarray(IMAGENET_MEAN, dtype=np.float32) * 255
            std = np.asarray(IMAGENET_STD, dtype=np.float32) * 255
            pixels = (pixels.astype(np.float32) - mean) / std
        return pixels, label


def collate_images(items: Sequence[tuple[np.ndarray, int]]) -> Batch:
    """Stack HWC images into an NCHW tensor view with channels-last strides (no copy)."""
    pixels = torch.from_numpy(np.stack([pixels for pixels, _ in items]))
    labels = torch.tensor([label for _, label in items], dtype=torch.long)
    return {"images": pixels.permute(0, 3, 1, 2), "labels": labels}


# --------------------------------------------------------------------------------------------
# BERT shards


def write_bert_shard(
    path: str | os.PathLike[str], arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]
) -> None:
    missing = set(BERT_FEATURES) - set(arrays)
    if missing:
        raise ValueError(f"shard lacks {sorted(missing)}")
    rows = {len(array) for array in arrays.values()}
    if len(rows) != 1:
        raise ValueError(f"shard arrays disagree on the number of rows: {sorted(rows)}")
    np.savez(path, meta=np.asarray(json.dumps(dict(meta), sort_keys=True)), **arrays)


def read_bert_shards(
    data_dir: str | os.PathLike[str],
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """All shards of ``data_dir`` (or one shard file) concatenated, with their common meta."""
    root = Path(data_dir)
    paths = [root] if root.is_file() else sorted(root.glob(f"*{BERT_SHARD_SUFFIX}"))
    if not paths:
        raise FileNotFoundError(f"no *{BERT_SHARD_SUFFIX} BERT shards in {root}")
    parts: dict[str, list[np.ndarray]] = {name: [] for name in BERT_FEATURES}
    meta: dict[str, Any] | None = None
    for path in paths:
        with np.load(path, allow_pickle=False) as shard:
            shard_meta = json.loads(str(shard["meta"]))
            for key in ("seq_len", "max_predictions"):
                if meta is not None and shard_meta.get(key) != meta.get(key):
                    raise ValueError(f"{path}: {key} {shard_meta.get(key)} != {meta.get(key)}")
            meta = meta or shard_meta
            for name in BERT_FEATURES:
                parts[name].append(shard[name])
    arrays = {name: np.concatenate(chunks) for name, chunks in parts.items()}
    assert meta is not None
    meta["vocab_size"] = max(int(meta.get("vocab_size", 0)), int(arrays["input_ids"].max()) + 1)
    return arrays, meta


class BertShardDataset(Dataset):
    """Indexed by a list of row numbers (a whole batch): one numpy gather per batch."""

    def __init__(self, data_dir: str, options: Mapping[str, Any]) -> None:
        self.arrays, self.meta = read_bert_shards(data_dir)
        seq_len, predictions = int(options["seq_len"]), int(options["max_predictions"])
        if self.arrays["input_ids"].shape[1] != seq_len:
            raise ValueError(
                f"shards have seq_len {self.arrays['input_ids'].shape[1]}, options say {seq_len}"
            )
        if self.arrays["masked_lm_positions"].shape[1] != predictions:
            raise ValueError(
                f"shards have max_predictions {self.arrays['masked_lm_positions'].shape[1]}, "
                f"options say {predictions}"
            )
        if self.meta["vocab_size"] > int(options["vocab_size"]):
            raise ValueError(
                f"shards use token ids up to {self.meta['vocab_size'] - 1}, more than the "
                f"model's vocab_size {options['vocab_size']}"
            )

    def __len__(self) -> int:
        return len(self.arrays["input_ids"])

    def __getitem__(self, rows: list[int]) -> Batch:
        index = np.asarray(rows)
        # int64 on the host: embedding, gather and cross-entropy all want long indices.
        return {
            name: torch.from_numpy(array[index].astype(np.int64))
            for name, array in self.arrays.items()
        }


# --------------------------------------------------------------------------------------------
# Batch sources used by the training loop


@dataclass
class DeviceFormat:
    device: torch.device
    memory_format: torch.memory_format = torch.contiguous_format


class SyntheticSource:
    """The same device batch every step (made once)."""

    def __init__(self, batch: Batch) -> None:
        self.batch = batch

    def next(self) -> Batch:
        return self.batch

    def close(self) -> None:
        pass


class LoaderSource:
    """Endless batches from a DataLoader, moved to the device (and normalised there for images)."""

    def __init__(
        self,
        loader: DataLoader,
        sampler: DistributedSampler,
        target: DeviceFormat,
        normalize_images: bool,
    ) -> None:
        self.loader = loader
        self.sampler = sampler
        self.target = target
        self.normalize_images = normalize_images
        self.epoch = 0
        self._iterator: Iterator[Batch] = self._start_epoch()
        shape = (1, 3, 1, 1)
        self.mean = torch.tensor(IMAGENET_MEAN, device=target.device).view(shape) * 255
        self.std = torch.tensor(IMAGENET_STD, device=target.device).view(shape) * 255

    def _start_epoch(self) -> Iterator[Batch]:
        self.sampler.set_epoch(self.epoch)
        return iter(self.loader)

    def _host_batch(self) -> Batch:
        try:
            return next(self._iterator)
        except StopIteration:
            self.epoch += 1
            self._iterator = self._start_epoch()
            return next(self._iterator)

    def next(self) -> Batch:
        batch = {
            name: tensor.to(self.target.device, non_blocking=True)
            for name, tensor in self._host_batch().items()
        }
        if "images" in batch:
            images = batch["images"]
            if self.normalize_images:
                images = (images.float() - self.mean) / self.std
            batch["images"] = images.contiguous(memory_format=self.target.memory_format)
        return batch

    def close(self) -> None:
        # Drop the iterator so persistent workers shut down before the process exits.
        del self._iterator


# --------------------------------------------------------------------------------------------
# Tokens (Llama): the flat little-endian uint32 file of ``dlperf data tokens``
# (driver/datasets/tokens.py documents the format)

TOKENS_FILE = "tokens.bin"


class TokenFileError(ValueError):
    """A token file the model cannot train on; the message names the file and the offset."""


def open_token_file(path: Path, vocab_size: int, needed: int) -> np.ndarray:
    """The token ids of ``path`` (memory-mapped), checked: whole uint32 values, at least
    ``needed`` of them, every id below ``vocab_size``."""
    size = path.stat().st_size
    if size % 4:
        raise TokenFileError(
            f"{path}: {size} bytes is no whole number of uint32 tokens; the last "
            f"{size % 4} byte(s) from byte offset {size - size % 4} are left over"
        )
    count = size // 4
    if count < needed:
        raise TokenFileError(
            f"{path}: {count} tokens, fewer than the {needed} one step needs (batch x ranks x "
            "(seq_len + 1)); give more text or a smaller batch or seq_len"
        )
    tokens = np.memmap(path, dtype="<u4", mode="r")
    chunk = 1 << 22
    for start in range(0, count, chunk):
        bad = np.flatnonzero(tokens[start : start + chunk] >= vocab_size)
        if bad.size:
            index = start + int(bad[0])
            raise TokenFileError(
                f"{path}: token {index} (byte offset {4 * index}) is {int(tokens[index])}, "
                f"not below the model's vocabulary of {vocab_size}; tokenize with the model's "
                "tokenizer or pick a llama_size with a vocabulary that holds it"
            )
    return tokens


class TokenSource:
    """Samples of ``seq_len + 1`` consecutive tokens, not overlapping, taken in order: step k's
    batch on rank r is samples (k x ranks + r) x batch onward, wrapping at the end of the file;
    the batch is copied to the device each step (the copy is part of the step, as a loader's)."""

    def __init__(
        self, tokens: np.ndarray, seq_len: int, batch_size: int, rank: int, world_size: int,
        device: torch.device,
    ) -> None:  # fmt: skip
        self.tokens, self.span = tokens, seq_len + 1
        self.samples = len(tokens) // self.span
        self.batch_size, self.rank, self.world_size = batch_size, rank, world_size
        self.device, self.step = device, 0

    def next(self) -> Batch:
        first = (self.step * self.world_size + self.rank) * self.batch_size
        self.step += 1
        rows = [(first + i) % self.samples for i in range(self.batch_size)]
        block = np.stack([self.tokens[r * self.span : (r + 1) * self.span] for r in rows])
        stream = torch.from_numpy(block.astype(np.int64)).to(self.device, non_blocking=True)
        return {"tokens": stream[:, :-1], "labels": stream[:, 1:]}

    def close(self) -> None:
        return None


def token_data_source(
    options: Mapping[str, Any],
    *,
    data_dir: str,
    batch_size: int,
    rank: int,
    world_size: int,
    device: torch.device,
) -> TokenSource:
    seq_len = int(options["seq_len"])
    needed = batch_size * world_size * (seq_len + 1)
    path = Path(data_dir) / TOKENS_FILE
    if not path.is_file():
        raise TokenFileError(f"{path}: no token file; make one with `dlperf data tokens`")
    tokens = open_token_file(path, llama_shape(options).vocab_size, needed)
    return TokenSource(tokens, seq_len, batch_size, rank, world_size, device)


def real_data_source(
    model: str,
    options: Mapping[str, Any],
    *,
    data_dir: str,
    batch_size: int,
    workers: int,
    rank: int,
    world_size: int,
    seed: int,
    target: DeviceFormat,
) -> LoaderSource:
    pin = target.device.type == "cuda"
    common: dict[str, Any] = {
        "num_workers": workers,
        "pin_memory": pin,
        "persistent_workers": workers > 0,
    }
    if model in IMAGE_MODELS:
        on_device = str(options.get("normalize_on", "device")) == "device"
        images = ImageFolderDataset(data_dir, int(options["image_size"]), normalize=not on_device)
        sampler = DistributedSampler(
            images, num_replicas=world_size, rank=rank, shuffle=True, seed=seed, drop_last=True
        )
        if len(sampler) < batch_size:
            raise ValueError(
                f"{len(images)} images give {len(sampler)} per rank, fewer than a batch of "
                f"{batch_size}"
            )
        loader = DataLoader(
            images,
            batch_size=batch_size,
            sampler=sampler,
            drop_last=True,
            collate_fn=collate_images,
            **common,
        )
        return LoaderSource(loader, sampler, target, normalize_images=on_device)
    if model == "bert":
        shards = BertShardDataset(data_dir, options)
        sampler = DistributedSampler(
            shards, num_replicas=world_size, rank=rank, shuffle=True, seed=seed, drop_last=True
        )
        if len(sampler) < batch_size:
            raise ValueError(
                f"{len(shards)} sequences give {len(sampler)} per rank, fewer than a batch of "
                f"{batch_size}"
            )
        # batch_size=None: the sampler yields whole batches of row numbers.
        batches = BatchSampler(sampler, batch_size, drop_last=True)
        loader = DataLoader(shards, sampler=batches, batch_size=None, **common)
        return LoaderSource(loader, sampler, target, normalize_images=False)
    raise ValueError(f"unknown model {model!r}")


__all__ = [
    "BERT_FEATURES",
    "IGNORE_INDEX",
    "BertShardDataset",
    "DeviceFormat",
    "ImageFolderDataset",
    "LoaderSource",
    "SyntheticSource",
    "TokenFileError",
    "TokenSource",
    "collate_images",
    "find_images",
    "random_resized_crop_box",
    "read_bert_shards",
    "real_data_source",
    "open_token_file",
    "synthetic_batch",
    "token_data_source",
    "write_bert_shard",
]
