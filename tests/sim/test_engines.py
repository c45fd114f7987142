"""Real command lines as the deployment and workload: vllm serve, SGLang, vllm bench serve."""

from __future__ import annotations

import json

import pytest

from hardware.catalog import load_catalog
from sim.cli import main
from sim.engines.bench import parse_vllm_bench
from sim.engines.common import online_fp8_sets
from sim.engines.sglang import parse_sglang
from sim.engines.vllm import parse_vllm_serve
from specdec.errors import UserError

CAT = load_catalog()


def _ids(model: str) -> str:
    return {"meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
            "meta-llama/Llama-3.2-1B-Instruct": "llama-3.2-1b"}[model]


def _sets(parsed) -> dict:
    return {k: json.loads(v) for k, v in (t.split("=", 1) for t in parsed.sets)}


def test_vllm_serve_flags_become_scenario_fields():
    p = parse_vllm_serve(
        "vllm serve meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size 2 "
        "--max-num-seqs 128 --max-num-batched-tokens=4096 --kv-cache-dtype fp8 "
        "--no-enable-chunked-prefill --port 8000 --speculative-config "
        "'{\"method\": \"draft_model\", \"model\": \"meta-llama/Llama-3.2-1B-Instruct\", "
        "\"num_speculative_tokens\": 4, \"draft_tensor_parallel_size\": 1}'", _ids)
    s = _sets(p)
    assert s["models.target"] == "llama-3.1-8b" and s["deployment.tp"] == 2
    assert (s["scheduler.max_num_seqs"], s["scheduler.max_batched_tokens"]) == (128, 4096)
    assert s["deployment.kv_bits"] == 8 and s["scheduler.chunked_prefill"] is False
    none, spec = s["variants"]
    assert none["policy"] == {"kind": "none"}
    assert spec["policy"] == {"kind": "fixed", "gamma": 4}
    assert spec["drafter"] == {"method": "draft_model", "model": "llama-3.2-1b", "tp": 1}
    assert any(n.startswith("--port") for n in p.notes)  # accepted and said so
    assert s["scheduler.prefix_caching"] is True  # vLLM v1's default, and said so
    assert any(n.startswith("prefix caching: on, vLLM v1's default") for n in p.notes)


@pytest.mark.parametrize("flag, caching", [("--enable-prefix-caching", True),
                                           ("--no-enable-prefix-caching", False)])
def test_vllm_prefix_caching_flags_round_trip(flag, caching):
    from hardware.catalog import load_catalog
    from sim.engines.vllm import serve_command
    from sim.loading import load_scenario

    s = _sets(parse_vllm_serve(f"vllm serve meta-llama/Llama-3.1-8B-Instruct {flag}", _ids))
    assert s["scheduler.prefix_caching"] is caching
    sc = load_scenario(None, [f"scheduler.prefix_caching={str(caching).lower()}"])
    command, _ = serve_command(sc, sc.variants[0], load_catalog())
    assert flag in command.split()


def test_vllm_kv_offloading_size_round_trips():
    """vLLM's native CPU offload (--kv-offloading-size, GiB over the TP ranks) is the
    scenario's CPU tier (sim.offload), and the serve line writes it back; another backend
    is refused."""
    from sim.engines.vllm import serve_command
    from sim.loading import load_scenario

    s = _sets(parse_vllm_serve("vllm serve meta-llama/Llama-3.1-8B-Instruct "
                               "--kv-offloading-size 16 --kv-offloading-backend native", _ids))
    assert s["scheduler.kv_offload_gib"] == 16.0
    sc = load_scenario(None, ["scheduler.prefix_caching=true", "scheduler.kv_offload_gib=16"])
    words = serve_command(sc, sc.variants[0], CAT)[0].split()
    assert words[words.index("--kv-offloading-size") + 1] == "16"
    with pytest.raises(UserError, match="--kv-offloading-backend lmcache: not modelled"):
        parse_vllm_serve("vllm serve meta-llama/Llama-3.1-8B-Instruct --kv-offloading-size 8 "
                         "--kv-offloading-backend lmcache", _ids)


@pytest.mark.parametrize("flag, match", [
    ("--swap-space 4", "--swap-space: not a vllm serve flag SpecSim models"),
    ("--quantization bitsandbytes", "--quantization bitsandbytes: not modelled"),
    ("--max-num-seqs lots", "--max-num-seqs: must be an integer, got 'lots'"),
    ("--speculative-config '{\"method\": \"medusa2\", \"num_speculative_tokens\": 2}'",
     "method: one of"),
    ("--speculative-config '{\"method\": \"ngram\"}'", "num_speculative_tokens: an integer"),
    ("--speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": 2, "
     "\"foo\": 1}'", "foo: not modelled"),
    ("--max-num-seqs 4 --max-num-seqs 8", "--max-num-seqs: given twice"),
])
def test_an_unsupported_vllm_flag_is_an_error_naming_it(flag, match):
    with pytest.raises(UserError, match=match):
        parse_vllm_serve(f"vllm serve meta-llama/Llama-3.1-8B-Instruct {flag}", _ids)


@pytest.mark.parametrize("flag, caching", [("--enable-chunked-prefill", True),
                                           ("--no-enable-chunked-prefill", False),
                                           ("--enable_chunked_prefill", True)])
def test_vllm_chunked_prefill_switches_read_as_vllm_reads_them(flag, caching):
    s = _sets(parse_vllm_serve(f"vllm serve meta-llama/Llama-3.1-8B-Instruct {flag}", _ids))
    assert s["scheduler.chunked_prefill"] is caching


@pytest.mark.parametrize("word", ["--enable-chunked-prefill=false",
                                  "--enable-chunked-prefill=true",
                                  "--no-enable-chunked-prefill=1",
                                  "--enable-prefix-caching=False", "--enforce-eager=0"])
