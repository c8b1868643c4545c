"""Parity: the kit as ``dlperf run`` starts it, beside a bare loop of the same model.

For one framework, model, batch, precision and variant, :func:`run_parity` plans the case the way
``dlperf run`` does (the framework's matrix under the profile ``auto`` chooses on this host, the
command line's narrowing and overrides: ``driver.core.matrix``), then runs in turn, for
``rounds`` rounds:

- the kit: ``dlperf run`` of exactly that case, one repeat, as a user starts it, in a process of
  its own on a pseudo-terminal: the driver with its runner, local runtime, supervisor,
  telemetry sampler and progress bar, the benchmark script under it, a session written under
  ``results``. Its throughput is the session's record (the window the kit always measures);
- the bare loop (``<Framework>/bare_loop.py``): build, synthetic batch, forward/backward/step,
  a timer around whole steps, one host sync at the end, in a fresh process with the same
  interpreter, environment and CPU threads.

Like with like, by construction: before the rounds, the kit's benchmark command (the node
command of the same plan) is started until its header, which records every option as the kit
resolved it (its defaults, the device, the AMP dtype, the threads, ...). Each option that
changes the computation (all of them but :data:`handing.NOT_HANDED`) is handed to the bare loop,
which applies it in plain framework code or refuses it with a one-line reason; its result line
says what it applied, read back from the framework, and every round fails unless that equals
what the kit's header of that round records (:func:`reading.check_same_work`).

The order alternates (bare first in odd rounds, kit first in even ones) so that a drift of the
machine's load weighs on both sides alike. Each side's CPU share over its measured window (its
CPU time / (window x threads)) shows how much of the cores the machine's other work left it;
the kit's driver's own CPU time over the kit's window (sampled from ``/proc`` once a second by
this process) is the harness's cost that no load can hide.

One module per step: ``records.py`` (the request, each side's run, the pairs), ``plan.py`` (the
request checked, the case planned), ``commands.py`` (what each side runs), ``handing.py`` (the
kit's header options handed to the bare loop), ``process.py`` and ``cpu.py`` (one process run,
its CPU time sampled), ``reading.py`` (each side's result, the same-work check), ``rounds.py``
(:func:`run_parity`), ``report.py`` (:func:`format_result`).
"""

from driver.studies.parity.records import ParityError, ParityRequest, ParityResult
from driver.studies.parity.report import format_result
from driver.studies.parity.rounds import run_parity

__all__ = ["ParityError", "ParityRequest", "ParityResult", "format_result", "run_parity"]
