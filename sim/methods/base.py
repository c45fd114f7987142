"""What every drafting method's module uses: its traits record and the placement of a
drafting model beside the target (``sim.methods``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MethodTraits:
    """What a drafting method is to vLLM's scheduler (0.33), one record per method.

    - ``input_slots``: slots each scheduled request's drafter takes from the step's token
      budget beside its tokens (vllm/config/speculative.py,
      ``SpeculativeConfig.max_num_new_slots_for_drafting``: 1 for draft_model, which feeds
      the draft one more token than the target; 0 for the others, DFlash included);
    - ``parallel_slots``: where the method also drafts in parallel (vLLM's
      ``parallel_drafting``: all K positions from one pass), its input slots there beyond
      K, the same property: 0 for draft_model (PARD: K, "PARD does not shift the existing
      input, so all K query positions require additional slots"), -1 for EAGLE and EAGLE-3
      (P-EAGLE: K - 1, "the existing query is reused; only masked queries need new
      slots"); None where SpecSim does not model it (``sim.drafters.input_slots``);
    - ``extra_lookahead``: KV lookahead slots beyond one per draft token
      (``VllmConfig.num_lookahead_tokens``: 1 for DFlash's bonus query);
    - ``eagle_type``: vLLM's ``use_eagle()`` (EAGLE, EAGLE-3, MTP), whose prefix-cache
      block hashes cover the next token too (``sim.prefix_cache``);
    - ``on_cpu``: proposes on the host, no GPU pass (n-gram, suffix);
    - ``async_ok``: vLLM's V1 model runner schedules it asynchronously
      (``VllmConfig.__post_init__`` in vllm/config/vllm.py: EAGLE types incl. MTP, GPU
      n-gram, draft models and DFlash; not a host n-gram or suffix proposer, nor Medusa;
      ``sim.async_scheduling``);
    - ``dynamic_k``: vLLM's V1 proposer drafts a K of the step's choosing, so Dynamic SD
      (``num_speculative_tokens_per_batch_size``) varies it (vLLM 0.33.0,
      vllm/config/vllm.py, ``VllmConfig._maybe_disable_dynamic_sd_for_v1``: n-gram, EAGLE,
      EAGLE-3, MTP, draft models and DFlash; any other falls back to the static K);
    - ``vllm``, ``sglang``, ``trtllm``: the engines' names for it on their command lines
      (vLLM's ``--speculative-config`` ``method``, SGLang's ``--speculative-algorithm``,
      TensorRT-LLM's ``decoding_type``), the first the one SpecSim writes; none: the engine
      has no such method. The engines' parsers and writers read them (``engine_names``).
    """

    input_slots: int = 0
    parallel_slots: int | None = None
    extra_lookahead: int = 0
    eagle_type: bool = False
    on_cpu: bool = False
    async_ok: bool = True
    dynamic_k: bool = False
    vllm: tuple[str, ...] = ()
    sglang: tuple[str, ...] = ()
    trtllm: tuple[str, ...] = ()


def colocated_or_separate(cost, target, placement: str, parallel: int | None = None):
    """The ``hardware.DraftSetup`` of a drafting model priced by ``cost``: on a GPU of its
    own (``placement`` separate) or one copy beside each of the target's GPUs; with
    ``parallel`` (0 PARD, 1 P-EAGLE: ``DraftSetup.parallel``) drafting every position in one
    pass."""
    from hardware.draft import DraftSetup

    if placement == "separate":
        return placed(cost, "separate", parallel)
    return DraftSetup.colocated_with(cost, target, block=parallel is not None,
                                     parallel=parallel)


def placed(cost, placement: str, parallel: int | None = None):
    """The ``hardware.DraftSetup`` of a drafting model priced by ``cost`` as placed (one
    copy: on its own GPU, or sharded over its own tensor-parallel group), drafting every
    position in one pass where ``parallel`` is given (``colocated_or_separate``)."""
    from hardware.draft import DraftSetup

    block = parallel is not None
    return DraftSetup(cost=cost, placement=placement, one_pass=block, block=block,
                      parallel=parallel)
