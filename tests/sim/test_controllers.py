"""The engines' speculation controllers decide as their source does, on hand-made batch
sequences, and run from the engines' own command lines.

SGLang's ``--speculative-adaptive``: the sglang 0.5.14 wheel on PyPI,
sglang/srt/speculative/adaptive_spec_params.py (``AdaptiveStepSlot.update`` and
``_recompute_params``, ``AdaptiveSpeculativeParams._route``) and server_args.py
(``_generate_decode_cuda_graph_batch_sizes``, the speculative list)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sim.cli import main
from sim.controllers import SglangAdaptive, sglang_capture_sizes
from sim.engines.sglang import parse_sglang
from specdec.errors import UserError


def _feed(policy: SglangAdaptive, n: int, accepted: int, batches: int) -> list[int]:
    """Verify ``batches`` decode batches of ``n`` requests that each accepted ``accepted``
    drafts; the steps each batch drafted."""
    drafted = []
    for _ in range(batches):
        drafted.append(int(policy.shape(n).sum()))
        policy.observe(np.full(n, accepted), policy.shape(n))
    return drafted


def test_a_slot_steps_up_after_its_warm_up_and_down_when_acceptance_falls():
    # slot "1" of the default config: candidates [1, 3, 7], down_hysteresis -0.25; starts
    # at --speculative-num-steps 3 with its EMA at 3 - 1 = 2
    p = SglangAdaptive(3, capture_sizes=sglang_capture_sizes(48))
    # every request accepts 3: EMA_k = 3 - 0.8^k; 10 warm-up batches, then a decision every
    # 5: at batch 15 the EMA (2.96) is above 3 - 0.5 + 0 (the rise threshold): 7 steps
    assert _feed(p, 4, 3, 15) == [3] * 15
    assert p.steps(4) == 7
    # then none accepted: EMA 2.96 x 0.8^5 = 0.97 at batch 20; at or below 3's drop
    # threshold (3 - 0.5 - 0.25 = 2.25), above 1's (1 - 0.5 - 0.25 = 0.25): 3 steps
    assert _feed(p, 4, 0, 5) == [7] * 5
    assert p.steps(4) == 3
    # the other slots never saw a batch: still where they started
    assert (p.steps(8), p.steps(32), p.steps(64)) == (3, 1, 0)


def test_a_slot_with_zero_steps_turns_speculation_off_and_probes_back_up():
    # slot "8": candidates [0, 1, 3], no hysteresis; starts at 3 (EMA 2)
    p = SglangAdaptive(3, capture_sizes=sglang_capture_sizes(48))
    _feed(p, 8, 0, 15)  # EMA 2 x 0.8^15 = 0.07 <= 1 - 0.5 and <= 0.5: down to 0
    assert p.steps(8) == 0
    # at 0 steps the EMA stands still; 5 batches on, it probes the next candidate up
    assert _feed(p, 8, 0, 5) == [0] * 5
    assert p.steps(8) == 1


def test_a_batch_is_padded_to_a_cuda_graph_size_before_its_slot_is_chosen():
    cap = sglang_capture_sizes(48)
    assert cap == [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32,
                   40, 44, 48]
    p = SglangAdaptive(3, capture_sizes=cap)
    # slots by smallest size 1, 8, 32, 64: 31 pads to 32, 33 to 40 (slot 32), 9 to 10
    assert [p.slot_for(n) for n in (1, 7, 8, 9, 31, 33, 48)] == [0, 0, 1, 1, 2, 2, 2]
    # without graphs (or past the largest) a batch keeps its size
    plain = SglangAdaptive(3)
    assert [plain.slot_for(n) for n in (31, 63, 64, 500)] == [1, 2, 3, 3]
    # max_running 62: SGLang adds it to the list, so 61 pads to 62 (slot 32), not 64
    assert SglangAdaptive(3, capture_sizes=sglang_capture_sizes(62)).slot_for(61) == 2


def test_the_ceiling_caps_a_decision_that_does_not_raise_the_steps():
    slots = {"1": {"candidate_steps": [1, 2, 4, 6], "ceiling_coeff": 1.0}}
    p = SglangAdaptive(6, slots)
    # EMA from 5 toward 2: at batch 15 it is 2 + 3 x 0.8^15 = 2.105, at or below 4's drop
    # threshold (4 - 0.5 - 0.25), above 2's (1.25): 2 steps; the ceiling, ceil(2.105 x 1)
    # = 3, does not bind
    _feed(p, 1, 2, 15)
    assert p.steps(1) == 2
    q = SglangAdaptive(6, {"1": {"candidate_steps": [1, 4, 6], "ceiling_coeff": 0.5}},
                       {"down_hysteresis": -3.0})
    # EMA from 5 toward 4: 4.035 at batch 15, above 4's drop threshold (4 - 0.5 - 3): the
    # steps stay at 6, a decision that does not raise them, so the ceiling applies:
    # ceil(4.035 x 0.5) = 3, and the candidates above it are left: 1 step
    _feed(q, 1, 4, 15)
    assert q.steps(1) == 1


def test_sglangs_adaptive_launch_becomes_the_controller(tmp_path):
    cfg = tmp_path / "adaptive.json"
    cfg.write_text(json.dumps({"ema_alpha": 0.3, "strategy": "ema",
                               "1": {"candidate_steps": [2, 4]},
                               "16": {"candidate_steps": [0, 2], "up_hysteresis": 0.5}}))
    line = ("python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct "
            "--speculative-algorithm EAGLE3 --speculative-draft-model-path x "
            f"--speculative-adaptive --speculative-adaptive-config {cfg}")
    p = parse_sglang(line, lambda m: "llama-3.1-8b")
    policy = json.loads(dict(t.split("=", 1) for t in p.sets)["variants"])[1]["policy"]
    assert policy == {"kind": "sglang_adaptive", "ema_alpha": 0.3, "steps": 2,
                      "slots": {"1": {"candidate_steps": [2, 4]},
                                "16": {"candidate_steps": [0, 2], "up_hysteresis": 0.5}}}
    assert any("strategy: SGLang 0.5.14 does not read it" in n for n in p.notes)
    # top-k > 1: SGLang falls back to the static tree
    tree = parse_sglang(line + " --speculative-eagle-topk 4", lambda m: "llama-3.1-8b")
    assert '"kind": "tree"' in dict(t.split("=", 1) for t in tree.sets)["variants"]
    assert any("falls back to the static parameters" in n for n in tree.notes)


@pytest.mark.parametrize("text, match", [
    ('{"x": 1}', "at least one integer-string batch-size key"),
    ('{"1": {"candidate_steps": []}}', "candidate_steps must be a non-empty list"),
    ('{"1": {"candidate_steps": [-1]}}', "candidate_steps must be a non-empty list"),
    ('{"1": {"candidate_steps": [0]}}', "every candidate_steps is 0"),
    ('{"1": {"candidate_steps": [1]}, "1": {}}', "1: given twice"),
    ("[1]", "must be a JSON object"),
])
def test_a_bad_adaptive_config_is_refused(tmp_path, text, match):
    cfg = tmp_path / "a.json"
    cfg.write_text(text)
    with pytest.raises(UserError, match=match):
        parse_sglang("python3 -m sglang.launch_server --model-path m --speculative-algorithm "
                     f"EAGLE --speculative-adaptive --speculative-adaptive-config {cfg}",
                     lambda m: "llama-3.1-8b")


def test_an_adaptive_sglang_launch_runs(tmp_path, capsys):
    assert main(["run", "--from-sglang",
                 "python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct "
                 "--speculative-algorithm EAGLE3 --speculative-draft-model-path x "
                 "--speculative-adaptive", "--set", "run.requests=60",
                 "--set", "acceptance={kind: iid, alpha: 0.8}", "--no-report", "--json",
                 "--out", str(tmp_path / "r")]) == 0
    doc = json.loads(capsys.readouterr().out)
    spec = doc["variants"][1]
    assert spec["mean_acceptance_length"] > 1.5
    assert any("SGLang's default slots" in n for n in doc["notes"])


# TensorRT-LLM: the draft_len_schedule example of github NVIDIA/TensorRT-LLM PR #10860
# ("Dynamic draft length on spec decode one-model path", merged 2026-03-13): {4: 4, 8: 2,
# 32: 1} drafts 4 at batch 1-4, 2 at 5-8, 1 at 9-32 and none from 33; max_concurrency M is
# {M: max_draft_len}; the acceptance-rate gate (TensorRT-LLM 1.3.0rc29 LLM API reference,
# acceptance_rate_threshold): off for good once the mean over the last N iterations that
# drafted falls below the threshold


def test_tensorrt_llms_schedule_and_concurrency_cap():
    from sim.controllers import TrtllmSpeculation

    p = TrtllmSpeculation(4, {4: 4, 8: 2, 32: 1})
    assert [p.draft_len(b) for b in (1, 4, 5, 8, 9, 32, 33, 500)] == [4, 4, 2, 2, 1, 1, 0, 0]
    assert int(p.shape(3, running=6).sum()) == 2  # the active requests, not the decoders
    cap = TrtllmSpeculation(3, max_concurrency=16)
    assert [cap.draft_len(b) for b in (1, 16, 17)] == [3, 3, 0]
    for bad, match in (({4: 2, 8: 4}, "smallest batch size must draft max_draft_len"),
                       ({4: 4, 8: 5}, r"draft lengths 0..max_draft_len")):
        with pytest.raises(UserError, match=match):
            TrtllmSpeculation(4, bad)
    with pytest.raises(UserError, match="exclusive"):
        TrtllmSpeculation(4, {4: 4}, max_concurrency=8)


def test_tensorrt_llms_acceptance_gate_switches_speculation_off_for_good():
    from sim.controllers import TrtllmSpeculation

    p = TrtllmSpeculation(4, window=3, threshold=0.5)
    row = p.shape(2)
    # rates 0.75, 0.25, 0.5: mean 0.5, not below; then 0.125: mean of the last three 0.29
    for accepted, closed in (([3, 3], False), ([1, 1], False), ([2, 2], False),
                             ([1, 0], True)):
        p.observe(np.array(accepted), row)
        assert p.disabled is closed
    assert p.draft_len(1) == 0
    p.observe(np.array([4, 4]), row)  # nothing reopens it
    assert p.disabled
    # an iteration that drafted nothing is not a sample
    q = TrtllmSpeculation(4, window=1, threshold=0.5)
    q.observe(np.array([0, 0]), np.zeros(4, dtype=np.int64))
    assert not q.disabled


def _trtllm(tmp_path, yaml_text: str, flags: str = "", env: str = ""):
    from sim.engines.trtllm import parse_trtllm

    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml_text)
    p = parse_trtllm(f"{env}trtllm-serve meta-llama/Llama-3.1-8B-Instruct --config {cfg} "
                     f"{flags}",
                     lambda m: {"meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
                                "meta-llama/Llama-3.2-1B-Instruct": "llama-3.2-1b"}[m])
    return p, {k: json.loads(v) for k, v in (t.split("=", 1) for t in p.sets)}


def test_a_trtllm_serve_line_and_its_config_become_the_scenario(tmp_path):
    p, s = _trtllm(tmp_path, "speculative_config: {decoding_type: MTP, "
                             "num_nextn_predict_layers: 3, max_concurrency: 32}\n"
                             "kv_cache_config: {free_gpu_memory_fraction: 0.8, dtype: fp8}\n"
                             "enable_chunked_prefill: true\nmax_num_tokens: 4096\n",
                   "--tp_size 8 --max_batch_size 128")
    assert s["deployment.tp"] == 8 and s["deployment.kv_bits"] == 8
    assert (s["scheduler.max_num_seqs"], s["scheduler.max_batched_tokens"],
            s["scheduler.chunked_prefill"]) == (128, 4096, True)
    assert s["deployment.gpu_memory_utilization"] == 0.8
    assert s["variants"][1] == {"name": "mtp", "drafter": {"method": "mtp"},
                                "policy": {"kind": "trtllm", "max_draft_len": 3,
                                           "max_concurrency": 32}}
    # without controls a fixed chain; the engine's defaults where nothing is given
    _, plain = _trtllm(tmp_path, "speculative_config: {decoding_type: DraftTarget, "
                                 "max_draft_len: 3, speculative_model_dir: "
                                 "meta-llama/Llama-3.2-1B-Instruct}\n")
    assert plain["variants"][1]["policy"] == {"kind": "fixed", "gamma": 3}
    assert plain["variants"][1]["drafter"] == {"method": "draft_model", "model": "llama-3.2-1b"}
    assert (plain["scheduler.max_num_seqs"], plain["scheduler.max_batched_tokens"],
            plain["scheduler.chunked_prefill"]) == (2048, 8192, False)


@pytest.mark.parametrize("yaml_text, flags, match", [
    ("speculative_config: {decoding_type: Medusa, max_draft_len: 3}\n", "",
     "decoding_type: one of DraftTarget, Eagle3, Eagle, MTP, NGram"),
    ("speculative_config: {decoding_type: Eagle3}\n", "", "max_draft_len"),
    ("speculative_config: {decoding_type: Eagle3, max_draft_len: 3, acceptance_window: 8}\n",
     "", "acceptance_window: the older acceptance gate"),
    ("speculative_config: {decoding_type: Eagle3, max_draft_len: 3, foo: 1}\n", "",
     "foo: not modelled"),
    ("enable_attention_dp: true\nmoe_tensor_parallel_size: 2\n", "--tp_size 8",
     "enable_attention_dp: with experts split 2 ways"),
    ("moe_tensor_parallel_size: 3\n", "--tp_size 8",
     "3 x 2 must equal tensor_parallel_size 8"),
    ("enable_attention_dp: 1\n", "", "enable_attention_dp: true or false"),
    ("max_batch_size: 0\n", "", "max_batch_size: an integer >= 1"),
    ("{}\n", "--backend tensorrt", "SpecSim models the PyTorch backend"),
    ("{}\n", "--gpus_per_node 8", "--gpus_per_node: not a trtllm-serve flag"),
])
def test_a_trtllm_line_specsim_cannot_model_is_refused(tmp_path, yaml_text, flags, match):
    with pytest.raises(UserError, match=match):
        _trtllm(tmp_path, yaml_text, flags)


def test_a_trtllm_launch_with_its_controls_runs(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("speculative_config: {decoding_type: Eagle3, max_draft_len: 4, "
                   "draft_len_schedule: {4: 4, 8: 2, 32: 1}}\n")
    assert main(["run", "--from-trtllm",
                 f"trtllm-serve meta-llama/Llama-3.1-8B-Instruct --config {cfg}",
                 "--set", "run.requests=60", "--set", "acceptance={kind: iid, alpha: 0.8}",
                 "--no-report", "--json", "--out", str(tmp_path / "r")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["variants"][1]["name"] == "eagle3"
    assert doc["variants"][1]["mean_acceptance_length"] > 1.5


FORCE = "TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS"


def test_trtllms_forced_acceptance_is_read_from_the_environment(tmp_path):
    """TensorRT-LLM's one-model workers accept the whole part of the forced count every
    step and one more draft with its fraction's probability, never past the draft length;
    the two-model path reads an integer (tensorrt_llm/_torch/speculative/interface.py
    @00b6d5a2, SpecWorkerBase._apply_force_accepted_tokens and
    get_force_num_accepted_tokens)."""
    eagle = "speculative_config: {decoding_type: Eagle3, max_draft_len: 4}\n"
    for value, marginals in (("2.6", [1.0, 1.0, 0.6, 0.0]), ("1", [1.0, 0.0, 0.0, 0.0]),
                             ("7", [1.0, 1.0, 1.0, 1.0])):
        p, s = _trtllm(tmp_path, eagle, env=f"{FORCE}={value} ")
        acceptance = s["variants"][1]["acceptance"]
        assert (acceptance["kind"], acceptance["theta"]) == ("marginal", 0.0)
        assert acceptance["marginals"] == pytest.approx(marginals, abs=1e-12)
        assert any(n.startswith(f"forced acceptance: TensorRT-LLM's {FORCE}")
                   for n in p.notes)
    _, s = _trtllm(tmp_path, eagle, env=f"env {FORCE}=0 ")  # 0: not forced
    assert "acceptance" not in s["variants"][1]
    draft = ("speculative_config: {decoding_type: DraftTarget, max_draft_len: 3, "
             "speculative_model_dir: meta-llama/Llama-3.2-1B-Instruct}\n")
    _, s = _trtllm(tmp_path, draft, env=f"{FORCE}=2 ")
    assert s["variants"][1]["acceptance"]["marginals"] == [1.0, 1.0, 0.0]
    p, s = _trtllm(tmp_path, "{}\n", env=f"{FORCE}=2 ")  # nothing speculates
    assert len(s["variants"]) == 1 and any("nothing to force" in n for n in p.notes)


@pytest.mark.parametrize("yaml_text, env, match", [
    ("speculative_config: {decoding_type: DraftTarget, max_draft_len: 3, "
     "speculative_model_dir: meta-llama/Llama-3.2-1B-Instruct}\n", f"{FORCE}=1.5",
     "two-model path \\(draft_model\\) reads an integer only"),
    ("speculative_config: {decoding_type: Eagle3, max_draft_len: 3, "
     "eagle3_one_model: false}\n", f"{FORCE}=0.5", "two-model path \\(eagle3\\)"),
    ("speculative_config: {decoding_type: Eagle3, max_draft_len: 3}\n", f"{FORCE}=two",
     f"{FORCE}: a number of accepted draft tokens, got 'two'"),
    ("speculative_config: {decoding_type: Eagle3, max_draft_len: 3}\n", f"{FORCE}=-1",
     "0 or more"),
    ("speculative_config: {decoding_type: Eagle3, max_draft_len: 3}\n", f"{FORCE}=inf",
     "0 or more"),
    ("{}\n", "CUDA_VISIBLE_DEVICES=0", "environment variable CUDA_VISIBLE_DEVICES: not "
     "modelled"),
])
def test_a_bad_trtllm_forced_acceptance_is_refused(tmp_path, yaml_text, env, match):
    with pytest.raises(UserError, match=match):
        _trtllm(tmp_path, yaml_text, env=env + " ")


def test_a_forced_trtllm_run_gives_exactly_the_forced_acceptance_length(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("speculative_config: {decoding_type: Eagle3, max_draft_len: 3}\n")
    assert main(["run", "--from-trtllm", f"{FORCE}=2 trtllm-serve "
                 f"meta-llama/Llama-3.1-8B-Instruct --config {cfg}", "--set",
                 "run.requests=30", "--no-report", "--json", "--out",
                 str(tmp_path / "r")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["variants"][1]["mean_acceptance_length"] == 3.0
    assert not any("acceptance: preset" in n for n in doc["notes"])


@pytest.mark.parametrize("flag, line", [
    ("--from-vllm", "vllm serve meta-llama/Llama-3.1-8B-Instruct --speculative-config "
                    "'{\"method\": \"eagle3\", \"num_speculative_tokens\": 4, "
                    "\"num_speculative_tokens_per_batch_size\": [[1, 8, 4], [9, 64, 1]]}'"),
    ("--from-sglang", "python3 -m sglang.launch_server --model-path "
                      "meta-llama/Llama-3.1-8B-Instruct --speculative-algorithm EAGLE3 "
                      "--speculative-draft-model-path x --speculative-adaptive"),
])
def test_a_controller_takes_the_acceptance_preset_of_its_deepest_draft(flag, line, tmp_path,
                                                                       capsys):
    # (a controller's policy has no gamma: the preset lookup raised a TypeError)
    assert main(["run", flag, line, "--set", "run.requests=30", "--no-report", "--json",
                 "--out", str(tmp_path / "r")]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert any("acceptance: preset" in n or "no acceptance preset" in n for n in notes)


# The engines' configurations SpecSim writes read back as the scenario they came from.

def _scenario(sets):
    from sim.loading import load_scenario

    return load_scenario(None, sets)


@pytest.mark.parametrize("policy", [
    {"kind": "fixed", "gamma": 3},
    {"kind": "tree", "steps": 3, "topk": 4},
    {"kind": "sglang_adaptive", "steps": 3},
])
def test_the_sglang_launch_line_reads_back_as_its_scenario(policy):
    from hardware.catalog import load_catalog
    from sim.engines.sglang import launch_command

    sc = _scenario(["models.method=eagle3", "models.draft=null", "deployment.tp=2",
                    "scheduler.order=prefill_first", "scheduler.max_num_seqs=48",
                    "scheduler.prefix_caching=false",
                    f"variants=[{json.dumps({'name': 'v', 'policy': policy})}]"])
    line, notes = launch_command(sc, sc.variants[0], load_catalog())
    p = parse_sglang(line.replace("<an eagle3 head trained for llama-3-8b>", "x"),
                     lambda m: "llama-3-8b")
    got = {k: json.loads(v) for k, v in (t.split("=", 1) for t in p.sets)}
    assert got["deployment.tp"] == 2 and got["scheduler.max_num_seqs"] == 48
    assert got["scheduler.prefix_caching"] is False
    want = {"kind": "tree", "expansion": [4, 1, 1]} if policy["kind"] == "tree" else policy
    back = got["variants"][1]["policy"]
    if back["kind"] == "tree":
        back = {"kind": "tree", "expansion": [back["topk"]] + [1] * (back["steps"] - 1)}
    assert back == want
    assert not notes


@pytest.mark.parametrize("policy", [
    {"kind": "fixed", "gamma": 3},
    {"kind": "trtllm", "max_draft_len": 4, "draft_len_schedule": {4: 4, 16: 2},
     "acceptance_rate_window_size": 10, "acceptance_rate_threshold": 0.2},
    {"kind": "trtllm", "max_draft_len": 2, "max_concurrency": 32},
])
def test_the_trtllm_serve_line_and_config_read_back_as_their_scenario(policy, tmp_path):
    from hardware.catalog import load_catalog
    from sim.engines.trtllm import parse_trtllm, serve_command

    sc = _scenario(["models.method=eagle3", "models.draft=null", "deployment.tp=2",
                    "scheduler.max_num_seqs=64", "scheduler.chunked_prefill=false",
                    "deployment.kv_bits=8",
                    f"variants=[{json.dumps({'name': 'v', 'policy': policy})}]"])
    line, config, _ = serve_command(sc, sc.variants[0], load_catalog())
    (tmp_path / "config.yaml").write_text(config)
    p = parse_trtllm(line.replace("--config config.yaml", f"--config {tmp_path}/config.yaml"),
                     lambda m: "llama-3-8b")
    got = {k: json.loads(v) for k, v in (t.split("=", 1) for t in p.sets)}
    assert (got["deployment.tp"], got["scheduler.max_num_seqs"], got["deployment.kv_bits"],
            got["scheduler.chunked_prefill"]) == (2, 64, 8, False)
    back = got["variants"][1]["policy"]
    if "draft_len_schedule" in back:
        back["draft_len_schedule"] = {int(k): v for k, v in back["draft_len_schedule"].items()}
    assert back == policy


@pytest.mark.parametrize("policy", [
    {"kind": "fixed", "gamma": 3},
    {"kind": "batch_ladder", "ladder": [[1, 4, 3], [5, 1000, 1]], "num_speculative_tokens": 3},
])
def test_the_vllm_line_specsim_writes_simulates_as_the_scenario_did(policy, tmp_path, capsys):
    """specsim plan prints the vllm serve line of its cheapest candidate: fed back through
    --from-vllm it gives the same simulated result as the candidate's scenario."""
    from hardware.catalog import load_catalog
    from sim.engines.vllm import serve_command

    sets = ["run.requests=60", "acceptance={kind: iid, alpha: 0.75}",
            "scheduler.max_num_seqs=32", "scheduler.max_batched_tokens=2048",
            f"variants=[{json.dumps({'name': 'v', 'policy': policy})}]"]
    line, _ = serve_command(_scenario(sets), _scenario(sets).variants[0], load_catalog())

    def run(*args):
        assert main(["run", *args, "--no-report", "--json", "--out",
                     str(tmp_path / str(len(list(tmp_path.iterdir()))))]) == 0
        return json.loads(capsys.readouterr().out)["variants"]

    direct = run(*(w for s in sets for w in ("--set", s)))[0]
    replayed = run("--from-vllm", line, "--set", "run.requests=60",
                   "--set", "acceptance={kind: iid, alpha: 0.75}")[1]
    numbers = {k for k, v in direct.items() if isinstance(v, (int, float))}
    assert numbers and {k: direct[k] for k in numbers} == {k: replayed[k] for k in numbers}
