"""Argument types shared by the ``dlperf`` commands: bounded numbers, session names, options.

Each is an argparse ``type=``: a bad value is argparse's own one-line error naming the option,
exit status 2, before anything runs. The bounds are the schema's where the value has one (a
command-line value gets the same bounds as the same value in a file).
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from driver.bench.contract import parse_option_value
from driver.core.matrix import COMMAND_LINE, MatrixError
from driver.frameworks.base import REPO_ROOT

RESULTS = REPO_ROOT / "results"
REPORTS = REPO_ROOT / "reports"
RUNTIME_HELP = "local, ssh, docker, process or slurm (see docs/clusters.md)"

# A session is a folder NAME under --results, never a path (no "..", "/", or leading dot).
SESSION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
SESSION_RULE = (
    "letters, digits, '.', '_' and '-', starting with a letter or digit, at most 100 "
    "characters (a name under --results, not a path)"
)


def bounded_int(low: int, high: int) -> Callable[[str], int]:
    """An integer in ``[low, high]`` (``1e3``, ``1.5`` and ``nan`` are not integers)."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(
                f"must be an integer from {low} to {high}, got {text!r}"
            )
        return value

    return parse


def bounded_float(
    low: float, high: float, *, low_open: bool = False, high_open: bool = False, unit: str = ""
) -> Callable[[str], float]:
    """A finite number in the interval from ``low`` to ``high`` (each end closed unless open)."""
    interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    what = f"a finite number in {interval}{f' ({unit})' if unit else ''}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        above = value > low if low_open else value >= low
        below = value < high if high_open else value <= high
        if not (math.isfinite(value) and above and below):
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
        return value

    return parse


def bounded_float_list(low: float, high: float, *, unit: str = "") -> Callable[[str], str]:
    """Comma-separated numbers, each finite and in ``[low, high]``; the text, normalised."""
    one = bounded_float(low, high, unit=unit)

    def parse(text: str) -> str:
        items = [item.strip() for item in text.split(",")]
        if not all(items):
            raise argparse.ArgumentTypeError(
                f"expects comma-separated numbers (e.g. 1,16,64), got {text!r}"
            )
        values = [f"{one(item):g}" for item in items]
        twice = sorted({v for v in values if values.count(v) > 1}, key=values.index)
        if twice:
            raise argparse.ArgumentTypeError(
                f"{text!r} names {', '.join(twice)} {unit} more than once; give each value once"
            )
        return ",".join(values)

    return parse


def session_name(text: str) -> str:
    """``--session`` as an argparse type: a folder name under --results."""
    if not SESSION_NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a session name: {SESSION_RULE}")
    return text


def check_session_name(text: str) -> str:
    """``--session`` checked after parsing (``dlperf run``): a path would write outside
    --results."""
    if not SESSION_NAME.fullmatch(text):
        raise MatrixError(
            COMMAND_LINE, "--session", f"{text!r} is not a session name: {SESSION_RULE}"
        )
    return text


def count_list(low: int, high: int) -> Callable[[str], tuple[int, ...]]:
    """``2,4,8``: distinct integers in ``[low, high]``, in the order given."""
    one = bounded_int(low, high)

    def parse(text: str) -> tuple[int, ...]:
        parts = [part.strip() for part in text.split(",")]
        if not any(parts):
            raise argparse.ArgumentTypeError(f"give at least one count, e.g. 2,4,8 ({low}-{high})")
        if not all(parts):  # "2,,4" or "2,4,": a count left out, not silently skipped
            raise argparse.ArgumentTypeError(
                f"{text!r} has an empty item: give counts separated by single commas, e.g. 2,4,8"
            )
        counts = tuple(one(part) for part in parts)
        if len(set(counts)) != len(counts):
            raise argparse.ArgumentTypeError(f"{text!r} names a count twice")
        return counts

    return parse


def topology_list(text: str) -> tuple[str, ...]:
    """``1n1g,1n8g,2n16g``: each checked now, so a typo fails before any process starts."""
    from driver.model.case import Topology

    labels = tuple(label.strip() for label in text.split(","))
    if not any(labels):
        raise argparse.ArgumentTypeError("give at least one topology, e.g. 1n1g,1n8g,2n16g")
    if not all(labels):
        raise argparse.ArgumentTypeError(
            f"{text!r} holds an empty item: give topologies joined by single commas, e.g. "
            "1n1g,1n8g,2n16g"
        )
    for label in labels:
        try:
            Topology.parse(label)
        except ValueError as error:
            raise argparse.ArgumentTypeError(f"{error} (e.g. 1n8g, 2n16g)") from None
    if len(set(labels)) != len(labels):
        raise argparse.ArgumentTypeError(f"a topology is named twice in {text!r}")
    return labels


