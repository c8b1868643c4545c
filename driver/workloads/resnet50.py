"""ResNet-50 v1.5 (torchvision's layout: the stride on the 3x3 convolution)."""

from driver.workloads.images import SEQUENCE_KEYS, image_workload

RESNET50 = image_workload(
    "resnet50", "ResNet-50 v1.5", listed=1, image_size=224, parity_not_handed=SEQUENCE_KEYS,
    gpu_batch={"fp32": 128, "amp": 256},
)  # fmt: skip
