"""The conformance workloads: (a) ample KV, no speculation, chunked prefill under a few
budgets; (b) tight KV (preemptions); (c) EAGLE with K = 3 under budgets that cut verifies;
(d) tight KV with EAGLE; (e) prefix caching without and with EAGLE; (f) a draft model
(one input slot per scheduled request); (g) seeded random mixes of all of these; (h) vLLM's
Dynamic SD ladder (``num_speculative_tokens_per_batch_size``), named and random; every one
of them again with async scheduling; (p) a P/D decode replica's, named and random (sync);
(o) a CPU tier below the prefix cache (vLLM's native KV offload), named and random (sync)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from tests.conformance.workload import Workload, arrivals


def _mix(name: str, seed: int, n: int = 10, span: int = 12, prompt=(8, 160), output=(2, 40),
         **engine) -> Workload:
    rng = np.random.default_rng(seed)
    return Workload(name, arrival_at=arrivals(rng, n, span),
                    prompt=tuple(int(p) for p in rng.integers(*prompt, n)),
                    output=tuple(int(o) for o in rng.integers(*output, n)), seed=seed,
                    **engine)


def _shared(name: str, seed: int, n: int = 10, groups: int = 3, **engine) -> Workload:
    """Prompts that open with one of ``groups`` shared prefixes of 1 to 5 blocks (some of
    them extending another's), then tokens of their own."""
    rng = np.random.default_rng(seed)
    heads = [tuple(int(x) for x in rng.integers(0, 4, rng.integers(1, 6)))
             for _ in range(groups)]
    ids, prompt = [], []
    for _ in range(n):
        head = heads[int(rng.integers(groups))]
        own = int(rng.integers(0, 40))
        ids.append(head)
        prompt.append(16 * len(head) + own)
    return Workload(name, arrival_at=arrivals(rng, n, 10), prompt=tuple(prompt),
                    output=tuple(int(o) for o in rng.integers(2, 30, n)), seed=seed,
                    prefix_caching=True, hash_ids=tuple(ids), **engine)


EAGLE = {"k": 3, "method": "eagle"}
DRAFT = {"k": 3, "method": "draft_model"}


def named() -> list[Workload]:
    """The hand-chosen workloads, (a) to (f)."""
    out = []
    for budget, chunk in ((32, 0), (96, 0), (64, 24)):  # (a)
        out.append(_mix(f"a ample b{budget} t{chunk}", 1, max_batched_tokens=budget,
                        chunk=chunk))
    out.append(_mix("a ample unchunked b256", 2, max_batched_tokens=256, chunked=False,
                    max_model_len=256))  # vLLM wants the budget to hold a whole sequence
    for blocks in (16, 24):  # (b): ≥ the longest request's blocks, + 1 for the null block
        out.append(_mix(f"b tight {blocks} blocks", 3, n=12, span=6, prompt=(16, 120),
                        output=(10, 60), blocks=blocks, max_batched_tokens=64))
    for budget in (14, 22, 31):  # (c): up to 8 verifies of 4 tokens, some cut
        out.append(_mix(f"c eagle b{budget}", 4, n=10, span=2, prompt=(8, 40),
                        output=(30, 80), max_batched_tokens=budget, **EAGLE))
    out.append(_mix("c eagle b41 t3", 5, n=8, span=4, prompt=(8, 60), output=(10, 50),
                    max_batched_tokens=41, chunk=3, **EAGLE))  # the threshold cuts verifies
    out.append(Workload("c eagle at time 0", arrival_at=(0.0, 0.0, 0.0, 2.5),
                        prompt=(20, 30, 40, 10), output=(5, 5, 5, 5), max_batched_tokens=48,
                        **EAGLE))  # the first step sees every request that arrives at 0
    for blocks in (16, 24):  # (d)
        out.append(_mix(f"d eagle tight {blocks} blocks", 6, n=12, span=6, prompt=(16, 120),
                        output=(10, 60), blocks=blocks, max_batched_tokens=64, **EAGLE))
    # a 16-token prompt and its 3 lookahead slots need 2 blocks, 1 of 3 is free
    out.append(Workload("d eagle admission lookahead", arrival_at=(0.25, 1.5),
                        prompt=(14, 16), output=(20, 5), blocks=4, **EAGLE))
    out.append(_shared("e prefix", 7, max_batched_tokens=64))  # (e)
    out.append(_shared("e prefix eagle", 7, max_batched_tokens=64, **EAGLE))
    out.append(_shared("e prefix tight", 8, blocks=14, max_batched_tokens=48))
    for budget in (13, 27):  # (f): 4 tokens + 1 input slot per verify, some cut
        out.append(_mix(f"f draft_model b{budget}", 9, n=10, span=2, prompt=(8, 40),
                        output=(30, 80), max_batched_tokens=budget, **DRAFT))
    out.append(_mix("f draft_model tight", 10, n=12, span=6, prompt=(16, 120),
                    output=(10, 60), blocks=24, max_batched_tokens=64, **DRAFT))
    # (h): vLLM's Dynamic SD ladder, K by the requests the step before scheduled; a gap
    # (sizes 3-4 take the row below's K) and K = 0 past 6
    for name, spec, seed in (("eagle", EAGLE, 11), ("draft_model", DRAFT, 12)):
        out.append(_mix(f"h ladder {name}", seed, n=12, span=8, prompt=(8, 80),
                        output=(10, 60), max_batched_tokens=48, ladder=LADDER, **spec))
    out.append(_mix("h ladder tight", 13, n=12, span=6, prompt=(16, 120), output=(10, 60),
                    blocks=24, max_batched_tokens=64, ladder=LADDER, **EAGLE))
    return out


LADDER = ((1, 2, 3), (5, 6, 1), (7, 64, 0))


def random_mix(seed: int) -> Workload:
    """(g): a random engine (speculation, prefix caching, KV, budget, threshold) and a
    random workload, every request fitting the KV alone."""
    rng = np.random.default_rng([seed, 77])
    spec = [{}, EAGLE, DRAFT][int(rng.integers(3))]
    prefix = bool(rng.integers(2))
    budget = int(rng.choice([16, 32, 64, 128]))
    chunk = int(rng.choice([0, 0, 8, 24]))
    engine = dict(max_batched_tokens=budget, chunk=chunk,
                  max_num_seqs=int(rng.integers(2, 9)), **spec)
    name = f"g seed {seed}"
    w = (_shared(name, seed, n=int(rng.integers(4, 14)), **engine) if prefix else
         _mix(name, seed, n=int(rng.integers(4, 14)), span=int(rng.integers(2, 15)),
              **engine))
    longest = max(p + o for p, o in zip(w.prompt, w.output, strict=True)) + 2 * w.k + 1
    need = -(-longest // 16) + 1  # + the null block
    blocks = int(rng.choice([need, need + 4, need * 2, 10_000]))
    return replace(w, blocks=blocks)


# Where SpecSim's steps differ from vLLM 0.33's for a reason found and not yet fixed (the
# rule numbers are those of docs/conformance.md). A workload listed here is expected to
# differ; one that stops differing fails, so the list is kept true.
PLAIN_HASHES = ("vLLM's disable_lookahead_block_hashes (plain hashes, no block drop) is not "
                "a SpecSim knob: SpecSim's 0.33 rules hash with the next token")


def gaps() -> list[Workload]:
    """The smallest workloads found that show each difference (and rule 9's padding, which
    once was one)."""
    return [
        # the second prompt shares both full blocks of the first, then has its own tokens
        Workload("e eagle next-token hash", arrival_at=(0.25, 4.5), prompt=(40, 40), output=(4, 4),
                 prefix_caching=True, hash_ids=((1, 2), (1, 2)), **EAGLE),
        # the same with vLLM's plain hashes: the hit is the same
        Workload("e eagle plain hashes", arrival_at=(0.25, 4.5), prompt=(40, 40),
                 output=(4, 4), prefix_caching=True, hash_ids=((1, 2), (1, 2)),
                 lookahead_hashes=False, **EAGLE),
        # r1's block of 8 prompt and 8 output tokens is cached when r1 finishes, so freed
        # to the tail after r0's cached block and reused after it: r3 then misses r0's
        # block (SpecSim freed it uncached, to the head, before it cached output blocks)
        Workload("e finished output blocks", arrival_at=(0.25, 1.5, 12.5, 16.5),
                 prompt=(16, 8, 20, 17), output=(1, 9, 1, 1), blocks=4, prefix_caching=True,
                 hash_ids=((1,), None, None, (1,))),
        # r1 and r2 share 4 blocks and prefill side by side; r2 is preempted and resumed
        Workload("e duplicate blocks", arrival_at=(7.5417, 8.4583, 9.6667), prompt=(1, 97, 65),
                 output=(3, 1, 1), blocks=8, max_num_seqs=6, max_batched_tokens=128,
                 chunk=24, prefix_caching=True, hash_ids=((3,), (0, 3, 0, 0), (0, 3, 0, 0))),
        # r1's prompt is one block of r0's and one token: admitted with one token to compute
        Workload("rule 9 padding", arrival_at=(0.25, 3.5), prompt=(40, 17), output=(6, 3),
                 prefix_caching=True, hash_ids=((1, 2), (1,)), **DRAFT),
    ]


def random_ladder(seed: int) -> Workload:
    """(h): a random mix of (g) with speculation under a random Dynamic SD ladder (rows
    from 1 to the most requests a step schedules, some with gaps, K from 0 to 3)."""
    rng = np.random.default_rng([seed, 91])
    w = random_mix(seed)
    if not w.k:
        w = replace(w, k=3, method=("eagle", "draft_model")[int(rng.integers(2))])
    rows, lo = [], 1
    while lo <= w.max_num_seqs:
        hi = lo + int(rng.integers(0, 3))
        rows.append((lo, hi, int(rng.integers(0, w.k + 1))))
        lo = hi + 1 + int(rng.integers(0, 2))  # sometimes a gap: the row below's K
    longest = max(p + o for p, o in zip(w.prompt, w.output, strict=True)) + 2 * w.k + 1
    blocks = max(w.blocks, -(-longest // 16) + 1)
    return replace(w, name=f"h ladder seed {seed}", ladder=tuple(rows), blocks=blocks)


def remote(seed: int) -> Workload:
    """(p): a P/D decode replica: a random mix of (g) without prefix caching (SpecSim's
    decode pool has none), its prompts prefilled elsewhere, each KV loading 0.5 to 3.5 s
    from the step that holds blocks for it."""
    rng = np.random.default_rng([seed, 53])
    w = random_mix(seed)
    if w.prefix_caching:
        w = replace(w, prefix_caching=False, hash_ids=None)
    return replace(w, name=f"p remote seed {seed}",
                   remote_s=float(rng.choice([0.5, 1.5, 2.5, 3.5])))


def named_remote() -> list[Workload]:
    """(p), hand-chosen: a P/D decode replica with ample KV, with EAGLE, and with tight KV
    (loads wait for blocks; decoders are preempted and recompute here)."""
    return [
        _mix("p remote", 14, n=12, span=8, prompt=(8, 160), output=(2, 40), remote_s=1.5),
        _mix("p remote eagle", 15, n=10, span=4, prompt=(8, 60), output=(10, 50),
             max_batched_tokens=41, remote_s=2.5, **EAGLE),
        _mix("p remote tight 24 blocks", 16, n=12, span=6, prompt=(16, 120),
             output=(10, 60), blocks=24, max_batched_tokens=64, remote_s=1.5),
        _mix("p remote eagle tight 24 blocks", 17, n=12, span=6, prompt=(16, 120),
             output=(10, 60), blocks=24, max_batched_tokens=64, remote_s=0.5, **EAGLE),
    ]


def _offload_mix(name: str, seed: int, n: int = 12, groups: int = 3, span: int = 30,
                 **engine) -> Workload:
    """(o): prompts that open with one of ``groups`` shared prefixes of 2 to 5 blocks, then
    1 to 40 tokens of their own (never a whole block: see ``named_offload``), arriving over
    ``span`` seconds, so that a small GPU pool evicts a prefix between two requests that
    share it and the second finds it in the CPU tier."""
    rng = np.random.default_rng([seed, 31])
    heads = [tuple(int(x) for x in rng.integers(0, 6, rng.integers(2, 6)))
             for _ in range(groups)]
    ids, prompt = [], []
    for _ in range(n):
        head = heads[int(rng.integers(groups))]
        ids.append(head)
        prompt.append(16 * len(head) + int(rng.integers(1, 16)) + 16 * int(rng.integers(0, 3)))
    return Workload(name, arrival_at=arrivals(rng, n, span), prompt=tuple(prompt),
                    output=tuple(int(o) for o in rng.integers(2, 30, n)), seed=seed,
                    prefix_caching=True, hash_ids=tuple(ids), **engine)


def named_offload() -> list[Workload]:
    """(o), hand-chosen: a CPU tier below a small GPU pool (vLLM's native KV offload):
    ample and small tiers, loads shorter and longer than a step, EAGLE and a draft model,
    and tight KV (preemptions)."""
    return [
        # r0's 3 prefix blocks are evicted from the GPU by r1, then hit in the CPU by r2
        Workload("o offload basic", arrival_at=(0.25, 4.5, 9.5), prompt=(58, 90, 60),
                 output=(3, 3, 3), blocks=8, prefix_caching=True,
                 hash_ids=((1, 2, 3), None, (1, 2, 3)), cpu_blocks=50),
        _offload_mix("o offload", 1, blocks=14, cpu_blocks=200, max_batched_tokens=64),
        _offload_mix("o offload slow loads", 2, blocks=14, cpu_blocks=200,
                     max_batched_tokens=64, load_s=3.37),
        _offload_mix("o offload fast loads", 3, blocks=14, cpu_blocks=200,
                     max_batched_tokens=64, load_s=0.37),
        _offload_mix("o offload small tier", 4, blocks=14, cpu_blocks=8,
                     max_batched_tokens=64),
        _offload_mix("o offload tiny tier", 5, blocks=14, cpu_blocks=3,
                     max_batched_tokens=64),
        _offload_mix("o offload tight", 6, n=14, span=15, blocks=12, cpu_blocks=40,
                     max_batched_tokens=48),
        _offload_mix("o offload eagle", 7, blocks=16, cpu_blocks=200, max_batched_tokens=64,
                     **EAGLE),
        _offload_mix("o offload draft_model", 8, blocks=16, cpu_blocks=200,
                     max_batched_tokens=64, **DRAFT),
    ]


def offload(seed: int) -> Workload:
    """(o): a random CPU-tier mix: speculation (none, EAGLE, a draft model), budget,
    threshold, ``max_num_seqs``, a GPU pool from just enough for the longest request to
    twice that, a tier of 3 to 200 blocks, loads of 0.37 to 3.37 s."""
    rng = np.random.default_rng([seed, 19])
    spec = [{}, EAGLE, DRAFT][int(rng.integers(3))]
    engine = dict(max_batched_tokens=int(rng.choice([16, 32, 64, 128])),
                  chunk=int(rng.choice([0, 0, 8, 24])), max_num_seqs=int(rng.integers(2, 9)),
                  cpu_blocks=int(rng.choice([3, 8, 20, 200])),
                  load_s=float(rng.choice([0.37, 1.37, 3.37])), **spec)
    w = _offload_mix(f"o offload seed {seed}", seed, n=int(rng.integers(6, 16)),
                     span=int(rng.integers(10, 40)), **engine)
    longest = max(p + o for p, o in zip(w.prompt, w.output, strict=True)) + 2 * w.k + 1
    need = -(-longest // 16) + 1  # + the null block
    return replace(w, blocks=int(rng.choice([need, need + 2, need + 5, need * 2])))


OFFLOAD_SEEDS = range(40)
RANDOM_SEEDS = range(100)
LADDER_SEEDS = range(40)
REMOTE_SEEDS = range(30)
# (o): where SpecSim's CPU tier departs from vLLM 0.33's OffloadingConnector. Each rule was
# modelled on SpecSim's side in a scratch patch, cumulatively in this order: output blocks,
# EAGLE hashes, the threshold's count and a load's reservation (all four now SpecSim's own
# rules: a request's prompt blocks only, sim.kernels.tier.tier_offer_slot; with the tier, a
# KV connector, the legacy block hashes and an EAGLE hit's last block dropped,
# SchedulerLimits.hashes_next_token; the requests holding blocks counted where the step's
# cap is decided, sim.scheduling.vllm_v1; the in-flight prefills' blocks kept back from a
# load, Replica.load_reserve); what still differs is filed under the LRU rule
OFFLOAD_LRU = ("vLLM's LRU ranks a CPU block by its request's first tier access and re-ranks "
               "a finished request's blocks after the next step's stores; SpecSim makes every "
               "offer the most recent and re-ranks at retirement")
OFFLOAD_LRU_LIKELY = OFFLOAD_LRU + " (most likely: a small tier; first difference not traced)"
OFFLOAD_GAPS = {
    "o offload seed 5": OFFLOAD_LRU_LIKELY,
    "o offload seed 17": OFFLOAD_LRU_LIKELY,
    "o offload seed 23": OFFLOAD_LRU_LIKELY,
    "o offload seed 26": OFFLOAD_LRU_LIKELY,
    "o offload small tier": OFFLOAD_LRU,
}
GAPS = {"e eagle plain hashes": PLAIN_HASHES, "e eagle plain hashes async": PLAIN_HASHES,
        **OFFLOAD_GAPS}


def known_gap(w: Workload) -> str | None:
    """Why ``w`` is expected to differ, or None: it must agree step for step."""
    return GAPS.get(w.name)


def sync_workloads() -> list[Workload]:
    """The workloads in sync mode: (a) to (g) and the named gaps."""
    return (named() + gaps() + [random_mix(s) for s in RANDOM_SEEDS]
            + [random_ladder(s) for s in LADDER_SEEDS])


def all_workloads() -> list[Workload]:
    """Every workload the conformance test runs, in the table's order: each in sync mode,
    then each again with async scheduling (its name ends in " async"), then (p), the P/D
    decode replica's, sync only (SpecSim refuses async scheduling with disaggregation)."""
    sync = sync_workloads()
    return (sync + [replace(w, name=f"{w.name} async", async_scheduling=True) for w in sync]
            + named_remote() + [remote(s) for s in REMOTE_SEEDS] + offload_workloads())


def offload_workloads() -> list[Workload]:
    """(o): a CPU tier below the prefix cache, named and random (sync only: SpecSim refuses
    the tier with async scheduling)."""
    return named_offload() + [offload(s) for s in OFFLOAD_SEEDS]
