"""Model families. Importing this package registers every model (one registry, one builder
per family)."""
from . import (  # importing a family registers it
    mixer,  # noqa: F401  (the Mixer family)
    mlp,  # noqa: F401  (plain and bottleneck MLPs)
    shallow,  # noqa: F401  (Monarch/Kronecker)
    sw_mlp,  # noqa: F401  (SW-MLP)
    timm_names,  # noqa: F401  (timm's Mixer names and their Hub weights)
)
from .registry import create_model, get_model_entry, list_models, model_config, register_model

__all__ = ["create_model", "list_models", "get_model_entry", "model_config", "register_model"]
