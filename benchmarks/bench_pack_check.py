"""What it costs a training run to check its pack before it trains (``mlplab.data.packed``).

    python benchmarks/bench_pack_check.py                 # 4 shards of 10k 64x64 RGB images (490 MB)

A pack of random uint8 shards is written to a temporary folder, then, interleaved over
``--reps`` rounds, each way of checking it against its ``index.json`` is timed over every shard:

* ``headers + sizes``: ``np.load(mmap_mode="r")`` of every shard (dtype, shape) and its file size;
* ``probe + labels``: :func:`~mlplab.data.packed.shard_probe` of the images (8 blocks of 4 KiB)
  and the sha256 of the labels (what ``PackedImages`` adds to the headers and sizes);
* ``full sha256``: the sha256 of every images file (what ``mlplab pack --verify`` reads).

Each is timed with the shards in the page cache (``warm``) and evicted first
(``posix_fadvise(DONTNEED)`` on the pack's own files only: ``cold``, as a run's first read of a
pack on disk). The table gives wall and CPU ms per shard (the CPU time does not depend on the
machine's load) and, for the full sha256, GiB per CPU-second; the pack a run
opens in practice is counted in shards of 10,000 images (ImageNet-21k at 64x64: ~1,300).
Results go to ``benchmarks/results/pack-check-pt<torch>-<machine>.json`` (``common.default_out``).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import default_out, environment, fmt_table, write_results  # noqa: E402

from mlplab.data.packed import sha256_file, shard_files, shard_probe  # noqa: E402


def _write_pack(root: Path, shards: int, per_shard: int, size: int) -> list[tuple[Path, Path]]:
    g = np.random.default_rng(0)
    files = []
    for k in range(shards):
        img, lab = (root / f for f in shard_files("train", k))
        np.save(img, g.integers(0, 256, (per_shard, 3, size, size), dtype=np.uint8))
        np.save(lab, g.integers(0, 1000, per_shard, dtype=np.int64))
        files.append((img, lab))
    return files


def _evict(files: list[tuple[Path, Path]]) -> None:
    for pair in files:
        for f in pair:
            fd = os.open(f, os.O_RDONLY)
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)


def _headers(files):
    for img, lab in files:
        for f in (img, lab):
            a = np.load(f, mmap_mode="r")
            assert os.path.getsize(f) == a.offset + a.nbytes


def _probe(files):
    for img, lab in files:
        shard_probe(img)
        sha256_file(lab)


def _full(files):
    for img, _ in files:
        sha256_file(img)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=default_out("bench_pack_check"))
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--per-shard", type=int, default=10_000)
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="2 shards of 1,000 images, 2 rounds")
    a = p.parse_args()
    if a.quick:
        a.shards, a.per_shard, a.reps = 2, 1000, 2
    env = environment()
    candidates = {"headers + sizes": _headers, "probe + labels": _probe, "full sha256": _full}
    times = {(name, cache): [] for name in candidates for cache in ("warm", "cold")}
    with tempfile.TemporaryDirectory(prefix="mlplab-pack-check-") as tmp:
        files = _write_pack(Path(tmp), a.shards, a.per_shard, a.image_size)
        shard_bytes = os.path.getsize(files[0][0])
        for fn in candidates.values():  # warm-up
            fn(files)
        for r in range(a.reps):
            for name, fn in candidates.items():
                for cache in ("warm", "cold"):
                    if cache == "cold":
                        _evict(files)
                    t0, c0 = time.perf_counter(), time.process_time()
                    fn(files)
                    times[(name, cache)].append((time.perf_counter() - t0, time.process_time() - c0))
            print(f"  round {r + 1}/{a.reps} (load {os.getloadavg()[0]:.1f})", flush=True)
    rows, results = [], []
    for (name, cache), ts in times.items():
        med, cpu = statistics.median(t for t, _ in ts), statistics.median(c for _, c in ts)
        per_shard_ms, cpu_ms = 1e3 * med / a.shards, 1e3 * cpu / a.shards
        rate = shard_bytes * a.shards / cpu / 2**30 if name == "full sha256" else None
        rows.append([name, cache, per_shard_ms, cpu_ms, f"{rate:.2f}" if rate else "-", 1300 * per_shard_ms / 1e3])
        results.append({"check": name, "cache": cache, "median_s": med, "median_cpu_s": cpu,
                        "per_shard_ms": per_shard_ms, "per_shard_cpu_ms": cpu_ms, "gib_per_cpu_s": rate,
                        "times_s": [t for t, _ in ts], "cpu_s": [c for _, c in ts]})
    print(f"{a.shards} shards of {a.per_shard} images {a.image_size}x{a.image_size}x3 "
          f"({shard_bytes / 2**20:.0f} MiB each); load {os.getloadavg()}")
    print(fmt_table(["check", "page cache", "ms per shard", "CPU ms per shard", "GiB per CPU-s",
                     "s for 1,300 shards"], rows))
    write_results(a.out, {"environment": env, "shards": a.shards, "per_shard": a.per_shard,
                          "image_size": a.image_size, "shard_bytes": shard_bytes, "results": results,
                          "loadavg_end": list(os.getloadavg())})


if __name__ == "__main__":
    main()
