"""What both schedulers run and how their steps are compared: the workload, the acceptance
table both sides read, the prompt token ids that give vLLM the blocks SpecSim's keys
describe, and the per-step record.

The time line both sides follow: an iteration that schedules anything takes one second, an
iteration that schedules nothing (it only preempted) takes none, and an idle engine wakes at
the next arrival; a request is seen by the first step that starts at or after its arrival.
Arrival times are chosen so that no step starts at the very instant a request arrives (where
SimPy's order of the two events would decide): random ones are whole seconds plus a
fraction no other request has.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

BLOCK = 16  # tokens per KV block, both sides
EOS = 2  # never emitted: requests stop at max_tokens
OUT_TOKEN, DRAFT_TOKEN = 7, 9  # what the fake model samples and drafts (not EOS)
OWN_BASE = 100_000  # a request's own prompt tokens start here; shared ones lie below
VOCAB = 1_000_000  # the fake model's vocabulary: every token id above is in it


@dataclass(frozen=True)
class Workload:
    """One conformance case: requests (arrival, prompt, output tokens, and with prefix
    caching the ids of their shared prompt blocks, one per ``BLOCK`` tokens) and the engine
    they run on. ``blocks`` is vLLM's ``num_blocks`` (one is its null block: SpecSim gets
    ``blocks - 1``); ``chunk`` is ``long_prefill_token_threshold`` (0: off); ``k`` draft
    tokens per step with ``method`` ``eagle`` or ``draft_model`` (``k`` = 0: none), or the
    K of ``ladder`` for the requests the step before scheduled."""

    name: str
    arrival_at: tuple[float, ...]
    prompt: tuple[int, ...]
    output: tuple[int, ...]
    blocks: int = 10_000
    max_num_seqs: int = 8
    max_batched_tokens: int = 64
    chunked: bool = True
    chunk: int = 0
    k: int = 0
    method: str | None = None
    prefix_caching: bool = False
    hash_ids: tuple | None = None
    seed: int = 0
    max_model_len: int = 4096
    lookahead_hashes: bool = True  # False: vLLM's disable_lookahead_block_hashes (and no
    # EAGLE block drop either): plain block hashes, as without speculation
    async_scheduling: bool = False  # vLLM's async scheduling (its default where supported)
    # vLLM's num_speculative_tokens_per_batch_size: rows (first size, last size, K), K at
    # most ``k``; None: ``k`` drafts every step
    ladder: tuple | None = None
    # > 0: a P/D decode replica (SpecSim's sim.disagg.DecodeReplica, vLLM with a pull KV
    # connector): each request's prompt was prefilled elsewhere, its arrival is its
    # hand-off, and its KV loads this many seconds from the step that holds blocks for it
    remote_s: float = 0.0
    # > 0: a CPU tier of this many blocks below the prefix cache (SpecSim's sim.offload,
    # vLLM's OffloadingConnector with as many CPU chunks of one block): blocks the GPU
    # evicts hit there, and load asynchronously, ``load_s`` seconds each, one after the
    # other, from the step that holds blocks for them (sync scheduling, prefix caching)
    cpu_blocks: int = 0
    load_s: float = 1.37
    # vLLM's kv_connector_extra_config offload_prompt_only (its default: True, only full
    # prompt blocks are stored); False stores committed output blocks too, as SpecSim does
    offload_prompt_only: bool = True

    def __post_init__(self) -> None:
        n = len(self.arrival_at)
        if not (len(self.prompt) == len(self.output) == n):
            raise ValueError(f"{self.name}: arrival_at, prompt and output differ in length")
        if list(self.arrival_at) != sorted(self.arrival_at):
            raise ValueError(f"{self.name}: arrivals must be sorted")
        if max(self.prompt) >= 1000 or n > 800:  # the token ids prompt_ids gives
            raise ValueError(f"{self.name}: at most 800 requests of under 1000 tokens")
        if self.k and self.method not in ("eagle", "draft_model"):
            raise ValueError(f"{self.name}: k > 0 needs method eagle or draft_model")
        if self.ladder is not None and not self.k:
            raise ValueError(f"{self.name}: a ladder needs k > 0")
        if self.cpu_blocks and (not self.prefix_caching or self.async_scheduling
                                or self.remote_s):
            raise ValueError(f"{self.name}: a CPU tier needs prefix caching and sync "
                             "scheduling, without a remote prefill")

    @property
    def n(self) -> int:
        return len(self.arrival_at)

    def accepted(self) -> np.ndarray:
        """int64 [n, max output]: drafts accepted at (request, output tokens so far), at
        most ``k`` (a verify with fewer drafts accepts at most those): one seeded table,
        read by both sides."""
        rng = np.random.default_rng([self.seed, 1234])
        return rng.integers(0, self.k + 1, size=(self.n, max(self.output) + 1))

    def prompt_ids(self, rid: int) -> list[int]:
        """Request ``rid``'s prompt token ids: a shared block's tokens are a function of
        its id and of the ids before it (as SpecSim's chained keys are), every other token
        is the request's own."""
        interned: dict[tuple, int] = {}
        for ids in self.hash_ids or ():
            for j in range(len(ids or ())):
                interned.setdefault(tuple(ids[: j + 1]), len(interned))
        p = self.prompt[rid]
        ids = tuple(self.hash_ids[rid] or ()) if self.hash_ids is not None else ()
        out = []
        for j in range(min(len(ids), p // BLOCK)):
            q = interned[ids[: j + 1]]
            out.extend(10 + q * BLOCK + t for t in range(BLOCK))
        out.extend(OWN_BASE + rid * 1000 + t for t in range(len(out), p))
        return out


def arrivals(rng: np.random.Generator, n: int, span: int) -> tuple[float, ...]:
    """``n`` sorted arrival times in [0, span): whole seconds plus a fraction of their own."""
    whole = np.sort(rng.integers(0, span, n))
    frac = (np.arange(n) + 1) / (2 * n + 2) + 0.25  # distinct, in (0.25, 0.75)
    return tuple(sorted(float(w + f) for w, f in zip(whole, rng.permutation(frac), strict=True)))


@dataclass(frozen=True)
class Step:
    """What one step scheduled: tokens per request, draft tokens per request (those with
    any; placeholder drafts included), the requests it preempted; ``at``: when it started,
    or on SpecSim's side under async scheduling when it was scheduled, a step sooner (not
    compared)."""

    tokens: dict[int, int]
    drafts: dict[int, int]
    preempted: tuple[int, ...]
    at: float = field(default=0.0, compare=False)

    def key(self) -> tuple:
        return (sorted(self.tokens.items()), sorted(self.drafts.items()),
                tuple(sorted(self.preempted)))

    def show(self) -> str:
        """One line: ``r<id>:<tokens>(+<drafts>)`` each, then who was preempted."""
        parts = [f"r{r}:{t}" + (f"(+{self.drafts[r]})" if r in self.drafts else "")
                 for r, t in sorted(self.tokens.items())]
        if self.preempted:
            parts.append("preempted " + ",".join(f"r{r}" for r in sorted(self.preempted)))
        return f"t={self.at:g} " + (" ".join(parts) or "nothing")


@dataclass(frozen=True)
class Agreement:
    """How two step sequences compare: steps compared (the longer's count), identical ones,
    preemptions on each side and the first differing step (None: all identical)."""

    name: str
    steps: int
    identical: int
    preempted_vllm: int
    preempted_specsim: int
    first_diff: int | None
    vllm_step: str = ""
    specsim_step: str = ""

    @property
    def percent(self) -> float:
        return 100.0 * self.identical / self.steps if self.steps else 100.0


def compare(name: str, vllm: list[Step], specsim: list[Step]) -> Agreement:
    """Step-by-step agreement of vLLM's steps with SpecSim's (a step one side lacks differs)."""
    same = [a.key() == b.key() for a, b in zip(vllm, specsim, strict=False)]
    steps = max(len(vllm), len(specsim))
    first = next((i for i, ok in enumerate(same) if not ok), None)
    if first is None and len(vllm) != len(specsim):
        first = len(same)
    shown = ("", "")
    if first is not None:
        shown = tuple(s[first].show() if first < len(s) else "(no step)"
                      for s in (vllm, specsim))
    return Agreement(name, steps, sum(same), sum(len(s.preempted) for s in vllm),
                     sum(len(s.preempted) for s in specsim), first, *shown)


def format_table(rows: list[Agreement]) -> str:
    """A Markdown table of ``rows``, then each first difference."""
    out = ["| workload | steps | identical | % | preemptions vLLM | preemptions SpecSim "
           "| first difference |", "|---|---:|---:|---:|---:|---:|---|"]
    for a in rows:
        first = "" if a.first_diff is None else f"step {a.first_diff}"
        out.append(f"| {a.name} | {a.steps} | {a.identical} | {a.percent:.1f} "
                   f"| {a.preempted_vllm} | {a.preempted_specsim} | {first} |")
    return "\n".join(out)


def format_differences(rows: list[Agreement]) -> str:
    """Each differing workload's first differing step, vLLM's and SpecSim's."""
    out = []
    for a in rows:
        if a.first_diff is not None:
            out += [f"{a.name}: step {a.first_diff}", f"  vLLM:    {a.vllm_step}",
                    f"  SpecSim: {a.specsim_step}"]
    return "\n".join(out)
