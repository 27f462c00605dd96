"""A written file stands in for /proc/cpuinfo (tests of mlplab.utils.cpu and .machine)."""
import builtins

import pytest

from mlplab.utils import cpu


def forget_cpu():
    """Drop what cpu.py read (it reads /proc/cpuinfo once per process)."""
    cpu.cpu_info.cache_clear()
    cpu._flags.cache_clear()


@pytest.fixture
def cpuinfo(monkeypatch, tmp_path):
    """Write the text /proc/cpuinfo reads as: two processors, only the first counts."""
    path = tmp_path / "cpuinfo"
    real_open = builtins.open
    monkeypatch.setattr(builtins, "open", lambda f, *a, **k: real_open(path if f == "/proc/cpuinfo" else f, *a, **k))

    def write(vendor, flags, model="Some CPU"):
        forget_cpu()
        block = f"processor\t: {{}}\nvendor_id\t: {vendor}\nmodel name\t: {model}\nflags\t\t: {flags}\n\n"
        path.write_text(block.format(0) + block.format(1).replace(flags, "other_flag"))
    yield write
    forget_cpu()  # the rest of the suite sees the real CPU
