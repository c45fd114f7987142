"""Category H (disaggregated serving): the rows' reader, their selection from the sample
file under docs/timing.md's rules, the split, the price of a run, and what `specsim
validate` reports for them."""

from __future__ import annotations

import csv
import re
import zlib
from collections import Counter
from pathlib import Path

import pytest

from hardware import load_catalog
from hardware.kv_transfer import kv_transfer_s
from hardware.timing.pd_rows import PD_COLUMNS, read_pd_rows
from hardware.timing.pd_serving import pool_cost, predict_pd
from hardware.timing.serving import decode_pool_tpot
from hardware.timing.validation import PD_VALIDATION_CSV, validate_pd
from specdec.errors import UserError

CAT = load_catalog()
PREFIX = ("aiconfigurator-core 0.12.0 wheel (ai-dynamo/aiconfigurator), "
          "aiconfigurator_core/systems/silicon_sample.csv, row ")
ROW = {"category": "H", "model": "llama-3.1-8b", "gpu": "h100", "framework": "vllm",
       "framework_version": "", "weight_bits": "16", "kv_bits": "16", "compute_dtype": "",
       "fp8_scales": "", "fp4_format": "", "quantized": "", "isl": "1000", "osl": "100",
       "concurrency": "8", "prefill_workers": "1", "prefill_tp": "1", "prefill_ep": "1",
       "decode_workers": "2", "decode_tp": "2", "decode_ep": "1", "decode_batch": "4",
       "measured_ttft_s": "0.1", "measured_tpot_s": "0.01", "split": "test",
       "source": "test", "notes": ""}


def _write(path, rows, columns=PD_COLUMNS):
    path = path / "pd.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, columns, lineterminator="\n")
        w.writeheader()
        w.writerows([{c: r[c] for c in columns} for r in rows])
    return path


def test_a_row_is_read_with_its_pools(tmp_path):
    (r,) = read_pd_rows(_write(tmp_path, [ROW]))
    assert (r.model, r.framework, r.isl, r.osl, r.concurrency, r.decode_batch) == \
        ("llama-3.1-8b", "vllm", 1000, 100, 8, 4)
    assert (r.prefill_workers, r.prefill_tp, r.decode_workers, r.decode_tp) == (1, 1, 2, 2)
    assert (r.measured_ttft, r.measured_tpot, r.split, r.compute_dtype, r.fp8_scales) == \
        (0.1, 0.01, "test", None, None)


@pytest.mark.parametrize(("change", "message"), [
    ({"split": "held"}, "line 2: split: must be fit or test, got 'held'"),
    ({"fp8_scales": "row"}, "line 2: fp8_scales: must be one of tensor, block, dynamic"),
    ({"framework": "vllm@0.12.0"}, "line 2: framework: 'vllm@0.12.0': give the engine alone"),
    ({"osl": "1"}, "line 2: osl: must be >= 2, got 1"),
    ({"decode_batch": "0"}, "line 2: decode_batch: must be >= 1, got 0"),
    ({"measured_tpot_s": "-1"}, "line 2: measured_tpot_s: must be a finite number > 0"),
    ({"measured_ttft_s": "fast"}, "line 2: measured_ttft_s: must be a number, got 'fast'"),
    ({"fp4_format": "nvfp4"}, "line 2: fp4_format: FP4 weights need weight_bits 4"),
    ({"source": ""}, "line 2: source: must not be empty"),
])
def test_a_bad_cell_is_one_line_naming_the_file_line_and_column(tmp_path, change, message):
    with pytest.raises(UserError, match=re.escape(message)):
        read_pd_rows(_write(tmp_path, [{**ROW, **change}]))


def test_a_missing_or_unknown_column_is_refused(tmp_path):
    with pytest.raises(UserError, match="missing column 'decode_batch'"):
        read_pd_rows(_write(tmp_path, [ROW], [c for c in PD_COLUMNS if c != "decode_batch"]))
    path = _write(tmp_path, [ROW])
    path.write_text(path.read_text().replace("notes", "note", 1))
    with pytest.raises(UserError, match="unknown column 'note'"):
        read_pd_rows(path)


def test_the_transfer_takes_the_larger_per_gpu_share_over_the_bandwidth_plus_the_latency():
    """As sim.disagg prices it (tests/sim/test_disagg.py checks the simulator's transfers):
    Llama-3-8B's 131,072 bytes a token on one GPU, over 50 GB/s plus 3 us."""
    assert kv_transfer_s(1000, 131072.0, 65536.0, 50e9, 3e-6) == \
        3e-6 + 1000 * 131072.0 / 50e9
    assert kv_transfer_s(1000, 65536.0, 131072.0, 50e9, 3e-6) == \
        kv_transfer_s(1000, 131072.0, 65536.0, 50e9, 3e-6)


