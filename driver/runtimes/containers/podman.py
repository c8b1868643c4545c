"""podman over SSH: docker's way (one container per node and repeat) with the podman client.

podman answers docker's command line, so this is :class:`~.docker.Docker` with its own client
and image IDs. Images come into a node's podman from docker (``docker save IMAGE | podman
load``, or ``dlperf images push``'s archive loaded there); pre-flight asks for the image by the
same ID (podman writes it without ``sha256:``). The container has no ``--init``: podman's own
(catatonit) is not installed everywhere, and ``podman kill`` ends the process with SIGKILL.

On this host (``dlperf run --container podman``) the same ``run --rm`` as docker's, with the
image loaded into podman the same way and the GPUs through CDI (``--device
nvidia.com/gpu=all``: the NVIDIA Container Toolkit's generated spec).
"""

from __future__ import annotations

from driver.cluster.inventory import Node
from driver.cluster.preflight import Engine
from driver.cluster.remote import Remote
from driver.runtimes.containers import PLATFORMS
from driver.runtimes.containers.docker import Docker


@PLATFORMS.register("podman")
class Podman(Docker):
    name = "podman"
    init = ()
    gpu_flags = ("--device", "nvidia.com/gpu=all")
    missing_fix = "load it (`docker save {image} | podman load`)"

    def cli(self, remote: Remote, *args: str) -> list[str]:  # noqa: ARG002 - no DOCKER_HOST
        return ["podman", *args]

    def engine(self, remote: Remote, image: str | None) -> Engine:
        image = image.removeprefix("sha256:") if image else None
        inspect = (
            self.cli(remote, "image", "inspect", "--format", "{{.Id}}", image) if image else None
        )
        fix = "load it there (`docker save IMAGE | podman load` on the node)"
        version = self.cli(remote, "version", "--format", "{{.Version}}")
        return Engine(self.name, version, inspect, image, fix, remote.node.container.gpus)

    def image_for(
        self, framework: str, node: Node, source: str = "dlperf", image: str = "pinned"
    ) -> str:
        return super().image_for(framework, node, source, image).removeprefix("sha256:")

    def local_cli(self, *args: str) -> list[str]:
        return ["podman", *args]

    def engine_id(self, image: str) -> str:
        return image.removeprefix("sha256:")
