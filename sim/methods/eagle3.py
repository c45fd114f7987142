"""``eagle3``: EAGLE-3, drafted by the kind of ``sim.methods.eagle`` (which describes
both); its traits are its own."""

from __future__ import annotations

from sim.methods.base import MethodTraits
from sim.methods.eagle import EagleDrafter

Kind = EagleDrafter
# TensorRT-LLM's PyTorch backend takes Eagle as Eagle3's alias
TRAITS = MethodTraits(eagle_type=True, parallel_slots=-1, dynamic_k=True, vllm=("eagle3",),
                      sglang=("EAGLE3",), trtllm=("Eagle3", "Eagle"))
DEFAULT = EagleDrafter(method="eagle3")
