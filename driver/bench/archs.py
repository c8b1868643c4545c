"""Whether a framework build has kernels for this GPU: its compiled architectures (what the
build lists, e.g. ``torch.cuda.get_arch_list()``, TensorFlow's ``cuda_compute_capabilities``)
against the GPU's compute capability. stdlib only (it runs in framework environments).

- ``sm_XY`` is machine code: it runs on capability X.Z for Z >= Y (the same major); with the
  ``a`` suffix (``sm_90a``) only on X.Y itself; with ``f`` (``sm_100f``) on the family X.Z, Z >= Y.
- ``compute_XY`` (or ``X.Y+PTX``) is PTX: the driver compiles it for any capability >= X.Y at
  the first launch of each kernel, which can take minutes and must stay out of the measured
  window; and the kernels are not tuned for the newer GPU.
- Neither: the build cannot run on the GPU; the case is refused with the CUDA version that
  first has kernels for it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NATIVE, PTX, REFUSED, UNKNOWN = "native", "ptx", "refused", "unknown"

# The first CUDA release with machine code for each compute capability (NVIDIA's CUDA
# release notes): the newer pin a refused case names.
FIRST_CUDA = {
    (7, 0): "9.0",
    (7, 5): "10.0",
    (8, 0): "11.0",
    (8, 6): "11.1",
    (8, 9): "11.8",
    (9, 0): "11.8",
    (10, 0): "12.8",
    (12, 0): "12.8",
}

_ARCH = re.compile(
    r"^(?:(?P<kind>sm|compute)_(?P<digits>\d{2,3})(?P<suffix>[af]?)"
    r"|(?P<major>\d+)\.(?P<minor>\d)(?P<ptx>\+ptx)?)$",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Arch:
    major: int
    minor: int
    ptx: bool  # PTX (compiled for this capability and newer at load time), else machine code
    suffix: str = ""  # "a": this capability only; "f": its family

    def runs_natively_on(self, major: int, minor: int) -> bool:
        if self.ptx:
            return False
        if self.suffix == "a":
            return (self.major, self.minor) == (major, minor)
        return self.major == major and minor >= self.minor

    def compiles_for(self, major: int, minor: int) -> bool:
        return self.ptx and (major, minor) >= (self.major, self.minor)


def parse_arch(text: str) -> Arch | None:
    """``sm_90``, ``sm_90a``, ``compute_80``, ``8.0``, ``8.6+PTX`` (None when not one)."""
    match = _ARCH.match(text.strip())
    if not match:
        return None
    if match["kind"]:
        digits = match["digits"]
        major, minor = int(digits[:-1]), int(digits[-1])
        return Arch(major, minor, match["kind"].lower() == "compute", match["suffix"].lower())
    return Arch(int(match["major"]), int(match["minor"]), bool(match["ptx"]))


def compiled_archs(listing: list[str] | str) -> list[Arch]:
    """Every architecture a build lists; ``X.Y+PTX`` adds both the machine code and PTX."""
    items = (
        listing.replace(";", ",").replace(" ", ",").split(",")
        if isinstance(listing, str)
        else list(listing)
    )
    archs = []
    for item in items:
        arch = parse_arch(item)
        if arch is None:
            continue
        if arch.ptx and item.lower().endswith("+ptx"):
            archs.append(Arch(arch.major, arch.minor, False))
        archs.append(arch)
    return archs


@dataclass(frozen=True)
class ArchDecision:
    verdict: str  # native | ptx | refused | unknown
    reason: str  # one line for the record or the refusal


def decide(
    capability: tuple[int, int], listing: list[str] | str, framework: str, version: str
) -> ArchDecision:
    """Whether ``framework`` ``version``, built for ``listing``, can train on a GPU of
    ``capability``: natively, through PTX (a warning), not at all (refused), or unknown (the
    build lists nothing the kit can read)."""
    major, minor = capability
    archs = compiled_archs(listing)
    shown = ", ".join(listing) if isinstance(listing, list) else listing
    gpu = f"compute capability {major}.{minor} (sm_{major}{minor})"
    if not archs:
        return ArchDecision(UNKNOWN, f"{framework} {version} lists no compiled architectures")
    if any(a.runs_natively_on(major, minor) for a in archs):
        return ArchDecision(NATIVE, f"{framework} {version} has sm_{major}{minor} kernels")
    if any(a.compiles_for(major, minor) for a in archs):
        return ArchDecision(
            PTX,
            f"{framework} {version} has no machine code for this GPU's {gpu}, only PTX "
            f"({shown}): kernels are compiled at their first launch (kept out of the measured "
            "window) and are not tuned for this GPU; the figures are not the GPU's best",
        )
    needed = FIRST_CUDA.get((major, minor)) or next(
        (cuda for cap, cuda in sorted(FIRST_CUDA.items(), reverse=True) if cap <= capability),
        None,
    )
    pin = f"a {framework} built with CUDA >= {needed}" if needed else f"a newer {framework}"
    return ArchDecision(
        REFUSED,
        f"{framework} {version} was built for {shown}, with no kernels for this GPU's {gpu}: "
        f"use an image or environment with {pin} (one that lists sm_{major}{minor})",
    )
