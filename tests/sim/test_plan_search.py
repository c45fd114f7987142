"""``specsim plan`` over a ``search:`` space: the expansion into candidates, bad specs, the
staged search (same answer for any number of workers), the crossover's direction, and the
winner's vLLM config read back by ``--from-vllm`` as the same policy."""

from __future__ import annotations

import json

import pytest
import yaml

from sim.cli import main
from sim.loading import repo_root
from sim.studies.plan_space import expand, parse_search

SCENARIO = repo_root() / "scenarios" / "plan-llama70b.yaml"
SEARCH = repo_root() / "scenarios" / "plan-search-llama8b.yaml"


def _base(**sched) -> dict:
    from sim.loading import load_scenario

    sc = load_scenario(SCENARIO, [f"scheduler.{k}={v}" for k, v in sched.items()])
    return sc.model_dump(mode="json")


def test_a_search_expands_into_named_candidates_and_says_what_it_left_out():
    s = parse_search({
        "gpus": ["h100", "h200"], "tp": [2],
        "methods": {"e3": {"drafter": {"method": "eagle3"}}, "ng": {"drafter": {
            "method": "ngram"}}},
        "k": [2, 4], "trees": [[2, 1]],
        "controllers": {"fixed": None, "vllm_ladder": {"off_above": [16, 512]},
                        "trtllm": {"k": [3], "off_above": [32]}, "sglang_adaptive": {}},
    }, "c.yaml")
    space = expand(s, _base(max_num_seqs=256), "c.yaml")
    names = [c.name for c in space.candidates]
    assert len(names) == len(set(names))
    h100 = [n for n in names if n.startswith("h100-tp2-")]
    assert h100 == [
        "h100-tp2-off",
        "h100-tp2-e3-tree2-1", "h100-tp2-e3-k2", "h100-tp2-e3-k4",
        "h100-tp2-e3-ladder-k2-off16", "h100-tp2-e3-ladder-k4-off16",
        "h100-tp2-e3-trtllm-k3-off32", "h100-tp2-e3-sglang-adaptive",
        "h100-tp2-ng-tree2-1", "h100-tp2-ng-k2", "h100-tp2-ng-k4",
        "h100-tp2-ng-ladder-k2-off16", "h100-tp2-ng-ladder-k4-off16",
        "h100-tp2-ng-trtllm-k3-off32"]
    assert len(names) == 2 * len(h100) and space.deployments == ["h100-tp2", "h200-tp2"]
    by = {c.name: c for c in space.candidates}
    assert by["h100-tp2-off"].policy == {"kind": "none"}
    assert by["h200-tp2-e3-k4"].overrides == {"deployment.gpu": "h200", "deployment.tp": 2}
    assert by["h200-tp2-e3-k4"].variant == {"drafter": {"method": "eagle3"}}
    # vLLM's ladder rows as --from-vllm reads them back; off above 16, up to max_num_seqs
    assert by["h100-tp2-e3-ladder-k4-off16"].policy == {
        "kind": "batch_ladder", "ladder": [[1, 16, 4], [17, 256, 0]],
        "num_speculative_tokens": 4}
    assert by["h100-tp2-ng-trtllm-k3-off32"].policy == {
        "kind": "trtllm", "max_draft_len": 3, "max_concurrency": 32}
    # a ladder that never turns off (512 >= max_num_seqs) and SGLang's adaptive steps for
    # n-gram are left out, and counted
    assert space.skipped == {
        "vllm_ladder off above 512: never off (max_num_seqs 256)": 8,
        "sglang_adaptive: SGLang adapts only eagle, eagle3": 2}
    assert space.baseline("h200-tp2").name == "h200-tp2-off"
    points = {c.name: p for c, p in zip(space.candidates, space.points, strict=True)}
    assert (points["h100-tp2-e3-ladder-k2-off16"].k,
            points["h100-tp2-e3-ladder-k2-off16"].off_above) == (2, 16)


