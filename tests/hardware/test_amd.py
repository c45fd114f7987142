"""AMD Instinct MI300X and MI355X: datasheet fields by their derivation, the roofline
borrowed (not fitted) from the NVIDIA part of the same memory class, and what follows."""

from __future__ import annotations

import pytest

from hardware import load_catalog
from hardware.cost import CostModel
from hardware.deployment import Deployment
from specdec.errors import UserError

CAT = load_catalog()


@pytest.mark.parametrize(("gpu", "cus", "fp8_per_cu_clock", "clock_hz"), [
    ("mi300x", 304, 4096, 2.1e9),  # CDNA3
    ("mi355x", 256, 8192, 2.4e9),  # CDNA4: twice the FP8 rate per CU
])
def test_the_peaks_are_cus_times_rate_times_clock(gpu, cus, fp8_per_cu_clock, clock_hz):
    g = CAT.gpu(gpu)
    fp8 = cus * fp8_per_cu_clock * clock_hz
    assert g.peak("fp8") == pytest.approx(fp8, rel=1e-4)
    assert g.peak("bf16") == pytest.approx(fp8 / 2, rel=1e-4)


def test_only_the_mi355x_has_an_fp4_peak():
    assert CAT.gpu("mi355x").peak("fp4") == pytest.approx(2 * CAT.gpu("mi355x").peak("fp8"),
                                                          rel=1e-4)
    model = CAT.model("llama-3-8b")
    with pytest.raises(UserError, match="gpu mi300x has no FP4 peak"):
        Deployment(model=model, gpu=CAT.gpu("mi300x"), weight_bits=4, fp4_format="mxfp4",
                   compute_dtype="fp4")


@pytest.mark.parametrize(("amd", "nvidia"), [("mi300x", "h200"), ("mi355x", "b200")])
def test_the_roofline_is_borrowed_and_says_so(amd, nvidia):
    a, n = CAT.gpu(amd).roofline, CAT.gpu(nvidia).roofline
    assert not a.calibrated and "borrowed, not fitted" in a.source and nvidia in a.source
    fields = ("eta_weights", "eta_fp8", "weights_half_bytes", "eta_kv", "kv_half_seqs",
              "eta_compute", "corner")
    assert [getattr(a, f) for f in fields] == [getattr(n, f) for f in fields]
    cost = CostModel(Deployment(model=CAT.model("llama-3.1-8b"), gpu=CAT.gpu(amd)), CAT)
    assert cost.backend == "roofline" and "has no measured kernel tables" in cost.timing.note


def test_a_70b_model_in_16_bits_fits_one_mi300x_but_not_one_h200():
    model = CAT.model("llama-3.1-70b")
    CostModel(Deployment(model=model, gpu=CAT.gpu("mi300x"), kv_tokens=8192), CAT)
    with pytest.raises(UserError, match="does not fit"):
        CostModel(Deployment(model=model, gpu=CAT.gpu("h200"), kv_tokens=8192), CAT)


def test_tensor_parallelism_goes_over_infinity_fabric():
    dep = Deployment(model=CAT.model("llama-3.1-70b"), gpu=CAT.gpu("mi355x"), tp=8)
    cost = CostModel(dep, CAT)
    assert cost.tp_link.id == "infinity-fabric-4"
