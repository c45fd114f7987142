"""The time a prompt's KV takes from a prefill replica to a decode replica (P/D).

Each GPU's share of the KV crosses the link (a NIC per GPU: the GPUs' ``node_link`` by
default) at once, so ``n`` prompt tokens take ``latency_s + n x max(b_P, b_D) /
bytes_per_s``, b_P and b_D the KV bytes per token on one GPU of a prefill and of a decode
replica: the pool with fewer GPUs sends or receives more per NIC. ``sim.disagg`` prices
its transfers with it (``PdSetup.transfer_s``), and category H of the validation table
(``hardware.timing.pd_serving``) prices a measured run's TTFT with it.
"""

from __future__ import annotations

__all__ = ["kv_transfer_s"]


def kv_transfer_s(tokens: float, prefill_bytes_per_token: float,
                  decode_bytes_per_token: float, bytes_per_s: float,
                  latency_s: float) -> float:
    """Seconds the KV of ``tokens`` prompt tokens takes on the link (module notes)."""
    per_token = max(prefill_bytes_per_token, decode_bytes_per_token)
    return latency_s + tokens * per_token / bytes_per_s