def test_the_shipped_search_has_200_candidates():
    doc = yaml.safe_load(SEARCH.read_text())
    from sim.loading import load_scenario

    base = load_scenario(repo_root() / "scenarios" / "plan-llama8b.yaml").model_dump(
        mode="json")
    space = expand(parse_search(doc["search"], "s.yaml"), base, "s.yaml")
    assert len(space.candidates) == 200


@pytest.mark.parametrize("section, expected", [
    ([1], "c.yaml: search: must be a mapping"),
    ({"methods": {"e": {}}, "k": [2, 2]}, "c.yaml: search.k: a value given twice"),
    ({"methods": {"e": {}}, "k": [0]}, "c.yaml: search.k.0: must be >= 1"),
    ({"methods": {"e": {}}, "controllers": ["fixed", "magic"]},
     "c.yaml: search.controllers"),
    ({"methods": {"e": {}}, "controllers": ["vllm_ladder"]},
     "c.yaml: search.off_above: vllm_ladder needs"),
    ({"methods": {"e": {}}, "gpus": ["h100"], "deployments": [{"name": "a"}]},
     "c.yaml: search.deployments: give deployments or gpus and tp, not both"),
    ({"methods": {}}, "c.yaml: search.methods"),
    ({"methods": {"e": {"drafter": {"method": "telepathy"}}}},
     "c.yaml: search.methods.e.drafter.method: one of"),
    ({"methods": {"e": {}}, "colour": "red"}, "c.yaml: search.colour"),
    ({"deployments": [{"name": "a"}, {"name": "a-x"}], "methods": {"x-k2": {}, "k2": {}},
      "k": [2]}, "c.yaml: search: candidate names ['a-x-k2-k2'] come out twice"),
])
def test_a_bad_search_is_one_line_naming_file_and_field(section, expected):
    from specdec.errors import UserError

    with pytest.raises(UserError) as e:
        expand(parse_search(section, "c.yaml"), _base(), "c.yaml")
    assert str(e.value).startswith(expected), str(e.value)
    assert "\n" not in str(e.value)


def _tiny(tmp_path, search: dict, requests: int = 200):
    """The Llama-3-70B example made small: paper timing, 200 requests, outputs up to 192
    tokens, a tight SLO (so a passing run keeps up), and the search."""
    doc = yaml.safe_load(SCENARIO.read_text())
    doc["run"]["requests"] = requests
    doc["deployment"]["timing"] = "paper"
    doc["workload"]["output"]["max_tokens"] = 192
    doc["slo"] = {"ttft_p99_s": 0.5, "tpot_p99_s": 0.03}
    scenario = tmp_path / "base.yaml"
    scenario.write_text(yaml.safe_dump(doc))
    cands = tmp_path / "search.yaml"
    cands.write_text(yaml.safe_dump({"search": search}))
    return scenario, cands


def _plan(capsys, tmp_path, scenario, cands, *extra) -> dict:
    out = tmp_path / f"o{len(list(tmp_path.iterdir()))}"
    assert main(["plan", str(scenario), "--candidates", str(cands), "--json", "--no-progress",
                 "--out", str(out), *extra]) == 0
    return json.loads(capsys.readouterr().out)


SMALL = {"deployments": [{"name": "a", "set": {"deployment.gpu": "h100", "deployment.tp": 4}},
                         {"name": "b", "set": {"deployment.gpu": "h200", "deployment.tp": 2}}],
         "methods": {"d": {}}, "k": [1, 3],
         "controllers": {"fixed": None, "vllm_ladder": {"k": [3], "off_above": [16]}}}


