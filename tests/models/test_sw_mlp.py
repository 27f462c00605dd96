"""SW-MLP: width from the budget, the two storages compute the same function and both train,
the stem choice, the vec order, memory of the storages."""
import pytest
import torch

import mlplab
from mlplab.analysis.cost import state_bytes
from mlplab.layers.masked import MaskedLinear, SparseLinear
from mlplab.layers.vec import vec
from mlplab.models.sw_mlp import sw_width

TINY = dict(image_size=8, patch_size=2, num_classes=5, depth=2)


def test_width_from_budget_matches_the_paper():
    widths = [sw_width(2.0 ** 18, 1 - q) for q in (0.1, 0.3, 0.5, 0.7, 0.9)]
    assert widths == [540, 612, 724, 935, 1619]
    from mlplab.theory.budget import round_half_up, sw_mlp_width  # the planner agrees

    assert widths == [round_half_up(sw_mlp_width(2.0 ** 18, 1 - q)) for q in (0.1, 0.3, 0.5, 0.7, 0.9)]
    m = mlplab.create_model("sw_mlp", omega=2.0 ** 18, density=0.5, depth=1, storage="sparse")
    assert m.width == 724 and m.stem_kind == "dense"  # 724 is not a multiple of S0 = 64
    assert mlplab.create_model("sw_mlp_block", omega=2.0 ** 12, density=0.5, **TINY).width == 64  # γ = 2


@pytest.mark.parametrize("block", ["fc", "mlp"])
@pytest.mark.parametrize("mask_scale", [False, True])
def test_masked_and_sparse_storage_same_function_and_both_train(block, mask_scale):
    kw = dict(TINY, width=48, density=0.3, block=block, expansion=2.0 if block == "mlp" else 1.0,
              mask_scale=mask_scale, seed=5)
    torch.manual_seed(0)
    a = mlplab.create_model("sw_mlp", storage="masked", **kw).double()
    torch.manual_seed(0)
    b = mlplab.create_model("sw_mlp", storage="sparse", **kw).double()
    assert isinstance(a.blocks[0].fc1, MaskedLinear) and isinstance(b.blocks[0].fc1, SparseLinear)
    x = torch.randn(4, 3, 8, 8, dtype=torch.float64)
    y = torch.tensor([0, 1, 2, 3])
    ya, yb = a(x), b(x)
    torch.testing.assert_close(ya, yb, rtol=0, atol=1e-12)
    for model in (a, b):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        losses = []
        for _ in range(3):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[-1] < losses[0]
    # after identical SGD steps the two storages still agree (the gradients agree)
    torch.testing.assert_close(a(x), b(x), rtol=0, atol=1e-10)
    for la, lb in ((a.blocks[1].fc1, b.blocks[1].fc1),):
        torch.testing.assert_close(la.effective_weight(), lb.effective_weight(), rtol=0, atol=1e-12)
        assert la.weight[~la.mask].abs().max() == 0  # the masked weight stays sparse


def test_masks_are_bernoulli_p_and_scaled():
    m = mlplab.create_model("sw_mlp", width=256, density=0.2, mask_scale=True, **TINY)
    fc = m.blocks[0].fc1
    assert abs(fc.density - 0.2) < 0.02
    assert float(fc.scale) == pytest.approx(0.2 ** -0.5)
    w = fc.effective_weight()[fc.mask]
    assert w.var().item() == pytest.approx(1 / (256 * 0.2), rel=0.15)  # A ~ N(0, 1/m), ones 1/√p
    other = mlplab.create_model("sw_mlp", width=256, density=0.2, mask_scale=True, **TINY).blocks[1].fc1
    assert not torch.equal(fc.mask, other.mask)  # every layer has its own stream


def test_patch_stem_vectorises_column_major():
    m = mlplab.create_model("sw_mlp", width=32, stem="patch", **TINY)  # S0 = 16, C = 2
    x = torch.randn(2, 3, 8, 8)
    tokens = m.stem(x)  # (2, 16, 2)
    torch.testing.assert_close(m.embed(x), vec(tokens))
    assert m.embed(x)[0, 1 * 16 + 3] == tokens[0, 3, 1]  # vec(X)[j·S + i] = X[i, j]
    dense = mlplab.create_model("sw_mlp", width=30, **TINY)
    assert dense.stem_kind == "dense" and dense.stem.in_features == 3 * 8 * 8


def test_sparse_storage_memory_grows_with_nnz():
    """Bytes of parameters + buffers, masked vs sparse, at p = 1/16 (the report's numbers)."""
    kw = dict(image_size=8, patch_size=2, num_classes=10, depth=1, density=1 / 16, width=512)
    masked = state_bytes(mlplab.create_model("sw_mlp", storage="masked", **kw))
    sparse = state_bytes(mlplab.create_model("sw_mlp", storage="sparse", **kw))
    assert sparse < masked / 4


def test_sparse_masks_load_into_a_model_with_another_seed():
    kw = dict(TINY, width=32, density=0.3, storage="sparse")
    src = mlplab.create_model("sw_mlp", seed=1, **kw)
    dst = mlplab.create_model("sw_mlp", seed=2, **kw)
    assert dst.blocks[0].fc1.nnz != src.blocks[0].fc1.nnz  # different draws, different sizes
    dst.load_state_dict(src.state_dict())
    x = torch.randn(2, 3, 8, 8)
    torch.testing.assert_close(dst(x), src(x), rtol=0, atol=0)
    opt = torch.optim.SGD(dst.parameters(), lr=0.1)  # the adopted values are trainable parameters
    dst(x).sum().backward()
    opt.step()
    assert dst.blocks[0].fc1.values.grad is not None
    wrong = mlplab.create_model("sw_mlp", seed=1, **{**kw, "width": 16})
    with pytest.raises(RuntimeError, match="size mismatch"):
        wrong.load_state_dict(src.state_dict())
