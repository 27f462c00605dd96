"""The CPU's capabilities as read from /proc/cpuinfo (a written file stands in for it: the
``cpuinfo`` fixture of conftest.py)."""
import builtins

import pytest

from mlplab.utils import cpu


@pytest.mark.parametrize("flags, expect", [("fpu avx2 fma", False), ("avx2 avx512f avx512_bf16 x", True),
                                           ("avx2 amx_bf16 amx_tile", True), ("avx512_bf16_x", False)])
def test_native_bf16_read_from_cpu_flags(cpuinfo, flags, expect):
    cpuinfo("GenuineIntel", flags)
    assert cpu.cpu_has_native_bf16() is expect


@pytest.mark.parametrize("vendor, flags, expect", [("GenuineIntel", "avx2 avx512f", True),
                                                   ("GenuineIntel", "avx2 fma", False),
                                                   ("AuthenticAMD", "avx2 avx512f", False)])
def test_512_bit_vectors_on_intel_with_avx512_only(cpuinfo, vendor, flags, expect):
    cpuinfo(vendor, flags)
    assert cpu.cpu_prefers_512_bit_vectors() is expect


def test_first_processor_and_unreadable_file(cpuinfo, monkeypatch):
    cpuinfo("GenuineIntel", "avx512f avx512_bf16")
    info = cpu.cpu_info()
    assert info["vendor_id"] == "GenuineIntel" and info["model name"] == "Some CPU"
    assert info["flags"] == "avx512f avx512_bf16"  # not the second processor's
    monkeypatch.setattr(builtins, "open", lambda *a, **k: (_ for _ in ()).throw(OSError("no /proc")))
    cpu.cpu_info.cache_clear()  # read again
    cpu._flags.cache_clear()
    assert set(cpu.cpu_info()) == {"machine"} and not cpu.cpu_has_native_bf16()


@pytest.mark.parametrize("vendor, flags, expect", [
    ("GenuineIntel", "avx2 avx512f avx512_bf16 amx_bf16", "genuineintel-amx"),
    ("AuthenticAMD", "avx2 avx512f avx512_bf16", "authenticamd-avx512bf16"),
    ("AuthenticAMD", "fpu avx2 fma", "authenticamd-avx2")])
def test_machine_tag_names_the_fastest_matmul_path(cpuinfo, vendor, flags, expect):
    cpuinfo(vendor, flags)  # model name "Some CPU" names no known family: the vendor stands in
    assert cpu.machine_tag() == expect
