"""Drafters: who proposes the guesses, what proposing costs, and what it holds in memory.

- ``draft_model``: a separate catalog model drafting autoregressively (one pass per level).
- ``eagle`` / ``eagle3``: a head of the target's width on the target's hidden states (EAGLE,
  EAGLE-3: Li et al. 2024/2025): ``layers`` decoder layers (1 in the published heads), an
  input projection fusing 2 (EAGLE) or 3 (EAGLE-3, low/mid/high layer features) hidden
  states into one, and an lm_head -- the target's (EAGLE) or its own over a reduced draft
  vocabulary (EAGLE-3: 32000 rows for the Llama-3 heads, sgl-project/SpecForge
  configs/llama3-70B-ealge3.json @82b62f6e). The embedding is the target's (not stored
  again). It drafts autoregressively (one pass per level) and caches KV for its own layers.
- ``mtp``: the target's own multi-token-prediction module (DeepSeek-V3's next-n layer),
  reused for every draft position as vLLM does: one decoder layer of the target's shape
  plus the 2h -> h projection, sharing embedding and lm_head. For a DeepSeek target that
  layer is an MLA + MoE block (the checkpoint's layer 61: 256 routed experts and a shared
  one), run on the target's GPUs with its tensor and expert parallelism (vLLM's MTP
  drafter takes the target's parallel config), not replicated per GPU.
- ``medusa``: Medusa heads (Cai et al. 2024) on the target's last hidden state: ``heads``
  heads of ``layers`` residual blocks and an lm_head each (``hardware.models``, model_type
  medusa), all run in *one* pass that proposes every position of a chain or of a Cartesian
  tree ⟨k1..km⟩ (head i's top-k_i), verified by the target in one tree pass. No attention,
  no KV and no lookahead slots (vLLM reserves them for EAGLE-type and draft models only,
  vllm/v1/core/sched/scheduler.py); a copy on each of the target's GPUs, the batch's rows
  split over them (vLLM runs the heads at the target's TP, its lm_heads split over it, on
  the last pipeline stage: at tp = pp = 1 the same).
- ``ngram`` / ``suffix``: prompt lookup / suffix-tree matching on the CPU; no GPU pass, no
  draft KV, no lookahead slots (vLLM reserves them only for model-based drafters). On each
  step a sequence finds a match with probability ``proposal_rate`` (otherwise it verifies
  just its last token); ``cpu_s_per_seq`` is the CPU time per sequence per step, 0 unless
  set (not measured here).

- ``dflash``: a block drafter conditioned on the target's hidden states (DFlash, Chen et al.
  2026, arXiv 2602.06036; vLLM ``dflash``, SGLang ``DFLASH``): ``layers`` decoder layers of
  the target's shape (5 in the published drafters) that propose all K draft positions in
  *one* pass over K + 1 queries per request -- the bonus token and a mask token per position
  (vllm/v1/spec_decode/dflash.py, ``num_query_per_req = 1 + num_speculative_tokens``;
  SGLang's ``[bs, block_size]`` with block_size = K + 1) -- each attending its request's
  context and the whole block (non-causal). The context's draft KV is a projection of the
  target's hidden states (``precompute_and_store_context_kv``), not a draft forward pass;
  the fusing projection's weights are priced with the layers, its per-context-token work is
  not. No input slots beyond the target's (``max_num_new_slots_for_drafting`` 0: "DFlash
  drafts in a separate query pass"), K + 1 lookahead slots (``num_lookahead_tokens``: the
  bonus query and one per draft token), async scheduling (V1 runner), and, unlike EAGLE,
  no trailing-block drop in the prefix cache (``needs_eagle_block_drop``: its draft KV
  depends on the target's hidden state alone), so not ``eagle_type`` here.

A head's extra input projection and wider attention input are priced as extra MLP width of
the same parameter count (same weight bytes and FLOPs per token; the GEMM shapes differ).
"""

from __future__ import annotations

from dataclasses import dataclass

from hardware.catalog import DRAFT_METHODS
from hardware.heads import head_config, medusa_config
from specdec.errors import UserError

__all__ = ["METHODS", "TRAITS", "MethodTraits", "CPU_METHODS", "INPUT_SLOTS", "EAGLE_TYPE",
           "ASYNC_METHODS", "Drafter", "engine_names",
           "head_config", "input_slots", "lookahead_slots", "medusa_config"]

METHODS = DRAFT_METHODS  # (hardware.catalog names them once)


