"""The named workloads of ``specsim bench``, in one table.

Two are built whole (``sim.bench.bench_scenario``): ``speculative`` and ``decode-heavy``.
Every other one is a small variation of one of them -- its ``base`` -- stated as the
``--set`` overrides that make it, each a realistic setting of one engine feature that the
compiled fast paths leave to the reference scheduler (or once did): several replicas,
prefix caching, pipeline stages, n-gram and suffix drafters, adaptive trees and
per-sequence γ, drafting ahead, a closed loop, preemption, task mixes, batch ladders
(sticky or not), roofline timing and trees replayed from a sampling trace. ``specsim
bench --workload all`` runs them all and prints each one's µs per iteration beside its
base's.

Each speculative variation sets its own arrival rate (or users) so that, like its base,
it keeps about 64 sequences running on each replica: a time-weighted batch of 61-66 on
3,000 requests, found by bisecting the rate (the preemption workload excepted: its KV
cache is the limit). Per-iteration cost grows with the batch, so a variation at its
base's rate would compare another load, not another feature.

Each workload also states ``requests_per_s``, only for the estimate a long benchmark
prints first: the simulated requests per wall second it ran at, halved, in ``specsim
bench --workload all --requests 10000`` on this machine class (2 cores, shared; the
bases' in long runs of their own, ``specsim bench --requests 1000000`` and
``--workload decode-heavy --requests 100000``; roofline's as the speculative one's).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BASES", "DECODE_HEAVY_RATE_PER_S", "SPECULATIVE_RATE_PER_S", "WORKLOADS",
           "Workload"]

# About 64 sequences in flight for the speculative workload at the default timing
# (measured on 4000 requests: time-weighted batch 64.2 at 28.5 requests/s). Each
# variation's rate below was found the same way, on 4000 requests, for the batch its line
# or comment states (set again in 2026-12 when a draft's passes stopped paying the engine's
# per-sequence cost, and again when vLLM's speculative overheads were refitted: the old
# rates then ran ~70-100 sequences). The pipeline's batch jumps by +-10 sequences between
# neighbouring rates near there (its queue nearly stops draining), so its rate was chosen on
# three seeds: 35.4 requests/s, 64.1, 65.3 and 70.9 on 4000 requests (63.4 at seed 0 on the
# test's 3000).
SPECULATIVE_RATE_PER_S = 28.5
# About 32 sequences in flight for the decode-heavy replay (measured on 1500 requests:
# 32.2 at 2.4 requests/s; 37.4 at 2.6).
DECODE_HEAVY_RATE_PER_S = 2.4

BASES = ("speculative", "decode-heavy")


@dataclass(frozen=True)
class Workload:
    """A bench workload: the workload it varies (``base``, one of ``BASES``; a base is its
    own), one line for ``specsim bench --help`` (for a variation: what it changes), the
    ``--set`` overrides that make it from its base, and the rough simulated requests per
    wall second of the estimate."""

    base: str
    line: str
    sets: tuple[str, ...]
    requests_per_s: float


_SPEC = "speculative"

WORKLOADS: dict[str, Workload] = {
    "speculative": Workload(
        _SPEC, "Llama-3-8B + 1B draft on an H100, gamma 4, ~64 sequences (the default)",
        (), 30_000),
    "decode-heavy": Workload(
        "decode-heavy", "Llama-2-7B trace replay on an A100, no speculation, ~32 sequences",
        (), 6_000),
    # about the speculative load on each replica
    "replicas-2": Workload(
        _SPEC, "2 replicas behind a round-robin router, ~64 sequences each",
        ("deployment.replicas=2", "workload.rate_per_s=58.0"), 2_100),
    "replicas-8": Workload(
        _SPEC, "8 replicas behind a round-robin router, ~64 sequences each",
        ("deployment.replicas=8", "workload.rate_per_s=247.5"), 2_100),
    # 8 system prompts of 384 tokens (a request's own 128 follow): most of a prompt is a hit
    "prefix-cache": Workload(
        _SPEC, "prefix caching; prompts open with one of 8 shared 384-token prefixes",
        ("scheduler.prefix_caching=true", "workload.prompt={kind: fixed, tokens: 128}",
         "workload.shared_prefix_tokens=384", "workload.shared_prefix_groups=8",
         "workload.rate_per_s=37.4"), 3_000),
    "pipeline": Workload(
        _SPEC, "the target in 2 pipeline stages (pp 2)",
        ("deployment.pp=2", "workload.rate_per_s=35.4"), 1_600),
    # the n-gram and suffix drafters' acceptance and proposal rates were measured on
    # Llama-3.1-8B (workloads/data/acceptance_presets.yaml): its target is that model
    "ngram": Workload(
        _SPEC, "n-gram prompt lookup, gamma 5, vLLM's measured code-edit rates",
        ("models.target=llama-3.1-8b", "variants.0.policy.gamma=5",
         "variants.0.drafter={method: ngram}",
         "variants.0.acceptance={kind: preset, name: ngram-llama-3.1-8b-code-edit-k5}",
         "workload.rate_per_s=53.2"), 5_000),
    "suffix": Workload(
        _SPEC, "suffix decoding, gamma 1, vLLM's measured MT-Bench rates",
        ("models.target=llama-3.1-8b", "variants.0.policy.gamma=1",
         "variants.0.drafter={method: suffix}",
         "variants.0.acceptance={kind: preset, name: suffix-llama-3.1-8b-mtbench-k1}",
         "workload.rate_per_s=34.7"), 5_000),
    "adaptive-tree": Workload(
        _SPEC, "adaptive gamma <= 8 and root width <= 3, chosen every iteration",
        ("variants.0.policy={kind: adaptive, max_gamma: 8, smoothing: 0.05, max_width: 3}",
         "workload.rate_per_s=32.4"), 11_000),
    "per-seq-gamma": Workload(
        _SPEC, "adaptive gamma <= 8 for each sequence, from its own acceptance",
        ("variants.0.policy={kind: adaptive, max_gamma: 8, smoothing: 0.05, "
         "per_sequence: true}", "workload.rate_per_s=28.6"), 13_000),
    # PEARL-style: the draft on a GPU of its own drafts the next chain during the verify
    "parallel-drafting": Workload(
        _SPEC, "the draft on a GPU of its own, drafting ahead during the verify",
        ("deployment.draft_placement=separate", "deployment.draft_overlap=parallel",
         "workload.rate_per_s=28.8"), 1_000),
    # vllm bench serve --max-concurrency 64: 64 users, each sends again at once
    "closed-loop": Workload(
        _SPEC, "a closed loop of 64 users without think time (--max-concurrency 64)",
        ("workload={arrivals: closed_loop, users: 64, think_mean_s: 0, "
         "prompt: {kind: fixed, tokens: 512}, output: {kind: fixed, tokens: 128}}",), 2_800),
    # ~64 sequences of up to 41 blocks would want ~2,600: ~1 request in 10 is preempted
    # (3,000 requests: 9%, time-weighted batch 54), without overloading the replica
    "preemption": Workload(
        _SPEC, "a KV cache of 2,048 blocks, too small: ~1 request in 10 preempted",
        ("scheduler.num_gpu_blocks_override=2048",), 3_800),
    "task-mix": Workload(
        _SPEC, "a mix of code, chat and reasoning requests, each with its acceptance",
        ("acceptance={kind: task_mix, tasks: {"
         "code: {weight: 1, acceptance: {kind: iid, alpha: 0.9}}, "
         "chat: {weight: 2, acceptance: {kind: iid, alpha: 0.7}}, "
         "reasoning: {weight: 1, acceptance: {kind: bursty, easy_alpha: 0.9, "
         "hard_alpha: 0.2}}}}", "workload.rate_per_s=32.6"), 20_000),
    # vLLM 0.33's num_speculative_tokens_per_batch_size (key: scheduled, the default): each
    # sequence drafts the γ of the size of the step that last scheduled it
    "ladder": Workload(
        _SPEC, "a batch ladder (gamma 4, 2, off above 80 scheduled), vLLM 0.33",
        ("variants.0.policy={kind: batch_ladder, ladder: [[1, 32, 4], [33, 80, 2], "
         "[81, 100000, 0]]}", "workload.rate_per_s=31.8"), 4_500),
    # vLLM v0's num_speculative_tokens_per_batch_size, sticky: a request switched off by a
    # batch above 80 never speculates again (3,000 requests: 43% spend most steps off)
    "sticky-ladder": Workload(
        _SPEC, "a sticky batch ladder (gamma 4, 2, off above 80 sequences), vLLM v0",
        ("variants.0.policy={kind: batch_ladder, ladder: [[1, 32, 4], [33, 80, 2], "
         "[81, 100000, 0]], sticky: true}", "workload.rate_per_s=31.2"), 20_000),
    # a prefill replica hands every prompt to one of two decode replicas (sim.disagg), at
    # twice the speculative rate as it was set (64.1 = 2 x 32, before the base's rate moved
    # to 28.5 with vLLM's refitted overheads): each decode replica takes about the base's
    # (~33 sequences each, decoding alone; the one prefill replica caps them near 50 at any
    # rate)
    "pd-1p2d": Workload(
        _SPEC, "prefill/decode disaggregation: 1 prefill and 2 decode replicas",
        ("disaggregation={prefill: {replicas: 1}, decode: {replicas: 2}}",
         "workload.rate_per_s=64.1"), 1_500),
    # prefix caching with 256 shared 384-token prefixes (6,144 blocks), more than the GPU
    # pool keeps beside the running requests, and a CPU tier below it (sim.offload):
    # at 1,500 requests ~28% of the prompt tokens are found on the GPU, ~3% in the tier
    "cpu-offload": Workload(
        _SPEC, "prefix caching, 256 shared prefixes, 4,500 GPU blocks, an 8 GiB CPU tier",
        ("scheduler.prefix_caching=true", "workload.prompt={kind: fixed, tokens: 128}",
         "workload.shared_prefix_tokens=384", "workload.shared_prefix_groups=256",
         "workload.rate_per_s=31.6", "scheduler.num_gpu_blocks_override=4500",
         "scheduler.kv_offload_gib=8"), 3_100),
    "roofline": Workload(
        _SPEC, "priced by the roofline timing instead of the measured one",
        ("deployment.timing=roofline", "workload.rate_per_s=26.6"), 30_000),
    # the sampling trace (temperature 0.5) of a weak draft; a tree widened at its root
    "trace-tree": Workload(
        _SPEC, "a tree <3,1,1,1>, acceptance replayed from a sampling trace",
        ("acceptance={kind: trace, file: workloads/traces/perturbed-0.3-t0.5.npz, "
         "mode: sampling}", "variants.0.policy={kind: tree, expansion: [3, 1, 1, 1]}",
         "workload.rate_per_s=22.0"), 15_000),
}
