"""A Mixer's fused seams (token-major, one kernel per seam, RP seams gathering through their
permutations) compute the module path's function: float64 to 1e-12 (logits, input and every
parameter gradient), bf16 autocast to its precision; the models and modes it does not cover take
the module path."""
import copy

import pytest
import torch

from mlplab import create_model
from mlplab.layers import fused
from mlplab.layers.pk import PKMixing
from mlplab.models.impl import Impl, compute_by_definition

pytestmark = pytest.mark.skipif(not fused.available(),
                                reason=f"fused kernels unavailable: {fused.unavailable_reason()}")

CASES = [
    ("s_mixer", dict(hidden_dim=6, depth=3, image_size=16)),
    ("s_mixer", dict(hidden_dim=5, depth=2, image_size=16, act="relu")),  # φ applied before the seam
    ("s_mixer", dict(hidden_dim=6, num_tokens=9, depth=2, image_size=16)),  # skip layer W̃: S0 = 16 -> S = 9
    ("s_mixer", dict(hidden_dim=6, depth=2, image_size=16, skip_layer=True)),  # skip layer at S = S0
    ("mlp_mixer", dict(hidden_dim=5, num_tokens=20, depth=2, image_size=16)),
    ("mlp_mixer", dict(hidden_dim=6, token_hidden=7, channel_hidden=9, depth=2, image_size=16)),
    ("mlp_mixer", dict(hidden_dim=6, expansion=2.0, depth=2, image_size=16, in_chans=1, patch_size=2)),
    # RP: every seam gathered (batch-major residual), the PK layers' biases added to the grouped t
    ("rp_s_mixer", dict(hidden_dim=4, num_tokens=16, depth=2, image_size=16)),
    # one RP block among normal ones: token-major, seams gathering t, h, or both
    ("rp_s_mixer", dict(hidden_dim=4, num_tokens=16, depth=3, image_size=16, rp_blocks=(1,))),
    ("rp_mlp_mixer", dict(hidden_dim=6, num_tokens=16, expansion=2.0, depth=2, image_size=16)),
    # all RP with a skip layer W̃ (S0 = 16 -> S = 9): the batch-major skip
    ("rp_s_mixer", dict(hidden_dim=4, num_tokens=9, depth=2, image_size=16)),
]


def _model(name, dtype=torch.float64, **kw):
    torch.manual_seed(0)
    m = create_model(name, **kw).to(dtype)
    with torch.no_grad():
        for p in m.parameters():  # a non-zero head so that every gradient is informative
            p.normal_(0, 0.3)
    return m


def _run(model, x, fuse):
    model.impl = "fused" if fuse else "module"
    assert model.fusable(x.device).ok is fuse
    model.zero_grad()
    x = x.clone().requires_grad_()
    y = model(x)
    (y * torch.linspace(-1, 1, y.numel(), dtype=y.dtype).view_as(y)).sum().backward()
    return [y, x.grad] + [p.grad for p in model.parameters()]


@pytest.mark.parametrize("name,kw", CASES)
def test_fused_seams_equal_the_module_path_float64(name, kw):
    model = _model(name, **kw)
    x = torch.randn(3, kw.get("in_chans", 3), 16, 16, dtype=torch.float64)
    for a, b in zip(_run(model, x, True), _run(model, x, False)):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", ["s_mixer", "rp_s_mixer"])
def test_fused_seams_under_bf16_autocast(name):
    """GEMMs and h in bf16 both ways; the fused path keeps the residual in float32 where the
    module path rounds it to bf16 at every skip. Against the float32 model, the fused path's
    logits and gradients are at least as close as the module path's."""
    model = _model(name, torch.float32, hidden_dim=32, depth=4, image_size=16)
    x = torch.randn(8, 3, 16, 16)
    exact = _run(model, x, False)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fused_bf16 = _run(model, x, True)
        module_bf16 = _run(model, x, False)
    assert fused_bf16[0].dtype == module_bf16[0].dtype
    for i, (f, m, e) in enumerate(zip(fused_bf16, module_bf16, exact)):
        err_f, err_m = (f.float() - e).norm().item(), (m.float() - e).norm().item()
        assert err_f <= 1.25 * err_m + 1e-3 * e.norm().item(), (i, err_f, err_m)
        assert err_f <= 0.1 * e.norm().item(), (i, err_f)