def test_a_run_is_priced_from_its_two_pools(tmp_path):
    """TTFT: one prompt's prefill on a prefill replica plus its KV on the node link; TPOT:
    one decode step of decode_batch sequences at the mean context on a decode replica."""
    (r,) = read_pd_rows(_write(tmp_path, [ROW]))
    p = predict_pd(r, CAT)
    prefill, decode = pool_cost(r, CAT, "prefill"), pool_cost(r, CAT, "decode")
    assert (prefill.dep.tp, decode.dep.tp) == (1, 2)
    link = CAT.link("ib-ndr-400g")  # the H100's node_link
    # Llama-3.1-8B: 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes = 131,072 a token on
    # one GPU; 65,536 on each of the decode replica's two
    assert sum(prefill.stage_kv_bytes_per_token) == 131072
    assert sum(decode.stage_kv_bytes_per_token) == 65536
    assert p.transfer_s == pytest.approx(link.latency_s + 1000 * 131072 / link.bytes_per_s,
                                         rel=1e-12)
    assert p.prefill_s == prefill.uniform_pass_seconds(1, 1000, 0)
    assert p.ttft_s == p.prefill_s + p.transfer_s
    mean = 1000 + 100 / 2
    assert p.tpot_s == decode.pass_seconds_sums(4.0, 4 * mean, 4 * mean, 4.0, n_seqs=4.0)


def test_a_decode_replica_runs_only_what_its_kv_cache_holds(tmp_path):
    (r,) = read_pd_rows(_write(tmp_path, [{**ROW, "decode_tp": "1"}]))
    cost = pool_cost(r, CAT, "decode")
    held = cost.kv_capacity_tokens() / (1000 + 100)
    assert decode_pool_tpot(cost, 10_000, 1000, 100) == decode_pool_tpot(cost, held, 1000, 100)
    assert decode_pool_tpot(cost, 10_000, 1000, 100) > decode_pool_tpot(cost, 64, 1000, 100)


def test_the_pd_split_is_the_documented_crc():
    with open(PD_VALIDATION_CSV) as f:
        rows = list(csv.DictReader(f))
    keys = ("category", "model", "gpu", "weight_bits", "kv_bits", "compute_dtype",
            "framework", "prefill_tp", "prefill_ep", "decode_tp", "decode_ep", "decode_batch",
            "isl", "osl", "source")
    for r in rows:
        crc = zlib.crc32("|".join(r[k] for k in keys).encode())
        assert r["split"] == ("fit" if crc % 2 == 0 else "test")
        assert r["source"] and r["notes"] and r["category"] == "H"
    assert Counter(r["split"] for r in rows) == {"fit": 26, "test": 37}


def test_a_pd_rows_framework_version_is_the_one_its_notes_state():
    """Stated only where the row gives the engine's own release (SGLang's image, or the
    backend version beside a separate Dynamo release); a Dynamo TensorRT-LLM runtime
    image's tag is not TensorRT-LLM's release."""
    for r in read_pd_rows(PD_VALIDATION_CSV):
        if r.framework_version:
            assert r.framework_version in r.notes
            assert "tensorrtllm-runtime" not in r.notes or "dynamo_version=" in r.notes
        else:
            assert "tensorrtllm-runtime:" in r.notes and "release not stated" in r.notes


# docs/timing.md, "P/D: disaggregated-serving runs": the rules, restated from the file
_MODELS = {"deepseek-ai/DeepSeek-V3": "deepseek-v3", "deepseek-ai/DeepSeek-R1": "deepseek-v3",
           "Qwen/Qwen3-32B": "qwen3-32b", "nvidia/Qwen3-32B-NVFP4": "qwen3-32b",
           "Qwen/Qwen3-235B-A22B-FP8": "qwen3-235b-a22b"}
_MOE = {"deepseek-v3", "qwen3-235b-a22b"}


def _left_out(run: dict) -> str | None:
    def n(key: str) -> int:
        return int(float(run[key]))

    if not all(run[k].strip() for k in ("prefill_num_workers", "decode_num_workers",
                                         "decode_batch_size")):
        return "pools not stated"
    model = _MODELS.get(run["model_path"])
    if model is None:
        return "model"
    q = (run["gemm_quant_mode"], run["moe_quant_mode"])
    if q != ("nvfp4", "nvfp4") and not (q[0] in ("fp8", "fp8_block")
                                        and q[1] in ("fp8", "fp8_block")):
        return "precision"
    pools = ("prefill", "decode")
    if any(n(f"{s}_pp_size") != 1 for s in pools):
        return "pp"
    if any(n(f"{s}_attention_dp_size") != 1 for s in pools):
        return "attention dp"
    for s in pools:
        tp = n(f"{s}_tp_size")
        if tp > 8:
            return "server"
        if model in _MOE:
            ep = n(f"{s}_moe_ep_size")
            if n(f"{s}_moe_tp_size") * ep != tp or (ep not in (1, tp)
                                                    and run["backend"] == "vllm"):
                return "layout"
    return None


