"""Drafter kinds: who proposes the guesses (``variants[i].drafter``, by ``method``).

A variant without ``drafter`` drafts with ``models.draft`` by ``models.method``. Each kind
names its method and knobs and builds the engine's ``sim.drafters.Drafter`` with
``build(target, draft_model, make_cost, placement)``: ``target`` the target's cost model,
``draft_model`` the catalog ``ModelSpec`` of ``models.draft`` (or None),
``make_cost(model_spec, tp, ep=1)`` a cost model for a drafting model on the deployment's GPU,
``placement`` the deployment's draft placement. vLLM's names in comments.
"""

from __future__ import annotations

from typing import Literal

from sim.kinds.base import Gamma, Gpus, NonNegSeconds, Prob, Strict, Vocab, kind_union


def _setup(cost, target, placement: str):
    from hardware.draft import DraftSetup

    if placement == "separate":
        return DraftSetup(cost=cost, placement="separate")
    return DraftSetup.colocated_with(cost, target)


class DraftModelDrafter(Strict):
    """A separate, smaller model drafting autoregressively (vLLM ``method: draft_model``)."""

    method: Literal["draft_model"]
    model: str | None = None  # a catalog id; null = models.draft
    tp: Gpus = 1  # vLLM's draft_tensor_parallel_size (1 = one copy per target GPU)

    def build(self, target, draft_model, make_cost, placement: str):
        """A ``Drafter`` of the catalog model (``model`` or ``models.draft``)."""
        from sim.drafters import Drafter

        spec = make_cost.catalog.model(self.model) if self.model else draft_model
        if spec is None:
            raise ValueError("model: give a draft model (here or as models.draft)")
        spec.servable("model")
        cost = make_cost(spec, self.tp)
        if self.tp > 1:
            from hardware.draft import DraftSetup

            return Drafter("draft_model", DraftSetup(cost=cost, placement=placement))
        return Drafter("draft_model", _setup(cost, target, placement))


class EagleDrafter(Strict):
    """An EAGLE (``eagle``) or EAGLE-3 (``eagle3``) head on the target's hidden states:
    ``layers`` decoder layers of the target's shape; EAGLE-3's lm_head over a draft
    vocabulary of ``draft_vocab`` tokens (32000 in the published Llama-3 heads)."""

    method: Literal["eagle", "eagle3"]
    layers: Gamma = 1
    draft_vocab: Vocab | None = None  # eagle3 only; null = 32000 (eagle: the target's)

    def build(self, target, draft_model, make_cost, placement: str):
        """A ``Drafter`` pricing the head as a one-layer model (``sim.drafters``)."""
        from hardware.catalog import ModelSpec
        from sim.drafters import Drafter, head_config

        if self.method == "eagle" and self.draft_vocab is not None:
            raise ValueError("draft_vocab: only EAGLE-3 heads have their own vocabulary")
        vocab = (self.draft_vocab or 32000) if self.method == "eagle3" else None
        cfg = head_config(target.dep.model.config, self.method, self.layers, vocab)
        spec = ModelSpec(id=f"{target.dep.model.id}-{self.method}", config=cfg,
                         source=f"{self.method} head of {target.dep.model.id}")
        return Drafter(self.method, _setup(make_cost(spec, 1), target, placement))


class MtpDrafter(Strict):
    """The target's own multi-token-prediction module (vLLM ``mtp``, DeepSeek-V3's next-n
    layer, reused for every draft position)."""

    method: Literal["mtp"]
    layers: Gamma = 1  # num_nextn_predict_layers

    def build(self, target, draft_model, make_cost, placement: str):
        """A ``Drafter`` pricing the module as one decoder layer of the target's shape."""
        from hardware.catalog import ModelSpec
        from sim.drafters import Drafter, head_config

        cfg = head_config(target.dep.model.config, "mtp", self.layers)
        spec = ModelSpec(id=f"{target.dep.model.id}-mtp", config=cfg,
                         source=f"MTP module of {target.dep.model.id}")
        t = target.dep
        if cfg.routed_experts and placement == "colocated":
            # an MoE module (DeepSeek): sharded like the target, one copy (sim.drafters)
            from hardware.draft import DraftSetup

            return Drafter("mtp", DraftSetup(cost=make_cost(spec, t.tp, t.ep),
                                             placement="colocated"))
        return Drafter("mtp", _setup(make_cost(spec, 1), target, placement))


