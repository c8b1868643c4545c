"""A release's README.md, rendered from its numbers (``driver.release.compute``) and manifest.

Rendering is deterministic: the audit renders the README from its own recomputation and
compares it byte for byte, so any edited digit shows up, named by its line with a diff.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable
from typing import Any

from tabulate import tabulate

from driver.core.report import ExtraColumn, markdown_tables, summary_tables
from driver.core.summary import CaseRow, CaseSummary
from driver.release.compute import Computed
from driver.release.dataset import session_of
from driver.release.references import comparable
from driver.release.signatures import SIGNED, VERSION_SIGNATURE
from driver.text import markdown_code, markdown_inline, markdown_link
from driver.workloads.base import find_workload

PLOTS_DIR = "plots"


def plot_name(title: str) -> str:
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9]+", "-", title.lower())).strip("-")


def plot_files(title: str) -> tuple[str, str]:
    base = f"{PLOTS_DIR}/{plot_name(title)}"
    return f"{base}-throughput.png", f"{base}-efficiency.png"


def _num(value: Any, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _pair(median: float | None, top: float | None, digits: int = 1) -> str:
    if median is None and top is None:
        return "-"
    return f"{_num(median, digits)} / {_num(top, digits)}"


def _extra_cell(computed: Computed, key: str) -> Callable[[CaseSummary], str]:
    return lambda s: _pct(getattr(computed.rows[s.key], key))


# The layout of the README this kit writes, named in the manifest (``readme_layout``). A version
# keeps the README it was released with: one of an older layout is re-rendered byte for byte by
# the kit that released it (``dlperf audit --kit released``, driver/release/released_kit.py),
# never by branches kept here; plain ``dlperf audit`` recomputes its numbers and results files.
# 4: a summary first; per model, precision, batch and data one row per series and topology,
# split by machine (the hardware fingerprint: a "machine" column wherever a table holds two),
# with median and geometric-mean rows and ``dlperf report``'s slow-node notes; references only
# like with like; telemetry per case. 5: who signed the version and each session (a
# "Signatures" section; "unsigned" where nobody did), and a case measured above 100% efficiency
# beyond its noise tolerance marked in every table with the reason it was released with.
# 6: 5 with every free-text cell and line escaped by ``markdown_inline`` as the results tables
# are (the machines and signatures tables, who signed, each node's devices and versions, a
# probe's backend, a reference's names, an excluded repeat's detail: a label holding
# ``[x](url)``, ``**``, ``_`` or ``|`` is text there). 7: 6 with every code span fenced by
# ``markdown_code`` (a session, host, path or case named with a backtick cannot end its span
# and let what follows render live; a ``|`` in a table's span escaped).
# (1: one column group per series, every repeat's telemetry, the nearest reference whatever its
# device; 2: the long tables by device model; 3: split by machine, without the slow-node notes;
# 4: 3 with them, before signatures and the superlinear mark; 5: 6 with those cells escaped
# for ``|`` and HTML only, or not at all; 6: 7 with code spans of one backtick whatever
# they held.)
README_LAYOUT = 7
README_LAYOUTS = tuple(range(1, README_LAYOUT + 1))  # the layouts a manifest may name


def _machines_section(computed: Computed) -> str:
    """Which machine each session's cases ran on, and how that is known."""
    rows: dict[tuple[str, str], set[str]] = {}
    for repeat in computed.repeats:
        session = session_of(repeat)
        source = (
            "its logs' fingerprint"
            if repeat.hardware.origin == "fingerprint"
            else "the session's hardware.json (attested)"
            if f"{session}/hardware.json" in computed.attested
            else "its logs' header (no fingerprint recorded)"
        )
        rows.setdefault((session, repeat.fingerprint), set()).add(source)
    table = tabulate(
        [
            [markdown_code(s, cell=True), markdown_inline(m), ", ".join(sorted(how))]
            for (s, m), how in sorted(rows.items())
        ],
        headers=["session", "machine", "known from"],
        tablefmt="github",
        disable_numparse=True,
    )
    return (
        "Every row below ran on the machine its `machine` column names (a column shown where "
        "a table holds more than one); repeats of two machines are never pooled, and a "
        "speedup is always against the 1n1g of the same machine.\n\n" + table + "\n"
    )


