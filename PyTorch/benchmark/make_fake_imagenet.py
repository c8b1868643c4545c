"""Write a tiny ImageNet-layout JPEG folder (``<out>/train/<class>/<n>.JPEG``) for tests.

The images are random smooth colour fields of random sizes (so the random-resized-crop has
something to do) and encode as real baseline JPEGs through Pillow, like ImageNet's files.

    python PyTorch/benchmark/make_fake_imagenet.py /tmp/fake-imagenet --classes 4 --per-class 8
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import numpy as np


def make_fake_imagenet(
    out: str | Path,
    classes: int = 4,
    per_class: int = 8,
    min_size: int = 40,
    max_size: int = 96,
    seed: int = 0,
) -> Path:
    """Create the folder and return its ``train`` directory."""
    from PIL import Image

    rng = random.Random(seed)
    noise = np.random.default_rng(seed)
    train = Path(out) / "train"
    for label in range(classes):
        folder = train / f"n{label:08d}"  # WordNet-id-like folder names, as in ImageNet
        folder.mkdir(parents=True, exist_ok=True)
        for index in range(per_class):
            width, height = rng.randint(min_size, max_size), rng.randint(min_size, max_size)
            # A coarse random grid upsampled: smooth content that compresses like a photo.
            coarse = noise.integers(0, 256, size=(4, 4, 3), dtype=np.uint8)
            image = Image.fromarray(coarse, "RGB").resize(
                (width, height), Image.Resampling.BILINEAR
            )
            image.save(folder / f"n{label:08d}_{index}.JPEG", format="JPEG", quality=90)
    return train


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="folder to create (the train/ subfolder goes inside)")
    parser.add_argument("--classes", type=int, default=4)
    parser.add_argument("--per-class", type=int, default=8)
    parser.add_argument("--min-size", type=int, default=40)
    parser.add_argument("--max-size", type=int, default=96)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    train = make_fake_imagenet(
        args.out, args.classes, args.per_class, args.min_size, args.max_size, args.seed
    )
    print(f"wrote {args.classes * args.per_class} images under {train}")


if __name__ == "__main__":
    main()
