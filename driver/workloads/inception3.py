"""InceptionV3 (299 x 299 inputs)."""

from driver.workloads.images import image_workload

INCEPTION3 = image_workload(
    "inception3", "InceptionV3", listed=2, image_size=299, gpu_batch={"fp32": 128, "amp": 128},
    flops_at_default_shape=34_240_933_248.0,  # 299 x 299, 1000 classes, no auxiliary head
)  # fmt: skip
