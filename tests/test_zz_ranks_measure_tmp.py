"""Temporary measurement (not committed): selftest through the process runtime, 2 sshd nodes."""
import os
import shutil
import sys
from pathlib import Path

from driver.core.selftest import run_selftest
from driver.runtimes.process import ProcessRuntime

OUT = Path(os.environ["XOUT"])
TOPS = tuple(os.environ.get("XTOPS", "2n16g").split(","))


def test_measure(inventory_file, capsys) -> None:
    inventory = inventory_file(defaults={"python": sys.executable})
    lines = []
    shutil.rmtree(OUT, ignore_errors=True)
    print("load before", os.getloadavg(), file=sys.stderr)
    run_selftest(topologies=TOPS, repeats=3, results_dir=OUT,
                 runtime=ProcessRuntime(inventory), printer=lines.append)
    print("load after", os.getloadavg(), file=sys.stderr)
    with capsys.disabled():
        print("\n".join(lines))