@pytest.mark.parametrize("name,kw,batch_major", [
    ("rp_s_mixer", dict(hidden_dim=4, num_tokens=16, depth=2, image_size=16), True),  # every sublayer RP
    ("rp_s_mixer", dict(hidden_dim=4, num_tokens=16, depth=2, image_size=16, rp_blocks=(1,)), False),
    ("s_mixer", dict(hidden_dim=4, depth=2, image_size=16), False),
    ("s_mixer", dict(hidden_dim=4, depth=2, image_size=16, num_tokens=9), False),  # a skip layer W̃
    ("rp_s_mixer", dict(hidden_dim=4, num_tokens=9, depth=2, image_size=16), True),
])
def test_the_seams_layout_and_the_dtype_of_h(monkeypatch, name, kw, batch_major):
    """What the seams are handed: batch-major tokens only when every sublayer is RP (each
    sample's tokens together), token-major otherwise; the first h written in bf16 under bf16
    autocast of a float32 model, else in the parameters' dtype."""
    calls = []
    for fn in ("layer_norm_rows", "residual_norm"):
        real = getattr(fused, fn)

        def recording(*args, _real=real, _fn=fn, **kw_):
            calls.append((_fn, args, kw_))
            return _real(*args, **kw_)

        monkeypatch.setattr(fused, fn, recording)
    x = torch.randn(2, 3, 16, 16)
    for dtype, autocast, h_dtype in ((torch.float32, True, torch.bfloat16), (torch.float32, False, torch.float32),
                                     (torch.float64, False, torch.float64)):
        model = _model(name, dtype, **kw).eval()
        model.impl = "fused"
        calls.clear()
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            model(x.to(dtype))
        first = calls[0]
        assert first[0] == "layer_norm_rows" and first[1][2] == h_dtype and first[1][4] is batch_major
        assert len(calls) == 1 + 2 * kw["depth"] and all(c[1][6] is batch_major for c in calls[1:])
        assert all(c[1][0].dtype == dtype for c in calls)  # the residual in the parameters' dtype
        layers = [pk for blk in model.blocks for pk in (blk.token_mixing, blk.channel_mixing)]
        g = layers[0].gathers  # h written as the first layer's grouped input: its (gather, inverse) pair
        assert first[1][3] is None if g is None else (len(first[1][3]) == 2 and first[1][3][0] is g[0])
        S = model.num_tokens
        for pk, (_, args, _) in zip(layers, calls[1:]):  # t: (B, m) grouped for RP, else token-major
            assert args[1].shape == ((2, pk.n1 * pk.n2_out) if pk.arrangement == "gather" else (S, 2, 4))
            if name == "s_mixer":  # φ(W ·) seams: W's bias added in the seam, not in the GEMM
                assert args[7] is pk.group_map[0].bias


