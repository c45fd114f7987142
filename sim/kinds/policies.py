"""Policy kinds: how each iteration picks the draft shape (``variants[i].policy``).

Each kind builds ``make_policy`` with ``build(acceptance)``: a zero-argument callable that
makes one fresh policy object (``sim.policies``) per replica, since adaptive policies hold
state. ``chains_only`` says whether every shape the policy can pick is a single chain, the
case the i.i.d. formula E(α̂, γ) of the run summary applies to.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from sim.kinds.base import MAX_COUNT, MAX_GAMMA, Gamma, Shape, Strict, kind_union
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


POLICY_KINDS = (NonePolicy, FixedPolicy, TreePolicyCfg, LadderPolicy, AdaptivePolicy)
Policy = kind_union(POLICY_KINDS)
