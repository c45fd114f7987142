"""The Blackwell GPUs (B200, B300, GB200, GB300): their catalog entries against the system
files of the kernel tables they read, their measured-table wiring, and the NVL72 domain."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hardware import CostModel, Deployment, load_catalog

CAT = load_catalog()
# catalog id -> aiconfigurator-core 0.12.0 system
SYSTEMS = {"b200": "b200_sxm", "b300": "b300_sxm", "gb200": "gb200", "gb300": "gb300"}


def _system(gpu_id: str) -> dict:
    """The package's own description of the GPU (systems/<system>.yaml)."""
    core = pytest.importorskip("aiconfigurator_core", reason="needs aiconfigurator-core")
    path = Path(core.__file__).parent / "systems" / f"{SYSTEMS[gpu_id]}.yaml"
    return yaml.safe_load(path.read_text())


def cost(model: str, gpu: str, **kw) -> CostModel:
    return CostModel(Deployment(model=CAT.model(model), gpu=CAT.gpu(gpu), **kw), CAT)


@pytest.mark.parametrize("gpu_id", sorted(SYSTEMS))
def test_datasheet_fields_are_those_the_kernel_tables_system_file_states(gpu_id):
    """Peaks, bandwidth and memory as aiconfigurator-core's system file has them (both
    quote NVIDIA's Blackwell datasheets); memory to 0.05 GiB (the catalog rounds GiB)."""
    gpu, sys = CAT.gpu(gpu_id), _system(gpu_id)
    assert gpu.tables == SYSTEMS[gpu_id]
    assert gpu.peak("bf16") == gpu.peak("fp16") == sys["gpu"]["bfloat16_tc_flops"]
    assert gpu.peak("fp8") == sys["gpu"]["fp8_tc_flops"]
    assert gpu.peak("int8") == sys["gpu"]["int8_tc_flops"]
    assert gpu.hbm_bytes_per_s == sys["gpu"]["mem_bw"]
    assert gpu.hbm_capacity_gib == pytest.approx(sys["gpu"]["mem_capacity"] / 2**30, abs=0.05)
    assert gpu.default_dtype == "bf16"


@pytest.mark.parametrize("gpu_id", sorted(SYSTEMS))
def test_nvlink5_joins_the_gpus_of_a_server_or_an_nvl72_rack(gpu_id):
    gpu, sys = CAT.gpu(gpu_id), _system(gpu_id)
    link = CAT.link(gpu.scale_up_link)
    assert link.id == "nvlink5" and link.bytes_per_s == sys["node"]["intra_node_bw"] == 900e9
    # HGX: one 8-GPU board; NVL72: the rack's 72 GPUs are one NVLink domain
    assert gpu.gpus_per_node == sys["node"].get("num_gpus_per_rack",
                                                sys["node"]["num_gpus_per_node"])


@pytest.mark.parametrize("gpu_id", sorted(SYSTEMS))
def test_each_entry_names_its_datasheet_and_says_where_it_is_validated(gpu_id):
    """B200 against categories F and G's serving runs; B300 (its runs left out: prompts
    not as stated), GB200 and GB300 against none; each roofline fitted on its own kernel
    tables (specsim calibrate --tables), as h100's."""
    source = CAT.gpu(gpu_id).source
    assert "datasheet" in source
    validated = gpu_id == "b200"
    assert ("Validated on category F" in source) == validated
    assert ("Not validated" in source) == (not validated)
    roofline = CAT.gpu(gpu_id).roofline
    assert roofline.calibrated and "kernel tables of b200, b300, gb200, gb300" in \
        roofline.source


@pytest.mark.parametrize(("gpu_id", "framework", "version"), [
    ("b200", "vllm", "0.24.0"), ("b200", "sglang", "0.5.14"), ("b200", "trtllm", "1.3.0rc20"),
    ("b300", "vllm", "0.24.0"), ("gb200", "vllm", "0.24.0"), ("gb300", "vllm", "0.24.0"),
])
def test_auto_prices_each_blackwell_gpu_with_its_measured_tables(gpu_id, framework, version):
    _system(gpu_id)
    c = cost("llama-3.1-8b", gpu_id, framework=framework)
    assert c.backend == "measured"
    assert f"tables {SYSTEMS[gpu_id]} / {framework} {version}" in c.timing.note


def test_a_b200_decodes_and_prefills_faster_than_an_h200():
    """Decode streams the weights: faster, by less than the bandwidth ratio 7.7/4.8 (the
    GEMM term); prefill is compute: faster, by less than the 16-bit peak ratio 2250/989."""
    _system("b200")
    b200, h200 = cost("llama-3.1-8b", "b200"), cost("llama-3.1-8b", "h200")
    assert b200.backend == h200.backend == "measured"
    db, dh = b200.pass_cost([1], [1024]), h200.pass_cost([1], [1024])
    assert db.seconds < dh.seconds
    assert 1 < dh.parts["gemm_s"] / db.parts["gemm_s"] < 7.7 / 4.8
    pb, ph = b200.pass_cost([2048] * 4, [0] * 4), h200.pass_cost([2048] * 4, [0] * 4)
    assert 1 < ph.seconds / pb.seconds < 2250 / 989


def test_nvl72_tp_beyond_the_measured_tray_is_priced_by_the_roofline_over_nvlink():
    """The GB200 tables measure all-reduces over 2 and 4 GPUs (one tray): tp 8 falls back
    to the roofline, still on NVLink 5 (one rack); tp 128 spans racks (the node link)."""
    _system("gb200")
    assert CAT.gpu("gb200").tables_max_tp == 4
    assert cost("llama-3.1-70b", "gb200", tp=4).backend == "measured"
    c8 = cost("llama-3.1-70b", "gb200", tp=8)
    assert c8.backend == "roofline" and c8.tp_link.id == "nvlink5"
    assert "tp 8: the gb200 tables measure all-reduces over at most 4 GPUs" in c8.timing.note
    assert cost("llama-3.1-405b", "gb200", tp=128, timing="roofline").tp_link.id == "ib-ndr-400g"


def test_gpus_without_tables_max_tp_keep_a_whole_server_measured():
    assert all(CAT.gpu(g).tables_max_tp is None for g in ("h100", "h200", "b200", "b300"))
    _system("b200")
    assert cost("llama-3.1-70b", "b200", tp=8).backend == "measured"
