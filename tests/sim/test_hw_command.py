"""``specsim hw step`` and ``specsim hw list`` end to end through ``sim.cli.main``."""

from __future__ import annotations

import json

from sim.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_step_json_reproduces_6_15_ms(capsys):
    code, out, _ = run(capsys, "hw", "step", "--model", "llama-3-8b", "--gpu", "h100",
                       "--batch", "1", "--context", "1024", "--tokens", "1", "--timing",
                       "paper", "--json")
    assert code == 0
    data = json.loads(out)
    assert round(data["seconds"] * 1e3, 2) == 6.15
    assert (data["backend"], data["timing"], data["framework"]) == ("paper", "paper", "vllm")
    assert data["bound"] == "memory"
    for key in ("flops", "hbm_bytes", "compute_s", "memory_s", "comm_s", "host_s", "overhead_s",
                "arithmetic_intensity", "kv_capacity_tokens", "kv_capacity_blocks"):
        assert key in data
    assert data["kv_capacity_blocks"] == data["kv_capacity_tokens"] // 16


def test_step_text_names_the_bound(capsys):
    code, out, _ = run(capsys, "hw", "step", "--model", "llama-3-8b", "--gpu", "h100",
                       "--batch", "128", "--context", "128", "--tokens", "5")
    assert code == 0
    assert "(compute-bound)" in out and "ridge 295 FLOP/byte" in out


