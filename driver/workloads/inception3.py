"""InceptionV3 (299 x 299 inputs)."""

from driver.workloads.base import WORKLOADS, Workload
from driver.workloads.images import IMAGE_FORMATS, IMAGE_OPTIONS

INCEPTION3 = WORKLOADS.add(
    "inception3",
    Workload(
        name="inception3",
        title="InceptionV3",
        options=IMAGE_OPTIONS,
        data_formats=IMAGE_FORMATS,
        listed=2,
        image_size=299,
        optimizer="sgd",
        grad_clip=0.0,
    ),
)
