"""The test bed: this machine as N simulated hosts, and what runs on them.

Not on the mission's path (nothing below this package imports it): ``simhosts.py`` makes N
hosts, each its own network, hostname, mount and time namespace with sshd and/or slurmd
(the tests' cluster fixtures stand on it), on ``namespaces.py`` (the namespaces, subnets and
the sweep of what a killed run left) and ``daemons.py`` (sshd's and Slurm's configuration);
``rehearse.py`` is ``dlperf run --simulated-hosts`` (a real matrix on them before a cluster is
booked); ``costcurve.py`` is ``dlperf selftest --nodes`` (the kit's error and its own cost as
the node count grows).
"""
