"""The compiled walk of a speculating replica (``sim.steady_walk``, ``steady_kernel.walk``
with a draft) gives the records of the reference path.

Each case runs a scenario's speculating variants (the default's unless it names another: a
1B draft for Llama-3-8B on an H100, measured timing) once iteration by iteration and once
with the compiled kernels from the first iteration, and compares every record: request
timestamps and counters, iteration rows, the ITL histogram and the end time. The cases cover
what the walk does (admissions, prefill chunks beside verifies, depths drawn from the
generator -- bursty, i.i.d. and positional models, level by level or as one geometric run --
or replayed from a trace, chains and trees, a draft model (one, or one per GPU of a TP
target, or on its own GPU drafting ahead during the verify), an EAGLE-3 head and Medusa's
heads, n-gram and suffix lookup (a match drawn per
decoder and step, host seconds per sequence), static, adaptive (chains, trees widened at the
root, a γ per sequence) and ladder policies, slots reused, the split where an event comes)
and what it hands back to the reference path (a draft the budget cuts or that lags, a
preemption, the matches drawn for an iteration it leaves).
"""

from __future__ import annotations

import pytest

from sim.bench import bench_scenario
from sim.engine_path import PATHS
from sim.loading import load_scenario, repo_root
from tests.sim.test_golden import _assert_same_runs

BURSTY_MODEL = "kind: bursty, easy_alpha: 0.9, hard_alpha: 0.3"
BURSTY = f"acceptance={{{BURSTY_MODEL}}}"
# a sampling trace (temperature 0.5), replayed with draws
SAMPLING = "kind: trace, file: workloads/traces/perturbed-0.3-t0.5.npz, mode: sampling"
# a task mix: two i.i.d. tasks, a bursty one and the default's trace, replayed
MIX = ("code: {weight: 1, acceptance: {kind: iid, alpha: 0.9}}, "
       "chat: {weight: 2, acceptance: {kind: iid, alpha: 0.6}}, "
       f"reasoning: {{weight: 1, acceptance: {{{BURSTY_MODEL}}}}}, "
       "replay: {weight: 1, acceptance: {kind: trace, file: "
       "workloads/traces/perturbed-0.1-greedy.npz}}")
FIXED = "variants=[{name: fixed-g4, policy: {kind: fixed, gamma: 4}}]"
# a lookup drafter (method, γ, proposal rate, host seconds per sequence)
LOOKUP = ("variants=[{{name: l, drafter: {{method: {0}, proposal_rate: {2}, "
          "cpu_s_per_seq: {3}}}, policy: {{kind: fixed, gamma: {1}}}}}]")
# a draft model on a GPU of its own, drafting ahead during the verify
AHEAD = ("deployment.draft_placement=separate", "deployment.draft_overlap=parallel")
# a budget of 16 tokens for short requests: decoders left out of a step (a batch ladder's
# decoders then verify the γ's of different steps)
TIGHT = ("workload.rate_per_s=10", "scheduler.max_batched_tokens=16", "scheduler.chunk_tokens=8",
         "workload.prompt={kind: uniform, low: 10, high: 60}",
         "workload.output={kind: uniform, low: 20, high: 100}")
