"""Data throughput: packing 64x64 PNGs, streaming an image folder, reading a pack, and the
memory of a training run on a small and a large pack.

    python benchmarks/bench_data.py                      # rates, 20k PNGs of 64x64, 2 workers/threads
    python benchmarks/bench_data.py --rss                # + RssAnon of `mlplab train` on 2k vs 200k packs
    python benchmarks/bench_data.py --feed [--device cuda]   # host gather and pack reads, old vs new (own file)

``--feed``: can the host feed a GPU? uint8 64x64 batches of ``--feed-batch`` (4096) from a
dataset held in host memory and from a pack (page cache warm), ``--threads`` reader and torch
threads, each gathered the old way (``images[idx]``, advanced indexing; the pack's gather into a
temporary, scattered into place; each then pinned by a second copy on CUDA) and the new way
(``staged_batches`` / ``packed_batches``: one ``index_select(out=)`` / ``take(out=)`` per batch
into a ring of preallocated, pinned buffers, read ahead), interleaved (old, new, old, new, ...);
with ``--device cuda`` each batch is copied to the GPU and the epoch waits for the last copy; on
the CPU two more rows time the host's share of a GPU feed (batches "copied" to the ``meta``
device, which moves no data: the pack's reordering is then the GPU's gather, not a host copy).
The target (issue 37): >= 200k img/s on 2 threads, what one H100 trains Mixer-S/16 at 64x64 at.

Rates (img/s, median of ``--reps`` interleaved rounds, page cache warm):

* ``pack``: ``mlplab.data.pack`` of the PNG folder with ``--workers`` processes (and with 1);
* ``folder stream``: ``StreamingLoader`` over the same folder (Pillow decode in ``--workers``
  processes) with crop + flip, the path a large image folder trains on;
* ``pack read``: shuffled uint8 batches gathered from the memory-mapped shards by ``--workers``
  reader threads, alone and with crop (padding 4) + flip on the uint8 batch (``--threads``
  torch threads); then the whole ``PackedLoader`` (crop/flip or RandomResizedCrop/flip, float
  conversion and normalisation: what the training step receives).

The ratios are against ``folder stream``; "12M-image epoch" is what one pass over 12M images
(ImageNet-21k at 64x64) would take at that rate. "img per CPU-s" divides by the CPU time of the
process and its worker processes: on a machine shared with other jobs it shows what the work
costs, where the wall-clock rate shows what the load left over. ``--rss`` trains a tiny model for 100 steps of
batch 1024 on packs of 2k and 200k images (``data.stream=true``) and reports the peak RssAnon
(anonymous resident memory: the process's own, not the page cache) sampled from /proc.
Results go to ``benchmarks/results/data-pt<torch>-<machine>.json`` (``common.default_out``).
"""
from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import default_out, environment, fmt_table, write_results  # noqa: E402

from mlplab.data import AugmentConfig, ImageFolderDataset, Pack, PackedLoader, StreamingLoader, build_augment, pack
from mlplab.data.augment import crop_flip_host
from mlplab.data.formats import png_bytes
from mlplab.data.packed import FORMAT_NAME, FORMAT_VERSION, sha256_file, shard_files

EPOCH_12M = 12_000_000
REPO = Path(__file__).resolve().parents[1]


