"""Category I by simulation (``specsim validate --simulate-offload``): serving with a CPU KV
tier below the prefix cache, replayed through SpecSim's engine as the benchmark's client
ran it, beside the same run without the tier.

``hardware/data/validation_offload.csv`` holds published runs of vLLM's native
``OffloadingConnector`` (SpecSim's ``scheduler.kv_offload_gib``, ``sim.offload``) and their
GPU-only twins, one row a stage's metric (docs/timing.md, category I, for the rules that
chose them and the split). The runs were measured with inference-perf's shared-prefix
workload in Poisson stages, and each configuration is replayed as that client sent it
(github kubernetes-sigs/inference-perf @7de5ef2ed6f7, the files named in the CSV's header):

- ``groups`` × ``prompts_per_group`` prompts, each a group's system prompt and a question of
  its own, in one shuffled order (``SharedPrefixDataGenerator``: the real order is an
  unseeded shuffle, so a seeded one here); request i of a stage sends prompt i mod their
  count, each stage starting again at prompt 0 (``run_stage`` calls ``get_data()`` anew);
- a stage at rate r sends ⌊r × ``stage_s``⌋ requests, ``PoissonLoadTimer``'s times: each
  second a Poisson(r) count, spread over that second by exponential gaps scaled to fill it;
- the next stage starts when every request of the last has finished, ``stage_interval_s``
  later (``mp_run``); so the caches carry over from stage to stage. Idle time changes no
  cache (LRU, no expiry), so the replay puts each stage a fixed ``STAGE_GAP_S`` after the
  last one's window and checks that the last one had drained by then;
- every request streams ``output_tokens`` tokens (``ignore_eos``); a stage's mean TTFT and
  mean E2E latency are over its requests, its throughput ``total_tokens_per_sec``: their
  prompt and output tokens over the last end less the first start (``reportgen/base.py``).

The deployment: ``replicas`` vLLM servers of ``tp`` GPUs (``--from-vllm``'s defaults for a
bare ``vllm serve``: vLLM 0.33's scheduler, 8192 tokens a step, prefix caching on;
synchronous scheduling in both configurations, as SpecSim's CPU tier is modelled), each
with the stated GPU KV (``--num-gpu-blocks-override``) and, for the offload configuration,
``--kv-offloading-size`` GiB of CPU tier. The router is llm-d's endpoint picker
(``deployment.router: llm_d``, ``sim.llm_d``) as the guide configures it: queue, KV-use,
GPU-prefix, CPU-prefix and no-hit LRU scorers at 1:1:1:1:1, its CPU index of 82,000
entries a server; the GPU-only twin runs the same picker without the CPU producer and
scorer (the guide's "optimized baseline" router is not published with the results).

Not modelled: the HTTP gateway, llm-d's flow control, the tokeniser (the client counts
~16,256 prompt tokens; SpecSim takes the configured lengths), the rest as ``sim.llm_d``
and ``sim.offload`` list (no ``HIT_PENDING`` wait, no store bandwidth).
"""

from __future__ import annotations

import json
import math
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from hardware.catalog import DATA_DIR
from hardware.timing.rows import cell_int, cell_positive, read_table
from specdec.errors import UserError

__all__ = ["OFFLOAD_VALIDATION_CSV", "OffloadRow", "read_offload_rows", "METRICS",
           "CONFIGS", "run_key", "stage_requests", "run_sets", "simulate_run",
           "SimulatedOffload", "simulate_offload", "offload_summary", "STAGE_GAP_S"]

OFFLOAD_VALIDATION_CSV = DATA_DIR / "validation_offload.csv"
METRICS = ("ttft_mean_s", "e2e_mean_s", "total_tokens_per_s")
CONFIGS = ("gpu_only", "cpu_offload")
# seconds from one stage's last send to the next stage's first: long enough for the
# slowest stage to drain (checked; the real gap is the drain plus stage_interval_s)
STAGE_GAP_S = 3600.0
_COLUMNS = ("category", "model", "gpu", "tp", "replicas", "framework", "config",
            "gpu_kv_tokens", "kv_offload_gib", "groups", "prompts_per_group",
            "system_prompt_tokens", "question_tokens", "output_tokens", "stages", "stage_s",
            "stage_interval_s", "stage_rate", "metric", "measured", "split", "source",
            "notes")