def test_a_search_gives_the_same_answer_for_any_number_of_workers(tmp_path, capsys):
    scenario, cands = _tiny(tmp_path, SMALL)
    one = _plan(capsys, tmp_path, scenario, cands, "--workers", "1")
    two = _plan(capsys, tmp_path, scenario, cands, "--workers", "2")
    for key in ("wall_s", "workers"):
        one["search"].pop(key), two["search"].pop(key)
    assert one["rows"] == two["rows"] and one["search"] == two["search"]
    rows = one["rows"]
    assert len(rows) == 8 and rows[0]["cheapest"]
    # every row says how far its rate is from the failing one, and how it was found
    for r in rows:
        assert r["status"] in ("refined", "coarse", "dominated")
        if r["status"] == "refined":
            assert r["fail_rate_per_s"] <= r["max_rate_per_s"] * 1.05
        elif r["status"] == "coarse":
            assert r["fail_rate_per_s"] == pytest.approx(r["max_rate_per_s"] * 2 ** 0.25)
    assert rows[0]["status"] == "refined"
    assert one["search"]["candidates"] == 8 and one["search"]["runs"] > 8
    # at the crossover, what the deployment's best ladder does (the other controller here)
    cross = one["search"]["crossover"]
    there = cross["controllers_there"]
    assert [c["controller"] for c in there] == ["vllm_ladder"]
    assert there[0]["candidate"].startswith(cross["deployment"] + "-d-ladder-k3-off16")
    assert there[0]["rate_per_s"] == (cross["stops_at_per_s"] or cross["beats_up_to_per_s"])
    assert 0 <= there[0]["mean_k"] <= 3 and 0 <= there[0]["off_share"] <= 1


def test_the_winner_meets_the_slo_at_its_rate_and_not_above(tmp_path, capsys):
    """Re-run as the printed run_args say: within the SLO at the reported rate, and not
    at the failing rate the search reports."""
    import shlex

    scenario, cands = _tiny(tmp_path, SMALL)
    top = _plan(capsys, tmp_path, scenario, cands, "--workers", "1")["rows"][0]

    def meets(rate: float) -> bool:
        sets = [w for w in shlex.split(top["run_args"]) if w != "--set"
                and not w.startswith("workload.rate_per_s=")]
        argv = [x for a in sets for x in ("--set", a)]
        assert main(["run", str(scenario), *argv, "--set", f"workload.rate_per_s={rate!r}",
                     "--json", "--no-progress", "--no-report",
                     "--out", str(tmp_path / f"r{rate}")]) == 0
        s = json.loads(capsys.readouterr().out)["variants"][0]
        return s["finished"] == s["requests"] and s["ttft_p99_s"] <= 0.5 \
            and s["tpot_p99_s"] <= 0.03

    assert meets(top["max_rate_per_s"]) and not meets(top["fail_rate_per_s"])


def test_the_crossover_is_where_speculation_stops_beating_plain_decoding(tmp_path, capsys):
    """K = 5 at alpha 0.6: it beats plain decoding's TPOT p99 at light load and loses as
    the batch grows. The scan says so at every rate, and the crossover sits between the
    last rate where it beats and the first where it does not."""
    scenario, cands = _tiny(tmp_path, {
        "deployments": [{"name": "a", "set": {"deployment.gpu": "h100",
                                              "deployment.tp": 4}}],
        "methods": {"d": {"acceptance": {"kind": "iid", "alpha": 0.6}}}, "k": [5]})
    cross = _plan(capsys, tmp_path, scenario, cands, "--workers", "1")["search"]["crossover"]
    assert (cross["speculative"], cross["baseline"], cross["metric"]) == \
        ("a-d-k5", "a-off", "tpot_p99")
    assert cross["found"] == "crossed"
    lo, hi = cross["beats_up_to_per_s"], cross["stops_at_per_s"]
    assert lo < hi <= lo * 1.05
    for s in cross["scan"]:
        beats = s["speculative"] <= 0.99 * s["baseline"]
        assert s["beats"] == beats
        assert beats == (s["rate_per_s"] <= lo)  # one crossing, in that direction
    at = cross["at_crossover"]
    assert at["rate_per_s"] == hi and at["mean_k"] == 5.0 and at["off_share"] == 0.0
    assert at["batch"] > 1


