"""``suffix``: suffix decoding, drafted by the kind of ``sim.methods.ngram`` (which describes
both); its traits are its own."""

from __future__ import annotations

from sim.methods.base import MethodTraits
from sim.methods.ngram import LookupDrafter

Kind = LookupDrafter
TRAITS = MethodTraits(on_cpu=True, async_ok=False, vllm=("suffix",))
DEFAULT = LookupDrafter(method="suffix")