def _signatures_section(manifest: dict[str, Any]) -> str:
    """Who vouches for this version and for each session: a signature proves these bytes, from
    that key, unchanged since; it does not prove the key holder did not make them up."""
    signatures = manifest["signatures"]
    version = signatures["version"]
    if version["status"] == SIGNED:
        head = (
            f"This version is signed by {markdown_inline(version['principal'])} "
            f"({markdown_inline(version['key'])}): {markdown_code(VERSION_SIGNATURE)}, namespace "
            "`dlperf-release`, over `manifest.json`, which holds the SHA-256 of every other file."
        )
    else:
        head = (
            "This version is **unsigned** (released without a signing key): no key vouches "
            "that its files are the ones released."
        )
    rows = []
    for name, status in sorted(signatures["sessions"].items()):
        shown = markdown_code(name, cell=True)
        if status["status"] == SIGNED:
            principal, key = markdown_inline(status["principal"]), markdown_inline(status["key"])
            rows.append([shown, "signed", principal, key])
        else:
            rows.append([shown, "**unsigned**", "-", markdown_inline(status["reason"])])
    table = tabulate(
        rows,
        headers=["session", "signature", "signed by", "key"],
        tablefmt="github",
        disable_numparse=True,
    )
    for name, status in sorted(signatures["sessions"].items()):
        adopted = status.get("adopted") or []
        if adopted:  # the seal's own record: a person vouched for them on resume (--adopt)
            shown = ", ".join(markdown_inline(rel) for rel in adopted[:5])
            table += (
                f"\n**Session {markdown_code(name)}: {len(adopted)} file(s) adopted, not "
                "measured**: whoever resumed it vouched for them (`dlperf run --adopt`), and "
                f"this kit did not measure or verify them: {shown}"
                + (f" and {len(adopted) - 5} more" if len(adopted) > 5 else "")
                + " (all in its `session-manifest.json`, `adopted`).\n"
            )
    return (
        f"{head} Each session's `session-manifest.json` (in its archive) holds the SHA-256 and "
        "size of every log and record and every rank's hardware fingerprint, sealed by the "
        "head node when the run ended and signed there where a key was configured. "
        + _trust_sentence(signatures.get("trust"))
        + " A signature proves these bytes, "
        "from that key, unchanged since they were signed; it does not prove that the key's "
        "holder did not make them up.\n\n" + table + "\n"
    )


def _trust_sentence(trust: str | None) -> str:
    """Which allowed-signers file the release trusted (versions before the kit recorded it:
    the sentence they were released with)."""
    if trust == "own":
        return (
            "The release checked these signatures against the reports folder's own "
            "`allowed_signers`, which comes with the data it vouches for (whoever can change "
            "the versions can change it): trust them only after `dlperf audit "
            "--allowed-signers FILE` with a file of keys you hold yourself. `dlperf audit` "
            "names any file changed after signing."
        )
    if trust == "outside":
        return (
            "The release checked these signatures against an allowed-signers file kept outside "
            "the reports folder; `dlperf audit` checks them against yours (`--allowed-signers "
            "FILE`, `$DLPERF_ALLOWED_SIGNERS` or `~/.config/dlperf/allowed_signers`) and names "
            "any file changed after signing."
        )
    return (
        "`dlperf audit` checks every signature against the allowed-signers file of the reports "
        "folder and names any file changed after signing."
    )


def _superlinear_notes(computed: Computed, manifest: dict[str, Any]) -> list[str]:
    reasons = manifest.get("superlinear") or {}
    return [
        f"{s.case_id}: efficiency {s.efficiency:.2%}, above 100% beyond its noise tolerance "
        f"({s.superlinear_tolerance:.2%}); released with the reason: "
        f"{reasons.get(s.case_id, '(none)')}"  # escaped with every note by core.report
        for s in computed.summaries
        if s.superlinear
    ]


def _flops_notes(models: list[str]) -> list[str]:
    """What the workloads of ``models`` (those with an MFU cell) say of their FLOPs (a
    formula's words), each once, in the tables' order."""
    workloads = [find_workload(model) for model in models]
    return list(dict.fromkeys(w.flops_note for w in workloads if w is not None and w.flops_note))


