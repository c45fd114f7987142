"""A KV connector for the conformance runs of a P/D decode replica: vLLM's scheduler side of
a pull connector and nothing else (no worker, no transfer).

A request whose ``kv_transfer_params`` ask for a remote prefill (``do_remote_prefill``) is
offered every prompt token past what is computed, loaded asynchronously, as vLLM 0.33's
NixlConnector offers them (``vllm/distributed/kv_transfer/kv_connector/v1/nixl/
pull_scheduler.py``, ``get_num_new_matched_tokens``: ``len(prompt) - num_computed_tokens``,
``True``), once (``update_state_after_alloc`` clears ``do_remote_prefill``, as NIXL's
does, so a request preempted later recomputes its prompt); the driver
(``vllm_side.run_vllm``) then reports each load finished
(``KVConnectorOutput.finished_recving``) in the output of the step during which it ends.
The worker-side methods are never called: the scheduler runs without a model.
"""

from __future__ import annotations

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
)


class RemotePrefillConnector(KVConnectorBase_V1):
    """The scheduler side of a pull connector (the module notes)."""

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        params = request.kv_transfer_params
        if params is not None and params.get("do_remote_prefill"):
            count = len(request.prompt_token_ids or []) - num_computed_tokens
            if count > 0:
                return count, True
        return 0, False

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        params = request.kv_transfer_params
        if params and params.get("do_remote_prefill"):
            params["do_remote_prefill"] = False  # one transfer a request (NixlConnector's)

    def build_connector_meta(self, scheduler_output):
        return KVConnectorMetadata()

    def request_finished(self, request, block_ids):
        return False, None

    # worker side: never called without a model
    def start_load_kv(self, forward_context, **kwargs):
        raise NotImplementedError

    def wait_for_layer_load(self, layer_name):
        raise NotImplementedError

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        raise NotImplementedError

    def wait_for_save(self):
        raise NotImplementedError
