"""The model API of docs/DESIGN.md, for EVERY registered model (timm-style), at tiny sizes.

The 224×224 presets are run with small overrides (image = 2 patches, narrow, shallow); their
default sizes are checked by parameter count in test_published_sizes.py.
"""
import io

import pytest
import torch

import mlplab
from mlplab.models.registry import get_model_entry

ALL = mlplab.list_models()
RANDOM_STRUCTURE = ("perm_in", "perm_out", "mask", "indices")  # buffers drawn from `seed`


def small(name: str) -> dict:
    entry = get_model_entry(name)
    fam, d = entry.family, entry.defaults
    if fam == "mlp_mixer":
        o = dict(image_size=8, patch_size=2, hidden_dim=8, depth=2, num_classes=5, zero_head=False)
        if "token_hidden" in d:  # published presets: keep their patch size, 2x2 patches
            o.update(image_size=2 * d["patch_size"], patch_size=d["patch_size"], token_hidden=6, channel_hidden=12)
        return o
    if fam == "sw_mlp":
        return dict(image_size=8, patch_size=2, width=32, depth=2, num_classes=5, density=0.25)
    if fam == "mlp":
        return dict(image_size=4, width=16, depth=2, num_classes=5)
    if fam == "shallow":
        return dict(image_size=4, in_chans=1, num_classes=5)
    raise AssertionError(f"add tiny overrides for family {fam!r} to this test")


def build(name: str, seed_global: int = 0, **extra) -> torch.nn.Module:
    torch.manual_seed(seed_global)
    return mlplab.create_model(name, **{**small(name), **extra})


def images(model, n=3, seed=0):
    c = model.config
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, c.in_chans, c.image_size, c.image_size, generator=g)


def _has_seed(name):
    return "seed" in {f for f in get_model_entry(name).config_cls.__dataclass_fields__}


@pytest.mark.parametrize("name", ALL)
def test_forward_shape_finite_and_every_parameter_gets_a_gradient(name):
    model = build(name)
    assert model.model_name == name and model.config is not None
    with torch.no_grad():  # zero-initialised heads would block every other gradient
        torch.nn.init.normal_(model.head.weight, std=0.1)
    x = images(model)
    y = model(x)
    assert y.shape == (3, model.config.num_classes)
    assert torch.isfinite(y).all()
    (y ** 2).sum().backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None, f"{name}: {pname} got no gradient"
        assert p.grad.abs().sum() > 0, f"{name}: {pname} has an all-zero gradient"
    torch.testing.assert_close(model.forward_head(model.forward_features(x)), y)


@pytest.mark.parametrize("name", ALL)
def test_forward_intermediates_keys(name):
    model = build(name).eval()
    x = images(model)
    logits, feats = model.forward_intermediates(x)
    torch.testing.assert_close(logits, model(x))
    keys = list(feats)
    assert keys[0] == "stem" and keys[-1] == "pre_logits"
    depth = getattr(model.config, "depth", 2)
    if get_model_entry(name).family == "mlp_mixer":
        expected = [f"blocks.{i}.{s}" for i in range(depth) for s in ("token", "channel")]
    else:
        expected = [f"blocks.{i}" for i in range(depth)]
    assert keys[1:-1] == expected
    for k, v in feats.items():
        assert v.shape[0] == 3 and torch.isfinite(v).all(), k


@pytest.mark.parametrize("name", ALL)
def test_same_seed_same_model_and_different_seed_different_structure(name):
    a, b = build(name).state_dict(), build(name).state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    if not _has_seed(name):
        return
    c = build(name, seed=7).state_dict()
    random_keys = [k for k in a if k.rsplit(".", 1)[-1] in RANDOM_STRUCTURE
                   and not torch.equal(a[k], torch.arange(a[k].numel()))]
    if any(k.rsplit(".", 1)[-1] in ("mask", "indices") for k in a) or name.startswith("rp_"):
        assert random_keys, f"{name}: expected random permutations or masks"
        assert any(a[k].shape != c[k].shape or not torch.equal(a[k], c[k]) for k in random_keys)


