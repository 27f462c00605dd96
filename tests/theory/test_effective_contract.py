"""What effective_mlp reports and refuses: the summary table (counts checked by hand), the layer
lookup, the size guard's sentence, LayerNorm without affine parameters, and group maps it cannot
express."""
import numpy as np
import pytest
import torch
import torch.nn as nn

import mlplab
from mlplab.layers.pk import PKMixing
from mlplab.theory import effective_mlp, pk_matrix, sparse_kron_identity, sparse_perm_matrix
from mlplab.theory.effective import TokenLayerNorm, _inner_chain, _ln_op

D = torch.float64

# S = 3, C = 2, S0 = 4 (4×4 image, patch 2), C0 = 12: stem C·C0·S0 = 96 nonzeros of 8 × 48,
# token C·S·S0 = 24 of 6 × 8 (and the skip layer the same), channel S·C² = 12 of 6 × 6,
# pool C·S = 6 of 2 × 6, head 10·C = 20: 182 in all
SUMMARY = """\
effective wide MLP of s_mixer: S = 3, C = 2, m = S·C = 6, S0 = 4, 182 nonzeros (Prop. 3.2)
layer                kind     shape (out x in)  width  nnz  density      expected
-------------------  -------  ----------------  -----  ---  -------  ------------
stem                 stem               8 x 48      8   96     0.25   1/S0 = 0.25
blocks.0.token.fc    token               6 x 8      6   24      0.5     1/C = 0.5
blocks.0.skip        skip                6 x 8      6   24      0.5     1/C = 0.5
blocks.0.channel.fc  channel             6 x 6      6   12   0.3333  1/S = 0.3333
pool                 pool                2 x 6      2    6      0.5     1/C = 0.5
head                 head               10 x 2     10   20        1         1 = 1"""


def _small():
    torch.manual_seed(0)
    return mlplab.create_model("s_mixer", image_size=4, patch_size=2, num_tokens=3, hidden_dim=2, depth=1,
                               zero_head=False).double().eval()


def test_summary_pinned():
    eff = effective_mlp(_small())
    assert eff.summary() == SUMMARY
    assert eff.nnz == 182 and eff.width == 6 and (eff.tokens, eff.channels, eff.patches) == (3, 2, 4)
    assert [i.expected_density for i in eff.layers()] == [0.25, 0.5, 0.5, 1 / 3, 0.5, 1.0]
    assert [i.width for i in eff.layers()] == [8, 6, 6, 6, 2, 10]
    assert eff.rp_blocks == () and eff.model_name == "s_mixer" and eff.image_shape == (3, 4, 4)


def test_rp_blocks_are_recorded():
    torch.manual_seed(0)
    model = mlplab.create_model("rp_s_mixer", image_size=4, patch_size=2, hidden_dim=2, depth=3,
                                rp_blocks=(2, 0)).double().eval()
    eff = effective_mlp(model)
    assert eff.rp_blocks == (0, 2)
    assert [i.name for i in eff.layers() if i.rp] == ["blocks.0.token.fc", "blocks.0.channel.fc",
                                                        "blocks.2.token.fc", "blocks.2.channel.fc"]
    assert "blocks.2.token.fc    token (RP)" in eff.summary()


