"""The engines' parallel layouts read and written: tp, ep and data-parallel attention as
SGLang's launch_server and TensorRT-LLM's trtllm-serve state them."""

from __future__ import annotations

import json

import pytest

from hardware.catalog import load_catalog
from sim.cli import main
from specdec.errors import UserError

CAT = load_catalog()
MOE = {"deepseek-ai/DeepSeek-V3": "deepseek-v3"}


def _sets(parsed) -> dict:
    return {k: json.loads(v) for k, v in (t.split("=", 1) for t in parsed.sets)}


def _sglang(flags: str) -> dict:
    from sim.engines.sglang import parse_sglang

    return _sets(parse_sglang("python3 -m sglang.launch_server --model-path "
                              f"deepseek-ai/DeepSeek-V3 {flags}", MOE.__getitem__))


def _trtllm(flags: str, yaml_text: str | None = None, tmp_path=None) -> dict:
    from sim.engines.trtllm import parse_trtllm

    if yaml_text is not None:
        (tmp_path / "c.yaml").write_text(yaml_text)
        flags += f" --config {tmp_path / 'c.yaml'}"
    return _sets(parse_trtllm(f"trtllm-serve deepseek-ai/DeepSeek-V3 {flags}",
                              MOE.__getitem__))


@pytest.mark.parametrize("flags, tp, ep", [
    ("--tp 8", 8, 1),
    ("--tp-size 8 --ep-size 4", 8, 4),  # moe_tp_size 2
    ("--tp 8 --ep 8", 8, 8),
    ("--tp 8 --expert-parallel-size 2", 8, 2),
    ("--tp 8 --dp 2 --enable-dp-attention --ep 8", 4, 8),
    ("--tp 8 --dp-size 8 --enable-dp-attention --ep-size 8", 1, 8),
])
def test_sglangs_layout_flags_become_tp_and_ep(flags, tp, ep):
    s = _sglang(flags)
    assert (s["deployment.tp"], s["deployment.ep"]) == (tp, ep)


@pytest.mark.parametrize("flags, match", [
    ("--tp 8 --ep 3", "--ep-size 3: must divide --tp-size 8"),
    ("--tp 8 --dp 2", "--dp 2 without --enable-dp-attention"),
    ("--tp 8 --dp 3 --enable-dp-attention --ep 8", "--dp-size 3: must divide --tp-size 8"),
    ("--tp 8 --dp 2 --enable-dp-attention --ep 4", "experts split 2 ways"),
])
def test_an_sglang_layout_specsim_cannot_model_is_refused(flags, match):
    with pytest.raises(UserError, match=match):
        _sglang(flags)


@pytest.mark.parametrize("flags, yaml_text, tp, ep", [
    ("--tp_size 8", None, 8, 1),
    ("--tp_size 8 --ep_size 4", None, 8, 4),
    ("--tp_size 8", "moe_tensor_parallel_size: 2\n", 8, 4),
    ("--tp_size 8 --ep_size 2", "moe_expert_parallel_size: 8\n", 8, 8),  # the YAML wins
    ("--tp_size 8 --ep_size 8", "enable_attention_dp: true\n", 1, 8),
    ("", "tensor_parallel_size: 4\nmoe_expert_parallel_size: 4\n"
         "enable_attention_dp: true\n", 1, 4),
])
def test_trtllms_layout_becomes_tp_and_ep(flags, yaml_text, tp, ep, tmp_path):
    s = _trtllm(flags, yaml_text, tmp_path)
    assert (s["deployment.tp"], s["deployment.ep"]) == (tp, ep)


