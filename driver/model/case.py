"""A benchmark case: one point of the matrix, with a stable readable id."""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any

BatchSize = int | str  # a positive int, or "max"

_TOPOLOGY = re.compile(r"^(\d+)n(\d+)g$")


@dataclass(frozen=True)
class Topology:
    """nodes x devices per node; on CPU a "device" is one training process."""

    nodes: int
    devices_per_node: int

    @property
    def world_size(self) -> int:
        return self.nodes * self.devices_per_node

    @property
    def label(self) -> str:
        return f"{self.nodes}n{self.world_size}g"

    @classmethod
    def parse(cls, label: str) -> Topology:
        """``"2n16g"`` -> 2 nodes x 8 devices (DLPerf writes the total device count)."""
        match = _TOPOLOGY.match(label)
        if not match:
            raise ValueError(f"topology {label!r} is not of the form <nodes>n<total devices>g")
        nodes, total = int(match[1]), int(match[2])
        if nodes <= 0 or total <= 0 or total % nodes:
            raise ValueError(
                f"topology {label!r}: total devices must be a positive multiple of nodes"
            )
        return cls(nodes, total // nodes)


@dataclass(frozen=True)
class Case:
    model: str
    framework: str
    topology: Topology
    batch_size: BatchSize
    precision: str  # fp32 | amp
    dataset: str  # synthetic | real
    xla: bool = False
    variant: str = "default"  # a named option set of the suite ("default" stays out of the id)
    source: str = "dlperf"  # our scripts, or an upstream source plug-in
    warmup_steps: int = 20
    measured_steps: int = 100
    total_steps: int = 120
    repeats: int = 7
    timeout_s: float = 3600.0
    options: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    data_dir: str | None = None
    profile: str = "dlperf"  # "dlperf" is the full protocol; anything else is footnoted
    # The Dell method: run whole epochs of ``epoch_samples`` samples instead of fixed steps.
    epochs: float | None = None
    epoch_samples: int | None = None
    drop_caches: bool = False  # drop the page cache on every node before each repeat
    loader_workers: int | str = "auto"  # per process; auto = physical cores per device - 4
    # The autocast dtype of an AMP case on the kit's own scripts: auto (bf16 where the device
    # has it, as on H100), or fp16 / bf16. Not part of the id: the header records the dtype that
    # ran (amp_dtype), and `dlperf factor` names it where two paired cases differ in it.
    amp_dtype: str = "auto"
    # An upstream source's image: "pinned" (its pinned image) or "current" (its current_image:
    # the same pinned code on a later base). Part of the id when current, so that runs on the
    # two images never mix in one case; the record names the image and what differs.
    image: str = "pinned"

    def window_for(self, batch_size: int) -> tuple[int, int, int]:
        """(warm-up, measured, total) steps; in epoch mode the epoch sets the measured steps."""
        if self.epochs is None or not self.epoch_samples:
            return self.warmup_steps, self.measured_steps, self.total_steps
        per_step = batch_size * self.topology.world_size
        measured = max(1, math.ceil(self.epochs * self.epoch_samples / per_step))
        return self.warmup_steps, measured, self.warmup_steps + measured

    @property
    def id(self) -> str:
        parts = [
            self.model,
            self.framework,
            self.topology.label,
            f"bs{self.batch_size}",
            self.precision,
            self.dataset,
        ]
        if self.xla:
            parts.append("xla")
        if self.variant != "default":
            parts.append(self.variant)
        if self.source != "dlperf":
            parts.append(f"src-{self.source}")
        if self.image != "pinned":
            parts.append(f"{self.image}-image")
        return "/".join(str(p) for p in parts)

    @property
    def group_key(self) -> tuple:
        """Cases that share a table column: everything but the topology."""
        return (
            self.model,
            self.framework,
            self.batch_size,
            self.precision,
            self.dataset,
            self.xla,
            self.variant,
            self.source,
            self.image,
        )

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if data["amp_dtype"] == "auto":  # the records of the kits before the field, unchanged
            del data["amp_dtype"]
        if data["image"] == "pinned":  # likewise: a pinned image is what every earlier case ran
            del data["image"]
        data["topology"] = self.topology.label
        data["id"] = self.id
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Case:
        fields_ = {k: v for k, v in data.items() if k != "id"}
        fields_["topology"] = Topology.parse(fields_["topology"])
        return cls(**fields_)


# A matrix's (and an imported log's) bounds: a topology and a step count past them is a typo or an
# attack, never a cluster.
MAX_NODES = 1024
MAX_DEVICES_PER_NODE = 64
MAX_STEPS = 10_000_000


def parse_topology(label: Any) -> Topology:
    """``<nodes>n<total devices>g`` within :data:`MAX_NODES` x :data:`MAX_DEVICES_PER_NODE`."""
    bound = f"at most {MAX_NODES} nodes and {MAX_DEVICES_PER_NODE} devices per node"
    if isinstance(label, str) and re.fullmatch(r"[0-9]+n[0-9]+g", label) and not re.fullmatch(
        r"[0-9]{1,7}n[0-9]{1,9}g", label
    ):  # the form, with counts too long to be read: the bound, not the form, is at fault
        shown = label if len(label) <= 40 else f"{label[:40]}... ({len(label)} characters)"
        raise ValueError(f"topology {shown!r}: {bound}")
    if not isinstance(label, str) or not re.fullmatch(r"[0-9]{1,7}n[0-9]{1,9}g", label):
        raise ValueError(
            f"topology {label!r} is not of the form <nodes>n<total devices>g (e.g. 2n16g)"
        )
    topology = Topology.parse(label)  # ValueError: total not a positive multiple of nodes
    if topology.nodes > MAX_NODES or topology.devices_per_node > MAX_DEVICES_PER_NODE:
        raise ValueError(f"topology {label!r}: {bound}")
    return topology
