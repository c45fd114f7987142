"""Max-load throughput rows (trtllm-bench), the streaming cost, and 16-bit embeddings."""

from __future__ import annotations

import csv
import dataclasses
import math
import re

import pytest

from hardware import Deployment, load_catalog
from hardware.catalog import Catalog
from hardware.cost import CostModel
from hardware.timing.calibrate import default_fields
from hardware.timing.rows import REQUIRED, MeasuredRow, read_rows
from hardware.timing.validation import VALIDATION_CSV
from specdec.errors import UserError

CAT = load_catalog()


def _row(**kw) -> MeasuredRow:
    base = dict(line=7, model="llama-3.1-8b", gpu="h100", tp=1, pp=1, weight_bits=8,
                kv_bits=8, compute_dtype="fp8", batch=4, context=100, tokens=1, offload=0.0,
                measured=1000.0, source="synthetic", framework="trtllm", streaming=False,
                metric="max_load_tokens_per_s", output_tokens=10, requests=4,
                max_num_tokens=1000, kv_fraction=0.9)
    return MeasuredRow(**{**base, **kw})


def _priced(row: MeasuredRow, catalog: Catalog = CAT):
    from hardware.timing.serving import predict, row_cost

    cost = row_cost(row, catalog, "roofline")
    return predict(row, cost), cost


def _step(cost, decodes, ctx_sum, prompts, isl):
    return cost.pass_seconds_sums(decodes + prompts * isl, ctx_sum, ctx_sum,
                                  decodes + prompts * isl * isl, n_seqs=decodes + prompts)


def test_one_wave_is_a_prefill_step_then_equal_decode_steps():
    """4 requests fit the cap and the budget at once: one step prefills them, then 9 equal
    decode steps (contexts 100..108, priced at their middle) give the other tokens."""
    got, cost = _priced(_row())
    isl, osl = 100, 10
    want = _step(cost, 0, 0.0, 4, isl) + 9 * _step(cost, 4, 4 * 104.0, 0, isl)
    assert got == pytest.approx(4 * osl / want, rel=1e-12)


def test_whole_prompts_are_admitted_as_the_step_budget_and_the_cap_allow():
    """Budget 250: two whole 100-token prompts per step beside up to 50 decodes; the cap
    (6) then stops admissions until the cohorts finish, oldest first."""
    got, cost = _priced(_row(batch=6, requests=6, max_num_tokens=250))
    isl = 100

    def ctx(t, cohorts):  # two requests a cohort, each at isl - 1 + t - s cached tokens
        return sum(2 * (isl - 1 + t - s) for s in cohorts)

    want = (_step(cost, 0, 0.0, 2, isl)                      # t = 0
            + _step(cost, 2, ctx(1, [0]), 2, isl)             # t = 1
            + _step(cost, 4, ctx(2, [0, 1]), 2, isl)          # t = 2
            + 7 * _step(cost, 6, ctx(6, [0, 1, 2]), 0, isl)   # t = 3..9, middle t = 6
            + _step(cost, 4, ctx(10, [1, 2]), 0, isl)         # t = 10: cohort 0 has left
            + _step(cost, 2, ctx(11, [2]), 0, isl))           # t = 11
    assert got == pytest.approx(6 * 10 / want, rel=1e-12)


def _left(cost, row) -> float:
    """What a fractional KV cache is a share of: the memory the weights and the engine's
    own memory leave on a GPU."""
    shape = cost.dep.model.shape
    memory = cost.framework.memory.bytes_per_gpu(row.tp, shape.n_heads * shape.d_head,
                                                 row.max_num_tokens)
    return cost.dep.gpu.hbm_capacity_bytes - cost.resident_weight_bytes()[0] - memory


def test_the_kv_cache_caps_the_running_batch():
    """kv_fraction sizes the KV cache as TensorRT-LLM does (a share of what the weights
    and the engine's own memory leave), so a smaller fraction runs fewer requests at
    once: lower throughput."""
    _, cost = _priced(_row())
    per_request = cost.stage_kv_bytes_per_token[0] * 110
    fraction = 2.5 * per_request / _left(cost, _row())  # room for 2 whole requests
    small, _ = _priced(_row(kv_fraction=fraction, batch=64, requests=40))
    large, _ = _priced(_row(kv_fraction=0.9, batch=64, requests=40))
    assert small < large / 4


