"""A P/D scenario's two pools (``sim.disagg``): the scenario each pool runs, their setups
paired into one, and each engine's command line for each pool."""

from __future__ import annotations

import dataclasses

from sim.disagg import Link, PdSetup
from specdec.errors import UserError


def pool_scenario(sc, role: str, source: str = "scenario"):
    """The scenario one pool (``role``: prefill or decode) of P/D scenario ``sc`` runs: its
    ``deployment`` and ``scheduler`` with the pool's changes and replicas, no
    ``disaggregation``. The decode pool runs without prefix caching (module notes)."""
    from pydantic import ValidationError

    from sim.loading import format_error
    from sim.scenario import Deployment, Scheduler

    p = getattr(sc.disaggregation, role)
    caching = sc.scheduler.prefix_caching and role == "prefill"
    try:
        dep = Deployment.model_validate({**sc.deployment.model_dump(),
                                         **p.deployment_changes(), "replicas": p.replicas})
        sch = Scheduler.model_validate({**sc.scheduler.model_dump(), **p.scheduler_changes(),
                                        "prefix_caching": caching})
    except ValidationError as e:
        raise UserError(f"{source}: disaggregation.{role}: "
                        f"{format_error(e.errors()[0])}") from None
    return sc.model_copy(update={"deployment": dep, "scheduler": sch,
                                 "disaggregation": None})


def pool_setups(sc, source: str, record_bound: bool, build) -> list:
    """``sim.build.setups`` of a P/D scenario: ``build`` (the one-pool ``setups``) of the
    prefill pool and of the decode pool (``pool_scenario``), paired variant by variant
    into the decode pool's Setup with ``disagg`` set."""
    from hardware.catalog import load_catalog
    from sim.paths import resolve_file

    dis = sc.disaggregation
    built_p = build(pool_scenario(sc, "prefill", source), source, record_bound)
    built_d = build(pool_scenario(sc, "decode", source), source, record_bound)
    d = sc.deployment
    catalog = load_catalog(extra=str(resolve_file(d.catalog)) if d.catalog else None)
    flow = dis.flow or ("sglang" if sc.scheduler.order == "prefill_first" else "vllm")
    if flow == "sglang" and dis.draft_kv == "recompute":
        raise UserError(f"{source}: disaggregation.draft_kv: 'recompute' is vLLM's flow; "
                        "SGLang's sends the drafter's state with the KV (flow: sglang)")
    out = []
    for (name, sp), (_, sd) in zip(built_p, built_d, strict=True):
        link_id = dis.link or sd.target_cost.dep.gpu.node_link
        try:
            spec = catalog.link(link_id)
        except UserError as e:
            raise UserError(f"{source}: disaggregation.link: {e}") from None
        pd = PdSetup(dataclasses.replace(sp, table=sd.table),
                     Link(link_id, spec.bytes_per_s, spec.latency_s),
                     _bytes_per_token(sp, dis.draft_kv), _bytes_per_token(sd, dis.draft_kv),
                     dis.draft_kv, dis.decode_router, sd.target_cost.dep.n_gpus, flow)
        notes = sd.notes
        if sc.scheduler.prefix_caching:
            notes = (*notes, "disaggregation: the decode pool runs without prefix caching "
                             "(not modelled there); the prefill pool has it")
        out.append((name, dataclasses.replace(sd, disagg=pd, notes=notes)))
    return out


# what each engine adds to a pool's command line: vLLM's NixlConnector with kv_producer on
# prefill instances and kv_consumer on decode instances (vllm 0.33.0, PyPI wheel:
# vllm/distributed/kv_transfer/kv_connector/v1/nixl/connector.py, NixlConnector.__init__,
# which calls kv_both deprecated); SGLang's --disaggregation-mode (sglang 0.5.14, PyPI
# wheel: python/sglang/srt/server_args.py)
_VLLM_KV = "--kv-transfer-config '{{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"{}\"}}'"
POOL_FLAGS = {
    "vllm": {"prefill": _VLLM_KV.format("kv_producer"),
             "decode": _VLLM_KV.format("kv_consumer")},
    "sglang": {role: f"--disaggregation-mode {role}" for role in ("prefill", "decode")},
}


def pool_commands(sc, variant, catalog, engine: str) -> tuple[str, list[str]]:
    """``engine``'s (vllm, sglang) command line for each pool of P/D scenario ``sc``, as
    "prefill xN: ... ; decode xM: ...", and what they cannot say (the pools' notes)."""
    from sim.engines.sglang import launch_command
    from sim.engines.vllm import serve_command

    command = {"vllm": serve_command, "sglang": launch_command}[engine]
    lines, notes = [], []
    for role in ("prefill", "decode"):
        pool = pool_scenario(sc, role)
        n = pool.deployment.replicas  # said once, as "xN" (not as replicas behind a balancer)
        one = pool.model_copy(update={"deployment": pool.deployment.model_copy(
            update={"replicas": 1})})
        cmd, said = command(one, variant, catalog)
        lines.append(f"{role} x{n}: {cmd} {POOL_FLAGS[engine][role]}")
        notes += said
    notes.append("a router in front (vLLM's disaggregated proxy, Dynamo, llm-d) sends each "
                 "request to a prefill server, then to a decode server")
    return " ; ".join(lines), list(dict.fromkeys(notes))


def _bytes_per_token(setup, draft_kv: str) -> float:
    """KV bytes per token on one GPU of ``setup``'s replicas that a transfer moves: the
    target's, and a drafting model's or head's where its KV is sent too."""
    b = float(sum(setup.target_cost.stage_kv_bytes_per_token))
    if draft_kv == "transfer" and setup.draft is not None:
        b += float(sum(setup.draft.cost.stage_kv_bytes_per_token))
    return b