def test_layer_lookup_and_refusals():
    model = _small()
    eff = effective_mlp(model)
    assert eff.layer("pool").kind == "pool"
    with pytest.raises(KeyError) as e:
        eff.layer("nope")
    assert e.value.args[0] == ("no linear layer 'nope'; layers are: stem, blocks.0.token.fc, blocks.0.skip, "
                               "blocks.0.channel.fc, pool, head")
    with pytest.raises(ValueError) as e:
        effective_mlp(model, max_nnz=181)
    assert str(e.value) == (
        "the effective MLP would hold 182 nonzeros (> max_nnz = 181, about 0.0 GiB sparse; dense, each m×m layer "
        "would be 6² = 36 entries). Use a smaller S, C or depth, or raise max_nnz")
    assert effective_mlp(model, max_nnz=182).nnz == 182  # the limit itself is allowed
    with pytest.raises(ValueError) as e:
        eff(torch.zeros(2, 3, 4, 5, dtype=D))
    assert str(e.value) == "expected images of shape (N, 3, 4, 4), got (2, 3, 4, 5)"
    with pytest.raises(ValueError, match="expected images of shape"):
        eff(torch.zeros(3, 4, 4, dtype=D))
    with pytest.raises(TypeError) as e:
        effective_mlp(nn.Linear(2, 2))
    assert str(e.value) == "effective_mlp expects a mlplab Mixer (S-Mixer / MLP-Mixer / RP), got Linear"


def test_active_stochastic_depth_is_refused_but_inactive_dropout_is_not():
    model = mlplab.create_model("s_mixer", image_size=4, patch_size=2, hidden_dim=2, depth=2, drop_path_rate=0.2)
    with pytest.raises(ValueError) as e:
        effective_mlp(model.train())
    assert str(e.value) == "the model has active dropout / stochastic depth; call model.eval() first"
    effective_mlp(mlplab.create_model("s_mixer", image_size=4, patch_size=2, hidden_dim=2, depth=1).train())


def test_token_layer_norm_is_the_numpy_layer_norm_of_each_token():
    """vec(X)[j·S + i] = X[i, j]: token i owns entries {j·S + i}_j; with and without affine parameters."""
    S, C = 3, 4
    g = torch.Generator().manual_seed(0)
    X = torch.randn(2, S, C, generator=g, dtype=D) * 3 + 1
    v = X.transpose(1, 2).reshape(2, -1)
    w, b = torch.randn(C, generator=g, dtype=D), torch.randn(C, generator=g, dtype=D)
    Xn = X.numpy()
    mu, var = Xn.mean(-1, keepdims=True), Xn.var(-1, keepdims=True)
    ref = (Xn - mu) / np.sqrt(var + 1e-5)
    for weight, bias, expected in ((None, None, ref), (w, b, ref * w.numpy() + b.numpy()), (w, None, ref * w.numpy()),
                                   (None, b, ref + b.numpy())):
        out = TokenLayerNorm("n", S, C, weight, bias, 1e-5)(v).reshape(2, C, S).transpose(1, 2)
        np.testing.assert_allclose(out.numpy(), expected, rtol=0, atol=1e-12)
    plain = _ln_op(nn.LayerNorm(C, elementwise_affine=False), "n", S, C, D)
    assert plain.weight is None and plain.bias is None and plain.eps == 1e-5
    no_bias = _ln_op(nn.LayerNorm(C, bias=False, eps=1e-3).double(), "n", S, C, D)
    assert no_bias.bias is None and torch.equal(no_bias.weight, torch.ones(C, dtype=D)) and no_bias.eps == 1e-3
    assert _ln_op(nn.Identity(), "n", S, C, D) is None
    with pytest.raises(TypeError, match="^blocks.0.norm1: BatchNorm1d is not a LayerNorm$"):
        _ln_op(nn.BatchNorm1d(C), "blocks.0.norm1", S, C, D)


