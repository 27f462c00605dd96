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

__all__ = ["TIMM_MIXERS", "TIMM_WEIGHTS"]

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

for _name, _preset in TIMM_MIXERS.items():
    _p, _c, _l, _ds, _dc = MIXER_PRESETS[_preset]
    register_model(
        _name, family="mlp_mixer", config_cls=MixerConfig, builder=build_mixer,
        description=f"timm's {_name}: MLP-Mixer {_preset[6:].upper()} (P={_p}, C={_c}, L={_l}), "
                    "LayerNorm eps 1e-6, 224x224",
        image_size=224, in_chans=3, num_classes=1000, patch_size=_p, hidden_dim=_c, depth=_l,
        token_hidden=_ds, channel_hidden=_dc, block="mlp", norm_eps=1e-6, act="gelu",
    )

for _name, (_classes, _settings) in TIMM_WEIGHTS.items():
    register_pretrained(_name, hf_hub_id=f"timm/{_name}", num_classes=_classes, **_settings)
