"""Pretrained models in and out.

    model = mlplab.create_model("mixer_b16_224.goog_in21k_ft_in1k", pretrained=True)   # from the Hub
    model = mlplab.load_pretrained("hf-hub:timm/mixer_b16_224.goog_in21k_ft_in1k")
    model = mlplab.load_pretrained("mixer_b16.npz")                 # format and architecture inferred
    model = mlplab.load_pretrained("timm_mixer.safetensors", num_classes=10)   # new head
    mlplab.save_pretrained(model, "mine.safetensors")
    mlplab.save_pretrained(model, "folder", hub_layout=True); mlplab.push_to_hub(model, "me/my-mixer")
    sd = mlplab.interop.to_timm(model)                               # timm MlpMixer layout

Formats: timm ``MlpMixer`` state dicts (:mod:`.timm`), the Mixer paper's Flax ``.npz``
(:mod:`.flax`), Scaling-MLPs' ``BottleneckMLP``/``MLP`` (:mod:`.scaling_mlps`) and mlplab's own
self-describing safetensors (:mod:`.native`). ``mlplab convert SRC DST --from FORMAT --to
mlplab|timm`` is the command-line form; :mod:`.hub` reaches the Hugging Face Hub.
"""
from .api import (
    FORMATS,
    build_pretrained,
    convert,
    create_model,
    detect_format,
    load_pretrained,
    push_to_hub,
    read_checkpoint,
    save_pretrained,
    to_timm,
)
from .common import Imported
from .files import read_tensors, write_tensors

__all__ = ["FORMATS", "Imported", "build_pretrained", "convert", "create_model", "detect_format", "load_pretrained",
           "push_to_hub", "read_checkpoint", "save_pretrained", "to_timm", "read_tensors", "write_tensors"]
