"""The scenario schema: frozen, typed, validated once at load (pydantic).

A scenario file is a small YAML override over these documented defaults. Sections:
``models`` (target/draft pair), ``deployment`` (GPU, parallelism, bits, replicas, router),
``scheduler`` (batching limits), ``workload`` (arrivals and lengths), ``acceptance`` (how
drafts are accepted), ``variants`` (speculation policies run side by side on the same
arrivals), ``run`` (request count or horizon, seed) and ``slo``. Loading, ``--set``
overrides and the one-line error messages live in ``sim.loading``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Pos = Annotated[float, Field(gt=0)]
PosInt = Annotated[int, Field(ge=1)]
Prob = Annotated[float, Field(ge=0, le=1)]


class Strict(BaseModel):
    """Frozen, unknown keys are errors (a typo must not be silently ignored), and types are
    strict: a bool is not a number (``rate_per_s: true`` is not 1.0), a string is neither
    a number nor a bool (``chunked_prefill: "yes"`` is not true). Integers are accepted
    where a float is expected (YAML writes ``rate_per_s: 4``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class Models(Strict):
    """The target and its draft (catalog ids, see ``specsim hw``)."""

    target: str = "llama-3-8b"
    draft: str | None = "llama-3.2-1b"


class Deployment(Strict):
    """Hardware and parallelism of each replica."""

    gpu: str = "h100"
    tp: PosInt = 1
    pp: PosInt = 1
    weight_bits: Literal[4, 8, 16] = 16
    # Real deployments often quantise the target and keep the small draft in 16 bits
    # (lecture §7.3: Llama-3-70B at 8 bits + a 16-bit Llama-3.2-1B draft).
    draft_weight_bits: Literal[4, 8, 16] | None = None  # the draft's; null = weight_bits
    kv_bits: Literal[8, 16] = 16
    offload_fraction: Prob = 0.0
    replicas: PosInt = 1
    router: Literal["round_robin", "least_requests", "least_tokens"] = "round_robin"
    # "colocated": a copy of the draft on each of the target's GPUs, sharing their memory
    # (SpecInfer); "separate": the draft on a GPU of its own. Iterations cost draft + verify
    # time either way (drafting and verifying depend on each other).
    draft_placement: Literal["colocated", "separate"] = "colocated"
    catalog: str | None = None  # an extra catalog YAML file (GPUs, links, models)


class Scheduler(Strict):
    """Continuous batching limits, as vLLM names them."""

    max_num_seqs: PosInt = 256
    max_batched_tokens: PosInt = 8192
    chunked_prefill: bool = True
    chunk_tokens: PosInt = 512
    block_size: PosInt = 16
    # vLLM's --num-gpu-blocks-override: a smaller KV pool per replica than memory allows
    # (null = all the memory left after the weights); more than fits is refused.
    num_gpu_blocks_override: PosInt | None = None

    @model_validator(mode="after")
    def _chunk_fits(self):
        if self.chunked_prefill and self.chunk_tokens > self.max_batched_tokens:
            raise ValueError(
                f"chunk_tokens: must be <= max_batched_tokens ({self.max_batched_tokens}),"
                f" got {self.chunk_tokens}"
            )
        return self


class FixedLen(Strict):
    """Every request has exactly ``tokens`` tokens."""

    kind: Literal["fixed"]
    tokens: PosInt


class UniformLen(Strict):
    """Integer token counts uniform on [low, high]."""

    kind: Literal["uniform"]
    low: PosInt
    high: PosInt


class LogNormalLen(Strict):
    """ceil of a lognormal: give ``median_tokens`` or ``mean_tokens``; ``max_tokens`` bounds
    it (draws above are resampled, see ``workloads.LogNormalLength``)."""

    kind: Literal["lognormal"]
    sigma: Pos
    median_tokens: Pos | None = None
    mean_tokens: Pos | None = None
    max_tokens: PosInt | None = None


class EmpiricalLen(Strict):
    """Resampled from a column of a CSV file (path relative to the repository root)."""

    kind: Literal["empirical"]
    file: str
    column: str
    max_tokens: PosInt | None = None


Length = Annotated[FixedLen | UniformLen | LogNormalLen | EmpiricalLen, Field(discriminator="kind")]

# Which workload fields each arrival kind needs (checked by Workload's validator).
ARRIVAL_FIELDS = {
    "poisson": ("rate_per_s",),
    "gamma": ("rate_per_s", "cv"),
    "onoff": ("on_rate_per_s", "off_rate_per_s", "on_mean_s", "off_mean_s"),
    "offline": (),
    "replay": ("file",),
    "closed_loop": ("users", "think_mean_s"),
}


class Workload(Strict):
    """Arrivals (flat fields by ``arrivals`` kind) and prompt/output length distributions.

    ``replay`` reads arrival times *and* lengths from a CSV request trace (``file``);
    ``closed_loop`` has ``users`` that each send a request, wait for it to finish, think
    (gamma with mean ``think_mean_s`` and ``think_cv``; 1 = exponential) and repeat.
    """

    arrivals: Literal["poisson", "gamma", "onoff", "offline", "replay", "closed_loop"] = \
        "poisson"
    rate_per_s: Pos | None = 4.0  # poisson and gamma arrivals
    cv: Pos | None = None
    on_rate_per_s: Pos | None = None
    off_rate_per_s: Annotated[float, Field(ge=0)] | None = None
    on_mean_s: Pos | None = None
    off_mean_s: Pos | None = None
    file: str | None = None
    users: PosInt | None = None
    think_mean_s: Annotated[float, Field(ge=0)] | None = None
    think_cv: Pos = 1.0
    prompt: Length = FixedLen(kind="fixed", tokens=512)
    output: Length = FixedLen(kind="fixed", tokens=256)

    @model_validator(mode="after")
    def _fields_for_kind(self):
        for name in ARRIVAL_FIELDS[self.arrivals]:
            if getattr(self, name) is None:
                raise ValueError(f"{name}: required for arrivals '{self.arrivals}'")
        return self


class IidAcc(Strict):
    """Each guess accepted with probability ``alpha``, independently (lecture §4.1)."""

    kind: Literal["iid"]
    alpha: Prob
    theta: Pos = 1.0  # top-k coverage exponent for tree levels, 1 - (1 - α)^(k^θ)


class PositionalAcc(Strict):
    """Per-guess conditional rates: guess i accepted with ``rates[i]`` given guesses < i were."""

    kind: Literal["positional"]
    rates: list[Prob] = Field(min_length=1)  # α_i for guess i given guesses < i accepted


class MarginalAcc(Strict):
    """vLLM-style marginal rates P(guess i accepted), converted to conditionals."""

    kind: Literal["marginal"]
    marginals: list[Prob] = Field(min_length=1)  # vLLM-style P(guess i accepted)


class BurstyAcc(Strict):
    """Two-state easy/hard stretches with geometric lengths (lecture §4.5)."""

    kind: Literal["bursty"]
    easy_alpha: Prob = 0.95
    hard_alpha: Prob = 0.3
    easy_mean_tokens: Annotated[float, Field(ge=1)] = 32.0
    hard_mean_tokens: Annotated[float, Field(ge=1)] = 32.0


class CalibratedAcc(Strict):
    """i.i.d. α solved so that the shape ``expansion`` yields ``mean_tokens`` per verify."""

    kind: Literal["calibrated"]
    mean_tokens: Annotated[float, Field(ge=1)]  # published tokens per verify for this shape
    expansion: list[PosInt] = Field(min_length=1)  # [1]*γ for a chain


class TraceAcc(Strict):
    """Replay of a recorded acceptance trace (``specsim trace``): greedy ranks or sampling."""

    kind: Literal["trace"]
    file: str  # an acceptance trace (.npz), relative to the repository root or absolute
    mode: Literal["greedy", "sampling"] = "greedy"


SingleAcceptance = Annotated[
    IidAcc | PositionalAcc | MarginalAcc | BurstyAcc | CalibratedAcc | TraceAcc,
    Field(discriminator="kind"),
]


class TaskEntry(Strict):
    """One task of a mix: its weight among requests and its acceptance model."""

    weight: Pos
    acceptance: SingleAcceptance


class TaskMixAcc(Strict):
    """Requests belong to tasks (drawn by weight, or a replay file's task column), each
    with its own acceptance model."""

    kind: Literal["task_mix"]
    tasks: dict[str, TaskEntry] = Field(min_length=1)


Acceptance = Annotated[
    IidAcc | PositionalAcc | MarginalAcc | BurstyAcc | CalibratedAcc | TraceAcc | TaskMixAcc,
    Field(discriminator="kind"),
]


class NonePolicy(Strict):
    """No speculation."""

    kind: Literal["none"]


class FixedPolicy(Strict):
    """A chain of ``gamma`` guesses every iteration (vLLM ``num_speculative_tokens``)."""

    kind: Literal["fixed"]
    gamma: PosInt


class TreePolicyCfg(Strict):
    """An expansion tree ⟨k1..km⟩, or SGLang's ``steps``/``topk`` (top-k at the root)."""

    kind: Literal["tree"]
    expansion: list[PosInt] | None = None
    steps: PosInt | None = None
    topk: PosInt | None = None

    @model_validator(mode="after")
    def _one_form(self):
        if (self.expansion is None) == (self.steps is None or self.topk is None):
            raise ValueError("expansion: give either expansion or both steps and topk")
        return self


class LadderPolicy(Strict):
    """γ by batch size: rows ``[min_batch, max_batch, gamma]``; γ = 0 turns speculation off."""

    kind: Literal["batch_ladder"]
    ladder: list[Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=3, max_length=3)]]


