"""The wheel: built from a copy of the project, installed into an empty folder, and run from
another directory (no ``src/`` on the path): ``python -m mlplab --version``, the ``mlplab``
script, a model forward, the fused kernels' C source and the LICENSE inside, the SPDX licence in
its metadata."""
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from mlplab import __version__

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_installs_and_runs_from_another_directory(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, project / name)
    shutil.copytree(ROOT / "src", project / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(tmp_path / "dist"), str(project)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-2000:]
    wheel = next((tmp_path / "dist").glob("mlplab-*.whl"))
    assert wheel.name == f"mlplab-{__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = z.read(f"mlplab-{__version__}.dist-info/METADATA").decode()
    assert {"mlplab/__main__.py", "mlplab/layers/kernels/residual_norm.c",
            f"mlplab-{__version__}.dist-info/licenses/LICENSE"} <= names
    assert "License-Expression: MIT" in meta and "Requires-Python: >=3.10" in meta and "Classifier: " in meta

    site = tmp_path / "site"
    install = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "-q",
                              "--target", str(site), str(wheel)], capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stderr[-2000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}  # the installed copy only (torch from this interpreter)
    version = subprocess.run([sys.executable, "-m", "mlplab", "--version"], cwd=elsewhere, env=env,
                             capture_output=True, text=True, timeout=120)
    assert version.returncode == 0 and version.stdout.startswith(f"mlplab {__version__}"), version.stderr
    code = ("import mlplab, torch; m = mlplab.create_model('s_mixer', image_size=8, patch_size=2, hidden_dim=8, "
            "depth=1); print(mlplab.__file__); print(tuple(m(torch.randn(2, 3, 8, 8)).shape))")
    forward = subprocess.run([sys.executable, "-c", code], cwd=elsewhere, env=env, capture_output=True, text=True,
                             timeout=120)
    assert forward.returncode == 0, forward.stderr[-2000:]
    where, shape = forward.stdout.split()[:2]
    assert where.startswith(str(site)) and shape == "(2,"
    script = subprocess.run([str(site / "bin" / "mlplab"), "--help"], cwd=elsewhere, env=env,
                            capture_output=True, text=True, timeout=120)
    assert script.returncode == 0 and "COMMAND" in script.stdout


def test_the_package_claims_only_the_platform_it_is_tested_on():
    """CI and every measurement run on Linux: the classifiers claim no other operating system."""
    import tomllib

    meta = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    systems = [c for c in meta["classifiers"] if c.startswith("Operating System")]
    assert systems == ["Operating System :: POSIX :: Linux"]
