"""A bare PyTorch loop of the benchmark's ResNet-50, for ``dlperf parity`` (no harness).

Build the model, one synthetic batch, forward/backward/step with PyTorch's own defaults
(``torch.optim.SGD`` as it comes, autocast for the low-precision path), a timer around whole
steps, one host sync at the end. Shares with the kit's benchmark only the model definition.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from driver.studies.bareloop import parse_args, print_result  # noqa: E402
from PyTorch.benchmark.models.resnet import resnet50  # noqa: E402


def main() -> int:
    args = parse_args("pytorch", layouts=True)
    torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(1234)
    size, classes = args.options["image_size"], args.options["num_classes"]
    layout = torch.channels_last if args.options["channels_last"] else torch.contiguous_format
    model = resnet50(num_classes=classes).to(device, memory_format=layout).train()
    optimizer = torch.optim.SGD(
        model.parameters(), lr=0.1 * args.batch_size / 256, momentum=0.9, weight_decay=1e-4
    )
    images = torch.randn(args.batch_size, 3, size, size, device=device)
    images = images.contiguous(memory_format=layout)
    labels = torch.randint(0, classes, (args.batch_size,), device=device)
    amp = args.precision == "amp"
    amp_dtype = torch.bfloat16 if device.type == "cpu" else torch.float16
    scaler = torch.amp.GradScaler("cuda", enabled=amp and device.type == "cuda")

    def step() -> torch.Tensor:
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp):
            loss = F.cross_entropy(model(images), labels)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
        return loss

    for _ in range(args.warmup_steps):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    final_loss = float(loss.detach())  # the one host sync
    seconds = time.perf_counter() - start
    print_result(
        "pytorch", args, seconds=seconds, device=str(device), loss=final_loss,
        parameters=sum(p.numel() for p in model.parameters()),
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
