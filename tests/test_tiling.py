"""SRAM tiling: traffic never below compulsory, shrinking SRAM never reduces traffic, resident when it fits."""

from hypothesis import given
from hypothesis import strategies as st
from tilewright.engine.perf.tiling import matmul_traffic

dims = st.integers(1, 4096)


@given(dims, dims, dims, st.floats(1e3, 1e9))
def test_traffic_at_least_compulsory(m, n, k, sram):
    t = matmul_traffic(m, n, k, sram)
    assert t.dram_elems >= m * k + k * n + m * n - 1e-6


@given(dims, dims, dims, st.floats(1e3, 1e8))
def test_more_sram_never_more_traffic(m, n, k, sram):
    assert matmul_traffic(m, n, k, sram * 4).dram_elems <= matmul_traffic(m, n, k, sram).dram_elems + 1e-6


def test_small_problem_is_resident():
    assert matmul_traffic(16, 16, 16, 1e6).dataflow == "resident"


def test_large_weights_small_sram_streams_weights_repeatedly():
    # a 6144×(3·6144/16) shard of weights against 1.5 M elements of SRAM: weights cannot stay
    t = matmul_traffic(2048, 2304, 6144, 1.5e6)
    assert t.dram_elems > 2048 * 6144 + 6144 * 2304 + 2048 * 2304