def test_chunked_prompts_are_admitted_as_a_fluid():
    """An engine that chunks prompts (vLLM) fills the budget with prompt tokens: with 150
    tokens a step, 1.5 prompts' worth in the first step, the other half in the next."""
    fws = {**CAT.frameworks, "trtllm": CAT.framework("trtllm").model_copy(
        update={"chunked_prefill": True})}
    cat = Catalog(gpus=CAT.gpus, links=CAT.links, models=CAT.models, frameworks=fws)
    got, cost = _priced(_row(batch=2, requests=2, max_num_tokens=150), cat)
    isl = 100
    want = (_step(cost, 0, 0.0, 1.5, isl)
            + _step(cost, 1.5, 1.5 * 100, 0.5, isl)
            + 8 * _step(cost, 2, 1.5 * (99 + 5.5) + 0.5 * (98 + 5.5), 0, isl)  # t = 2..9
            + _step(cost, 0.5, 0.5 * (98 + 10), 0, isl))                       # t = 10
    assert got == pytest.approx(2 * 10 / want, rel=1e-12)


@pytest.mark.parametrize(("change", "message"), [
    (dict(framework="sglang"), "metric max_load_tokens_per_s is priced for engines that run "
                               "prompts inside the decode step; framework sglang does not "
                               "(mixed_prefill false)"),
    (dict(max_num_tokens=50), "llama-3.1-8b on 1 x h100: a request of 100 + 10 tokens does "
                              "not fit (the KV cache holds"),
    (dict(kv_fraction=1e-9), "llama-3.1-8b on 1 x h100: a request of 100 + 10 tokens does "
                             "not fit (the KV cache holds 0 such requests, the step budget "
                             "is 1000 tokens)"),
    (dict(pp=2), "metric max_load_tokens_per_s: pp 2: a pipeline keeps several "
                 "micro-batches in flight"),
])
def test_a_run_that_cannot_be_priced_is_one_line(change, message):
    with pytest.raises(UserError, match=re.escape(message)):
        _priced(_row(**change))


def test_the_last_chunk_of_prompts_leaves_no_request_behind():
    """Fractional admissions (chunked prompts) must not leave a float crumb of a request
    waiting, to be priced as a cohort of its own with a whole decode tail: 195 requests in
    chunks of 1.05 prompts end with 0.0000000000001 left, which must count as none."""
    from hardware.timing.serving import predict, row_cost

    fws = {**CAT.frameworks, "trtllm": CAT.framework("trtllm").model_copy(
        update={"chunked_prefill": True})}
    cat = Catalog(gpus=CAT.gpus, links=CAT.links, models=CAT.models, frameworks=fws)
    row = _row(batch=3, requests=195, max_num_tokens=105)
    cost = row_cost(row, cat, "roofline")
    seqs = []

    def counting(*args, n_seqs):
        seqs.append(n_seqs)
        return type(cost).pass_seconds_sums(cost, *args, n_seqs=n_seqs)

    cost.pass_seconds_sums = counting
    predict(row, cost)
    assert min(seqs) > 1e-6


def test_a_row_that_cannot_be_priced_names_its_file_and_line(tmp_path):
    from hardware.timing.calibrate import predictions

    row = dataclasses.replace(_row(framework="sglang"), path="m.csv", line=12)
    with pytest.raises(UserError, match=r"^m\.csv: line 12: metric max_load_tokens_per_s "):
        predictions([row], CAT, "roofline")


def test_a_schedule_too_long_to_price_is_refused(monkeypatch):
    from hardware.timing import serving

    monkeypatch.setattr(serving, "_MAX_EVENTS", 50)
    with pytest.raises(UserError, match="take more than 50 scheduler events"):
        _priced(_row(requests=1000, batch=2))


def _write(path, extra: dict[str, str]):
    header = [*REQUIRED, "metric", "output_tokens", *extra]
    values = ["llama-3.1-8b", "h100", "1", "1", "8", "8", "fp8", "64", "128", "1", "0",
              "20000", "test", "max_load_tokens_per_s", "128", *extra.values()]
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([header, values])
    return path


@pytest.mark.parametrize(("column", "value", "users"), [
    ("requests", "100", "max_load_tokens_per_s"),
    ("cuda_graph_batch_sizes", "1 2 4", "max_load_tokens_per_s"),
    ("gpu_memory_utilization", "0.9", "max_load_tokens_per_s and tpot_s")])
