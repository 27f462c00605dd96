"""The reference ResNet and ViT of the inference measurements: published parameter counts, shapes,
the analytic FLOPs against ``FlopCounterMode`` (equal for convolutions; for ViTs the fused
attention products are the stated difference) and refused settings."""
import pytest
import torch

from mlplab.analysis.cost import skip_init
from mlplab.models.counting import count_flops, count_params, measured_flops
from mlplab.models.reference import REFERENCE_MODELS, create_reference_model, is_reference_model


def built(name, **kw):
    with skip_init():
        return create_reference_model(name, **kw)


@pytest.mark.parametrize("name, kw, params", [
    ("resnet152", {}, 60_192_808),  # torchvision's resnet152
    ("resnet152", dict(image_size=64, stem_stride=1, maxpool=False), 60_192_808),  # strides do not change weights
    ("vit_base", {}, 86_567_656),  # timm's vit_base_patch16_224
    ("vit_base", dict(image_size=64, patch_size=4), 86_060_776),  # Scaling MLPs Table 4: 86.06M
    ("vit_large", {}, 304_326_632),  # timm's vit_large_patch16_224
])
def test_published_parameter_counts(name, kw, params):
    assert count_params(built(name, **kw)) == params


def test_table4_resnet_flops_differ_from_the_published_by_the_stated_amount():
    """Our count of ResNet-152 at 64×64 without the first stride and max-pool is 14.92 GMACs (every
    stage at 64/56 of its 224 side: 11.51 × (64/56)² plus the stem), Table 4 prints 13.07G; at 224
    ours is torchvision's 11.51 GMACs (4.09 for ResNet-50, the same code with 3, 4, 6, 3 blocks)."""
    assert count_flops(built("resnet152")) / 2 == 11_513_626_624
    assert count_flops(built("resnet152", layers=(3, 4, 6, 3))) / 2 == pytest.approx(4.09e9, rel=2e-3)
    assert count_flops(built("resnet152", image_size=64, stem_stride=1, maxpool=False)) / 2 == 14_921_973_760


@pytest.mark.parametrize("kw", [
    dict(image_size=32, layers=(1, 2, 1, 1), width=8),  # strides, max-pool, projection shortcuts
    dict(image_size=16, layers=(1, 1, 1, 1), width=4, stem_stride=1, maxpool=False, stem_kernel=3),
    dict(image_size=20, layers=(1, 1, 1), width=4),  # odd sides round like torch's convolution
])
def test_resnet_flops_equal_flop_counter(kw):
    torch.manual_seed(0)
    m = create_reference_model("resnet152", num_classes=7, **kw)
    assert count_flops(m) == measured_flops(m)
    assert m(torch.randn(2, 3, kw["image_size"], kw["image_size"])).shape == (2, 7)


@pytest.mark.parametrize("kw", [dict(image_size=16, patch_size=4, dim=32, depth=2, heads=4),
                                dict(image_size=12, patch_size=6, dim=24, depth=1, heads=2, mlp_ratio=2.0)])
def test_vit_flops_are_the_flop_counter_plus_the_attention_products(kw):
    torch.manual_seed(0)
    m = create_reference_model("vit_base", num_classes=5, **kw)
    n = (kw["image_size"] // kw["patch_size"]) ** 2 + 1
    assert m.attention_flops() == kw["depth"] * 4 * n * n * kw["dim"]
    assert count_flops(m) - m.attention_flops() == measured_flops(m)  # FlopCounterMode misses CPU fused attention
    assert m(torch.randn(3, 3, kw["image_size"], kw["image_size"])).shape == (3, 5)


def test_vit_attention_equals_the_explicit_softmax():
    torch.manual_seed(0)
    m = create_reference_model("vit_base", image_size=8, patch_size=4, dim=8, depth=1, heads=2, num_classes=3).eval()
    b = m.blocks[0]
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    b.double()
    q, k, v = b.qkv(b.norm1(x)).view(2, 5, 3, 2, 4).permute(2, 0, 3, 1, 4)
    a = torch.softmax(q @ k.transpose(-1, -2) / 2.0, dim=-1) @ v  # 1/sqrt(4)
    h = x + b.proj(a.transpose(1, 2).reshape(2, 5, 8))
    expected = h + b.fc2(torch.nn.functional.gelu(b.fc1(b.norm2(h))))
    torch.testing.assert_close(b(x), expected)


def test_table4_vit_and_vit_large_flops():
    """ViT-B/4 at 64: 23.056 GMACs (Table 4 23.08G: fvcore adds 5 FLOPs per layer-norm element,
    0.024G); ViT-L/16 at 224: 61.55 GMACs (timm/fvcore 61.6G)."""
    assert count_flops(built("vit_base", image_size=64, patch_size=4)) / 2 == 23_055_826_944
    assert count_flops(built("vit_large")) / 2 == pytest.approx(61.55e9, rel=1e-3)


def test_names_and_refused_settings():
    assert is_reference_model("resnet152") and not is_reference_model("mlp_mixer")
    assert set(REFERENCE_MODELS) == {"resnet152", "vit_base", "vit_large"}
    with pytest.raises(ValueError, match="unknown reference model 'resnet50'; known: resnet152"):
        create_reference_model("resnet50")
    with pytest.raises(ValueError, match="vit_base has no setting depht"):
        create_reference_model("vit_base", depht=2)
    with pytest.raises(ValueError, match="not divisible by 5 heads"):
        create_reference_model("vit_base", image_size=8, patch_size=4, dim=8, depth=1, heads=5)