def test_step_with_tp_pp_offload_and_bits(capsys):
    code, out, _ = run(capsys, "hw", "step", "--model", "llama-2-70b", "--gpu", "a100-80gb",
                       "--tp", "4", "--pp", "2", "--weight-bits", "8", "--kv-bits", "8",
                       "--batch", "8", "--context", "512", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["comm_s"] > 0 and len(data["stage_s"]) == 2 and data["hop_s"] > 0
    code, out, _ = run(capsys, "hw", "step", "--model", "opt-30b", "--gpu", "a10",
                       "--offload", "1", "--batch", "1", "--context", "128", "--json")
    assert code == 0 and json.loads(out)["bound"] == "host"
    # pageable host memory streams at the GPU's pageable efficiency (the T4's is lower)
    argv = ("hw", "step", "--model", "opt-30b", "--gpu", "t4", "--offload", "1", "--batch",
            "1", "--context", "128", "--timing", "roofline", "--json")
    pinned = json.loads(run(capsys, *argv)[1])
    pageable = json.loads(run(capsys, *argv, "--pageable")[1])
    assert (pinned["offload_pin_memory"], pageable["offload_pin_memory"]) == (True, False)
    assert pageable["host_s"] > pinned["host_s"] > 0


def test_step_prices_a_tree_verify_with_the_tree_mask(capsys):
    """Lecture §7.3: 21 nodes of <5,1,1,1> on the 8-bit Llama-3-70B, H200, batch 1: 18.7 ms."""
    argv = ["hw", "step", "--model", "llama-3-70b", "--gpu", "h200", "--weight-bits", "8",
            "--batch", "16", "--context", "1024", "--timing", "paper"]
    code, out, _ = run(capsys, *argv, "--tree", "5,1,1,1", "--json")
    assert code == 0
    tree = json.loads(out)
    assert (tree["tokens"], tree["tree"], tree["bound"]) == (21, "5,1,1,1", "compute")
    code, out, _ = run(capsys, *argv, "--tokens", "21", "--json")
    causal = json.loads(out)
    # 16 sequences x (231 - 71) keys fewer, 4 x 80 x 64 x 128 FLOPs each
    assert causal["flops"] - tree["flops"] == 16 * 160 * 4 * 80 * 64 * 128
    assert tree["seconds"] < causal["seconds"] and tree["hbm_bytes"] == causal["hbm_bytes"]
    argv[argv.index("16")] = "1"
    code, out, _ = run(capsys, *argv, "--tree", "5,1,1,1")
    assert code == 0 and "21 new tokens (tree <5,1,1,1>)" in out and "18.689 ms" in out
    code, _, err = run(capsys, *argv, "--tree", "5,0")
    assert code == 2 and "--tree: every expansion width must be >= 1, got '5,0'" in err


def test_step_accepts_a_config_json(capsys, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({
        "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "vocab_size": 128256, "max_position_embeddings": 8192, "rope_theta": 500000.0}))
    code, out, _ = run(capsys, "hw", "step", "--model", str(path), "--gpu", "h100",
                       "--batch", "1", "--context", "1024", "--timing", "paper", "--json")
    assert code == 0 and round(json.loads(out)["seconds"] * 1e3, 2) == 6.15


def test_errors_are_one_line_exit_2(capsys):
    code, out, err = run(capsys, "hw", "step", "--model", "llama-3-8b", "--gpu", "h1000",
                         "--batch", "1", "--context", "1")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "unknown gpu 'h1000' (known: a10," in err
    code, _, err = run(capsys, "hw", "step", "--model", "llama-3-70b", "--gpu", "h100",
                       "--batch", "1", "--context", "1")
    assert code == 2 and "does not fit" in err and "GiB" in err and err.count("\n") == 1
    code, _, err = run(capsys, "hw", "step", "--model", "llama-3-8b", "--gpu", "h100",
                       "--tp", "3", "--batch", "1", "--context", "1")
    assert code == 2 and "tp 3 does not divide num_attention_heads 32" in err
    code, _, err = run(capsys, "hw", "step", "--model", "llama-3-8b", "--gpu", "h100",
                       "--batch", "0", "--context", "1")
    assert code == 2 and "--batch: must be in 1..65536, got 0" in err


def test_bad_catalog_file_is_one_line(capsys, tmp_path):
    bad = tmp_path / "cat.yaml"
    bad.write_text("gpus:\n  x: {name: 1}\n")
    code, _, err = run(capsys, "hw", "list", "--catalog", str(bad))
    assert code == 2 and err.count("\n") == 1 and f"{bad}: gpus.x." in err


def test_list_json_and_text(capsys):
    code, out, _ = run(capsys, "hw", "list", "--json")
    assert code == 0
    data = json.loads(out)
    assert {"h100", "t4"} <= set(data["gpus"]) and "nvlink4" in data["links"]
    assert data["models"]["llama-3-8b"]["total_params"] == 8_030_261_248
    assert data["models"]["llama-3-8b"]["config"]["hidden_size"] == 4096
    code, out, _ = run(capsys, "hw", "list")
    assert code == 0 and "rtx-4090" in out and "ib-ndr-400g" in out and "vicuna-33b" in out


def test_hw_without_action_prints_help(capsys):
    code, out, _ = run(capsys, "hw")
    assert code == 2 and "step" in out and "list" in out


def test_hw_speedup_is_specsim_speedup(capsys):
    argv = ["--alpha", "0.8", "--c", "0.1", "--json"]
    _, direct, _ = run(capsys, "speedup", *argv)
    code, via_hw, _ = run(capsys, "hw", "speedup", *argv)
    assert code == 0 and json.loads(via_hw) == json.loads(direct)


STEP = ["hw", "step", "--model", "llama-3-8b", "--gpu", "h100", "--batch", "1"]


def test_step_refuses_bad_flags_instead_of_ignoring_them(capsys):
    for extra, message in (
        (["--context", "1", "--tp", "0"], "--tp: must be in 1..1024, got 0"),
        (["--context", "1", "--pp", "0"], "--pp: must be in 1..1024, got 0"),
        (["--context", "1", "--offload", "1.5"],
         "--offload: must be a fraction in [0, 1], got 1.5"),
        (["--context", "1", "--tp-link", ""], "unknown link ''"),
        (["--context", "1", "--pp-link", ""], "unknown link ''"),
        (["--context", "200000"], "llama-3-8b: context 200000 + 1 new tokens = 200001 positions "
                                  "exceed max_position_embeddings 8192"),
        (["--context", "8190", "--tokens", "3"], "8193 positions exceed"),
        (["--context", "8188", "--tree", "5,1,1,1"], "context 8188 + 5 new tokens"),
    ):
        code, out, err = run(capsys, *STEP, *extra)
        assert code == 2 and out == "" and err.count("\n") == 1, (extra, err)
        assert message in err, (extra, err)
    code, _, _ = run(capsys, *STEP, "--context", "8187", "--tree", "5,1,1,1")
    assert code == 0  # 21 nodes but only 5 positions deep


def test_step_tp_across_servers_uses_the_node_link(capsys):
    def step(tp):
        code, out, _ = run(capsys, *STEP, "--context", "1024", "--tp", str(tp), "--json")
        assert code == 0
        return json.loads(out)

    eight, sixteen = step(8), step(16)
    assert (eight["tp_link"], sixteen["tp_link"]) == ("nvlink4", "ib-ndr-400g")
    assert eight["gpus_per_node"] == 8 and step(1)["tp_link"] is None
    assert sixteen["comm_s"] > 5 * eight["comm_s"]  # over NVLink it would be ~2x
    code, out, _ = run(capsys, *STEP, "--context", "1024", "--tp", "16")
    assert "(TP all-reduces over ib-ndr-400g, TP over 2 servers)" in out
    code, out, _ = run(capsys, "hw", "list")
    assert "8/node" in out


def test_non_utf8_catalog_is_one_line(capsys, tmp_path):
    bad = tmp_path / "cat.yaml"
    bad.write_bytes(b"gpus:\n  h100: {name: \xe9}\n")
    code, _, err = run(capsys, "hw", "list", "--catalog", str(bad))
    assert code == 2 and err.count("\n") == 1 and f"{bad}: not a UTF-8 text file" in err


def test_step_json_says_which_backend_priced_it_and_its_terms(capsys):
    import pytest

    pytest.importorskip("aiconfigurator_core", reason="the default timing reads its tables")
    argv = ["hw", "step", "--model", "llama-3.1-8b", "--gpu", "h100", "--batch", "8",
            "--context", "1024", "--json"]
    code, out, _ = run(capsys, *argv)
    data = json.loads(out)
    assert code == 0 and (data["backend"], data["timing"]) == ("measured", "auto")
    assert "aiconfigurator-core 0.12.0 tables h100_sxm / vllm 0.24.0" in data["note"]
    assert set(data["parts"]) == {"gemm_s", "attention_s", "allreduce_s", "elementwise_s",
                                  "host_s", "overhead_s"}
    code, out, _ = run(capsys, *argv, "--timing", "roofline", "--framework", "sglang")
    data = json.loads(out)
    assert (data["backend"], data["framework"]) == ("roofline", "sglang")
    code, out, _ = run(capsys, *argv[:-1], "--weight-bits", "4")
    assert "auto: roofline, because" in out and "int4_wo" in out
    code, _, err = run(capsys, *argv, "--framework", "nope")
    assert code == 2 and "unknown framework 'nope' (known: flexgen, gpt-fast," in err


def test_list_says_what_stands_behind_each_gpus_timing(capsys):
    code, out, _ = run(capsys, "hw", "list", "--json")
    data = json.loads(out)
    assert data["gpus"]["h100"]["timing_data"]["tables"] == "h100_sxm"
    assert data["gpus"]["h100"]["timing_data"]["roofline"] == "calibrated"
    assert data["gpus"]["a10"]["timing_data"]["roofline"] == "borrowed"
    assert "vllm" in data["frameworks"] and data["frameworks"]["vllm"]["seq_s"] > 0
    code, out, _ = run(capsys, "hw", "list")
    assert "timing: measured tables h100_sxm; roofline calibrated:" in out
    assert "timing: no measured tables; roofline borrowed:" in out
    assert "Frameworks" in out and "nvlink4" in out and "call" in out
    assert "own memory per GPU: 3.50 GiB + activations 11/6.5/5/5 hidden-wide vectors per " \
           "budget token (TP 1/2/4/8) + collective buffers 342-392 MiB under TP" in out
    assert data["frameworks"]["trtllm"]["memory"]["runtime_bytes"] == 3.5 * 2**30
    assert data["frameworks"]["vllm"]["memory"] is None