def _tables_section(computed: Computed, manifest: dict[str, Any]) -> str:
    extras = [
        ExtraColumn("bound", _extra_cell(computed, "scaling_bound"), after="efficiency"),
        ExtraColumn("MFU", _extra_cell(computed, "mfu"), after="CV"),
    ]
    notes = []
    values = computed.rows.values()
    if any(e.mfu is not None for e in values):
        notes.append(
            "MFU: model-FLOPs utilization = samples/s x training FLOPs per sample (counted from "
            "the model definition by PyTorch/benchmark/flops.py, cached in manifest.json) / "
            "(devices x dense peak of the device at the run's precision, config/peaks.yaml)."
        )
    with_mfu = [s.case.model for s in computed.summaries if computed.rows[s.key].mfu is not None]
    notes += _flops_notes(with_mfu)
    if any(e.peak_tflops and e.mfu is None for e in values):
        notes.append("MFU '-': no FLOPs count for the model (torch was absent at release).")
    if any(e.scaling_bound is not None for e in values):
        notes.append(
            "bound: efficiency ceiling of a ring all-reduce without overlap, "
            "t / (t + 2(n-1)/n x gradient bytes / busbw), with t = batch / 1-device throughput "
            "and busbw from the session's all-reduce probe at n devices (see Provenance)."
        )

    def plots(title: str, _group: list[CaseSummary]) -> str:
        throughput, efficiency = plot_files(title)
        return f"![throughput vs devices]({throughput}) ![efficiency vs devices]({efficiency})"

    return markdown_tables(
        computed.summaries,
        heading_level=3,
        extra_columns=extras,
        after_table=plots,
        extra_notes=notes + _superlinear_notes(computed, manifest),
    )


def _reference_row(s: CaseSummary, e: CaseRow) -> list[str]:
    """A case beside its nearest reference, per device."""
    config = f"{e.reference_devices} dev, bsz {e.reference_batch_per_device or '?'}, "
    config += str(e.reference_precision).upper()
    return [
        s.case_id,
        _num(s.stats.median, 2),
        _num(e.per_device, 2),
        markdown_inline(f"{e.reference_framework} ({e.reference_id})"),
        markdown_inline(e.reference_hardware),
        markdown_inline(config),
        _num(e.reference_per_device, 2),
        "-" if e.ratio_per_device is None else f"{e.ratio_per_device:.4f}",
        markdown_link(e.reference_source, e.reference_link),
    ]


def _references_section(computed: Computed) -> str:
    """The nearest published reference beside each case, like with like only (the release
    attaches a reference on the same device model and precision only)."""
    rows = []
    not_comparable: dict[str, int] = {}
    for s in computed.summaries:
        e = computed.rows[s.key]
        if not e.reference_id:
            continue
        if not comparable(s.devices, str(e.reference_hardware or "")):
            not_comparable[s.device_model] = not_comparable.get(s.device_model, 0) + 1
            continue
        rows.append(_reference_row(s, e))
    if not rows:
        return (
            "No published result on the same device model and precision as a measured case: "
            "a reference is attached only like with like (layout 3), else nothing is stored.\n"
        )
    unmatched = "".join(
        f"No comparable reference for the {count} case(s) on {model}: published results are "
        "GPU figures, and a CPU is set beside none of them.\n"
        for model, count in sorted(not_comparable.items())
    )
    headers = [
        "case",
        "samples/s",
        "per device",
        "nearest reference",
        "hardware",
        "reference config",
        "reference per device",
        "ours / reference (per device)",
        "source",
    ]
    intro = (
        "The nearest published result (config/references.yaml) beside each case that runs a "
        "model at its published shapes: same model; "
        "then same GPU family, precision, device count, framework, dataset, XLA and batch, in "
        "that order; only a GPU beside a GPU (a CPU row says so, results.json keeps the nearest "
        "figure). Compared per device, since topologies differ.\n\n"
    )
    table = tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)
    return intro + table + "\n" + (f"\n{unmatched}" if unmatched else "")


