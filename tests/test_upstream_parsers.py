"""Upstream log parsers on fixture logs in each source's own format.

The ``real-cpu*`` logs are real: pytorch-examples' imagenet/main.py and paddle-models' PaddleCV
and PaddleNLP BERT train.py at their pinned commits, run unchanged on CPU here (see
fixtures/upstream/*/capture_real.py); the other fixtures are written by hand in the format of
their pinned code, until a real log of them can be produced.

Every fixture run has a window of 4 warm-up + 8 measured steps (boundaries 4 and 12), set in the
DLPERF-UPSTREAM header the node command prints (the real BERT log, printed every 10 steps: 10 +
20). Expected throughputs follow from the times in
the fixtures (see each test); measurement itself is ``driver.model.measure``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from driver.model.measure import Window, measure_repeat
from driver.parsers.base import PARSERS, LogParseError, ParsedLog
from driver.plugins import load_all

FIXTURES = Path(__file__).parent / "fixtures" / "upstream"
WINDOW = Window(warmup_steps=4, measured_steps=8)


def logs(source: str, case: str) -> dict[str, str]:
    """The node logs of one fixture run, named as the runtime names them (node0.log, ...)."""
    files = sorted((FIXTURES / source).glob(f"{case}.node*.log"))
    assert files, f"no fixture {source}/{case}"
    return {path.name.split(".", 1)[1]: path.read_text() for path in files}


def parse(parser: str, source: str, case: str) -> ParsedLog:
    load_all()
    return PARSERS.get(parser)().parse(logs(source, case))


def throughput(parser: str, source: str, case: str) -> tuple[float, bool]:
    measured = measure_repeat(parse(parser, source, case), WINDOW)
    return measured.throughput, measured.reported_by_source


def fails(parser: str, source: str, case: str, *fragments: str) -> str:
    with pytest.raises(LogParseError) as caught:
        measure_repeat(parse(parser, source, case), WINDOW)
    message = str(caught.value)
    for fragment in fragments:
        assert fragment in message, message
    return message


# --- DLLogger (NGC PyTorch, NGC TF1) -------------------------------------------------------------


def test_dllogger_convnets_window_from_timestamps() -> None:
    # 2 nodes x 2 GPUs, batch 64, rank 0 logs: steps 4..12 take 8 x 0.5 s; 8 x 64 x 4 samples.
    parsed = parse("dllogger", "ngc-pytorch", "ok")
    assert parsed.world_size == 4 and parsed.samples_scale == 4 and list(parsed.ranks) == [0]
    steps = [p.step for p in parsed.ranks[0].points]
    assert steps == list(range(1, 14))  # one point per step: the second verbosity record merged
    assert throughput("dllogger", "ngc-pytorch", "ok") == (pytest.approx(512.0), False)


def test_dllogger_tf1_zero_based_steps() -> None:
    # BenchmarkLoggingHook logs (0, i), i 0-based: the header's step_offset 1 makes i+1 steps.
    parsed = parse("dllogger", "ngc-tf1", "resnet50")
    assert parsed.ranks[0].points[0].step == 1 and parsed.ranks[0].points[-1].step == 12
    assert throughput("dllogger", "ngc-tf1", "resnet50") == (pytest.approx(512.0), False)


def test_dllogger_rate_lines_are_reported_by_the_source() -> None:
    # TF1 BERT at its pinned commit prints rates only; rank 1's copies are skipped.
    value, reported = throughput("dllogger", "ngc-tf1", "bert-rate")
    assert reported and value == pytest.approx(160.0)
    assert "rate line" in parse("dllogger", "ngc-tf1", "bert-rate").reported_note


def test_dllogger_rate_lines_must_tile_the_window() -> None:
    fails("dllogger", "ngc-tf1", "bert-rate-misaligned", "do not tile the window 4..12")


def test_dllogger_truncated_log_is_cut_short() -> None:
    fails("dllogger", "ngc-pytorch", "truncated", "cut short", "holds steps 1..9")


def test_dllogger_broken_record() -> None:
    message = fails("dllogger", "ngc-pytorch", "malformed", "broken DLLogger record")
    assert "node0.log:" in message


def test_dllogger_records_from_another_node_are_mixed() -> None:
    fails("dllogger", "ngc-pytorch", "mixed", "rank 0 only", "mixed ranks")


def test_log_without_run_header() -> None:
    fails("dllogger", "ngc-pytorch", "noheader", "no DLPERF-UPSTREAM run header")


# --- OneFlow-Benchmark ---------------------------------------------------------------------------


def test_oneflow_cnn_lines_carry_their_timestamps() -> None:
    # iter i at 2 + 0.25 i s: 8 steps in 2 s, 8 x 32 x 4 samples; validation lines are ignored.
    assert throughput("oneflow-benchmark", "oneflow-benchmark", "cnn") == (
        pytest.approx(512.0),
        False,
    )


def test_oneflow_bert_step_index_is_zero_based() -> None:
    # "step: s" after s+1 steps at 1 + 0.2 s: 8 steps in 1.6 s, 8 x 16 x 8 samples.
    assert throughput("oneflow-benchmark", "oneflow-benchmark", "bert") == (
        pytest.approx(640.0),
        False,
    )


@pytest.mark.parametrize(
    ("case", "fragment"),
    [
        ("cut", "cut short"),
        ("epochs", "epochs 0 and 1"),
        ("mixed", "mixed ranks"),
    ],
)
def test_oneflow_bad_logs(case: str, fragment: str) -> None:
    fails("oneflow-benchmark", "oneflow-benchmark", case, fragment)


# --- tensorflow/models TimeHistory ---------------------------------------------------------------


def test_timehistory_slowest_worker_sets_the_window() -> None:
    # Worker 0: steps 4..12 in 4 s; worker 1: 4.5 s. 8 steps x 16 x 4 GPUs x 2 nodes samples.
    parsed = parse("tf-timehistory", "tensorflow-models", "ok")
    assert sorted(parsed.ranks) == [0, 1] and parsed.samples_scale == 4  # GPUs per worker
    value, reported = throughput("tf-timehistory", "tensorflow-models", "ok")
    assert not reported and value == pytest.approx(1024 / 4.5)


def test_timehistory_gap_between_intervals() -> None:
    fails("tf-timehistory", "tensorflow-models", "gap", "a gap in the TimeHistory lines")


def test_timehistory_worker_without_lines() -> None:
    fails("tf-timehistory", "tensorflow-models", "silent", "rank 1 logged no steps")


def _time_history(text: str) -> list[tuple[int, int, float]]:
    """(from step, to step, seconds) of each TimeHistory line."""
    return [
        (int(m["start"]), int(m["end"]), float(m["secs"]))
        for m in re.finditer(
            r"TimeHistory: (?P<secs>[\d.]+) seconds, [\d.]+ examples/second between steps "
            r"(?P<start>\d+) and (?P<end>\d+)", text
        )
    ]


def test_timehistory_real_classifier_trainer_log_matches_its_printed_intervals() -> None:
    # A real log: classifier_trainer.py of tf-models-official 2.3.0 (the pinned wheel), the kit's
    # rendered 1n1g FP32 real-data command with DLPerf's config, run on CPU with TensorFlow 2.3.0
    # (--num_gpus 0, batch 2, 10 + 20 steps logged every 10, TFRecords of ours, a 2-step
    # evaluation after training; fixtures/upstream/real/README.md). The window is steps 10..30:
    # the two intervals after the first, 20 x 2 samples.
    load_all()
    text = (FIXTURES / "tensorflow-models" / "real-cpu-classifier.node0.log").read_text()
    intervals = _time_history(text)
    assert [(a, b) for a, b, _ in intervals] == [(0, 10), (10, 20), (20, 30)]
    assert "Run stats:" in text and "2/2 - " in text  # the evaluation after training
    parsed = PARSERS.get("tf-timehistory")().parse({"node0.log": text})
    measured = measure_repeat(parsed, Window(warmup_steps=10, measured_steps=20))
    implied = 20 * 2 / sum(secs for _a, _b, secs in intervals[1:])
    assert not measured.reported_by_source and measured.throughput == pytest.approx(implied)


def test_timehistory_real_two_worker_classifier_trainer_logs() -> None:
    # Real logs: the kit's rendered 2-node synthetic-data command, both workers on loopback (one
    # CPU replica each, TF_CONFIG from the node command's one-liner). Each worker prints the
    # global batch (2 x 2) and its own intervals; the slower worker's steps 10..20 set the window.
    parsed = parse("tf-timehistory", "tensorflow-models", "real-cpu-classifier-2n")
    texts = logs("tensorflow-models", "real-cpu-classifier-2n")
    assert sorted(parsed.ranks) == [0, 1] and parsed.world_size == 2
    assert all("Global batch size: 4" in text for text in texts.values())
    slowest = max(_time_history(text)[1][2] for text in texts.values())
    measured = measure_repeat(parsed, Window(warmup_steps=10, measured_steps=10))
    assert measured.throughput == pytest.approx(10 * 4 / slowest)


# --- pytorch/examples ----------------------------------------------------------------------------


def test_pytorch_examples_real_log_matches_its_printed_batch_times() -> None:
    # A real log: imagenet/main.py at the pinned commit, run unchanged on CPU (2 processes under
    # torchrun --tee 3, batch 4; see capture_real.py beside it). The figure it implies: for each
    # process, the printed times ("Time val") of batches 4..11 are the window; the slowest
    # process sets its duration. The parser reads the running averages instead (avg x (i + 1)),
    # so the two agree to the print's rounding (3 decimals).
    load_all()
    text = (FIXTURES / "pytorch-examples" / "real-cpu.node0.log").read_text()
    parsed = PARSERS.get("pytorch-examples")().parse({"node0.log": text})
    assert sorted(parsed.ranks) == [0, 1]
    durations = {}
    for rank in (0, 1):
        lines = [line for line in text.splitlines() if line.startswith(f"[default{rank}]:Epoch")]
        assert len(lines) == 13  # batches 0..12 of the generated ImageFolder
        times = [float(line.split("Time")[1].split()[0]) for line in lines]
        durations[rank] = sum(times[4:12])
    implied = 8 * 4 * 2 / max(durations.values())
    value, reported = throughput("pytorch-examples", "pytorch-examples", "real-cpu")
    assert not reported and value == pytest.approx(implied, rel=1e-3)


def test_pytorch_examples_rank_cut_short() -> None:
    # The real log without process 1's batches 10..12.
    fails("pytorch-examples", "pytorch-examples", "cut", "rank 1", "cut short")


def test_pytorch_examples_lines_without_rank_prefix() -> None:
    # The real log with torchrun's prefixes removed.
    fails("pytorch-examples", "pytorch-examples", "noprefix", "cannot be told apart")


# --- Paddle --------------------------------------------------------------------------------------


def test_paddle_cv_batch_times() -> None:
    # Only global trainer 0 prints (node 0): batches of 0.25 s after a 3 s first one;
    # 8 steps x 32 x 2 nodes x 2 GPUs samples in 2 s.
    assert throughput("paddle", "paddle-models", "cv") == (pytest.approx(512.0), False)


def test_paddle_cv_real_log_matches_its_printed_batch_times() -> None:
    # A real log: PaddleCV image_classification/train.py at the pinned commit, run unchanged on
    # CPU with paddlepaddle 1.8.5 (paddle.distributed.launch, 2 trainers, batch 2; see
    # capture_real.py beside it). Only trainer 0 prints, one "elapse T sec" per batch: the
    # window is batches 4..11 (batch B ends step B + 1), its samples those of both trainers.
    load_all()
    text = (FIXTURES / "paddle-models" / "real-cpu.node0.log").read_text()
    parsed = PARSERS.get("paddle")().parse({"node0.log": text})
    assert list(parsed.ranks) == [0] and parsed.world_size == 2 and parsed.samples_scale == 2
    lines = [line for line in text.splitlines() if "train batch" in line]
    assert [int(line.split("train batch ")[1].split("]")[0]) for line in lines] == list(range(12))
    elapse = [float(line.split("elapse ")[1].split()[0]) for line in lines]
    implied = 8 * 2 * 2 / sum(elapse[4:12])
    value, reported = throughput("paddle", "paddle-models", "real-cpu")
    assert not reported and value == pytest.approx(implied, rel=1e-3)


def test_paddle_bert_real_log_matches_its_printed_speeds() -> None:
    # A real log: PaddleNLP BERT train.py at the pinned commit, run unchanged on CPU (one
    # trainer over 2 CPU places, batch 2 each, a tiny generated config; see capture_real.py).
    # Trainer 0 prints "speed: X steps/s" every 10 steps: the window (steps 10..30) lasts
    # 10 / X20 + 10 / X30 s and holds 20 steps x 2 places x 2 samples.
    load_all()
    text = (FIXTURES / "paddle-models" / "real-cpu-bert.node0.log").read_text()
    speeds = {int(step): float(speed) for step, speed in re.findall(
        r"step: (\d+),.*speed: (\d+\.\d+) steps/s", text)}  # fmt: skip
    assert sorted(speeds) == [10, 20, 30]
    implied = 20 * 2 * 2 / (10 / speeds[20] + 10 / speeds[30])
    parsed = PARSERS.get("paddle")().parse({"node0.log": text})
    measured = measure_repeat(parsed, Window(warmup_steps=10, measured_steps=20))
    assert measured.reported_by_source and measured.throughput == pytest.approx(implied, rel=1e-3)


def test_paddle_cv_batch_lines_from_another_node_are_mixed() -> None:
    fails("paddle", "paddle-models", "mixed", "rank 0 only", "mixed ranks")


def test_paddle_cv_needs_every_batch() -> None:
    fails("paddle", "paddle-models", "skipped", "every batch's time is needed")


def test_paddle_nlp_speed_is_reported() -> None:
    # 4 steps/s x global batch 16 x 8 over the window's lines.
    value, reported = throughput("paddle", "paddle-models", "bert-rate")
    assert reported and value == pytest.approx(512.0)


def test_paddle_nlp_speed_counts_every_trainer() -> None:
    # 2 nodes, one trainer each: train.py prints skip_steps x 2 trainers / seconds, so 4.0
    # "steps/s" is 2 steps/s of a global batch of 16 x 8 x 2 (only trainer 0 prints).
    value, reported = throughput("paddle", "paddle-models", "bert-rate-2n")
    assert reported and value == pytest.approx(2 * 16 * 16)


# --- MXNet Speed lines ---------------------------------------------------------------------------


def test_mxnet_speed_time_weighted_mean() -> None:
    # Window lines (equal 2-step intervals): 500, 480, 520, 500 samples/s; rank 2's copies skipped.
    value, reported = throughput("mxnet-speed", "ngc-mxnet", "ok")
    assert reported
    assert value == pytest.approx(4 / (1 / 500 + 1 / 480 + 1 / 520 + 1 / 500))


def test_mxnet_speed_cut_short() -> None:
    fails("mxnet-speed", "ngc-mxnet", "cut", "cut short")


def test_mxnet_speed_untagged_duplicates_are_mixed() -> None:
    fails("mxnet-speed", "ngc-mxnet", "overlap", "restarted, mixed or malformed")


# --- gluon-nlp -----------------------------------------------------------------------------------


def test_gluon_nlp_interval_times() -> None:
    # rank 0: steps 4..12 in 4 x 0.8 s; 8 x 8 x 4 samples. Rank 1's tagged copies are skipped.
    assert throughput("gluon-nlp", "gluon-nlp", "ok") == (pytest.approx(80.0), False)


def test_gluon_nlp_cut_short() -> None:
    fails("gluon-nlp", "gluon-nlp", "cut", "cut short")


def test_gluon_nlp_step_going_back() -> None:
    fails("gluon-nlp", "gluon-nlp", "restarted", "step 5 after step 6")


# --- the run header ------------------------------------------------------------------------------


def test_two_headers_in_one_log() -> None:
    load_all()
    text = (FIXTURES / "ngc-tf1" / "resnet50.node0.log").read_text()
    with pytest.raises(LogParseError, match="a second run header"):
        PARSERS.get("dllogger")().parse({"node0.log": text + text})


def test_missing_node_log() -> None:
    load_all()
    only = {"node0.log": logs("ngc-pytorch", "ok")["node0.log"]}
    with pytest.raises(LogParseError, match=r"no log of node\(s\) \[1\]"):
        PARSERS.get("dllogger")().parse(only)


def test_node_logs_of_different_runs() -> None:
    load_all()
    texts = logs("ngc-pytorch", "ok")
    texts["node1.log"] = texts["node1.log"].replace('"batch":64', '"batch":32')
    with pytest.raises(LogParseError, match="belongs to another run"):
        PARSERS.get("dllogger")().parse(texts)


def test_same_node_twice() -> None:
    load_all()
    texts = logs("ngc-pytorch", "ok")
    texts["node1.log"] = texts["node0.log"]
    with pytest.raises(LogParseError, match="node rank 0 appears in both"):
        PARSERS.get("dllogger")().parse(texts)


# --- the node's host line (hostname and devices, printed by the node after the header) ----------


def with_host_lines(source: str, case: str, hosts: list[str]) -> dict[str, str]:
    """The fixture's logs with ``hosts[i]`` inserted after node i's header."""
    texts = {}
    for path in sorted((FIXTURES / source).glob(f"{case}.node*.log")):
        header, rest = path.read_text().split("\n", 1)
        node = int(path.name.split(".node")[1].split(".")[0])
        texts[f"node{node}.log"] = f"{header}\n{hosts[node]}\n{rest}"
    return texts


def host(name: str, *devices: str) -> str:
    return "DLPERF-HOST " + json.dumps({"devices": list(devices), "hostname": name})


def test_each_rank_gets_its_own_nodes_host_and_the_figure_is_unchanged() -> None:
    from driver.model.measure import parse_logs

    # tensorflow-models logs per node: node i's rank is i.
    hosts = [host("gpu-a", *["NVIDIA A100-SXM4-40GB"] * 4), host("gpu-b", "NVIDIA H100 80GB HBM3")]
    parsed = parse_logs("tf-timehistory", with_host_lines("tensorflow-models", "ok", hosts))
    assert [(r, parsed.ranks[r].header["hostname"]) for r in sorted(parsed.ranks)] == [
        (0, "gpu-a"), (1, "gpu-b"),
    ]  # fmt: skip
    assert parsed.ranks[1].header["devices"] == ["NVIDIA H100 80GB HBM3"]
    plain = parse_logs("tf-timehistory", with_host_lines("tensorflow-models", "ok", ["", ""]))
    assert "hostname" not in plain.header  # logs from before host lines: as they were
    assert measure_repeat(parsed, WINDOW) == measure_repeat(plain, WINDOW)


def test_a_host_line_with_a_fingerprint_puts_it_in_its_ranks_headers() -> None:
    from driver.model.measure import parse_logs

    facts = {"schema": 1, "gpus": [{"name": "NVIDIA A100-SXM4-40GB", "power_limit_w": 400.0}]}
    line = "DLPERF-HOST " + json.dumps(
        {"devices": ["NVIDIA A100-SXM4-40GB"], "hostname": "gpu-a", "fingerprint": facts,
         "hardware": "1x A100-SXM4-40GB 400W"}
    )  # fmt: skip
    parsed = parse_logs("tf-timehistory", with_host_lines("tensorflow-models", "ok", [line, ""]))
    assert parsed.ranks[0].header["fingerprint"] == facts
    assert parsed.ranks[0].header["hardware"] == "1x A100-SXM4-40GB 400W"
    assert "fingerprint" not in parsed.ranks[1].header  # node 1 printed no host line


def test_a_rate_only_log_keeps_node_0s_host() -> None:
    from driver.model.measure import parse_logs

    texts = with_host_lines("ngc-mxnet", "ok", [host("n0", "NVIDIA V100"), host("n1", "X")])
    parsed = parse_logs("mxnet-speed", texts)
    assert not parsed.ranks and parsed.header == {"hostname": "n0", "devices": ["NVIDIA V100"]}


@pytest.mark.parametrize(
    "line, fragment",
    [
        ("DLPERF-HOST {not json", "broken host line"),
        ('DLPERF-HOST {"hostname": "a", "devices": "A100"}', "devices (a list of text)"),
        ('DLPERF-HOST ["a"]', "a JSON object with a hostname"),
        (
            'DLPERF-HOST {"hostname": "a", "devices": ["A100"], "fingerprint": [1]}',
            "fingerprint must come with its label",
        ),
        (
            'DLPERF-HOST {"hostname": "a", "devices": ["A100"], "fingerprint": {}, '
            '"hardware": ""}',
            "'hardware' a non-empty text",
        ),
    ],
)
def test_a_bad_host_line_names_the_log_and_the_line(line: str, fragment: str) -> None:
    from driver.model.measure import parse_logs

    texts = with_host_lines("tensorflow-models", "ok", [host("a", "A100"), line])
    with pytest.raises(LogParseError) as caught:
        parse_logs("tf-timehistory", texts)
    assert fragment in str(caught.value) and "node1.log:2:" in str(caught.value)


# --- A negative or backward step index, in every parser that reads one ---------------------------

# (parser, fixture log (source/case, or a real log), its window, the index text of one step line
# inside the window, that text with the index negative, and with an earlier index); every edited
# log is one the parser would otherwise measure.
INDEX_EDITS = [
    ("dllogger", "ngc-pytorch/ok", WINDOW, '"step": [0, 6]', '"step": [0, -5]', '"step": [0, 2]'),
    ("dllogger", "ngc-tf1/bert-rate", WINDOW, "0 :: Step =      6", "0 :: Step =     -5",
     "0 :: Step =      2"),
    ("oneflow-benchmark", "oneflow-benchmark/cnn", WINDOW, "iter 6,", "iter -5,", "iter 2,"),
    ("oneflow-benchmark", "oneflow-benchmark/bert", WINDOW, "step: 6,", "step: -5,", "step: 2,"),
    ("paddle", "paddle-models/cv", WINDOW, "batch 6]", "batch -5]", "batch 2]"),
    ("paddle", "paddle-models/bert-rate", WINDOW, "step: 6,", "step: -5,", "step: 2,"),
    ("gluon-nlp", "gluon-nlp/ok", WINDOW, "[1,0]<stderr>:INFO:root:[step 6]",
     "[1,0]<stderr>:INFO:root:[step -5]", "[1,0]<stderr>:INFO:root:[step 2]"),
    ("mxnet-speed", "ngc-mxnet/ok", WINDOW, "[1,0]<stderr>:INFO:root:Epoch[0] Batch [6-7]",
     "[1,0]<stderr>:INFO:root:Epoch[0] Batch [-5-7]",
     "[1,0]<stderr>:INFO:root:Epoch[0] Batch [2-3]"),
    ("tf-timehistory", "tensorflow-models/ok", WINDOW, "steps 6 and 8", "steps -5 and 8",
     "steps 2 and 4"),
    ("tf-timehistory", "real/tensorflow-models-pypi/bert.log", Window(10, 20), "Train Step: 20/",
     "Train Step: -5/", "Train Step: 5/"),
    ("pytorch-examples", "pytorch-examples/real-cpu", WINDOW, "[default0]:Epoch: [0][ 6/",
     "[default0]:Epoch: [0][ -5/", "[default0]:Epoch: [0][ 2/"),
]  # fmt: skip


def _index_log(where: str) -> dict[str, str]:
    if where.endswith(".log"):  # a real log with its run header: one node
        return {"node0.log": (FIXTURES / where).read_text()}
    return logs(*where.split("/"))


@pytest.mark.parametrize(
    ("parser", "where", "window", "old", "negative", "earlier"),
    INDEX_EDITS,
    ids=[f"{row[0]}:{row[1]}:{row[3]}" for row in INDEX_EDITS],
)
def test_a_negative_or_backward_index_is_refused_with_its_line(
    parser: str, where: str, window: Window, old: str, negative: str, earlier: str
) -> None:
    load_all()
    texts = _index_log(where)
    measured = measure_repeat(PARSERS.get(parser)().parse(texts), window)
    assert measured.throughput > 0  # the unedited log measures: each refusal is the edit's
    text = texts["node0.log"]
    line = text[: text.index(old)].count("\n") + 1
    for new, fragment in ((negative, "negative"), (earlier, "after step")):
        edited = {**texts, "node0.log": text.replace(old, new, 1)}
        with pytest.raises(LogParseError) as caught:
            measure_repeat(PARSERS.get(parser)().parse(edited), window)
        message = str(caught.value)
        assert message.startswith(f"node0.log:{line}: ") and fragment in message, message


# --- A negative epoch, in every parser that reads one ---------------------------------------------

# (parser, fixture log, the epoch text of the first step line, that text with the epoch negative)
EPOCH_EDITS = [
    ("dllogger", "ngc-pytorch/ok", '"step": [0, ', '"step": [-1, '),
    ("dllogger", "ngc-pytorch/ok:plain", "Epoch: 0 Iteration:", "Epoch: -1 Iteration:"),
    ("oneflow-benchmark", "oneflow-benchmark/cnn", "train: epoch 0,", "train: epoch -1,"),
    ("paddle", "paddle-models/cv", "[Pass 0,", "[Pass -1,"),
    ("mxnet-speed", "ngc-mxnet/ok", "Epoch[0] Batch", "Epoch[-1] Batch"),
    ("pytorch-examples", "pytorch-examples/real-cpu", "Epoch: [0][", "Epoch: [-1]["),
]


@pytest.mark.parametrize(("parser", "where", "old", "negative"), EPOCH_EDITS,
                         ids=[f"{row[0]}:{row[1]}" for row in EPOCH_EDITS])  # fmt: skip
def test_a_negative_epoch_is_refused_with_its_line(
    parser: str, where: str, old: str, negative: str
) -> None:
    """A line of epoch -1 was once no step line at all (the pattern read only digits), so a log
    with its epochs edited negative lost those lines in silence."""
    load_all()
    where, _, backend = where.partition(":")
    texts = _index_log(where)
    if backend == "plain":  # DLLogger's StdOutBackend lines alone (JSON records are read first)
        texts = {
            name: "".join(x for x in t.splitlines(keepends=True) if "DLLL " not in x)
            for name, t in texts.items()
        }
    text = texts["node0.log"]
    assert old in text, f"{where}: the fixture has no {old!r}"
    line = text[: text.index(old)].count("\n") + 1
    edited = {**texts, "node0.log": text.replace(old, negative, 1)}
    with pytest.raises(LogParseError) as caught:
        PARSERS.get(parser)().parse(edited)
    message = str(caught.value)
    assert message.startswith(f"node0.log:{line}: ") and "negative epoch" in message, message
