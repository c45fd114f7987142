"""A workload run through vLLM 0.33's own v1 ``Scheduler`` on the CPU, with a fake model
step in place of the model, one ``Step`` per ``schedule()`` call.

The scheduler is built as vLLM's ``tests/v1/core/utils.py`` builds it (``create_scheduler``):
a model folder that holds only a ``config.json`` (a one-layer Llama; no weights, no
tokenizer), a ``KVCacheConfig`` of ``num_blocks`` blocks and no tensors; sync scheduling,
or with ``Workload.async_scheduling`` vLLM's ``AsyncScheduler`` driven as its engine core
drives it (``run_vllm_async``).
Speculation uses a real ``SpeculativeConfig``: ``eagle`` with a draft folder whose
``config.json`` names an EAGLE-Llama head, ``draft_model`` with the target's folder as the
draft. What the scheduler takes from them: ``num_speculative_tokens`` K, K lookahead slots,
0 (EAGLE) or 1 (draft model) input slots per scheduled request, and with prefix caching
EAGLE's block hashes over one token past each block.

The fake model step: a prefill chunk that completes the prompt samples one token, an
earlier chunk none; a verify returns its accepted drafts (``Workload.accepted``, at most the
drafts scheduled) and one bonus token; after every step each request still running gets K
fresh drafts (``update_draft_token_ids``; the scheduler drops those of a prefill chunk).
"""

from __future__ import annotations

import json
import mmap
import os
from collections import deque
from pathlib import Path

os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "0"  # pinned: the rules read with it off

import torch  # noqa: E402
from vllm.config import (  # noqa: E402
    CacheConfig,
    DeviceConfig,
    KVTransferConfig,
    ModelConfig,
    ParallelConfig,
    SchedulerConfig,
    SpeculativeConfig,
    VllmConfig,
)
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.utils.hashing import get_hash_fn_by_name  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # noqa: E402
from vllm.v1.core.sched.async_scheduler import AsyncScheduler  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.kv_cache_interface import (  # noqa: E402
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
)
from vllm.v1.outputs import DraftTokenIds, KVConnectorOutput, ModelRunnerOutput  # noqa: E402
from vllm.v1.request import Request, RequestStatus  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

from tests.conformance.workload import (  # noqa: E402
    BLOCK,
    DRAFT_TOKEN,
    EOS,
    OUT_TOKEN,
    VOCAB,
    Step,
    Workload,
)

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
         "intermediate_size": 128, "num_attention_heads": 2, "num_key_value_heads": 1,
         "num_hidden_layers": 1, "vocab_size": VOCAB, "max_position_embeddings": 8192,
         "rms_norm_eps": 1e-5, "torch_dtype": "float16", "bos_token_id": 1,
         "eos_token_id": EOS}


def write_model_folders(root: Path) -> tuple[Path, Path]:
    """(target, EAGLE head) folders, each with only a ``config.json``."""
    target, head = root / "llama", root / "eagle"
    for folder, arch in ((target, "LlamaForCausalLM"), (head, "EagleLlamaForCausalLM")):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps({**LLAMA, "architectures": [arch]}))
    return target, head