CASES = {
    # the shipped default: greedy replay of a recorded trace (no draws)
    "trace-chain": ["run.requests=120", FIXED],
    # a two-state bursty model: four uniforms per verify from the replica's generator
    "bursty-chain": ["run.requests=120", BURSTY, FIXED],
    # a token tree: coverage by width, the tree mask in the target and draft passes
    "bursty-tree": ["run.requests=80", BURSTY,
                    "variants=[{name: tree, policy: {kind: tree, expansion: [2, 2, 1]}}]"],
    # catch_up drafting (the draft ingests nothing extra while every request speculates)
    "catch-up": ["run.requests=80", BURSTY, FIXED, "scheduler.draft_sync=catch_up"],
    # ... with drafts cut by a tight budget: a cut draft lags, and the reference's next
    # draft pass ingests what it missed (the walk leaves such a batch to it)
    "catch-up-cut": ["run.requests=60", BURSTY, FIXED, "scheduler.draft_sync=catch_up",
                     "scheduler.max_batched_tokens=41", "scheduler.chunk_tokens=16",
                     "workload.rate_per_s=50",
                     "workload.prompt={kind: uniform, low: 20, high: 200}"],
    # a 96-token budget of 32-token chunks: prefills continued, drafts cut (the reference's)
    "cut": ["run.requests=40", BURSTY, FIXED, "scheduler.max_batched_tokens=96",
            "scheduler.chunk_tokens=32", "workload.prompt={kind: uniform, low: 20, high: 200}"],
    # a pool of a few prompts: preemptions (the reference's), resumed requests queued
    "preempting": ["run.requests=40", BURSTY, FIXED, "workload.rate_per_s=200",
                   "scheduler.num_gpu_blocks_override=300",
                   "workload.output={kind: uniform, low: 4, high: 80}"],
    # more requests than slots: a queue admitted into the slots of finished requests
    "queued": ["run.requests=80", BURSTY, FIXED, "workload.rate_per_s=400",
               "scheduler.max_num_seqs=8", "workload.output={kind: uniform, low: 1, high: 30}"],
    # a draft on its own GPU drafting ahead during the verify (PEARL): each verify drawn one
    # guess deeper, the chains ready beside those not, what the drafting ahead outlasted
    "ahead-bursty": ["run.requests=120", BURSTY, FIXED, *AHEAD],
    # ... i.i.d. α (a geometric run one deeper), prompts in chunks beside ready chains
    "ahead-iid-chunks": ["run.requests=100", "acceptance={kind: iid, alpha: 0.8}", FIXED,
                         *AHEAD, "scheduler.max_batched_tokens=256",
                         "scheduler.chunk_tokens=64",
                         "workload.prompt={kind: uniform, low: 20, high: 400}"],
    # i.i.d. α: a chain's run is one geometric draw from the replica's generator
    "iid-chain": ["run.requests=120", "acceptance={kind: iid, alpha: 0.7}", FIXED],
    # ... and a tree's levels one uniform each (coverage 1 - (1 - α)^(k^θ))
    "iid-tree": ["run.requests=80", "acceptance={kind: iid, alpha: 0.6, theta: 0.8}",
                 "variants=[{name: tree, policy: {kind: tree, expansion: [3, 1, 2]}}]"],
    # per-position conditional rates, deeper than the table (its last rate repeats)
    "positional": ["run.requests=120", "acceptance={kind: positional, rates: [0.8, 0.6]}",
                   FIXED],
    # an EAGLE-3 head drafting (a one-layer draft of the target's width)
    "eagle3": ["run.requests=120", "acceptance={kind: positional, rates: [0.8, 0.7, 0.6]}",
               "variants=[{name: e, policy: {kind: fixed, gamma: 3}, "
               "drafter: {method: eagle3}}]"],
    # a draft on each of a TP-4 target's GPUs: sequences split round robin over them
    "draft-replicas": ["scenario=plan-llama70b", "run.requests=80",
                       "variants=[{name: c, policy: {kind: fixed, gamma: 4}}, "
                       "{name: t, policy: {kind: tree, expansion: [3, 1, 1]}}]"],
    # Medusa's heads: every row in one pass, chains and trees
    "medusa": ["run.requests=80", 'models.target="vicuna-7b"', "models.draft=null",
               "workload.prompt.max_tokens=1024", "workload.output.max_tokens=512",
               "acceptance={kind: positional, rates: [0.8, 0.6, 0.5, 0.4]}",
               "variants=[{name: m, drafter: {method: medusa, heads: 4}, "
               "policy: {kind: fixed, gamma: 4}}, {name: mt, drafter: {method: medusa, "
               "heads: 3}, policy: {kind: tree, expansion: [2, 2, 1]}}]"],
    # an adaptive policy (SmartSpec's goodput): each iteration's γ priced and chosen in the
    # walk, α̂ learned from each verify, γ = 0 feeding each draft its token
    "adaptive": ["run.requests=120", BURSTY,
                 "variants=[{name: a, policy: {kind: adaptive, max_gamma: 6}}]"],
    # ... on a TP-4 target with a draft per GPU, i.i.d. acceptance (geometric runs)
    "adaptive-replicas": ["scenario=plan-llama70b", "run.requests=80",
                          "variants=[{name: a, policy: {kind: adaptive, max_gamma: 5}}]"],
    # ... with Medusa's heads, whose one pass prices every γ alike
    "adaptive-medusa": ["run.requests=80", 'models.target="vicuna-7b"', "models.draft=null",
                        "workload.prompt.max_tokens=1024", "workload.output.max_tokens=512",
                        "acceptance={kind: positional, rates: [0.7, 0.5, 0.4]}",
                        "variants=[{name: m, drafter: {method: medusa, heads: 4}, "
                        "policy: {kind: adaptive, max_gamma: 4}}]"],
    # vLLM's batch ladder by running requests, speculation off (γ = 0) past 12 of them
    "ladder": ["run.requests=150", BURSTY, "workload.rate_per_s=30",
               "variants=[{name: l, policy: {kind: batch_ladder, "
               "ladder: [[1, 4, 5], [5, 12, 2], [13, 256, 0]], key: running}}]"],
    # ... by decoding sequences, γ = 0 between two speculating rungs
    "ladder-decoding": ["run.requests=150", "acceptance={kind: iid, alpha: 0.7}",
                        "workload.rate_per_s=30",
                        "variants=[{name: l, policy: {kind: batch_ladder, ladder: [[1, 4, 5], "
                        "[5, 8, 2], [9, 12, 0], [13, 256, 1]], key: decoding}}]"],
    # vLLM 0.33's ladder (key: scheduled, the default): each decoder's γ by the size of the
    # step that last scheduled it; speculation off (γ = 0) past 12 requests
    "ladder-scheduled": ["run.requests=150", BURSTY, "workload.rate_per_s=30",
                         "variants=[{name: l, policy: {kind: batch_ladder, "
                         "ladder: [[1, 4, 5], [5, 12, 2], [13, 256, 0]]}}]"],
    # ... a ladder with gaps (a size between rows takes the γ of the row below), i.i.d. α
    # (geometric runs, a γ = 0 row's drawn too where others draft)
    "ladder-scheduled-gap": ["run.requests=150", "acceptance={kind: iid, alpha: 0.7}",
                             "workload.rate_per_s=30",
                             "variants=[{name: l, policy: {kind: batch_ladder, ladder: "
                             "[[1, 2, 4], [5, 8, 0], [11, 14, 3], [20, 256, 1]]}}]"],
    # ... a 16-token budget: the decoders it leaves out of a step keep their last step's
    # size, so a step's decoders verify different γ's (speculation off between two rungs)
    "ladder-scheduled-tight": ["run.requests=100", BURSTY, *TIGHT,
                               "variants=[{name: l, policy: {kind: batch_ladder, "
                               "ladder: [[1, 3, 3], [4, 5, 0], [6, 256, 2]]}}]"],
    # ... on a TP-4 target with a draft per GPU (each replica's passes over its own γ's)
    "ladder-scheduled-replicas": ["scenario=plan-llama70b", "run.requests=80", *TIGHT,
                                  "variants=[{name: l, policy: {kind: batch_ladder, "
                                  "ladder: [[1, 3, 3], [4, 5, 0], [6, 256, 2]]}}]"],
    # ... with Medusa's heads (one pass whatever the γ's)
    "ladder-scheduled-medusa": ["run.requests=80", 'models.target="vicuna-7b"',
                                "models.draft=null", *TIGHT, "scheduler.max_batched_tokens=12",
                                "acceptance={kind: positional, rates: [0.8, 0.6, 0.5, 0.4]}",
                                "variants=[{name: m, drafter: {method: medusa, heads: 4}, "
                                "policy: {kind: batch_ladder, ladder: [[1, 3, 3], [4, 5, 0], "
                                "[6, 256, 2]]}}]"],
    # a ladder that never drafts: no walk (nothing to draw), the reference path's records
    "ladder-off": ["run.requests=40", "acceptance={kind: iid, alpha: 0.7}",
                   "variants=[{name: l, policy: {kind: batch_ladder, "
                   "ladder: [[1, 100000, 0]], key: running}}]"],
    # n-gram prompt lookup: a match for some decoders each step (drawn from the replica's
    # second generator), a verify of one token for the others, host seconds per decoder
    "ngram": ["run.requests=120", BURSTY, LOOKUP.format("ngram", 4, 0.6, 2e-4)],
    # suffix decoding, i.i.d. α: the geometric runs drawn for the rows without a match too
    "suffix-iid": ["run.requests=120", "acceptance={kind: iid, alpha: 0.7}",
                   LOOKUP.format("suffix", 2, 0.4, 5e-5)],
    # ... a recorded trace replayed (no acceptance draws, the matches still drawn)
    "ngram-trace": ["run.requests=120", LOOKUP.format("ngram", 3, 0.5, 0.0)],
    # ... a tree verify beside one-token verifies, the engine's overheads per round
    "ngram-tree": ["run.requests=80", BURSTY, "variants=[{name: t, drafter: {method: ngram, "
                   "proposal_rate: 0.5, cpu_s_per_seq: 1e-4}, policy: {kind: tree, "
                   "expansion: [2, 2, 1]}}]"],
    # ... a budget that cuts drafts: matches drawn for an iteration the walk leaves to the
    # reference path, which draws them again (the walk takes its draws back)
    "ngram-cut": ["run.requests=60", BURSTY, LOOKUP.format("ngram", 4, 0.6, 1e-4),
                  "scheduler.max_batched_tokens=41", "scheduler.chunk_tokens=16",
                  "workload.rate_per_s=50", "workload.prompt={kind: uniform, low: 20, high: 200}"],
    # a task mix: each request's task picks its model (its stream's low bits), each task's
    # rows drawn after the tasks before it (geometric runs, levels, replayed runs)
    "task-mix": ["run.requests=150", FIXED, f"acceptance={{kind: task_mix, tasks: {{{MIX}}}}}"],
    # ... a tree: i.i.d. levels one uniform each, bursty and positional ones
    "task-mix-tree": ["run.requests=100", "acceptance={kind: task_mix, tasks: {"
                      "a: {weight: 1, acceptance: {kind: iid, alpha: 0.6}}, "
                      "b: {weight: 1, acceptance: {kind: positional, rates: [0.9, 0.5]}}, "
                      f"c: {{weight: 1, acceptance: {{{BURSTY_MODEL}}}}}}}}}",
                      "variants=[{name: tree, policy: {kind: tree, expansion: [2, 2, 1]}}]"],
    # ... a lookup drafter's tree: a task whose rows in a step are all without a match has
    # only chains (of zeros), which an i.i.d. model draws as geometric runs
    "task-mix-ngram-tree": ["run.requests=80", "acceptance={kind: task_mix, tasks: {"
                            "a: {weight: 1, acceptance: {kind: iid, alpha: 0.9}}, "
                            f"b: {{weight: 1, acceptance: {{{BURSTY_MODEL}}}}}}}}}",
                            "variants=[{name: t, drafter: {method: ngram, proposal_rate: 0.3, "
                            "cpu_s_per_seq: 1e-4}, "
                            "policy: {kind: tree, expansion: [2, 2, 1]}}]"],
    # a sampling trace's recorded acceptance by width, a tree (one uniform per level, none
    # accepted past the end of a recorded sequence)
    "trace-sampling-tree": ["run.requests=100", f"acceptance={{{SAMPLING}}}",
                            "variants=[{name: tree, policy: {kind: tree, expansion: [3, 1, 2]}}]"],
    # ... a task of a mix beside i.i.d. and bursty ones, on a chain
    "task-mix-sampling": ["run.requests=120", FIXED, "acceptance={kind: task_mix, tasks: {"
                          "a: {weight: 1, acceptance: {kind: iid, alpha: 0.7}}, "
                          f"b: {{weight: 2, acceptance: {{{SAMPLING}}}}}, "
                          f"c: {{weight: 1, acceptance: {{{BURSTY_MODEL}}}}}}}}}"],
    # a horizon: the walk stops there, the requests still running are written back
    "horizon": ["run.requests=200", BURSTY, FIXED, "run.horizon_s=6.2782"],
    # vLLM v0's sticky ladder: a request the ladder once gives γ = 0 never drafts again
    # (its rows' SPEC_OFF); those switched off beside others drafting feed the draft nothing
    "ladder-sticky": ["run.requests=60", BURSTY, "workload.rate_per_s=20",
                      "variants=[{name: l, policy: {kind: batch_ladder, "
                      "ladder: [[1, 3, 3], [4, 100000, 0]], sticky: true}}]"],
    # ... keyed on the running requests, i.i.d. α (geometric runs)
    "ladder-sticky-running": ["run.requests=100", "acceptance={kind: iid, alpha: 0.7}",
                              "workload.rate_per_s=20",
                              "variants=[{name: l, policy: {kind: batch_ladder, ladder: "
                              "[[1, 3, 4], [4, 6, 2], [7, 100000, 0]], key: running, "
                              "sticky: true}}]"],
    # ... a 16-token budget (decoders left out of a step), the decoding rows as the key
    "ladder-sticky-tight": ["run.requests=100", BURSTY, *TIGHT,
                            "variants=[{name: l, policy: {kind: batch_ladder, ladder: "
                            "[[1, 1, 3], [2, 3, 2], [4, 256, 0]], key: decoding, "
                            "sticky: true}}]"],
    # ... Medusa's heads (one pass, whoever drafts)
    "ladder-sticky-medusa": ["run.requests=80", 'models.target="vicuna-7b"', "models.draft=null",
                             "workload.prompt.max_tokens=1024", "workload.output.max_tokens=512",
                             "acceptance={kind: positional, rates: [0.8, 0.6, 0.5, 0.4]}",
                             "workload.rate_per_s=20",
                             "variants=[{name: m, drafter: {method: medusa, heads: 4}, "
                             "policy: {kind: batch_ladder, ladder: [[1, 3, 3], [4, 100000, 0]], "
                             "sticky: true}}]"],
    # ... a draft per GPU of a TP-4 target: a step with requests switched off beside others
    # drafting is left to the reference path
    "ladder-sticky-replicas": ["scenario=plan-llama70b", "run.requests=80", *TIGHT,
                               "variants=[{name: l, policy: {kind: batch_ladder, "
                               "ladder: [[1, 3, 3], [4, 5, 0], [6, 256, 2]], sticky: true}}]"],
    # an adaptive policy per sequence: the batch's γ priced and chosen in the walk, then
    # each decoder's own γ at most it from its history (decoders of different γ's in a
    # step, each drawn on its own chain), α̂ learned over the decoders' chains
    "adaptive-per-seq": ["run.requests=300", BURSTY, "workload.rate_per_s=20",
                         "variants=[{name: a, policy: {kind: adaptive, max_gamma: 6, "
                         "smoothing: 0.05, per_sequence: true}}]"],
    # ... i.i.d. α (one geometric run per decoder, a γ = 0 one's too where others draft)
    "adaptive-per-seq-iid": ["run.requests=200", "acceptance={kind: iid, alpha: 0.7}",
                             "workload.rate_per_s=20",
                             "variants=[{name: a, policy: {kind: adaptive, max_gamma: 5, "
                             "per_sequence: true}}]"],
    # ... a 16-token budget: decoders left out of a step, drafts cut (the reference's)
    "adaptive-per-seq-tight": ["run.requests=150", BURSTY, *TIGHT,
                               "variants=[{name: a, policy: {kind: adaptive, max_gamma: 4, "
                               "per_sequence: true}}]"],
    # ... on a TP-4 target with a draft per GPU (each replica's passes over its own γ's)
    "adaptive-per-seq-replicas": ["scenario=plan-llama70b", "run.requests=120",
                                  f"acceptance={{{BURSTY_MODEL}}}",
                                  "variants=[{name: a, policy: {kind: adaptive, max_gamma: 5, "
                                  "per_sequence: true}}]"],
    # ... with Medusa's heads (one pass whatever the γ's)
    "adaptive-per-seq-medusa": ["run.requests=120", 'models.target="vicuna-7b"',
                                "models.draft=null", "workload.prompt.max_tokens=1024",
                                "workload.output.max_tokens=512",
                                "acceptance={kind: positional, rates: [0.9, 0.6, 0.4, 0.3]}",
                                "variants=[{name: m, drafter: {method: medusa, heads: 4}, "
                                "policy: {kind: adaptive, max_gamma: 4, "
                                "per_sequence: true}}]"],
    # ... a task mix (each task's decoders drawn after the tasks before)
    "adaptive-per-seq-mix": ["run.requests=150", "workload.rate_per_s=20",
                             f"acceptance={{kind: task_mix, tasks: {{{MIX}}}}}",
                             "variants=[{name: a, policy: {kind: adaptive, max_gamma: 5, "
                             "per_sequence: true}}]"],
    # an adaptive policy that also tries trees widened at the root (<k, 1, ..., 1>, k up to
    # max_width): each iteration's chain and trees priced and chosen in the walk, the tree's
    # verify under the tree mask, α̂ learned from its chain levels; here trees of width 3
    # whose depth changes
    "adaptive-tree": ["run.requests=300", BURSTY, "workload.rate_per_s=20",
                      "variants=[{name: a, policy: {kind: adaptive, max_gamma: 5, "
                      "max_width: 3}}]"],
    # ... i.i.d. α = 0.97: chains (one geometric run per decoder) and trees of width 2 and 3
    # (one uniform per level) from one iteration to the next
    "adaptive-tree-iid": ["run.requests=300", "acceptance={kind: iid, alpha: 0.97}",
                          "workload.rate_per_s=20",
                          "variants=[{name: a, policy: {kind: adaptive, max_gamma: 5, "
                          "max_width: 3}}]"],
    # ... a 16-token budget: trees cut by it (the reference's), decoders left out of a step
    "adaptive-tree-tight": ["run.requests=150", BURSTY, *TIGHT,
                            "variants=[{name: a, policy: {kind: adaptive, max_gamma: 4, "
                            "max_width: 2}}]"],
    # ... on a TP-4 target with a draft per GPU (each replica's tree passes), γ = 0 at times
    "adaptive-tree-replicas": ["scenario=plan-llama70b", "run.requests=200",
                               "variants=[{name: a, policy: {kind: adaptive, max_gamma: 5, "
                               "max_width: 3}}]"],
    # ... with Medusa's heads (one pass, chain or tree)
    "adaptive-tree-medusa": ["run.requests=150", 'models.target="vicuna-7b"',
                             "models.draft=null", "workload.prompt.max_tokens=1024",
                             "workload.output.max_tokens=512",
                             "acceptance={kind: positional, rates: [0.7, 0.5, 0.4]}",
                             "variants=[{name: m, drafter: {method: medusa, heads: 4}, "
                             "policy: {kind: adaptive, max_gamma: 4, max_width: 3}}]"],
    # ... a task mix: i.i.d. (geometric runs under a chain, levels under a tree), bursty and
    # a sampling trace's tasks
    "adaptive-tree-mix": ["run.requests=300", "workload.rate_per_s=20",
                          "acceptance={kind: task_mix, tasks: {"
                          "a: {weight: 1, acceptance: {kind: iid, alpha: 0.95}}, "
                          f"b: {{weight: 1, acceptance: {{{SAMPLING}}}}}, "
                          f"c: {{weight: 1, acceptance: {{{BURSTY_MODEL}}}}}}}}}",
                          "variants=[{name: a, policy: {kind: adaptive, max_gamma: 5, "
                          "max_width: 3}}]"],
    # policies the walk leaves to the reference path (NO_WALK): adaptive trees over a greedy
    # trace (its trees have no kernel tables), an adaptive policy drafting under catch_up
    "adaptive-tree-greedy": ["run.requests=60", "workload.rate_per_s=20",
                             "variants=[{name: a, policy: {kind: adaptive, max_gamma: 4, "
                             "max_width: 2}}]"],
    "adaptive-catch-up": ["run.requests=60", BURSTY, "workload.rate_per_s=20",
                          "scheduler.draft_sync=catch_up",
                          "variants=[{name: a, policy: {kind: adaptive, max_gamma: 4}}]"],
    # ... a lookup drafter whose shape varies, or under catch_up (a row without a match lags)
    "ngram-adaptive": ["run.requests=60", BURSTY, "workload.rate_per_s=20",
                       "variants=[{name: a, drafter: {method: ngram, proposal_rate: 0.5}, "
                       "policy: {kind: adaptive, max_gamma: 4}}]"],
    "ngram-catch-up": ["run.requests=60", BURSTY, "workload.rate_per_s=20",
                       "scheduler.draft_sync=catch_up", LOOKUP.format("ngram", 4, 0.5, 0.0)],
}
NO_WALK = {"ladder-off", "adaptive-tree-greedy", "adaptive-catch-up", "ngram-adaptive",
           "ngram-catch-up"}