def synthetic_images(n: int, size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Smooth class prototypes plus noise (PNG-compressible like photos, not like white noise)."""
    g = torch.Generator().manual_seed(seed)
    protos = torch.nn.functional.interpolate(torch.rand(10, 3, 8, 8, generator=g), size=(size, size), mode="bilinear")
    labels = torch.randint(10, (n,), generator=g)
    out = np.empty((n, 3, size, size), np.uint8)
    for i in range(0, n, 4096):
        y = labels[i:i + 4096]
        x = 255 * protos[y] + 12 * torch.randn(len(y), 3, size, size, generator=g)
        out[i:i + 4096] = x.round().clamp(0, 255).to(torch.uint8).numpy()
    return out, labels.numpy()


def write_png_folder(root: Path, n: int, size: int) -> None:
    x, y = synthetic_images(n, size, 0)
    for c in range(10):
        (root / "train" / f"c{c}").mkdir(parents=True, exist_ok=True)

    def one(i: int) -> None:
        (root / "train" / f"c{y[i]}" / f"{i:07d}.png").write_bytes(png_bytes(x[i]))

    with ThreadPoolExecutor(4) as ex:
        list(ex.map(one, range(n), chunksize=512))


def write_pack_directly(dst: Path, n: int, size: int, shard_size: int = 10_000, n_test: int = 1000) -> None:
    """A pack written with plain numpy from the documented format (no PNG decoding): for the
    memory measurement, where only the pack's size matters."""
    dst.mkdir(parents=True, exist_ok=True)
    splits = {}
    for split, count in (("train", n), ("test", n_test)):
        shards = []
        for k, lo in enumerate(range(0, count, shard_size)):
            m = min(shard_size, count - lo)
            x, y = synthetic_images(m, size, 1000 * k + (split == "test"))
            img, lab = shard_files(split, k)
            np.save(dst / img, x)
            np.save(dst / lab, y.astype(np.int64))
            shards.append({"images": img, "labels": lab, "count": m,
                           "sha256": {"images": sha256_file(dst / img), "labels": sha256_file(dst / lab)}})
        splits[split] = {"count": count, "shards": shards}
    index = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "image_size": [size, size], "in_chans": 3,
             "dtype": "uint8", "layout": "NCHW", "classes": [f"c{i}" for i in range(10)], "num_classes": 10,
             "mean": [0.5] * 3, "std": [0.25] * 3, "source": "bench_data synthetic", "shard_size": shard_size,
             "fingerprint": hashlib.sha256(f"{n}-{size}".encode()).hexdigest(), "splits": splits}
    (dst / "index.json").write_text(json.dumps(index))


def cpu_seconds() -> float:
    """CPU time of this process and of its finished children (pack / DataLoader workers)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def rate(fn, n: int) -> tuple[float, float]:
    """(images per wall second, images per CPU second of this process and its workers)."""
    t0, c0 = time.perf_counter(), cpu_seconds()
    fn()
    return n / (time.perf_counter() - t0), n / max(cpu_seconds() - c0, 1e-9)


def read_batches(part, batch: int, threads: int, then=None) -> None:
    """The pack-reading half of PackedLoader alone: shuffled uint8 batches gathered by ``threads``
    reader threads; ``then`` (e.g. crop + flip) applied to each batch as it arrives."""
    order = torch.randperm(len(part)).numpy()
    g = torch.Generator().manual_seed(0)
    with ThreadPoolExecutor(threads) as ex:
        for x in ex.map(part.take, [order[i:i + batch] for i in range(0, len(order), batch)]):
            if then is not None:
                then(torch.from_numpy(x), g)


def crop_flip_uint8(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    return crop_flip_host(x, 4, True, g)  # what Augment runs on a host batch (= random_crop + random_hflip)


def drain(loader) -> None:
    for _ in loader:
        pass


def peak_rss_anon(cmd: list[str], env: dict[str, str]) -> tuple[int, float, int]:
    """(exit status, peak RssAnon in MiB, wall s) of a child process, sampled every 20 ms."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    while proc.poll() is None:
        try:
            m = re.search(r"RssAnon:\s+(\d+) kB", Path(f"/proc/{proc.pid}/status").read_text())
            peak = max(peak, int(m.group(1)) if m else 0)
        except OSError:
            pass
        time.sleep(0.02)
    err = proc.stderr.read().decode()
    if proc.returncode:
        print(err[-2000:], file=sys.stderr)
    return proc.returncode, peak / 1024, time.perf_counter() - t0


def measure_rss(work: Path, size: int, steps: int = 200, batch: int = 256) -> dict[str, float]:
    """Both runs take ``steps`` steps of ``batch``: the 2k pack's epochs hold 7 batches, enough to
    fill the reader's prefetch queue as on the large pack, so only the pack's size differs."""
    out = {"rss_steps": steps, "rss_batch": batch}
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"), OMP_NUM_THREADS="2")
    for n in (2_000, 200_000):
        dst = work / f"pack{n}"
        write_pack_directly(dst, n, size)
        cmd = [sys.executable, "-m", "mlplab.cli", "train", "synthetic_tiny", "data.dataset=packed",
               f"data.root={dst}", "data.image_size=null", "data.stream=true", "data.train_subset=null",
               "data.test_subset=null", "schedule.epochs=null", f"schedule.steps={steps}", f"run.batch_size={batch}",
               "model.kwargs.patch_size=8", "run.log=none", "run.threads=2", f"run.out_dir={work / 'runs'}",
               f"run.name=rss{n}", "run.device=cpu"]
        rc, peak, wall = peak_rss_anon(cmd, env)
        out[f"rss_anon_mib_{n}"] = round(peak, 1)
        out[f"rss_wall_s_{n}"] = round(wall, 1)
        print(f"pack of {n:,} images ({n * 3 * size * size / 2**30:.2f} GiB): exit {rc}, peak RssAnon {peak:.1f} MiB, "
              f"{wall:.0f} s", flush=True)
        shutil.rmtree(dst)
    out["rss_anon_growth_mib"] = round(out["rss_anon_mib_200000"] - out["rss_anon_mib_2000"], 1)
    return out