def _telemetry_per_case(computed: Computed) -> str:
    """One row per case (median of the repeats' medians / max of their maxima); every repeat's
    figures are in results.csv and results.json."""
    metrics = [("CPU % (1 core = 100)", "cpu_pct"), ("RSS MiB", "rss_mib")]
    gpu = any(
        t.get("telemetry_gpu_power_w_max") is not None for t in computed.telemetry.values()
    )
    if gpu:
        metrics += [
            ("GPU W", "gpu_power_w"),
            ("SM %", "gpu_sm_pct"),
            ("mem %", "gpu_mem_pct"),
            ("GPU mem MiB", "gpu_mem_used_mib"),
            ("SM MHz", "gpu_sm_clock_mhz"),
            ("temp C", "gpu_temp_c"),
        ]
    by_case: dict[str, list[dict[str, Any]]] = {}
    for r in computed.repeats:
        by_case.setdefault(r.case.id, []).append(computed.telemetry[r.folder])
    rows = []
    for case_id, telemetry in sorted(by_case.items()):
        windows = sorted({str(t.get("telemetry_window")) for t in telemetry})
        row: list[Any] = [case_id, len(telemetry), ", ".join(windows)]
        for _header, name in metrics:
            medians = [v for t in telemetry if (v := t.get(f"telemetry_{name}_median")) is not None]
            maxima = [v for t in telemetry if (v := t.get(f"telemetry_{name}_max")) is not None]
            median = statistics.median(medians) if medians else None
            row.append(_pair(median, max(maxima, default=None)))
        rows.append(row)
    statuses = sorted({str(t.get("telemetry_status")) for t in computed.telemetry.values()})
    intro = (
        "Per case over its repeats: the median of the repeats' medians / the largest maximum, "
        "over the measured window (`steps`: cut with the step timestamps on each node's "
        "monotonic clock; `run`: the whole run). CPU and RSS are summed over each node's "
        "process tree; GPU metrics pool every GPU. Every repeat's figures: `results.csv`, "
        f"`results.json`. GPU status: {', '.join(statuses)}.\n\n"
    )
    headers = ["case", "repeats", "window", *(h for h, _ in metrics)]
    return intro + tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True) + "\n"


def _session_lines(manifest: dict[str, Any]) -> list[str]:
    """The kit that released the version, and each session with the kit that ran it."""
    release_kit = manifest["kit"]
    out = [
        f"Released with kit {markdown_code(release_kit.get('commit'))} "
        f"(dirty: {release_kit.get('dirty')}), "
        + ", ".join(f"{k} {v}" for k, v in sorted(manifest["release_tool"].items()))
        + ".\n",
        "Sessions:\n",
    ]
    for s in manifest["sessions"]:
        kit = s.get("kit") or {}
        dirty = " (dirty)" if kit.get("dirty") else ""
        said = {k: markdown_inline(s.get(k)) for k in ("created", "head_node", "profile",
                                                      "runtime")}  # fmt: skip
        out.append(
            f"- {markdown_code(s['name'])}: created {said['created']}, "
            f"head node {said['head_node']}, "
            f"profile {said['profile']}, runtime {said['runtime']}, kit "
            f"{markdown_code(kit.get('commit'))}{dirty}; archive {markdown_code(s['archive'])} "
            f"({s['files']} files)"
        )
    return out


def _node_lines(manifest: dict[str, Any]) -> list[str]:
    """Each node, as every rank's log header describes it."""
    out = ["\nNodes (from every rank's log header):\n"]
    for host, node in sorted(manifest["nodes"].items()):
        # from every rank's log header: a device's or framework's name is free text
        versions = ", ".join(f"{k} {v}" for k, v in sorted(node.get("versions", {}).items()))
        devices = markdown_inline(", ".join(node.get("devices", [])) or "-")
        frameworks = markdown_inline(", ".join(node.get("frameworks", [])))
        out.append(
            f"- {markdown_code(host)}: devices {devices}; frameworks {frameworks}; "
            f"{markdown_inline(versions or 'no versions')}"
        )
    return out


def _image_lines(manifest: dict[str, Any]) -> list[str]:
    """The images the lock pins, and the digests the repeats ran."""
    images = manifest["images"]
    out = ["\nImages pinned in images.lock:\n"]
    if images.get("digests"):
        for name, digest in sorted(images["digests"].items()):
            out.append(f"- {markdown_code(name)}: {markdown_code(digest)}")
    else:
        out.append(f"- {images.get('note', 'none')}")
    if images.get("ran"):
        out.append("\nImage digests the repeats ran (from their records):\n")
        unlisted = set(images.get("unlisted", []))
        for digest in images["ran"]:
            where = (
                "listed by neither the lock nor the build records"
                if digest in unlisted
                else "listed"
            )
            out.append(f"- {markdown_code(digest)} ({where})")
    return out


