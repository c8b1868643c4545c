"""ResNet-50 v1.5 (torchvision's layout: the stride on the 3x3 convolution)."""

from driver.workloads.base import WORKLOADS, Workload
from driver.workloads.images import IMAGE_FORMATS, IMAGE_OPTIONS, SEQUENCE_KEYS

RESNET50 = WORKLOADS.add(
    "resnet50",
    Workload(
        name="resnet50",
        title="ResNet-50 v1.5",
        options=IMAGE_OPTIONS,
        data_formats=IMAGE_FORMATS,
        listed=1,
        image_size=224,
        optimizer="sgd",
        grad_clip=0.0,
        parity_not_handed=SEQUENCE_KEYS,
    ),
)
