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


def test_the_copy_keeps_the_models_settings_and_leaves_the_caller_alone():
    """Same name, mode, dtype and weights' settings (K× the input size); the original and the
    caller's random stream untouched; S stays "the patches" when it was not set."""
    model = mlplab.create_model("mlp_mixer", image_size=8, patch_size=4, hidden_dim=4, depth=1, token_hidden=3,
                                channel_hidden=5).double().train()
    model.pretrained_cfg["mean"] = (0.5, 0.5, 0.5)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    torch.manual_seed(3)
    want_next = torch.rand(3)
    torch.manual_seed(3)
    big = expand_resolution(model, 3)
    assert torch.equal(torch.rand(3), want_next)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items()) and model.cfg.image_size == 8
    assert big.training and big.model_name == "mlp_mixer" and big.config is big.cfg
    assert big.cfg.num_tokens is None and big.num_tokens == 9 * 4 and big.cfg.image_size == 24
    assert big.cfg.token_hidden == 27 and big.cfg.channel_hidden == 5 and not big.cfg.skip_layer
    assert big.stem.proj.weight.dtype == torch.float64
    assert big.pretrained_cfg["input_size"] == (3, 24, 24) and big.pretrained_cfg["mean"] == (0.5, 0.5, 0.5)
    assert model.pretrained_cfg["input_size"] == (3, 8, 8)
    assert not expand_resolution(model.eval(), 2).training
    s = mlplab.create_model("s_mixer", image_size=8, patch_size=4, hidden_dim=4, depth=1, num_tokens=3)
    big_s = expand_resolution(s, 2)
    assert big_s.cfg.num_tokens == 12 and big_s.cfg.skip_layer and big_s.cfg.token_hidden is None


def test_variants_are_refused():
    m = mlplab.create_model("mlp_mixer_untied", image_size=8, patch_size=4, hidden_dim=4, depth=1)
    msg = "^expand_resolution works on the shared token MLP, not token_mixing='untied'$"
    with pytest.raises(ValueError, match=msg):
        expand_resolution(m, 2)
    with pytest.raises(ValueError, match="^expand_resolution works on Mixers .*, not PlainMLP$"):
        expand_resolution(mlplab.create_model("mlp", width=8, depth=1), 2)
    with pytest.raises(ValueError, match=r"^K must be a whole number >= 1 \(the resolution factor\), got -1$"):
        expand_resolution(m, -1)


def _tile_entry(v: int, rows: int, K: int, n: int, spatial: bool) -> tuple[int, int]:
    """Entry v of vec(X') (column-major, X' of K²·rows tokens) -> (tile j, entry of vec(X) in tile j):
    tokens in image order (spatial) or tile after tile."""
    c, t = divmod(v, K * K * rows)
    if spatial:
        row, col = divmod(t, K * n)
        j, s = (row // n) * K + col // n, (row % n) * n + col % n
    else:
        j, s = divmod(t, rows)
    return j, c * rows + s


@pytest.mark.parametrize("num_tokens", [None, 3])
def test_rp_permutations_are_the_originals_inside_every_tile(num_tokens):
    """The layout the module docstring states: token mixing's group g of the expanded layer holds
    group g of every tile (tile j at j·n2), channel mixing's group g of tile j is group j·n1 + g;
    each tile's entries taken and put back by the original J1, J2."""
    K, n = 2, 2
    model = mlplab.create_model("rp_s_mixer", image_size=8, patch_size=4, hidden_dim=3, depth=2, num_tokens=num_tokens)
    big = expand_resolution(model, K)
    for i, (blk, bblk) in enumerate(zip(model.blocks, big.blocks)):
        same = num_tokens is None
        pairs = ((blk.token_mixing, bblk.token_mixing, True), (blk.channel_mixing, bblk.channel_mixing, False))
        for pk, bpk, token in pairs:
            rows_in, rows_out = pk.in_shape[0], pk.out_shape[0]
            sp_in = (same or i == 0) if token else same
            sp_out = same
            n1, n2, n2o = pk.n1, pk.n2, pk.n2_out

            def grouped(k, j, width):  # tile j's grouped index k in the expanded layer
                g, r = divmod(k, width)
                return g * K * K * width + j * width + r if token else j * n1 * width + k

            for kk in range(K * K * n1 * n2):  # J1': grouped input entry kk reads tile j's entry J1[k]
                j, v = _tile_entry(int(bpk.perm_in[kk]), rows_in, K, n, sp_in)
                k = next(k for k in range(n1 * n2) if grouped(k, j, n2) == kk)
                assert v == int(pk.perm_in[k])
            for vv in range(K * K * n1 * n2o):  # J2': output entry vv of tile j takes J2[v] of tile j
                j, v = _tile_entry(vv, rows_out, K, n, sp_out)
                assert int(bpk.perm_out[vv]) == grouped(int(pk.perm_out[v]), j, n2o)


def test_a_linear_group_map_keeps_its_own_keys():
    """_expand_group_map on a bare Linear (no submodule names): the map's own weight and bias keys."""
    from mlplab.models.expand import _expand_group_map, _tile_major

    lin = torch.nn.Linear(2, 3)
    sd = {}
    _expand_group_map(lin, _tile_major(2, 2), _tile_major(2, 3), 2, sd, "p")
    assert sorted(sd) == ["p.bias", "p.weight"] and sd["p.weight"].shape == (12, 8)
    assert torch.equal(sd["p.weight"][3:6, 2:4], lin.weight.detach()) and torch.equal(sd["p.bias"], lin.bias.repeat(4))


def test_name_device_and_random_streams_of_the_copy(monkeypatch):
    """The copy keeps the family's name (a Mixer built without the registry: "mlp_mixer"), lives on
    the original's device (meta stands in for an accelerator) and forks the CPU stream only: no
    accelerator's random state is touched."""
    from mlplab.models.mixer import Mixer, MixerConfig

    s = mlplab.create_model("s_mixer", image_size=8, patch_size=4, hidden_dim=4, depth=1, num_tokens=3)
    assert expand_resolution(s, 2).model_name == "s_mixer"
    bare = Mixer(MixerConfig(image_size=8, patch_size=4, hidden_dim=4, depth=1))
    assert expand_resolution(bare, 2).model_name == "mlp_mixer"
    big = expand_resolution(s.to("meta"), 2)
    assert {p.device.type for p in big.state_dict().values()} == {"meta"}
    forks, real = [], torch.random.fork_rng

    def recording(*args, **kw):
        forks.append((args, kw))
        return real(*args, **kw)

    monkeypatch.setattr(torch.random, "fork_rng", recording)
    expand_resolution(bare, 2)
    assert forks == [((), {"devices": []})]