_REQUIRED = tuple(c for c in _COLUMNS if c not in ("category", "kv_offload_gib", "split",
                                                   "notes"))


@dataclass(frozen=True)
class OffloadRow:
    """One published metric of one stage of one configuration (the CSV's columns)."""

    line: int
    model: str
    gpu: str
    tp: int
    replicas: int
    framework: str
    config: str  # gpu_only or cpu_offload
    gpu_kv_tokens: int  # one replica's GPU KV
    kv_offload_gib: float | None  # one replica's CPU tier (cpu_offload only)
    groups: int
    prompts_per_group: int
    system_prompt_tokens: int
    question_tokens: int
    output_tokens: int
    stages: tuple[float, ...]  # every stage's rate, in the order they ran
    stage_s: float
    stage_interval_s: float
    stage_rate: float  # this row's stage
    metric: str
    measured: float
    source: str
    split: str = "fit"
    category: str = "I"
    notes: str = ""
    path: str = ""


def read_offload_rows(path: str | Path = OFFLOAD_VALIDATION_CSV) -> list[OffloadRow]:
    """The rows of an offload measurements CSV (leading ``#`` lines are comments); a bad
    file or cell is one UserError line naming the file, the line and the column
    (``hardware.timing.rows.read_table``)."""
    return read_table(Path(path), _REQUIRED, _COLUMNS, "an offload measurements file", _row)


def _row(p: Path, line: int, get: dict[str, str]) -> OffloadRow:
    where = f"{p}: line {line}"

    def integer(name: str, least: int = 1) -> int:
        return cell_int(p, line, name, get.get(name, ""), least)

    def positive(name: str) -> float:
        return cell_positive(p, line, name, get.get(name, ""))

    for name in ("model", "gpu", "framework", "source"):
        if not get.get(name):
            raise UserError(f"{where}: {name}: must not be empty")
    config = get.get("config", "")
    if config not in CONFIGS:
        raise UserError(f"{where}: config: must be one of {', '.join(CONFIGS)}, got "
                        f"{config!r}")
    gib = get.get("kv_offload_gib", "")
    if config == "cpu_offload":
        tier: float | None = positive("kv_offload_gib")
    elif gib:
        raise UserError(f"{where}: kv_offload_gib: a gpu_only run has no CPU tier, got "
                        f"{gib!r}")
    else:
        tier = None
    metric = get.get("metric", "")
    if metric not in METRICS:
        raise UserError(f"{where}: metric: must be one of {', '.join(METRICS)}, got "
                        f"{metric!r}")
    split = get.get("split") or "fit"
    if split not in ("fit", "test"):
        raise UserError(f"{where}: split: must be fit or test, got {split!r}")
    try:
        stages = tuple(float(s) for s in get.get("stages", "").split(";"))
    except ValueError:
        raise UserError(f"{where}: stages: must be rates separated by ';', got "
                        f"{get.get('stages')!r}") from None
    if not all(s > 0 and math.isfinite(s) for s in stages):
        raise UserError(f"{where}: stages: every rate must be a finite number > 0, got "
                        f"{get.get('stages')!r}")
    rate = positive("stage_rate")
    if rate not in stages:
        raise UserError(f"{where}: stage_rate: {rate:g} is not one of the stages "
                        f"{get.get('stages')!r}")
    text = get.get("stage_interval_s", "")
    try:
        interval = float(text)
    except ValueError:
        raise UserError(f"{where}: stage_interval_s: must be a number, got {text!r}") from None
    if not (interval >= 0 and math.isfinite(interval)):
        raise UserError(f"{where}: stage_interval_s: must be a finite number >= 0, got "
                        f"{text!r}")
    return OffloadRow(
        line=line, model=get["model"], gpu=get["gpu"], tp=integer("tp"),
        replicas=integer("replicas"), framework=get["framework"], config=config,
        gpu_kv_tokens=integer("gpu_kv_tokens"), kv_offload_gib=tier,
        groups=integer("groups"), prompts_per_group=integer("prompts_per_group"),
        system_prompt_tokens=integer("system_prompt_tokens"),
        question_tokens=integer("question_tokens"), output_tokens=integer("output_tokens", 2),
        stages=stages, stage_s=positive("stage_s"), stage_interval_s=interval,
        stage_rate=rate, metric=metric, measured=positive("measured"),
        source=get["source"], split=split, category=get.get("category") or "I",
        notes=get.get("notes", ""), path=str(p))


