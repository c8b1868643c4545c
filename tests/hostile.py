"""The hostile-input harness shared by the corpora (config, records, logs, audits).

A :class:`HostileCase` is one malformed input and the action that feeds it to the kit. Running it
gives one :class:`Verdict`:

* ``clear``: the kit refused it with one of the case's clear error types, and the message names
  what the case expects (the file, the field path);
* ``accepted``: the kit took the value, and the case's ``accepted`` check confirms it is used
  verbatim and quoted (a legitimately accepted value, e.g. an environment value ``$(id)``);
* ``vague``: a clear error type whose message misses the file or field;
* ``traceback``: any other exception (what a user would see as a Python traceback);
* ``silent``: no error, and nothing says the value is legitimately accepted.

A corpus asserts no traceback, no silent acceptance and no vague error.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from driver.schema import ConfigError

CLEAR, ACCEPTED, VAGUE, TRACEBACK, SILENT = "clear", "accepted", "vague", "traceback", "silent"


class CliRefusal(Exception):
    """The CLI exited 2 with a one-line error and no traceback (a clear refusal)."""


@dataclass(frozen=True)
class HostileCase:
    name: str
    action: Callable[[], object]
    expect: tuple[str, ...] = ()  # every one must appear in the error message
    clear_errors: tuple[type[BaseException], ...] = (ConfigError, CliRefusal)
    accepted: Callable[[object], bool] | None = None  # value legitimately accepted: used verbatim?


@dataclass(frozen=True)
class Verdict:
    case: HostileCase
    kind: str
    detail: str = ""


@dataclass
class Counts:
    verdicts: list[Verdict] = field(default_factory=list)

    @property
    def by_kind(self) -> Counter:
        return Counter(v.kind for v in self.verdicts)

    def failures(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.kind not in (CLEAR, ACCEPTED)]

    def summary(self, corpus: str) -> str:
        kinds = self.by_kind
        return (
            f"hostile {corpus} corpus: {len(self.verdicts)} cases, {kinds[TRACEBACK]} tracebacks, "
            f"{kinds[SILENT]} silent"
            + (f", {kinds[VAGUE]} vague" if kinds[VAGUE] else "")
        )


    def print_summary(self, corpus: str) -> dict:
        """Print the corpus's totals and every failure; the counts by kind."""
        print()
        print(self.summary(corpus))
        for verdict in self.failures():
            print(f"  {verdict.kind}: {verdict.case.name}: {verdict.detail}")
        return self.by_kind


def classify(case: HostileCase) -> Verdict:
    try:
        result = case.action()
    except case.clear_errors as error:
        message = str(error)
        missing = [e for e in case.expect if e not in message]
        if missing:
            return Verdict(case, VAGUE, f"message lacks {missing}: {message}")
        return Verdict(case, CLEAR, message)
    except BaseException as error:  # noqa: BLE001 - anything else is what a user sees as a crash
        if isinstance(error, KeyboardInterrupt):
            raise
        return Verdict(case, TRACEBACK, f"{type(error).__name__}: {error}")
    if case.accepted is not None and case.accepted(result):
        return Verdict(case, ACCEPTED, repr(result)[:200])
    return Verdict(case, SILENT, repr(result)[:200])


def run_corpus(cases: Iterable[HostileCase]) -> Counts:
    counts = Counts()
    names: set[str] = set()
    for case in cases:
        assert case.name not in names, f"two hostile cases named {case.name!r}"
        names.add(case.name)
        counts.verdicts.append(classify(case))
    return counts


def cli_subprocess(argv: Sequence[str], cwd: Path | None = None, timeout: float = 120) -> object:
    """Run ``python -m driver.frontend.cli ARGV``; a clean exit-2 refusal raises CliRefusal,
    a traceback raises RuntimeError, anything else is returned (a silent acceptance)."""
    done = subprocess.run(
        [sys.executable, "-m", "driver.frontend.cli", *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
    )
    if "Traceback" in done.stderr or "Traceback" in done.stdout:
        raise RuntimeError(done.stderr[-2000:])
    if done.returncode == 2:
        raise CliRefusal(done.stderr.strip())
    return done


def refused(argv: list[str], capsys: pytest.CaptureFixture[str], *expect: str) -> str:
    """``dlperf ARGV`` exits 2 with one line holding every ``expect``; the line."""
    from driver.frontend.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for text in expect:
        assert text in err, err
    return err
