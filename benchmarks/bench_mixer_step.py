"""Training-step throughput of mlplab's Mixers against timm's MlpMixer and a plain reference.

One step = forward + cross-entropy + backward + optimizer step (SGD-Nesterov or AdamW) on a
fixed batch of random 32×32×3 images (224×224×3 for ``b16``), on the CPU or, with ``--device
cuda``, a GPU. All candidates of one suite are timed *interleaved*
(A, B, C, A, B, C, ...) after a warm-up, together with a large GEMM, so that their ratios and
their share of the machine's matmul rate (MFU) are measured under the same load.

Suites (sizes from the command line):
  mixer : mlplab ``mlp_mixer``, mlplab ``rp_mlp_mixer``, timm ``MlpMixer`` (same C, S, D_S, D_C, L),
          and ``reference`` (nn.Linear + transposes, per-patch Linear stem, written below).
  smixer: mlplab ``s_mixer``, ``rp_s_mixer`` and the reference S-Mixer (timm has none).
  b16   : the published Mixer-B/16 at 224×224, 1000 classes (``mixer_b16``: P=16, C=768,
          L=12, D_S=384, D_C=3072), its RP version (``rp_blocks=all``), timm and the reference:
          a GPU size (``--quick`` shrinks it to 32×32 and 2 blocks for a CPU smoke run;
          ``scripts/gpu_check.py`` never does). timm is timed where it imports.
  ``--compile`` adds both mlplab models under ``torch.compile`` (normal and RP), so eager and
  compiled, normal and RP are timed in the same interleaved rounds.
  ``--with-generic`` adds mlplab computing every PK layer by gathers (``compute_by_definition``):
  the "before" of the speed work, in the same run (fp32 only).
  ``--with-unfused`` adds mlplab with its fused seams off (``impl = "module"``: the module
  path, LN/act/skip as separate ops), eager and, with ``--compile``, compiled.

The GEMM rate is that of ``F.linear`` on two n×n tensors already in the run's dtype, under
autocast for bf16 (the route the models' matmuls take, without the casts). On CPUs without
AVX512-BF16 bf16 GEMMs are emulated and far slower than fp32: compare the two GEMM lines before
reading anything into bf16 timings. With more runnable threads than cores (a shared machine),
every parallel region waits for the scheduler; ``--threads 1`` then measures the code rather than the contention.

MFU: model FLOPs per step = 3 × forward matmul FLOPs (torch.utils.flop_counter) × batch,
divided by the step time and by the GEMM rate measured in the same interleaved loop; with
``--peak-tflops`` also by that peak for bf16 rows (989 for an H100 SXM's dense bf16) and with
``--peak-tflops-fp32`` for fp32 rows (67 on an H100 SXM): a bf16 peak is never applied to fp32.

``--breakdown`` then profiles the eager mlplab models (``torch.profiler``, self CPU time) and
splits their step into GEMMs (aten::mm/addmm/bmm), the fused seams and everything else, as
shares and as ms of the median step; "MFU if only GEMMs" is the MFU the step would have if
everything but its GEMMs took no time: a target above it needs faster GEMMs at these shapes.

    . .venv/bin/activate
    PYTHONPATH=src:/tmp/timmlib:../shared/tools/timm-shim python benchmarks/bench_mixer_step.py
    python benchmarks/bench_mixer_step.py --quick          # smoke run, a minute
    # on one GPU: the MLP-Mixer size, Mixer-B/16 and the S-Mixer, bf16, eager and compiled
    python benchmarks/bench_mixer_step.py --device cuda --suites mixer,b16,smixer --dtypes bf16 \
        --batch 256 --optimizer adamw --compile --peak-tflops 989
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    add_common_args,
    autocast_ctx,
    describe,
    environment,
    fmt_table,
    forward_flops,
    interleaved,
    setup_torch,
    summarise,
    train_step_fn,
    write_results,
)

import mlplab  # noqa: E402
from mlplab.experiments.verdicts import ratio_interval  # noqa: E402
from mlplab.models.impl import compute_by_definition  # noqa: E402


# --------------------------------------------------------------------------- reference models
class RefMlp(nn.Module):
    def __init__(self, d: int, h: int):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, h), nn.Linear(h, d)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class RefMixerBlock(nn.Module):
    """x + TokenMLP(LN(x)ᵀ)ᵀ, then x + ChannelMLP(LN(x)); or the single-layer S-Mixer block."""

    def __init__(self, S: int, C: int, ds: int, dc: int, single: bool):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(C), nn.LayerNorm(C)
        if single:
            self.tok = nn.Sequential(nn.Linear(S, S), nn.GELU())
            self.ch = nn.Sequential(nn.Linear(C, C), nn.GELU())
        else:
            self.tok, self.ch = RefMlp(S, ds), RefMlp(C, dc)

    def forward(self, x):  # (B, S, C)
        x = x + self.tok(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.ch(self.norm2(x))


class RefMixer(nn.Module):
    """The straightforward Mixer: per-patch Linear stem, L blocks, LN, token mean, head (S0 tokens
    of P×P patches of a 3-channel image)."""

    def __init__(self, S0: int, C: int, ds: int, dc: int, depth: int, patch: int, single: bool, classes: int = 10):
        super().__init__()
        self.patch = patch
        self.stem = nn.Linear(3 * patch * patch, C)
        self.blocks = nn.Sequential(*[RefMixerBlock(S0, C, ds, dc, single) for _ in range(depth)])
        self.norm = nn.LayerNorm(C)
        self.head = nn.Linear(C, classes)

    def forward(self, x):  # (N, 3, H, W)
        N, ch, H, W = x.shape
        P = self.patch
        x = x.reshape(N, ch, H // P, P, W // P, P).permute(0, 2, 4, 1, 3, 5).reshape(N, -1, ch * P * P)
        x = self.blocks(self.stem(x))
        return self.head(self.norm(x).mean(1))


def with_timm(a: argparse.Namespace) -> bool:
    """Whether the suite times timm: unless ``--no-timm``, where timm imports (a node's image may
    lack it; the suite then times the rest and says so)."""
    if a.no_timm:
        return False
    if importlib.util.find_spec("timm") is None:
        print("timm is not importable here: no timm row (pip install timm to compare)", flush=True)
        return False
    return True


def timm_mixer(C: int, ds: int, dc: int, depth: int, patch: int, image: int = 32, classes: int = 10):
    """timm's MlpMixer with token hidden D_S and channel hidden D_C (timm: int(ratio·C) each)."""
    from timm.models.mlp_mixer import MlpMixer

    m = MlpMixer(img_size=image, patch_size=patch, num_classes=classes, embed_dim=C, num_blocks=depth,
                 mlp_ratio=(ds / C, dc / C))
    blk = m.blocks[0]
    assert blk.mlp_tokens.fc1.out_features == ds and blk.mlp_channels.fc1.out_features == dc, "timm sizes"
    return m


