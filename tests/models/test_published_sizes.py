"""Default sizes of the published presets against the papers' parameter counts."""
import pytest

from mlplab.analysis.cost import model_summary
from mlplab.models.mlp import SCALING_MLP_CLASSES, SCALING_MLP_PRESETS

# MLP-Mixer (Tolstikhin et al. 2021, Table 1), millions; the paper's counts exclude the head
MIXER_PUBLISHED_M = {"mixer_s32": 19, "mixer_s16": 18, "mixer_b32": 60, "mixer_b16": 59,
                     "mixer_l32": 206, "mixer_l16": 207, "mixer_h14": 431}


@pytest.mark.parametrize("name", sorted(MIXER_PUBLISHED_M))
def test_mixer_presets_match_published_counts(name):
    s = model_summary(name)
    C = {"s": 512, "b": 768, "l": 1024, "h": 1280}[name[6]]
    backbone = s["params"] - (C * 1000 + 1000)
    assert round(backbone / 1e6) == MIXER_PUBLISHED_M[name]
    if name == "mixer_b16":
        assert s["params"] == 59_880_472
        assert s["flops"] == pytest.approx(2 * 12.61e9, rel=0.01)  # published 12.61 GFLOPs (MACs)


def test_scaling_mlp_presets_use_the_official_class_count_and_truncate_to_the_published_millions():
    def params(depth, m, classes):
        d = 64 * 64 * 3
        return d * m + m + depth * (2 * m + 8 * m * m + 5 * m) + m * classes + classes

    def all_truncate(classes):
        return all(params(L, m, classes) // 10**6 == pub for L, m, pub in SCALING_MLP_PRESETS.values())

    assert SCALING_MLP_CLASSES == 11230  # scaling_mlps data_utils/data_stats.py, ImageNet-21k
    assert all_truncate(SCALING_MLP_CLASSES)
    assert params(12, 1024, SCALING_MLP_CLASSES) == 124_843_998
    assert not all_truncate(21843) and not all_truncate(1000)


@pytest.mark.parametrize("name", sorted(SCALING_MLP_PRESETS))
def test_scaling_mlp_presets_match_published_counts(name):
    depth, width, published = SCALING_MLP_PRESETS[name]
    s = model_summary(name)  # built (without init) and counted from its modules
    assert s["params"] // 10**6 == published  # the paper truncates to whole millions
    assert s["effective_width"] == width and s["input_shape"] == [3, 64, 64]
