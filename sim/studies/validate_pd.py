"""Category H by simulation (``specsim validate --simulate-pd``): each disaggregated-serving
run replayed through SpecSim's P/D engine under its benchmark's own protocol.

Category H's row model (``hardware.timing.pd_serving``) prices one prompt's prefill and
one decode step: no queue. The runs were measured by a client that keeps ``concurrency``
requests in flight, so most of a loaded run's TTFT is waiting. Here the simulator runs
each run as its client did (sources below), and its TTFT and TPOT (the means over the
run's requests, as the client reports them) are compared with the measured ones:

- a closed loop of ``concurrency`` users without think time (``--max-concurrency C``,
  ``--request-rate inf``), all sending at once when the measured run starts (the warm-up
  is a run of its own before it);
- ``rounds × concurrency`` requests, prompt and output lengths drawn uniformly from
  [⌊0.8 L⌋, L] (``--random-range-ratio 0.8``, ``--ignore-eos``; ``sample_random_requests``
  draws ``randint(int(L × 0.8), L + 1)``);
- the run's pools, layout and precision as category H reads them; each engine's scheduler
  with SpecSim's defaults for it (what ``--from-sglang`` / ``--from-trtllm`` set from a
  bare command line: the runs' recipes set their own batch and token limits, which the
  rows do not carry; TensorRT-LLM's token budget, without chunked prefill, at least a
  whole sequence, as the sweeps' ``max_seq_len``), prefix caching off (random prompts share
  nothing), SGLang's P/D
  flow for SGLang runs and vLLM's (the decode side after the prefill) for TensorRT-LLM's.

The protocols: SGLang runs (InferenceX through NVIDIA's srt-slurm, February-March 2026):
``sa-bench``, 10 × C prompts (github NVIDIA/srt-slurm
src/srtctl/benchmarks/scripts/sa-bench/bench.sh @b95025783b17478b0e637212bdb5995ce1faec67,
with its benchmark_serving.py); TensorRT-LLM runs (InferenceX through Dynamo's
performance sweeps, December 2025): ``MULTI_ROUND`` 8 × C prompts (github ai-dynamo/dynamo
components/backends/trtllm/performance_sweeps/benchmark_disagg.slurm @0b6abc828e8e,
scripts/bench.sh @0857f8c6300f; the release the runs used is not stated, so these are the
versions read). Rows whose protocol is not public (the Qwen3-32B runs of an internal
NVIDIA gap analysis: their ``silicon_data_source`` is a local file) are left out.

SGLang's ``--scheduler-recv-interval`` (``scheduler.recv_interval``, ``sim.recv``) is set on
each pool as the run's srt-slurm recipe sets it (``RECIPES``: the recipe whose GPU,
precision, lengths, pools and concurrency list match the run's; nothing fitted); a run no
recipe matches (the B200 runs: srt-slurm had no B200 SGLang recipe at that commit, and its
later ones have other pools) keeps SGLang's default, 1.

Not modelled: the HTTP front end and router (Dynamo, with nginx before four front ends in
the SGLang runs), tokenisation, the chat template's tokens, SGLang's bootstrap handshake;
the recipes' batch limits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specdec.errors import UserError


@dataclass(frozen=True)
class Protocol:
    """How a run's client loaded it: ``rounds`` × concurrency requests, lengths uniform on
    [⌊ratio × L⌋, L]."""

    rounds: int
    ratio: float
    source: str


PROTOCOLS = {
    "sglang": Protocol(10, 0.8, "github NVIDIA/srt-slurm src/srtctl/benchmarks/scripts/"
                                "sa-bench/bench.sh @b95025783b17"),
    "trtllm": Protocol(8, 0.8, "github ai-dynamo/dynamo components/backends/trtllm/"
                               "performance_sweeps/benchmark_disagg.slurm @0b6abc828e8e, "
                               "scripts/bench.sh @0857f8c6300f"),
}


@dataclass(frozen=True)
class Recipe:
    """The srt-slurm recipe (``path`` at ``SRT_SLURM``) a run's configuration matches: its
    benchmark's ``concurrencies`` and the ``scheduler-recv-interval`` of its prefill and
    decode servers' ``sglang_config`` (SGLang's default 1 where it gives none)."""

    path: str
    concurrencies: tuple[int, ...]
    prefill_recv_interval: int
    decode_recv_interval: int


SRT_SLURM = "github NVIDIA/srt-slurm @b95025783b17478b0e637212bdb5995ce1faec67"
# The low-latency recipes of InferenceX's SGLang DeepSeek-R1 runs, keyed by what a row
# states: (gpu, compute_dtype, isl, osl, prefill workers, tp, ep, decode workers, tp, ep);
# each the only recipe at SRT_SLURM with that GPU, precision, lengths and both pools'
# workers and layout (the others run data-parallel attention), with the row's concurrency in
# its list. Their images are lmsysorg/sglang:v0.5.8-cu130(-runtime) where the GB300 and
# the GB200 FP8 rows name v0.5.8.post1; the recv intervals are the same in every version of
# these files from that commit to 04ff0a0a (2026-07-10). The GB300 FP8 recipes have an MTP
# twin (mtp/low-latency.yaml) with the same pools and intervals: the rows do not say which
# ran, and it does not change the interval.
RECIPES = {
    ("gb200", "fp4", 1024, 1024, 1, 4, 1, 2, 4, 1):
        Recipe("recipes/gb200-fp4/1k1k/low-latency.yaml", (4, 8, 32), 10, 10),
    ("gb200", "fp4", 8192, 1024, 1, 4, 1, 4, 4, 1):
        Recipe("recipes/gb200-fp4/8k1k/low-latency.yaml", (4, 8), 10, 10),
    ("gb200", "fp8", 1024, 1024, 1, 4, 1, 1, 4, 1):
        Recipe("recipes/gb200-fp8/1k1k/low-latency.yaml", (4, 8), 10, 10),
    ("gb200", "fp8", 8192, 1024, 1, 8, 1, 1, 8, 1):
        Recipe("recipes/gb200-fp8/8k1k/low-latency.yaml", (4, 8, 16), 10, 10),
    ("gb300", "fp4", 1024, 1024, 1, 4, 1, 2, 4, 1):
        Recipe("recipes/gb300-fp4/1k1k/low_latency.yaml", (4, 8, 32), 10, 10),
    ("gb300", "fp4", 8192, 1024, 1, 4, 1, 4, 4, 1):
        Recipe("recipes/gb300-fp4/8k1k/low_latency.yaml", (4, 8, 32, 64), 10, 10),
    ("gb300", "fp8", 1024, 1024, 1, 4, 1, 4, 4, 1):
        Recipe("recipes/gb300-fp8/1k1k/stp/low-latency.yaml", (4, 8, 16, 32), 10, 1),
    ("gb300", "fp8", 8192, 1024, 1, 4, 1, 1, 4, 1):
        Recipe("recipes/gb300-fp8/8k1k/stp/low-latency.yaml", (4, 8), 10, 1),
}


def recipe(row) -> Recipe | None:
    """The srt-slurm recipe SGLang run ``row`` matches (``RECIPES``), or None."""
    if row.framework != "sglang" or protocol(row) is None:
        return None
    found = RECIPES.get((row.gpu, row.compute_dtype, row.isl, row.osl, row.prefill_workers,
                         row.prefill_tp, row.prefill_ep, row.decode_workers, row.decode_tp,
                         row.decode_ep))
    return found if found is not None and row.concurrency in found.concurrencies else None


# the tokens TensorRT-LLM's sweeps add to a server's max_seq_len beyond isl (+ osl)
TRTLLM_SEQ_EXTRA = 203
# the runs whose client is public: InferenceX's database dump (category H's notes)
PUBLIC = "silicon_data_source: db-dump/"


def protocol(row) -> Protocol | None:
    """The client protocol run ``row`` was measured under, or None where it is not
    public."""
    if PUBLIC not in row.notes:
        return None
    return PROTOCOLS.get(row.framework)


def row_sets(row, catalog) -> list[str]:
    """The ``--set`` overrides of the default scenario that replay ``row``."""
    from sim.engines import sglang, trtllm

    proto = protocol(row)
    if proto is None:
        raise UserError(f"{row.path}:{row.line}: no public client protocol for this run")
    if row.framework == "sglang":
        parsed = sglang.parse_sglang(
            f"python -m sglang.launch_server --model-path {row.model}",
            lambda m: catalog.model(m).id,
            lambda m: catalog.model(m).config.num_nextn_predict_layers > 0)
    else:  # its default max_num_tokens, or a whole sequence where that is more (the
        # sweeps' max_seq_len: isl + osl + 203, benchmark_disagg.slurm), as chunked
        # prefill is off
        budget = max(trtllm.DEFAULT_MAX_TOKENS, row.isl + row.osl + TRTLLM_SEQ_EXTRA)
        parsed = trtllm.parse_trtllm(f"trtllm-serve {row.model} --max_num_tokens {budget}",
                                     lambda m: catalog.model(m).id)
    users = row.concurrency
    low = lambda n: max(1, int(n * proto.ratio))  # noqa: E731 (the client's int(L * r))
    rec = recipe(row)  # each pool's --scheduler-recv-interval, where its recipe is known
    recv = ("", "") if rec is None else (f", recv_interval: {rec.prefill_recv_interval}",
                                         f", recv_interval: {rec.decode_recv_interval}")
    sets = [*parsed.sets,
            f"deployment.framework={catalog.framework_id(row.framework, row.framework_version)}",
            f"deployment.gpu={row.gpu}", f"deployment.weight_bits={row.weight_bits}",
            f"deployment.kv_bits={row.kv_bits}", "scheduler.prefix_caching=false",
            f"disaggregation={{prefill: {{replicas: {row.prefill_workers}, "
            f"tp: {row.prefill_tp}, ep: {row.prefill_ep}{recv[0]}}}, decode: {{replicas: "
            f"{row.decode_workers}, tp: {row.decode_tp}, ep: {row.decode_ep}{recv[1]}}}, "
            f"flow: {'sglang' if row.framework == 'sglang' else 'vllm'}}}",
            f"deployment.tp={row.decode_tp}", f"deployment.ep={row.decode_ep}",
            f"workload={{arrivals: closed_loop, users: {users}, think_mean_s: 0, "
            f"prompt: {{kind: uniform, low: {low(row.isl)}, high: {row.isl}}}, "
            f"output: {{kind: uniform, low: {low(row.osl)}, high: {row.osl}}}}}",
            "variants=[{name: none, policy: {kind: none}}]",
            f"run.requests={proto.rounds * users}", "run.seed=0"]
    for field in ("compute_dtype", "fp8_scales", "fp4_format", "quantized"):
        value = getattr(row, field)
        if value is not None:
            sets.append(f"deployment.{field}={value}")
    return sets


@dataclass(frozen=True)
class Simulated:
    """A run's simulated mean TTFT and TPOT (seconds) and its requests."""

    ttft_s: float
    tpot_s: float
    requests: int


