"""``mlplab convert SRC DST [--from FORMAT] [--to mlplab|timm] [KEY=VALUE ...]``

Reads a timm ``MlpMixer`` state dict, an official Flax Mixer ``.npz``, a Scaling-MLPs checkpoint
or an mlplab file (``--from auto`` tells them apart by their tensor names), infers the
architecture, and writes it as an mlplab safetensors file (``--to mlplab``, loadable with
``mlplab.load_pretrained`` and usable as ``model.init_from``) or in timm's layout (``--to timm``).
``KEY=VALUE`` are model overrides (``num_classes=10`` gives a new head).

    mlplab convert imagenet21k_Mixer-B_16.npz mixer_b16.safetensors --from flax
"""
from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..interop import FORMATS

    parser.add_argument("src", help="checkpoint to read (file, or an mlplab run folder)")
    parser.add_argument("dst", help="file to write (.safetensors; --to timm also .pth)")
    parser.add_argument("--from", dest="from_format", default="auto", choices=["auto", *FORMATS],
                        help="format of SRC (default: detected from the tensor names)")
    parser.add_argument("--to", default="mlplab", choices=["mlplab", "timm"], help="format of DST")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="model overrides, e.g. num_classes=10")


def run(args: argparse.Namespace) -> int:
    from ..interop import convert, read_checkpoint
    from ..train.config import parse_overrides

    overrides = parse_overrides(args.overrides)
    out = convert(args.src, args.dst, args.from_format, args.to, **overrides)
    imp = read_checkpoint(args.src, args.from_format, **overrides)
    arch = ", ".join(f"{k}={v}" for k, v in {**imp.kwargs, **overrides}.items())
    print(f"{args.src} ({imp.source_format}) -> {out} ({args.to}): {imp.model_name}({arch})")
    return 0