def test_the_winners_vllm_config_reads_back_as_its_policy(tmp_path, capsys):
    """The vllm serve line the search prints for a ladder, a chain and a tree reads back
    through --from-vllm as the candidate's own policy and drafter."""
    from hardware.catalog import load_catalog
    from sim.engines.vllm import parse_vllm_serve, serve_command
    from sim.studies.plan import build_for

    s = parse_search({"gpus": ["h100"], "tp": [4], "methods": {
        "e3": {"drafter": {"method": "eagle3"}}, "d": {}}, "k": [3], "trees": [[2, 1, 1]],
        "controllers": {"fixed": None, "vllm_ladder": {"off_above": [24]}}}, "c.yaml")
    base = _base()
    space = expand(s, base, "c.yaml")
    assert len(space.candidates) == 7
    for cand in space.candidates:
        sc = build_for(base, cand, 2.0, "x")[0]
        line, _ = serve_command(sc, sc.variants[0], load_catalog())
        got = parse_vllm_serve(line.replace("<an eagle3 head trained for llama-3-70b>", "x"),
                               lambda m: {"meta-llama/Llama-3.2-1B": "llama-3.2-1b"}.get(
                                   m, "llama-3-70b"))
        sets = {k: json.loads(v) for k, v in (t.split("=", 1) for t in got.sets)}
        variants = sets["variants"]
        assert sets["deployment.tp"] == 4
        if cand.policy["kind"] == "none":
            assert [v["policy"] for v in variants] == [{"kind": "none"}]
            continue
        back = variants[1]
        assert back["policy"] == cand.policy, cand.name
        method = (cand.variant.get("drafter") or {}).get("method", "draft_model")
        assert back["drafter"]["method"] == method


def test_a_bad_search_on_the_command_line_is_exit_2_one_line(tmp_path, capsys):
    scenario, cands = _tiny(tmp_path, {"methods": {"d": {}}, "k": "three"})
    assert main(["plan", str(scenario), "--candidates", str(cands), "--no-progress",
                 "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "search.yaml: search.k" in err
    assert not (tmp_path / "o").exists()
    both = tmp_path / "both.yaml"
    both.write_text(yaml.safe_dump({"search": {"methods": {"d": {}}},
                                    "candidates": [{"name": "x"}]}))
    assert main(["plan", str(scenario), "--candidates", str(both), "--no-progress",
                 "--out", str(tmp_path / "o")]) == 2
    assert "both.yaml: give candidates or search, not both" in capsys.readouterr().err
    scenario, cands = _tiny(tmp_path, SMALL)
    assert main(["plan", str(scenario), "--candidates", str(cands), "--no-progress",
                 "--crossover-metric", "vibes", "--out", str(tmp_path / "o")]) == 2
    assert "--crossover-metric: one of" in capsys.readouterr().err


def test_the_text_answer_names_the_winner_its_configs_and_the_crossover(tmp_path, capsys):
    scenario, cands = _tiny(tmp_path, SMALL)
    assert main(["plan", str(scenario), "--candidates", str(cands), "--no-progress",
                 "--workers", "1", "--top", "3", "--out", str(tmp_path / "o")]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert lines[1].startswith("searched 8 candidates on 2 deployments: ")
    assert "(5 more rows in " in text and (tmp_path / "o" / "plan.csv").exists()
    best = next(ln for ln in lines if ln.startswith("* cheapest: "))
    name = best.removeprefix("* cheapest: ").split(";")[0]
    config = next(ln for ln in lines if ln.startswith("  vLLM --speculative-config: "))
    spec = json.loads(config.removeprefix("  vLLM --speculative-config: "))
    assert spec["method"] == "draft_model" and spec["num_speculative_tokens"] == int(name[-1])
    assert any(ln.startswith("  SGLang: python3 -m sglang.launch_server ") for ln in lines)
    assert any(ln.startswith("  TensorRT-LLM: trtllm-serve ") for ln in lines)
    assert any(ln.startswith("crossover on tpot_p99: ") for ln in lines)
    assert main(["plan", str(scenario), "--candidates", str(cands), "--no-progress",
                 "--top", "0", "--out", str(tmp_path / "p")]) == 2
    assert "--top: must be >= 1, got 0" in capsys.readouterr().err
