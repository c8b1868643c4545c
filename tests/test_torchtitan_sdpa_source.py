"""The torchtitan 0.2.2 upstream source (PyTorch/upstream/torchtitan-0.2): Llama 3 with SDPA, the
attention kernel of torchtitan's published figures. Its rendered commands, the attention the
case records and the flavor it passes, its pairing with the published figures in ``dlperf
factor``, and torchtitan 0.3.0's SDPA refusal pointing at it.

The release cannot train on a CPU unedited (trace.yaml: ``train.py:90`` sets the CUDA device
whatever the machine). Where an environment with the pinned wheel is present
(``DLPERF_TORCHTITAN_022_PYTHON``, or ``.venvs/torchtitan-0.2``; docs/upstream.md says how to make
it) and a snapshot of the repository holds the pinned TOMLs, the release itself parses every
rendered command over them, and its own ``MetricsProcessor.log`` writes the step lines the
parser reads.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from driver.analysis.compare import load_side, side_of_summaries
from driver.analysis.factor import factor_report
from driver.core.summary import CaseSummary
from driver.frameworks.base import REPO_ROOT
from driver.model.case import Case
from driver.model.measure import Window, case_stats, measure_repeat
from driver.parsers._runheader import header_line
from driver.parsers.base import PARSERS
from driver.parsers.torchtitan import clock
from driver.plugins import load_all
from driver.sources.spec import SourceError, load_spec, load_specs
from driver.sources.upstream import SPECS, UpstreamSource
from tests.llm_sources import (
    SourceCases,
    assert_torchtitan_window_and_switches,
    node_rank,
    source_python,
    value,
)

load_all()

SPEC = SPECS["torchtitan-0.2"]
PUBLISHED = REPO_ROOT / "published" / "llama3" / "torchtitan.yaml"
RELEASE_DIR = "/workspace/src/torchtitan-0.2.2"
CONFIGS = f"{RELEASE_DIR}/torchtitan/models/llama3/train_configs"
H100 = "NVIDIA H100 80GB HBM3"
MIRROR = Path("/work/.mirror/pytorch+torchtitan/repo")

SOURCE = SourceCases(SPEC)
cases, case_of, argv_of = SOURCE.cases, SOURCE.case_of, SOURCE.argv_of


def with_attention(topology: str, variant: str, attention: str) -> Case:
    case = case_of(topology, variant)
    return replace(case, options={**case.options, "attention": attention})


# --- the commands ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("topology", "variant", "flavor"),
    [("1n8g", "8b", "8B"), ("1n8g", "8b-compile", "8B"), ("4n32g", "8b", "8B"),
     ("4n32g", "70b", "70B")],
)  # fmt: skip
def test_each_node_starts_the_release_on_its_toml_with_the_sdpa_flavor(
    topology: str, variant: str, flavor: str
) -> None:
    case = case_of(topology, variant)
    assert case.options["attention"] == "sdpa" and case.source == "torchtitan-0.2"
    nodes, procs = case.topology.nodes, case.topology.devices_per_node
    for node in (0, nodes - 1):
        argv = argv_of(case, node)
        assert argv[: argv.index("torchtitan.train") + 1] == [
            "env", f"PYTHONPATH={RELEASE_DIR}", "PYTORCH_ALLOC_CONF=expandable_segments:True",
            "torchrun", "--nnodes", str(nodes), "--node_rank", str(node),
            "--nproc_per_node", str(procs), "--master_addr", "10.0.0.11",
            "--master_port", "29500", "--local-ranks-filter", "0", "--tee", "3",
            "-m", "torchtitan.train",
        ]  # fmt: skip
        assert value(argv, "--job.config-file") == f"{CONFIGS}/{case.options['config']}.toml"
        assert value(argv, "--model.flavor") == flavor  # SDPA, causal (args.py:45)
        assert_torchtitan_window_and_switches(
            argv, case, "--model.hf-assets-path", "--training.dataset-path",
            ("--metrics.disable-color-printing", "--profiling.no-enable-profiling",
                   "--metrics.no-enable-tensorboard", "--checkpoint.no-enable",
                   "--validation.no-enable"),
        )  # fmt: skip


def test_the_attention_option_picks_the_flavor_and_what_the_release_lacks_is_refused() -> None:
    upstream = UpstreamSource(SPEC)
    flex = argv_of(with_attention("1n8g", "8b", "flex"), 0)
    varlen = argv_of(with_attention("1n8g", "8b", "varlen"), 0)
    assert value(flex, "--model.flavor") == "8B_flex"
    assert value(varlen, "--model.flavor") == "8B_varlen"
    with pytest.raises(ValueError, match=r"no flex_flash .*source torchtitan\)"):
        upstream.launch_for(with_attention("1n8g", "8b", "flex_flash"))
    for attention in ("flex", "varlen"):
        with pytest.raises(ValueError, match="llama3_70b takes attention sdpa only"):
            upstream.launch_for(with_attention("4n32g", "70b", attention))
    # a kernel neither release has: refused, never rendered as the TOML's SDPA flavor
    with pytest.raises(ValueError, match=r"option attention 'xformers' \(the pinned code knows"):
        upstream.launch_for(with_attention("1n8g", "8b", "xformers"))


def test_both_torchtitan_releases_refuse_an_attention_they_do_not_know() -> None:
    titan = SPECS["torchtitan"]
    case = next(c for c in SourceCases(titan).cases() if c.variant == "8b")
    odd = replace(case, options={**case.options, "attention": "xformers"})
    with pytest.raises(ValueError, match=r"models\.llama\.choices in .*torchtitan/source\.yaml"):
        UpstreamSource(titan).launch_for(odd)


def test_a_choices_entry_must_hold_the_options_default(tmp_path: Path) -> None:
    text = SPEC.path.read_text().replace(
        "attention: [sdpa, flex, varlen, flex_flash]", "attention: [flex, varlen]"
    )
    bad = tmp_path / "torchtitan-0.2" / "source.yaml"
    bad.parent.mkdir()
    bad.write_text(text)
    with pytest.raises(SourceError, match=r"models\.llama\.choices\.attention: does not hold"):
        load_spec(bad)


def test_torchtitan_0_3_0_refuses_sdpa_naming_this_source() -> None:
    titan = SPECS["torchtitan"]
    case = next(c for c in SourceCases(titan).cases() if c.variant == "8b")
    with pytest.raises(ValueError, match=r"run source torchtitan-0\.2 \(PyTorch/upstream/"):
        UpstreamSource(titan).launch_for(replace(case, options={**case.options,
                                                                "attention": "sdpa"}))  # fmt: skip


def test_pairs_with_must_name_another_source(tmp_path: Path) -> None:
    folder = tmp_path / "PyTorch" / "upstream" / "torchtitan-0.2"
    folder.mkdir(parents=True)
    text = SPEC.path.read_text().replace("pairs_with: torchtitan", "pairs_with: torchtitan-0.3")
    (folder / "source.yaml").write_text(text)
    with pytest.raises(SourceError, match=r"source\.yaml: pairs_with: 'torchtitan-0\.3' names no"):
        load_specs(tmp_path)


# --- pairing with the published figures ------------------------------------------------------


def measured(case: Case, tokens_per_device: float) -> CaseSummary:
    rate = tokens_per_device * case.topology.world_size / 8192  # samples/s
    return CaseSummary(
        case=case, stats=case_stats([rate]), batch_size=2, speedup=None, efficiency=None,
        throughputs=[rate], devices=[H100] * case.topology.world_size,
    )  # fmt: skip


def test_the_sdpa_cases_pair_with_the_published_figures_and_only_the_flex_pair_names_attention(
    tmp_path: Path,
) -> None:
    """One H100 80GB session ran both releases' 1n8g cases at batch 2: `dlperf factor --factor
    device` sets each beside torchtitan's published figure (H100 96GB HBM2e) of the same case.
    The 0.2.2 pair differs in nothing but the device and the release (attention sdpa on both
    sides); the 0.3.0 pair names its FlexAttention."""
    titan = SourceCases(SPECS["torchtitan"]).cases()
    ours = [
        measured(case, 6000.0)
        for case in [*cases(), *titan]
        if case.topology.label == "1n8g" and case.batch_size == 2
    ]
    mine = side_of_summaries("h100", "session", ours)
    theirs = load_side(str(PUBLISHED), tmp_path, tmp_path)
    data, text = factor_report([theirs, mine], "device", "H100 96GB HBM2e", "H100 80GB")
    pairs = {(p["b_case"], p["a_case"]): p for p in data["pairs"]}
    for variant, published in (("8b", 5762), ("8b-compile", 6667)):
        figure = f"llama/pytorch/1n8g/bs2/amp/real/{variant}/src-torchtitan"
        sdpa = pairs[(f"llama/pytorch/1n8g/bs2/amp/real/{variant}/src-torchtitan-0.2", figure)]
        assert not any(d.startswith("attention") for d in sdpa["also_differs"]), sdpa
        assert "source: torchtitan vs torchtitan-0.2" in sdpa["also_differs"]
        assert sdpa["ratio"] == pytest.approx(6000.0 / published)
        flex = pairs[(figure, figure)]
        assert "attention: sdpa vs flex" in flex["also_differs"]
        assert not any(d.startswith("source") for d in flex["also_differs"])
    assert len(pairs) == 4 and "torchtitan-0.2" in text
    # The two releases on one machine: --factor source sets them side by side
    data, _ = factor_report([mine], "source", "torchtitan", "torchtitan-0.2")
    assert {(p["a_case"].rsplit("/", 1)[-1], p["b_case"].rsplit("/", 1)[-1])
            for p in data["pairs"]} == {("src-torchtitan", "src-torchtitan-0.2")}  # fmt: skip
    assert all("attention: flex vs sdpa" in p["also_differs"] for p in data["pairs"])
    assert len(data["pairs"]) == 2


# --- the release itself, where its environment and the TOMLs are here --------------------------


def release_python() -> Path | None:
    return source_python("DLPERF_TORCHTITAN_022_PYTHON", "torchtitan-0.2")


def pinned_tomls(folder: Path) -> Path | None:
    """The release's TOMLs, read from the snapshot at their commit and held to their sha256,
    written under ``folder`` as the image places them; None where no snapshot is here."""
    if not (MIRROR / "HEAD").exists():
        return None
    assert SPEC.release is not None
    for pinned in SPEC.release.files:
        shown = subprocess.run(
            ["git", "-C", str(MIRROR), "show", f"{pinned.commit}:{pinned.path}"],
            capture_output=True, check=True,
        )  # fmt: skip
        assert hashlib.sha256(shown.stdout).hexdigest() == pinned.sha256, pinned.path
        target = folder / pinned.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(shown.stdout)
    return folder


needs_release = pytest.mark.skipif(
    release_python() is None or not (MIRROR / "HEAD").exists(),
    reason="no environment with torchtitan 0.2.2 (DLPERF_TORCHTITAN_022_PYTHON or "
    ".venvs/torchtitan-0.2; docs/upstream.md says how) or no snapshot of pytorch/torchtitan "
    "for its TOMLs; flags.yaml is the record",
)

PARSE_PROGRAM = """
import json, sys
from torchtitan.config import ConfigManager
from torchtitan.models.llama3 import llama3_args
for argv in json.load(sys.stdin):
    c = ConfigManager().parse_args(argv)
    print(json.dumps([c.model.flavor, llama3_args[c.model.flavor].attn_type,
                      llama3_args[c.model.flavor].attn_mask_type,
                      c.parallelism.tensor_parallel_degree, c.activation_checkpoint.mode,
                      c.training.local_batch_size, c.training.seq_len, c.training.steps,
                      c.compile.enable, c.metrics.log_freq, c.metrics.enable_tensorboard,
                      c.profiling.enable_profiling, c.training.dataset_path]))
"""


@needs_release
def test_every_rendered_command_parses_with_the_release_as_the_matrix_states_it(
    tmp_path: Path,
) -> None:
    """The release's own ConfigManager, over the pinned TOMLs, resolves each command to the
    attention, tensor-parallel degree and checkpointing the matrix records for the case."""
    root = pinned_tomls(tmp_path / "release")  # not the cwd: no torchtitan/ shadows the wheel
    assert root is not None
    variants = [*cases(), with_attention("1n8g", "8b", "flex"),
                with_attention("1n8g", "8b", "varlen")]  # fmt: skip
    rendered, expected = [], []
    for case in variants:
        argv = argv_of(case, 0)
        args = argv[argv.index("torchtitan.train") + 1 :]
        rendered.append([arg.replace(RELEASE_DIR, str(root)) for arg in args])
        causal = "causal" if case.options["attention"] == "sdpa" else "block_causal"
        expected.append([
            value(argv, "--model.flavor"), case.options["attention"], causal,
            case.options.get("tensor_parallel", 1), case.options["activation_checkpointing"],
            int(case.batch_size), 8192, 50, bool(case.options.get("compile")), 1, False, False,
            f"{case.data_dir}/c4",
        ])  # fmt: skip
    run = subprocess.run(
        [str(release_python()), "-c", PARSE_PROGRAM], input=json.dumps(rendered),
        capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert [json.loads(line) for line in run.stdout.splitlines()] == expected


LOG_PROGRAM = """
import sys, time
from torchtitan.components import metrics
from torchtitan.config import ConfigManager
from torchtitan.distributed import ParallelDims
from torchtitan.tools.logging import init_logger


class HostMemory:
    # The CUDA memory monitor's place (it needs a GPU): the peak the step line prints.
    device_name = "NVIDIA H100 80GB HBM3"

    def get_peak_stats(self):
        return metrics.DeviceMemStats(50.0, 62.9, 60.1, 75.58, 0, 0)

    def reset_peak_stats(self):
        pass


metrics.build_device_memory_monitor = HostMemory
init_logger()
config = ConfigManager().parse_args(sys.argv[2:])
dims = ParallelDims(dp_replicate=1, dp_shard=1, cp=1, tp=1, pp=1, ep=1, etp=1, world_size=1)
processor = metrics.MetricsProcessor(config, dims)
processor.num_flops_per_token = 6 * 8_030_000_000
for step in range(1, int(sys.argv[1]) + 1):
    time.sleep(0.05)
    processor.ntokens_since_last_log = config.training.local_batch_size * config.training.seq_len
    processor.data_loading_times.append(0.001)
    processor.log(step, 7.5 - step / 100, 7.6, 1.25)
"""


@needs_release
def test_the_parser_reads_the_step_lines_the_release_itself_writes(tmp_path: Path) -> None:
    """The release's MetricsProcessor.log and logging formatter write 30 step lines (the GPU
    memory monitor replaced by a fixed peak: no GPU here); prefixed as torchrun --tee 3 shows
    them under the kit's run header, the torchtitan parser reads every step at the release's own
    timestamps."""
    root = pinned_tomls(tmp_path / "release")  # not the cwd: no torchtitan/ shadows the wheel
    assert root is not None
    case = replace(case_of("1n8g", "8b"), warmup_steps=10, measured_steps=20, total_steps=30)
    argv = argv_of(case, 0)
    args = [a.replace(RELEASE_DIR, str(root)) for a in argv[argv.index("torchtitan.train") + 1 :]]
    run = subprocess.run(
        [str(release_python()), "-c", LOG_PROGRAM, "30", *args],
        capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    lines = [line for line in run.stdout.splitlines() if " - INFO - step:" in line]
    assert len(lines) == 30 and lines[0].startswith("[titan] ") and "tps: " in lines[0]
    assert "\x1b[" not in run.stdout  # --metrics.disable-color-printing
    header = header_line(UpstreamSource(SPEC).header(case, node_rank(case, 0), 2))
    text = "\n".join([header, *("[default0]:" + line for line in run.stdout.splitlines())])
    parsed = PARSERS.get("torchtitan")().parse({"node0.log": text + "\n"})
    assert sorted(parsed.ranks) == [0]
    measured_repeat = measure_repeat(parsed, Window(10, 20))
    stamps = [line.split(" - ")[0].removeprefix("[titan] ") for line in lines]
    span = clock(stamps[29]) - clock(stamps[9])
    assert span > 0.9  # 20 steps of at least 50 ms each
    assert measured_repeat.throughput == pytest.approx(20 * 2 * 8 / span, rel=1e-9)