def test_columns_a_metric_does_not_use_are_refused(tmp_path, column, value, users):
    header = [*REQUIRED, column]
    values = ["llama-3.1-8b", "h100", "1", "1", "16", "16", "", "8", "128", "1", "0",
              "0.01", "test", value]
    path = tmp_path / "m.csv"
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([header, values])
    with pytest.raises(UserError) as err:
        read_rows(path)
    assert str(err.value) == (f"{path}: line 2: {column}: only {users} rows "
                              "use it; this row's metric is step_s")


def test_a_max_load_row_needs_a_prompt(tmp_path):
    path = _write(tmp_path / "m.csv", {"requests": "10"})
    path.write_text(path.read_text().replace(",64,128,1,0,", ",64,0,1,0,"))
    with pytest.raises(UserError) as err:
        read_rows(path)
    assert str(err.value) == (f"{path}: line 2: context: metric max_load_tokens_per_s needs "
                              "prompts of >= 1 token, got 0")


def test_a_misspelt_column_is_refused_not_ignored(tmp_path):
    path = _write(tmp_path / "m.csv", {"requests": "10", "kv_fracton": "0.9"})
    with pytest.raises(UserError) as err:
        read_rows(path)
    assert str(err.value).startswith(f"{path}: unknown column 'kv_fracton' (optional "
                                     "columns: framework, framework_version, ep, pin_memory, ")


def test_the_max_load_columns_are_read(tmp_path):
    (r,) = read_rows(_write(tmp_path / "m.csv", {"requests": "3000", "max_num_tokens": "2048",
                                                 "kv_fraction": "0.95",
                                                 "streaming": "false"}))
    assert (r.requests, r.max_num_tokens, r.kv_fraction, r.streaming) == (3000, 2048, 0.95,
                                                                           False)
    (r,) = read_rows(_write(tmp_path / "n.csv", {"requests": "3000"}))
    assert (r.max_num_tokens, r.kv_fraction, r.streaming) == (None, None, True)
    assert r.gpu_memory_utilization is None
    (r,) = read_rows(_write(tmp_path / "u.csv", {"requests": "3000",
                                                 "gpu_memory_utilization": "0.82"}))
    assert (r.gpu_memory_utilization, r.kv_fraction) == (0.82, None)


@pytest.mark.parametrize(("extra", "message"), [
    ({}, "line 2: requests: metric max_load_tokens_per_s needs the number of requests the "
         "run served"),
    ({"requests": "10", "kv_fraction": "1.5"}, "line 2: kv_fraction: must be in (0, 1], "
                                               "got 1.5"),
    ({"requests": "10", "kv_fraction": "half"}, "line 2: kv_fraction: must be a number in "
                                                "(0, 1], got 'half'"),
    ({"requests": "10", "max_num_tokens": "0"}, "line 2: max_num_tokens: must be >= 1, got 0"),
    ({"requests": "10", "streaming": "yes"}, "line 2: streaming: must be true or false, got "
                                             "'yes'"),
    ({"requests": "-5"}, "line 2: requests: must be >= 1, got -5"),
    ({"requests": "10", "kv_fraction": "0.9", "gpu_memory_utilization": "0.9"},
     "line 2: gpu_memory_utilization: give it or kv_fraction, not both (the engine sizes "
     "its KV cache one way)"),
    ({"requests": "10", "gpu_memory_utilization": "0"},
     "line 2: gpu_memory_utilization: must be in (0, 1], got 0"),
])
def test_a_bad_max_load_column_is_one_line(tmp_path, extra, message):
    path = _write(tmp_path / "m.csv", extra)
    with pytest.raises(UserError) as err:
        read_rows(path)
    assert str(err.value) == f"{path}: {message}"


def test_streaming_costs_its_framework_term_per_sequence_on_the_step_only():
    """A streaming server pays stream_seq_s per sequence per pass on top of seq_s; an
    offline run and a draft's passes (inside the step) do not."""
    fws = {**CAT.frameworks, "vllm": CAT.framework("vllm").model_copy(
        update={"stream_seq_s": 7e-6})}
    cat = Catalog(gpus=CAT.gpus, links=CAT.links, models=CAT.models, frameworks=fws)
    model, gpu = cat.model("llama-3.1-8b"), cat.gpu("h100")

    def pass_s(**kw):
        cost = CostModel(Deployment(model=model, gpu=gpu, timing="roofline", **kw), cat)
        return cost.pass_seconds_sums(32, 32 * 500, 32 * 500, 32, n_seqs=32)

    offline = pass_s(streaming=False)
    assert pass_s(streaming=True) - offline == pytest.approx(32 * 7e-6, rel=1e-9)
    draft, draft_streaming = (pass_s(streaming=s, step_overhead=False) for s in (False, True))
    assert draft_streaming == draft
    # tokens are sent once, after the last pipeline stage: a 2-stage pipeline pays it once
    piped = pass_s(streaming=True, pp=2) - pass_s(streaming=False, pp=2)
    assert piped == pytest.approx(32 * 7e-6, rel=1e-9)