class AdaptivePolicy(Strict):
    """Goodput-maximising γ each iteration (and root width up to ``max_width``)."""

    kind: Literal["adaptive"]
    max_gamma: PosInt = 8
    smoothing: Annotated[float, Field(gt=0, le=1)] = 0.1
    max_width: PosInt = 1  # > 1: also try trees <k,1,...,1> with k up to this
    per_sequence: bool = False  # each sequence its own γ <= the batch's, from its history


Policy = Annotated[
    NonePolicy | FixedPolicy | TreePolicyCfg | LadderPolicy | AdaptivePolicy,
    Field(discriminator="kind"),
]

# Discriminator values, dropped from error locations so that they name real fields.
TAGS = frozenset(
    "fixed uniform lognormal empirical iid positional marginal bursty calibrated trace none "
    "task_mix "
    "tree batch_ladder adaptive".split()
)


class Variant(Strict):
    """One speculation policy to run; all variants share the scenario's arrivals."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.=-]+$")]  # also a folder name
    policy: Policy


class Run(Strict):
    """How long to run: a request count, a horizon in simulated seconds, or both (the
    horizon then cuts the run short; unfinished requests are recorded as such)."""

    requests: PosInt | None = 1000
    horizon_s: Pos | None = None
    seed: Annotated[int, Field(ge=0)] = 0

    @model_validator(mode="after")
    def _some_bound(self):
        if self.requests is None and self.horizon_s is None:
            raise ValueError("requests: give requests, horizon_s, or both")
        return self


class Slo(Strict):
    """Latency targets a capacity plan must meet (percentiles over finished requests)."""

    ttft_p99_s: Pos | None = None
    tpot_p99_s: Pos | None = None


class Scenario(Strict):
    """A whole simulation: everything ``specsim run`` needs."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.=-]+$")] = "scenario"
    models: Models = Models()
    deployment: Deployment = Deployment()
    scheduler: Scheduler = Scheduler()
    workload: Workload = Workload()
    acceptance: Acceptance = IidAcc(kind="iid", alpha=0.8)
    variants: list[Variant] = Field(
        default=[
            Variant(name="none", policy=NonePolicy(kind="none")),
            Variant(name="fixed-g4", policy=FixedPolicy(kind="fixed", gamma=4)),
        ],
        min_length=1,
    )
    run: Run = Run()
    slo: Slo = Slo()

    @model_validator(mode="after")
    def _consistent(self):
        names = [v.name for v in self.variants]
        if len(set(names)) != len(names):
            raise ValueError(f"variants: names must be unique, got {names}")
        if self.workload.arrivals == "closed_loop" and self.run.requests is None:
            raise ValueError("run.requests: required for a closed loop (how many to send)")
        drafting = [v.name for v in self.variants if v.policy.kind != "none"]
        if drafting and self.models.draft is None:
            raise ValueError(f"models.draft: variants {drafting} speculate but no draft is set")
        return self
