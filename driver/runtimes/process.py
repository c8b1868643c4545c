"""The process runtime: the same node commands over SSH, without containers.

For hosts that have the framework installed directly: each node runs the command with its own
interpreter (inventory ``python``: one path, or one per framework) in a copy of the kit's code
under its scratch folder. The process is the SSH session's own process-group leader (sshd starts
every session in a new session), so stopping a node is one signal to that group; its pid is
kept in the run folder, with ``DLPERF_RUN_ID`` in its environment, so that a later run can find
and end a leftover without ever signalling an unrelated process that reused the pid.

    dlperf run --runtime process --inventory inventory.yaml ...
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from driver.cluster.code import code_dir
from driver.cluster.remote import Remote, shell
from driver.files import write_bytes, write_text
from driver.registry import RUNTIMES
from driver.runtimes.ssh import Launch, Prepared, SshRuntime

GRACE_S = 5

# Signal a run's process group if (and only if) a process of it carries the run's id.
_OWNED = (
    'owned() { for p in $(pgrep -g "$1" 2>/dev/null || echo "$1"); do '
    'tr "\\0" "\\n" < /proc/$p/environ 2>/dev/null | grep -qx "DLPERF_RUN_ID=$2" && return 0; '
    "done; return 1; }"
)


@RUNTIMES.register("process")
class ProcessRuntime(SshRuntime):
    name = "process"
    kind = "process"

    def python(self, framework: Any) -> str:
        name = getattr(framework, "name", str(framework))
        return self.inventory.nodes[0].python_for(name)

    def workdir(self) -> str:
        # Every node's own copy is substituted at launch; this is the first node's, for records.
        return code_dir(self.inventory.nodes[0].scratch_dir, self.bundle())

    def probe_command(
        self, remote: Remote, prepared_code: str, image: str | None, framework: str
    ) -> str:
        python = remote.node.python_for(framework)
        return (
            f"cd {shell([prepared_code])} && "
            f"{shell(['env', f'PYTHONPATH={prepared_code}', python, '-m', 'driver.cluster.probe'])}"
        )

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
        launch.facts.update(
            workdir=code, labels=labels, argv=self.node_argv(launch, prepared.framework)
        )
        launch.start_command = self.node_command_line(launch, env, code, prepared.framework)

    def node_argv(self, launch: Launch, framework: str) -> list[str]:
        """The launch's argv with this node's interpreter: plan_repeat knows only one."""
        argv = list(launch.command.argv)
        first_python = self.inventory.nodes[0].python_for(framework)
        node_python = launch.remote.node.python_for(framework)
        if argv and argv[0] == first_python and node_python != first_python:
            argv[0] = node_python
        return argv

    def node_command_line(
        self, launch: Launch, env: dict[str, str], code: str, framework: str, source: str = ""
    ) -> str:
        argv = self.node_argv(launch, framework)
        env = {**env, "DLPERF_RUN_ID": launch.run_id}
        return (
            f"mkdir -p {shell([launch.run_dir])} && "
            f"cd {shell([code])} && echo $$ > {shell([launch.run_dir + '/pid'])} && "
            f"date +%s.%N > {shell([launch.run_dir + '/started'])} && "
            f"exec {shell(['env', *(f'{k}={v}' for k, v in sorted(env.items())), *argv])} "
            f"> {shell([launch.log])} 2>&1 < /dev/null"
        )

    def attach_command(self, launch: Launch) -> str:
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

    def collect_node(self, launch: Launch, local: Path) -> None:
        """One command per node: the process's own run time on the node's clock (start stamp
        to the log's last write), its log byte for byte, and the run folder removed."""
        run_dir, log = shell([launch.run_dir]), shell([launch.log])
        started = shell([launch.run_dir + "/started"])
        script = (
            f'printf "%s|%s|%s\\n" "$(cat {started} 2>/dev/null)" '
            f'"$(stat -c %.9Y {log} 2>/dev/null)" "$(test -f {log} && echo log)"; '
            f"cat {log} 2>/dev/null; rm -rf {run_dir}"
        )
        code, output, _ = launch.remote.run_bytes(script, timeout=300)
        head, _, content = output.partition(b"\n")
        begin, end, present = (head.decode("ascii", "replace").split("|") + ["", "", ""])[:3]
        if code == 124:  # the caller notes the log as not fetched, the node as unclean
            raise RuntimeError("fetching the log and removing the run folder timed out")
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