LOOKUP_CASES = {"ngram", "suffix-iid", "ngram-trace", "ngram-tree", "ngram-cut",
                "task-mix-ngram-tree"}
# cases whose steps' decoders verify different γ's (a ladder keyed on the scheduled step,
# an adaptive policy per sequence)
MIXED_GAMMA = {"ladder-scheduled-tight", "ladder-scheduled-replicas", "ladder-scheduled-medusa",
               *(c for c in CASES if c.startswith("adaptive-per-seq"))}
# cases whose adaptive policy tries trees: (depth, root width) of the shapes it chose
ADAPTIVE_TREES = {c for c in CASES if c.startswith("adaptive-tree") and c not in NO_WALK}


@pytest.mark.parametrize("case", sorted(CASES))
def test_speculating_walks_give_the_records_of_the_reference_path(case, monkeypatch):
    pytest.importorskip("aiconfigurator_core", reason="the kernel prices measured timings")
    from sim import steady_kernel, steady_walk
    from sim.build import setups
    from sim.policies import AdaptiveGamma, BatchLadder
    from sim.runner import simulate_variants

    if steady_kernel.compiled_walk() is None:
        pytest.skip("the walk is compiled only with numba")
    sets = CASES[case]
    name = next((x.split("=")[1] for x in sets if x.startswith("scenario=")), "default")
    sc = load_scenario(repo_root() / "scenarios" / f"{name}.yaml",
                       [x for x in sets if not x.startswith("scenario=")])
    real = steady_walk.plan
    seen = {"walks": 0, "iterations": 0, "admitted": 0, "mixed": 0, "split": 0,
            "reused": 0}

    def counted(r, fn):
        got = real(r, fn)
        if got is not None:
            seen["walks"] += 1
            seen["iterations"] += got.k
            seen["admitted"] += got.admitted
            seen["mixed"] += bool(((got.ints[2] > 0) & (got.ints[3] > 0)).any())
            seen["split"] += got.split[0] > 0
            if got.admitted and len(got.finished):  # admitted after a finish
                seen["reused"] += bool(got.adm_at.max() >= got.finished_at.min())
        return got

    monkeypatch.setattr(steady_walk, "plan", counted)
    mixed = []  # per run, the steps whose decoders' γ's differ (formed by the reference)
    chosen = set()  # (depth, root width) of the one shapes of batches the reference formed
    for policy in (BatchLadder, AdaptiveGamma):
        def shape(self, *args, _real=policy.shape, **kwargs):
            got = _real(self, *args, **kwargs)
            mixed[-1] += got.ndim == 2
            if got.ndim == 1 and len(mixed) == 1:
                chosen.add((int((got > 0).sum()), int(got[0]) if len(got) else 0))
            return got

        monkeypatch.setattr(policy, "shape", shape)
    runs = []
    for on, progress in ((False, None), (True, None), (True, lambda *a: None)):
        mixed.append(0)
        runs.append(simulate_variants(setups(sc), sc.run.horizon_s, progress,
                                      path=PATHS["compiled" if on else "reference"]))
        if not on:
            assert seen["walks"] == 0
    _assert_same_runs(runs[0], runs[1])
    _assert_same_runs(runs[0], runs[2])  # progress slices are events too
    iterations = len(runs[0][0].iterations)
    if case in NO_WALK:
        assert seen["walks"] == 0, seen
        return
    assert seen["walks"] > 0 and seen["admitted"] > 0 and seen["mixed"] > 0, seen
    if case in ("cut", "preempting", "catch-up-cut", "ngram-cut", "ladder-sticky-replicas"):
        # the reference took some
        assert seen["iterations"] < 2 * iterations, (seen, iterations)
    else:
        assert seen["iterations"] > 1.5 * iterations, (seen, iterations)
    if case == "preempting":
        assert runs[0][0].requests.columns["preemptions"].sum() > 0
    if case.startswith("ladder-sticky"):  # requests switched off for most of their steps
        req = runs[0][0].requests.columns
        assert (req["draft_steps"] > 0).any()
        assert (req["draft_steps"] < req["verify_steps"] / 2).any()
    if case == "queued":
        assert seen["reused"] > 0, seen
    if case in MIXED_GAMMA:  # steps of mixed γ's, most of them formed by the walk
        assert mixed[0] > 20 and mixed[1] < mixed[0] / 2, mixed
    if case in ADAPTIVE_TREES:  # the choice changes: trees, of more than one depth or width
        trees = {s for s in chosen if s[1] > 1}
        assert trees and len(chosen - {(0, 0)}) >= 2, chosen
        if case == "adaptive-tree-iid":  # chains and trees of both widths
            assert {w for _, w in chosen} >= {1, 2, 3}, chosen
    if case == "horizon":
        assert seen["split"] > 0, seen
        assert not runs[0][0].requests.columns["finished"].all()
    if case in LOOKUP_CASES:  # steps with a match and without, the host's seconds in draft_s
        req, it = runs[0][0].requests.columns, runs[0][0].iterations.columns
        assert (req["draft_steps"] > 0).any()
        assert (req["draft_steps"] < req["verify_steps"]).any()
        if case != "ngram-trace":  # (cpu_s_per_seq 0 there)
            assert (it["draft_s"][it["decode_seqs"] > 0] > 0).all()


