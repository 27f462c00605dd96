"""The arrangements of PKMixing (rows, columns) compute exactly Definition 5.1 read literally.

Float64, every registered Mixer variant, forward, intermediates and parameter gradients against
the same model switched to the "gather" arrangement (``compute_by_definition``); a normal
Mixer's state dict holds no permutations, an RP Mixer's holds its free J1, J2.
"""
import copy

import pytest
import torch
import torch.nn as nn

from mlplab import create_model
from mlplab.layers.common import LinearAct, Mlp
from mlplab.layers.pk import PKMixing, permute_entries
from mlplab.layers.vec import invert_perm
from mlplab.models.impl import compute_by_definition

TOL = 1e-12


def _pair(name: str, **kw):
    torch.manual_seed(0)
    fast = create_model(name, **kw).double()
    for p in fast.parameters():  # a non-zero head so that every gradient is informative
        p.data.normal_(0, 0.3)
    slow = compute_by_definition(copy.deepcopy(fast))
    assert all(m.arrangement == "gather" for m in slow.modules() if isinstance(m, PKMixing))
    return fast, slow


CASES = [
    ("mlp_mixer", dict(hidden_dim=6, num_tokens=16, expansion=2.0, depth=2, image_size=16)),
    ("mlp_mixer", dict(hidden_dim=5, num_tokens=12, token_hidden=7, channel_hidden=9, depth=2, image_size=16)),
    ("s_mixer", dict(hidden_dim=6, num_tokens=16, depth=2, image_size=16)),
    ("s_mixer", dict(hidden_dim=6, num_tokens=9, depth=2, image_size=16, act="relu")),  # skip layer
    ("rp_mlp_mixer", dict(hidden_dim=6, num_tokens=16, expansion=2.0, depth=2, image_size=16, rp_blocks=(1,))),
    ("rp_s_mixer", dict(hidden_dim=4, num_tokens=16, depth=2, image_size=16)),
]


@pytest.mark.parametrize("autocast", [False, True])
@pytest.mark.parametrize("name,kw", CASES)
def test_arrangements_match_definition(name, kw, autocast):
    """fp32 takes the left-GEMM columns path, autocast the transposed one; both equal Def. 5.1.
    (Autocast to float64 is not a thing: the autocast case runs the float64 model with
    autocast enabled for bf16, where float64 matmuls stay float64.)"""
    fast, slow = _pair(name, **kw)
    x = torch.randn(3, 3, kw["image_size"], kw["image_size"], dtype=torch.float64)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        lf, ff = fast.forward_intermediates(x)
        ls, fs = slow.forward_intermediates(x)
    assert list(ff) == list(fs)
    torch.testing.assert_close(lf, ls, rtol=0, atol=TOL)
    for k in ff:
        assert ff[k].shape == fs[k].shape, k
        torch.testing.assert_close(ff[k], fs[k], rtol=0, atol=TOL)
    lf.square().sum().backward()
    ls.square().sum().backward()
    for (n, pf), (_, ps) in zip(fast.named_parameters(), slow.named_parameters()):
        assert pf.grad is not None, n
        torch.testing.assert_close(pf.grad, ps.grad, rtol=0, atol=TOL, msg=n)


def test_normal_mixer_arrangements_and_state_dict():
    m = create_model("mlp_mixer", hidden_dim=6, num_tokens=16, depth=1, image_size=16)
    tok, ch = m.blocks[0].token_mixing, m.blocks[0].channel_mixing
    assert tok.arrangement == "columns" and isinstance(tok.inner, Mlp)
    assert ch.arrangement == "rows"
    sd = m.state_dict()
    assert not any("perm" in k for k in sd), "a normal Mixer stores no permutations"
    assert "blocks.0.token_mixing.inner.fc1.weight" in sd
    s = create_model("s_mixer", hidden_dim=4, num_tokens=16, depth=1, image_size=16)
    assert isinstance(s.blocks[0].token_mixing.inner, LinearAct)
    assert "blocks.0.token_mixing.inner.0.weight" in s.state_dict()


def test_rp_mixer_stores_only_its_free_permutations():
    m = create_model("rp_s_mixer", hidden_dim=4, num_tokens=16, depth=3, image_size=16, rp_blocks=(1,))
    perm_keys = sorted(k for k in m.state_dict() if "perm" in k)
    assert perm_keys == [f"blocks.1.{s}.{p}" for s in ("channel_mixing", "token_mixing")
                         for p in ("perm_in", "perm_out")]
    assert m.blocks[1].token_mixing.arrangement == "gather"


def test_checkpoints_with_permutations_for_a_normal_mixer_are_refused():
    """A normal Mixer stores no permutations: an RP Mixer's checkpoint, or an older mlplab's that
    stored the implied J's, is refused naming the layer; a normal one does not load into an RP Mixer."""
    kw = dict(hidden_dim=4, num_tokens=16, depth=1, image_size=16)
    normal = create_model("s_mixer", **kw)
    old = dict(normal.state_dict())
    for name in ("token_mixing", "channel_mixing"):  # what an older mlplab's checkpoint held
        mix = getattr(normal.blocks[0], name)
        old[f"blocks.0.{name}.perm_in"], old[f"blocks.0.{name}.perm_out"] = mix.j1(), mix.j2()
    rp = create_model("rp_s_mixer", **kw).state_dict()
    for state in (old, rp):
        with pytest.raises(RuntimeError, match="blocks.0.token_mixing.perm_in: the checkpoint holds permutations"):
            create_model("s_mixer", **kw).load_state_dict(state)
    with pytest.raises(RuntimeError, match="Missing key"):
        create_model("rp_s_mixer", **kw).load_state_dict(normal.state_dict())


def test_columns_arrangement_with_bias_free_linear_and_generic_inner():
    torch.manual_seed(1)
    for inner in (nn.Linear(5, 7, bias=False).double(), nn.Sequential(nn.Linear(5, 7), nn.Tanh()).double()):
        pk = PKMixing(inner, (5, 3), (7, 3), "columns")
        assert pk.arrangement == "columns"
        x = torch.randn(2, 5, 3, dtype=torch.float64)
        y = pk(x)
        torch.testing.assert_close(y, compute_by_definition(pk)(x), rtol=0, atol=TOL)


def test_permute_entries_gather_backward_is_exact():
    torch.manual_seed(2)
    idx = torch.randperm(12)
    x = torch.randn(3, 12, dtype=torch.float64, requires_grad=True)
    y = permute_entries(x, idx, invert_perm(idx))
    assert torch.equal(y, x[:, idx])
    g = torch.randn(3, 12, dtype=torch.float64)
    (gx,) = torch.autograd.grad(y, x, g)
    ref = torch.zeros_like(x).index_add_(1, idx, g)
    assert torch.equal(gx, ref)


def test_early_autocast_cast_before_the_gather_is_exact():
    """Under bf16 autocast an RP layer casts before its J1 gather (half the bytes moved): the
    permutation commutes with the cast, so outputs and gradients are bitwise those of gathering
    in float32 and letting the Linear cast."""
    torch.manual_seed(3)
    a = create_model("rp_mlp_mixer", hidden_dim=8, num_tokens=16, expansion=2.0, depth=2, image_size=16)
    b = copy.deepcopy(a)
    for mod in b.modules():
        if isinstance(mod, PKMixing):
            mod._linear_first = False  # the plain route: gather fp32, the Linear casts
    x = torch.randn(4, 3, 16, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ya, yb = a(x), b(x)
    assert torch.equal(ya, yb)
    ya.float().square().sum().backward()
    yb.float().square().sum().backward()
    for (n, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.equal(pa.grad, pb.grad), n