def test_group_maps_it_cannot_express():
    assert _inner_chain(nn.Sequential(nn.Identity(), nn.Linear(2, 2), nn.Dropout(0.0), nn.GELU()), "x")[1][0] == "act"
    assert [t for t, _ in _inner_chain(nn.Sequential(nn.Sequential(nn.Linear(2, 3), nn.ReLU()), nn.Linear(3, 2)),
                                      "x")] == ["linear", "act", "linear"]
    assert [t for t, _ in _inner_chain(nn.Sequential(nn.Dropout(0.5).eval(), nn.Linear(2, 2)), "x")] == ["linear"]
    with pytest.raises(TypeError, match="^blk: cannot express Conv1d as sparse linear layers$"):
        _inner_chain(nn.Conv1d(1, 1, 1), "blk")
    with pytest.raises(TypeError, match="^blk: Softmax is not an entry-wise activation mlplab knows$"):
        _inner_chain(nn.Sequential(nn.Linear(2, 2), nn.Softmax(-1)), "blk")
    with pytest.raises(ValueError, match="^blk: dropout is active; call model.eval\\(\\) first$"):
        _inner_chain(nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5)), "blk")
    from mlplab.theory.effective import _pk_ops
    with pytest.raises(TypeError, match="^t: the mixing layer has no linear map$"):
        _pk_ops(PKMixing(nn.Sequential(nn.ReLU()), (2, 3), (2, 3), "rows"), "t", "token", "1/C", False, D)


def test_sparse_helpers_refuse_what_does_not_fit():
    W = torch.randn(3, 2, dtype=D)
    with pytest.raises(ValueError) as e:
        sparse_kron_identity(W, 2, side="middle")
    assert str(e.value) == "side must be 'left' (I ⊗ W) or 'right' (W ⊗ I), got 'middle'"
    with pytest.raises(ValueError) as e:
        pk_matrix(W, 2, perm_out=torch.arange(5))
    assert str(e.value) == "perm_out has 5 entries, expected n1·n2' = 6"
    with pytest.raises(ValueError) as e:
        pk_matrix(W, 2, perm_in=torch.arange(6))
    assert str(e.value) == "perm_in has 6 entries, expected n1·n2 = 4"
    P = sparse_perm_matrix(torch.tensor([2, 0, 1]), dtype=torch.float32)
    assert P.dtype == torch.float32 and P.to_dense().tolist() == [[0, 0, 1], [1, 0, 0], [0, 1, 0]]
    assert sparse_perm_matrix(torch.tensor([1, 0])).dtype == D
    assert torch.equal(sparse_kron_identity(W, 2).to_dense(), torch.block_diag(W, W))  # side="left" by default
    empty = pk_matrix(torch.zeros(3, 0, dtype=D), 2)  # no input columns: rows of nothing
    assert empty.shape == (6, 0) and empty.values().numel() == 0


def test_inputs_and_parameters_are_converted_to_the_effective_dtype():
    model = _small()
    x = torch.randn(2, 3, 4, 4, generator=torch.Generator().manual_seed(1))
    eff = effective_mlp(model)
    out = eff(x)  # float32 images: converted to float64 first, exactly
    assert out.dtype == D and torch.equal(out, eff(x.double()))
    eff32 = effective_mlp(model, dtype=torch.float32)  # a float64 model materialised in float32
    out32 = eff32(x)
    assert out32.dtype == torch.float32 and all(l.weight.dtype == torch.float32 for l in eff32.linears())
    assert all(l.bias is None or l.bias.dtype == torch.float32 for l in eff32.linears())
    assert (out32.double() - out).abs().max().item() < 1e-4
    eff.model_name = ""
    assert eff.summary().startswith("effective wide MLP of Mixer: S = 3")


def test_a_stem_without_bias():
    model = _small()
    model.stem.proj.register_parameter("bias", None)
    x = torch.randn(2, 3, 4, 4, dtype=D, generator=torch.Generator().manual_seed(2))
    eff = effective_mlp(model)
    assert eff.layer("stem").bias is None
    with torch.no_grad():
        assert (eff(x) - model(x)).abs().max().item() <= 1e-12