def test_the_streaming_term_is_fitted_where_rows_stream_and_others_do_not():
    rows = [dataclasses.replace(_row(), streaming=s, batch=b, line=i)
            for i, (s, b) in enumerate([(True, b) for b in range(1, 7)]
                                       + [(False, b) for b in range(1, 7)])]
    assert "frameworks.trtllm.stream_seq_s" in default_fields(rows, CAT, "roofline")
    assert "frameworks.trtllm.stream_seq_s" not in default_fields(rows[:9], CAT, "roofline")


def test_quantised_weights_keep_the_embedding_and_lm_head_in_16_bits():
    model, gpu = CAT.model("llama-3.1-8b"), CAT.gpu("h100")
    untied = model.shape.embedding_params + model.shape.head_params  # + the final norm

    def stored(bits):
        return CostModel(Deployment(model=model, gpu=gpu, weight_bits=bits), CAT
                         ).resident_weight_bytes()[0]

    params = model.shape.embedding_params + model.shape.streamed_params
    assert stored(16) == 2 * params
    assert stored(8) == params + untied
    assert stored(4) == params // 2 + untied * 3 // 2


# trtllm-bench's heuristic for max_batch_size and max_num_tokens (github NVIDIA/TensorRT-LLM
# tensorrt_llm/bench/build/tuning.py @04cba882, finetune_setting; general.py @0171265e)
_NVML_GIB = {"h100": 81559 / 1024, "h200": 143771 / 1024}  # nvidia-smi memory.total