@pytest.mark.parametrize("variant", [[FIXED], [LOOKUP.format("ngram", 4, 0.6, 0.0)],
                                     CASES["ladder-scheduled-tight"][2:]])
def test_a_walk_draws_what_the_reference_draws(variant, monkeypatch):
    """After a walk, the replica's generators are where the reference path leaves them (the
    walk draws each verify's uniforms from the acceptance's, in order -- with a γ per
    decoder, each decoder's row of uniforms, a γ = 0 one's too where another drafts --
    and a lookup drafter's matches from its own): the draws of a run that walks and of one
    that does not are the same, and so are their later draws."""
    pytest.importorskip("aiconfigurator_core", reason="the kernel prices measured timings")
    from sim import cluster, steady_kernel
    from sim.build import setups
    from sim.runner import simulate

    if steady_kernel.compiled_walk(True) is None:
        pytest.skip("the walk is compiled only with numba")
    sc = load_scenario(repo_root() / "scenarios" / "default.yaml",
                       ["run.requests=60", BURSTY, *variant])
    states = []
    real_wire = cluster.wire

    def wire(env, setup, path, *rows):
        got = real_wire(env, setup, path, *rows)
        r = got.replicas[0]
        states.append((r.rng, r.propose_rng))
        return got

    monkeypatch.setattr(cluster, "wire", wire)
    from sim import runner

    monkeypatch.setattr(runner, "wire", wire)
    for name in ("reference", "compiled"):
        simulate(setups(sc)[0][1], path=PATHS[name])
    (reference, matches), (walked, walked_matches) = states
    assert reference.bit_generator.state == walked.bit_generator.state
    assert reference.random() == walked.random()
    lookup = "ngram" in variant[0]
    assert (matches is None) == (not lookup) == (walked_matches is None)
    if matches is not None:
        assert matches.bit_generator.state == walked_matches.bit_generator.state
        assert matches.random() == walked_matches.random()