def test_rp_mlp_block_hidden_layer_is_the_grouped_hidden_vector():
    """An RP layer's hidden permutation is the identity: the hidden vector is the group map's
    hidden output in group order, as Def. 5.1 computes it."""
    from mlplab.models.impl import compute_by_definition

    torch.manual_seed(0)
    model = mlplab.create_model("rp_mlp_mixer", image_size=4, patch_size=2, num_tokens=3, hidden_dim=2, depth=1,
                                expansion=2.0, zero_head=False).double().eval()
    compute_by_definition(model)
    seen = {}
    blk = model.blocks[0]
    hooks = [blk.token_mixing.inner.act.register_forward_hook(lambda m, i, o: seen.__setitem__("tok", o)),
             blk.channel_mixing.inner.act.register_forward_hook(lambda m, i, o: seen.__setitem__("ch", o))]
    x = torch.randn(2, 3, 4, 4, dtype=D, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    trace = effective_mlp(model).intermediates(x)
    assert torch.allclose(trace["blocks.0.token.act"], seen["tok"].reshape(2, -1), atol=1e-12, rtol=0)
    assert torch.allclose(trace["blocks.0.channel.act"], seen["ch"].reshape(2, -1), atol=1e-12, rtol=0)


def test_the_size_guard_names_the_storage_of_a_large_model():
    """S0 = S = 1024, C = 128, C0 = 12, one block: stem 128·12·1024 = 1,572,864, token C·S·S0 =
    134,217,728, channel S·C² = 16,777,216, pool and head 1024·128 + 10·128 = 132,352 nonzeros;
    16 bytes each is 2.3 GiB; m = 131,072. Refused before anything is built."""
    model = mlplab.create_model("s_mixer", image_size=64, patch_size=2, hidden_dim=128, depth=1)
    with pytest.raises(ValueError) as e:
        effective_mlp(model)
    assert str(e.value) == (
        "the effective MLP would hold 152,700,160 nonzeros (> max_nnz = 20,000,000, about 2.3 GiB sparse; dense, "
        "each m×m layer would be 131,072² = 17,179,869,184 entries). Use a smaller S, C or depth, or raise max_nnz")


def test_trace_names_inactive_dropout_and_unnamed_models():
    model = _small()
    trace = effective_mlp(model).intermediates(torch.zeros(1, 3, 4, 4, dtype=D))
    assert list(trace) == ["stem", "blocks.0.norm1", "blocks.0.token.fc", "blocks.0.token.act", "blocks.0.token",
                           "blocks.0.norm2", "blocks.0.channel.fc", "blocks.0.channel.act", "blocks.0.channel",
                           "norm", "pool", "head", "logits"]
    del model.model_name  # a Mixer not built by create_model
    assert effective_mlp(model).model_name == "Mixer"
    mlp = mlplab.create_model("mlp_mixer", image_size=4, patch_size=2, hidden_dim=2, depth=1).double()
    mlp.blocks[0].token_mixing.inner.drop1 = nn.Dropout(0.0)  # p = 0: the identity even in training
    effective_mlp(mlp.train())
    drop = mlplab.create_model("mlp_mixer", image_size=4, patch_size=2, hidden_dim=2, depth=1, drop_rate=0.1)
    with pytest.raises(ValueError) as e:
        effective_mlp(drop.train())
    assert str(e.value) == "the model has active dropout / stochastic depth; call model.eval() first"
    untied = mlplab.create_model("mlp_mixer", image_size=4, patch_size=2, hidden_dim=2, depth=1, token_mixing="untied")
    with pytest.raises(ValueError) as e:
        effective_mlp(untied)
    assert str(e.value) == "effective_mlp builds the PK token mixing of the shared Mixer, not token_mixing='untied'"


def test_a_head_without_bias():
    model = _small()
    model.head.register_parameter("bias", None)
    x = torch.randn(2, 3, 4, 4, dtype=D, generator=torch.Generator().manual_seed(4))
    eff = effective_mlp(model)
    assert eff.layer("head").bias is None
    with torch.no_grad():
        assert (eff(x) - model(x)).abs().max().item() <= 1e-12


def test_the_first_sparse_matrix_of_a_process_is_built_quietly():
    """torch warns once per process that sparse CSR is in beta; the first matrix built must neither
    print that nor fail on it (the warning filter around the constructor)."""
    import os
    import subprocess
    import sys

    assert pk_matrix(torch.ones(2, 2), 2).to_dense().sum().item() == 8.0  # in this process: warned already
    code = ("import torch; from mlplab.theory import pk_matrix; "
            "print(pk_matrix(torch.ones(2, 2), 2).to_dense().sum().item())")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.run([sys.executable, "-W", "default", "-c", code], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "8.0" and "beta" not in proc.stderr


def test_pk_ops_of_longer_group_maps():
    from mlplab.theory.effective import _pk_ops

    inner = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 5, bias=False), nn.Tanh(), nn.Linear(5, 3))
    ops = _pk_ops(PKMixing(inner, (2, 3), (2, 3), "rows").double(), "t", "channel", "1/S", False, D)
    assert [op.name for op in ops] == ["t.fc1", "t.act1", "t.fc2", "t.act2", "t.fc3"]
    assert ops[2].bias is None and ops[0].bias.dtype == D
    bad = nn.Sequential(nn.Linear(2, 4), nn.Linear(4, 5), nn.Linear(5, 3))  # takes 2 entries, the groups hold 3
    with pytest.raises(ValueError) as e:
        _pk_ops(PKMixing(bad, (2, 3), (2, 3), "rows"), "t", "channel", "1/S", False, D)
    assert str(e.value) == "t: inner map 2->3 does not match the PK grouping n2=3, n2'=3"
    with pytest.raises(ValueError, match="^t: inner map 3->2 does not match"):
        _pk_ops(PKMixing(nn.Sequential(nn.Linear(3, 2)), (2, 3), (2, 3), "rows"), "t", "channel", "1/S", False, D)
    with pytest.raises(TypeError, match="^t: Softmax is not an entry-wise activation mlplab knows$"):
        _pk_ops(PKMixing(nn.Sequential(nn.Linear(3, 3), nn.Softmax(-1)), (2, 3), (2, 3), "rows"), "t", "c", "1/S",
                False, D)
    with pytest.raises(TypeError, match="^blk: Softmax is not an entry-wise activation"):
        _inner_chain(nn.Sequential(nn.Sequential(nn.Linear(2, 2), nn.Softmax(-1))), "blk")


