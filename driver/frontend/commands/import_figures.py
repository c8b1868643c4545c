"""``dlperf import``: an import file of published figures, checked, with what the kit derives."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from driver.frontend.args import RESULTS, free_text


def cmd_import(args: argparse.Namespace) -> int:
    """Check an import file of published figures and show what the kit derives from them."""
    from driver.core.report import write_report
    from driver.core.summary import summarize
    from driver.release.imported import figure_summary, load_import, unknown_device_warning
    from driver.schema import ConfigError

    path = Path(args.file)
    try:
        loaded = load_import(path)
    except ConfigError as error:
        print(f"import refused: {error}", file=sys.stderr)
        return 2
    warning = unknown_device_warning(path, loaded)
    if warning:
        print(warning, file=sys.stderr)
    summaries = summarize([], published=[figure_summary(f) for f in loaded.figures])
    # Under the results folder, never beside the file: an import file may be the kit's own
    # published data (published/), which a plain `dlperf import` must leave as it is.
    out = Path(args.out) if args.out else RESULTS / "imports" / f"{path.stem}-report"
    publishers = sorted({str(s.published_by) for s in summaries})
    preamble = (
        f"{len(summaries)} published figure(s) from `{path.name}` (published by "
        f"{', '.join(publishers)}): rates as published, not measured by this kit. Give the "
        "file to `dlperf report`, `factor` or `compare` beside sessions and versions."
    )
    paths = write_report(summaries, out, args.title or f"published figures: {path.name}", preamble)
    if args.json:
        print(paths["json"].read_text(), end="")
    else:
        print(paths["markdown"].read_text())
    print(f"written: {', '.join(str(p) for p in paths.values())}", file=sys.stderr)
    return 0


def add_subcommands(sub: argparse._SubParsersAction) -> None:
    imported = sub.add_parser(
        "import",
        help="published figures (CSV or YAML, docs/reports.md): checked, with their derived "
        "speedups and efficiencies; then give the file to report, factor or compare",
    )
    imported.add_argument("file", help="an import file: .csv, .yaml or .yml")
    imported.add_argument(
        "--out", help="report folder (default: results/imports/<file name>-report in the kit)"
    )
    imported.add_argument("--title", type=free_text("name"))
    imported.add_argument("--json", action="store_true", help="the derived rows as JSON")
    imported.set_defaults(func=cmd_import)
