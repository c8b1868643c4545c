"""One module per ``dlperf`` command: its parser beside its handler (``add_subcommands``)."""
