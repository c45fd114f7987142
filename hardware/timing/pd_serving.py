"""What a disaggregated-serving run predicts (category H): its TTFT and its TPOT.

A run (:class:`hardware.timing.pd_rows.PdRow`) has a prefill pool and a decode pool of
the same GPU, model and precision, each replica with its own layout. Nothing is fitted on
these rows; they are priced with the default timing (docs/timing.md, "P/D:
disaggregated-serving runs"):

- **TPOT** from the decode pool alone: one decode step of a decode replica running
  ``decode_batch`` sequences (at most what its KV cache holds at full length) at the mean
  context, prompt + half the output
  (:func:`hardware.timing.serving.decode_pool_tpot`); the decode pool runs no prompts.
- **TTFT** from the prefill pool: the prefill pass of one ``isl``-token prompt on a
  prefill replica (the validation table's ``ttft_s`` at batch 1), plus the prompt's KV on
  the GPUs' ``node_link`` as ``sim.disagg`` prices it
  (:func:`hardware.kv_transfer.kv_transfer_s`, each GPU's share at once, b the KV bytes
  per token on one GPU of each pool). The decode replica's first step is not added: SGLang
  and TensorRT-LLM send the first token with the KV (vLLM's NixlConnector flow, which
  ``sim.disagg`` follows, recomputes one token on the decode side).

Not modelled: queueing at either pool (the serving model of categories B, F and G has no
arrival pattern either, :mod:`hardware.timing.serving`), so a busy prefill pool's queue is
in the measured TTFT and not in the price; speculation (MTP) the runs may have used; the
link's contention between transfers; layer-wise overlap of the transfer with the prefill.
"""

from __future__ import annotations

from dataclasses import dataclass

from hardware.catalog import Catalog
from hardware.cost import CostModel
from hardware.deployment import Deployment
from hardware.kv_transfer import kv_transfer_s
from hardware.timing.pd_rows import PdRow
from hardware.timing.serving import decode_pool_tpot

__all__ = ["PdPrediction", "pool_cost", "predict_pd"]


@dataclass(frozen=True)
class PdPrediction:
    """A run's predicted TTFT and TPOT (seconds), the TTFT's two parts, and the backend
    that priced each pool's passes."""

    ttft_s: float
    tpot_s: float
    prefill_s: float
    transfer_s: float
    prefill_backend: str
    decode_backend: str


def pool_cost(row: PdRow, catalog: Catalog, role: str, timing: str = "auto") -> CostModel:
    """The cost model of one replica of the run's ``role`` pool (``prefill`` or
    ``decode``): the run's model, GPU, precision and engine, the pool's TP and EP."""
    tp, ep = (row.prefill_tp, row.prefill_ep) if role == "prefill" else \
        (row.decode_tp, row.decode_ep)
    dep = Deployment(
        model=catalog.model(row.model), gpu=catalog.gpu(row.gpu), tp=tp, ep=ep,
        weight_bits=row.weight_bits, kv_bits=row.kv_bits, compute_dtype=row.compute_dtype,
        fp8_scales=row.fp8_scales, fp4_format=row.fp4_format, quantized=row.quantized,
        timing=timing, framework=catalog.framework_id(row.framework, row.framework_version))
    return CostModel(dep, catalog)


def predict_pd(row: PdRow, catalog: Catalog, timing: str = "auto") -> PdPrediction:
    """The run's TTFT and TPOT as the module notes price them."""
    prefill = pool_cost(row, catalog, "prefill", timing)
    decode = pool_cost(row, catalog, "decode", timing)
    prefill_s = prefill.uniform_pass_seconds(1, row.isl, 0)
    link = catalog.link(decode.dep.gpu.node_link)
    transfer_s = kv_transfer_s(row.isl, float(sum(prefill.stage_kv_bytes_per_token)),
                               float(sum(decode.stage_kv_bytes_per_token)),
                               link.bytes_per_s, link.latency_s)
    tpot_s = decode_pool_tpot(decode, row.decode_batch, row.isl, row.osl)
    return PdPrediction(prefill_s + transfer_s, tpot_s, prefill_s, transfer_s,
                        prefill.backend, decode.backend)
