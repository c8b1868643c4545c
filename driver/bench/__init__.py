"""Everything that runs inside a benchmark process (stdlib only: framework environments).

- ``protocol``: the step-log records, the OOM record and its exit code, the weights checksum.
- ``contract``: the driver's argument list and the shared knobs every script resolves alike.
- ``host``: cores and CPU threads per process, the CPU's name.
- ``loop``: ``run_benchmark(adapter)``, the one training loop over a framework adapter.
- ``shapes``: the model shapes (``BertShape``, ``ImageShape``) and the name -> builder lookup.
- ``supervisor``: starting and stopping a node's process tree (launcher wrappers, runtimes).
"""