def test_an_arrival_at_the_very_end_of_an_iteration(tmp_path, monkeypatch):
    """A request that arrives at exactly the instant an iteration ends (SimPy orders the
    arrival's timeout and the replica's by when they were scheduled) gives the reference
    path's records. The arrival times are a replay whose one request is moved onto an
    iteration end of a first run (three such runs; in them the walk meets the tie after
    its first iteration three times, counted once with the kernel run as Python)."""
    pytest.importorskip("aiconfigurator_core", reason="the kernel prices measured timings")
    import numpy as np

    from sim import steady_kernel
    from sim.build import setups
    from sim.runner import simulate_variants

    if steady_kernel.compiled_walk(True) is None:
        pytest.skip("the walk is compiled only with numba")
    rng = np.random.default_rng(7)
    n = 40
    arrivals = np.cumsum(rng.exponential(1 / 6.0, n))
    prompts, outputs = rng.integers(5, 300, n), rng.integers(2, 120, n)
    path = tmp_path / "arrivals.csv"

    def scenario(times):
        path.write_text("arrival_at,prompt_tokens,output_tokens\n" + "".join(
            f"{float(a)!r},{p},{o}\n" for a, p, o in zip(times, prompts, outputs,
                                                         strict=True)))
        return load_scenario(repo_root() / "scenarios" / "default.yaml", [
            f"workload={{arrivals: replay, file: {path}}}", f"run.requests={n}", BURSTY,
            "variants=[{name: a, policy: {kind: adaptive, max_gamma: 5}}]"])

    def run(sc, on):
        return simulate_variants(setups(sc), sc.run.horizon_s, None,
                                 path=PATHS["compiled" if on else "reference"])

    first = run(scenario(arrivals), False)[0].iterations.columns
    starts, durations = np.asarray(first["start_at"]), np.asarray(first["duration_s"])
    ends = starts[1:][starts[:-1] + durations[:-1] == starts[1:]]  # busy: end = next start
    moved = 0
    for j in range(2, n):
        between = ends[(ends > arrivals[j - 1]) & (ends < arrivals[j])]
        if len(between):
            times = arrivals.copy()
            times[j] = between[0]  # on an end of the first run, before its own arrival
            sc = scenario(times)
            _assert_same_runs(run(sc, False), run(sc, True))
            moved += 1
            if moved == 3:
                break
    assert moved == 3


