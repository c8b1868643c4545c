"""``python -m driver``: the ``dlperf`` command without its installed entry point (a machine
whose own interpreter runs the kit from a checkout, with the driver's packages on PYTHONPATH)."""

import sys

from driver.frontend.cli import main

sys.exit(main())