class VllmFactory:
    """Builds a ``Scheduler`` per workload; the model configs are made once (slow)."""

    def __init__(self, root: Path) -> None:
        self.target, self.head = write_model_folders(root)
        self._models: dict[int, ModelConfig] = {}

    def model(self, max_model_len: int) -> ModelConfig:
        if max_model_len not in self._models:
            self._models[max_model_len] = ModelConfig(
                model=str(self.target), dtype="float16", seed=42, skip_tokenizer_init=True,
                max_model_len=max_model_len)
        return self._models[max_model_len]

    def scheduler(self, w: Workload) -> Scheduler:
        mc = self.model(w.max_model_len)
        parallel = ParallelConfig(pipeline_parallel_size=1)
        spec = None
        if w.k:
            draft = self.head if w.method == "eagle" else self.target
            plain = {} if w.lookahead_hashes else {"disable_lookahead_block_hashes": True,
                                                   "disable_eagle_block_drop": True}
            if w.ladder is not None:
                plain["num_speculative_tokens_per_batch_size"] = [list(r) for r in w.ladder]
            spec = SpeculativeConfig(method=w.method, model=str(draft),
                                     num_speculative_tokens=w.k, target_model_config=mc,
                                     target_parallel_config=parallel, **plain)
        sched = SchedulerConfig(
            max_num_seqs=w.max_num_seqs, max_num_batched_tokens=w.max_batched_tokens,
            max_model_len=w.max_model_len, long_prefill_token_threshold=w.chunk,
            enable_chunked_prefill=w.chunked, async_scheduling=w.async_scheduling,
            is_encoder_decoder=False)
        cache = CacheConfig(block_size=BLOCK, enable_prefix_caching=w.prefix_caching)
        layer = FullAttentionSpec(block_size=BLOCK, num_kv_heads=1, head_size=1,
                                  dtype=torch.float32)
        kv_transfer = None
        if w.cpu_blocks:  # vLLM's native CPU offload: CPU chunks of one block, each page
            # aligned (CPUOffloadingSpec: cpu_bytes_to_use // round_up(chunk, page))
            chunk = -(-layer.page_size_bytes // mmap.PAGESIZE) * mmap.PAGESIZE
            kv_transfer = KVTransferConfig(
                kv_connector="OffloadingConnector", kv_role="kv_both",
                kv_connector_extra_config={"cpu_bytes_to_use": w.cpu_blocks * chunk,
                                           "offload_prompt_only": w.offload_prompt_only})
        if w.remote_s:  # a P/D decode replica: the pull connector's scheduler side
            kv_transfer = KVTransferConfig(
                kv_connector="RemotePrefillConnector", kv_role="kv_consumer",
                kv_connector_module_path="tests.conformance.remote_connector")
        vc = VllmConfig(scheduler_config=sched, model_config=mc, cache_config=cache,
                        parallel_config=parallel, device_config=DeviceConfig(device="cpu"),
                        speculative_config=spec, kv_transfer_config=kv_transfer)
        if vc.scheduler_config.async_scheduling != w.async_scheduling or vc.use_v2_model_runner:
            raise RuntimeError("vLLM changed async scheduling or chose the V2 runner")
        group = KVCacheGroupSpec(["layer"], layer)
        if w.cpu_blocks and spec is not None and spec.use_eagle_block_drop():
            # as vLLM flags the group that holds the EAGLE head's layer
            # (kv_cache_planning.get_kv_cache_groups): the offload lookup then drops the
            # last CPU hit, as the GPU lookup its last (KV connectors keep plain hashes)
            group.is_eagle_group = True
        kv = KVCacheConfig(num_blocks=w.blocks, kv_cache_tensors=[], kv_cache_groups=[group])
        cache.num_gpu_blocks = w.blocks
        cls = AsyncScheduler if w.async_scheduling else Scheduler
        s = cls(vllm_config=vc, kv_cache_config=kv, block_size=BLOCK,
                structured_output_manager=StructuredOutputManager(vc), log_stats=False)
        if w.cpu_blocks:
            chunks = s.connector.scheduler.manager._num_chunks
            if chunks != w.cpu_blocks:
                raise RuntimeError(f"{w.name}: vLLM's CPU tier has {chunks} chunks, "
                                   f"not {w.cpu_blocks}")
        return s


def _request(w: Workload, rid: int, hasher) -> Request:
    sp = SamplingParams(max_tokens=w.output[rid], ignore_eos=False)
    sp.update_from_generation_config({}, EOS)
    if w.remote_s:
        sp.extra_args = {"kv_transfer_params": {"do_remote_prefill": True}}
    return Request(request_id=str(rid), prompt_token_ids=w.prompt_ids(rid), sampling_params=sp,
                   pooling_params=None, arrival_time=w.arrival_at[rid], block_hasher=hasher)


def _hasher(w: Workload, s):
    if not w.prefix_caching:
        return None
    fn = get_hash_fn_by_name(s.vllm_config.cache_config.prefix_caching_hash_algo)
    init_none_hash(fn)
    return get_request_block_hasher(BLOCK, fn, s.vllm_config.num_hash_lookahead_tokens)


def _step(out, now: float) -> Step:
    spec = out.scheduled_spec_decode_tokens
    return Step({int(r): n for r, n in out.num_scheduled_tokens.items()},
                {int(r): len(d) for r, d in spec.items() if d},
                tuple(sorted(int(r) for r in out.preempted_req_ids or ())), now)


def run_vllm(w: Workload, factory: VllmFactory, max_steps: int = 20_000) -> list[Step]:
    """vLLM's steps for ``w``, until every request finished."""
    if w.async_scheduling:
        return run_vllm_async(w, factory, max_steps)
    if w.cpu_blocks:
        return run_vllm_offload(w, factory, max_steps)
    s = factory.scheduler(w)
    hasher = _hasher(w, s)
    accepted = w.accepted()
    order = sorted(range(w.n), key=lambda i: w.arrival_at[i])
    now, nxt, done = 0.0, 0, 0
    steps: list[Step] = []
    ready: dict[str, float] = {}  # a P/D decode replica: when each started load ends
    started: set[str] = set()  # and the loads started so far (one a request)
    while done < w.n:
        while nxt < w.n and w.arrival_at[order[nxt]] <= now:
            s.add_request(_request(w, order[nxt], hasher))
            nxt += 1
        if not s.has_unfinished_requests():
            now = w.arrival_at[order[nxt]]
            continue
        if len(steps) >= max_steps:
            raise RuntimeError(f"{w.name}: vLLM ran {max_steps} steps without finishing")
        out = s.schedule()
        kv_out = None
        if w.remote_s:  # loads this step started; those that end by its end are reported
            for r, req in s.requests.items():
                if req.status == RequestStatus.WAITING_FOR_REMOTE_KVS and r not in started:
                    started.add(r)
                    ready[r] = now + w.remote_s
            if not out.total_num_scheduled_tokens:  # nothing runs: on to the next event
                now = min([*ready.values(), *([w.arrival_at[order[nxt]]] if nxt < w.n
                                              else [])])
            end = now + (1.0 if out.total_num_scheduled_tokens else 0.0)
            arrived = {r for r, t in ready.items() if t <= end}
            for r in arrived:
                del ready[r]
            kv_out = KVConnectorOutput(finished_recving=arrived)
            if not out.total_num_scheduled_tokens:
                s.update_from_output(out, ModelRunnerOutput(
                    req_ids=[], req_id_to_index={}, sampled_token_ids=[],
                    kv_connector_output=kv_out))
                continue
        steps.append(_step(out, now))
        _settle(s, w, out, accepted, kv_out)
        done = nxt - len(s.requests)  # a finished request leaves ``requests``
        if out.total_num_scheduled_tokens:
            now += 1.0
    return steps


def run_vllm_async(w: Workload, factory: VllmFactory, max_steps: int = 20_000) -> list[Step]:
    """vLLM's steps for ``w`` with async scheduling, as ``EngineCore.step_with_batch_queue``
    (``vllm/v1/engine/core.py``) drives an ``AsyncScheduler`` with a queue of two batches:
    schedule a step; if fewer than two are queued, schedule the next at once; else wait for
    the oldest to finish and apply its output. So step n + 1 is scheduled when step n starts,
    before step n's output is known. A step that schedules anything runs one second after
    the step before it ends; one that schedules nothing takes none.

    The fake model's output of a step: a prefill chunk short of the prompt's end samples
    nothing; an admission padded with placeholder drafts samples one token; a verify
    returns its accepted drafts (``Workload.accepted`` at the output tokens the request has
    when the step's output is applied) and one bonus token. Drafts are placeholders in
    async mode (the worker fills them in), so no ``update_draft_token_ids``."""
    s = factory.scheduler(w)
    hasher = _hasher(w, s)
    accepted = w.accepted()
    order = sorted(range(w.n), key=lambda i: w.arrival_at[i])
    queue: deque = deque()  # (scheduler output, what each request samples, end time)
    now, gpu_end, nxt = 0.0, 0.0, 0
    steps: list[Step] = []
    while nxt < w.n or s.has_requests() or queue:
        while nxt < w.n and w.arrival_at[order[nxt]] <= now:
            s.add_request(_request(w, order[nxt], hasher))
            nxt += 1
        if s.has_requests():
            if len(steps) >= max_steps:
                raise RuntimeError(f"{w.name}: vLLM ran {max_steps} steps without finishing")
            running = {r.request_id for r in s.running}
            out = s.schedule()
            executed = out.total_num_scheduled_tokens > 0
            start = max(now, gpu_end)
            gpu_end = start + (1.0 if executed else 0.0)
            if executed or out.preempted_req_ids:  # not an empty step (SpecSim has none)
                steps.append(_step(out, start))
            spec = out.scheduled_spec_decode_tokens
            kinds = {}
            for r in out.num_scheduled_tokens:
                if s.requests[r].is_prefill_chunk:
                    kinds[r] = "chunk"  # samples nothing
                elif r not in running and spec.get(r):
                    kinds[r] = "pad"  # placeholder drafts, all rejected
                else:
                    kinds[r] = len(spec.get(r, ()))  # drafts to verify
            queue.appendleft((out, kinds, gpu_end))
            if len(queue) < 2 and (executed or s.has_requests()):
                continue
        elif not queue:  # idle: wake at the next arrival
            now = w.arrival_at[order[nxt]]
            continue
        out, kinds, end = queue.pop()
        now = max(now, end)
        ids = list(out.num_scheduled_tokens)
        sampled = []
        for r in ids:
            req, kind = s.requests.get(r), kinds[r]
            if req is None or kind == "chunk":
                sampled.append([])
            elif kind == "pad":
                sampled.append([OUT_TOKEN])
            else:
                a = min(int(accepted[int(r), req.num_output_tokens]), kind)
                sampled.append([OUT_TOKEN] * (a + 1))
        s.update_from_output(out, ModelRunnerOutput(
            req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
            sampled_token_ids=sampled))
    return steps


def _sampled(s, out, accepted) -> tuple[list[str], list[list[int]]]:
    """The fake model's output of sync step ``out``: (scheduled request ids, what each
    samples)."""
    spec = out.scheduled_spec_decode_tokens
    ids = list(out.num_scheduled_tokens)
    sampled = []
    for r in ids:
        req = s.requests[r]
        if req.num_computed_tokens < req.num_tokens:  # a prefill chunk short of the end
            sampled.append([])
            continue
        drafts = [t for t in spec.get(r, ()) if t != -1]  # -1: padding, never accepted
        a = min(int(accepted[int(r), req.num_output_tokens]), len(drafts))
        sampled.append([OUT_TOKEN] * (a + 1))
    return ids, sampled


def _settle(s, w: Workload, out, accepted, kv_out=None) -> None:
    """Apply sync step ``out``'s fake output (``_sampled``; with ``kv_out``, the KV
    connector's) and give each request still running K fresh drafts, or the K the ladder
    gives this step's size (Dynamic SD)."""
    ids, sampled = _sampled(s, out, accepted)
    s.update_from_output(out, ModelRunnerOutput(
        req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
        sampled_token_ids=sampled, kv_connector_output=kv_out))
    if w.k:
        live = [r for r in ids if r in s.requests]
        k = w.k if w.ladder is None else out.num_spec_tokens_to_schedule
        s.update_draft_token_ids(DraftTokenIds(live, [[DRAFT_TOKEN] * k for _ in live]))


def run_vllm_offload(w: Workload, factory: VllmFactory, max_steps: int = 20_000
                     ) -> list[Step]:
    """vLLM's steps for ``w`` with its native CPU offload (``OffloadingConnector`` over a
    ``CPUOffloadingManager`` of ``w.cpu_blocks`` chunks, LRU), sync scheduling, the
    connector's worker side played by this driver from each step's
    ``OffloadingConnectorMetadata``:

    - **loads** (``load_jobs``, one per request that ``update_state_after_alloc`` put in
      WAITING_FOR_REMOTE_KVS): submitted as the step starts, each taking ``w.load_s``, one
      after the other (vLLM's ``SingleDirectionOffloadingHandler`` runs them in order;
      SpecSim queues them on one link); a load is reported done (its job in
      ``kv_connector_worker_meta.completed_jobs``, its request in ``finished_recving``) in
      the output of the step during which it ends;
    - **stores** (``store_jobs``): reported done in the output of the step that built
      them, so every block offered in a step is in the tier (a ``HIT``, not
      ``HIT_PENDING``) by the next ``schedule()`` -- SpecSim takes a block to be in the
      tier once offered, and no lookup in vLLM can see a store before the next step
      anyway (stores are built at the end of ``schedule()``, after its lookups); it also
      means no request is ever delayed for its own in-flight stores
      (``get_num_new_matched_tokens``: "still has in-flight transfers").

    The engine steps while ``has_requests()`` (a finished request's last blocks are
    offered by the next ``schedule()``, ``finished_req_ids``); a step that schedules
    nothing (every waiting request loading or passed over) is not recorded and takes the
    clock to the next arrival or load end, as SpecSim's idle replica waits for either."""
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import (
        OffloadingWorkerMetadata,
    )

    s = factory.scheduler(w)
    hasher = _hasher(w, s)
    accepted = w.accepted()
    order = sorted(range(w.n), key=lambda i: w.arrival_at[i])
    now, nxt = 0.0, 0
    steps: list[Step] = []
    loads: dict[int, tuple[str, float]] = {}  # job id -> (request, when it ends)
    link_free = 0.0  # when the last load submitted ends
    while nxt < w.n or s.has_requests():
        while nxt < w.n and w.arrival_at[order[nxt]] <= now:
            s.add_request(_request(w, order[nxt], hasher))
            nxt += 1
        if not s.has_requests():
            now = w.arrival_at[order[nxt]]
            continue
        if len(steps) >= max_steps:
            raise RuntimeError(f"{w.name}: vLLM ran {max_steps} steps without finishing")
        out = s.schedule()
        meta = out.kv_connector_metadata
        for job, entry in meta.load_jobs.items():
            if entry.sync:
                raise RuntimeError(f"{w.name}: a sync load (sync_load_budget_bytes)")
            link_free = max(now, link_free) + w.load_s
            loads[job] = (entry.req_id, link_free)
        ran = out.total_num_scheduled_tokens > 0
        if not ran and not out.preempted_req_ids:  # nothing runs: on to the next event
            events = [t for _, t in loads.values()]
            if nxt < w.n:
                events.append(w.arrival_at[order[nxt]])
            if events:
                now = max(now, min(events))
        end = now + (1.0 if ran else 0.0)
        done = {j: 1 for j in meta.store_jobs}  # stores: done in their own step
        arrived = set()
        for job, (r, t) in list(loads.items()):
            if t <= end:
                done[job] = 1
                arrived.add(r)
                del loads[job]
        kv_out = KVConnectorOutput(
            finished_recving=arrived,
            kv_connector_worker_meta=OffloadingWorkerMetadata(completed_jobs=done) if done
            else None)
        if ran or out.preempted_req_ids:
            steps.append(_step(out, now))
        _settle(s, w, out, accepted, kv_out)
        now = end
    return steps