@pytest.mark.parametrize("tp, ep", [(8, 1), (8, 4), (8, 8), (1, 8), (2, 8)])
def test_the_written_launch_lines_read_back_as_their_layout(tp, ep, tmp_path):
    from sim.engines.sglang import launch_command
    from sim.engines.trtllm import serve_command
    from sim.loading import load_scenario

    sc = load_scenario(None, ["models.target=deepseek-v3", "models.draft=null",
                              f"deployment.tp={tp}", f"deployment.ep={ep}",
                              "variants=[{name: none, policy: {kind: none}}]"])
    line, _ = launch_command(sc, sc.variants[0], CAT)
    s = _sglang(line.split("--model-path deepseek-ai/DeepSeek-V3", 1)[1])
    assert (s["deployment.tp"], s["deployment.ep"]) == (tp, ep)
    line, config, notes = serve_command(sc, sc.variants[0], CAT)
    (tmp_path / "config.yaml").write_text(config)
    flags = line.split("trtllm-serve deepseek-ai/DeepSeek-V3", 1)[1].replace(
        "--config config.yaml", f"--config {tmp_path / 'config.yaml'}")
    s = _trtllm(flags)
    # TensorRT-LLM's attention DP runs each rank's attention alone: tp 1, and a note
    assert (s["deployment.tp"], s["deployment.ep"]) == ((1 if ep > tp else tp), ep)
    assert any("attention DP runs each rank's attention alone" in n for n in notes) == (
        ep > tp > 1)


@pytest.mark.parametrize("kernel, runner, backend", [
    ("trtllm_gen", "flashinfer_trtllm", "TRTLLM"), ("deepgemm", "deep_gemm", "DEEPGEMM"),
    ("cutlass", "cutlass", "CUTLASS"), ("triton", "triton", "TRITON"),
])
def test_the_moe_kernel_round_trips_through_each_engines_knob(kernel, runner, backend,
                                                              tmp_path):
    """deployment.moe_kernel is SGLang's --moe-runner-backend and TensorRT-LLM's
    moe_config.backend, both ways; vLLM's line says it sets none."""
    from sim.engines.sglang import launch_command
    from sim.engines.trtllm import serve_command
    from sim.engines.vllm import serve_command as vllm_serve
    from sim.loading import load_scenario

    sc = load_scenario(None, ["models.target=deepseek-v3", "models.draft=null",
                              "deployment.tp=8", f"deployment.moe_kernel={kernel}",
                              "variants=[{name: none, policy: {kind: none}}]"])
    line, _ = launch_command(sc, sc.variants[0], CAT)
    assert f"--moe-runner-backend {runner}" in line
    assert _sglang(line.split("--model-path deepseek-ai/DeepSeek-V3", 1)[1])[
        "deployment.moe_kernel"] == kernel
    line, config, _ = serve_command(sc, sc.variants[0], CAT)
    assert f"backend: {backend}" in config
    (tmp_path / "config.yaml").write_text(config)
    flags = line.split("trtllm-serve deepseek-ai/DeepSeek-V3", 1)[1].replace(
        "--config config.yaml", f"--config {tmp_path / 'config.yaml'}")
    assert _trtllm(flags)["deployment.moe_kernel"] == kernel
    _, notes = vllm_serve(sc, sc.variants[0], CAT)
    assert any(n.startswith(f"deployment.moe_kernel {kernel}: vLLM chooses") for n in notes)


def test_an_engine_moe_kernel_specsim_does_not_price_is_refused(tmp_path):
    assert "deployment.moe_kernel" not in _sglang("--tp 8 --moe-runner-backend auto")
    with pytest.raises(UserError, match="--moe-runner-backend: one of .* got 'flashinfer_mxfp4'"):
        _sglang("--tp 8 --moe-runner-backend flashinfer_mxfp4")
    with pytest.raises(UserError, match="moe_config: backend: one of .* got 'WIDEEP'"):
        _trtllm("--tp_size 8", "moe_config:\n  backend: WIDEEP\n", tmp_path)


def test_an_moe_kernel_flag_on_a_dense_model_configures_nothing(tmp_path, capsys):
    """SGLang takes --moe-runner-backend for any model and uses it only for MoE layers:
    on a dense target the imported line runs, the flag dropped with a note."""
    out = tmp_path / "out"
    code = main(["run", "--from-sglang", "python3 -m sglang.launch_server --model-path "
                 "meta-llama/Llama-3.1-8B-Instruct --moe-runner-backend flashinfer_trtllm",
                 "--set", "run.requests=20", "--out", str(out), "--no-report"])
    assert code == 0
    scenario = (out / "scenario.yaml").read_text()
    assert "moe_kernel: null" in scenario
    printed = capsys.readouterr()
    assert "llama-3.1-8b has no routed experts: its MoE kernel flag configures nothing" in \
        printed.err + printed.out