def test_every_matrix_is_valid_csr():
    """Rebuilt with torch's invariant checks on: int64 row pointers, one more than the rows, in range."""
    W = torch.randn(3, 2, dtype=D)
    mats = [lin.weight for lin in effective_mlp(_small()).linears()]
    mats += [pk_matrix(W, 2, torch.randperm(4), torch.randperm(6)), pk_matrix(torch.zeros(3, 0, dtype=D), 2),
             sparse_perm_matrix(torch.randperm(5)), sparse_kron_identity(W, 3, side="right")]
    for A in mats:
        crow = A.crow_indices()
        assert crow.dtype == torch.int64 and crow.numel() == A.shape[0] + 1
        torch.sparse_csr_tensor(crow, A.col_indices(), A.values(), A.shape, check_invariants=True)


def test_images_are_brought_to_the_host_in_the_effective_mlps_dtype(monkeypatch):
    """The effective MLP's operators live on the host in float64: images from any device are copied
    there first (recorded: no GPU here), and the logits agree with the model's."""
    model = _small()
    eff = effective_mlp(model)
    x = torch.randn(2, 3, 4, 4)  # float32, as a data loader gives them
    copies, to = [], torch.Tensor.to

    def recording_to(self, *args, **kwargs):
        if self.data_ptr() == x.data_ptr():  # x, or a view of it (x.detach())
            copies.append((args, kwargs))
        return to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", recording_to)
    got = eff(x)
    monkeypatch.undo()
    assert copies == [((), {"device": "cpu", "dtype": D})]
    torch.testing.assert_close(got, model(x.double()), rtol=0, atol=1e-12)