def run_key(row: OffloadRow) -> tuple:
    """What one replayed run shares: every column but the stage, metric and measurement."""
    return (row.model, row.gpu, row.tp, row.replicas, row.framework, row.config,
            row.gpu_kv_tokens, row.kv_offload_gib, row.groups, row.prompts_per_group,
            row.system_prompt_tokens, row.question_tokens, row.output_tokens, row.stages,
            row.stage_s, row.stage_interval_s, row.source)


def _poisson_times(rate: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """inference-perf's ``PoissonLoadTimer``: per second a Poisson(rate) count (a second with
    none is skipped), spread over it by exponential gaps scaled to sum to the second; the
    first ``n`` send times from 0."""
    out: list[float] = []
    start = 0.0
    while len(out) < n:
        k = int(rng.poisson(rate))
        if k < 1:
            start += 1.0
            continue
        gaps = rng.exponential(1.0 / k, k)
        out.extend(start + np.cumsum(gaps / gaps.sum()))
        start = out[-1]
    return np.array(out[:n])


def stage_requests(row: OffloadRow, rng: np.random.Generator, scale: float = 1.0,
                   stages: int | None = None) -> tuple[list[dict], list[int], list[float]]:
    """The run of ``row``'s configuration as its client sent it (module notes): Mooncake
    trace rows (``timestamp`` ms, lengths, ``hash_ids`` over ``gcd`` of the system prompt
    and question lengths), each request's stage index, and each stage's first send (s).
    ``scale`` < 1 sends that share of each stage's requests (tests); ``stages`` keeps the
    first that many."""
    block = math.gcd(row.system_prompt_tokens, row.question_tokens)
    sys_ids, q_ids = row.system_prompt_tokens // block, row.question_tokens // block
    prompts = row.groups * row.prompts_per_group
    order = rng.permutation(prompts)  # [prompts] prompt k = group k // ppg, question k % ppg
    rates = row.stages[:stages] if stages else row.stages
    trace, stage_of, starts = [], [], []
    at = 0.0
    for s, rate in enumerate(rates):
        n = max(1, int(rate * row.stage_s * scale))
        times = at + _poisson_times(rate, n, rng)  # [n]
        starts.append(float(times[0]))
        for i, t in enumerate(times):
            k = int(order[i % prompts])
            g = k // row.prompts_per_group
            ids = [g * sys_ids + j for j in range(sys_ids)]
            base = row.groups * sys_ids + k * q_ids
            ids += [base + j for j in range(q_ids)]
            trace.append({"timestamp": round(1e3 * float(t), 3),
                          "input_length": row.system_prompt_tokens + row.question_tokens,
                          "output_length": row.output_tokens, "hash_ids": ids})
            stage_of.append(s)
        at = float(times[-1]) + STAGE_GAP_S
    return trace, stage_of, starts


def run_sets(row: OffloadRow, catalog, trace_file: str, block: int, requests: int
             ) -> list[str]:
    """The ``--set`` overrides of the default scenario that replay ``row``'s configuration
    from ``trace_file`` (``requests`` rows, ``hash_ids`` over ``block`` tokens)."""
    from sim.engines import vllm

    if row.framework != "vllm":
        raise UserError(f"{row.path}: line {row.line}: framework: only vLLM's native "
                        f"offload is modelled, got {row.framework!r}")
    blocks = row.gpu_kv_tokens // 16  # vLLM's default block of 16 tokens
    cmd = (f"vllm serve {row.model} --tensor-parallel-size {row.tp} --enable-prefix-caching "
           f"--num-gpu-blocks-override {blocks} --no-async-scheduling")
    if row.kv_offload_gib is not None:
        cmd += f" --kv-offloading-backend native --kv-offloading-size {row.kv_offload_gib:g}"
    parsed = vllm.parse_vllm_serve(cmd, lambda m: catalog.model(m).id)
    return [*parsed.sets, "models.draft=null", f"deployment.gpu={row.gpu}",
            f"deployment.replicas={row.replicas}", "deployment.router=llm_d",
            f"workload={{arrivals: trace, format: mooncake, file: {trace_file}, "
            f"hash_block_tokens: {block}}}",
            "variants=[{name: none, policy: {kind: none}}]",
            f"run.requests={requests}", "run.horizon_s=null", "run.seed=0"]


def simulate_run(rows: list[OffloadRow], catalog, scale: float = 1.0,
                 stages: int | None = None, seed: int = 0) -> dict[tuple[float, str], float]:
    """Replay the configuration ``rows`` share (one ``run_key``); {(stage rate, metric):
    simulated value} for every stage replayed."""
    from sim.loading import load_scenario, repo_root
    from sim.runner import run_scenario

    row = rows[0]
    if any(run_key(r) != run_key(row) for r in rows):
        raise ValueError("simulate_run: rows of more than one run")
    rng = np.random.default_rng(seed)
    trace, stage_of, _ = stage_requests(row, rng, scale, stages)
    block = math.gcd(row.system_prompt_tokens, row.question_tokens)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "requests.jsonl"
        path.write_text("".join(json.dumps(t) + "\n" for t in trace))
        sc = load_scenario(repo_root() / "scenarios" / "default.yaml",
                           run_sets(row, catalog, str(path), block, len(trace)))
        result = run_scenario(sc, source=f"{row.path}:{row.line}", iteration_rows=False)
    r = result.variants[0].requests.columns
    order = np.argsort(r["id"])
    arrival, first = r["arrival_at"][order], r["first_token_at"][order]
    end, done = r["finished_at"][order], r["finished"][order]
    tokens = (r["prompt_tokens"] + r["emitted_tokens"])[order]
    stage_of = np.array(stage_of)
    rates = row.stages[:stages] if stages else row.stages
    out: dict[tuple[float, str], float] = {}
    for s, rate in enumerate(rates):
        mine = stage_of == s
        if not done[mine].all():
            raise RuntimeError(f"{row.path}: line {row.line}: stage {rate:g}: requests "
                               f"unfinished at the run's end")
        nxt = stage_of == s + 1
        if nxt.any() and end[mine].max() > arrival[nxt].min():
            raise RuntimeError(f"{row.path}: line {row.line}: stage {rate:g} had not "
                               f"drained {STAGE_GAP_S:g} s after its last send")
        out[(rate, "ttft_mean_s")] = float(np.mean(first[mine] - arrival[mine]))
        out[(rate, "e2e_mean_s")] = float(np.mean(end[mine] - arrival[mine]))
        out[(rate, "total_tokens_per_s")] = float(
            tokens[mine].sum() / (end[mine].max() - arrival[mine].min()))
    return out


@dataclass(frozen=True)
class SimulatedOffload:
    """The simulated check of category I: every row, its simulated value and error
    (simulated / measured - 1), the offload-to-GPU-only ratio's error of each cpu_offload
    row with a twin (NaN without), and :func:`offload_summary` of them."""

    rows: list[OffloadRow]
    simulated: np.ndarray
    error: np.ndarray
    ratio_error: np.ndarray
    summary: dict


def _twin(row: OffloadRow, rows: list[OffloadRow]) -> OffloadRow | None:
    """The gpu_only row of ``row``'s stage and metric whose run differs from ``row``'s in
    its configuration and tier alone."""
    def bare(r: OffloadRow) -> tuple:
        return run_key(replace(r, config="gpu_only", kv_offload_gib=None))

    for r in rows:
        if (r.config == "gpu_only" and r.metric == row.metric
                and r.stage_rate == row.stage_rate and bare(r) == bare(row)):
            return r
    return None


def simulate_offload(catalog, rows: list[OffloadRow] | None = None, workers: int = 1,
                     done=None, scale: float = 1.0, stages: int | None = None
                     ) -> SimulatedOffload:
    """Replay every configuration of ``rows`` (``validation_offload.csv``'s by default) on
    ``workers`` processes; ``done(i, n)`` after each."""
    import multiprocessing as mp

    from sim.pool import can_fork, in_processes

    rows = read_offload_rows() if rows is None else rows
    runs: dict[tuple, list[OffloadRow]] = {}
    for r in rows:
        runs.setdefault(run_key(r), []).append(r)
    groups = list(runs.values())
    results: list = [None] * len(groups)

    def keep(i: int, result) -> None:
        results[i] = result
        if done is not None:
            done(sum(x is not None for x in results), len(groups))

    args = [(g, catalog, scale, stages) for g in groups]
    if can_fork(workers, len(groups)):
        in_processes(simulate_run, args, workers, keep, context=mp.get_context("fork"))
    else:
        for i, a in enumerate(args):
            keep(i, simulate_run(*a))
    values = {}
    for g, res in zip(groups, results, strict=True):
        for r in g:
            values[r.line] = res.get((r.stage_rate, r.metric), float("nan"))
    sim = np.array([values[r.line] for r in rows])
    meas = np.array([r.measured for r in rows])
    err = sim / meas - 1.0
    ratio = np.full(len(rows), np.nan)
    index = {r.line: i for i, r in enumerate(rows)}
    for i, r in enumerate(rows):
        twin = _twin(r, rows) if r.config == "cpu_offload" else None
        if twin is not None:
            j = index[twin.line]
            ratio[i] = (sim[i] / sim[j]) / (r.measured / twin.measured) - 1.0
    return SimulatedOffload(rows, sim, err, ratio, offload_summary(rows, err, ratio))


def offload_summary(rows: list[OffloadRow], error: np.ndarray, ratio: np.ndarray) -> dict:
    """Per group (``all``, ``config:<c>``, ``metric:<m>``, ``ratio:<m>``): rows, held-out
    rows, the median |error| held out and on the fit half, the median signed error held out
    and over all the group's rows (NaN rows, a stage not replayed, left out)."""
    test = np.array([r.split == "test" for r in rows], dtype=bool)
    groups: dict[str, tuple[np.ndarray, np.ndarray]] = {
        "all": (np.ones(len(rows), dtype=bool), error)}
    for c in CONFIGS:
        groups[f"config:{c}"] = (np.array([r.config == c for r in rows]), error)
    for m in METRICS:
        groups[f"metric:{m}"] = (np.array([r.metric == m for r in rows]), error)
    for m in METRICS:
        groups[f"ratio:{m}"] = (np.array([r.metric == m for r in rows]) & ~np.isnan(ratio),
                                ratio)
    out = {}
    for name, (mine, err) in groups.items():
        mine = mine & ~np.isnan(err)
        out[name] = {"rows": int(mine.sum()), "test_rows": int((mine & test).sum()),
                     "test": _median(np.abs(err[mine & test])),
                     "fit": _median(np.abs(err[mine & ~test])),
                     "signed_test": _median(err[mine & test]),
                     "signed_all": _median(err[mine])}
    return out


def _median(e: np.ndarray) -> float | None:
    return float(np.median(e)) if e.size else None