class MedusaDrafter(Strict):
    """Medusa heads on the target's last hidden state (vLLM ``medusa``): ``heads`` heads
    (the deepest draft they can propose) of ``layers`` residual blocks each, all in one
    pass; ``draft_vocab`` is vLLM's ``truncated_vocab_size`` (null: the target's)."""

    method: Literal["medusa"]
    heads: Gamma = 5  # vLLM's MedusaConfig default, and FasterDecoding's Vicuna heads
    layers: Gamma = 1  # residual blocks per head (num_hidden_layers / medusa_num_layers)
    draft_vocab: Vocab | None = None

    def build(self, target, draft_model, make_cost, placement: str):
        """A ``Drafter`` pricing the heads as one attention-free pass (``sim.drafters``)."""
        from hardware.catalog import ModelSpec
        from hardware.draft import DraftSetup
        from sim.drafters import Drafter, medusa_config

        if placement != "colocated":
            raise ValueError("medusa: the heads read the target's hidden states, so they run "
                             "on its GPUs (deployment.draft_placement colocated)")
        vocab = target.dep.model.config.vocab_size
        if self.draft_vocab is not None and self.draft_vocab > vocab:
            raise ValueError(f"draft_vocab: {self.draft_vocab} exceeds the target's vocab_size "
                             f"{vocab} (vLLM's truncated_vocab_size keeps a subset of it)")
        cfg = medusa_config(target.dep.model.config, self.heads, self.layers, self.draft_vocab)
        spec = ModelSpec(id=f"{target.dep.model.id}-medusa", config=cfg,
                         source=f"{self.heads} Medusa heads of {target.dep.model.id}")
        setup = DraftSetup.colocated_with(make_cost(spec, 1), target, one_pass=True)
        return Drafter("medusa", setup, lookahead=False)


class DFlashDrafter(Strict):
    """A block drafter on the target's hidden states (vLLM ``dflash``, SGLang ``DFLASH``):
    ``layers`` decoder layers of the target's shape and the target's lm_head, proposing every
    draft position in one pass of K + 1 queries per request; ``target_layers`` hidden states
    fused into its context (``sim.drafters``)."""

    method: Literal["dflash"]
    # z-lab's drafters: 5 layers, 5 fused target layers (github z-lab/dflash
    # tests/fixtures/dflash2-config.json @0a7587c04af47b56024ef80f44c0926e795a540b:
    # num_hidden_layers 5, dflash_config.target_layer_ids of 5; z-lab/dflash issue #11 on
    # z-lab/Qwen3-8B-DFlash-b16: "the number of layers (currently 5)")
    layers: Gamma = 5  # drafter decoder layers (z-lab's drafters: 5)
    target_layers: Gamma = 5  # target hidden states fused into its context (z-lab's: 5)

    def build(self, target, draft_model, make_cost, placement: str):
        """A ``Drafter`` pricing the block pass (``sim.draft_pricing``)."""
        from hardware.catalog import ModelSpec
        from hardware.draft import DraftSetup
        from sim.drafters import Drafter, head_config

        if placement != "colocated":
            raise ValueError("dflash: the drafter reads the target's hidden states, so it "
                             "runs on its GPUs (deployment.draft_placement colocated)")
        c = target.dep.model.config
        cfg = head_config(c, "eagle", self.layers)  # the target's layer shape and lm_head
        # the fc fusing target_layers hidden states (target_layers x h -> h), as extra MLP
        # width over the layers (same weight bytes; its FLOPs counted per query, not per
        # context token)
        h = c.hidden_size
        fc = self.target_layers * h * h
        cfg = cfg.model_copy(update={
            "intermediate_size": c.intermediate_size + round(fc / (3 * h * self.layers))})
        spec = ModelSpec(id=f"{target.dep.model.id}-dflash", config=cfg,
                         source=f"{self.layers}-layer DFlash drafter of {target.dep.model.id}")
        setup = DraftSetup.colocated_with(make_cost(spec, 1), target, block=True)
        return Drafter("dflash", setup)


class LookupDrafter(Strict):
    """CPU drafting by matching: prompt lookup / n-gram (vLLM ``ngram``, its
    ``prompt_lookup_min/max``) or suffix decoding (``suffix``)."""

    method: Literal["ngram", "suffix"]
    # P(a sequence finds a match on a step); null = the acceptance preset's proposal_rate
    proposal_rate: Prob | None = None
    cpu_s_per_seq: NonNegSeconds = 0.0  # CPU seconds per sequence per step (not measured: 0)

    def build(self, target, draft_model, make_cost, placement: str):
        """A ``Drafter`` with no GPU model."""
        from sim.drafters import Drafter

        return Drafter(self.method, None, lookahead=False, proposal_rate=self.proposal_rate,
                       cpu_s_per_seq=self.cpu_s_per_seq)


DRAFTER_KINDS = (DraftModelDrafter, EagleDrafter, MtpDrafter, MedusaDrafter, LookupDrafter,
                 DFlashDrafter)
DrafterCfg = kind_union(DRAFTER_KINDS, key="method")
