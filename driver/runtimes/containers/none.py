"""No container: the node's own Python; over SSH each node's command as a process group the
kit holds itself, under Slurm the step's tasks as srun starts them.

Over SSH, for hosts that have the framework installed directly: each node runs the command with its
own interpreter (inventory ``python``: one path, or one per framework) in a copy of the kit's code
under its scratch folder. The process is the SSH session's own process-group leader (sshd starts
every session in a new session), so stopping a node is one signal to that group; its pid is kept in
the run folder, with ``DLPERF_RUN_ID`` in its environment, so that a later run can find and end a
leftover without ever signalling an unrelated process that reused the pid.

    dlperf run --runtime ssh --inventory inventory.yaml ...      # with `container: none`
    dlperf run --runtime process --inventory inventory.yaml ...  # the same, spelt as before

Under Slurm the nodes' own Python runs the kit's framework venvs at the same paths as here (a
shared file system). A platform that only wraps the command (apptainer) is
:class:`HeldProcessGroup` with its :meth:`~driver.runtimes.containers.ContainerPlatform.wrap`.

On this host (the local runtime, its default) each node's command is a process group of this
host with the kit's venvs, as it always was: nothing here changes it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from driver.cluster.remote import Remote, shell
from driver.files import write_bytes, write_text
from driver.runtimes.containers import PLATFORMS
from driver.runtimes.local_platform import HostRun, LocalPlatform
from driver.runtimes.slurm.platform import SlurmPlatform
from driver.runtimes.ssh.platform import SshPlatform

if TYPE_CHECKING:
    from driver.cluster.inventory import Node
    from driver.runtimes.plan import NodeCommand
    from driver.runtimes.ssh.launch import Launch, Prepared

GRACE_S = 5

# Signal a run's process group if (and only if) a process of it carries the run's id.
_OWNED = (
    'owned() { for p in $(pgrep -g "$1" 2>/dev/null || echo "$1"); do '
    'tr "\\0" "\\n" < /proc/$p/environ 2>/dev/null | grep -qx "DLPERF_RUN_ID=$2" && return 0; '
    "done; return 1; }"
)


class HeldProcessGroup(SshPlatform, SlurmPlatform):
    """Over SSH the kit starts, stops and times each node's process group itself (a platform
    that only wraps the command, apptainer, runs in that group too); under Slurm, srun's tasks."""

    name = "none"

    def mounts(self, node: Node, code: str) -> list[str]:
        """What a wrapping platform mounts on a node: the kit's code, the data, the inventory's."""
        data = [f"{node.data_dir}:{node.data_dir}:ro"] if node.data_dir else []
        return [f"{code}:{code}:ro", *data, *node.container.mounts]

    def probe_command(self, remote: Remote, code: str, image: str | None, framework: str) -> str:
        node = remote.node
        python = self.python(framework) or node.python_for(framework)
        probe = [python, "-m", "driver.cluster.probe"]
        argv = self.wrap(probe, image, self.mounts(node, code), code, bool(node.container.gpus))
        return f"cd {shell([code])} && {shell(['env', f'PYTHONPATH={code}', *argv])}"

    def sweep(self, remote: Remote, label: str) -> str:
        runs = f"{remote.node.scratch_dir.rstrip('/')}/runs/{label}"
        script = (
            f"{_OWNED}; cd {shell([runs])} 2>/dev/null || exit 0; "
            'for f in */pid; do [ -f "$f" ] || continue; run=${f%/pid}; pid=$(cat "$f"); '
            'if [ -n "$pid" ] && owned "$pid" "$run"; then '
            'kill -KILL -- "-$pid" 2>/dev/null && echo "$run"; fi; done; '
            f"cd / && rm -rf {shell([runs])}"
        )
        result = remote.run(script, timeout=60)
        killed = result.stdout.split()
        return f"killed leftover process groups {', '.join(killed)}" if killed else ""

    def create(
        self, launch: Launch, env: dict[str, str], prepared: Prepared, labels: dict[str, str]
    ) -> None:
        # Nothing to do on the node yet: its start command makes the run folder itself (one
        # SSH command per node fewer on every repeat).
        code = prepared.code_dirs[launch.remote.node.name]
        framework, source = prepared.framework, prepared.source
        argv = self.node_argv(launch, framework, code, source)
        launch.facts.update(workdir=code, labels=labels, argv=argv)
        launch.start_command = self.command_line(launch, env, code, framework, source)

    def node_argv(self, launch: Launch, framework: str, code: str, source: str) -> list[str]:
        """The launch's argv with this node's interpreter (plan_repeat knows only one), as
        the platform wraps it."""
        argv = list(launch.command.argv)
        node = launch.remote.node
        if self.python(framework) is None:
            first_python = self.context.remotes[0].node.python_for(framework)
            node_python = node.python_for(framework)
            if argv and argv[0] == first_python and node_python != first_python:
                argv[0] = node_python
        image = self.image_for(framework, node, source)
        workdir = launch.command.workdir or code
        gpus = bool(node.container.gpus)
        return self.wrap(argv, image, self.mounts(node, code), workdir, gpus)

    def command_line(
        self,
        launch: Launch,
        env: dict[str, str],
        code: str,
        framework: str,
        source: str,
        image: str = "pinned",  # noqa: ARG002 - an upstream source's image: not run here
    ) -> str:
        argv = self.node_argv(launch, framework, code, source)
        env = {**env, "DLPERF_RUN_ID": launch.run_id}
        run = launch.run_dir
        # The shell stays (no exec): after the process it stamps the end, keeps the CPU time
        # its children used (``times``), and sends the collection on this same channel.
        command = (
            f"mkdir -p {shell([run])} && "
            f"cd {shell([code])} && echo $$ > {shell([run + '/pid'])} && "
            f"date +%s.%N > {shell([run + '/started'])} && "
            f"{shell(['env', *(f'{k}={v}' for k, v in sorted(env.items())), *argv])} "
            f"> {shell([launch.log])} 2>&1 < /dev/null"
        )
        after = f"date +%s.%N > {shell([run + '/ended'])}; times > {shell([run + '/times'])}; "
        return self.collecting(launch, command, after_exit=after)

    def exit_as(self, launch: Launch) -> str:
        # A process killed by a signal makes the shell's status 128+N; the shell ends by the
        # same signal, so that the channel reports it as before (sshd's exit-signal).
        return 'if [ "$rc" -gt 128 ]; then kill -"$((rc - 128))" $$ 2>/dev/null; fi; exit $rc'

    def start_command(self, launch: Launch) -> str:
        return launch.start_command

    def stop(self, launch: Launch) -> None:
        pid_file = shell([launch.run_dir + "/pid"])
        script = (
            f'{_OWNED}; pid=$(cat {pid_file} 2>/dev/null) || exit 0; [ -n "$pid" ] || exit 0; '
            f'owned "$pid" {shell([launch.run_id])} || exit 0; '
            'kill -TERM -- "-$pid" 2>/dev/null || exit 0; i=0; '
            f'while kill -0 -- "-$pid" 2>/dev/null && [ $i -lt {GRACE_S * 10} ]; do '
            "sleep 0.1; i=$((i+1)); done; "
            'kill -KILL -- "-$pid" 2>/dev/null; exit 0'
        )
        launch.remote.run(script, timeout=GRACE_S + 60)

    def collect_script(self, launch: Launch) -> str:
        """The process's run time on the node's clock (start stamp to its exit, or to the log's
        last write when it was stopped), the CPU time of its processes, then its log."""
        run, log = launch.run_dir, shell([launch.log])
        begin, ended = shell([run + "/started"]), shell([run + "/ended"])
        times = shell([run + "/times"])
        return (
            f'printf "%s|%s|%s|%s\\n" "$(cat {begin} 2>/dev/null)" '
            f'"$(cat {ended} 2>/dev/null || stat -c %.9Y {log} 2>/dev/null)" '
            f'"$(test -f {log} && echo log)" "$(tail -n 1 {times} 2>/dev/null)"; '
            f"cat {log} 2>/dev/null"
        )

    def take_collected(self, launch: Launch, block: bytes, local: Path) -> None:
        head, _, content = block.partition(b"\n")
        begin, end, present, cpu = (head.decode("ascii", "replace").split("|") + [""] * 4)[:4]
        if present != "log":
            write_text(local, f"[dlperf] node {launch.remote.node.name}: no log was written\n")
        else:
            write_bytes(local, content)
        try:
            launch.facts.update(
                process_started_at=float(begin), process_seconds=max(0.0, float(end) - float(begin))
            )
        except ValueError:
            pass
        # ``times``' second line: the user and system time of the shell's children, e.g.
        # "0m1.234s 0m0.056s" (bash; dash prints fewer decimals).
        spent = re.findall(r"(\d+)m([\d.]+)s", cpu)
        if len(spent) == 2:
            launch.facts["process_cpu_seconds"] = round(
                sum(int(m) * 60 + float(s) for m, s in spent), 3
            )


@PLATFORMS.register("none")
class NoContainer(HeldProcessGroup, LocalPlatform):
    """No container, over SSH, under Slurm and on this host."""

    name = "none"

    def local_image(  # noqa: ARG002 - no image
        self,
        framework: str,
        variant: str,
        source: str = "dlperf",
        choice: str = "pinned",
        *,
        planned: bool = False,
    ) -> None:
        return None

    def host_command(self, command: NodeCommand, run: HostRun) -> NodeCommand:  # noqa: ARG002
        return command

    def remove_runs(self, names: list[str]) -> None:
        return  # the runtime's own process groups: ended with the repeat

    def remove_leftovers(self, label: str) -> list[str]:  # noqa: ARG002
        return []  # a leftover process: the runtime's clean_local_leftovers ends it
