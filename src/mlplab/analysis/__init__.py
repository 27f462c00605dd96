"""Analysis: CKA, spectra, weight pictures, implicit regularisation, scaling-law fits, cost."""

# CKA, spectra, pictures, implicit bias, scaling laws (SPEC §4–§7)
from .cka import CKAResult, MinibatchCKA, cka_matrix, hsic0, hsic1, linear_cka  # noqa: E402,F401
from .implicit_bias import (  # noqa: E402,F401
    ImplicitBiasResult, check_implicit_regularisation, lemma_b1, make_bilinear_regression,
)
from .pictures import (  # noqa: E402,F401
    closest_factorisation, effective_weight_arrays, plot_effective_weights, plot_stem_filters,
    plot_token_mixing_units, save_figure, stem_filter_images, token_mixing_unit_images,
)
from .scaling import (  # noqa: E402,F401
    PUBLISHED_EXPONENTS, ScalingLawFit, compute_budget, compute_optimal_frontier, fit_frontier_exponents,
    fit_scaling_law, scaling_law,
)
from .spectra import (  # noqa: E402,F401
    NormalisedSpectrum, kron_identity, largest_singular_value, model_weight_spectra, mp_edge,
    normalised_spectrum, sample_mixer_weight, sample_sw_weight, spectrum_vs_width, sw_lambda_max_theory,
    sw_lplus,
)
from .cost import count_flops, count_params, model_summary, models_table  # noqa: E402,F401