def csv_items(text: str | None, flag: str, example: str) -> tuple[str, ...]:
    """``a,b,c`` -> ("a", "b", "c"): the items of a comma-separated option (None: not given).
    An empty value, an empty item or white space is a MatrixError naming ``flag``: ``--batch ''``
    or ``--batch ' 8 , max'`` is a typo or an empty make variable, never "every batch"."""
    if text is None:
        return ()
    items = text.split(",")
    if not text or not all(items) or any(char.isspace() for char in text):
        raise MatrixError(
            COMMAND_LINE,
            flag,
            f"{text!r}: give one value or several joined by single commas, without spaces or "
            f"empty items (e.g. {example}); leave the option out for the matrix's own values",
        )
    twice = sorted({item for item in items if items.count(item) > 1}, key=items.index)
    if twice:
        raise MatrixError(
            COMMAND_LINE, flag, f"{text!r} names {', '.join(twice)} more than once; give each once"
        )
    return tuple(items)


class Once(argparse.Action):
    """An option that takes one value: given twice (``--batch 8 --batch 16``) is an error, not
    the last one silently kept."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        if getattr(namespace, f"_given_{self.dest}", False):
            parser.error(
                f"{option_string} is given twice ({getattr(namespace, self.dest)!r} and "
                f"{values!r}): give it once (a list joined by commas where it takes several)"
            )
        setattr(namespace, f"_given_{self.dest}", True)
        setattr(namespace, self.dest, values)


def option_pair(text: str) -> tuple[str, object]:
    """KEY=VALUE; the name and the value's type are checked against the framework later."""
    key, sep, value = text.partition("=")
    if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,62}", key):
        raise argparse.ArgumentTypeError(
            f"expects KEY=VALUE with KEY an option name (letters, digits, _), got {text!r}"
        )
    return key, parse_option_value(value)


def free_text(kind: str) -> Callable[[str], str]:
    """Free text given on the command line (a title, a changelog, a note, a label) as an
    argparse type: checked as every free text at input (``driver.text``: no control or format
    character, at most ``LIMITS[kind]`` characters) and without HTML tags."""
    from driver.text import check_plain_text

    def parse(text: str) -> str:
        try:
            return check_plain_text(text, kind)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return parse


def fraction(text: str) -> float:
    """A share strictly between 0 and 1 (``0.05``: 5%)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1 (0.05: 5%), got {text!r}")
    return value


def reports_and_results(parser: argparse.ArgumentParser) -> None:
    """``--reports`` and ``--results``: the folders of released versions and of sessions."""
    parser.add_argument("--reports", default=str(REPORTS), help="the reports folder")
    parser.add_argument("--results", default=str(RESULTS), help="the results folder")


def signing_key_option(parser: argparse.ArgumentParser, what: str) -> None:
    """``--signing-key PATH``: the private SSH key that signs ``what`` (driver/signing.py)."""
    parser.add_argument(
        "--signing-key",
        metavar="PATH",
        help=f"private SSH key that signs {what} (default: $DLPERF_SIGNING_KEY; neither set: "
        "unsigned, and released only as unsigned)",
    )


def allowed_signers_option(parser: argparse.ArgumentParser) -> None:
    """``--allowed-signers FILE``: the keys whose signatures are trusted (git's format)."""
    parser.add_argument(
        "--allowed-signers",
        metavar="FILE",
        help="the keys trusted to sign sessions and versions, one '<principal> <key type> "
        "<public key>' per line (git's format; default: $DLPERF_ALLOWED_SIGNERS, else "
        "~/.config/dlperf/allowed_signers, else the reports folder's own allowed_signers, "
        "which the verdict then names)",
    )
    parser.add_argument(
        "--require-signed",
        action="store_true",
        help="refuse (fail) any session or version that no trusted key signed (audit: trusted "
        "by a file from outside the reports folder: --allowed-signers, $DLPERF_ALLOWED_SIGNERS "
        "or ~/.config/dlperf/allowed_signers)",
    )


def check_trust_anchor(args: argparse.Namespace, reports: Path) -> str | None:
    """The error of an allowed-signers file named by --allowed-signers or
    $DLPERF_ALLOWED_SIGNERS that cannot be read (missing, a folder, a FIFO), else None."""
    from driver.release.signatures import trust_anchor
    from driver.signing import SigningError

    try:
        trust_anchor(args.allowed_signers, reports)
    except SigningError as error:
        return str(error)
    return None


def lock_or_inventory_errors() -> tuple[type[BaseException], ...]:
    """The errors of a bad images lock or cluster inventory: a command prints them in one line
    and exits 2 (imported when a command runs: loading the commands stays cheap)."""
    from driver.cluster.inventory import InventoryError
    from driver.images.lock import LockError

    return (LockError, InventoryError)
