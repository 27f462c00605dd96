"""Two versions of the fused seam kernels (``src/mlplab/layers/kernels``) side by side, in one process.

Kernel changes move a training step by a few per cent, less than this machine's drift between
two processes (up to 1.3x over an afternoon). Here both builds are loaded into one process and
the same models' training steps alternate between them, round by round (A, B, A, B, ...), so
the ratio of the two is measured under the same load. The old version is a git revision's
kernel sources (default ``HEAD``: the working tree's uncommitted edits against the last commit)
or a directory; the new one is the working tree's (or ``--new``, the same way). The Python side
is the working tree's for both, so the two versions must take the arguments of
``mlplab.layers.fused.SIGNATURES`` (sources from before the kernels returned a status, which
return nothing, are called as such).

It prints each model's median step time with each build, the old/new paired median ratio (> 1:
the new build is faster) and RP/normal with each build. Its own noise: the same sources against
themselves (``--old HEAD`` on a clean tree) measure 0.99-1.00 (S-Mixer, fp32, 1 thread, 21 rounds),
so read differences under ~1.5% as none.

``--old-python REV`` compares the Python side instead: REV's ``src/mlplab/layers/fused.py`` (the
single module it was before the split into ``fused/build.py`` and ``fused/ops.py``) is loaded
beside this tree's package, its custom ops renamed (``mlplab_ab::``), and the Mixers' fused seams
call one or the other, round by round; both call this tree's kernels.

    . .venv/bin/activate
    python benchmarks/bench_kernel_ab.py --dtype bf16 --threads 1 --reps 21
    python benchmarks/bench_kernel_ab.py --old HEAD~3 --dtype fp32
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, default_out, describe, environment, interleaved, setup_torch, train_step_fn, write_results  # noqa: E402

import mlplab  # noqa: E402
from mlplab.layers import fused  # noqa: E402
from mlplab.layers.fused import build  # noqa: E402
from mlplab.models import mixer_fused  # noqa: E402

KERNELS = Path("src/mlplab/layers/kernels")


def sources_of(revision: str, into: Path) -> Path:
    """The kernel sources of a git revision (or a directory holding them), as a directory."""
    if Path(revision).is_dir():
        return Path(revision)
    for name in build._SOURCES:
        text = subprocess.run(["git", "show", f"{revision}:{KERNELS / name}"], cwd=REPO, capture_output=True,
                              text=True)
        if text.returncode:
            raise SystemExit(f"cannot read {KERNELS / name} at {revision!r}: {text.stderr.strip()}")
        (into / name).write_text(text.stdout)
    return into


def load_builds(dirs: dict[str, Path]) -> dict[str, dict[bool, object]]:
    """Both builds (default and 512-bit) of each source directory, compiled into the kernel cache."""
    builds, home = {}, build._KERNELS
    try:
        for tag, d in dirs.items():
            build._KERNELS = d
            build._library.cache_clear()
            builds[tag] = {wide: build._library(wide)[0] for wide in (False, True)}
            if builds[tag][False] is None:
                raise SystemExit(f"the {tag} kernels do not build: {build._library()[1]}")
            if "residual_norm_api.h" not in (d / "residual_norm.c").read_text():  # kernels that return void
                for kernels in filter(None, builds[tag].values()):
                    for name in fused.SIGNATURES:
                        for v in ("f64", "f32", "bf16"):
                            kernels.function(name, v).restype = None
    finally:
        build._KERNELS = home
        build._library.cache_clear()
    return builds


def python_of(revision: str):
    """REV's single-module ``mlplab.layers.fused``, loaded as ``mlplab.layers._fused_ab`` with its
    custom ops in the ``mlplab_ab`` namespace (the names of this tree's are taken)."""
    path = "src/mlplab/layers/fused.py"
    text = subprocess.run(["git", "show", f"{revision}:{path}"], cwd=REPO, capture_output=True, text=True)
    if text.returncode:
        raise SystemExit(f"cannot read {path} at {revision!r}: {text.stderr.strip()}")
    module = types.ModuleType("mlplab.layers._fused_ab")
    module.__package__, module.__file__ = "mlplab.layers", str(REPO / path)  # its kernels: layers/kernels
    sys.modules[module.__name__] = module
    exec(compile(text.stdout.replace('"mlplab::', '"mlplab_ab::'), module.__file__, "exec"), module.__dict__)
    return module


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--old", default="HEAD", help="git revision or directory of the old kernel sources")
    p.add_argument("--new", default=None, help="git revision or directory of the new ones (default: the working tree)")
    p.add_argument("--old-python", default=None, metavar="REV",
                   help="compare REV's Python side (layers/fused.py) with this tree's instead, on this tree's kernels")
    p.add_argument("--dtype", default="bf16", choices=["fp32", "bf16"])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--clock", default="wall", choices=["wall", "cpu"],
                   help="wall time, or process CPU time (fair under contention with --threads 1)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--models", default="s_mixer,rp_s_mixer", help="comma list of registered Mixers")
    p.add_argument("--size", default="64,64,8", help="S,C,L (32x32x3 images, patch 4: S = 64)")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--out", type=Path, default=default_out("bench_kernel_ab"))
    a = p.parse_args(argv)
    setup_torch(a.threads)
    env = environment()
    print(describe(env), flush=True)
    S, C, L = (int(v) for v in a.size.split(","))
    current = {"tag": "new"}
    if a.old_python:
        sides = {"old": python_of(a.old_python), "new": fused}
        switch = lambda tag: setattr(mixer_fused, "fused", sides[tag])  # noqa: E731
    else:
        with tempfile.TemporaryDirectory() as old, tempfile.TemporaryDirectory() as new:
            builds = load_builds({"old": sources_of(a.old, Path(old)),
                                  "new": sources_of(a.new, Path(new)) if a.new else REPO / KERNELS})
        build.kernels_for = lambda c: (build.wide_rows(c) and builds[current["tag"]][True]) \
            or builds[current["tag"]][False]
        switch = lambda tag: current.update(tag=tag)  # noqa: E731
    x, y = torch.randn(a.batch, 3, 32, 32), torch.randint(0, 10, (a.batch,))
    models = [m for m in a.models.split(",") if m]
    candidates = {}
    for name in models:
        model = mlplab.create_model(name, num_tokens=S, hidden_dim=C, depth=L)
        step = train_step_fn(model, x, y, "adamw", a.dtype)
        for tag in ("old", "new"):
            def run(step=step, tag=tag):
                switch(tag)
                step()
            candidates[f"{name}/{tag}"] = run
    times = interleaved(candidates, a.reps, a.warmup, clock=a.clock)
    out = {k: {"median_ms": 1e3 * statistics.median(v)} for k, v in times.items()}
    for k, v in out.items():
        print(f"{k:24s} {v['median_ms']:8.2f} ms")
    ratios = {}
    for name in models:
        r = statistics.median(o / n for o, n in zip(times[f"{name}/old"], times[f"{name}/new"]))
        ratios[f"{name} old/new"] = r
        print(f"{name}: old/new paired median {r:.3f} (> 1: the new kernels are faster)")
    if {"s_mixer", "rp_s_mixer"} <= set(models):
        for tag in ("old", "new"):
            r = statistics.median(rp / n for rp, n in zip(times[f"rp_s_mixer/{tag}"], times[f"s_mixer/{tag}"]))
            ratios[f"RP/normal {tag}"] = r
            print(f"RP/normal with the {tag} kernels: {r:.3f}")
    write_results(a.out, {"benchmark": "bench_kernel_ab", "args": {k: str(v) for k, v in vars(a).items()},
                          "environment": env, "results": out, "ratios": ratios, "times_s": times})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
