"""The GPU check on the node: its stages' processes, which never outlive the check, and the
node's facts (nvidia-smi, NVML, torch's view, the processes already on the GPU)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from driver.diagnose.gpucheck.stages import INTERRUPT_GRACE_S, StageResult

REPO_ROOT = Path(__file__).resolve().parents[3]


PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """This process gets SIGTERM when the shell that started it dies (even by SIGKILL), and
    SIGTERM ends the check as SIGINT does: every stage is stopped first."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    signal.signal(signal.SIGTERM, _terminated)
    # Started in the background by tools/gpu-check.sh, this process inherits SIGINT ignored,
    # and so would every stage, which the budget stops with SIGINT: restore it.
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _terminated(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def start_stage(argv: list[str], env: dict[str, str], **popen: Any) -> subprocess.Popen:
    """A stage's process: its own process group (stopped as a whole at the budget), and
    SIGKILL when the check dies, even by SIGKILL (the check publishes nothing more then, so
    nothing is gained by letting the stage seal its session); the kit's local runtime ties each
    benchmark to the stage's driver the same way (SIGTERM, launchers stop their ranks)."""
    from driver.bench.supervisor import start

    return start(argv, parent_death_signal=signal.SIGKILL, new_group=True, cwd=REPO_ROOT,
                 env=env, stdin=subprocess.DEVNULL, **popen)  # fmt: skip


def run_command(
    argv: list[str], log: Path, timeout_s: float, env: dict[str, str]
) -> tuple[int | None, str]:
    """Run to the end or to ``timeout_s``; then SIGINT (the kit keeps finished repeats), then
    SIGKILL after a grace. (exit code or None when killed, how it ended)."""
    with open(log, "ab") as out:
        process = start_stage(argv, env, stdout=out, stderr=subprocess.STDOUT)
        try:
            return process.wait(timeout=max(timeout_s, 1.0)), ""
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGINT)
            try:
                code = process.wait(timeout=INTERRUPT_GRACE_S)
                return code, f"cut at the budget after {timeout_s:.0f} s (interrupted)"
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                return None, f"cut at the budget after {timeout_s:.0f} s (killed)"
        finally:  # the check itself interrupted or terminated: take the stage's group with it
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            if process.poll() is None:
                process.wait()


