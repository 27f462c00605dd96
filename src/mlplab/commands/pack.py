"""``mlplab pack SRC DST --image-size N [--workers K] [--shard-size S] [--image-key K] [--label-key K]``

Turns an image folder (``SRC/train/<class>/<image>``, optionally ``SRC/val/...``), a folder of
WebDataset ``.tar`` or Parquet shards as the Hub serves them (timm's ``imagenet-1k-wds``,
``imagenet-w21-p``; ``mlplab.data.sources``) or a dataset of the table (``cifar10``, ``stl10``,
``tiny_imagenet``, ...) into a pack: uint8 ``.npy`` shards and an ``index.json``
(``mlplab.data.packed``; docs/data.md). Train on it with
``data.dataset=packed data.root=DST``. Killed, the same command finishes the pack; run on a
finished pack it verifies every shard's sha256. ``mlplab pack --verify DST`` only verifies.

    mlplab pack ~/imagenet21k ~/packs/in21k-64 --image-size 64 --workers 8
    mlplab pack ~/hub/imagenet-w21-p ~/packs/in21kp-64 --image-size 64 --workers 8
    mlplab pack cifar10 ~/packs/cifar10-64 --image-size 64 --download
"""
from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..data.packing import DEFAULT_SHARD_SIZE

    parser.add_argument("src", help="image folder (SRC/train/<class>/<image>), a folder of .tar (WebDataset) or "
                                     ".parquet shards, or a dataset name of the table")
    parser.add_argument("dst", nargs="?",
                        help="folder to write the pack into (new or empty; or an unfinished pack to finish)")
    parser.add_argument("--image-size", type=int, default=None, metavar="N",
                        help="side of the packed images (shorter side resized to N, centre crop)")
    parser.add_argument("--workers", type=int, default=2, metavar="K", help="decoding processes (default 2)")
    parser.add_argument("--shard-size", type=int, default=DEFAULT_SHARD_SIZE, metavar="S",
                        help=f"images per shard (default {DEFAULT_SHARD_SIZE})")
    parser.add_argument("--in-chans", type=int, default=3, choices=(1, 3), help="image files: 1 grey, 3 RGB")
    parser.add_argument("--image-key", default=None, metavar="K",
                        help="shards: the Parquet image column (default image) or the tar member extension "
                             "(default: any image extension)")
    parser.add_argument("--label-key", default=None, metavar="K",
                        help="shards: the Parquet label column (default label), or the tar member extension "
                             "holding the label (default cls) or else the field of the sample's .json (default label)")
    parser.add_argument("--root", default=None, help="table datasets: folder to look in (as data.root)")
    parser.add_argument("--download", action="store_true", help="table datasets: fetch them if missing")
    parser.add_argument("--progress", default="auto", choices=("auto", "bar", "lines", "none"),
                        help="a bar on a terminal, one line per shard otherwise (auto)")
    parser.add_argument("--verify", action="store_true",
                        help="only check the sha256 of every shard (mlplab pack --verify DST)")


def run(args: argparse.Namespace) -> int:
    import time

    from ..data import pack, verify_pack
    from ..errors import BadInput

    if args.verify:
        target = args.dst or args.src
        n = verify_pack(target)
        print(f"{target}: {n} shard files match their sha256")
        return 0
    if args.dst is None:
        raise BadInput("mlplab pack needs SRC and DST (the folder to write the pack into)")
    if args.image_size is None:
        raise BadInput("mlplab pack needs --image-size N (the side of the packed images)")
    if args.workers < 1:
        raise BadInput(f"--workers must be >= 1, got {args.workers}")
    t0 = time.perf_counter()
    index = pack(args.src, args.dst, args.image_size, workers=args.workers, shard_size=args.shard_size,
                 in_chans=args.in_chans, root=args.root, download=args.download, progress=args.progress,
                 image_key=args.image_key, label_key=args.label_key)
    counts = ", ".join(f"{k} {v['count']}" for k, v in index["splits"].items())
    wall = time.perf_counter() - t0
    print(f"{args.dst}: {index['num_classes']} classes, {counts} images at {args.image_size}x{args.image_size} "
          f"({wall:.1f}s); train with data.dataset=packed data.root={args.dst}")
    return 0
