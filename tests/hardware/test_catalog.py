"""The shipped catalogs, user catalog files, and one-line errors for malformed ones."""

from __future__ import annotations

import textwrap

import pytest

from hardware import load_catalog
from specdec.errors import UserError

GPU_IDS = {"h100", "h200", "a100-80gb", "a100-40gb", "a10", "a10g", "l40s", "l4", "rtx-4090",
           "t4"}
LINK_IDS = {"nvlink3", "nvlink4", "pcie3-x16", "pcie4-x16", "pcie5-x16", "eth-100g",
            "ib-hdr-200g", "ib-ndr-400g"}
MODEL_IDS = {"llama-3-8b", "llama-3-70b", "llama-3.2-1b", "llama-3.2-3b", "llama-2-7b",
             "llama-2-13b", "llama-2-70b", "llama-7b", "llama-13b", "llama-30b", "llama-65b",
             "llama-68m", "opt-125m", "opt-6.7b", "opt-13b", "opt-30b", "tinyllama-1.1b",
             "vicuna-7b", "vicuna-13b", "vicuna-33b"}


def test_shipped_catalog_has_the_required_ids():
    cat = load_catalog()
    assert GPU_IDS <= set(cat.gpus)
    assert LINK_IDS <= set(cat.links)
    assert MODEL_IDS <= set(cat.models)


def test_every_entry_has_a_source_note():
    cat = load_catalog()
    for table in (cat.gpus, cat.links, cat.models):
        for entry in table.values():
            assert len(entry.source) > 10, entry.id


def test_paper_gpu_defaults_are_kept():
    """DESIGN.md: the defaults that reproduce the lecture's numbers."""
    cat = load_catalog()
    for gpu_id, bw in (("h100", 3.35e12), ("h200", 4.8e12)):
        gpu = cat.gpu(gpu_id)
        assert gpu.peak("bf16") == 989e12
        assert gpu.hbm_bytes_per_s == bw
        assert (gpu.eta_compute, gpu.eta_memory, gpu.overhead_s) == (0.7, 0.8, 0.0005)


def test_ridge_point_of_h100_is_295_flop_per_byte():
    assert round(load_catalog().gpu("h100").ridge_flop_per_byte()) == 295


def test_t4_has_no_bf16_and_computes_in_fp16():
    t4 = load_catalog().gpu("t4")
    assert t4.default_dtype == "fp16"
    with pytest.raises(UserError, match="gpu t4: no bf16 peak"):
        t4.peak("bf16")


@pytest.mark.parametrize(
    ("kind", "key"), [("gpu", "h1000"), ("model", "llama-4"), ("link", "nvlink9")]
)
def test_unknown_id_lists_the_known_ones(kind, key):
    cat = load_catalog()
    with pytest.raises(UserError) as err:
        getattr(cat, kind)(key)
    msg = str(err.value)
    assert f"unknown {kind} {key!r}" in msg
    known = {"gpu": "h100", "model": "llama-3-8b", "link": "nvlink4"}[kind]
    assert known in msg


def _file(tmp_path, text):
    path = tmp_path / "mine.yaml"
    path.write_text(textwrap.dedent(text))
    return path


GPU_OK = """\
    gpus:
      my-gpu:
        name: test
        peak_flops_per_s: {bf16: 1.0e+14}
        hbm_bytes_per_s: 1.0e+12
        hbm_capacity_gib: 32
        eta_compute: 0.5
        eta_memory: 0.9
        overhead_s: 0.001
        host_link: pcie4-x16
        scale_up_link: nvlink3
        node_link: eth-100g
        gpus_per_node: 4
        price_per_hour_usd: 1.0
        source: a test entry
"""


def test_user_file_adds_and_overrides_ids(tmp_path):
    path = _file(tmp_path, GPU_OK + """\
    links:
      pcie4-x16: {name: slow pcie, bytes_per_s: 1.0e+9, latency_s: 1.0e-5, source: override}
    """)
    cat = load_catalog(path)
    assert cat.gpu("my-gpu").eta_memory == 0.9
    assert cat.link("pcie4-x16").bytes_per_s == 1e9
    assert cat.gpu("h100").hbm_bytes_per_s == 3.35e12
    # the shipped catalog is not modified by a user file
    assert load_catalog().link("pcie4-x16").bytes_per_s == 31.5e9


