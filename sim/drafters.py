"""Drafters: who proposes the guesses, what proposing costs, and what it holds in memory.

Each drafting method is a module of ``sim.methods`` (``draft_model``, ``eagle`` /
``eagle3``, ``mtp``, ``medusa``, ``ngram`` / ``suffix``, ``dflash``: its docstring says
what it drafts with and how it is priced), which registers its config kind, its
defaults and its traits (``MethodTraits``); here is the engine's view of a built
drafter (``Drafter``) and what the scheduler asks of the methods' traits.

A head's extra input projection and wider attention input are priced as extra MLP width of
the same parameter count (same weight bytes and FLOPs per token; the GEMM shapes differ).
"""

from __future__ import annotations

from dataclasses import dataclass

from hardware.catalog import DRAFT_METHODS
from hardware.heads import head_config, medusa_config
from sim.methods import TRAITS, MethodTraits
from specdec.errors import UserError

__all__ = ["METHODS", "TRAITS", "MethodTraits", "CPU_METHODS", "INPUT_SLOTS", "EAGLE_TYPE",
           "ASYNC_METHODS", "Drafter", "engine_names",
           "head_config", "input_slots", "lookahead_slots", "medusa_config"]

METHODS = DRAFT_METHODS  # (hardware.catalog names them once)
# the methods with each trait, for the callers that ask by name
INPUT_SLOTS = {m: t.input_slots for m, t in TRAITS.items() if t.input_slots}
EAGLE_TYPE = tuple(m for m, t in TRAITS.items() if t.eagle_type)
CPU_METHODS = tuple(m for m, t in TRAITS.items() if t.on_cpu)
ASYNC_METHODS = tuple(m for m, t in TRAITS.items() if t.async_ok)


def engine_names(engine: str) -> dict[str, str]:
    """{``engine``'s name for a drafting method: SpecSim's method} for ``engine`` vllm,
    sglang or trtllm (``MethodTraits``' names), in ``TRAITS``' order."""
    return {name: m for m, t in TRAITS.items() for name in getattr(t, engine)}


def input_slots(drafter, uses_draft: bool, k: int = 0) -> int:
    """The input slots each scheduled request's drafter takes beside its tokens, vLLM's
    ``SpeculativeConfig.max_num_new_slots_for_drafting`` (``TRAITS``; ``drafter`` None: a
    plain draft model): the method's ``input_slots``, or with a ``parallel`` drafter ``k``
    (vLLM's ``num_speculative_tokens``, the policy's deepest draft) plus its
    ``parallel_slots`` (PARD K, P-EAGLE K - 1); none without speculation."""
    if not uses_draft:
        return 0
    method = "draft_model" if drafter is None else drafter.method
    if drafter is not None and drafter.parallel:
        return max(int(k) + TRAITS[method].parallel_slots, 0)
    return TRAITS[method].input_slots


def lookahead_slots(drafter, policy) -> int:
    """KV slots a scheduled request reserves for its next verify's drafts (vLLM's
    ``num_lookahead_tokens``): the policy's most draft tokens, where a model drafts them
    (``drafter`` None, a plain draft model, or one with ``lookahead``), plus the method's
    ``extra_lookahead``; else 0."""
    reserve = policy.uses_draft and (drafter is None or drafter.lookahead)
    if not reserve:
        return 0
    extra = 0 if drafter is None else TRAITS[drafter.method].extra_lookahead
    return int(policy.max_nodes) + extra


@dataclass(frozen=True)
class Drafter:
    """The engine's view of a drafter: its GPU model (``setup``, a ``hardware.DraftSetup``,
    None for CPU drafting) and how it behaves."""

    method: str
    setup: object | None = None
    lookahead: bool = True  # reserves KV lookahead slots for the next verify
    proposal_rate: float | None = None  # n-gram/suffix: P(a sequence gets a proposal)
    cpu_s_per_seq: float = 0.0  # CPU drafting time per sequence per step
    parallel: bool = False  # vLLM's parallel_drafting (PARD, P-EAGLE): K positions, one pass

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise UserError(f"method: must be one of {', '.join(METHODS)}, got {self.method!r}")
        if self.parallel and TRAITS[self.method].parallel_slots is None:
            raise UserError(f"parallel: {self.method} does not draft in parallel here (only "
                            "draft_model, PARD, and eagle / eagle3, P-EAGLE)")
