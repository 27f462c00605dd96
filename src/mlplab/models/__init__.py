"""Model families. Importing this package registers every model (one registry, one builder
per family)."""
from . import mixer  # noqa: F401  (registers the Mixer family)
from . import mlp, shallow, sw_mlp  # noqa: F401  (register plain/bottleneck, Monarch/Kronecker, SW-MLP)
from . import timm_names  # noqa: F401  (timm's Mixer names and their Hub weights)
from .registry import create_model, get_model_entry, list_models, model_config, register_model

__all__ = ["create_model", "list_models", "get_model_entry", "model_config", "register_model"]