# bench workloads (``sim.bench_workloads``) the walk once left to the reference path
ONCE_REFERENCE = ("task-mix", "trace-tree", "sticky-ladder", "per-seq-gamma", "adaptive-tree",
                  "parallel-drafting", "closed-loop", "preemption", "cpu-offload")


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("name", ONCE_REFERENCE)
def test_a_bench_workload_walks_every_iteration_as_the_reference_runs_it(name, seed):
    """Every record of the workload the same on both paths, at 300 requests, and every
    iteration formed by the compiled walk but around a load from a CPU tier (cpu-offload,
    whose rate brings one in the first 300 requests at seed 1)."""
    pytest.importorskip("aiconfigurator_core", reason="the kernel prices measured timings")
    from sim import steady_kernel
    from sim.build import setups
    from sim.runner import run_setups

    if steady_kernel.compiled_walk(True) is None:
        pytest.skip("the walk is compiled only with numba")
    sc = bench_scenario(300, seed, name)
    ref, comp = (run_setups(sc, setups(sc, "bench"), engine_path=PATHS[path]).variants
                 for path in ("reference", "compiled"))
    _assert_same_runs(ref, comp)
    assert ref[0].compiled_iterations == 0
    v = comp[0]
    # a load from the CPU tier is started by the reference scheduler (sim.steady_walk):
    # the iteration that admits it and the one the walk stopped before, at most
    loads = len(v.loads) if v.loads is not None else 0
    assert len(v.iterations) - 2 * loads <= v.compiled_iterations <= len(v.iterations)
    assert v.compiled_iterations > 0 and (loads or v.compiled_iterations == len(v.iterations))


@pytest.mark.parametrize("policy", ["fixed", "none"])
@pytest.mark.parametrize("router", ["least_requests", "least_tokens"])
def test_replicas_behind_a_load_router_walk_past_each_others_steps(router, policy):
    """A router that reads the replicas' load only when a request arrives: each replica's
    walk (without speculation, its steady stretches too) runs past the other replicas'
    steps to the next arrival (``Replica.peers``), with the records of the reference path;
    at a light load most steps are compiled."""
    pytest.importorskip("aiconfigurator_core", reason="the kernel prices measured timings")
    from sim import steady_kernel
    from sim.build import setups
    from sim.runner import run_setups

    if steady_kernel.compiled_walk(True) is None:
        pytest.skip("the walk is compiled only with numba")
    sets = [f"deployment.router={router}", "workload.rate_per_s=10"]
    if policy == "none":
        sets.append("variants.0.policy={kind: none}")
    sc = bench_scenario(300, 0, "replicas-2", None, sets)
    ref, comp = (run_setups(sc, setups(sc, "bench"), engine_path=PATHS[path]).variants
                 for path in ("reference", "compiled"))
    _assert_same_runs(ref, comp)
    assert comp[0].compiled_iterations > 0.8 * len(comp[0].iterations)
