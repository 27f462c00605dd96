"""Images/s of ``DeviceLoader`` with the augmentation recipes of the experiments.

    python benchmarks/bench_loader.py                 # CPU, batches 128 and 256
    python benchmarks/bench_loader.py --device cuda --batches 50

Data: the real Fashion-MNIST (28x28x1, Debian package) when installed, else synthetic images of
that size; and synthetic 32x32x3 (CIFAR-sized). Each line prints images/s and the slowdown
relative to loading without augmentation (normalise only); compare images/s with a model's
training-step throughput to see whether the loader keeps up. "cpu img/s" divides by process CPU
time, so it stays meaningful on a machine shared with other jobs (use --threads 1 there).
"""
from __future__ import annotations

import argparse
import time

import torch

from mlplab.data import AugmentConfig, DataError, DeviceLoader, build_augment, load_dataset

RECIPES = {
    "normalise only": AugmentConfig(),
    "crop4+flip (CIFAR)": AugmentConfig(crop_padding=4, hflip=True),
    "crop+flip+AutoAugment": AugmentConfig(crop_padding=4, hflip=True, autoaugment="cifar10"),
    "RandAug+mix/cut+erase+ls": AugmentConfig(hflip=True, randaugment="rand-m9-mstd0.5-inc1", mixup=0.8,
                                              cutmix=1.0, random_erasing=0.25, label_smoothing=0.1),
}


def images_per_s(loader: DeviceLoader, batches: int, repeats: int = 2) -> tuple[float, float]:
    """Best (wall-clock, process-CPU-time) images/s over ``repeats`` runs of ``batches`` batches.

    CPU-time throughput is what the loader costs; on a shared machine wall-clock also counts
    time spent waiting for other processes. On CUDA only the wall-clock number is meaningful.
    """
    best_wall = best_cpu = 0.0
    for r in range(repeats):
        loader.set_epoch(r)
        n, t0, c0 = 0, time.perf_counter(), time.process_time()
        for i, (x, y) in enumerate(loader):
            n += len(x)
            if i + 1 == batches:
                break
        if x.device.type == "cuda":
            torch.cuda.synchronize()
        best_wall = max(best_wall, n / (time.perf_counter() - t0))
        best_cpu = max(best_cpu, n / max(time.process_time() - c0, 1e-9))
    return best_wall, best_cpu


def datasets(n: int):
    try:
        fm = load_dataset("fashion_mnist", "train")
        fm_name = "fashion_mnist 1x28x28 (real)"
    except DataError:
        fm = load_dataset("synthetic", "train", image_size=28, in_chans=1, num_samples=n)
        fm_name = "synthetic 1x28x28"
    yield fm_name, fm
    yield "synthetic 3x32x32", load_dataset("synthetic", "train", image_size=32, num_samples=n)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--batches", type=int, default=10, help="batches timed per repeat")
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[128, 256])
    p.add_argument("--threads", type=int, default=1, help="torch threads (0 = torch default; 1 = per-core numbers)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"device={args.device} torch={torch.__version__} threads={torch.get_num_threads()} "
          f"batches/repeat={args.batches} (best of 2)")
    need = args.batches * max(args.batch_sizes)
    for dname, data in datasets(need):
        print(f"\n{dname}")
        print(f"  {'recipe':28s} {'batch':>5s} {'images/s':>10s} {'cpu img/s':>10s} {'cost vs normalise':>18s}")
        for bs in args.batch_sizes:
            base = None
            for rname, cfg in RECIPES.items():
                aug = build_augment(cfg, data.info)
                lo = DeviceLoader(data.images, data.labels, bs, augment=aug, device=args.device, seed=0,
                                  drop_last=True)
                wall, cpu = images_per_s(lo, args.batches)
                ref = cpu if args.device == "cpu" else wall
                base = base or ref
                print(f"  {rname:28s} {bs:5d} {wall:10.0f} {cpu:10.0f} {base / ref:17.1f}x")

if __name__ == "__main__":
    main()
