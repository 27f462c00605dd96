"""mlplab: build, train, analyse and compare all-MLP vision models.

Nothing runs at import time except model registration.
"""
from .models import create_model, list_models, model_config

__version__ = "0.1.0"
__all__ = ["create_model", "list_models", "model_config", "__version__"]
