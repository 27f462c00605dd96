"""PK layer details the identities do not reach: the custom op's registrations (opcheck), hooks,
autocast, state-dict compatibility, the printed summary and each refusal's sentence."""
import pytest
import torch
import torch.nn as nn

import mlplab
from mlplab.layers.common import LinearAct, Mlp
from mlplab.layers.pk import PKLayer, PKMixing, _permute_entries, has_hooks, permute_entries
from mlplab.layers.vec import commutation_perm, invert_perm
from mlplab.models.impl import Impl, compute_by_definition

D = torch.float64


def test_permute_entries_op_registrations():
    """Fake (meta) kernel, autograd formula and schema of the custom op, by torch's own checker."""
    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float64, torch.float32, torch.bfloat16):
        idx = torch.randperm(6, generator=g)
        x = torch.randn(3, 6, generator=g).to(dtype).requires_grad_(dtype != torch.bfloat16)
        torch.library.opcheck(_permute_entries, (x, idx.view(1, -1), invert_perm(idx).view(1, -1)))
    with torch.device("meta"):  # the fake kernel's shape: (B, len(idx))
        y = _permute_entries(torch.empty(5, 6), torch.arange(4).view(1, -1), torch.arange(4).view(1, -1))
    assert y.shape == (5, 4)


def test_permute_entries_backward_is_the_inverse_gather():
    p = torch.tensor([2, 0, 3, 1])
    x = torch.zeros(1, 4, dtype=D, requires_grad=True)
    permute_entries(x, p).backward(torch.tensor([[10.0, 20.0, 30.0, 40.0]], dtype=D))
    assert x.grad.tolist() == [[20.0, 40.0, 10.0, 30.0]]  # grad[p[k]] = g[k]


def test_has_hooks_sees_every_kind_of_hook():
    outer = nn.Sequential(nn.Sequential(nn.Linear(2, 2)), nn.ReLU())
    assert not has_hooks(outer)
    for register in ("register_forward_hook", "register_forward_pre_hook"):
        for target in (outer, outer[0], outer[0][0]):
            h = getattr(target, register)(lambda *a: None)
            assert has_hooks(outer)
            h.remove()
            assert not has_hooks(outer)
    for register in (nn.modules.module.register_module_forward_hook,
                     nn.modules.module.register_module_forward_pre_hook):
        h = register(lambda *a: None)
        try:
            assert has_hooks(outer)
        finally:
            h.remove()
    assert not has_hooks(outer)


def test_a_hook_on_the_group_map_fires_on_the_left_gemm_path():
    """With ≥ 32 columns the columns arrangement multiplies W from the left without calling the
    Linear; a hook on it must still fire, so the layer then calls it on the transposed input."""
    inner = LinearAct(5, 4)
    pk = PKMixing(inner, (5, 32), (4, 32), "columns").double()
    x = torch.randn(2, 5, 32, dtype=D)
    y0 = pk(x)
    seen = []
    h = inner.register_forward_hook(lambda mod, args, out: seen.append(out.shape))
    y1 = pk(x)
    h.remove()
    assert seen == [(2, 32, 4)]
    assert torch.allclose(y0, y1, atol=1e-13, rtol=0)