def test_category_h_rows_are_the_sample_files_runs_under_its_rules():
    """Every disaggregated run the rules keep is a row, once (a repeat within 0.5% of its
    TPOT is not), with the run's cells; the rest are left out for the documented reasons."""
    core = pytest.importorskip("aiconfigurator_core", reason="the wheel holds the file")
    sample = Path(core.__file__).parent / "systems" / "silicon_sample.csv"
    with open(sample) as f:
        runs = [r for r in csv.DictReader(f) if r["mode"] == "disagg"]
    assert len(runs) == 1602
    why = Counter(_left_out(r) for r in runs)
    assert why == {"pools not stated": 1328, "attention dp": 181, "model": 29, None: 64}
    rows = read_pd_rows(PD_VALIDATION_CSV)
    by_id = {r["id"]: r for r in runs}
    kept = {r.source.removeprefix(PREFIX) for r in rows}
    assert len(kept) == len(rows) == 63
    repeats = [r["id"] for r in runs if _left_out(r) is None and r["id"] not in kept]
    assert len(repeats) == 1
    for r in rows:
        assert r.source.startswith(PREFIX)
        run = by_id[r.source.removeprefix(PREFIX)]
        assert _left_out(run) is None
        moe = r.model in _MOE
        assert (r.model, r.gpu, r.framework) == \
            (_MODELS[run["model_path"]], run["system"].removesuffix("_sxm"), run["backend"])
        assert (r.isl, r.osl, r.decode_batch, r.prefill_workers, r.decode_workers) == \
            tuple(int(float(run[k])) for k in ("isl", "osl", "decode_batch_size",
                                                "prefill_num_workers", "decode_num_workers"))
        for s in ("prefill", "decode"):
            assert getattr(r, f"{s}_tp") == int(float(run[f"{s}_tp_size"]))
            assert getattr(r, f"{s}_ep") == (int(float(run[f"{s}_moe_ep_size"])) if moe else 1)
        assert r.measured_tpot == pytest.approx(float(run["silicon_tpot_ms"]) / 1000, rel=1e-5)
        assert r.measured_ttft == pytest.approx(float(run["silicon_ttft_ms"]) / 1000, rel=1e-5)
        stated = re.search(r"silicon_concurrency=(\d+)", run["silicon_data_source"])
        assert r.concurrency == (int(stated[1]) if stated else
                                 r.decode_batch * r.decode_workers)
        assert run["silicon_data_source"] in r.notes
        nvfp4 = run["gemm_quant_mode"] == "nvfp4"
        assert (r.weight_bits, r.compute_dtype, r.fp4_format) == \
            ((4, "fp4", "nvfp4") if nvfp4 else (8, "fp8", None))
        if nvfp4:
            assert r.quantized == ("mlp" if r.model == "deepseek-v3" else "all")
        assert r.kv_bits == (8 if (r.model, run["gemm_quant_mode"]) == ("qwen3-32b", "fp8")
                             else 16)
        assert r.fp8_scales == ("block" if (r.model, run["gemm_quant_mode"]) ==
                                ("qwen3-32b", "fp8_block") else None)
    for rid in repeats:  # the same run kept once: its twin is a row, within 0.5% of TPOT
        twin = [r for r in rows if r.source != PREFIX + rid and r.notes.count("listed again")
                and abs(r.measured_tpot * 1000 / float(by_id[rid]["silicon_tpot_ms"]) - 1)
                <= 0.005]
        assert len(twin) == 1


def test_category_h_medians():
    """What `specsim validate` reports for H (docs/timing.md quotes it). Nothing is fitted
    on these runs; both medians miss the 8% goal (the TTFT by far: queueing and the P/D
    path's own latency are not priced)."""
    pytest.importorskip("aiconfigurator_core", reason="the default timing reads its tables")
    v = validate_pd(CAT)
    s = v.summary["all"]
    assert (s["rows"], s["test_rows"]) == (63, 37)
    assert round(100 * s["tpot_test"], 1) == 14.0
    assert round(100 * s["ttft_test"], 1) == 79.9
    assert s["ttft_signed_all"] < -0.5  # priced fast: the queue and the path's latency
    assert all(p.ttft_s > p.prefill_s > 0 and p.tpot_s > 0 for p in v.predicted)
