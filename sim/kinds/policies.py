"""Policy kinds: how each iteration picks the draft shape (``variants[i].policy``).

Each kind builds ``make_policy`` with ``build(acceptance)``: a zero-argument callable that
makes one fresh policy object (``sim.policies``) per replica, since adaptive policies hold
state. ``chains_only`` says whether every shape the policy can pick is a single chain, the
case the i.i.d. formula E(α̂, γ) of the run summary applies to.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from sim.controllers import SGLANG_SLOT_DEFAULTS
from sim.kinds.base import MAX_COUNT, MAX_GAMMA, Gamma, PosInt, Shape, Strict, kind_union
from sim.limits import MAX_TREE_NODES, draft_nodes


class NonePolicy(Strict):
    """No speculation."""

    kind: Literal["none"]
    chains_only: ClassVar[bool] = True

    def build(self, acceptance):
        """A factory of ``sim.policies.NoSpeculation``."""
        from sim.policies import NoSpeculation

        return NoSpeculation


class FixedPolicy(Strict):
    """A chain of ``gamma`` guesses every iteration (vLLM ``num_speculative_tokens``)."""

    kind: Literal["fixed"]
    gamma: Gamma
    chains_only: ClassVar[bool] = True

    def build(self, acceptance):
        """A factory of ``sim.policies.FixedGamma``."""
        from sim.policies import FixedGamma

        return lambda: FixedGamma(self.gamma)


class TreePolicyCfg(Strict):
    """An expansion tree ⟨k1..km⟩, or SGLang's ``steps``/``topk`` (top-k at the root)."""

    kind: Literal["tree"]
    expansion: Shape | None = None
    steps: Gamma | None = None
    topk: Gamma | None = None
    chains_only: ClassVar[bool] = False

    @model_validator(mode="after")
    def _one_form(self):
        if (self.expansion is None) == (self.steps is None or self.topk is None):
            raise ValueError("expansion: give either expansion or both steps and topk")
        nodes = draft_nodes(self.shape)
        if nodes > MAX_TREE_NODES:
            raise ValueError(f"expansion: a tree of {nodes} nodes; at most {MAX_TREE_NODES}")
        return self

    @property
    def shape(self) -> list[int]:
        """The widths ⟨k1..km⟩, in either form (SGLang's: top-k at the root)."""
        from sim.policies import sglang_tree

        return list(self.expansion) if self.expansion is not None \
            else sglang_tree(self.steps, self.topk)

    def build(self, acceptance):
        """A factory of ``sim.policies.TreePolicy``."""
        from sim.policies import TreePolicy

        shape = self.shape
        return lambda: TreePolicy(shape)


class LadderPolicy(Strict):
    """γ by batch size (vLLM's ``num_speculative_tokens_per_batch_size``): rows
    ``[min_batch, max_batch, gamma]``, read as vLLM reads them (``sim.policies.BatchLadder``:
    the first from 1, no overlaps, a size between rows takes the row below's γ); γ = 0
    turns speculation off."""

    kind: Literal["batch_ladder"]
    ladder: list[Annotated[list[Annotated[int, Field(ge=0, le=MAX_COUNT)]],
                           Field(min_length=3, max_length=3)]] = Field(min_length=1,
                                                                      max_length=MAX_GAMMA + 1)
    # the batch size: the requests the last step scheduled (vLLM 0.33), running now, or
    # decoding now
    key: Literal["scheduled", "running", "decoding"] = "scheduled"
    sticky: bool = False  # a request once given γ = 0 never speculates again (vLLM v0)
    # vLLM's K: the most drafts a sequence verifies and the KV lookahead slots each
    # scheduled request reserves (null: the ladder's largest γ)
    num_speculative_tokens: Annotated[int, Field(ge=1, le=MAX_GAMMA)] | None = None
    chains_only: ClassVar[bool] = True

    @model_validator(mode="after")
    def _gamma_bound(self):
        for row in self.ladder:
            if row[2] > MAX_GAMMA:
                raise ValueError(f"ladder: gamma {row[2]} in {row}: at most {MAX_GAMMA}")
        return self

    def build(self, acceptance):
        """A factory of ``sim.policies.BatchLadder`` (its rows checked now, at build time)."""
        from sim.policies import BatchLadder

        def make():
            return BatchLadder(self.ladder, self.key, self.sticky, self.num_speculative_tokens)

        make()
        return make


class AdaptivePolicy(Strict):
    """Goodput-maximising γ each iteration (and root width up to ``max_width``)."""

    kind: Literal["adaptive"]
    max_gamma: Gamma = 8
    smoothing: Annotated[float, Field(gt=0, le=1)] = 0.1
    max_width: Gamma = 1  # > 1: also try trees <k,1,...,1> with k up to this
    per_sequence: bool = False  # each sequence its own γ <= the batch's, from its history

    @property
    def chains_only(self) -> bool:
        """One chain for the whole batch: no trees, no per-sequence γ's."""
        return self.max_width == 1 and not self.per_sequence

    def build(self, acceptance):
        """A factory of ``sim.policies.AdaptiveGamma`` with the acceptance model's prior."""
        from sim.policies import AdaptiveGamma

        return lambda: AdaptiveGamma(self.max_gamma, acceptance.mean_alpha, self.smoothing,
                                     self.max_width, self.per_sequence)


Steps = Annotated[int, Field(ge=0, le=MAX_GAMMA)]  # SGLang's steps; 0: no drafts
Hysteresis = Annotated[float, Field(ge=-MAX_GAMMA, le=MAX_GAMMA)]


_SLOT = SGLANG_SLOT_DEFAULTS  # SGLang's defaults for a slot's thresholds


