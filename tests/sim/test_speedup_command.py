"""``specsim speedup`` in both modes end to end through ``sim.cli.main``."""

from __future__ import annotations

import json
import re

import pytest

from hardware.catalog import load_catalog
from hardware.spec_cost import spec_round
from sim.cli import main

CAT = load_catalog()

# the lecture's numbers: its paper GPU
HW = ["speedup", "--target", "llama-3-8b", "--draft", "llama-3.2-1b", "--gpu", "h100",
      "--timing", "paper"]
# lecture section 7.3: 8-bit target, 16-bit draft (the draft defaults to the target's bits)
TREE = ["speedup", "--target", "llama-3-70b", "--weight-bits", "8", "--draft", "llama-3.2-1b",
        "--draft-weight-bits", "16", "--gpu", "h200", "--context", "1024", "--tree", "k,1,1,1",
        "--widths", "1,5",
        "--tokens-per-verify", "1.63,2.34", "--timing", "paper"]


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_analytic_json_shape(capsys):
    code, out, _ = run(capsys, "speedup", "--alpha", "0.8", "--c", "0.1", "--gamma-max", "8",
                       "--json")
    assert code == 0
    data = json.loads(out)
    assert [r["gamma"] for r in data["rows"]] == list(range(1, 9))
    assert set(data["rows"][0]) == {"gamma", "expected_tokens", "speedup", "ops"}
    assert data["best"]["gamma"] == 6 and round(data["best"]["speedup"], 2) == 2.47


def test_analytic_no_gamma_pays(capsys):
    code, out, _ = run(capsys, "speedup", "--alpha", "0.1", "--c", "0.2", "--json")
    assert code == 0
    assert json.loads(out)["best"] == {"gamma": 0, "expected_tokens": 1.0, "speedup": 1.0,
                                       "ops": 1.0}
    code, out, _ = run(capsys, "speedup", "--alpha", "0.1", "--c", "0.2")
    assert "best: no speculation" in out


def test_hardware_chain_json(capsys):
    code, out, _ = run(capsys, *HW, "--batch", "256", "--context", "128", "--alpha", "0.8",
                       "--json")
    assert code == 0
    data = json.loads(out)
    row4 = data["rows"][3]
    assert row4["gamma"] == 4 and round(row4["verify_ratio"], 1) == 3.7
    assert round(row4["speedup"], 2) == 0.73 and "c" in row4
    assert data["best"]["gamma"] == 1 and round(data["best"]["speedup"], 2) == 1.03
    code, out, _ = run(capsys, *HW, "--batch", "512", "--context", "128", "--alpha", "0.8",
                       "--json")
    assert json.loads(out)["best"]["gamma"] == 0 and json.loads(out)["best"]["speedup"] == 1.0


def test_hardware_chain_text(capsys):
    code, out, _ = run(capsys, *HW, "--batch", "256", "--context", "1024", "--alpha", "0.8")
    assert code == 0 and "best: gamma 2, speedup 1.637x" in out


def test_hardware_tree_json(capsys):
    code, out, _ = run(capsys, *TREE, "--batch", "16", "--json")
    assert code == 0
    data = json.loads(out)
    assert [r["width"] for r in data["rows"]] == [1, 5]
    assert [r["nodes"] for r in data["rows"]] == [5, 21]
    assert round(data["rows"][0]["speedup"], 2) == 1.30
    assert data["best"]["width"] == 1
    code, out, _ = run(capsys, *TREE, "--batch", "64", "--json")
    assert json.loads(out)["best"]["width"] == 0 and json.loads(out)["best"]["speedup"] == 1.0