def test_user_file_overriding_a_known_id_needs_only_the_changed_fields(tmp_path):
    path = _file(tmp_path, """\
    gpus:
      h100: {eta_memory: 0.6, overhead_s: 0.0002}
    models:
      llama-3-8b: {source: my own note}
    """)
    cat, shipped = load_catalog(path), load_catalog()
    h100 = cat.gpu("h100")
    assert (h100.eta_memory, h100.overhead_s) == (0.6, 0.0002)
    assert h100.model_dump(exclude={"eta_memory", "overhead_s"}) == \
        shipped.gpu("h100").model_dump(exclude={"eta_memory", "overhead_s"})
    assert cat.model("llama-3-8b").config == shipped.model("llama-3-8b").config
    assert cat.model("llama-3-8b").source == "my own note"
    bad = _file(tmp_path, "gpus:\n  h100: {eta_memory: 2}\n")
    with pytest.raises(UserError, match=r"gpus\.h100\.eta_memory: Input should be less than or "
                                        r"equal to 1, got 2$"):
        load_catalog(bad)


BAD = [
    ("gpus: {a: [1, 2\n", "invalid YAML at line"),
    ("- 1\n- 2\n", "must be a mapping with sections"),
    ("gpu: {}\n", "unknown section 'gpu'"),
    ("gpus: [1, 2]\n", "gpus: must map ids to entries"),
    ("links:\n  l1: [1]\n", "links.l1: must be a mapping of fields"),
    (GPU_OK.replace("hbm_bytes_per_s: 1.0e+12", "hbm_bytes_per_s: -1"),
     "gpus.my-gpu.hbm_bytes_per_s: Input should be greater than 0, got -1"),
    (GPU_OK.replace("        eta_memory: 0.9\n", ""), "gpus.my-gpu.eta_memory: Field required"),
    (GPU_OK.replace("eta_compute: 0.5", "eta_compute: 1.5"),
     "gpus.my-gpu.eta_compute: Input should be less than or equal to 1, got 1.5"),
    (GPU_OK.replace("hbm_bytes_per_s:", "hbm_bandwidth:"),
     "gpus.my-gpu.hbm_bandwidth: Extra inputs are not permitted"),
    (GPU_OK.replace("{bf16: 1.0e+14}", "{fp6: 1.0e+14}"), "gpus.my-gpu.peak_flops_per_s.fp6"),
    (GPU_OK.replace("{bf16: 1.0e+14}", "{bf16: fast}"),
     "gpus.my-gpu.peak_flops_per_s.bf16: Input should be a valid number"),
    (GPU_OK.replace("host_link: pcie4-x16", "host_link: pcie9"),
     "gpus.my-gpu.host_link: unknown link 'pcie9'"),
    (GPU_OK.replace("name: test", "id: other\n        name: test"),
     "gpus.my-gpu.id: the id is the entry's key"),
    ("links:\n  l1: {name: x, bytes_per_s: 0, latency_s: 0, source: s}\n",
     "links.l1.bytes_per_s: Input should be greater than 0"),
    ("models:\n  m: {source: s, config: {model_type: llama, hidden_size: 64, num_hidden_layers: 2,"
     " num_attention_heads: 4, vocab_size: 100, max_position_embeddings: 32}}\n",
     "models.m.config: llama models need intermediate_size"),
    ("models:\n  m: {source: s, config: {model_type: bert}}\n", "models.m.config.model_type"),
    ("models:\n  m: {source: s, config: {model_type: opt, hidden_size: 64, ffn_dim: 9,"
     " num_hidden_layers: 2, num_attention_heads: 5, vocab_size: 100,"
     " max_position_embeddings: 32}}\n",
     "models.m.config: hidden_size 64 is not a multiple of num_attention_heads 5 (give "
     "head_dim)"),
    ("models:\n  m: {config: {}}\n", "models.m.source: Field required"),
]


