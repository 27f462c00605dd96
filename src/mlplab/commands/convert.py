"""``mlplab convert SRC DST [--from FORMAT] [--to mlplab|timm] [KEY=VALUE ...]``

Reads a timm ``MlpMixer`` state dict, an official Flax Mixer ``.npz``, a Scaling-MLPs checkpoint
or an mlplab file (``--from auto`` tells them apart by their tensor names), infers the
architecture, and writes it as an mlplab safetensors file (``--to mlplab``, loadable with
``mlplab.load_pretrained`` and usable as ``model.init_from``) or in timm's layout (``--to timm``).
``KEY=VALUE`` are model overrides (``num_classes=10`` gives a new head).

DST is a new file in an existing folder: an existing file is replaced only with ``--overwrite``,
and never SRC itself or a file of a run's checkpoint (that would break the run).

    mlplab convert imagenet21k_Mixer-B_16.npz mixer_b16.safetensors --from flax
"""
from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import BadInput


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..interop import FORMATS

    parser.add_argument("src", help="checkpoint to read (file, or an mlplab run folder)")
    parser.add_argument("dst", help="file to write (.safetensors; --to timm also .pth)")
    parser.add_argument("--from", dest="from_format", default="auto", choices=["auto", *FORMATS],
                        help="format of SRC (default: detected from the tensor names)")
    parser.add_argument("--to", default="mlplab", choices=["mlplab", "timm"], help="format of DST")
    parser.add_argument("--overwrite", action="store_true", help="replace DST if it exists")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="model overrides, e.g. num_classes=10")


def check_destination(src: str, dst: str, overwrite: bool) -> None:
    """Refuse a DST that would destroy something: SRC itself, a run's checkpoint, an existing file
    (without ``overwrite``), a folder; and one whose folder does not exist (it is not created)."""
    from ..interop.files import CHECKPOINT_DIRS, resolve_weights_path
    from ..interop.hub import is_hub_source

    out = Path(dst)
    if out.is_dir():
        raise BadInput(f"{out} is a folder; give the file to write, e.g. {out / 'model.safetensors'}")
    if not out.parent.is_dir():
        raise BadInput(f"the folder {out.parent} does not exist; create it first or write elsewhere")
    if out.exists() and not is_hub_source(src) and out.samefile(resolve_weights_path(src)):
        raise BadInput(f"{dst} is the file being converted; write the result to another file")
    if out.parent.name in CHECKPOINT_DIRS and (out.parent / "state.pt").exists():
        raise BadInput(f"{dst} belongs to the checkpoint of run {out.parent.parent}; replacing it would break that "
                       "run, so write the converted model elsewhere")
    if out.exists() and not overwrite:
        raise BadInput(f"{dst} already exists; pass --overwrite to replace it, or choose another file name")


def run(args: argparse.Namespace) -> int:
    from ..interop import convert, read_checkpoint
    from ..train.config import parse_overrides

    overrides = parse_overrides(args.overrides)
    check_destination(args.src, args.dst, args.overwrite)
    out = convert(args.src, args.dst, args.from_format, args.to, **overrides)
    imp = read_checkpoint(args.src, args.from_format, **overrides)
    arch = ", ".join(f"{k}={v}" for k, v in {**imp.kwargs, **overrides}.items())
    print(f"{args.src} ({imp.source_format}) -> {out} ({args.to}): {imp.model_name}({arch})")
    return 0