def test_autocast_casts_before_the_gather_only_for_a_linear_first_group_map():
    perm = torch.randperm(12, generator=torch.Generator().manual_seed(1))
    lin = PKMixing(nn.Linear(3, 3), (4, 3), (4, 3), 4, perm)
    act_first = PKMixing(nn.Sequential(nn.Tanh(), nn.Linear(3, 3)), (4, 3), (4, 3), 4, perm)
    x = torch.randn(2, 4, 3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert lin._autocast_input(x).dtype == torch.bfloat16
        assert act_first._autocast_input(x).dtype == torch.float32  # tanh runs on the float32 input
        assert lin._autocast_input(x.double()).dtype == torch.float64
        y = lin(x)
    assert lin._autocast_input(x).dtype == torch.float32  # no autocast: untouched
    assert y.dtype == torch.bfloat16
    ref = PKMixing(nn.Linear(3, 3), (4, 3), (4, 3), 4, perm)
    ref.load_state_dict(lin.state_dict())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = ref.inner(permute_entries(x.reshape(2, -1).bfloat16(), ref.gathers[0]).view(2, 4, 3))
    assert torch.equal(y.reshape(2, -1), permute_entries(expected.reshape(2, -1), ref.gathers[2]))


def test_permutations_for_a_layer_with_fixed_js_are_refused_in_one_sentence():
    """A normal layer stores no permutations: a checkpoint that holds some for it (an RP layer's,
    or an older mlplab's that stored the implied J's) is refused, naming the key."""
    S, C = 4, 3
    fixed = PKMixing(nn.Linear(C, C), (S, C), (S, C), "rows")
    implied = {"perm_in": commutation_perm(S, C), "perm_out": invert_perm(commutation_perm(S, C))}
    for sd in (dict(fixed.state_dict(), **implied), dict(fixed.state_dict(), perm_out=torch.arange(S * C))):
        with pytest.raises(RuntimeError) as e:
            fixed.load_state_dict(sd)
        assert ("perm_out: the checkpoint holds permutations for a layer whose J's its 'rows' groups fix: an RP "
                "layer's, or an older mlplab's that stored them, which this version does not read") in str(e.value)
        assert "Unexpected key" not in str(e.value)
    assert not fixed.free_perms and fixed.arrangement == "rows"


def test_free_permutations_default_to_the_identity_on_the_other_side():
    pk = PKMixing(nn.Linear(3, 3), (4, 3), (4, 3), 4, perm_in=torch.arange(12).flip(0))
    assert pk.perm_out.tolist() == list(range(12)) and pk.free_perms
    pk = PKMixing(nn.Linear(3, 2), (4, 3), (4, 2), 4, perm_out=torch.arange(8).flip(0))
    assert pk.perm_in.tolist() == list(range(12)) and pk.perm_out.tolist() == list(range(8))[::-1]
    assert (pk.n1, pk.n2, pk.n2_out) == (4, 3, 2)


def test_fixed_j_are_the_commutation_and_identity():
    rows = PKMixing(nn.Linear(3, 2), (4, 3), (4, 2), "rows")
    assert rows.j1().tolist() == commutation_perm(4, 3).tolist()
    assert rows.j2().tolist() == invert_perm(commutation_perm(4, 2)).tolist()
    assert (rows.n1, rows.n2, rows.n2_out) == (4, 3, 2)
    cols = PKMixing(nn.Linear(4, 5), (4, 3), (5, 3), "columns")
    assert cols.j1().tolist() == list(range(12)) and cols.j2().tolist() == list(range(15))
    assert (cols.n1, cols.n2, cols.n2_out) == (3, 4, 5)
    assert cols.group_map is cols.inner


def test_gathers_are_the_rowmajor_maps_and_their_inverses():
    S, C = 3, 4
    pk = PKMixing(nn.Linear(C, C), (S, C), (S, C), "rows", by_definition=True)
    g_in, g_in_inv, g_out, g_out_inv = pk.gathers
    assert g_in.tolist() == list(range(S * C)) and g_out.tolist() == list(range(S * C))  # rows: no movement
    cols = PKMixing(nn.Linear(S, S), (S, C), (S, C), "columns", by_definition=True)
    g_in, g_in_inv, g_out, g_out_inv = cols.gathers
    # grouped by columns: group j holds X[:, j], i.e. row-major entries j, C + j, 2C + j
    assert g_in.tolist() == [i * C + j for j in range(C) for i in range(S)]
    assert g_in[g_in_inv].tolist() == list(range(S * C)) and g_out[g_out_inv].tolist() == list(range(S * C))
    assert g_out.tolist() == g_in_inv.tolist()


def test_natural_arrangement_needs_the_identity_gathers():
    S, C = 3, 4
    rows_like = PKMixing(nn.Linear(C, C), (S, C), (S, C), S, commutation_perm(S, C),
                         invert_perm(commutation_perm(S, C)))
    assert rows_like.arrangement == "rows" and rows_like.gathers is None
    cols_like = PKMixing(nn.Linear(S, S), (S, C), (S, C), C, torch.arange(S * C), torch.arange(S * C))
    assert cols_like.arrangement == "columns"
    shifted = torch.roll(torch.arange(S * C), 1)
    for p_in, p_out in ((shifted, torch.arange(S * C)), (torch.arange(S * C), shifted)):
        assert PKMixing(nn.Linear(S, S), (S, C), (S, C), C, p_in, p_out).arrangement == "gather"
        q_in, q_out = commutation_perm(S, C)[p_in], invert_perm(commutation_perm(S, C))[p_out]
        assert PKMixing(nn.Linear(C, C), (S, C), (S, C), S, q_in, q_out).arrangement == "gather"


def test_extra_repr():
    assert PKMixing(nn.Linear(3, 2), (4, 3), (4, 2), "rows").extra_repr() == \
        "in=(4, 3), out=(4, 2), n1=4, n2=3, n2'=2, arrangement=rows"
    pk = PKMixing(nn.Linear(3, 3), (4, 3), (4, 3), 4, torch.arange(12), by_definition=True)
    assert pk.extra_repr() == \
        "in=(4, 3), out=(4, 3), n1=4, n2=3, n2'=3, arrangement=gather, free permutations, by definition"


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: PKMixing(nn.Linear(3, 3), (4, 3), (5, 3), "rows"),
         "groups='rows' keeps the rows of X: output (5, 3) does not fit input (4, 3)"),
        (lambda: PKMixing(nn.Linear(4, 4), (4, 3), (4, 2), "columns"),
         "groups='columns' keeps the columns of X: output (4, 2) does not fit input (4, 3)"),
        (lambda: PKMixing(nn.Linear(3, 3), (4, 3), (4, 3), 4),
         "groups must be 'rows', 'columns' or, with free permutations, a group count; got 4"),
        (lambda: PKMixing(nn.Linear(3, 3), (4, 3), (4, 3), 0, torch.arange(12)),
         "0 groups do not fit input (4, 3) (m=12) and output (4, 3) (m'=12)"),
        (lambda: PKMixing(nn.Linear(4, 2), (4, 3), (4, 2), 3, torch.arange(12)),
         "3 groups do not fit input (4, 3) (m=12) and output (4, 2) (m'=8)"),
        (lambda: PKMixing(nn.Linear(4, 2), (4, 3), (4, 2), 5, torch.arange(12)),
         "5 groups do not fit input (4, 3) (m=12) and output (4, 2) (m'=8)"),
        (lambda: PKMixing(Mlp(3, 2, 4), (4, 3), (4, 3), "rows"),
         "the group map takes 3 -> 4 entries but 4 groups of input (4, 3) and output (4, 3) have 3 -> 3"),
        (lambda: PKMixing(LinearAct(2, 3), (4, 3), (4, 3), "rows"),
         "the group map takes 2 -> 3 entries but 4 groups"),
        (lambda: PKMixing(nn.Linear(3, 3), (4, 3), (4, 3), 4, torch.arange(12), torch.arange(11)),
         "perm_out must be a permutation of range(12)"),
        (lambda: Impl.parse("fast"), "impl must be one of auto, module, fused, definition; got 'fast'"),
        (lambda: PKLayer(3, 4, 2, in_shape=(3, 4)),
         "without permutations a PK layer's 3 groups are the columns of X; got X of (3, 4)"),
        (lambda: compute_by_definition(mlplab.create_model("mlp", image_size=8, width=4, depth=1)),
         "mlp has no 'definition' implementation; use impl=auto or module"),
    ],
)
def test_refusals(build, message):
    with pytest.raises(ValueError) as e:
        build()
    assert str(e.value).startswith(message)
    if message.endswith(" -> 3"):  # the whole sentence: whole numbers of entries
        assert str(e.value) == message