@pytest.mark.parametrize(("text", "expect"), BAD, ids=[str(i) for i in range(len(BAD))])
def test_malformed_catalog_file_is_one_line_naming_file_and_field(tmp_path, text, expect):
    path = _file(tmp_path, text)
    with pytest.raises(UserError) as err:
        load_catalog(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}: "), msg
    assert expect in msg, msg
    assert "got {" not in msg  # a whole-entry check does not echo the whole mapping
    assert "\n" not in msg


def test_missing_catalog_file(tmp_path):
    with pytest.raises(UserError, match="cannot read catalog file"):
        load_catalog(tmp_path / "nope.yaml")


def test_empty_user_file_changes_nothing(tmp_path):
    path = _file(tmp_path, "")
    assert set(load_catalog(path).gpus) == set(load_catalog().gpus)


def test_every_gpu_says_how_many_share_a_server():
    cat = load_catalog()
    per_node = {g.id: g.gpus_per_node for g in cat.gpus.values()}
    assert all(n >= 1 for n in per_node.values())
    assert per_node["h100"] == per_node["h200"] == per_node["a100-80gb"] == 8  # HGX boards
    assert per_node["a10"] == 4  # g5.12xlarge-style server


def test_non_utf8_catalog_file_is_one_line_naming_it(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("gpus:\n  h100: {name: caf\u00e9}\n".encode("latin-1"))
    with pytest.raises(UserError) as err:
        load_catalog(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}: not a UTF-8 text file (byte 0xe9") and "\n" not in msg


def test_a_framework_release_overrides_only_its_own_fields(tmp_path):
    """``<id>@<release>`` is the entry with the release's overheads; a release the entry
    does not list is one line naming the listed ones; a user file merges a release field
    by field; an id with '@' and a bad release name are refused."""
    cat = load_catalog()
    base, release = cat.framework("trtllm"), cat.framework("trtllm@1.0.0rc3")
    own = base.versions["1.0.0rc3"]
    assert release.version == "1.0.0rc3" and release.versions == {}
    assert (release.layer_s, release.tp_step_s) == (own.layer_s, own.tp_step_s)
    assert own.act_passes is None and release.act_passes == base.act_passes
    assert (release.tables, release.memory) == (base.tables, base.memory)
    with pytest.raises(UserError) as err:
        cat.framework("trtllm@0.1")
    assert str(err.value).startswith("framework 'trtllm@0.1': trtllm lists no overheads for "
                                     "version '0.1' (listed: 1.0.0rc3)")
    with pytest.raises(UserError, match="lists no overheads for version ''"):
        cat.framework("trtllm@")
    with pytest.raises(UserError, match="unknown framework 'nope'"):
        cat.framework("nope@1")
    path = tmp_path / "mine.yaml"
    path.write_text('frameworks: {trtllm: {versions: {"1.0.0rc3": {seq_s: 5.0e-6}}}}\n')
    mine = load_catalog(path).framework("trtllm@1.0.0rc3")
    assert (mine.seq_s, mine.layer_s) == (5e-6, own.layer_s)
    assert mine.source.startswith("step_s, tp_step_s, layer_s, seq_s: ")
    path.write_text('frameworks: {"vllm@1": {step_s: 0.0}}\n')
    with pytest.raises(UserError, match=r"frameworks.vllm@1: a framework id has no '@'"):
        load_catalog(path)
    path.write_text('frameworks: {vllm: {versions: {" 1": {step_s: 0.0, source: x}}}}\n')
    with pytest.raises(UserError, match="bad release name"):
        load_catalog(path)
    path.write_text('frameworks: {vllm: {versions: {1.0: {step_s: 0.0, source: x}}}}\n')
    with pytest.raises(UserError, match=r"release name 1\.0 is not a string: quote it"):
        load_catalog(path)
    with pytest.raises(UserError) as err:  # no calibrate hint for a name it cannot take
        cat.framework("trtllm@1@2")
    assert "calibrate" not in str(err.value)
    path.write_text('frameworks: {vllm: {versions: {"9": {source: named only}}}}\n')
    bare = load_catalog(path).framework("vllm@9")
    assert bare.step_s == cat.framework("vllm").step_s
    assert bare.source.startswith("named only; the overheads: ")
