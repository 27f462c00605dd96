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
    dict(image_size=30, layers=(1, 1), width=4),  # an odd side into the max-pool (15 -> 8)
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
    with pytest.raises(ValueError, match="^unknown reference model 'resnet50'; known: resnet152, vit_base, vit_large$"):
        create_reference_model("resnet50")
    with pytest.raises(ValueError, match="^vit_base has no setting depht, wdth; settings: depth, dim, heads, "
                                         "image_size, in_chans, mlp_ratio, num_classes, patch_size$"):
        create_reference_model("vit_base", wdth=3, depht=2)
    r = create_reference_model("resnet152", image_size=8, layers=[1, 1], width=4)  # JSON's list: the tuple
    assert r.config.layers == (1, 1) and len(r.blocks) == 2
    assert all(type(c.flops_per_example()) is int for c in r.modules() if hasattr(c, "flops_per_example"))
    assert all(c.bias is None for c in r.modules() if isinstance(c, torch.nn.Conv2d))
    v = create_reference_model("vit_base", image_size=8, patch_size=4, dim=8, depth=1, heads=2)
    assert v.cls_token.shape == (1, 1, 8)  # timm's layout
    with pytest.raises(ValueError, match="not divisible by 5 heads"):
        create_reference_model("vit_base", image_size=8, patch_size=4, dim=8, depth=1, heads=5)


def test_resnet_starts_at_kaiming_fan_out_and_vit_at_truncated_normal():
    """He et al.'s init in fan-out mode for every convolution, Var w = 2 / (C_out · k²)
    (torchvision's ResNet); the ViT's class token and position embeddings N(0, 0.02²) truncated
    at ±2 (timm's). Per tensor within 25 % of the stated standard deviation (fixed seed)."""
    torch.manual_seed(0)
    r = create_reference_model("resnet152", image_size=16, layers=(1, 1), width=16, num_classes=3)
    convs = [m for m in r.modules() if isinstance(m, torch.nn.Conv2d)]
    assert len(convs) == 1 + 2 * 3 + 2  # stem, three per block, two projection shortcuts
    for c in convs:
        want = (2.0 / (c.out_channels * c.kernel_size[0] * c.kernel_size[1])) ** 0.5
        assert abs(c.weight.std().item() / want - 1) < 0.25, (c, c.weight.std().item(), want)
    v = create_reference_model("vit_base", image_size=8, patch_size=4, dim=256, depth=0, heads=1, num_classes=3)
    for t in (v.cls_token, v.pos_embed):
        assert abs(t.std().item() / 0.02 - 1) < 0.15 and t.abs().max() <= 2
    assert v.pos_embed.shape == (1, 5, 256)


def test_resnet_blocks_and_vit_layers_as_the_papers_state():
    """Bottleneck widths w -> w -> 4w with the stride on the 3×3 convolution, a projection only where
    the shape changes, batch norm after every convolution; the ViT's LayerNorms at ε = 1e-6 and its
    class token read after the final norm. The forward against the formulas, float64."""
    torch.manual_seed(0)
    r = create_reference_model("resnet152", image_size=8, layers=(2, 1), width=4, num_classes=3,
                               stem_kernel=3, stem_stride=1, maxpool=False).double().eval()
    b0, b1, b2 = r.blocks
    assert [(c.in_channels, c.out_channels, c.stride[0]) for c in (b2.conv1, b2.conv2, b2.conv3)] == \
        [(16, 8, 1), (8, 8, 2), (8, 32, 1)]
    assert b0.downsample is not None and b1.downsample is None and b2.downsample[0].stride == (2, 2)
    assert b2.out_size == 4 and b2.conv2.padding == (1, 1) and isinstance(r.pool, torch.nn.Identity)
    with torch.no_grad():
        for m in r.modules():  # non-trivial batch-norm statistics
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5), m.running_var.uniform_(0.5, 2), m.weight.uniform_(0.5, 2)
                m.bias.uniform_(-0.5, 0.5)
    x = torch.randn(2, 3, 8, 8, dtype=torch.float64)
    bn = lambda m, h: (h - m.running_mean[:, None, None]) / (m.running_var[:, None, None] + m.eps).sqrt() \
        * m.weight[:, None, None] + m.bias[:, None, None]  # noqa: E731
    F = torch.nn.functional

    def block(b, h):
        y = F.relu(bn(b.bn1, F.conv2d(h, b.conv1.weight)))
        y = F.relu(bn(b.bn2, F.conv2d(y, b.conv2.weight, stride=b.conv2.stride, padding=1)))
        y = bn(b.bn3, F.conv2d(y, b.conv3.weight))
        short = h if b.downsample is None else bn(b.downsample[1], F.conv2d(h, b.downsample[0].weight,
                                                                           stride=b.downsample[0].stride))
        return F.relu(y + short)

    h = F.relu(bn(r.bn, F.conv2d(x, r.stem.weight, padding=1)))
    for b in r.blocks:
        h = block(b, h)
    with torch.no_grad():
        torch.testing.assert_close(r.forward_features(x), h.mean(dim=(2, 3)), rtol=0, atol=1e-12)
        torch.testing.assert_close(r(x), r.head(h.mean(dim=(2, 3))), rtol=0, atol=1e-12)
    p = create_reference_model("resnet152", image_size=32, layers=(1,), width=4)
    assert p.stem.stride == (2, 2) and p.stem.kernel_size == (7, 7) and isinstance(p.pool, torch.nn.MaxPool2d)
    assert (p.pool.kernel_size, p.pool.stride, p.pool.padding) == (3, 2, 1) and p.blocks[0].conv1.out_size == 8

    v = create_reference_model("vit_base", image_size=8, patch_size=4, dim=8, depth=1, heads=2, num_classes=3)
    v = v.double().eval()
    assert all(n.eps == 1e-6 for n in (v.norm, v.blocks[0].norm1, v.blocks[0].norm2))
    assert v.blocks[0].fc1.out_features == 32 and v.blocks[0].tokens == 5
    with torch.no_grad():
        v.cls_token.normal_(), v.pos_embed.normal_()
        x = torch.randn(2, 3, 8, 8, dtype=torch.float64)
        t = torch.cat([v.cls_token.expand(2, -1, -1), v.patch_embed(x)], dim=1) + v.pos_embed
        want = F.layer_norm(v.blocks[0](t), (8,), v.norm.weight, v.norm.bias, 1e-6)[:, 0]
        torch.testing.assert_close(v.forward_features(x), want, rtol=0, atol=1e-12)
        torch.testing.assert_close(v(x), v.head(want), rtol=0, atol=1e-12)
