"""Log parsers, one module per log format (see ``base.LogParser``)."""