def test_group_count_of_one_and_unknown_group_maps():
    pk = PKMixing(nn.Linear(12, 12), (4, 3), (4, 3), 1, torch.arange(12))  # one group: a dense layer
    assert (pk.n1, pk.n2) == (1, 12)
    seq = PKMixing(nn.Sequential(nn.Linear(3, 3)), (4, 3), (4, 3), "rows")  # widths not checked up front
    assert seq.n2 == 3


def test_compute_by_definition_reaches_every_layer_of_any_module():
    model = nn.Sequential(PKMixing(nn.Linear(3, 3), (4, 3), (4, 3), "rows"),
                          PKMixing(nn.Linear(4, 4), (4, 3), (4, 3), "columns"))
    assert compute_by_definition(model) is model
    assert [m.by_definition for m in model] == [True, True]
    assert [m.arrangement for m in model] == ["gather", "gather"]
    for m in model:
        m.by_definition = False
    assert [m.arrangement for m in model] == ["rows", "columns"]
    assert list(Impl) == ["auto", "module", "fused", "definition"] and Impl.parse("fused") is Impl.FUSED


def test_a_meta_build_checks_shapes_not_values():
    """On the meta device a permutation has no values: its shape is checked, its values and the
    arrangement they imply are left to the real build (train.runplan's parameter count)."""
    with torch.device("meta"):
        pk = PKMixing(nn.Linear(4, 4), (4, 3), (4, 3), 3, torch.arange(12), torch.arange(12))
        assert pk.arrangement == "gather" and pk.gathers[0].is_meta
        with pytest.raises(ValueError, match="perm_out must be a permutation of range"):
            PKMixing(nn.Linear(3, 3), (4, 3), (4, 3), 4, torch.arange(12), torch.arange(11))
    assert PKMixing(nn.Linear(4, 4), (4, 3), (4, 3), 3, torch.arange(12), torch.arange(12)).arrangement == "columns"