@dataclass(frozen=True)
class MethodTraits:
    """What a drafting method is to vLLM's scheduler (0.33), one record per method.

    - ``input_slots``: slots each scheduled request's drafter takes from the step's token
      budget beside its tokens (vllm/config/speculative.py,
      ``SpeculativeConfig.max_num_new_slots_for_drafting``: 1 for draft_model, which feeds
      the draft one more token than the target; K for PARD and K - 1 for parallel EAGLE,
      which SpecSim does not model; 0 for the others, DFlash included);
    - ``extra_lookahead``: KV lookahead slots beyond one per draft token
      (``VllmConfig.num_lookahead_tokens``: 1 for DFlash's bonus query);
    - ``eagle_type``: vLLM's ``use_eagle()`` (EAGLE, EAGLE-3, MTP), whose prefix-cache
      block hashes cover the next token too (``sim.prefix_cache``);
    - ``on_cpu``: proposes on the host, no GPU pass (n-gram, suffix);
    - ``async_ok``: vLLM's V1 model runner schedules it asynchronously
      (``VllmConfig.__post_init__`` in vllm/config/vllm.py: EAGLE types incl. MTP, GPU
      n-gram, draft models and DFlash; not a host n-gram or suffix proposer, nor Medusa;
      ``sim.async_scheduling``);
    - ``vllm``, ``sglang``, ``trtllm``: the engines' names for it on their command lines
      (vLLM's ``--speculative-config`` ``method``, SGLang's ``--speculative-algorithm``,
      TensorRT-LLM's ``decoding_type``), the first the one SpecSim writes; none: the engine
      has no such method. The engines' parsers and writers read them (``engine_names``).
    """

    input_slots: int = 0
    extra_lookahead: int = 0
    eagle_type: bool = False
    on_cpu: bool = False
    async_ok: bool = True
    vllm: tuple[str, ...] = ()
    sglang: tuple[str, ...] = ()
    trtllm: tuple[str, ...] = ()


TRAITS = {
    "draft_model": MethodTraits(input_slots=1, vllm=("draft_model",), sglang=("STANDALONE",),
                                trtllm=("DraftTarget",)),
    "eagle": MethodTraits(eagle_type=True, vllm=("eagle",), sglang=("EAGLE",)),
    # TensorRT-LLM's PyTorch backend takes Eagle as Eagle3's alias
    "eagle3": MethodTraits(eagle_type=True, vllm=("eagle3",), sglang=("EAGLE3",),
                           trtllm=("Eagle3", "Eagle")),
    "mtp": MethodTraits(eagle_type=True, vllm=("mtp", "deepseek_mtp"), sglang=("NEXTN",),
                        trtllm=("MTP",)),
    "medusa": MethodTraits(async_ok=False, vllm=("medusa",)),
    "ngram": MethodTraits(on_cpu=True, async_ok=False, vllm=("ngram",), sglang=("NGRAM",),
                          trtllm=("NGram",)),
    "suffix": MethodTraits(on_cpu=True, async_ok=False, vllm=("suffix",)),
    "dflash": MethodTraits(extra_lookahead=1, vllm=("dflash",), sglang=("DFLASH",)),
}
if tuple(TRAITS) != METHODS:
    raise ImportError("sim/drafters.py: TRAITS must name hardware.catalog.DRAFT_METHODS, "
                      "in its order")
# the methods with each trait, for the callers that ask by name
INPUT_SLOTS = {m: t.input_slots for m, t in TRAITS.items() if t.input_slots}
EAGLE_TYPE = tuple(m for m, t in TRAITS.items() if t.eagle_type)
CPU_METHODS = tuple(m for m, t in TRAITS.items() if t.on_cpu)
ASYNC_METHODS = tuple(m for m, t in TRAITS.items() if t.async_ok)


def engine_names(engine: str) -> dict[str, str]:
    """{``engine``'s name for a drafting method: SpecSim's method} for ``engine`` vllm,
    sglang or trtllm (``MethodTraits``' names), in ``TRAITS``' order."""
    return {name: m for m, t in TRAITS.items() for name in getattr(t, engine)}


def input_slots(drafter, uses_draft: bool) -> int:
    """The input slots each scheduled request's drafter takes beside its tokens
    (``TRAITS``; ``drafter`` None: a plain draft model); none without speculation."""
    method = "draft_model" if drafter is None else drafter.method
    return TRAITS[method].input_slots if uses_draft else 0


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

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise UserError(f"method: must be one of {', '.join(METHODS)}, got {self.method!r}")
