"""Analysis: CKA, linear few-shot evaluation, spectra, weight pictures, what first-layer and token-mixing units
learn, implicit regularisation, scaling-law fits, cost.

Submodules are imported on first use (matplotlib and scipy cost seconds to import), so
``import mlplab.analysis.cost`` stays cheap for the training loop.
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "CKAResult": "cka",
    "MinibatchCKA": "cka",
    "cka_matrix": "cka",
    "hsic0": "cka",
    "hsic1": "cka",
    "linear_cka": "cka",
    "ImplicitBiasResult": "implicit_bias",
    "check_implicit_regularisation": "implicit_bias",
    "lemma_b1": "implicit_bias",
    "make_bilinear_regression": "implicit_bias",
    "closest_factorisation": "pictures",
    "effective_weight_arrays": "pictures",
    "plot_effective_weights": "pictures",
    "plot_stem_filters": "pictures",
    "plot_token_mixing_units": "pictures",
    "save_figure": "pictures",
    "stem_filter_images": "pictures",
    "token_mixing_unit_images": "pictures",
    "PUBLISHED_EXPONENTS": "scaling",
    "ScalingLawFit": "scaling",
    "bootstrap_scaling": "scaling",
    "ScalingBootstrap": "scaling",
    "compute_budget": "scaling",
    "compute_optimal_frontier": "scaling",
    "fit_frontier_exponents": "scaling",
    "fit_scaling_law": "scaling",
    "scaling_law": "scaling",
    "NormalisedSpectrum": "spectra",
    "kron_identity": "spectra",
    "largest_singular_value": "spectra",
    "model_weight_spectra": "spectra",
    "mp_edge": "spectra",
    "normalised_spectrum": "spectra",
    "sample_mixer_weight": "spectra",
    "sample_sw_weight": "spectra",
    "spectrum_vs_width": "spectra",
    "sw_lambda_max_theory": "spectra",
    "sw_lplus": "spectra",
    "FewShotResult": "fewshot",
    "extract_features": "fewshot",
    "linear_few_shot": "fewshot",
    "INVERSE_TAU": "units",
    "half_energy_radius": "units",
    "initial_model": "units",
    "inverse_partners": "units",
    "mean_frequency": "units",
    "paired_units": "units",
    "stem_unit_images": "units",
    "uniform_half_energy_radius": "units",
    "unit_picture": "units",
    "weight_stats": "units",
    "count_flops": "cost",
    "count_params": "cost",
    "model_summary": "cost",
    "models_table": "cost",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
