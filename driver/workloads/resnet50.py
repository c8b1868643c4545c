"""ResNet-50 v1.5 (torchvision's layout: the stride on the 3x3 convolution)."""

from driver.workloads.images import SEQUENCE_KEYS, image_workload

RESNET50 = image_workload(
    "resnet50", "ResNet-50 v1.5", listed=1, image_size=224, parity_not_handed=SEQUENCE_KEYS,
    flops_at_default_shape=24_299_077_632.0,  # 224 x 224, 1000 classes
    gpu_batch={"fp32": 128, "amp": 256},
)  # fmt: skip