@pytest.mark.parametrize("name", ALL)
def test_state_dict_round_trip_restores_permutations_and_masks(name):
    src = build(name, seed_global=0).eval()
    buf = io.BytesIO()
    torch.save(src.state_dict(), buf)
    buf.seek(0)
    extra = {"seed": 123} if _has_seed(name) else {}
    dst = build(name, seed_global=1, **extra).eval()
    sd = torch.load(buf, weights_only=True)
    dst.load_state_dict(sd)
    x = images(src)
    torch.testing.assert_close(dst(x), src(x), rtol=0, atol=0)
    for k, v in src.state_dict().items():
        assert torch.equal(v, dst.state_dict()[k]), k


@pytest.mark.parametrize("name", ALL)
def test_mismatched_state_dict_is_refused(name):
    model = build(name)
    other = build(name, num_classes=4)
    with pytest.raises(RuntimeError, match="size mismatch"):
        model.load_state_dict(other.state_dict())
    sd = model.state_dict()
    sd.pop(next(iter(sd)))
    with pytest.raises(RuntimeError, match="Missing key"):
        model.load_state_dict(sd)


FAMILY_REPRESENTATIVES = ["mlp_mixer", "sw_mlp", "mlp", "monarch_mlp"]


@pytest.mark.parametrize("name", FAMILY_REPRESENTATIVES)
def test_unknown_override_and_wrong_type_list_valid_ones(name):
    with pytest.raises(ValueError, match="valid overrides are: .*image_size"):
        mlplab.create_model(name, not_a_field=1)
    with pytest.raises(TypeError, match="image_size"):
        mlplab.create_model(name, image_size="32")
    with pytest.raises(ValueError, match="registered models are: .*sw_mlp"):
        mlplab.create_model(name + "_nope")


@pytest.mark.parametrize(
    "name, overrides, message",
    [
        ("mlp_mixer", dict(image_size=30, patch_size=4), r"patch_size=4 does not divide image_size=30; choose one of"),
        ("sw_mlp", dict(image_size=30, patch_size=4), r"patch_size=4 does not divide image_size=30"),
        ("mlp_mixer", dict(num_tokens=0), r"num_tokens \(S\) must be >= 1"),
        ("mlp_mixer", dict(hidden_dim=0), r"hidden_dim \(C\) must be >= 1"),
        ("sw_mlp", dict(density=0.0), r"density p must be in \(0, 1\]"),
        ("sw_mlp", dict(density=1.5), r"density p must be in \(0, 1\]"),
        ("sw_mlp", dict(width=0), r"width m must be >= 1"),
        ("sw_mlp", dict(width=64, omega=4096.0), r"give width .* or omega .*, not both"),
        ("sw_mlp", dict(width=100, stem="patch"), r"use stem='dense' or 'auto'"),
        ("sw_mlp", dict(expansion=2.0), r"only applies to block='mlp'"),
        ("mlp", dict(width=0), r"width \(m\) must be >= 1"),
        ("bottleneck_mlp", dict(depth=0), r"depth \(L\) must be >= 1"),
        ("monarch_mlp", dict(width=0), r"width must be >= 1"),
        ("monarch_mlp", dict(nblocks=5), r"nblocks=5 must be >= 1 and divide"),
    ],
)
def test_impossible_settings_say_what_to_change(name, overrides, message):
    with pytest.raises(ValueError, match=message):
        mlplab.create_model(name, **overrides)


def test_wrong_image_shape_is_refused():
    for name in ("sw_mlp", "mlp", "monarch_mlp"):
        model = build(name)
        with pytest.raises(ValueError, match="set image_size/in_chans"):
            model(torch.zeros(1, 3, 5, 5))


@pytest.mark.parametrize("name,extra", [(n, {}) for n in ALL] + [("sw_mlp", {"storage": "sparse"})],
                         ids=[*ALL, "sw_mlp-sparse"])
def test_every_family_trains_under_bf16_autocast(name, extra):
    """``precision=auto`` picks bf16 autocast on CPUs with native bf16 and on Ampere+ GPUs: every
    model, the CSR-stored SW-MLP included, must take a finite step there."""
    model = build(name, **extra)
    with torch.no_grad():
        torch.nn.init.normal_(model.head.weight, std=0.1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = torch.nn.functional.cross_entropy(model(images(model)), torch.tensor([0, 1, 2]))
    loss.backward()
    assert torch.isfinite(loss)
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters() if p.requires_grad)
    opt.step()