def test_effective_weight_in_the_dtype_and_on_the_device_asked_for():
    g = torch.Generator().manual_seed(2)
    layer = PKLayer(2, 3, 2, torch.randperm(6, generator=g), torch.randperm(4, generator=g)).double()
    ref = layer.effective_weight()
    assert ref.dtype == D and ref.shape == (4, 6)
    for dtype in (torch.float32, torch.bfloat16):
        A = layer.effective_weight(dtype)
        assert A.dtype == dtype and torch.equal(A, ref.to(dtype))  # a permuted block-diagonal copy of W
    assert layer.float().effective_weight().dtype == D
    assert layer.to("meta").effective_weight().device.type == "meta"  # built where the weights live


def test_state_dict_loading_reports_missing_unexpected_and_mismatched_entries():
    pk = PKMixing(nn.Linear(3, 3), (4, 3), (4, 3), 4, torch.arange(12))
    sd = pk.state_dict()
    with pytest.raises(RuntimeError, match=r'Unexpected key\(s\) in state_dict: "bogus"'):
        pk.load_state_dict({**sd, "bogus": torch.zeros(1)})
    with pytest.raises(RuntimeError, match=r'Missing key\(s\) in state_dict: "perm_in"'):
        pk.load_state_dict({k: v for k, v in sd.items() if k != "perm_in"})
    with pytest.raises(RuntimeError, match="size mismatch for perm_out"):
        pk.load_state_dict({**sd, "perm_out": torch.arange(13)})
    fixed = PKMixing(nn.Linear(3, 3), (4, 3), (4, 3), "rows")
    with pytest.raises(RuntimeError, match=r'Unexpected key\(s\) in state_dict: "bogus"'):
        fixed.load_state_dict({**fixed.state_dict(), "bogus": torch.zeros(1)})


def test_pk_layer_without_or_with_one_permutation():
    torch.manual_seed(3)
    plain = PKLayer(3, 4, 2).double()  # no permutations: the token-mixing layer W X + b on a (4 × 3) X
    assert (plain.groups, plain.free_perms, plain.arrangement) == ("columns", False, "columns")
    X = torch.randn(2, 4, 3, dtype=D)
    W, b = plain.weight.detach(), plain.inner.bias.detach()
    assert torch.allclose(plain(X), W @ X + b[:, None], atol=1e-13, rtol=0)
    p = torch.randperm(12, generator=torch.Generator().manual_seed(4))
    one = PKLayer(3, 4, 2, perm_in=p).double()  # J2 = I
    assert one.free_perms and one.groups == 3 and one.perm_out.tolist() == list(range(6))
    v = X.transpose(1, 2).reshape(2, -1)[:, p]  # J1 vec(X), grouped in 3 groups of 4
    out = (v.view(2, 3, 4) @ one.weight.detach().T + one.inner.bias.detach()).reshape(2, -1)
    assert torch.allclose(one(X).transpose(1, 2).reshape(2, -1), out, atol=1e-13, rtol=0)


def test_gathers_follow_the_parameters_and_a_parameter_free_map_moves_too():
    perm = torch.randperm(12, generator=torch.Generator().manual_seed(5))
    pk = PKMixing(nn.Linear(3, 3), (4, 3), (4, 3), 4, perm)
    pk.to("meta")
    assert {g.device.type for g in pk.gathers} == {"meta"}
    free = PKMixing(nn.Tanh(), (4, 3), (4, 3), 4, perm).double()  # no parameters: the gathers stay on the CPU
    x = torch.randn(2, 4, 3, dtype=D)
    expected = torch.tanh(x.transpose(1, 2).reshape(2, -1)[:, perm])  # J1 vec(X), then φ entry-wise (J2 = I)
    assert torch.equal(free(x).transpose(1, 2).reshape(2, -1), expected)