def _heuristic(row: MeasuredRow) -> tuple[int, int]:
    cfg = CAT.model(row.model).config
    params = CAT.model(row.model).shape.total_params
    per_token = 2 * cfg.num_hidden_layers * max(row.tp, cfg.num_key_value_heads) \
        * (cfg.hidden_size // cfg.num_attention_heads) / 2**30
    free = _NVML_GIB[row.gpu] * row.tp - params / 2**30
    raw_bs = min(free * row.kv_fraction / (per_token * (row.context + row.output_tokens)), 4096)
    raw_tokens = min(raw_bs * (1 + row.context / row.output_tokens), 32768)
    step = 32 if raw_bs < 256 else 128 if raw_bs < 1024 else 256
    bs = max(64, 32 * math.ceil(raw_bs / 32)) if raw_bs < 256 else \
        step * math.ceil(raw_bs / step)
    unit = 256 if raw_tokens < 4096 else 512 if raw_tokens < 8192 else 1024
    tokens = unit * math.ceil(raw_tokens / unit)
    if raw_tokens < 4096:
        tokens = max(2048, tokens)
    return bs, max(tokens, row.context + bs)


def test_the_trtllm_bench_rows_state_the_settings_its_heuristic_picks():
    rows = [r for r in read_rows(VALIDATION_CSV) if r.metric == "max_load_tokens_per_s"]
    assert len(rows) == 60
    for r in rows:
        assert (r.batch, r.max_num_tokens) == _heuristic(r), r.line
        assert not r.streaming and r.kv_fraction == 0.95 and r.framework == "trtllm"
        # the doc's llm_options.yml for dense models (cuda_graph_config, enable_padding)
        assert r.cuda_graph_batch_sizes == (1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512,
                                            1024, 2048, 4096, 8192), r.line


def test_a_fractional_kv_cache_is_a_share_of_what_weights_and_engine_leave():
    """TensorRT-LLM takes its fraction of the memory left after a profiling pass: the
    weights, the pass's activations at the step budget, NCCL's buffers and the runtime's
    own (frameworks.yaml, trtllm.memory); a deployment-rule row (no kv_fraction) keeps the
    deployment's workspace margin instead."""
    from hardware.timing.serving import _kv_tokens

    for tp, budget in ((1, 1000), (2, 8192), (8, 2048)):
        row = _row(model="llama-3.1-70b", gpu="h200", tp=tp, max_num_tokens=budget,
                   kv_fraction=0.95)
        _, cost = _priced(row)
        want = 0.95 * _left(cost, row) / cost.stage_kv_bytes_per_token[0]
        assert _kv_tokens(row, cost) == pytest.approx(want, rel=1e-12)
    row = _row(kv_fraction=None)
    _, cost = _priced(row)
    assert _kv_tokens(row, cost) == cost.kv_capacity_tokens()


def test_the_engine_memory_by_tp_degree():
    """Activations: 2 bytes x budget tokens x hidden x the vectors of the largest listed
    degree <= tp (at least the floor); collective buffers only under TP; plus the
    runtime's bytes."""
    from hardware.catalog import EngineMemory

    m = EngineMemory(activation_vectors={1: 11, 2: 6.5, 4: 5}, min_activation_bytes=1e6,
                     collective_bytes={2: 300.0, 4: 400.0}, runtime_bytes=7.0, source="t")
    assert m.bytes_per_gpu(1, 100, 1000) == 2 * 1000 * 100 * 11 + 7.0
    assert m.bytes_per_gpu(3, 100, 1000) == 2 * 1000 * 100 * 6.5 + 300.0 + 7.0
    assert m.bytes_per_gpu(8, 100, 1000) == 2 * 1000 * 100 * 5 + 400.0 + 7.0
    assert m.bytes_per_gpu(1, 10, 10) == 1e6 + 7.0  # the floor
    trt = CAT.framework("trtllm").memory
    # Llama-3.1-70B (hidden 8192) at TP 1 with an 8192-token budget: 1.375 GiB of
    # activations, no NCCL buffers, 3.5 GiB for the runtime
    assert trt.bytes_per_gpu(1, 8192, 8192) == pytest.approx((1.375 + 3.5) * 2**30)
    assert CAT.framework("vllm").memory is None


def test_graph_batches_follow_the_engine_filter():
    """The sizes a run asked for up to the engine's largest decode batch, plus that batch
    when a larger size was asked for; decodes run at the next size up."""
    from hardware.timing.serving import _graph_batches, _padded

    sizes = (1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 1024, 2048, 4096, 8192)
    assert _graph_batches(sizes, 640) == (1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 640)
    assert _graph_batches(sizes, 8192) == sizes
    assert _graph_batches(sizes, 10000) == sizes  # nothing above it asked for
    assert _graph_batches((), 640) == ()
    assert _graph_batches((1024,), 640) == (640,)
    graphs = _graph_batches(sizes, 640)
    assert [_padded(graphs, b) for b in (1, 3, 384, 385, 556, 640)] == \
        [1, 4, 384, 512, 640, 640]
    assert _padded((), 556) == 556
    assert _padded((1, 2, 4), 5.0) == 5.0  # more decodes than any graph: run as is


def test_decode_only_steps_run_at_the_padded_batch():
    """Three requests of a max batch of 4 with graphs 1, 2, 4, 8: the decode-only steps
    run a graph of 4 (one dummy request added), the admission step runs as it is."""
    row = _row(batch=4, requests=3, cuda_graph_batch_sizes=(1, 2, 4, 8))
    got, cost = _priced(row)
    isl = 100

    def padded(b, ctx_sum):
        return cost.pass_seconds_sums(b, ctx_sum, ctx_sum, b, n_seqs=b)

    want = _step(cost, 0, 0.0, 3, isl) + 9 * padded(4, 3 * 104.0)
    assert got == pytest.approx(3 * 10 / want, rel=1e-12)
    plain, _ = _priced(_row(batch=4, requests=3))
    assert got < plain
    exact, _ = _priced(_row(batch=4, requests=4, cuda_graph_batch_sizes=(1, 2, 4, 8)))
    assert exact == _priced(_row(batch=4, requests=4))[0]  # 4 decodes: a graph of 4


def test_the_graph_sizes_are_read(tmp_path):
    (r,) = read_rows(_write(tmp_path / "m.csv", {"requests": "10",
                                                 "cuda_graph_batch_sizes": "1 2 4 384"}))
    assert r.cuda_graph_batch_sizes == (1, 2, 4, 384)
    (r,) = read_rows(_write(tmp_path / "n.csv", {"requests": "10"}))
    assert r.cuda_graph_batch_sizes == ()


@pytest.mark.parametrize(("text", "message"), [
    ("1 2 x", "must be positive integers separated by spaces, got 'x'"),
    ("4 2", "must be positive and ascending, got '4 2'"),
    ("0 1", "must be positive and ascending, got '0 1'"),
    ("2 2", "must be positive and ascending, got '2 2'"),
])
def test_bad_graph_sizes_are_one_line(tmp_path, text, message):
    path = _write(tmp_path / "m.csv", {"requests": "10", "cuda_graph_batch_sizes": text})
    with pytest.raises(UserError) as err:
        read_rows(path)
    assert str(err.value) == f"{path}: line 2: cuda_graph_batch_sizes: {message}"


def test_a_user_catalog_changes_one_engine_memory_field(tmp_path):
    """The engine's memory merges field by field, like a GPU's roofline block; a bad value
    is one line naming the file and field."""
    path = tmp_path / "mine.yaml"
    path.write_text("frameworks:\n  trtllm:\n    memory:\n      runtime_bytes: 1.0e9\n")
    mine = load_catalog(path).framework("trtllm").memory
    shipped = CAT.framework("trtllm").memory
    assert mine.runtime_bytes == 1e9
    assert mine.model_dump(exclude={"runtime_bytes"}) == \
        shipped.model_dump(exclude={"runtime_bytes"})
    path.write_text("frameworks:\n  trtllm:\n    memory:\n      runtime_bytes: -1\n")
    with pytest.raises(UserError, match=r"mine\.yaml: frameworks\.trtllm\.memory\."
                                        r"runtime_bytes: Input should be greater than"):
        load_catalog(path)


def test_the_engine_memory_is_aiconfigurators_trtllm_model():
    """frameworks.yaml's trtllm.memory holds aiconfigurator-core's TensorRT-LLM memory
    model as shipped: its Llama activation coefficients and floor, and the H100's and
    H200's NCCL and runtime reserves."""
    pytest.importorskip("aiconfigurator_core", reason="the source of the values")
    import importlib.resources

    import yaml
    from aiconfigurator_core.sdk.backends.base_backend import BaseBackend
    from aiconfigurator_core.sdk.backends.trtllm_backend import TRTLLMBackend

    m = CAT.framework("trtllm").memory
    assert m.activation_vectors == TRTLLMBackend.ACTIVATION_COEFFICIENTS["LLAMA"]
    assert m.min_activation_bytes == BaseBackend.MIN_ACTIVATION_BYTES
    for system in ("h100_sxm", "h200_sxm"):
        path = importlib.resources.files("aiconfigurator_core") / "systems" / f"{system}.yaml"
        misc = yaml.safe_load(path.read_text())["misc"]
        assert m.runtime_bytes == misc["other_mem"]
        assert m.collective_bytes == {k: v for k, v in misc["nccl_mem"].items() if k > 1}
    # the MoE terms: its MOE and DEEPSEEK families' coefficients, the workspace of the
    # DEEPSEEK family's block scales (4-byte floats per 128), and which architectures map
    # to which family (common.ARCHITECTURE_TO_MODEL_FAMILY)
    from aiconfigurator_core.sdk import common

    table = TRTLLMBackend.ACTIVATION_COEFFICIENTS
    assert m.moe_activation_vectors == table["MOE"] == table["DEEPSEEK"]
    assert m.moe_workspace_bytes == 4 / 128
    family = common.ARCHITECTURE_TO_MODEL_FAMILY
    arch = {"mixtral": "MixtralForCausalLM", "gpt_oss": "GptOssForCausalLM",
            "qwen3_moe": "Qwen3MoeForCausalLM", "deepseek_v3": "DeepseekV3ForCausalLM"}
    assert set(m.moe_models) == set(arch)
    for model_type, workspace in m.moe_models.items():
        assert family[arch[model_type]] in ("MOE", "DEEPSEEK")
        assert workspace == (family[arch[model_type]] in BaseBackend.MOE_WORKSPACE_FAMILIES)


def test_a_dense_width_is_its_heads_and_moe_types_the_memory_does_not_size_are_refused():
    """Activations are as wide as the attention's heads (Llama: the hidden size); an MoE
    model's kv_fraction row whose model type the engine's memory does not size (GLM-4.5:
    aiconfigurator maps no family to it) is refused."""
    from hardware.timing.serving import _kv_tokens

    shape = CAT.model("llama-3.1-70b").shape
    assert shape.n_heads * shape.d_head == shape.hidden
    with pytest.raises(UserError, match="kv_fraction: glm-4.5-air under trtllm: the "
                                        "engine's memory .* sizes dense transformers and "
                                        "the MoE model types mixtral, gpt_oss, qwen3_moe, "
                                        "deepseek_v3; not glm4_moe"):
        _priced(_row(model="glm-4.5-air", kv_fraction=0.9, gpu="h200", weight_bits=8))
    row = _row(model="glm-4.5-air", kv_fraction=None, gpu="h200")  # the deployment's rule
    assert _kv_tokens(row, _priced(row)[1]) > 0


def test_an_moe_kv_fraction_is_sized_by_the_moe_terms():
    """An MoE model's activations take the MoE coefficients (Qwen3-30B-A3B at TP 1: 22
    vectors of its 32 heads x 128); DeepSeek's add the dispatch workspace, budget x
    hidden (its config has no head_dim: 128 heads x 7168 / 128) x 256 experts x top-8 /
    EP x 4 / 128 bytes, hand-computed here at TP 8, EP 8 and 8192 budget tokens."""
    from hardware.timing.serving import _kv_tokens

    trt = CAT.framework("trtllm").memory
    row = _row(model="qwen3-30b-a3b", kv_fraction=0.9, max_num_tokens=4096)
    _, cost = _priced(row)
    other = 2 * 4096 * (32 * 128) * 22
    left = cost.dep.gpu.hbm_capacity_bytes - cost.resident_weight_bytes()[0] - other \
        - trt.runtime_bytes
    want = 0.9 * left / cost.stage_kv_bytes_per_token[0]
    assert _kv_tokens(row, cost) == pytest.approx(want, rel=1e-12)

    workspace = 8192 * 7168 * 256 * 8 / 8 * 4 / 128
    assert workspace == 8192 * 7168 * 8  # 0.47 GB: 8 bytes per token and hidden unit
    activations = 2 * 8192 * 7168 * 10
    got = trt.bytes_per_gpu(8, 7168, 8192, ("deepseek_v3", 256, 8, 8))
    assert got == pytest.approx(activations + workspace + trt.collective_bytes[8]
                                + trt.runtime_bytes, rel=1e-12)
    # no workspace for a type of aiconfigurator's MOE family
    assert trt.bytes_per_gpu(8, 7168, 8192, ("qwen3_moe", 256, 8, 8)) == pytest.approx(
        activations + trt.collective_bytes[8] + trt.runtime_bytes, rel=1e-12)
    row = _row(model="deepseek-v3", gpu="b200", tp=8, ep=8, kv_fraction=0.8,
               max_num_tokens=8192)
    _, cost = _priced(row)
    left = cost.dep.gpu.hbm_capacity_bytes - cost.resident_weight_bytes()[0] - got
    assert _kv_tokens(row, cost) == pytest.approx(
        0.8 * left / cost.stage_kv_bytes_per_token[0], rel=1e-12)


def test_an_engine_memory_with_moe_models_needs_their_activations():
    from pydantic import ValidationError

    from hardware.catalog import EngineMemory

    with pytest.raises(ValidationError, match="moe_models: needs moe_activation_vectors"):
        EngineMemory(activation_vectors={1: 1.0}, moe_models={"qwen3_moe": False},
                     source="t")


def test_gpu_memory_utilization_is_the_deployment_rule_at_the_runs_share():
    """An SGLang --mem-fraction-static (vLLM --gpu-memory-utilization) row: weights and KV
    together take that share of each GPU, for MoE models too (no engine memory model is
    needed): the KV holds share x HBM - weights, so 0.95 holds more than the default 0.9 by
    0.05 x HBM exactly, and a capacity-bound TPOT row runs a larger batch."""
    from hardware.timing.serving import _kv_tokens

    def tokens(share):
        row = _row(model="qwen3-30b-a3b", framework="sglang", kv_fraction=None,
                   gpu_memory_utilization=share, metric="tpot_s", requests=0,
                   max_num_tokens=None)
        cost = _priced(row)[1]
        return _kv_tokens(row, cost), cost

    (default, cost), (larger, _), (same, _) = tokens(None), tokens(0.95), tokens(0.9)
    per_token = cost.stage_kv_bytes_per_token[0]
    hbm = cost.dep.gpu.hbm_capacity_bytes
    assert same == default
    assert larger - default == pytest.approx(0.05 * hbm / per_token, rel=1e-9, abs=1.0)

    base = dict(model="llama-3.1-8b", gpu="h100", framework="sglang", kv_fraction=None,
                metric="tpot_s", requests=0, max_num_tokens=None, batch=64,
                context=30000, output_tokens=2000, kv_bits=16, weight_bits=16,
                compute_dtype=None)
    small, _ = _priced(_row(**base, gpu_memory_utilization=0.5))
    large, _ = _priced(_row(**base, gpu_memory_utilization=0.95))
    assert large > small  # a larger running batch: a slower step


def test_without_a_budget_the_framework_budget_sizes_the_activations():
    from hardware.timing.serving import _kv_tokens

    row = _row(model="llama-3.1-70b", gpu="h200", max_num_tokens=None)
    _, cost = _priced(row)
    explicit = _row(model="llama-3.1-70b", gpu="h200",
                    max_num_tokens=CAT.framework("trtllm").max_num_batched_tokens)
    assert _kv_tokens(row, cost) == _kv_tokens(explicit, _priced(explicit)[1])
    smaller = _row(model="llama-3.1-70b", gpu="h200", max_num_tokens=2048)
    assert _kv_tokens(smaller, _priced(smaller)[1]) > _kv_tokens(row, cost)


def test_an_engine_memory_larger_than_the_gpu_does_not_fit(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("frameworks:\n  trtllm:\n    memory:\n      runtime_bytes: 1.0e12\n")
    with pytest.raises(UserError, match="a request of 100 \\+ 10 tokens does not fit \\(the "
                                        "KV cache holds 0 such requests"):
        _priced(_row(), load_catalog(path))


def test_the_budget_can_be_the_largest_graph():
    """max_num_tokens below the max batch: the largest decode batch is the budget, and
    the decodes pad up to it; a float residue above a size does not pad further."""
    from hardware.timing.serving import _graph_batches, _padded

    graphs = _graph_batches((1, 2, 4, 8, 16), min(16, 6))
    assert graphs == (1, 2, 4, 6)
    assert [_padded(graphs, b) for b in (2.5, 4 + 1e-12, 5)] == [4, 4, 6]
    # a max batch of 1000 and a budget of 600 tokens: graphs 1, 2, 4 and 600
    row = _row(batch=1000, requests=5, max_num_tokens=600,
               cuda_graph_batch_sizes=(1, 2, 4, 1024))
    got, cost = _priced(row)
    isl = 100
    want = (_step(cost, 0, 0.0, 5, isl)  # five 100-token prompts in a 600-token step
            + 9 * cost.pass_seconds_sums(600, 5 * 104.0, 5 * 104.0, 600, n_seqs=600))
    assert got == pytest.approx(5 * 10 / want, rel=1e-12)


def test_a_kv_bound_run_pads_to_its_max_batch():
    """When the KV cache, not the max batch, caps the running requests, the decodes still
    pad to the max batch (the largest graph) when no captured size lies between."""
    from hardware.timing.serving import _kv_tokens

    base = _row(batch=8, requests=40, max_num_tokens=1000)
    _, cost = _priced(base)
    fraction = 5.5 * cost.stage_kv_bytes_per_token[0] * 110 / _left(cost, base)
    row = dataclasses.replace(base, kv_fraction=fraction, cuda_graph_batch_sizes=(1, 2, 4, 16))
    assert math.floor(_kv_tokens(row, _priced(row)[1]) / 110) == 5  # 5 run, max batch 8
    padded, cost = _priced(row)
    plain, _ = _priced(dataclasses.replace(row, cuda_graph_batch_sizes=()))
    assert padded < plain
    to8, _ = _priced(dataclasses.replace(row, cuda_graph_batch_sizes=(1, 2, 4, 8)))
    assert to8 == padded  # 16 is above the max batch: the graphs are 1, 2, 4, 8


def test_the_tightest_stage_sizes_a_pipelines_fractional_kv_cache():
    """Every stage's GPU keeps the engine's memory; the stage with the least left decides."""
    from hardware.timing.serving import _kv_tokens

    row = _row(model="llama-3.1-70b", gpu="h100", tp=2, pp=2, metric="tpot_s",
               requests=0, kv_fraction=0.9)
    _, cost = _priced(row)
    shape = cost.dep.model.shape
    left = cost.dep.gpu.hbm_capacity_bytes - cost.framework.memory.bytes_per_gpu(
        2, shape.n_heads * shape.d_head, row.max_num_tokens)
    want = min(0.9 * (left - w) / per_token for w, per_token in
               zip(cost.resident_weight_bytes(), cost.stage_kv_bytes_per_token, strict=True))
    assert len(cost.resident_weight_bytes()) == 2
    assert _kv_tokens(row, cost) == pytest.approx(want, rel=1e-12)