FEED_TARGET = 200_000  # img/s: one H100 training Mixer-S/16 at 64x64 (issue 37)


def old_host_gather(images: torch.Tensor, labels: torch.Tensor, rows, device: torch.device):
    """The former host-staged path: advanced indexing, then a pinned copy of each batch."""
    for idx in rows:
        x, y = images[idx], labels[idx]
        if device.type == "cuda":
            x, y = x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
        yield x, y


def old_pack_take(part, rows: np.ndarray) -> np.ndarray:
    """The former ``PackedImages.take``: each shard's rows gathered into a temporary, scattered into place."""
    out = np.empty((len(rows), *part.shape[1:]), np.uint8)
    order = np.argsort(rows, kind="stable")
    sorted_rows = rows[order]
    shard = np.searchsorted(part.starts, sorted_rows, side="right") - 1
    cuts = np.flatnonzero(np.diff(shard)) + 1
    for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(rows)]):
        s = shard[lo]
        out[order[lo:hi]] = part.shards[s][sorted_rows[lo:hi] - part.starts[s]]
    return out


def old_pack_reads(part, rows, device: torch.device, threads: int, prefetch: int = 4):
    """The former PackedLoader reader: ``threads`` threads, ``prefetch`` ahead, then pinned copies."""
    def read(idx):
        x, y = torch.from_numpy(old_pack_take(part, idx.numpy())), part.labels[idx]
        return (x.pin_memory(), y.pin_memory()) if device.type == "cuda" else (x, y)

    rows = iter(rows)
    with ThreadPoolExecutor(threads) as pool:
        pending = [pool.submit(read, r) for r in itertools.islice(rows, prefetch)]
        while pending:
            x, y = pending.pop(0).result()
            nxt = next(rows, None)
            if nxt is not None:
                pending.append(pool.submit(read, nxt))
            yield x.to(device, non_blocking=True), y.to(device, non_blocking=True)


