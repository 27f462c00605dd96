"""Shallow Monarch / Kronecker MLPs: x ↦ B_c B2 ReLU(B1 x) with the dense matrices, float64."""
import pytest
import torch

import mlplab
from mlplab.layers import KroneckerLinear, MonarchLinear


@pytest.mark.parametrize("name, cls", [("monarch_mlp", MonarchLinear), ("kronecker_mlp", KroneckerLinear)])
def test_shallow_model_equals_dense_formula(name, cls):
    mnist = mlplab.create_model(name)  # MNIST defaults: 1x28x28, 784 = 28·28, no padding
    if cls is MonarchLinear:
        assert (mnist.fc1.nblocks, mnist.fc1.block_in, mnist.fc2.nblocks) == (28, 28, 28)  # √n blocks of √n×√n
    else:
        assert mnist.fc1.in_shape == mnist.fc2.out_shape == (28, 28)
    torch.manual_seed(0)
    model = mlplab.create_model(name, image_size=12).double()  # 144 = 12·12
    assert isinstance(model.fc1, cls) and isinstance(model.fc2, cls)
    x = torch.randn(3, 1, 12, 12, dtype=torch.float64)
    v = x.flatten(1)
    B1, B2 = model.fc1.dense(), model.fc2.dense()
    expected = model.head(torch.relu(v @ B1.T + model.fc1.bias) @ B2.T + model.fc2.bias)
    torch.testing.assert_close(model(x), expected, rtol=0, atol=1e-10)


def test_rectangular_widths_and_cifar_inputs():
    m = mlplab.create_model("monarch_mlp", image_size=16, in_chans=3, width=256)  # 768 = 24·32
    assert (m.fc1.nblocks, m.fc1.block_in) == (24, 32) and m.fc1.out_features == 256
    assert m(torch.zeros(2, 3, 16, 16)).shape == (2, 10)
    k = mlplab.create_model("kronecker_mlp", image_size=16, in_chans=3, width=256)
    assert k.fc1.in_shape == (24, 32) and k.fc1.out_shape == (16, 16)
    assert k(torch.zeros(2, 3, 16, 16)).shape == (2, 10)


def test_one_block_width_one_and_no_biases_are_allowed():
    """nblocks=1 (one dense block) and width=1 are the smallest valid settings; bias=False leaves
    both Monarch layers without bias."""
    one = mlplab.create_model("monarch_mlp", image_size=2, in_chans=1, nblocks=1, width=1)  # n = 4
    assert (one.fc1.nblocks, one.fc1.block_in, one.fc1.out_features, one.head.in_features) == (1, 4, 1, 1)
    assert one(torch.zeros(2, 1, 2, 2)).shape == (2, 10)
    nb = mlplab.create_model("monarch_mlp", image_size=4, in_chans=1, bias=False)
    assert nb.fc1.bias is None and nb.fc2.bias is None
