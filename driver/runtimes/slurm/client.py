"""Slurm's own commands (sbatch, squeue, scontrol, scancel, srun --help), as argv lists.

Every call goes through :func:`slurm` with an argv list (no shell); a missing command or a
non-zero exit becomes :class:`SlurmError` with the command's own message.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

CALL_TIMEOUT_S = 60.0
# Job states after which a job holds no nodes (squeue's long names).
ENDED = {
    "BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY",
    "PREEMPTED", "TIMEOUT", "SPECIAL_EXIT", "REVOKED",
}  # fmt: skip


class SlurmError(RuntimeError):
    pass


def slurm(*argv: str, timeout: float = CALL_TIMEOUT_S, stdin: str | None = None) -> str:
    """Run one Slurm command; its stdout, or SlurmError naming the command and its stderr."""
    if not shutil.which(argv[0]):
        raise SlurmError(
            f"{argv[0]} not found: this host has no Slurm client (install slurm-client, or run "
            "on the cluster's login node)"
        )
    try:
        result = subprocess.run(
            list(argv), input=stdin, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{' '.join(argv)}: no answer within {timeout:.0f} s") from None
    if result.returncode != 0:
        message = (result.stderr or result.stdout).strip()
        raise SlurmError(f"{' '.join(argv)}: exit {result.returncode}: {message}")
    return result.stdout


def available() -> bool:
    return shutil.which("srun") is not None and shutil.which("sbatch") is not None


PING_TIMEOUT_S = 30.0


def ping() -> None:
    """SlurmError unless a Slurm controller answers (``scontrol ping`` exits 1 when none is UP;
    an older one may exit 0 and print DOWN)."""
    out = slurm("scontrol", "ping", timeout=PING_TIMEOUT_S)
    if " is UP" not in out:
        raise SlurmError(f"scontrol ping: {' '.join(out.split()) or 'no answer'}")


def version() -> str:
    """``slurm-wlm 22.05.8`` (Debian) or ``slurm 23.11.4``."""
    return slurm("srun", "--version").strip()


def has_pyxis() -> bool:
    """pyxis (NVIDIA's container plug-in) adds ``--container-image`` to ``srun --help``."""
    try:
        return "--container-image" in slurm("srun", "--help")
    except SlurmError:
        return False


def has_oci_container() -> bool | None:
    """Slurm's own OCI containers (21.08+) add ``--container`` (a bundle path) to ``srun
    --help``; pyxis's ``--container-image`` and friends do not count. None: srun did not
    answer (no configuration here), so nothing is known."""
    try:
        return re.search(r"^\s*--container[\s=]", slurm("srun", "--help"), re.M) is not None
    except SlurmError:
        return None


def hostnames(nodelist: str) -> list[str]:
    """``n[1-3]`` -> ``['n1', 'n2', 'n3']`` (Slurm's own expansion)."""
    return slurm("scontrol", "show", "hostnames", nodelist).split()


def fields(line: str) -> dict[str, str]:
    """``scontrol -o`` output (``Key=value Key2=value with spaces``) as a dict."""
    pairs = re.finditer(r"(?:^|\s)([A-Za-z][\w/:]*)=(.*?)(?=\s+[A-Za-z][\w/:]*=|$)", line)
    return {match.group(1): match.group(2) for match in pairs}


def node_address(name: str) -> str:
    """The address Slurm reaches a node at (NodeAddr; the name itself when not set)."""
    info = fields(slurm("scontrol", "show", "node", "--oneliner", name).strip())
    return info.get("NodeAddr") or name


@dataclass
class JobInfo:
    job_id: str
    state: str  # RUNNING, PENDING, ... ("" when Slurm no longer knows the job)
    reason: str
    nodes: str  # NodeList
    partition: str
    time_limit: str
    cpus_per_node: int
    raw: str  # scontrol show job, as it printed it

    @property
    def ended(self) -> bool:
        return self.state in ENDED or not self.state


def show_job(job_id: str) -> JobInfo:
    """The job as ``scontrol show job`` tells it; state "" once Slurm has forgotten it."""
    try:
        raw = slurm("scontrol", "show", "job", "--oneliner", job_id).strip()
    except SlurmError as error:
        if "Invalid job id" in str(error):
            return JobInfo(job_id, "", "", "", "", "", 0, "")
        raise
    info = fields(raw)
    state = info.get("JobState", "").split()[0] if info.get("JobState") else ""
    try:
        cpus_per_node = int(info.get("NumCPUs", "0")) // max(1, int(info.get("NumNodes", "1")))
    except ValueError:
        cpus_per_node = 0
    return JobInfo(
        job_id=job_id,
        state=state,
        reason=info.get("Reason", ""),
        nodes=info.get("NodeList", ""),
        partition=info.get("Partition", ""),
        time_limit=info.get("TimeLimit", ""),
        cpus_per_node=cpus_per_node,
        raw=raw,
    )


def jobs_named(name: str) -> list[str]:
    """This user's jobs called ``name`` that are still in the queue."""
    return slurm("squeue", "--noheader", "--me", f"--name={name}", "--format=%i").split()


def cancel(job_id: str) -> None:
    slurm("scancel", job_id)


def down_nodes(nodes: list[str]) -> dict[str, str]:
    """Those of ``nodes`` that Slurm sees down or not responding, with their state."""
    if not nodes:
        return {}
    out = slurm("sinfo", "--noheader", "--Node", f"--nodes={','.join(nodes)}", "--format=%N %t")
    found = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and (
            parts[1].endswith("*") or parts[1].startswith(("down", "drain", "fail"))
        ):
            found[parts[0]] = parts[1]
    return found
