"""The measured tables' disk cache: the same floats from disk, and nothing it holds is trusted
blindly (a damaged file is recomputed; a key that does not match is not used)."""

from __future__ import annotations

import shutil

import pytest

from hardware.timing import aic

pytest.importorskip("aiconfigurator_core", reason="measured tables need aiconfigurator-core")

ARGS = ("h100_sxm", "vllm", 128256, 4096)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSIM_CACHE_DIR", str(tmp_path))
    aic.head_table.cache_clear()
    yield tmp_path / f"aiconfigurator-core-{aic.PINNED}"
    aic.head_table.cache_clear()


def _no_tables(*args, **kwargs):
    raise AssertionError("the tables were loaded: the cache did not answer")


def test_a_cached_answer_is_the_computed_one_bit_for_bit(cache, monkeypatch):
    computed = aic.head_table(*ARGS)
    files = list(cache.glob("head_table-*.json"))
    assert len(files) == 1
    aic.head_table.cache_clear()
    monkeypatch.setattr(aic, "_engine", _no_tables)
    assert aic.head_table(*ARGS) == computed  # exact: JSON keeps every float's digits


def test_a_damaged_cache_file_is_recomputed(cache):
    computed = aic.head_table(*ARGS)
    (path,) = cache.glob("head_table-*.json")
    path.write_text('{"key": ')  # cut short
    aic.head_table.cache_clear()
    assert aic.head_table(*ARGS) == computed
    assert path.read_text().startswith('{"key"')  # rewritten whole


def test_an_answer_for_other_arguments_is_not_used(cache):
    computed = aic.head_table(*ARGS)
    other = ("h100_sxm", "vllm", 32000, 4096)
    # what a hash collision would leave: the other query's file holding this answer
    shutil.copy(aic._cache_path("head_table", ARGS)[0], aic._cache_path("head_table", other)[0])
    aic.head_table.cache_clear()
    assert aic.head_table(*other) != computed


def test_uncovered_shapes_are_cached_as_unavailable(cache, monkeypatch):
    with pytest.raises(aic.TablesUnavailable) as first:
        aic.head_table("h100_sxm", "no-such-framework", 128256, 4096)
    aic.head_table.cache_clear()
    monkeypatch.setattr(aic, "_engine", _no_tables)
    with pytest.raises(aic.TablesUnavailable) as again:
        aic.head_table("h100_sxm", "no-such-framework", 128256, 4096)
    assert str(again.value) == str(first.value)


def test_the_cache_can_be_turned_off(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSIM_CACHE_DIR", "off")
    aic.head_table.cache_clear()
    aic.head_table(*ARGS)
    aic.head_table.cache_clear()
    assert not any(tmp_path.iterdir())