def test_a_value_given_to_a_vllm_switch_is_refused_as_vllm_refuses_it(word):
    """vLLM declares its boolean flags with argparse's BooleanOptionalAction (``store_true``
    before), which take no value: ``--flag=false`` is an argparse error there, not False."""
    name = word.partition("=")[0]
    with pytest.raises(UserError, match=f"--from-vllm: {name}: a switch, it takes no value"):
        parse_vllm_serve(f"vllm serve meta-llama/Llama-3.1-8B-Instruct {word}", _ids)


def test_a_value_given_to_an_sglang_switch_is_refused():
    with pytest.raises(UserError, match="--disable-radix-cache: a switch, it takes no value"):
        parse_sglang("python -m sglang.launch_server --model-path "
                     "meta-llama/Llama-3.1-8B-Instruct --disable-radix-cache=false", _ids)


@pytest.mark.parametrize("text", ["", "   "])
def test_an_empty_engine_command_line_is_refused(text):
    with pytest.raises(UserError, match="--from-vllm: the command line is empty"):
        parse_vllm_serve(text, _ids)
    with pytest.raises(UserError, match="--from-sglang: the command line is empty"):
        parse_sglang(text, _ids)


def test_vllm_bench_serve_becomes_the_workload():
    s = _sets(parse_vllm_bench("vllm bench serve --request-rate 4 --num-prompts 200 "
                               "--random-input-len 512 --random-output-len 64 "
                               "--random-range-ratio 0.5 --burstiness 4"))
    assert s["run.requests"] == 200
    w = s["workload"]
    # vLLM: gaps ~ Gamma(shape = burstiness), so cv = 1 / sqrt(4)
    assert (w["arrivals"], w["rate_per_s"], w["cv"]) == ("gamma", 4.0, 0.5)
    assert w["prompt"] == {"kind": "uniform", "low": 256, "high": 768}
    assert w["output"] == {"kind": "uniform", "low": 32, "high": 96}
    offline = _sets(parse_vllm_bench("vllm bench serve --num-prompts 10"))["workload"]
    assert offline["arrivals"] == "offline"  # --request-rate inf: all at once
    assert offline["prompt"] == {"kind": "fixed", "tokens": 1024}  # vLLM's defaults
    with pytest.raises(UserError, match="--dataset-name sharegpt: only the random dataset"):
        parse_vllm_bench("vllm bench serve --dataset-name sharegpt")


def test_sglang_eagle_flags_become_a_tree():
    s = _sets(parse_sglang("python -m sglang.launch_server --model-path "
                           "meta-llama/Llama-3.1-8B-Instruct --tp 2 --speculative-algorithm "
                           "EAGLE3 --speculative-num-steps 3 --speculative-eagle-topk 4", _ids))
    assert s["deployment.tp"] == 2
    assert s["variants"][1]["policy"] == {"kind": "tree", "steps": 3, "topk": 4}
    assert s["variants"][1]["drafter"] == {"method": "eagle3"}


@pytest.mark.parametrize("launch", [
    "vllm serve meta-llama/Llama-3.1-8B-Instruct",
    "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct"])
def test_precision_flags_mean_the_same_in_both_engines(launch):
    """--quantization fp8 is FP8 W8A8 in vLLM and SGLang alike (SGLang's parser used to keep
    16-bit compute); --kv-cache-dtype fp8 is 8-bit KV."""
    parse = parse_vllm_serve if launch.startswith("vllm") else parse_sglang
    parsed = parse(f"{launch} --quantization fp8 --kv-cache-dtype fp8", _ids)
    s = _sets(parsed)
    assert (s["deployment.weight_bits"], s["deployment.compute_dtype"]) == (8, "fp8")
    assert s["deployment.kv_bits"] == 8 and parsed.online_fp8
    # a 16-bit checkpoint is quantized when loaded: activation scales every pass
    online_fp8_sets(parsed, CAT)
    assert _sets(parsed)["deployment.fp8_scales"] == "dynamic"
    assert any("activation scales are computed every pass" in n for n in parsed.notes)
    s = _sets(parse(f"{launch} --quantization awq", _ids))
    assert s["deployment.weight_bits"] == 4 and "deployment.compute_dtype" not in s
    with pytest.raises(UserError, match="--quantization bitsandbytes: not modelled; SpecSim "
                                        "knows fp8, awq"):
        parse(f"{launch} --quantization bitsandbytes", _ids)


def test_quantization_fp8_of_a_checkpoint_that_ships_fp8_keeps_its_scales():
    """vLLM reads an FP8 checkpoint's own quantization_config: DeepSeek-V3's blocks."""
    parsed = parse_vllm_serve("vllm serve deepseek-ai/DeepSeek-V3 -tp 8 --quantization fp8",
                              lambda m: CAT.model(m).id)
    online_fp8_sets(parsed, CAT)
    assert "deployment.fp8_scales" not in _sets(parsed)
    assert any("ships FP8 weights; priced with its own scales (block)" in n
               for n in parsed.notes)


def test_quantization_fp8_of_a_config_json_that_ships_fp8_keeps_its_scales(tmp_path):
    """A config.json target whose quantization_config is FP8 ships FP8 weights: its own
    scales (here static per-tensor) are kept, not replaced by on-the-fly dynamic ones."""
    cfg = CAT.model("llama-3.1-8b").config.model_dump(exclude_unset=True)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**cfg, "quantization_config": {
        "quant_method": "fp8", "activation_scheme": "static"}}))
    parsed = parse_vllm_serve(f"vllm serve {path} --quantization fp8",
                              lambda m: CAT.model(m).id)
    online_fp8_sets(parsed, CAT)
    assert "deployment.fp8_scales" not in _sets(parsed)
    assert any("ships FP8 weights; priced with its own scales (tensor)" in n
               for n in parsed.notes)
    # and the serve line of a scenario on it says --quantization fp8, which serves it so
    from sim.engines.vllm import serve_command
    from sim.loading import load_scenario

    sc = load_scenario(None, [f"models.target={path}", "deployment.weight_bits=8",
                              "deployment.compute_dtype=fp8"])
    command, notes = serve_command(sc, sc.variants[0], CAT)
    assert "--quantization fp8" in command
    assert not any(n.startswith("FP8 W8A8 with") for n in notes)


