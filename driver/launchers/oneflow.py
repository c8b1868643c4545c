"""OneFlow's own launcher, ``python -m oneflow.distributed.launch``, behind a thin supervisor.

The plug-in starts OneFlow's launcher with the node's rendezvous (``--nnodes --node_rank
--nproc_per_node --master_addr --master_port``); it exports MASTER_ADDR/PORT, WORLD_SIZE, RANK
and LOCAL_RANK to each process, which is what ``oneflow.env`` reads.

The supervisor (this module's ``main``, stdlib only: it runs in the framework's environment)
exists for two gaps of oneflow 0.9.0's launcher:

- when a process fails, the launcher raises ``CalledProcessError`` and exits 1, so a benchmark's
  out-of-memory exit code (86, which ``batch_size: max`` relies on) is lost. The supervisor
  passes the output through and exits 86 when a rank printed a ``{"dlperf": "oom"}`` record;
- the launcher stops its processes with ``killpg(os.getpid())``, which only works when it leads
  its own process group: the supervisor starts it in a new session and sweeps that group when
  the launcher exits or the supervisor is terminated (or dies: the launcher gets SIGTERM then),
  so no rank is left behind. Process handling: ``driver.bench.supervisor``.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

from driver.bench.protocol import EXIT_OOM, has_oom_record
from driver.bench.supervisor import NESTED_GRACE_S, signal_group, start, stop, stop_on_signals
from driver.launchers.base import LAUNCHERS, NodeRank
from driver.launchers.builtin import module_command, single_process


@LAUNCHERS.register("oneflow")
class OneflowLaunch:
    name = "oneflow"
    # OneFlow groups ranks into nodes by the address their control connection comes from:
    # nodes on loopback addresses all come from 127.0.0.1, and such a job hangs at its first
    # collective (OneFlow/README.md). The planner refuses it (command.check_placement).
    nodes_told_apart_by_address = True

    def command(self, python: str, script_argv: list[str], rank: NodeRank) -> list[str]:
        launch = module_command(
            python, "oneflow.distributed.launch", rank.rendezvous_flags("_"), script_argv,
            separator=False,
        )  # fmt: skip
        return single_process(python, script_argv, rank) or [
            python, "-m", "driver.launchers.oneflow", "--", *launch
        ]


def main(argv: list[str] | None = None) -> int:
    command = list(sys.argv[1:] if argv is None else argv)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        print("usage: python -m driver.launchers.oneflow -- <launcher command>", file=sys.stderr)
        return 2
    launcher = start(
        command,
        new_group=True,
        parent_death_signal=signal.SIGTERM,  # it forwards SIGTERM to its ranks
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    stop_on_signals(lambda: stop([launcher], groups=True, grace_s=NESTED_GRACE_S))
    saw_oom = threading.Event()

    def relay() -> None:
        assert launcher.stdout is not None
        out = sys.stdout.buffer
        for line in iter(launcher.stdout.readline, b""):
            if has_oom_record(line):
                saw_oom.set()
            out.write(line)
            out.flush()

    reader = threading.Thread(target=relay, daemon=True)
    reader.start()
    code = launcher.wait()
    signal_group(launcher.pid, signal.SIGKILL)  # ranks the launcher may have left behind
    reader.join(timeout=NESTED_GRACE_S)
    if code != 0 and saw_oom.is_set():
        return EXIT_OOM
    return code


if __name__ == "__main__":
    sys.exit(main())