def _unfused(m: nn.Module) -> nn.Module:
    m.impl = "module"
    return m


def _nparams(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


# --------------------------------------------------------------------------- suites
#: Mixer-B/16 (Tolstikhin et al. 2021, Table 1): patch, C, L, D_S, D_C; at 224×224, 1000 classes
B16 = dict(patch=16, C=768, depth=12, ds=384, dc=3072, image=224, classes=1000)


def suite_input(suite: str, a: argparse.Namespace) -> tuple[int, int]:
    """(image side, classes) of a suite's inputs."""
    return (a.b16_image, 1000) if suite == "b16" else (32, 10)


def build_b16(a: argparse.Namespace) -> dict[str, nn.Module]:
    """Mixer-B/16 (``mixer_b16``), its RP version, and the reference/timm at its sizes."""
    b = B16
    kw = dict(image_size=a.b16_image, depth=a.b16_depth)
    models: dict[str, nn.Module] = {"mlplab": mlplab.create_model("mixer_b16", **kw)}
    models["mlplab_rp"] = mlplab.create_model("mixer_b16", rp_blocks="all", **kw)
    if a.compile:
        models["mlplab_compiled"] = torch.compile(mlplab.create_model("mixer_b16", **kw))
        models["mlplab_rp_compiled"] = torch.compile(mlplab.create_model("mixer_b16", rp_blocks="all", **kw))
    if with_timm(a):
        models["timm"] = timm_mixer(b["C"], b["ds"], b["dc"], a.b16_depth, b["patch"], a.b16_image, b["classes"])
    S0 = (a.b16_image // b["patch"]) ** 2
    models["reference"] = RefMixer(S0, b["C"], b["ds"], b["dc"], a.b16_depth, b["patch"], single=False,
                                   classes=b["classes"])
    return models


def build_suite(suite: str, dtype: str, a: argparse.Namespace) -> dict[str, nn.Module]:
    P = 4
    S0 = (32 // P) ** 2
    if suite == "b16":
        models = build_b16(a)
    elif suite == "mixer":
        kw = dict(hidden_dim=a.C, num_tokens=a.S, token_hidden=a.ds, channel_hidden=a.dc, depth=a.depth)
        if a.S != S0:
            raise SystemExit(f"timm and the reference need S = S0 = {S0} (patch 4 on 32x32); got S={a.S}")
        models: dict[str, nn.Module] = {"mlplab": mlplab.create_model("mlp_mixer", **kw)}
        if a.with_generic and dtype == "fp32":  # under autocast the fast path is off anyway
            models["mlplab_generic"] = compute_by_definition(mlplab.create_model("mlp_mixer", **kw))
        models["mlplab_rp"] = mlplab.create_model("rp_mlp_mixer", **kw)
        if a.with_unfused:
            models["mlplab_unfused"] = _unfused(mlplab.create_model("mlp_mixer", **kw))
        if a.compile:
            models["mlplab_compiled"] = torch.compile(mlplab.create_model("mlp_mixer", **kw))
            if a.with_unfused:
                models["mlplab_unfused_compiled"] = torch.compile(_unfused(mlplab.create_model("mlp_mixer", **kw)))
            models["mlplab_rp_compiled"] = torch.compile(mlplab.create_model("rp_mlp_mixer", **kw))
        if with_timm(a):
            models["timm"] = timm_mixer(a.C, a.ds, a.dc, a.depth, P)
        models["reference"] = RefMixer(S0, a.C, a.ds, a.dc, a.depth, P, single=False)
    elif suite == "smixer":
        kw = dict(hidden_dim=a.s_dim, num_tokens=S0, depth=a.s_depth)
        models = {"mlplab": mlplab.create_model("s_mixer", **kw)}
        if a.with_generic and dtype == "fp32":
            models["mlplab_generic"] = compute_by_definition(mlplab.create_model("s_mixer", **kw))
        models["mlplab_rp"] = mlplab.create_model("rp_s_mixer", **kw)
        if a.with_unfused:
            models["mlplab_unfused"] = _unfused(mlplab.create_model("s_mixer", **kw))
        if a.compile:
            models["mlplab_compiled"] = torch.compile(mlplab.create_model("s_mixer", **kw))
            if a.with_unfused:
                models["mlplab_unfused_compiled"] = torch.compile(_unfused(mlplab.create_model("s_mixer", **kw)))
            models["mlplab_rp_compiled"] = torch.compile(mlplab.create_model("rp_s_mixer", **kw))
        models["reference"] = RefMixer(S0, a.s_dim, 0, 0, a.s_depth, P, single=True)
    else:
        raise SystemExit(f"unknown suite {suite!r}; choose mixer, smixer or b16")
    counts = {k: _nparams(m) for k, m in models.items()}
    if len(set(counts.values())) != 1:
        raise SystemExit(f"candidates differ in size: {counts}")
    return models


def run_suite(suite: str, dtype: str, batch: int, a: argparse.Namespace) -> dict[str, Any]:
    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    models = {k: m.to(dev) for k, m in build_suite(suite, dtype, a).items()}
    image, classes = suite_input(suite, a)
    x = torch.randn(batch, 3, image, image, device=dev)
    y = torch.randint(0, classes, (batch,), device=dev)
    ref_name = "reference"
    flops = {k: forward_flops(m, x[:1]) for k, m in models.items() if not k.endswith("_compiled")}
    flops.update({k: flops[k[:-len("_compiled")]] for k in models if k.endswith("_compiled")})
    fwd = flops[ref_name]
    steps = {k: train_step_fn(m, x, y, a.optimizer, dtype) for k, m in models.items()}
    n = a.gemm_n if dtype == "fp32" else a.gemm_n_bf16
    cast = torch.bfloat16 if dtype == "bf16" else torch.float32
    ga = torch.randn(n, n, device=dev).to(cast)  # operands cast once: the rate is the GEMM's, not the casts'
    gb = torch.randn(n, n, device=dev).to(cast)

    def gemm():  # the model's own route: F.linear under autocast when bf16
        with autocast_ctx(dtype, dev.type):
            out = F.linear(ga, gb)
        if dev.type == "cuda":
            torch.cuda.synchronize()  # the steps wait for their loss; the GEMM for itself
        return out

    cands = dict(steps)
    cands["gemm"] = gemm
    print(f"\n[{suite} / {dtype}] batch {batch}, fwd {fwd / 1e6:.1f} MFLOP/example, "
          f"params {_nparams(models[ref_name]):,}, gemm {n}³; warm-up {a.warmup}, {a.reps} rounds, "
          f"{a.clock} clock, {torch.get_num_threads()} threads", flush=True)
    load0 = os.getloadavg()
    times = interleaved(cands, a.reps, a.warmup, log=lambda s: print(s, flush=True), clock=a.clock)
    gemm_s = statistics.median(times.pop("gemm"))
    gemm_gflops = 2 * n**3 / gemm_s / 1e9
    step_flops = 3 * fwd * batch
    base = "timm" if "timm" in times else ref_name
    peak_tflops = a.peak_tflops if dtype == "bf16" else a.peak_tflops_fp32  # a datasheet peak is per dtype
    rows, out = [], {}
    for k, ts in times.items():
        med = statistics.median(ts)
        r = {
            **summarise(ts),
            "ms_per_step": 1e3 * med,
            "images_per_s": batch / med,
            "fwd_flops_per_example_counted": flops[k],
            "gflops_per_s": step_flops / med / 1e9,
            "mfu": step_flops / med / 1e9 / gemm_gflops,
            "mfu_vs_peak": step_flops / med / 1e12 / peak_tflops if peak_tflops else None,
            "speed_vs_reference": statistics.median(times[ref_name]) / med,
        }
        if "timm" in times:
            r["speed_vs_timm"] = statistics.median(times["timm"]) / med
        out[k] = r
    # paired per-round ratios (robust to drift): time(candidate) / time(base) in the same round
    for k in out:
        out[k][f"time_ratio_vs_{base}_paired_median"] = statistics.median(
            t / b for t, b in zip(times[k], times[base]))
    rp_ratio = statistics.median(r / m for r, m in zip(times["mlplab_rp"], times["mlplab"]))
    rp_ratio_c = (statistics.median(r / m for r, m in zip(times["mlplab_rp_compiled"], times["mlplab_compiled"]))
                  if "mlplab_compiled" in times else None)
    rp_target = {k: rp_against_target(times, k) for k in ("", "_compiled") if f"mlplab{k}" in times}
    for k, r in out.items():
        rows.append([k, r["ms_per_step"], r["images_per_s"], r["speed_vs_reference"],
                     r.get("speed_vs_timm", float("nan")), r["gflops_per_s"], 100 * r["mfu"]]
                    + ([100 * r["mfu_vs_peak"]] if peak_tflops else []))
    peak = [f"MFU % of {peak_tflops:g} TFLOP/s"] if peak_tflops else []
    print(fmt_table(["model", "ms/step", "img/s", "speed/ref", "speed/timm", "GFLOP/s", "MFU %"] + peak, rows))
    print(f"GEMM {dtype} {n}³: {gemm_gflops:.1f} GFLOP/s; RP/normal step-time ratio (paired median) "
          f"{rp_ratio:.3f} eager" + (f", {rp_ratio_c:.3f} compiled" if rp_ratio_c else "") +
          f"; load {load0[0]:.1f} -> {os.getloadavg()[0]:.1f}", flush=True)
    for k, v in rp_target.items():
        ci = "[{:.3f}, {:.3f}] (95% bootstrap)".format(*v.interval) if v.interval else f"({v.detail})"
        print(f"RP/normal{k.replace('_', ' ')}: ratio of medians {v.effect:.3f} {ci}, target <= {RP_TARGET}: "
              f"{v.word}", flush=True)
    shares = {}
    if a.breakdown and dev.type != "cpu":
        print("--breakdown profiles CPU time: skipped on", dev.type)
    elif a.breakdown:
        for k in (k for k in ("mlplab", "mlplab_rp") if k in steps):
            sh = step_breakdown(steps[k])
            ms = {c: sh[c] * out[k]["ms_per_step"] for c in sh}
            ceiling = step_flops / (ms["gemm"] / 1e3) / 1e9 / gemm_gflops
            shares[k] = {"share": sh, "ms": ms, "mfu_if_only_gemms": ceiling}
            print(f"{k}: GEMMs {ms['gemm']:.1f} ms ({100 * sh['gemm']:.0f}%), seams {ms['seams']:.1f} ms "
                  f"({100 * sh['seams']:.0f}%), rest {ms['other']:.1f} ms ({100 * sh['other']:.0f}%); "
                  f"MFU if only GEMMs {100 * ceiling:.1f}%", flush=True)
    return {
        "breakdown": shares,
        "suite": suite, "dtype": dtype, "batch": batch, "device": a.device, "image": image,
        "peak_tflops": peak_tflops, "optimizer": a.optimizer, "clock": a.clock,
        "num_threads": torch.get_num_threads(),
        "fwd_flops_per_example": fwd, "step_flops": step_flops, "gemm_n": n, "gemm_gflops": gemm_gflops,
        "rp_over_normal_time_ratio": rp_ratio, "rp_over_normal_time_ratio_compiled": rp_ratio_c,
        "rp_over_normal_vs_target": {k or "_eager": {"ratio_of_medians": v.effect, "interval": v.interval,
                                                     "target": RP_TARGET, "verdict": v.word}
                                     for k, v in rp_target.items()},
        "loadavg_start": list(load0), "loadavg_end": list(os.getloadavg()),
        "times_s": times, "results": out,
    }


#: the speed issue's target for the RP/normal step-time ratio (the paper's V100 ratio: 1.05)
RP_TARGET = 1.05


def rp_against_target(times: dict[str, list[float]], suffix: str = ""):
    """RP/normal step time as a ratio of medians with a 95% bootstrap interval, against
    ``RP_TARGET`` (HELD: the whole interval below it; DID NOT HOLD: above it)."""
    return ratio_interval(times[f"mlplab_rp{suffix}"], times[f"mlplab{suffix}"], below=RP_TARGET,
                          what="RP/normal step time")


GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")
SEAM_OPS = ("_ResidualNorm", "_ResidualNormBackward", "_LayerNormRows", "_LayerNormRowsBackward")


def step_breakdown(step, n: int = 5) -> dict[str, float]:
    """Shares of an eager step's self CPU time (torch.profiler, ``n`` steps): GEMMs, fused seams
    (the autograd.Functions that call the kernels), the rest."""
    from torch.profiler import profile

    with profile() as prof:
        for _ in range(n):
            step()
    total = {"gemm": 0.0, "seams": 0.0, "other": 0.0}
    for e in prof.key_averages():
        kind = "gemm" if e.key in GEMM_OPS else "seams" if e.key in SEAM_OPS else "other"
        total[kind] += e.self_cpu_time_total
    whole = sum(total.values())
    return {k: v / whole for k, v in total.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(p, "bench_mixer_step")
    p.add_argument("--suites", default="mixer,smixer", help="comma list of mixer, smixer, b16")
    p.add_argument("--dtypes", default="fp32,bf16", help="comma list of fp32, bf16 (autocast)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where the steps run")
    p.add_argument("--peak-tflops", type=float, default=None,
                   help="also report bf16 rows' MFU against this peak (e.g. 989: H100 SXM dense bf16)")
    p.add_argument("--peak-tflops-fp32", type=float, default=None,
                   help="the same for fp32 rows (e.g. 67: H100 SXM fp32 without TF32)")
    p.add_argument("--b16-image", type=int, default=B16["image"], help="Mixer-B/16 image side (default 224)")
    p.add_argument("--b16-depth", type=int, default=B16["depth"], help="Mixer-B/16 blocks (default 12)")
    p.add_argument("--C", type=int, default=256, help="Mixer hidden dim C")
    p.add_argument("--S", type=int, default=64, help="tokens S (= patches; patch 4 on 32x32)")
    p.add_argument("--ds", type=int, default=256, help="token-MLP hidden D_S")
    p.add_argument("--dc", type=int, default=1024, help="channel-MLP hidden D_C")
    p.add_argument("--depth", type=int, default=8, help="Mixer blocks L")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--bf16-batch", type=int, default=None, help="batch for bf16 runs (default --batch)")
    p.add_argument("--s-dim", type=int, default=64, help="S-Mixer C (= S = 64)")
    p.add_argument("--s-depth", type=int, default=8)
    p.add_argument("--s-batch", type=int, default=None, help="S-Mixer batch (default --batch)")
    p.add_argument("--optimizer", default="sgd", choices=["sgd", "adamw"])
    p.add_argument("--gemm-n", type=int, default=None, help="n of the n×n×n fp32 GEMM (default 2048; 8192 on cuda)")
    p.add_argument("--gemm-n-bf16", type=int, default=None, help="the same for bf16 (default 1024; 8192 on cuda)")
    p.add_argument("--with-generic", action="store_true", help="also time mlplab with fast paths off")
    p.add_argument("--with-unfused", action="store_true", help="also time mlplab with its fused seams off")
    p.add_argument("--no-timm", action="store_true")
    p.add_argument("--breakdown", action="store_true",
                   help="profile the eager mlplab models: time in GEMMs, seams, the rest; MFU if only GEMMs")
    p.add_argument("--compile", action="store_true",
                   help="also time torch.compile'd mlplab and RP models (compilation happens in the warm-up)")
    a = p.parse_args(argv)
    if a.quick:
        a.C, a.ds, a.dc, a.depth, a.batch, a.s_depth = 64, 64, 256, 2, 32, 2
        a.warmup, a.reps, a.gemm_n, a.gemm_n_bf16 = 1, 3, 512, 256
        a.b16_image, a.b16_depth = 32, 2
    if a.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda needs a CUDA GPU and a CUDA build of torch; this one has none (use --device cpu)")
    # a GPU multiplies a 1024³ GEMM in microseconds, bound by the launch: measure its rate on a large one
    a.gemm_n = a.gemm_n or (8192 if a.device == "cuda" else 2048)
    a.gemm_n_bf16 = a.gemm_n_bf16 or (8192 if a.device == "cuda" else 1024)
    setup_torch(a.threads, a.seed)
    env = environment(a.device)
    print(describe(env))
    runs = []
    for suite in a.suites.split(","):
        for dtype in a.dtypes.split(","):
            batch = a.batch if suite == "mixer" else (a.s_batch or a.batch)
            if dtype == "bf16" and a.bf16_batch:
                batch = a.bf16_batch
            runs.append(run_suite(suite, dtype, batch, a))
    write_results(a.out, {"benchmark": "bench_mixer_step", "args": {k: str(v) for k, v in vars(a).items()},
                          "environment": env, "loadavg_end": list(os.getloadavg()), "runs": runs})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