def test_fp8_scales_need_fp8_compute_and_the_serve_line_says_how_to_get_them():
    from sim.engines.vllm import serve_command
    from sim.loading import load_scenario

    with pytest.raises(UserError, match="deployment.fp8_scales: only FP8 W8A8 has them"):
        load_scenario(None, ["deployment.fp8_scales=dynamic"])
    fp8 = ["deployment.weight_bits=8", "deployment.compute_dtype=fp8"]
    # dynamic: vLLM's --quantization fp8 of the 16-bit checkpoint, and back again
    sc = load_scenario(None, [*fp8, "deployment.fp8_scales=dynamic"])
    command, _ = serve_command(sc, sc.variants[0], CAT)
    assert "--quantization fp8" in command
    back = parse_vllm_serve(command, lambda m: CAT.model(m).id)
    online_fp8_sets(back, CAT)
    assert _sets(back)["deployment.fp8_scales"] == "dynamic"
    # the model's static per-tensor scales: a ModelOpt checkpoint, which the line cannot be
    sc = load_scenario(None, fp8)
    command, notes = serve_command(sc, sc.variants[0], CAT)
    assert "--quantization" not in command
    assert any(n.startswith("FP8 W8A8 with tensor scales: serve a checkpoint quantized that "
                            "way") for n in notes)


def test_the_issue_command_runs_and_compares_with_the_same_deployment_without(
        tmp_path, capsys):
    spec = ('{"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", '
            '"num_speculative_tokens": 3}')
    assert main(["run", "--from-vllm",
                 f"vllm serve meta-llama/Llama-3.1-8B-Instruct --speculative-config '{spec}'",
                 "--bench", "vllm bench serve --request-rate 4 --num-prompts 40",
                 "--no-report", "--json", "--out", str(tmp_path / "r")]) == 0
    doc = json.loads(capsys.readouterr().out)
    none, eagle = doc["variants"]
    assert (none["name"], eagle["name"]) == ("none", "eagle3")
    assert eagle["mean_acceptance_length"] == pytest.approx(2.6, abs=0.15)
    assert eagle["speedup_vs_none"] > 1.3 and eagle["itl_p50_s"] > 0
    assert any("preset eagle3-llama-3.1-8b-mtbench-k3" in n for n in doc["notes"])


