"""Pretrained models in and out.

    model = mlplab.load_pretrained("mixer_b16.npz")                 # format and architecture inferred
    model = mlplab.load_pretrained("timm_mixer.safetensors", num_classes=10)   # new head
    mlplab.save_pretrained(model, "mine.safetensors")
    sd = mlplab.interop.to_timm(model)                               # timm MlpMixer layout

Formats: timm ``MlpMixer`` state dicts (:mod:`.timm`), the Mixer paper's Flax ``.npz``
(:mod:`.flax`), Scaling-MLPs' ``BottleneckMLP``/``MLP`` (:mod:`.scaling_mlps`) and mlplab's own
self-describing safetensors (:mod:`.native`). ``mlplab convert SRC DST --from FORMAT --to
mlplab|timm`` is the command-line form.
"""
from .api import FORMATS, build_pretrained, convert, detect_format, load_pretrained, read_checkpoint, save_pretrained, to_timm
from .common import Imported
from .files import read_tensors, write_tensors

__all__ = ["FORMATS", "Imported", "build_pretrained", "convert", "detect_format", "load_pretrained", "read_checkpoint",
           "save_pretrained", "to_timm", "read_tensors", "write_tensors"]
