"""timm's names for the published MLP-Mixers, and their weights on the Hugging Face Hub.

``mixer_b16_224`` etc. are the Mixer paper's sizes (:data:`~mlplab.models.mixer.MIXER_PRESETS`)
as timm builds them (``timm/models/mlp_mixer.py``: patch P, width C, L blocks, token/channel
hidden widths C/2 and 4C, LayerNorm eps 1e-6, exact GELU, zero-initialised head), so a timm
checkpoint loads into them unchanged. The weights ``ARCH.TAG`` are timm's Hub repositories
``timm/ARCH.TAG``, with timm's input settings: Google's weights (``goog_*``) take inputs scaled to
[-1, 1] (mean = std = 0.5), Alibaba-MIIL's (``miil_*``) inputs in [0, 1] (mean 0, std 1);
both were evaluated at crop 0.875. The first tag of an architecture is its default.
"""
from __future__ import annotations

from .mixer import MIXER_PRESETS, MixerConfig, build_mixer
from .registry import register_model, register_pretrained

__all__ = ["TIMM_MIXERS", "TIMM_WEIGHTS", "register_timm_mixers"]

#: timm's name -> the Mixer paper's size it builds
TIMM_MIXERS = {f"{preset}_224": preset for preset in
               ("mixer_s32", "mixer_s16", "mixer_b32", "mixer_b16", "mixer_l32", "mixer_l16")}

_GOOGLE = dict(mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5), interpolation="bicubic", crop_pct=0.875, license="apache-2.0")
_MIIL = dict(mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0), interpolation="bilinear", crop_pct=0.875, license="apache-2.0")

#: ARCH.TAG -> (classes, input settings); the Hub repository is timm/ARCH.TAG
TIMM_WEIGHTS = {
    "mixer_b16_224.goog_in21k_ft_in1k": (1000, _GOOGLE),
    "mixer_b16_224.goog_in21k": (21843, _GOOGLE),
    "mixer_b16_224.miil_in21k_ft_in1k": (1000, _MIIL),
    "mixer_b16_224.miil_in21k": (11221, _MIIL),
    "mixer_l16_224.goog_in21k_ft_in1k": (1000, _GOOGLE),
    "mixer_l16_224.goog_in21k": (21843, _GOOGLE),
}


def register_timm_mixers() -> None:
    """Register timm's Mixer names (:data:`TIMM_MIXERS`) and their weights (:data:`TIMM_WEIGHTS`);
    done once, when mlplab.models is imported."""
    for name, preset in TIMM_MIXERS.items():
        p, c, depth, ds, dc = MIXER_PRESETS[preset]
        register_model(
            name, family="mlp_mixer", config_cls=MixerConfig, builder=build_mixer,
            description=f"timm's {name}: MLP-Mixer {preset[6:].upper()} (P={p}, C={c}, L={depth}), "
                        "LayerNorm eps 1e-6, 224x224",
            image_size=224, in_chans=3, num_classes=1000, patch_size=p, hidden_dim=c, depth=depth,
            token_hidden=ds, channel_hidden=dc, block="mlp", norm_eps=1e-6, act="gelu",
        )
    for name, (classes, settings) in TIMM_WEIGHTS.items():
        register_pretrained(name, hf_hub_id=f"timm/{name}", num_classes=classes, **settings)


register_timm_mixers()