def test_to_empty_without_recursion_leaves_the_group_map_alone():
    pk = PKMixing(nn.Linear(3, 3), (4, 3), (4, 3), 4, torch.arange(12))
    ptr = pk.inner.weight.data_ptr()
    pk.to_empty(device="cpu", recurse=False)
    assert pk.inner.weight.data_ptr() == ptr  # not re-allocated
    pk.to_empty(device="cpu")
    assert pk.inner.weight.data_ptr() != ptr


def test_the_columns_arrangement_takes_the_left_gemm_from_32_columns(monkeypatch):
    inner = LinearAct(5, 4)
    pk = PKMixing(inner, (5, 32), (4, 32), "columns")
    calls = []
    original = LinearAct.forward_columns
    monkeypatch.setattr(LinearAct, "forward_columns", lambda self, x: calls.append(x.shape) or original(self, x))
    pk(torch.randn(2, 5, 32))
    assert calls == [(2, 5, 32)]
    PKMixing(LinearAct(5, 4), (5, 31), (4, 31), "columns")(torch.randn(2, 5, 31))
    assert calls == [(2, 5, 32)]  # 31 columns: the transposed input instead


def test_permute_entries_double_backward_and_default_grouping():
    p = torch.randperm(6, generator=torch.Generator().manual_seed(6))
    x = torch.randn(2, 6, dtype=D, requires_grad=True)
    assert torch.autograd.gradgradcheck(lambda t: permute_entries(t, p) ** 2, (x,))
    pk = PKMixing(nn.Linear(4, 4), (4, 3), (4, 3))  # groups default to the columns: token mixing
    assert pk.groups == "columns" and pk.arrangement == "columns" and pk.n1 == 3


def test_derived_indices_are_made_on_the_permutations_device(monkeypatch):
    """On a GPU an index made on the host cannot gather a GPU tensor: every index the layer derives
    (re-derived on load) names the device of its permutations. No GPU here, so the device each
    ``torch.arange`` is asked for is recorded: the natural rows and columns arrangements and a
    gather, whose derivations between them reach every index."""
    S, C = 4, 3
    g = torch.Generator().manual_seed(0)
    layers = {"rows": PKMixing(nn.Linear(C, C), (S, C), (S, C), "rows", commutation_perm(S, C),
                               invert_perm(commutation_perm(S, C))),
              "columns": PKMixing(nn.Linear(S, S), (S, C), (S, C), "columns", torch.arange(S * C),
                                  torch.arange(S * C)),
              "gather": PKMixing(nn.Linear(C, C), (S, C), (S, C), "rows", torch.randperm(S * C, generator=g),
                                 torch.randperm(S * C, generator=g))}
    asked, arange = [], torch.arange

    def recording_arange(*args, **kwargs):
        asked.append(kwargs.get("device", "not given"))
        return arange(*args, **kwargs)

    for natural, layer in layers.items():
        asked.clear()
        monkeypatch.setattr(torch, "arange", recording_arange)
        layer.load_state_dict(layer.state_dict())
        monkeypatch.undo()
        assert layer._natural == natural and len(asked) >= 4 and set(asked) == {torch.device("cpu")}, (natural, asked)


@pytest.mark.parametrize("free", [True, False])
def test_effective_weight_is_built_on_the_weights_device(free, monkeypatch):
    """J2 (I ⊗ W) J1 where W lives (``meta`` stands in for a GPU: shapes without data), both
    permutations moved there (recorded: a matmul with ``meta`` does not check its other side)."""
    g = torch.Generator().manual_seed(0)
    perms = (torch.randperm(12, generator=g), torch.randperm(6, generator=g)) if free else (None, None)
    layer = PKLayer(3, 4, 2, *perms).double()
    want = layer.effective_weight()
    layer.to("meta")
    moves, to = [], torch.Tensor.to

    def recording_to(self, *args, **kwargs):
        if self.dtype == torch.long:  # a permutation
            moves.append(args[0] if args else kwargs.get("device"))
        return to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", recording_to)
    got = layer.effective_weight()
    monkeypatch.undo()
    assert got.device.type == "meta" and got.shape == want.shape == (6, 12) and got.dtype == torch.float64
    assert moves == [torch.device("meta")] * 2