def run_quiet(argv: list[str], env: dict[str, str], timeout_s: float) -> tuple[int, str, str]:
    """A short command's (exit code, stdout, stderr), stopped at ``timeout_s`` and with the
    check (OSError, subprocess.TimeoutExpired as subprocess.run raises them)."""
    process = start_stage(argv, env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
        return process.returncode, stdout, stderr
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        if process.poll() is None:
            process.wait()


def collect_facts(python: str, work: Path, env: dict[str, str]) -> StageResult:
    """The node as the kit and its tools see it; raw outputs kept for test fixtures. The
    compute-apps query shows a GPU that something else is using."""
    facts = work / "facts"
    facts.mkdir(parents=True, exist_ok=True)
    commands = {
        "fingerprint.json": [sys.executable, "-m", "driver.bench.fingerprint"],
        "nvml.txt": [sys.executable, "-c", "from driver.telemetry.sampler import nvml_status; "
                     "print(nvml_status())"],
        "torch.json": [python, "-c", TORCH_FACTS],
        "nvidia-smi.txt": ["nvidia-smi"],
        "nvidia-smi-q.txt": ["nvidia-smi", "-q"],
        "nvidia-smi-query.csv": ["nvidia-smi", f"--query-gpu={smi_fields()}",
                                 "--format=csv,noheader,nounits"],
        "nvidia-smi-compute-apps.csv": ["nvidia-smi", "--query-compute-apps="
                                        "pid,process_name,used_memory", "--format=csv"],
        "nvidia-smi-topo.txt": ["nvidia-smi", "topo", "-m"],
        "lscpu.txt": ["lscpu"],
        "uname.txt": ["uname", "-a"],
    }  # fmt: skip
    started, problems = time.monotonic(), []
    for name, argv in commands.items():
        try:
            code, stdout, stderr = run_quiet(argv, env, 60)
            text = stdout + (f"\n[stderr]\n{stderr}" if stderr.strip() else "")
            if code != 0:
                problems.append(f"{name}: exit {code}")
        except (OSError, subprocess.TimeoutExpired) as error:
            text = f"not run: {error}"
            problems.append(f"{name}: {error}")
        (facts / name).write_text(text)
    busy = gpu_processes(facts / "nvidia-smi-compute-apps.csv")
    if busy:
        problems.insert(0, f"the GPU is in use already: {busy}")
    return StageResult(
        "facts", "ok", time.monotonic() - started, 0, "; ".join(problems) or "all read"
    )


def gpu_processes(csv_file: Path) -> str:
    """The processes nvidia-smi lists on the GPU, one ``pid name MiB`` each ('' for none)."""
    try:
        lines = csv_file.read_text().splitlines()
    except OSError:
        return ""
    if not lines or not lines[0].startswith("pid"):
        return ""
    return "; ".join(line.strip() for line in lines[1:] if line.strip() and "[stderr]" not in line)


TORCH_FACTS = """
import json, torch
facts = {"torch": torch.__version__, "cuda": torch.version.cuda,
         "cuda_available": torch.cuda.is_available()}
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    facts.update(name=p.name, capability=f"{p.major}.{p.minor}",
                 multiprocessors=p.multi_processor_count, memory_gib=p.total_memory / 2**30,
                 bf16=torch.cuda.is_bf16_supported(), cudnn=torch.backends.cudnn.version(),
                 devices=torch.cuda.device_count(), arch_list=torch.cuda.get_arch_list())
print(json.dumps(facts, indent=1))
"""


def smi_fields() -> str:
    from driver.bench.fingerprint import SMI_QUERY

    return ",".join(SMI_QUERY)


def probe_python(python: str, code: str, env: dict[str, str]) -> tuple[bool, str]:
    """Run ``code`` under ``python``: (it exited 0, its last words: the last line it printed,
    or why it could not start)."""
    try:
        exit_code, stdout, stderr = run_quiet([python, "-c", code], env, 300)
    except (OSError, subprocess.TimeoutExpired) as error:
        return False, str(error)[:300]
    lines = [line.strip() for line in (stderr + stdout).splitlines() if line.strip()]
    return exit_code == 0, (lines[-1] if lines else f"exit {exit_code}")[:300]


def framework_sees_gpu(python: str, env: dict[str, str]) -> tuple[bool, str]:
    """(torch under ``python`` sees a GPU, the probe's last words when it does not)."""
    probe = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no GPU found')"
    return probe_python(python, probe, env)


def jax_unfit(python: str, env: dict[str, str], on_gpu: bool) -> str:
    """Why JAX under ``python`` cannot run the check's JAX stage ('' where it can): Flax and
    Optax importable beside it, and on a GPU node its GPU backend. A node image without JAX is
    common: the stage is then skipped, naming why, and the rest of the check runs."""
    imported, last = probe_python(
        python, "import flax, jax, optax; print(jax.default_backend())", env
    )
    if not imported:
        return f"no JAX with Flax and Optax under {python} ({last}); give one with --jax-python"
    if on_gpu and last != "gpu":
        return f"JAX under {python} has no GPU backend (its default: {last})"
    return ""


def gpus_listed(env: dict[str, str]) -> str:
    """The GPUs ``nvidia-smi -L`` lists ('' where it lists none or is missing): a node with
    one that torch does not see is broken for the check, not a CPU to rehearse on."""
    try:
        code, stdout, _stderr = run_quiet(["nvidia-smi", "-L"], env, 60)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    gpus = [line.split(" (UUID")[0] for line in stdout.splitlines() if line.startswith("GPU ")]
    return "; ".join(gpus) if code == 0 else ""
