"""The reference ResNet-152 and ViT-B/4 of ``sm-inference`` against timm's: same weights, same
outputs, same parameters, and forward time side by side (ours / timm's), so the measurement does
not handicap the references.

timm's ``resnet152`` gets the first stride removed and no max-pool (Scaling MLPs Table 4), its
``vit_base_patch16_224`` ``img_size=64, patch_size=4``; timm's random weights are copied into
ours in order (the patch-embedding convolution as the equal linear map on flattened patches), then
both run the same normal images in eval mode. Timing: batch ``--batch``, one thread, interleaved,
process CPU time (``--clock cpu``, fair on a shared machine).

    export PYTHONPATH=$PWD/src:/tmp/timmlib:$PWD/../shared/tools/timm-shim
    python benchmarks/bench_reference_models.py --threads 1 --clock cpu
    python benchmarks/bench_reference_models.py --quick
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    add_common_args,
    describe,
    environment,
    fmt_table,
    interleaved,
    setup_torch,
    summarise,
    write_results,
)

from mlplab.models.counting import count_params  # noqa: E402
from mlplab.models.reference import create_reference_model  # noqa: E402


def pairs(quick: bool) -> dict[str, tuple[torch.nn.Module, torch.nn.Module]]:
    """name -> (ours, timm's), timm's weights copied into ours."""
    import timm

    side = 64
    rn_kw = dict(layers=(1, 1, 1, 1)) if quick else {}
    vit_kw = dict(depth=2) if quick else {}
    t_rn = timm.create_model("resnet152", pretrained=False, **({"layers": [1, 1, 1, 1]} if quick else {}))
    t_rn.conv1.stride, t_rn.maxpool = (1, 1), torch.nn.Identity()
    t_vit = timm.create_model("vit_base_patch16_224", pretrained=False, img_size=side, patch_size=4, **vit_kw)
    out = {"ResNet-152": (create_reference_model("resnet152", image_size=side, stem_stride=1, maxpool=False, **rn_kw),
                          t_rn),
           "ViT-B/4": (create_reference_model("vit_base", image_size=side, patch_size=4, **vit_kw), t_vit)}
    for ours, theirs in out.values():
        src = list(theirs.state_dict().values())
        dst = ours.state_dict()
        if len(src) != len(dst):
            raise RuntimeError(f"{len(dst)} tensors in ours, {len(src)} in timm's")
        ours.load_state_dict({k: s.reshape(v.shape) for (k, v), s in zip(dst.items(), src)})
        ours.eval(), theirs.eval()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(p, "bench_reference_models")
    p.add_argument("--batch", type=int, default=4)
    a = p.parse_args(argv)
    setup_torch(a.threads, a.seed)
    env = environment()
    print(describe(env))
    models = pairs(a.quick)
    x = torch.randn(a.batch, 3, 64, 64)
    rows, results = [], {}
    with torch.inference_mode():
        for name, (ours, theirs) in models.items():
            a_out, b_out = ours(x), theirs(x)
            diff = float((a_out - b_out).abs().max() / b_out.abs().max())
            results[name] = {"params_ours": count_params(ours), "params_timm": count_params(theirs),
                             "max_rel_output_diff": diff}
        calls = {f"{n} {who}": (lambda m=m: m(x))
                 for n, pair in models.items() for who, m in zip(("ours", "timm"), pair)}
        times = interleaved(calls, reps=2 if a.quick else a.reps, warmup=1 if a.quick else a.warmup, clock=a.clock)
    for name in models:
        t_ours, t_timm = summarise(times[f"{name} ours"]), summarise(times[f"{name} timm"])
        results[name].update(ours=t_ours, timm=t_timm, ratio=t_ours["median_s"] / t_timm["median_s"])
        r = results[name]
        rows.append([name, r["params_ours"], r["params_timm"], r["max_rel_output_diff"], 1e3 * t_ours["median_s"],
                     1e3 * t_timm["median_s"], r["ratio"]])
    print(fmt_table(["model", "params ours", "params timm", "max output diff (relative)", "ours ms", "timm ms",
                     "ours / timm"], rows))
    write_results(a.out, {"title": "Reference models of sm-inference against timm's", "environment": env,
                          "batch": a.batch, "quick": a.quick, "clock": a.clock,
                          "results": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