class SglangSlot(Strict):
    """One batch-size slot of SGLang's adaptive config: its candidate steps, and any of
    the shared thresholds it sets for itself."""

    candidate_steps: Annotated[list[Steps], Field(min_length=1, max_length=MAX_GAMMA + 1)]
    ema_alpha: Annotated[float, Field(gt=0, le=1)] | None = None
    update_interval: Annotated[int, Field(ge=1, le=MAX_COUNT)] | None = None
    warmup_batches: Annotated[int, Field(ge=0, le=MAX_COUNT)] | None = None
    down_hysteresis: Hysteresis | None = None
    up_hysteresis: Hysteresis | None = None
    ceiling_coeff: Annotated[float, Field(ge=0, le=MAX_GAMMA)] | None = None


class SglangAdaptivePolicy(Strict):
    """SGLang's ``--speculative-adaptive`` (``sim.controllers.SglangAdaptive``): the EAGLE
    steps of each decode batch from an EMA of accepted drafts kept per batch-size slot."""

    kind: Literal["sglang_adaptive"]
    # --speculative-num-steps, where a slot starts (null: the middle of every slot's
    # candidates together, as SGLang sets it)
    steps: Steps | None = None
    # --speculative-adaptive-config's slots by smallest batch size (null: SGLang's default)
    slots: dict[Annotated[str, Field(pattern=r"^[0-9]{1,9}$")], SglangSlot] | None = \
        Field(None, min_length=1, max_length=MAX_GAMMA + 1)
    ema_alpha: Annotated[float, Field(gt=0, le=1)] = _SLOT["ema_alpha"]
    update_interval: Annotated[int, Field(ge=1, le=MAX_COUNT)] = _SLOT["update_interval"]
    warmup_batches: Annotated[int, Field(ge=0, le=MAX_COUNT)] = _SLOT["warmup_batches"]
    down_hysteresis: Hysteresis = _SLOT["down_hysteresis"]
    up_hysteresis: Hysteresis = _SLOT["up_hysteresis"]
    ceiling_coeff: Annotated[float, Field(ge=0, le=MAX_GAMMA)] = _SLOT["ceiling_coeff"]
    # the decode batch sizes with CUDA graphs, a batch padded up to one before its slot is
    # chosen (null: SGLang's speculative list up to scheduler.max_num_seqs)
    cuda_graph_bs: Annotated[list[PosInt], Field(min_length=1, max_length=4096)] | None = None
    chains_only: ClassVar[bool] = True
    takes_max_running: ClassVar[bool] = True  # build gets scheduler.max_num_seqs

    def slot_table(self) -> dict[str, dict]:
        """The slots as ``sim.controllers.SglangAdaptive`` takes them."""
        from sim.controllers import SGLANG_DEFAULT_SLOTS

        if self.slots is None:
            return SGLANG_DEFAULT_SLOTS
        return {k: v.model_dump(exclude_none=True) for k, v in self.slots.items()}

    def build(self, acceptance, max_running: int):
        """A factory of ``sim.controllers.SglangAdaptive`` (checked now, at build time)."""
        from sim.controllers import SglangAdaptive, sglang_capture_sizes, sglang_initial_steps

        slots = self.slot_table()
        shared = {k: getattr(self, k) for k in SGLANG_SLOT_DEFAULTS}
        steps = sglang_initial_steps(slots) if self.steps is None else self.steps
        capture = self.cuda_graph_bs or sglang_capture_sizes(max_running)

        def make():
            return SglangAdaptive(steps, slots, shared, capture)

        if make().max_depth == 0:
            from specdec.errors import UserError

            raise UserError("policy.slots: every candidate_steps is 0: the policy never "
                            "drafts (use kind: none)")
        return make


class TrtllmPolicy(Strict):
    """TensorRT-LLM's speculative config: ``max_draft_len`` and its controls
    (``sim.controllers.TrtllmSpeculation``): a draft length by batch size, speculation off
    above a concurrency, and the acceptance-rate gate that switches it off for good."""

    kind: Literal["trtllm"]
    max_draft_len: Gamma
    # {batch size: draft length}: the first key at or above the batch, 0 past the largest
    draft_len_schedule: dict[PosInt, Steps] | None = Field(None, min_length=1,
                                                            max_length=MAX_GAMMA + 1)
    max_concurrency: PosInt | None = None  # speculation off above this many requests
    acceptance_rate_window_size: Annotated[int, Field(ge=0, le=MAX_COUNT)] = 0
    acceptance_rate_threshold: Annotated[float, Field(ge=0, le=1)] | None = None
    chains_only: ClassVar[bool] = True

    @field_validator("draft_len_schedule", mode="before")
    @classmethod
    def _keys_as_numbers(cls, value):
        """Batch sizes written as strings (JSON's keys, ``--set`` of a JSON object) are
        read as the integers they spell."""
        if isinstance(value, dict):
            return {int(k) if isinstance(k, str) and k.isdigit() else k: v
                    for k, v in value.items()}
        return value

    def build(self, acceptance):
        """A factory of ``sim.controllers.TrtllmSpeculation`` (checked now)."""
        from sim.controllers import TrtllmSpeculation

        def make():
            return TrtllmSpeculation(self.max_draft_len, self.draft_len_schedule,
                                     self.max_concurrency, self.acceptance_rate_window_size,
                                     self.acceptance_rate_threshold)

        make()
        return make


POLICY_KINDS = (NonePolicy, FixedPolicy, TreePolicyCfg, LadderPolicy, AdaptivePolicy,
                SglangAdaptivePolicy, TrtllmPolicy)
Policy = kind_union(POLICY_KINDS)