def test_single_tree_without_k(capsys):
    code, out, _ = run(capsys, *HW, "--batch", "1", "--context", "128", "--tree", "2,2,1",
                       "--tokens-per-verify", "2.0", "--json")
    assert code == 0 and json.loads(out)["rows"][0]["nodes"] == 11


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["speedup", "--alpha", "0.8", "--c", "0.1", "--gpu", "h100"], "--gpu needs --target"),
        (["speedup", "--alpha", "0.8", "--c", "0.1", "--tree", "k,1"], "--tree needs --target"),
        ([*HW, "--batch", "1", "--context", "1", "--alpha", "0.8", "--c", "0.2"],
         "--c is for the analytic mode"),
        ([*HW, "--batch", "1", "--context", "1"], "--alpha: required for a chain table"),
        ([*HW, "--context", "1", "--alpha", "0.8"], "--batch: required in hardware mode"),
        ([*HW, "--batch", "1", "--context", "1", "--alpha", "0.8", "--widths", "1,2"],
         "--widths needs --tree"),
        ([*TREE, "--batch", "1", "--alpha", "0.8"], "--alpha is not used with --tree"),
        ([*HW, "--batch", "1", "--context", "1", "--tree", "k,1"],
         "--tokens-per-verify: required with --tree"),
        ([*HW, "--batch", "1", "--context", "1", "--tree", "k,1", "--tokens-per-verify", "1.5"],
         "--widths: required when --tree contains k"),
        ([*HW, "--batch", "1", "--context", "1", "--tree", "2,x", "--tokens-per-verify", "1.5"],
         "--tree: must be comma-separated integers"),
        (["speedup", "--alpha", "0.8"], "analytic mode needs --alpha and --c"),
        (["speedup", "--alpha", "1.5", "--c", "0.1"], "alpha: must be in [0, 1]"),
        ([*HW, "--batch", "512", "--context", "1024", "--alpha", "0.8"], "does not fit"),
    ],
)
def test_mixed_or_missing_flags_are_one_line_exit_2(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert message in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["speedup", "--alpha", "0.8", "--c", "0.1", "--gamma-max", "0"],
         "--gamma-max: must be in 1..64, got 0"),
        ([*HW, "--batch", "1", "--context", "1", "--alpha", "0.8", "--gamma-max", "0"],
         "--gamma-max: must be in 1..64, got 0"),
        ([*HW, "--batch", "1", "--context", "1", "--alpha", "0.8", "--tp", "0"],
         "--tp: must be in 1..1024, got 0"),
        ([*HW, "--batch", "0", "--context", "1", "--alpha", "0.8"],
         "--batch: must be in 1..65536, got 0"),
        ([*HW, "--batch", "1", "--context", "-1", "--alpha", "0.8"],
         "--context: must be in 0..10000000, got -1"),
        ([*TREE[:-6], "--tree", "0,1,1", "--tokens-per-verify", "1.5", "--batch", "1"],
         "--tree: every expansion width must be >= 1, got '0,1,1'"),
        ([*TREE[:-6], "--tree", "k,0", "--widths", "1", "--tokens-per-verify", "1.5",
          "--batch", "1"],
         "--tree: every expansion width must be >= 1"),
        ([*TREE[:-6], "--tree", "k,1", "--widths", "0,2", "--tokens-per-verify", "1.5,1.5",
          "--batch", "1"],
         "--widths: every width must be >= 1, got '0,2'"),
        (["speedup", "--target", "llama-3-8b", "--draft", "opt-125m", "--gpu", "h100",
          "--batch", "1", "--context", "128", "--alpha", "0.8"],
         "draft opt-125m cannot speculate for target llama-3-8b: draft vocab_size 50272, "
         "target vocab_size 128256; the draft must share the target's tokenizer"),
        ([*HW, "--batch", "1", "--context", "8184", "--alpha", "0.8"],
         "llama-3-8b: context 8184 + 9 new tokens = 8193 positions exceed "
         "max_position_embeddings 8192"),
        (["speedup", "--target", "llama-3-70b", "--tp", "4", "--weight-bits", "4",
          "--draft-weight-bits", "16", "--draft", "llama-3.2-1b", "--gpu", "a10",
          "--batch", "78", "--context", "2048", "--alpha", "0.8"],
         "draft llama-3.2-1b (co-located) next to target llama-3-70b does not fit on 4x1 a10"),
        (["speedup", "--target", "llama-3-8b", "--weight-bits", "4", "--draft", "llama-3-70b",
          "--draft-placement", "separate", "--gpu", "a10", "--batch", "1", "--context", "16",
          "--alpha", "0.8"],
         "draft llama-3-70b does not fit on 1x1 a10"),
    ],
)
def test_bad_values_are_refused_not_clamped(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert message in err and err.count("\n") == 1, err


def test_separate_draft_error_names_the_asked_deployment(capsys):
    code, _, err = run(capsys, "speedup", "--target", "llama-3-8b", "--weight-bits", "4",
                       "--draft", "llama-3-70b", "--draft-placement", "separate", "--gpu", "a10",
                       "--batch", "1", "--context", "16", "--alpha", "0.8")
    assert code == 2
    assert "(asked for: target llama-3-8b tp 1 on a10, draft separate)" in err


def test_the_largest_context_that_fits_the_positions_runs(capsys):
    code, _, _ = run(capsys, *HW, "--batch", "1", "--context", "8183", "--alpha", "0.8")
    assert code == 0


def test_draft_weight_bits_default_to_the_targets(capsys):
    """As a scenario's deployment.draft_weight_bits (null = the target's bits)."""
    base = [*HW, "--batch", "1", "--context", "1024", "--alpha", "0.8", "--weight-bits", "8",
            "--json"]

    def c_of(*extra):
        code, out, _ = run(capsys, *base, *extra)
        assert code == 0
        return json.loads(out)["rows"][0]["c"]

    assert c_of() == c_of("--draft-weight-bits", "8")
    assert c_of() < c_of("--draft-weight-bits", "16")


def test_help_states_every_default(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # no wrapping inside a flag's help
    with pytest.raises(SystemExit):
        main(["speedup", "--help"])
    options = capsys.readouterr().out.split("options:", 1)[1]
    entries = [e for e in re.split(r"\n  (?=-)", options) if e.strip()]
    helps = {e.split()[0]: " ".join(e.split()) for e in entries}
    for flag, said in (("--alpha", "no default: required"), ("--batch", "no default"),
                       ("--context", "no default"), ("--gamma-max", "(default 8)"),
                       ("--tp", "(default 1)"), ("--kv-bits", "(default 16)"),
                       ("--draft-weight-bits", "default: the target's --weight-bits"),
                       ("--draft-placement", "default colocated")):
        assert said in helps[flag], (flag, helps[flag])


def test_output_states_the_bits_used(capsys):
    code, out, _ = run(capsys, *TREE, "--batch", "1", "--json")
    data = json.loads(out)
    assert (data["weight_bits"], data["draft_weight_bits"], data["tp"]) == (8, 16, 1)
    code, out, _ = run(capsys, *HW, "--batch", "1", "--context", "1", "--alpha", "0.8",
                       "--weight-bits", "4")
    assert out.startswith("llama-3-8b (4-bit, tp 1) + draft llama-3.2-1b (4-bit, colocated)")


# the calibrated roofline: the paper GPU's 0.5 ms per pass would hide a head's small cost
METHOD = ["speedup", "--target", "llama-3-8b", "--gpu", "h100", "--timing", "roofline",
          "--batch", "1", "--context", "1024", "--alpha", "0.7", "--gamma-max", "4", "--json"]


def test_method_eagle3_prices_a_head_built_from_the_target(capsys):
    """An EAGLE-3 head is one decoder layer plus a 32000-row lm_head: a pass costs a few
    percent of the 32-layer target's at batch 1, far below the 1B draft model's."""
    code, out, _ = run(capsys, *METHOD, "--method", "eagle3")
    assert code == 0
    head = json.loads(out)
    assert head["method"] == "eagle3" and head["draft"] == "llama-3-8b-eagle3"
    code, out, _ = run(capsys, *METHOD, "--draft", "llama-3.2-1b")
    model = json.loads(out)
    assert model["method"] == "draft_model"
    # c counts vLLM's work around the round (hardware.spec_cost); its GPU passes alone:
    vllm = CAT.framework("vllm")

    def gpu_c(data, method):
        r = data["rows"][0]  # gamma 1: one pass
        return (r["draft_s"] - spec_round(vllm, method).seconds(1, 1, False)) / r["decode_s"]

    c_head, c_model = gpu_c(head, "eagle3"), gpu_c(model, "draft_model")
    assert 0.0 < c_head < 0.1 and c_head < c_model / 2
    assert head["rows"][0]["c"] > c_head  # the round counts in the draft cost c


def test_method_ngram_costs_no_gpu_time(capsys):
    """n-gram drafting: no draft pass, so speedup = E(alpha, gamma) x decode / verify."""
    code, out, _ = run(capsys, *METHOD, "--method", "ngram")
    assert code == 0
    data = json.loads(out)
    assert data["draft"] is None and data["draft_placement"] is None
    # no GPU pass: the drafting is vLLM's work around a round alone (hardware.spec_cost)
    round_s = spec_round(CAT.framework("vllm"), "ngram").seconds(1, 0, False)
    assert round_s > 0
    for r in data["rows"]:
        assert r["draft_s"] == round_s
        assert r["speedup"] == pytest.approx(
            r["expected_tokens"] * r["decode_s"] / (round_s + r["verify_s"]), rel=1e-12)


@pytest.mark.parametrize(("extra", "message"), [
    (["--method", "ngram", "--draft", "llama-3.2-1b"],
     "--draft llama-3.2-1b: not used with --method ngram"),
    ([], "--draft: required in hardware mode (--target) with --method draft_model"),
])
def test_method_flag_mixtures_are_refused(extra, message, capsys):
    code, _, err = run(capsys, *METHOD, *extra)
    assert code == 2 and message in err


def test_method_mtp_on_deepseek_v3_prices_its_moe_module(capsys):
    """DeepSeek-V3's MTP module is one MLA + MoE block sharded like the target (tp and ep);
    the target defaults to the precision its checkpoint ships in (FP8), as hw step does."""
    code, out, err = run(capsys, "speedup", "--method", "mtp", "--target", "deepseek-v3",
                         "--gpu", "h200", "--tp", "8", "--batch", "8", "--context", "1024",
                         "--alpha", "0.8", "--gamma-max", "2", "--timing", "roofline",
                         "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["weight_bits"] == 8 and data["compute_dtype"] == "fp8"
    assert data["draft"] == "deepseek-v3-mtp"
    r = data["rows"][0]  # one pass; c without vLLM's work around the round
    gpu = r["draft_s"] - spec_round(CAT.framework("vllm"), "mtp").seconds(8, 1, False)
    assert 0.0 < gpu / r["decode_s"] < 0.1 and data["best"]["speedup"] > 1.0


def test_draft_flags_with_a_cpu_drafter_are_refused(capsys):
    for flag, value in (("--draft-placement", "separate"), ("--draft-weight-bits", "4")):
        code, _, err = run(capsys, *METHOD, "--method", "ngram", flag, value)
        assert code == 2 and f"{flag} {value}: --method ngram drafts on the CPU" in err
