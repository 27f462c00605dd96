"""One seed-derivation helper: streams are named, reproducible, and independent across seeds and purposes."""
import torch

from mlplab.utils.seeds import derive_generator, derive_seed


def test_derived_seeds_are_stable_and_distinct():
    assert derive_seed(0, "rp", 0, 0) == derive_seed(0, "rp", 0, 0)
    assert 0 <= derive_seed(0, "rp", 0, 0) < 2**63
    keys = [(s, p, b, i) for s in (0, 1, 1_000_003, -1, 2**70) for p in ("rp", "mask")
            for b in range(3) for i in range(2)]
    assert len({derive_seed(*k) for k in keys}) == len(keys)  # seed * K + i would collide here
    # pinned: the streams of every saved model and run depend on this value not drifting
    assert derive_seed(0, "rp", 0, 0) == 1867541587150175379


def test_derive_generator_draws_the_same_numbers():
    a = torch.rand(4, generator=derive_generator(7, "augment", 2, 5))
    b = torch.rand(4, generator=derive_generator(7, "augment", 2, 5))
    c = torch.rand(4, generator=derive_generator(7, "augment", 2, 6))
    assert torch.equal(a, b) and not torch.equal(a, c)
