"""What the memory check counts (mlplab.train.memory): state, one micro-batch's activations and its
augmentation temporaries, each from a computation on the meta device; PyTorch's cache counts as
available; a run that does not fit is refused in one sentence that says what to change."""
from __future__ import annotations

import pytest
import torch
from train_helpers import tiny_overrides

from mlplab.data import AugmentConfig, build_augment
from mlplab.errors import BadInput
from mlplab.train import make_config, memory, runplan
from mlplab.train.runplan import meta_model

MiB = 2**20
IMAGE = (3, 224, 224)


def _augment(**cfg):
    return build_augment(AugmentConfig(**cfg), num_classes=1000, mean=(0.5,) * 3, std=(0.25,) * 3)


def test_mixer_b16_keeps_55_mib_per_image_for_the_backward_in_bf16():
    model = meta_model("mixer_b16", {})
    bf16 = memory.activation_bytes(model, IMAGE, "bf16")
    fp32 = memory.activation_bytes(model, IMAGE, "fp32")
    assert 50 * MiB < bf16 < 60 * MiB and fp32 == pytest.approx(2 * bf16, rel=0.02)
    assert memory.activation_bytes(model, IMAGE, "bf16") == bf16  # cached with the model


def test_saved_tensors_are_counted_once_and_parameters_not_at_all():
    """A linear layer saves its input (4 floats per example here), once although two layers read
    it; its weight is state, not an activation."""
    class Two(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(12, 5, bias=False), torch.nn.Linear(12, 5, bias=False)

        def forward(self, x):
            x = x.flatten(1)
            return self.a(x) + self.b(x)

    with torch.device("meta"):
        model = Two()
    assert memory.activation_bytes(model, (3, 2, 2), "fp32") == 12 * 4
    assert memory.activation_bytes(model, (3, 2, 2), "bf16") == 12 * 2


def test_augmentation_temporaries_per_example_grow_with_the_recipe():
    pixels = 3 * 64 * 64
    none = memory.augment_bytes(_augment(), (3, 64, 64))
    crop = memory.augment_bytes(_augment(crop_padding=4, hflip=True), (3, 64, 64))
    imagenet = memory.augment_bytes(_augment(hflip=True, randaugment="rand-m9-mstd0.5-inc1", random_erasing=0.25,
                                             mixup=0.8, cutmix=1.0, mix_mode="elem", label_smoothing=0.1), (3, 64, 64))
    assert none >= 8 * pixels  # the float copy and its normalised output, at least
    assert none < crop < imagenet and imagenet > 30 * pixels  # int64 gather indices, float copies per op


def test_the_estimate_adds_state_activations_and_augmentation_of_one_micro_batch():
    model, aug = meta_model("mixer_b16", {}), _augment(random_resized_crop=True, hflip=True)
    one = memory.estimate_memory(10, model=model, image_shape=IMAGE, augment=aug, precision="bf16",
                                 batch_per_rank=512, micro_batches=1)
    four = memory.estimate_memory(10, model=model, image_shape=IMAGE, augment=aug, precision="bf16",
                                  batch_per_rank=512, micro_batches=4)
    per_image = memory.activation_bytes(model, IMAGE, "bf16")
    assert (one["micro_batch"], four["micro_batch"]) == (512, 128)
    assert one["state"] == four["state"] == 160
    assert (one["activations"], four["activations"]) == (512 * per_image, 128 * per_image)
    batch_uint8 = 512 * 3 * 224 * 224  # the step's batch the micro-batches are cut from
    assert four["augment"] == batch_uint8 + 128 * memory.augment_bytes(aug, IMAGE)
    assert four["total"] == four["state"] + four["activations"] + four["augment"] < one["total"]
    assert memory.estimate_memory(10) == {"state": 160, "activations": 0, "augment": 0, "micro_batch": 1, "total": 160}


def test_a_model_without_meta_kernels_leaves_activations_uncounted():
    sparse = meta_model("sw_mlp", {"image_size": 8, "patch_size": 4, "width": 32, "depth": 1, "density": 0.5,
                                   "storage": "sparse"})
    assert memory.activation_bytes(sparse, (3, 8, 8), "fp32") is None
    est = memory.estimate_memory(10, model=sparse, image_shape=(3, 8, 8), batch_per_rank=4)
    assert est["activations"] is None and est["total"] == est["state"] + est["augment"]


def test_pytorchs_cache_counts_as_available_on_a_gpu(monkeypatch):
    gpu = torch.device("cuda", 0)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda d: (3 * 2**30, 80 * 2**30))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda d: 50 * 2**30)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda d: 10 * 2**30)
    assert memory.available_memory(gpu) == 43 * 2**30  # free + cached without a tensor in it
    assert memory.available_memory(torch.device("cpu")) > 0


def test_a_batch_whose_activations_do_not_fit_is_refused_with_what_to_change(tmp_path, monkeypatch):
    cfg = make_config(None, tiny_overrides(tmp_path, "big", **{"run.batch_size": 32}))
    plan = runplan.plan_run(cfg, here=False)
    need = memory.estimate_memory(plan.n_params, model=meta_model(cfg.model.name, plan.model_kwargs),
                                  image_shape=(plan.info.in_chans, *plan.info.image_size),
                                  augment=build_augment(cfg.augment, plan.info), batch_per_rank=32)
    monkeypatch.setattr(runplan, "available_memory", lambda device: need["total"] - 1)
    kw = dict(cfg=cfg, info=plan.info, model_kwargs=plan.model_kwargs)
    with pytest.raises(BadInput, match=r"parameters, needing about .* GiB for weights, gradients and optimiser "
                                       r"state, .* GiB for the activations and .* GiB for the augmentation of a "
                                       r"micro-batch of 32 images; cpu has .* GiB available\. Raise "
                                       r"run.accumulate_steps \(fewer images per micro-batch\) or lower "
                                       r"run.batch_size$"):
        runplan.check_memory(plan.n_params, torch.device("cpu"), **kw)
    runplan.check_memory(plan.n_params, torch.device("cpu"))  # the state alone fits
    monkeypatch.setattr(runplan, "available_memory", lambda device: need["total"])
    runplan.check_memory(plan.n_params, torch.device("cpu"), **kw)
    monkeypatch.setattr(runplan, "available_memory", lambda device: None)  # unknown: nothing refused
    runplan.check_memory(10**15, torch.device("cpu"), **kw)


def test_a_folder_whose_classes_or_size_are_not_known_yet_is_checked_by_what_is_known(tmp_path):
    """Image folders and packs learn their classes (and sizes) when opened: label smoothing with
    K unknown, or an unknown size, must not fail the plan's check."""
    import dataclasses

    cfg = make_config(None, tiny_overrides(tmp_path, "folder", **{"augment.label_smoothing": 0.1}))
    info = runplan.plan_run(cfg, here=False).info
    for unknown in (dict(num_classes=0), dict(image_size=(0, 0))):
        runplan.check_memory(10, torch.device("cpu"), cfg=cfg, info=dataclasses.replace(info, **unknown))