def test_an_unknown_model_says_how_to_add_one(tmp_path, capsys):
    assert main(["run", "--from-vllm", "vllm serve org/unknown-7b", "--no-report",
                 "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert "--from-vllm: unknown model 'org/unknown-7b'" in err and "config.json" in err


def test_vllm_memory_utilization_and_token_trees_round_trip():
    from hardware.catalog import load_catalog
    from sim.engines.vllm import serve_command
    from sim.loading import load_scenario

    tree = "[(0,), (1,), (0, 0), (1, 0), (0, 0, 0), (1, 0, 0)]"  # <2,1,1>
    p = parse_vllm_serve(
        "vllm serve meta-llama/Llama-3.1-8B-Instruct --gpu-memory-utilization 0.8 "
        "--speculative-config '" + json.dumps({"method": "eagle3", "num_speculative_tokens": 6,
                                               "speculative_token_tree": tree}) + "'", _ids)
    s = _sets(p)
    assert s["deployment.gpu_memory_utilization"] == 0.8
    assert s["variants"][1]["policy"] == {"kind": "tree", "expansion": [2, 1, 1]}
    sc = load_scenario(None, [f"{k}={json.dumps(v)}" for k, v in s.items()])
    command, _ = serve_command(sc, sc.variants[1], load_catalog())
    assert "--gpu-memory-utilization 0.8" in command
    spec = json.loads(command.split("--speculative-config ", 1)[1].strip("'"))
    assert spec["num_speculative_tokens"] == 6
    again = parse_vllm_serve("vllm serve meta-llama/Llama-3.1-8B-Instruct "
                             "--speculative-config '" + json.dumps(spec) + "'",
                             lambda m: "llama-3.1-8b")
    assert _sets(again)["variants"][1]["policy"] == s["variants"][1]["policy"]


@pytest.mark.parametrize("tree, k, match", [
    ("[(0,), (0, 0), (0, 1), (0, 0, 0)]", 4, "not an expansion tree"),
    ("[(0,), (0, 0)]", 3, "num_speculative_tokens: 3, but speculative_token_tree has 2 nodes"),
    ("[0, 1]", 2, "a list of node paths"),
    ("[(0,), (0,)]", 2, "not an expansion tree"),
    # checked before the covering tree is listed: 21^7 nodes were a MemoryError after 25 s
    (str([(0,) * d for d in range(1, 8)] + [(20,) * d for d in range(1, 8)]), 14,
     "speculative_token_tree: the covering expansion tree <21,21,21,21,21,21,21> has "
     "1891142967 nodes; at most 4096"),
    (str([(0,) * d for d in range(1, 101)]), 100, "a path 100 levels deep; trees are at most 64"),
    ("[(0,), (99,)]", 2, "child index 99: the covering expansion tree <100> is 100 wide"),
])
def test_a_vllm_token_tree_that_is_no_expansion_tree_is_refused(tree, k, match):
    with pytest.raises(UserError, match=match):
        parse_vllm_serve("vllm serve meta-llama/Llama-3.1-8B-Instruct --speculative-config '"
                         + json.dumps({"method": "eagle", "num_speculative_tokens": k,
                                       "speculative_token_tree": tree}) + "'", _ids)


def test_gpu_memory_utilization_sets_the_kv_room():
    from sim.build import setups
    from sim.loading import load_scenario

    blocks = [setups(load_scenario(None, [f"deployment.gpu_memory_utilization={u}"]))[0][1]
              .kv_capacity_blocks for u in (0.9, 0.5)]
    assert blocks[1] < 0.5 * blocks[0]  # the weights stay, the KV room shrinks
    sg = _sets(parse_sglang("python -m sglang.launch_server --model-path "
                            "meta-llama/Llama-3.1-8B-Instruct --mem-fraction-static 0.85", _ids))
    assert sg["deployment.gpu_memory_utilization"] == 0.85


def test_an_sglang_launch_runs_sglangs_scheduler_and_timing():
    """SGLang's scheduler runs a ready prefill batch instead of the decode batch, of at most
    --chunked-prefill-size tokens (-1: whole prompts up to --max-prefill-tokens); its
    timing is SGLang's; its radix cache is on unless --disable-radix-cache."""
    launch = "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct"
    parsed = parse_sglang(launch, _ids)
    s = _sets(parsed)
    assert (s["deployment.framework"], s["scheduler.order"]) == ("sglang", "prefill_first")
    assert (s["scheduler.chunked_prefill"], s["scheduler.max_batched_tokens"],
            s["scheduler.chunk_tokens"]) == (True, 8192, 8192)
    assert any(n.startswith("--chunked-prefill-size unset: 8192") for n in parsed.notes)
    assert s["scheduler.prefix_caching"] is True  # its radix cache, on by default
    assert _sets(parse_sglang(f"{launch} --disable-radix-cache",
                              _ids))["scheduler.prefix_caching"] is False
    s = _sets(parse_sglang(f"{launch} --chunked-prefill-size 4096", _ids))
    assert (s["scheduler.max_batched_tokens"], s["scheduler.chunk_tokens"]) == (4096, 4096)
    s = _sets(parse_sglang(f"{launch} --chunked-prefill-size -1 --max-prefill-tokens 12000",
                           _ids))
    assert (s["scheduler.chunked_prefill"], s["scheduler.max_batched_tokens"]) == (False, 12000)
    assert "scheduler.chunk_tokens" not in s
    s = _sets(parse_sglang(f"{launch} --chunked-prefill-size 0", _ids))  # also off
    assert (s["scheduler.chunked_prefill"], s["scheduler.max_batched_tokens"]) == (False, 16384)
    with pytest.raises(UserError, match="--chunked-prefill-size: must be an integer"):
        parse_sglang(f"{launch} --chunked-prefill-size lots", _ids)

    from sim.loading import load_scenario
    from sim.runner import run_scenario

    res = run_scenario(load_scenario(None, [*parsed.sets, "run.requests=40",
                                            "workload.rate_per_s=20"]))
    it = res.variants[0].iterations.columns
    assert ((it["prefill_tokens"] > 0) & (it["decode_seqs"] > 0)).sum() == 0  # never mixed
    assert (it["prefill_tokens"] > 0).any() and (it["decode_seqs"] > 0).any()
    assert res.summaries[0]["requests"] == 40


def test_unset_batching_limits_take_the_engines_defaults_not_the_scenarios():
    """vLLM's OpenAI server on an H100/H200: 8192 tokens per step, 1024 sequences and no
    per-request prefill cap when unset; SGLang: 2048 running requests. Each is noted."""
    vllm = parse_vllm_serve("vllm serve meta-llama/Llama-3.1-8B-Instruct", _ids)
    s = _sets(vllm)
    assert (s["scheduler.max_batched_tokens"], s["scheduler.max_num_seqs"],
            s["scheduler.chunk_tokens"]) == (8192, 1024, 8192)
    assert any(n.startswith("--max-num-batched-tokens, --max-num-seqs unset: vLLM's defaults")
               for n in vllm.notes)
    s = _sets(parse_vllm_serve("vllm serve meta-llama/Llama-3.1-8B-Instruct "
                               "--max-num-batched-tokens 4096 --max-num-seqs 64", _ids))
    assert (s["scheduler.max_batched_tokens"], s["scheduler.max_num_seqs"],
            s["scheduler.chunk_tokens"]) == (4096, 64, 4096)
    # vLLM takes max_num_seqs at most the step's tokens
    s = _sets(parse_vllm_serve("vllm serve meta-llama/Llama-3.1-8B-Instruct "
                               "--max-num-batched-tokens 512", _ids))
    assert (s["scheduler.max_num_seqs"], s["scheduler.chunk_tokens"]) == (512, 512)
    for cap, chunk in ((512, 512), (0, 8192), (16384, 8192)):  # 0: none; above: the budget
        s = _sets(parse_vllm_serve("vllm serve meta-llama/Llama-3.1-8B-Instruct "
                                   f"--long-prefill-token-threshold {cap}", _ids))
        assert s["scheduler.chunk_tokens"] == chunk
    off = parse_vllm_serve("vllm serve meta-llama/Llama-3.1-8B-Instruct "
                           "--no-enable-chunked-prefill", _ids)
    assert any("vLLM then steps max(max_model_len, 8192) tokens" in n for n in off.notes)
    launch = "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct"
    sg = parse_sglang(launch, _ids)
    assert _sets(sg)["scheduler.max_num_seqs"] == 2048
    assert any(n.startswith("--max-running-requests unset: 2048") for n in sg.notes)
    # SGLang resets it to 48 for speculative decoding
    spec = parse_sglang(f"{launch} --speculative-algorithm EAGLE3", _ids)
    assert _sets(spec)["scheduler.max_num_seqs"] == 48
    assert any(n.startswith("--max-running-requests unset: 48") for n in spec.notes)
    assert _sets(parse_sglang(f"{launch} --max-running-requests 64",
                              _ids))["scheduler.max_num_seqs"] == 64


def test_a_run_says_when_it_schedules_unlike_the_engine_it_prices(tmp_path, capsys):
    assert main(["run", "--set", "deployment.framework=sglang", "--set", "run.requests=20",
                 "--set", "variants=[{name: none, policy: {kind: none}}]", "--no-report",
                 "--json", "--out", str(tmp_path / "r")]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert notes == ["deployment.framework sglang with scheduler.order vllm_v1: SGLang's own "
                     "scheduler is prefill_first (--from-sglang sets it)"]


@pytest.mark.parametrize("flags", ["", "--max-num-batched-tokens 512",
                                   "--long-prefill-token-threshold 512",
                                   "--max-num-seqs 64 --max-num-batched-tokens 4096"])
def test_vllm_batching_limits_round_trip(flags):
    """A serve line parsed into a scenario and written back holds the same limits (and one
    vLLM accepts: max_num_seqs at most the step's tokens)."""
    from sim.engines.vllm import serve_command
    from sim.loading import load_scenario

    parsed = parse_vllm_serve(f"vllm serve meta-llama/Llama-3.1-8B-Instruct {flags}", _ids)
    sc = load_scenario(None, parsed.sets)
    command, _ = serve_command(sc, sc.variants[0], CAT)
    again = _sets(parse_vllm_serve(command, lambda m: CAT.model(m).id))
    first = _sets(parsed)
    for key in ("scheduler.max_batched_tokens", "scheduler.max_num_seqs",
                "scheduler.chunk_tokens"):
        assert again[key] == first[key], key
    assert again["scheduler.max_num_seqs"] <= again["scheduler.max_batched_tokens"]


@pytest.mark.parametrize("key", ["acceptance", "variants.1.acceptance"])
def test_a_users_acceptance_wins_over_the_preset_and_the_note_says_so(key, tmp_path, capsys):
    spec = '{"method": "eagle3", "num_speculative_tokens": 3}'
    assert main(["run", "--from-vllm",
                 f"vllm serve meta-llama/Llama-3.1-8B-Instruct --speculative-config '{spec}'",
                 "--set", f'{key}={{"kind": "iid", "alpha": 0.5}}', "--set", "run.requests=30",
                 "--no-report", "--json", "--out", str(tmp_path / "r")]) == 0
    doc = json.loads(capsys.readouterr().out)
    eagle = doc["variants"][1]
    # i.i.d. 0.5 with 3 guesses: E = (1 - 0.5^4) / (1 - 0.5) = 1.875 (the preset gives ~2.6)
    assert eagle["mean_acceptance_length"] == pytest.approx(1.875, abs=0.12)
    assert not any("preset" in n and "acceptance: preset" in n for n in doc["notes"])
    assert any(f"acceptance: yours (--set {key})" in n for n in doc["notes"])


def test_from_vllm_prices_a_checkpoint_in_the_precision_it_ships(tmp_path, capsys):
    assert main(["run", "--from-vllm",
                 "vllm serve deepseek-ai/DeepSeek-R1 --tensor-parallel-size 8 "
                 "--max-num-seqs 8", "--set", "deployment.gpu=h200",
                 "--set", "run.requests=4", "--no-report", "--json",
                 "--out", str(tmp_path / "r")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert any("the checkpoint's own precision, 8-bit weights (fp8 compute)" in n
               for n in doc["notes"])
    # the user's --set still wins: 16 bits do not fit 8 x H200, and the error says so
    assert main(["run", "--from-vllm",
                 "vllm serve deepseek-ai/DeepSeek-R1 --tensor-parallel-size 8",
                 "--set", "deployment.gpu=h200", "--set", "deployment.weight_bits=16",
                 "--set", "run.requests=4", "--no-report", "--out", str(tmp_path / "s")]) == 2
    assert "weights 157.9 GiB at 16 bits" in capsys.readouterr().err


@pytest.mark.parametrize(("value", "length"), [("4096", 4096), ("32k", 32000),
                                               ("32K", 32768), ("25.6k", 25600)])
def test_vllm_max_model_len_is_taken_as_vllm_reads_it(value, length):
    from sim.loading import load_scenario

    p = parse_vllm_serve(f"vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len {value}",
                         _ids)
    assert _sets(p)["scheduler.max_model_len"] == length
    sc = load_scenario(None, p.sets)
    command, _ = serve_command_of(sc)
    assert f"--max-model-len {length}" in command


def serve_command_of(sc):
    from sim.engines.vllm import serve_command

    return serve_command(sc, sc.variants[0], CAT)


@pytest.mark.parametrize(("value", "match"), [("1.5K", "an integer such as"),
                                              ("0", "must be >= 1"), ("x", "an integer")])
def test_a_bad_max_model_len_is_refused(value, match):
    with pytest.raises(UserError, match=match):
        parse_vllm_serve(f"vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len {value}",
                         _ids)


def test_max_model_len_refuses_longer_requests_and_a_pool_that_cannot_hold_one(tmp_path,
                                                                               capsys):
    base = ["run", "--set", "run.requests=5", "--no-report", "--no-progress"]
    assert main([*base, "--from-vllm", "vllm serve meta-llama/Llama-3.1-8B-Instruct "
                 "--max-model-len 100", "--out", str(tmp_path / "a")]) == 2
    assert "is longer than scheduler.max_model_len 100 (vLLM refuses such a request)" in \
        capsys.readouterr().err
    assert main([*base, "--from-vllm", "vllm serve meta-llama/Llama-3.1-8B-Instruct "
                 "--max-model-len 200000 --num-gpu-blocks-override 100",
                 "--out", str(tmp_path / "b")]) == 2
    assert "max_position_embeddings" in capsys.readouterr().err
    assert main([*base, "--from-vllm", "vllm serve meta-llama/Llama-3.1-8B-Instruct "
                 "--max-model-len 8192 --num-gpu-blocks-override 300",
                 "--out", str(tmp_path / "c")]) == 2
    # 300 blocks less vLLM v1's null block
    assert "one request of 8192 tokens needs 512 KV blocks, but a replica holds 299" in \
        capsys.readouterr().err
    assert main([*base, "--from-vllm", "vllm serve meta-llama/Llama-3.1-8B-Instruct "
                 "--max-model-len 8192", "--out", str(tmp_path / "d")]) == 0


def test_sglangs_deepseek_mtp_launch_runs_the_checkpoints_mtp_module():
    def has_mtp(model_id):
        return model_id == "deepseek-v3"

    p = parse_sglang("python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 "
                     "--tp 8 --speculative-algorithm EAGLE --speculative-num-steps 3 "
                     "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4",
                     lambda m: "deepseek-v3", has_mtp)
    s = _sets(p)
    assert s["models.method"] == "mtp"
    assert s["variants"][1]["drafter"] == {"method": "mtp"}
    assert s["variants"][1]["policy"] == {"kind": "fixed", "gamma": 3}
    # an EAGLE head on a Llama target stays an EAGLE head
    p = parse_sglang("python3 -m sglang.launch_server --model-path "
                     "meta-llama/Llama-3.1-8B-Instruct --speculative-algorithm EAGLE",
                     _ids, has_mtp)
    assert _sets(p)["models.method"] == "eagle"


def test_sglangs_deepseek_mtp_launch_runs_end_to_end(tmp_path, capsys):
    assert main(["run", "--from-sglang",
                 "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-R1 --tp 8 "
                 "--speculative-algorithm EAGLE --speculative-num-steps 1 "
                 "--speculative-eagle-topk 1 --speculative-num-draft-tokens 2",
                 "--set", "deployment.gpu=h200", "--set", "run.requests=4", "--no-report",
                 "--json", "--out", str(tmp_path / "r")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["variants"][1]["name"] == "eagle"
    assert any("its checkpoint's own MTP layer drafts" in n for n in doc["notes"])


def _spec_variant(parsed):
    return _sets(parsed)["variants"][1]


@pytest.mark.parametrize(("extra", "marginals"), [
    ('"synthetic_acceptance_length": 3', [1.0, 1.0, 0.0]),
    ('"synthetic_acceptance_length": 2.5', [1.0, 0.5, 0.0]),
    ('"synthetic_acceptance_length": 1', [0.0, 0.0, 0.0]),
    ('"synthetic_acceptance_length": 4', [1.0, 1.0, 1.0]),
    ('"synthetic_acceptance_rates": [0.9, 0.6, 0.3]', [0.9, 0.6, 0.3]),
])
def test_vllms_synthetic_rejection_sampler_forces_its_acceptance(extra, marginals):
    """vLLM's minimum-variance schedule (SpeculativeConfig._acceptance_length_to_rates):
    the whole part of length - 1 always accepted, the next position with the fraction."""
    p = parse_vllm_serve(
        "vllm serve meta-llama/Llama-3.1-8B-Instruct --speculative-config '{\"method\": "
        "\"eagle3\", \"num_speculative_tokens\": 3, \"rejection_sample_method\": "
        f"\"synthetic\", {extra}}}'", _ids)
    assert _spec_variant(p)["acceptance"] == {"kind": "marginal", "marginals": marginals,
                                              "theta": 0.0}
    assert any(n.startswith("forced acceptance: vLLM's synthetic rejection sampler")
               for n in p.notes)


@pytest.mark.parametrize(("extra", "match"), [
    ('"rejection_sample_method": "synthetic"', "exactly one of"),
    ('"rejection_sample_method": "synthetic", "synthetic_acceptance_length": 2, '
     '"synthetic_acceptance_rates": [1, 1, 0]', "exactly one of"),
    ('"rejection_sample_method": "synthetic", "synthetic_acceptance_length": 4.5',
     r"in \[1, 4\]"),
    ('"rejection_sample_method": "synthetic", "synthetic_acceptance_rates": [0.5, 0.9, 0]',
     "non-increasing"),
    ('"rejection_sample_method": "synthetic", "synthetic_acceptance_rates": [1, 1]',
     "3 numbers"),
    ('"synthetic_acceptance_length": 2', "only valid with rejection_sample_method"),
    ('"rejection_sample_method": "block"', "standard or synthetic"),
])
def test_a_bad_synthetic_acceptance_is_refused(extra, match):
    with pytest.raises(UserError, match=match):
        parse_vllm_serve(
            "vllm serve meta-llama/Llama-3.1-8B-Instruct --speculative-config '{\"method\": "
            f"\"eagle3\", \"num_speculative_tokens\": 3, {extra}}}'", _ids)


def test_a_forced_vllm_run_gives_exactly_the_forced_acceptance_length(tmp_path, capsys):
    spec = ('{"method": "eagle3", "num_speculative_tokens": 3, '
            '"rejection_sample_method": "synthetic", "synthetic_acceptance_length": 3}')
    assert main(["run", "--from-vllm",
                 f"vllm serve meta-llama/Llama-3.1-8B-Instruct --speculative-config '{spec}'",
                 "--set", "run.requests=30", "--no-report", "--json",
                 "--out", str(tmp_path / "r")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["variants"][1]["mean_acceptance_length"] == 3.0
    assert not any("acceptance: preset" in n for n in doc["notes"])


def test_sglangs_simulated_acceptance_is_read_from_the_environment():
    import math

    cmd = ("python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct "
           "--speculative-algorithm EAGLE3 --speculative-num-steps 3 "
           "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4")
    p = parse_sglang(f"SGLANG_SIMULATE_ACC_LEN=2.5 {cmd}", _ids)
    assert _spec_variant(p)["acceptance"] == {"kind": "marginal",
                                              "marginals": [1.0, 0.5, 0.0], "theta": 0.0}
    # multinomial: N(2.5, 1) clamped to [1, 4] and rounded; P(length >= j + 1)
    p = parse_sglang("env SGLANG_SIMULATE_ACC_LEN=2.5 SGLANG_SIMULATE_ACC_METHOD=multinomial "
                     f"SGLANG_SIMULATE_ACC_TOKEN_MODE=real-draft-token {cmd}", _ids)
    got = _spec_variant(p)["acceptance"]["marginals"]
    want = [0.5 * (1 - math.erf((j + 0.5 - 2.5) / math.sqrt(2))) for j in (1, 2, 3)]
    assert got == pytest.approx(want, abs=1e-12)
    assert 1 + sum(got) == pytest.approx(2.5, abs=0.02)  # close to, not exactly, the mean
    for off in ("-1", "0"):  # SGLang simulates only above 0
        assert "acceptance" not in _spec_variant(parse_sglang(
            f"SGLANG_SIMULATE_ACC_LEN={off} {cmd}", _ids))
    # match-expected clamps to [1, steps + 1], as SGLang does
    assert _spec_variant(parse_sglang(f"SGLANG_SIMULATE_ACC_LEN=5 {cmd}", _ids))[
        "acceptance"]["marginals"] == [1.0, 1.0, 1.0]
    with pytest.raises(UserError, match="environment variable CUDA_VISIBLE_DEVICES: not"):
        parse_sglang(f"CUDA_VISIBLE_DEVICES=0 {cmd}", _ids)
    with pytest.raises(UserError, match="environment variable FOO: not"):  # no spec either
        parse_sglang("FOO=1 python3 -m sglang.launch_server --model-path "
                     "meta-llama/Llama-3.1-8B-Instruct", _ids)
    with pytest.raises(UserError, match="environment variable SGLANG_X: not modelled"):
        parse_vllm_serve("SGLANG_X=1 vllm serve meta-llama/Llama-3.1-8B-Instruct", _ids)


def test_forced_acceptance_on_a_tree_forces_the_depth_whatever_the_width(tmp_path, capsys):
    """SGLang's simulated acceptance takes the same length on a topk-4 tree as on a chain
    (the forced model's coverage does not grow with the tree's width)."""
    assert main(["run", "--from-sglang", "SGLANG_SIMULATE_ACC_LEN=1.8 python3 -m "
                 "sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct "
                 "--speculative-algorithm EAGLE3 --speculative-num-steps 3 "
                 "--speculative-eagle-topk 4", "--set", "run.requests=40", "--no-report",
                 "--json", "--out", str(tmp_path / "r")]) == 0
    got = json.loads(capsys.readouterr().out)["variants"][1]["mean_acceptance_length"]
    assert got == pytest.approx(1.8, abs=0.05)
    with pytest.raises(UserError, match="per node there"):
        parse_vllm_serve(
            "vllm serve meta-llama/Llama-3.1-8B-Instruct --speculative-config '{\"method\": "
            "\"eagle3\", \"num_speculative_tokens\": 2, \"speculative_token_tree\": "
            "\"[(0,), (1,)]\", \"rejection_sample_method\": \"synthetic\", "
            "\"synthetic_acceptance_length\": 1.5}'", _ids)


@pytest.mark.parametrize("flags, full_isl, scheduling", [
    ("", None, True), ("--no-async-scheduling", None, False),
    ("--async-scheduling", None, True),
    ("--no-scheduler-reserve-full-isl --no-async-scheduling", False, False),
    ("--scheduler-reserve-full-isl", True, True)])
def test_vllms_scheduling_switches_are_read_and_written_back(flags, full_isl, scheduling):
    """vLLM 0.33's scheduling switches: full-prompt admission maps to
    scheduler.reserve_full_isl; async scheduling is on unless --no-async-scheduling, as in
    vLLM, and a note says so when no flag chose it. The command written back asks for what
    was simulated."""
    from sim.engines.vllm import serve_command
    from sim.loading import load_scenario

    parsed = parse_vllm_serve(f"vllm serve meta-llama/Llama-3.1-8B-Instruct {flags}", _ids)
    got = _sets(parsed)
    assert got.get("scheduler.reserve_full_isl") is full_isl
    assert got["scheduler.async_scheduling"] is scheduling
    assert any(n.startswith("async scheduling: on, vLLM's default") for n in parsed.notes) \
        is ("async" not in flags)
    sc = load_scenario(None, parsed.sets)
    command, notes = serve_command(sc, sc.variants[0], CAT)
    words = command.split()
    assert ("--async-scheduling" if scheduling else "--no-async-scheduling") in words
    assert ("--no-scheduler-reserve-full-isl" in words) is (full_isl is False)
    assert "scheduling: vLLM 0.33's rules (scheduler.vllm_release)" in notes


def test_async_scheduling_follows_vllm_where_its_runner_cannot_run_it():
    # vLLM 0.33 turns it off with a host n-gram proposer or pipeline parallelism, and
    # refuses it where the command line asks for it there
    base = "vllm serve meta-llama/Llama-3.1-8B-Instruct "
    ngram = base + ("--speculative-config '{\"method\": \"ngram\", "
                    "\"num_speculative_tokens\": 3, \"prompt_lookup_max\": 4}'")
    for cmd, why in ((ngram, "ngram speculative decoding"), (base + "-pp 2",
                                                              "pipeline parallelism")):
        parsed = parse_vllm_serve(cmd, _ids)
        assert _sets(parsed)["scheduler.async_scheduling"] is False
        assert f"async scheduling: off: vLLM turns it off with {why}" in parsed.notes
        with pytest.raises(UserError, match=rf"^--from-vllm: --async-scheduling: .* {why}"):
            parse_vllm_serve(cmd + " --async-scheduling", _ids)


@pytest.mark.parametrize("sets, match", [
    (["scheduler.order=decode_first", "scheduler.reserve_full_isl=true"],
     "reserve_full_isl: only the vllm_v1 order"),
    (['scheduler.vllm_release="0.11"', "scheduler.reserve_full_isl=true"],
     "reserve_full_isl: vLLM 0.11 has no scheduler_reserve_full_isl")])
def test_a_full_prompt_reservation_vllm_lacks_is_refused(sets, match):
    from sim.loading import load_scenario

    with pytest.raises(UserError, match=match):
        load_scenario(None, sets)


def _dsd(ladder: str, method: str = "eagle3", k: int = 3) -> dict:
    spec = (f'{{"method": "{method}", "num_speculative_tokens": {k}, '
            f'"num_speculative_tokens_per_batch_size": {ladder}}}')
    if method == "draft_model":
        spec = spec[:-1] + ', "model": "meta-llama/Llama-3.2-1B-Instruct"}'
    return parse_vllm_serve(f"vllm serve meta-llama/Llama-3.1-8B-Instruct "
                            f"--speculative-config '{spec}'", _ids)


def test_vllms_dynamic_sd_becomes_a_ladder_keyed_on_the_scheduled_requests():
    # vLLM 0.33 (vllm/v1/spec_decode/dynamic/utils.py): every K capped at
    # num_speculative_tokens; the scheduler keys the lookup on the requests it scheduled
    p = _dsd("[[1, 4, 5], [5, 512, 0]]")
    assert _spec_variant(p)["policy"] == {"kind": "batch_ladder", "ladder": [[1, 4, 3],
                                                                            [5, 512, 0]],
                                          "num_speculative_tokens": 3}
    assert any("capped at num_speculative_tokens 3" in n for n in p.notes)
    # a method vLLM's V1 runner cannot vary drafts the static K (_maybe_disable_dynamic_sd_for_v1)
    medusa = _dsd("[[1, 4, 3], [5, 512, 0]]", method="medusa")
    assert _spec_variant(medusa)["policy"] == {"kind": "fixed", "gamma": 3}
    assert any("does not vary K for medusa" in n for n in medusa.notes)


@pytest.mark.parametrize(("ladder", "match"), [
    ("[]", "a non-empty list"),
    ("[[1, 4]]", "a non-empty list"),
    ('[[1, 4, "2"]]', "a non-empty list"),
    ("[[1, 4, true]]", "a non-empty list"),
    ("{\"1\": 2}", "a non-empty list"),
])
def test_a_bad_dynamic_sd_schedule_is_refused(ladder, match):
    with pytest.raises(UserError, match=match):
        _dsd(ladder)


def test_a_dynamic_sd_run_round_trips_through_the_vllm_config(tmp_path, capsys):
    # the ladder runs from the command line, and the config SpecSim writes for it reads back
    # as the same policy
    spec = ('{"method": "draft_model", "model": "meta-llama/Llama-3.2-1B-Instruct", '
            '"num_speculative_tokens": 4, "num_speculative_tokens_per_batch_size": '
            '[[1, 8, 4], [16, 64, 2], [65, 1024, 0]]}')
    line = f"vllm serve meta-llama/Llama-3.1-8B-Instruct --speculative-config '{spec}'"
    assert main(["run", "--from-vllm", line, "--set", "run.requests=40", "--no-report",
                 "--json", "--out", str(tmp_path / "r")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["variants"][1]["name"] == "draft_model"
    from hardware.catalog import load_catalog
    from sim.engines.vllm import serve_command
    from sim.loading import load_scenario

    s = _sets(parse_vllm_serve(line, _ids))
    assert s["variants"][1]["policy"] == {"kind": "batch_ladder", "num_speculative_tokens": 4,
                                          "ladder": [[1, 8, 4], [16, 64, 2], [65, 1024, 0]]}
    sc = load_scenario(None, [f"{k}={json.dumps(v)}" for k, v in s.items()])
    command, notes = serve_command(sc, sc.variants[1], load_catalog())
    spec = json.loads(command.split("--speculative-config ", 1)[1].strip("'"))
    assert spec["num_speculative_tokens"] == 4
    assert spec["num_speculative_tokens_per_batch_size"] == [[1, 8, 4], [16, 64, 2],
                                                             [65, 1024, 0]]
    again = parse_vllm_serve("vllm serve meta-llama/Llama-3.1-8B-Instruct "
                             "--speculative-config '" + json.dumps(spec) + "'",
                             lambda m: _ids(m + "-Instruct" if m.endswith("1B") else m))
    assert _sets(again)["variants"][1]["policy"] == s["variants"][1]["policy"]


def test_the_engines_method_names_come_from_the_method_traits():
    # a drafting method's engine names are in its one MethodTraits record: the three
    # engines' parsers read them from there, and each name parses to its method
    from sim.drafters import TRAITS, engine_names
    from sim.engines.sglang import SGLANG_METHODS
    from sim.engines.trtllm import TRTLLM_METHODS
    from sim.engines.vllm import VLLM_METHODS

    assert (VLLM_METHODS, SGLANG_METHODS, TRTLLM_METHODS) == tuple(
        engine_names(e) for e in ("vllm", "sglang", "trtllm"))
    assert set(VLLM_METHODS.values()) == set(TRAITS)  # vLLM serves every method
    for name, method in VLLM_METHODS.items():
        spec = {"method": name, "num_speculative_tokens": 2}
        if method == "draft_model":
            spec["model"] = "meta-llama/Llama-3.2-1B-Instruct"
        p = parse_vllm_serve("vllm serve meta-llama/Llama-3.1-8B-Instruct "
                             f"--speculative-config '{json.dumps(spec)}'", _ids)
        assert _sets(p)["models.method"] == method