def feed(a, work: Path) -> dict:
    """img/s of the old and new host gathers and pack reads (see the module docstring)."""
    from mlplab.data.loader import packed_batches, staged_batches

    device, n, b = torch.device(a.device), a.feed_images, a.feed_batch
    x, y = synthetic_images(n, a.size, 0)
    write_pack_directly(work / "feed", n, a.size, shard_size=10_000, n_test=10)
    part = Pack(work / "feed").split("train")
    images, labels = torch.from_numpy(x), torch.from_numpy(y)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(0))

    def epoch(batches) -> None:
        for xb, _ in batches:
            pass
        if device.type == "cuda":
            torch.cuda.synchronize()

    rows = lambda: (order[i:i + b] for i in range(0, n - b + 1, b))  # noqa: E731
    pin = " + pin" if device.type == "cuda" else ""
    cands = {
        f"host gather, old: images[idx]{pin}": lambda: epoch(old_host_gather(images, labels, rows(), device)),
        f"host gather, new: index_select(out=) ring, {a.threads} threads":
            lambda: epoch(staged_batches(images, labels, rows(), device, a.threads, 2)),
        f"pack read, old: take + scatter{pin}, {a.threads} threads":
            lambda: epoch(old_pack_reads(part, rows(), device, a.threads)),
        f"pack read, new: take(out=) ring, {a.threads} threads":
            lambda: epoch(packed_batches(part, part.labels, rows(), device, a.threads, 2)),
    }
    if device.type == "cpu":  # what the host does for a GPU (the meta device moves no data): the reorder is the GPU's
        meta = torch.device("meta")
        cands[f"host gather, new, host side of a GPU feed, {a.threads} threads"] = \
            lambda: epoch(staged_batches(images, labels, rows(), meta, a.threads, 2))
        cands[f"pack read, new, host side of a GPU feed, {a.threads} threads"] = \
            lambda: epoch(packed_batches(part, part.labels, rows(), meta, a.threads, 2))
    count = (n // b) * b
    for fn in cands.values():
        fn()  # warm: page cache, threads, pinned memory
    rates: dict[str, list[float]] = {k: [] for k in cands}
    for r in range(a.reps):
        for name, fn in cands.items():
            rates[name].append(rate(fn, count)[0])
            print(f"  rep {r}: {name}: {rates[name][-1]:,.0f} img/s (load {os.getloadavg()[0]:.1f})", flush=True)
    med = {k: statistics.median(v) for k, v in rates.items()}
    old = {kind: next(v for k, v in med.items() if k.startswith(f"{kind}, old"))
           for kind in ("host gather", "pack read")}
    vs_old = {k: v / old["host gather" if k.startswith("host gather") else "pack read"] for k, v in med.items()}
    rows_ = [[k, f"{v:,.0f}", f"{vs_old[k]:.1f}x", "yes" if v >= FEED_TARGET else "no"] for k, v in med.items()]
    print(fmt_table([f"uint8 {a.size}x{a.size}, batch {b}, to {a.device}", "img/s", "vs old",
                     f">= {FEED_TARGET // 1000}k"], rows_))
    return {"device": a.device, "batch": b, "images": n, "threads": a.threads, "target_img_per_s": FEED_TARGET,
            "img_per_s_median": {k: round(v, 1) for k, v in med.items()},
            "img_per_s_reps": {k: [round(v, 1) for v in vs] for k, vs in rates.items()},
            "new_over_old": {k: round(v, 2) for k, v in vs_old.items() if ", new" in k},
            "notes": [f"Interleaved, median of {a.reps} rounds, {a.threads} threads, at load "
                      f"{os.getloadavg()[0]:.1f}: the rates are what the load left, the ratios the comparison. "
                      f"The target, >= {FEED_TARGET:,} img/s, is one H100's appetite (Mixer-S/16 at 64x64)."],
            "loadavg_end": list(os.getloadavg())}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=20_000, help="PNGs in the generated folder")
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--workers", type=int, default=2, help="pack / folder-stream processes, pack-read threads")
    p.add_argument("--threads", type=int, default=2, help="torch threads (augmentation)")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--rss", action="store_true", help="also measure RssAnon of training on 2k vs 200k packs")
    p.add_argument("--rss-only", action="store_true", help="only the RssAnon measurement")
    p.add_argument("--feed", action="store_true", help="only the host gather and pack reads, old vs new")
    p.add_argument("--feed-images", type=int, default=49_152, help="images of the --feed dataset and pack")
    p.add_argument("--feed-batch", type=int, default=4096)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="--feed: where the batches go")
    p.add_argument("--work", type=Path, default=None, help="scratch folder (default: a temp folder, deleted)")
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    env = environment()
    out = a.out or default_out("bench_data")
    work = a.work or Path(tempfile.mkdtemp(prefix="bench_data."))
    if a.feed:  # its own file: benchmarks/results/data-feed-pt<torch>-<machine>.json
        try:
            result = feed(a, work)
        finally:
            if a.work is None:
                shutil.rmtree(work, ignore_errors=True)
        write_results(a.out or default_out("bench_data_feed"), {"benchmark": "bench_data --feed",
                                                                "environment": environment(a.device), **result})
        return 0
    if a.rss_only:
        try:
            rss = measure_rss(work, a.size)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        print(f"RssAnon growth from 2k to 200k images: {rss['rss_anon_growth_mib']} MiB")
        previous = json.loads(out.read_text()) if out.is_file() else {"benchmark": "bench_data", "environment": env}
        write_results(out, {**previous, "rss": {**rss, "environment": env, "loadavg_end": list(os.getloadavg())}})
        return 0
    try:
        folder = work / "pngs"
        print(f"writing {a.images:,} PNGs of {a.size}x{a.size} ...", flush=True)
        write_png_folder(folder, a.images, a.size)
        n = a.images
        mean, std = (0.5,) * 3, (0.25,) * 3
        crop_flip = build_augment(AugmentConfig(crop_padding=4, hflip=True), mean=mean, std=std)
        rrc_flip = build_augment(AugmentConfig(random_resized_crop=True, hflip=True), mean=mean, std=std)
        ds = ImageFolderDataset(folder, "train", a.size)

        def do_pack(workers: int, k: list[int] = [0]) -> None:
            k[0] += 1
            pack(folder, work / f"pack{workers}-{k[0]}", a.size, workers=workers, progress="none")

        cands = {
            f"pack, {a.workers} workers": (lambda: do_pack(a.workers), n),
            "pack, 1 worker": (lambda: do_pack(1), n),
            f"folder stream + crop/flip, {a.workers} workers": (
                lambda: drain(StreamingLoader(ds, a.batch, augment=crop_flip, num_workers=a.workers, seed=0)), n),
        }
        pack(folder, work / "pack", a.size, workers=a.workers, progress="none")
        part = Pack(work / "pack").split("train")
        cands[f"pack read, uint8 batches, {a.workers} threads"] = (lambda: read_batches(part, a.batch, a.workers), n)
        cands[f"pack read + crop/flip (uint8), {a.workers} threads"] = (
            lambda: read_batches(part, a.batch, a.workers, crop_flip_uint8), n)
        for name, aug in ((f"PackedLoader: crop/flip + normalise, {a.workers} threads", crop_flip),
                          (f"PackedLoader: RandomResizedCrop/flip + normalise, {a.workers} threads", rrc_flip)):
            cands[name] = (lambda aug=aug: drain(PackedLoader(part, part.labels, a.batch, augment=aug, mean=mean,
                                                             std=std, threads=a.workers, seed=0)), n)
        for _, (fn, _) in list(cands.items())[3:]:
            fn()  # warm the page cache and the threads
        rates: dict[str, list[float]] = {k: [] for k in cands}
        cpu_rates: dict[str, list[float]] = {k: [] for k in cands}
        for r in range(a.reps):
            for name, (fn, count) in cands.items():
                wall, cpu = rate(fn, count)
                rates[name].append(wall)
                cpu_rates[name].append(cpu)
                print(f"  rep {r}: {name}: {wall:,.0f} img/s, {cpu:,.0f} img per CPU-s", flush=True)
            for d in work.glob("pack*-*"):
                shutil.rmtree(d)
        med = {k: statistics.median(v) for k, v in rates.items()}
        cpu_med = {k: statistics.median(v) for k, v in cpu_rates.items()}
        ref = med[f"folder stream + crop/flip, {a.workers} workers"]
        rows = [[k, f"{v:,.0f}", f"{v / ref:.1f}x", f"{EPOCH_12M / v / 3600:.2f} h", f"{cpu_med[k]:,.0f}"]
                for k, v in med.items()]
        print(f"\n{env['processor']} ({env['cpu_capability']}), torch {env['torch']}, "
              f"{a.threads} torch threads, load {os.getloadavg()[0]:.1f}")
        print(fmt_table(["candidate (64x64 unless --size)", "img/s", "vs folder stream", "12M-image epoch",
                         "img per CPU-s"], rows))
        result = {"benchmark": "bench_data", "environment": env, "loadavg_end": list(os.getloadavg()),
                  "settings": {k: v for k, v in vars(a).items() if k not in ("out", "work")},
                  "img_per_s_median": {k: round(v, 1) for k, v in med.items()},
                  "img_per_s_reps": {k: [round(x, 1) for x in v] for k, v in rates.items()},
                  "img_per_cpu_s_median": {k: round(v, 1) for k, v in cpu_med.items()},
                  "ratio_vs_folder_stream": {k: round(v / ref, 2) for k, v in med.items()},
                  "epoch_12m_hours": {k: round(EPOCH_12M / v / 3600, 3) for k, v in med.items()}}
        if a.rss:
            result["rss"] = measure_rss(work, a.size)
            print(f"RssAnon growth from 2k to 200k images: {result['rss']['rss_anon_growth_mib']} MiB")
            print(fmt_table(["pack (64x64x3, 200 steps of batch 256, data.stream=true)", "peak RssAnon MiB"],
                            [["2,000 images", result["rss"]["rss_anon_mib_2000"]],
                             ["200,000 images", result["rss"]["rss_anon_mib_200000"]]]))
        write_results(out, result)
    finally:
        if a.work is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