def simulate_row(row, catalog) -> Simulated:
    """Run ``row`` through the simulator under its protocol (module notes)."""
    from sim.loading import load_scenario, repo_root
    from sim.runner import run_scenario

    sc = load_scenario(repo_root() / "scenarios" / "default.yaml", row_sets(row, catalog))
    v = run_scenario(sc, source=f"{row.path}:{row.line}", iteration_rows=False).variants[0]
    r = v.requests.columns
    ttft = r["first_token_at"] - r["arrival_at"]
    out = r["emitted_tokens"]
    many = out > 1  # the client's TPOT: (e2e - TTFT) / (output - 1), over requests of 2+
    tpot = (r["finished_at"][many] - r["first_token_at"][many]) / (out[many] - 1)
    return Simulated(float(np.mean(ttft)), float(np.mean(tpot)), len(ttft))


@dataclass(frozen=True)
class SimulatedPd:
    """The simulated check of category H: the runs replayed, their results, the errors
    (simulated / measured - 1) of TTFT and TPOT, category H's summary of them, and the
    runs left out (no public protocol)."""

    rows: list
    simulated: list[Simulated]
    tpot_error: np.ndarray
    ttft_error: np.ndarray
    summary: dict
    left_out: list


def simulate_pd(catalog, rows=None, workers: int = 1, done=None) -> SimulatedPd:
    """Replay every run of category H whose protocol is public (``rows``: those of
    ``validation_pd.csv`` by default) on ``workers`` processes; ``done(i, n)`` after each."""
    import multiprocessing as mp

    from hardware.timing.pd_rows import read_pd_rows
    from hardware.timing.validation import PD_VALIDATION_CSV, pd_summary
    from sim.pool import can_fork, in_processes

    rows = read_pd_rows(PD_VALIDATION_CSV) if rows is None else rows
    run = [r for r in rows if protocol(r) is not None]
    left = [r for r in rows if protocol(r) is None]
    sims: list = [None] * len(run)

    def keep(i: int, result: Simulated) -> None:
        sims[i] = result
        if done is not None:
            done(sum(s is not None for s in sims), len(run))

    if can_fork(workers, len(run)):
        in_processes(simulate_row, [(r, catalog) for r in run], workers, keep,
                     context=mp.get_context("fork"))
    else:
        for i, r in enumerate(run):
            keep(i, simulate_row(r, catalog))
    tpot = np.array([s.tpot_s / r.measured_tpot - 1.0 for r, s in zip(run, sims, strict=True)])
    ttft = np.array([s.ttft_s / r.measured_ttft - 1.0 for r, s in zip(run, sims, strict=True)])
    return SimulatedPd(run, sims, tpot, ttft, pd_summary(run, tpot, ttft), left)
