"""expand_resolution (docs/science.md §7): on a K×K tiling of K² images the expanded Mixer's logits are the
mean of the original's logits on the tiles, exactly up to float64 rounding."""
import pytest
import torch

import mlplab
from mlplab.models.expand import expand_resolution

CASES = {
    "mlp_mixer": dict(name="mlp_mixer", hidden_dim=6, depth=2, expansion=2.0),
    "s_mixer_skip_layer": dict(name="s_mixer", hidden_dim=5, depth=2, num_tokens=7),  # S != S0
    "s_mixer_skip_layer_same_S": dict(name="s_mixer", hidden_dim=5, depth=2, skip_layer=True),
    "rp_mlp_mixer": dict(name="rp_mlp_mixer", hidden_dim=6, depth=2, expansion=2.0),
    "rp_s_mixer_skip_layer": dict(name="rp_s_mixer", hidden_dim=5, depth=2, num_tokens=6),
    "one_rp_block": dict(name="mlp_mixer", hidden_dim=6, depth=3, rp_blocks=(1,), token_hidden=5),
}


def _tile(images: torch.Tensor, K: int) -> torch.Tensor:
    """K² images (K², ch, H, W) -> one (1, ch, K·H, K·W) image, tiles row-major."""
    rows = [torch.cat(list(images[a * K:(a + 1) * K]), dim=-1) for a in range(K)]
    return torch.cat(rows, dim=-2)[None]


@pytest.mark.parametrize("K", [2, 3])
@pytest.mark.parametrize("case", sorted(CASES))
def test_expanded_logits_are_the_mean_over_tiles(case, K):
    kw = dict(CASES[case])
    name = kw.pop("name")
    model = mlplab.create_model(name, image_size=8, patch_size=2, in_chans=2, num_classes=3, zero_head=False,
                                seed=1, **kw).double().eval()
    with torch.no_grad():  # random, non-trivial biases and norms too
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    big = expand_resolution(model, K).eval()
    assert big.cfg.image_size == 8 * K and big.num_tokens == K * K * model.num_tokens
    tiles = torch.randn(K * K, 2, 8, 8, dtype=torch.float64)
    with torch.no_grad():
        expected = model(tiles).mean(0, keepdim=True)
        got = big(_tile(tiles, K))
    assert (got - expected).abs().max().item() < 1e-12


def test_token_weights_are_block_diagonal_copies_and_the_rest_is_unchanged():
    model = mlplab.create_model("mlp_mixer", image_size=8, patch_size=4, hidden_dim=4, depth=1, token_hidden=3)
    big = expand_resolution(model, 2)
    W1 = model.blocks[0].token_mixing.inner.fc1.weight
    W1b = big.blocks[0].token_mixing.inner.fc1.weight  # (4·3, 16)
    assert W1b.shape == (12, 16)
    assert torch.count_nonzero(W1b) == 4 * torch.count_nonzero(W1)
    assert torch.equal(big.blocks[0].token_mixing.inner.fc1.bias, model.blocks[0].token_mixing.inner.fc1.bias.repeat(4))
    assert torch.equal(big.blocks[0].channel_mixing.inner.fc1.weight, model.blocks[0].channel_mixing.inner.fc1.weight)
    assert torch.equal(big.stem.proj.weight, model.stem.proj.weight) and torch.equal(big.head.weight, model.head.weight)
    assert expand_resolution(model, 1).state_dict().keys() == model.state_dict().keys()


def test_bad_inputs():
    with pytest.raises(ValueError, match="works on Mixers"):
        expand_resolution(mlplab.create_model("bottleneck_mlp", width=8, depth=1), 2)
    m = mlplab.create_model("s_mixer", image_size=8, patch_size=2, hidden_dim=4, depth=1)
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="whole number >= 1"):
            expand_resolution(m, bad)
