"""Compiled means compiled: every dense family traces to whole graphs (no graph break, no frame
dynamo gives up on), the sparse SW-MLP breaks only at its sparse products, which run outside
the traced region, and a compiled run's results.json says which. Dynamo only (``backend="eager"``):
graph breaks are dynamo's, whatever backend generates the kernels."""
from __future__ import annotations

import pytest
import torch

import mlplab
from mlplab.train import backend

CPU = torch.device("cpu")
#: one model per family and Mixer variant, tiny (16x16 images, patch 4, one block: the block loop is there)
DENSE = {
    "mlp_mixer": dict(hidden_dim=16, depth=1), "rp_mlp_mixer": dict(hidden_dim=16, depth=1),
    "s_mixer": dict(hidden_dim=16, depth=1), "rp_s_mixer": dict(hidden_dim=16, depth=1),
    "sw_mlp": dict(width=64, depth=1, density=0.25), "sw_mlp_block": dict(width=64, depth=1, density=0.25),
    "mlp": dict(width=32, depth=1), "bottleneck_mlp": dict(width=32, depth=1),
    "monarch_mlp": dict(in_chans=3), "kronecker_mlp": dict(in_chans=3),
}


def _traced(name: str, **kw):
    """(dynamo_counts, compiled output, eager output) of two training steps' forward/backward."""
    torch.manual_seed(0)
    model = mlplab.create_model(name, image_size=16, **({"patch_size": 4} if "patch_size" in _fields(name) else {}),
                                **kw)
    compiled = backend.compile_model(model, CPU, backend="eager")
    x = torch.randn(4, 3, 16, 16)
    for _ in range(2):
        out = compiled(x)
        out.sum().backward()
    return backend.dynamo_counts(), out.detach(), model(x).detach()


def _fields(name: str) -> set[str]:
    import dataclasses

    from mlplab.models.registry import get_model_entry

    return {f.name for f in dataclasses.fields(get_model_entry(name).config_cls)}


@pytest.mark.parametrize("name", sorted(DENSE))
def test_dense_families_compile_to_whole_graphs(name):
    counts, got, want = _traced(name, **DENSE[name])
    assert counts["graph_breaks"] == 0 and counts["skipped_frames"] == 0, counts
    assert counts["graphs"] >= 1 and counts["break_reasons"] == {}
    torch.testing.assert_close(got, want)


def test_the_sparse_product_runs_outside_the_traced_region():
    counts, got, want = _traced("sw_mlp", width=64, depth=2, density=0.25, storage="sparse")
    assert counts["graphs"] >= 2 and counts["graph_breaks"] >= 2, counts  # one per sparse layer at least
    # every break is the disabled sparse product: no sparse tensor, bincount or data_ptr is traced
    assert set(counts["break_reasons"]) == {"Skip calling `torch.compiler.disable()`d function "
                                            "(<function _sparse_product>)"}, counts
    torch.testing.assert_close(got, want)


def test_counts_start_afresh_with_each_compiled_model():
    backend.compile_model(torch.nn.Linear(4, 2), CPU, backend="eager")(torch.randn(3, 4))
    first = backend.dynamo_counts()
    backend.compile_model(torch.nn.Linear(4, 2), CPU, backend="eager")(torch.randn(3, 4))
    assert backend.dynamo_counts() == first == {"backend": "eager", "graphs": 1, "graph_breaks": 0,
                                                "skipped_frames": 0, "break_reasons": {}}


def test_the_backend_is_inductor_unless_named(monkeypatch):
    monkeypatch.setattr(torch, "compile", lambda m, backend: backend)
    monkeypatch.delenv("MLPLAB_COMPILE_BACKEND", raising=False)
    assert backend.compile_model(torch.nn.Linear(4, 2), CPU) == "inductor" == backend.dynamo_counts()["backend"]
    monkeypatch.setenv("MLPLAB_COMPILE_BACKEND", "aot_eager")
    assert backend.compile_model(torch.nn.Linear(4, 2), CPU) == "aot_eager"
    assert backend.compile_model(torch.nn.Linear(4, 2), CPU, backend="eager") == "eager"
