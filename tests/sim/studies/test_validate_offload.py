"""Category I (``sim.studies.validate_offload``): the CSV of runs with a CPU KV tier and
their GPU-only twins, the client's protocol each replay follows, and the replay itself."""

from __future__ import annotations

import math
import re
import zlib
from collections import Counter

import numpy as np
import pytest

from hardware import load_catalog
from sim.studies.validate_offload import (
    OFFLOAD_VALIDATION_CSV,
    read_offload_rows,
    run_key,
    simulate_offload,
    simulate_run,
    stage_requests,
)
from specdec.errors import UserError

ROWS = read_offload_rows(OFFLOAD_VALIDATION_CSV)


def test_every_row_parses_and_names_a_commit_of_a_public_repository():
    assert len(ROWS) == 24
    for r in ROWS:
        assert re.search(r"^github \S+/\S+ \S+ @[0-9a-f]{40}", r.source), r.source
        assert r.notes
    assert Counter(r.config for r in ROWS) == {"gpu_only": 12, "cpu_offload": 12}


def test_the_split_is_the_documented_crc():
    for r in ROWS:
        key = "|".join(str(x) for x in ("I", r.model, r.gpu, r.tp, r.replicas, r.config,
                                        f"{r.stage_rate:g}", r.metric, r.source))
        assert r.split == ("fit" if zlib.crc32(key.encode()) % 2 == 0 else "test")
    assert Counter(r.split for r in ROWS) == {"fit": 12, "test": 12}


def test_every_offload_row_has_its_gpu_only_twin():
    twins = {(r.stage_rate, r.metric) for r in ROWS if r.config == "gpu_only"}
    assert {(r.stage_rate, r.metric) for r in ROWS if r.config == "cpu_offload"} == twins
    assert len({run_key(r) for r in ROWS}) == 2


def test_a_stage_sends_its_clients_prompts_from_the_first_again():
    """inference-perf: int(rate x 60 s) requests a stage, each stage's data generator
    restarted at prompt 0, 1,250 shuffled (group, question) prompts; a prompt is its
    group's 125 system-prompt ids then two question ids (blocks of gcd(16000, 256) =
    128 tokens)."""
    row = ROWS[0]
    trace, stage_of, starts = stage_requests(row, np.random.default_rng(1))
    counts = Counter(stage_of)
    assert [counts[s] for s in range(8)] == [int(60 * r) for r in row.stages]
    firsts = [stage_of.index(s) for s in range(8)]
    assert all(trace[i]["hash_ids"] == trace[0]["hash_ids"] for i in firsts)
    assert all(len(t["hash_ids"]) == 127 and t["input_length"] == 16256 for t in trace)
    prompts = {tuple(t["hash_ids"]) for t in trace}
    assert len(prompts) == 1250  # the 40 QPS stage's 2,400 requests wrap round them all
    groups = Counter(ids[0] for ids in prompts)
    assert len(groups) == 250 and set(groups.values()) == {5}
    # the stages follow each other in order, far enough apart to drain
    times = [t["timestamp"] for t in trace]
    assert times == sorted(times) and np.all(np.diff(starts) > 3600)


def test_the_poisson_timer_sends_at_its_rate():
    row = ROWS[0]
    trace, stage_of, starts = stage_requests(row, np.random.default_rng(0))
    last = max(i for i, s in enumerate(stage_of) if s == 7)
    span = (trace[last]["timestamp"] / 1e3 - starts[7])
    assert span == pytest.approx(60, rel=0.05)  # 2,400 requests at 40 a second


def test_one_configuration_replayed_small_gives_finite_values():
    """A twentieth of the first stage (15 requests) of the offload run."""
    rows = [r for r in ROWS if r.config == "cpu_offload"]
    out = simulate_run(rows, load_catalog(), scale=0.05, stages=1)
    assert set(out) == {(5.0, m) for m in ("ttft_mean_s", "e2e_mean_s",
                                            "total_tokens_per_s")}
    assert all(math.isfinite(v) and v > 0 for v in out.values())
    # a request's E2E is its TTFT and 255 more tokens
    assert out[(5.0, "e2e_mean_s")] > out[(5.0, "ttft_mean_s")]


_HEADER = ("category,model,gpu,tp,replicas,framework,config,gpu_kv_tokens,kv_offload_gib,"
           "groups,prompts_per_group,system_prompt_tokens,question_tokens,output_tokens,"
           "stages,stage_s,stage_interval_s,stage_rate,metric,measured,split,source,notes")
_GOOD = dict(category="I", model="qwen3-32b", gpu="h100", tp="2", replicas="8",
             framework="vllm", config="cpu_offload", gpu_kv_tokens="298000",
             kv_offload_gib="200", groups="250", prompts_per_group="5",
             system_prompt_tokens="16000", question_tokens="256", output_tokens="256",
             stages="5;10", stage_s="60", stage_interval_s="60", stage_rate="5",
             metric="ttft_mean_s", measured="1.2", split="test", source="somewhere",
             notes="")


def _write(tmp_path, **change):
    cells = {**_GOOD, **change}
    path = tmp_path / "off.csv"
    path.write_text("# a comment\n" + _HEADER + "\n"
                    + ",".join(cells[c] for c in _HEADER.split(",")) + "\n")
    return path


def test_a_good_file_reads(tmp_path):
    (r,) = read_offload_rows(_write(tmp_path))
    assert (r.line, r.kv_offload_gib, r.stages, r.stage_rate) == (3, 200.0, (5.0, 10.0), 5.0)


@pytest.mark.parametrize("change,message", [
    ({"metric": "p90_ttft_s"}, "line 3: metric: must be one of"),
    ({"config": "lmcache"}, "line 3: config: must be one of gpu_only, cpu_offload"),
    ({"config": "gpu_only"}, "line 3: kv_offload_gib: a gpu_only run has no CPU tier"),
    ({"kv_offload_gib": ""}, "line 3: kv_offload_gib: must be a number"),
    ({"stage_rate": "15"}, "line 3: stage_rate: 15 is not one of the stages"),
    ({"stages": "5;x"}, "line 3: stages: must be rates separated by ';'"),
    ({"measured": "-1"}, "line 3: measured: must be a finite number > 0"),
    ({"tp": "two"}, "line 3: tp: must be an integer"),
    ({"source": ""}, "line 3: source: must not be empty"),
    ({"split": "held"}, "line 3: split: must be fit or test"),
])
def test_a_bad_cell_is_one_line_naming_file_and_field(tmp_path, change, message):
    path = _write(tmp_path, **change)
    with pytest.raises(UserError) as e:
        read_offload_rows(path)
    text = str(e.value)
    assert "\n" not in text and text.startswith(f"{path}: ") and message in text


def test_a_bad_header_is_named(tmp_path):
    path = tmp_path / "off.csv"
    path.write_text(_HEADER.replace("metric", "metrik") + "\n")
    with pytest.raises(UserError, match=r"off.csv: missing column 'metric'"):
        read_offload_rows(path)


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_the_whole_category_replays():
    """Both configurations, every stage (tens of minutes on two cores)."""
    v = simulate_offload(load_catalog(), workers=2)
    assert np.all(np.isfinite(v.simulated)) and np.all(v.simulated > 0)
    assert v.summary["all"]["rows"] == 24 and v.summary["all"]["test_rows"] == 12
    assert np.isfinite(v.ratio_error[[r.config == "cpu_offload" for r in v.rows]]).all()