def _provenance_section(manifest: dict[str, Any]) -> str:
    out = [*_session_lines(manifest), *_node_lines(manifest), *_image_lines(manifest)]
    out.append("\nConfig files (copies in `config/`):\n")
    for path, entry in sorted(manifest["config_files"].items()):
        out.append(
            f"- {markdown_code(path)} (from {markdown_code(entry['source'])}): "
            f"sha256 {markdown_code(entry['sha256'])}"
        )
    if manifest["model_costs"]:
        out.append("\nModel cost (from the model definitions):\n")
        for key, cost in sorted(manifest["model_costs"].items()):
            # a formula's cost needs no torch; a counted one names the torch that counted
            counted_by = f", torch {cost['torch']}" if "torch" in cost else ""
            out.append(
                f"- {markdown_code(key)}: {cost['flops_per_sample'] / 1e9:.3f} GFLOP "
                "per training sample, "
                f"{cost['parameters']} parameters ({cost['source']}{counted_by})"
            )
    probes = manifest.get("probes") or []
    if probes:
        out.append("\nAll-reduce probes:\n")
        for p in probes:
            out.append(
                f"- {markdown_code(p['session'])} {markdown_inline(p['topology'])}: "
                f"{markdown_inline(p['backend'])}, busbw {p['busbw_gbps']:.3f} GB/s at "
                f"{p['busbw_at_bytes']} bytes ({markdown_code(p['log'])})"
            )
    if manifest["excluded_repeats"]:
        out.append("\nRepeats left out (not finished ok):\n")
        for e in manifest["excluded_repeats"]:
            said = markdown_inline(f"{e['verdict']} {e['detail']}".rstrip())
            where = markdown_code(f"{e['session']}/{e['folder']}")
            out.append(f"- {where}: {said}")
    return "\n".join(out) + "\n"


def _changes_section(manifest: dict[str, Any]) -> str:
    changes = manifest.get("changes") or {}
    previous = manifest.get("previous")
    out = [manifest.get("changelog") or "First version."]
    if previous:
        out.append(f"\nChanges against {markdown_code(previous)} (computed):\n")
        for case_id in changes.get("added", []):
            out.append(f"- added {markdown_code(case_id)}")
        for case_id in changes.get("removed", []):
            out.append(f"- removed {markdown_code(case_id)}")
        for c in changes.get("changed", []):
            out.append(
                f"- {markdown_code(c['case_id'])}: median {c['previous_median']:.2f} -> "
                f"{c['median']:.2f} "
                f"samples/s (x{c['ratio']:.4f})"
            )
        if len(out) == 2:
            out.append("- no case added, removed or changed")
    return "\n".join(out) + "\n"


def readme_text(computed: Computed, manifest: dict[str, Any]) -> str:
    version = manifest["version"]
    kit = manifest["kit"]
    sessions = ", ".join(markdown_code(s['name']) for s in manifest["sessions"])
    dirty = " (dirty tree)" if kit.get("dirty") else ""
    repeats = sum(1 for r in computed.repeats if r.measurement is not None)
    published = sum(1 for s in computed.summaries if s.published_by)
    of_them = f" ({published} of them published figures, `config/published/`)" if published else ""
    head = (
        f"# {manifest['title']}\n\n"
        f"Version {markdown_code(version)}, released {manifest['released_at']} by "
        "`dlperf release` from "
        f"{sessions}; kit {markdown_code(str(kit.get('commit'))[:12])}{dirty}. "
        f"{len(computed.summaries)} cases{of_them}, {repeats} repeats.\n\n"
        f"Every number here is recomputed from the raw logs in `raw/` by "
        f"`dlperf audit reports/{version}`. `manifest.json` holds the SHA-256 of every raw file "
        "and config file, the image digests and the provenance of every node; `results.json` "
        "and `results.csv` hold every case and every repeat, every field named.\n"
    )
    return "\n".join(
        [
            head,
            "## Signatures\n",
            _signatures_section(manifest),
            "## Changelog\n",
            _changes_section(manifest),
            "## Summary\n",
            _machines_section(computed),
            summary_tables(computed.summaries),
            "## Throughput\n",
            "Per model, precision, batch and data: one row per series (framework, with its "
            "source, XLA and option variant) and topology, split by machine; the median "
            "samples/s over repeats, speedup and efficiency against 1n1g at the same batch per "
            "device on the same machine, and the coefficient of variation over repeats; then the "
            "median and geometric mean across series.\n",
            _tables_section(computed, manifest),
            "## Beside published results\n",
            _references_section(computed),
            "## Telemetry\n",
            _telemetry_per_case(computed),
            "## Provenance\n",
            _provenance_section(manifest),
        ]
    )