def test_the_residual_is_made_in_one_copy():
    """A transposed bf16 view becomes the float32, contiguous residual in one copy."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from mlplab.models.mixer_fused import _residual

    class Copies(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Copies.n += func.__name__.split(".")[0] in ("_to_copy", "clone", "copy_")
            return func(*args, **(kwargs or {}))

    z = torch.randn(3, 4, 5).to(torch.bfloat16).transpose(0, 1)
    with Copies():
        r = _residual(z, torch.float32)
    assert Copies.n == 1 and r.is_contiguous() and r.dtype == torch.float32 and torch.equal(r, z.float())

def test_compiled_fused_model_matches_eager():
    """torch.compile calls the kernels as opaque custom ops (no graph break)."""
    model = _model("rp_s_mixer", torch.float32, hidden_dim=8, depth=2, image_size=8, rp_blocks=(1,))
    x = torch.randn(4, 3, 8, 8)
    eager = _run(model, x, True)
    compiled = torch.compile(model, fullgraph=True)
    model.zero_grad()
    y = compiled(x.clone().requires_grad_())
    (y * torch.linspace(-1, 1, y.numel()).view_as(y)).sum().backward()
    torch.testing.assert_close(y, eager[0], rtol=1e-5, atol=1e-5)
    for p, g in zip(model.parameters(), eager[2:]):
        torch.testing.assert_close(p.grad, g, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name,kw,why", [
    ("s_mixer", dict(hidden_dim=6, depth=2, image_size=16, norm=False), "no LayerNorm"),
    ("s_mixer", dict(hidden_dim=6, depth=2, image_size=16, skip=False), "no skips"),
])
def test_what_is_not_fused(name, kw, why):
    model = _model(name, torch.float32, **kw)
    assert "no seams" in model.fusable("cpu").reason, why
    model.impl = "fused"
    with pytest.raises(RuntimeError, match="impl='fused' but the fused seams cannot run: a Mixer without"):
        model(torch.randn(2, 3, 16, 16))


def test_modes_that_take_the_module_path():
    model = _model("s_mixer", torch.float32, hidden_dim=6, depth=2, image_size=16, drop_path_rate=0.1)
    x = torch.randn(2, 3, 16, 16)
    assert model.train().fusable("cpu") == (False, "stochastic depth while training")
    assert model.eval().fusable("cpu") == (True, "")
    with torch.autocast("cpu", dtype=torch.float16):
        assert model.fusable("cpu") == (False, "autocast to torch.float16")
    assert compute_by_definition(copy.deepcopy(model)).fusable("cpu") == (False, "impl=definition")
    assert "run on CPU" in model.fusable("meta").reason
    logits, feats = model.forward_intermediates(x)  # intermediate features: the module path
    assert "blocks.1.channel" in feats and logits.shape == (2, 10)


def test_forward_hooks_on_blocks_fire():
    """"auto" steps aside for hooked modules: a hook on a block, or on a Linear inside a column
    map (which the left GEMM would bypass), is called once per forward."""
    model = _model("s_mixer", torch.float32, hidden_dim=32, depth=2, image_size=16).eval()
    x = torch.randn(2, 3, 16, 16)
    calls = []
    handles = [model.blocks[1].register_forward_hook(lambda m, i, o: calls.append("block")),
               model.blocks[0].token_mixing.inner[0].register_forward_hook(lambda m, i, o: calls.append("linear"))]
    assert "forward hooks" in model.fusable("cpu").reason
    y = model(x)
    assert sorted(calls) == ["block", "linear"]
    for h in handles:
        h.remove()
    assert model.fusable("cpu").ok
    torch.testing.assert_close(model(x), y, rtol=1e-5, atol=1e-5)
    seen = []
    with torch.nn.modules.module.register_module_forward_hook(lambda m, i, o: seen.append(type(m).__name__)):
        model(x)
    assert "MixerBlock" in seen and "LayerNorm" in seen


def test_one_switch_sets_every_layer():
    model = _model("rp_s_mixer", torch.float32, hidden_dim=4, depth=2, image_size=16, rp_blocks=(1,))
    pks = [m for m in model.modules() if isinstance(m, PKMixing)]
    for impl in ("definition", "fused", "module", "auto"):
        model.impl = impl
        assert model.impl is Impl(impl) and {pk.by_definition for pk in pks} == {impl == "definition"}, impl
    assert {pk.arrangement for pk in pks} == {"columns", "rows", "gather"}
    with pytest.raises(ValueError, match="impl must be one of"):
        model.impl = "fast"
    with pytest.raises(AttributeError, match="^Mixer.fuse_seams was removed: set model.impl = 'auto'"):
        model.fuse_seams = False
    with pytest.raises(ValueError, match="unknown .*impl"):  # one config key: the run config's model.impl
        create_model("s_mixer", impl="module")
    with pytest.raises(ValueError, match="^mlp has no 'fused' implementation"):
        create_model("mlp", image_size=8).impl = "fused"


def test_compiled_mixers_take_the_fused_path_at_every_width(monkeypatch):
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    x = torch.randn(2, 3, 16, 16)
    for c in (1, 8, 64):
        assert _model("s_mixer", torch.float32, hidden_dim=c, depth=1, image_size=16).fusable(x.device).ok


def test_without_the_kernels_the_module_path_runs(monkeypatch):
    monkeypatch.setattr(fused, "available", lambda: False)
    monkeypatch.setattr(fused, "status", lambda: {"available": False, "reason": "no C compiler", "library": None})
    model = _model("s_mixer", torch.float32, hidden_dim=6, depth=2, image_size=16)
    x = torch.randn(2, 3, 16, 16)
    assert model.fusable(x.device) == (False, "the fused kernels are unavailable: no C compiler")
    assert torch.isfinite(model(x)).all()
