"""Named base configs (big_vision style: each says how to run it, what it should give, how long).

Each entry is a plain nested dict of the sections of :class:`mlplab.train.config.RunConfig`;
anything not given takes the dataclass default. ``mlplab train NAME key=value ...`` runs one;
``mlplab train NAME --print-config > my.json`` writes it out as a file to edit, and
``mlplab train my.json`` runs that (the presets are the only copy of the recipes).
Units follow airbench: the learning rate is per optimiser step (per global batch), never scaled
implicitly with the batch size.
"""
from __future__ import annotations

from typing import Any

from ..models.mlp import SCALING_MLP_PRESETS

__all__ = ["CONFIGS", "DESCRIPTIONS", "SCALING_PRETRAIN", "SCALING_AUGMENT"]

CONFIGS: dict[str, dict[str, Any]] = {}
DESCRIPTIONS: dict[str, str] = {}


def _register(name: str, description: str, cfg: dict[str, Any]) -> None:
    CONFIGS[name] = cfg
    DESCRIPTIONS[name] = description


_register(
    "fmnist_s_mixer",
    """S-Mixer (S = C = 64, 8 blocks) on Fashion-MNIST, AdamW, 28x28 with patch 4 (S0 = 49 patches;
    the first block's learned skip W~ maps 49 -> 64 tokens, docs/science.md §2). Tuned for a few epochs on a
    CPU: 1-epoch probes on 12k images gave 62% test accuracy with crop+flip at lr 2e-3, batch 128;
    72% without augmentation; 82% without augmentation at lr 1e-2, batch 64, warmup 0.1 epoch.
    Over longer runs light augmentation pays off: without it the model overfits (10 epochs:
    train 94%, test 89.5%); crop padding 2 + label smoothing 0.1 underfits (15 epochs: 89.2%);
    crop padding 1 gives 89.5% after 12 epochs and 90.3% after 20.
    Run:      mlplab train fmnist_s_mixer
    Expect:   90.3% test accuracy after 20 epochs (measured: 2 threads, fp32)
    Time:     ~56 s/epoch on 2 CPU cores at fp32 (1125 img/s): ~19 min in all.""",
    {
        "model": {"name": "s_mixer", "kwargs": {"patch_size": 4, "num_tokens": 64, "hidden_dim": 64, "depth": 8}},
        "data": {"dataset": "fashion_mnist"},  # found in /usr/share/datasets/fashion-mnist (Debian)
        "augment": {"crop_padding": 1},
        "optim": {"name": "adamw", "lr": 1e-2, "weight_decay": 0.05, "betas": [0.9, 0.99]},
        "schedule": {"epochs": 20, "warmup_epochs": 0.1, "min_lr": 1e-5},
        "run": {"batch_size": 64, "eval_every": 1, "checkpoint_every": 1},
    },
)

_register(
    "fmnist_fast",
    """Fashion-MNIST to 90% test accuracy in under 3 minutes on 2 CPU cores: an inverted-bottleneck
    MLP of Scaling MLPs (Bachmann et al. 2023), B-4/Wi-256 (2.3M parameters, 4.6 MFLOP/example),
    AdamW, label smoothing 0.1, crop padding 1, 16 epochs, batch 256.
    Chosen on a held-out 10% of the training set (data.val_fraction=0.1, test set untouched):
    Wi-512 reached 90.3% val in 18 epochs (4x the FLOPs), Wi-256 90.38% val in 16 epochs;
    a horizontal flip with batch 512 / lr 2e-3 gave 90.2% val; an S-Mixer (S=49, C=64, L=8) at
    batch 256 reached 89.1% val in 12 epochs, still underfitting. The final recipe trains on all
    60k images and evaluates once, at the end.
    Run:      mlplab train fmnist_fast
    Expect:   >= 90% test accuracy (3 seeds: benchmarks/results/fmnist-fast-*.json)
    Time:     < 1 min on 2 cores with native bf16, ~2.5 min in fp32 on AVX2 (docs/performance.md).""",
    {
        "model": {"name": "bottleneck_mlp", "kwargs": {"width": 256, "depth": 4, "final_norm": True}},
        "data": {"dataset": "fashion_mnist"},
        "augment": {"crop_padding": 1, "label_smoothing": 0.1},
        "optim": {"name": "adamw", "lr": 1e-3, "weight_decay": 0.05, "lr_batch": 256},
        "schedule": {"epochs": 16, "warmup_epochs": 0.5, "min_lr": 0.0},
        # compiling this MLP buys nothing (0.99x, bf16) and costs ~13 s: eager
        "run": {"batch_size": 256, "eval_every": 0, "checkpoint_every": 0, "compile": False},
    },
)

_register(
    "fmnist_best",
    """Fashion-MNIST as far as a 10-minute CPU budget goes (the speed issue's stretch goal was 92%):
    the SW-MLP of fig4 at Ω = 2^14 (width 343 = 7·49, density 0.0696, 6 MLP blocks of expansion 2,
    patch 4; 2.8M stored weights, masked), AdamW lr 1e-2 wd 0.05, crop padding 1 + horizontal flip,
    label smoothing 0.1, 80 epochs, batch 256; evaluated with mirror-image test-time augmentation
    (augment.test_hflip: the logits of each image and its mirror image averaged).
    Chosen on a held-out 10% of the training set (data.val_fraction=0.1, one seed each, the test
    set not used for choosing): 40 epochs, crop only 91.20% val (train 96.8%: overfits); width
    392, density 0.25, + flip, 30 epochs 91.27%; 40 epochs + flip + label smoothing 91.62%;
    + flip + random erasing 0.25 91.57%; 80 epochs + flip + random erasing 91.70%; 80 epochs +
    flip + label smoothing 91.82% (this recipe). The val estimates have a standard error of
    ~0.35 points (6,000 images), so the last four are not distinguishable. Test-time flips were
    chosen the same way, on one model trained by this recipe (seed 0): val 91.50% -> 92.07%, a
    paired comparison on the same 6,000 images (77 right only with the flips, 43 only without;
    exact McNemar p = 0.0024).
    Run:      mlplab train fmnist_best
    Expect:   about 92% test accuracy (3 seeds: benchmarks/results/fmnist-best-*.json)
    Time:     6-7 min on 2 cores with AMX (docs/performance.md).""",
    {
        "model": {"name": "sw_mlp", "kwargs": {"width": 343, "density": 0.0696, "depth": 6, "patch_size": 4,
                                               "block": "mlp", "expansion": 2.0}},
        "data": {"dataset": "fashion_mnist"},
        "augment": {"crop_padding": 1, "hflip": True, "label_smoothing": 0.1, "test_hflip": True},
        "optim": {"name": "adamw", "lr": 1e-2, "weight_decay": 0.05},
        "schedule": {"epochs": 80, "warmup_epochs": 0.5, "min_lr": 0.0},
        "run": {"batch_size": 256, "eval_every": 0, "checkpoint_every": 0},
    },
)

_register(
    "cifar10_s_mixer",
    """S-Mixer on CIFAR-10 with the paper's default recipe (docs/science.md §7): patch 4 on 32x32 (S0 = 64),
    S = C = 64, 8 blocks, Nesterov SGD momentum 0.9, batch 128, lr 0.02, cosine, 200 epochs,
    random crop (padding 4) + horizontal flip.
    Run:      mlplab train cifar10_s_mixer run.seed=0   (3 seeds in the paper)
    Expect:   roughly 80-85% test accuracy (S-Mixer, C = 64; cf. Hayase & Karakida Fig. 5)
    Time:     ~10 s/epoch on one modern GPU; hours on CPU.""",
    {
        "model": {"name": "s_mixer", "kwargs": {"patch_size": 4, "num_tokens": 64, "hidden_dim": 64, "depth": 8}},
        "data": {"dataset": "cifar10"},
        "augment": {"crop_padding": 4, "hflip": True},
        "optim": {"name": "sgd", "lr": 0.02, "momentum": 0.9, "nesterov": True},
        "schedule": {"epochs": 200},
        "run": {"batch_size": 128, "eval_every": 5, "checkpoint_every": 5},
    },
)

_register(
    "cifar10_mixer_adamw",
    """MLP-Mixer (L = 3, gamma = 2, S = C = 64) on CIFAR-10 with the fig2 recipe (docs/science.md §7): AdamW
    lr 0.01, batch 128, cosine, 600 epochs, AutoAugment + crop + flip. Weight decay is not
    published; 0.05 here (timm's Mixer default).
    Run:      mlplab train cifar10_mixer_adamw
    Expect:   ~85-88% test accuracy
    Time:     ~5 s/epoch on one modern GPU.""",
    {
        "model": {"name": "mlp_mixer", "kwargs": {"patch_size": 4, "num_tokens": 64, "hidden_dim": 64,
                                                 "expansion": 2.0, "depth": 3}},
        "data": {"dataset": "cifar10"},
        "augment": {"crop_padding": 4, "hflip": True, "autoaugment": "cifar10"},
        "optim": {"name": "adamw", "lr": 0.01, "weight_decay": 0.05},
        "schedule": {"epochs": 600},
        "run": {"batch_size": 128, "eval_every": 10, "checkpoint_every": 10},
    },
)

_register(
    "scaling_mlp",
    """Inverted-bottleneck MLP B-6/Wi-512 from scratch (Bachmann et al. 2023, docs/science.md §7): LION lr 5e-5,
    label smoothing 0.3, random crop + flip + mixup 0.8. Batch 1024 and 100 epochs are our choice
    for CIFAR-10 (the paper's scaling runs use batch 16384, lr 1e-5, wd 1e-3).
    Run:      mlplab train scaling_mlp
    Expect:   ~70% test accuracy on CIFAR-10
    Time:     ~3 s/epoch on one modern GPU.""",
    {
        "model": {"name": "mlp", "kwargs": {"depth": 6, "width": 512}},
        "data": {"dataset": "cifar10"},
        "augment": {"crop_padding": 4, "hflip": True, "mixup": 0.8, "label_smoothing": 0.3},
        "optim": {"name": "lion", "lr": 5e-5, "weight_decay": 1e-3, "betas": [0.9, 0.99]},
        "schedule": {"epochs": 100, "warmup_epochs": 1},
        "run": {"batch_size": 1024, "eval_every": 5, "checkpoint_every": 5},
    },
)

_register(
    "synthetic_tiny",
    """A tiny S-Mixer on the synthetic dataset at 8x8: a smoke test of the whole loop.
    Run:      mlplab train synthetic_tiny
    Expect:   runs end to end; accuracy well above chance
    Time:     seconds.""",
    {
        "model": {"name": "s_mixer", "kwargs": {"patch_size": 4, "hidden_dim": 16, "depth": 2}},
        "data": {"dataset": "synthetic", "image_size": 8, "train_subset": 512, "test_subset": 256},
        "optim": {"name": "adamw", "lr": 3e-3},
        "schedule": {"epochs": 3},
        "run": {"batch_size": 64, "precision": "fp32"},
    },
)

_register(
    "fmnist_mixer_pretrain",
    """MLP-Mixer (patch 4, S0 = 49, C = 64, D_S = 64, D_C = 128, 4 blocks) on Fashion-MNIST at 28x28:
    the pre-training half of the fine-tuning demonstration (docs/pretrained.md,
    ``scripts/finetune_demo.sh``). Its checkpoint feeds ``mlplab finetune RUN fmnist_finetune`` """
    """(56x56 through expand_resolution) and
    ``mlplab finetune RUN fmnist_linear_probe``.
    Run:      mlplab train fmnist_mixer_pretrain
    Expect:   ~87% test accuracy (benchmarks/results/finetune-demo-pt213-epyc-avx2.json)
    Time:     ~1.5 min on 2 CPU cores in fp32.""",
    {
        "model": {"name": "mlp_mixer", "kwargs": {"patch_size": 4, "hidden_dim": 64, "token_hidden": 64,
                                                  "channel_hidden": 128, "depth": 4}},
        "data": {"dataset": "fashion_mnist"},
        "augment": {"crop_padding": 1},
        "optim": {"name": "adamw", "lr": 3e-3, "weight_decay": 0.05, "betas": [0.9, 0.99]},
        "schedule": {"epochs": 3, "warmup_epochs": 0.1},
        "run": {"batch_size": 128, "eval_every": 0, "checkpoint_every": 0},
    },
)

_register(
    "fmnist_finetune",
    """Fine-tuning recipe of Scaling MLPs (Bachmann et al. 2023, docs/science.md §7) on Fashion-MNIST: SGD with
    momentum 0.9, lr 0.01 for the head and 0.001 for the body, cosine, at twice the pre-training
    resolution through expand_resolution (model.expand=2: 28x28 -> 56x56, the data is resized).
    The model comes from the checkpoint; the paper fine-tunes 50 epochs on the whole set, this
    demo one epoch on a random 12,000 of the 60,000 training images (the 56x56 model costs about
    6x the FLOPs of the 28x28 one; data.train_subset=null trains on all).
    Run:      mlplab finetune runs/fmnist_mixer_pretrain fmnist_finetune
    Expect:   close to the pre-trained accuracy at 56x56 (benchmarks/results/finetune-demo-*.json)
    Time:     under a minute on 2 CPU cores (S = 196 tokens, token-MLP width x4; ~440 img/s
              training, ~15 s for the 10,000 test images at 56x56).""",
    {
        "model": {"expand": 2},
        "data": {"dataset": "fashion_mnist", "train_subset": 12000, "subset": "random"},
        "optim": {"name": "sgd", "lr": 1e-3, "head_lr": 1e-2, "momentum": 0.9, "nesterov": False},
        "schedule": {"epochs": 1},
        "run": {"batch_size": 128, "eval_every": 0, "checkpoint_every": 0},
    },
)

_register(
    "fmnist_linear_probe",
    """Linear probe (Scaling MLPs, docs/science.md §7): the body frozen, a new head trained with LION lr 1e-5
    on the pre-trained features (the paper trains 50 epochs; this demo 2).
    Run:      mlplab finetune runs/fmnist_mixer_pretrain fmnist_linear_probe
    Expect:   a little below the pre-trained accuracy (benchmarks/results/finetune-demo-*.json)
    Time:     well under a minute on 2 CPU cores (only the head's gradients).""",
    {
        "model": {"new_head": True},
        "data": {"dataset": "fashion_mnist"},
        "optim": {"name": "lion", "lr": 1e-5, "freeze": "body", "betas": [0.9, 0.99]},
        "schedule": {"epochs": 2},
        "run": {"batch_size": 128, "eval_every": 0, "checkpoint_every": 0},
    },
)


# ----------------------------------------------------------------------------- Scaling MLPs at scale

#: Scaling-MLPs pre-training on ImageNet-21k at 64x64 (Bachmann et al. 2023, docs/science.md §7): size ->
#: (model, epochs). Epochs are those of the released IN-21k checkpoints (scaling_mlps
#: utils/download.py: 800, B-12/Wi-512 600); the Wi-256 sizes, not released, take 800 as well.
SCALING_PRETRAIN: dict[str, tuple[str, int]] = {
    "b6_wi256": ("bottleneck_mlp_b6_wi256", 800),
    "b12_wi256": ("bottleneck_mlp_b12_wi256", 800),
    "b6_wi512": ("bottleneck_mlp_b6_wi512", 800),
    "b12_wi512": ("bottleneck_mlp_b12_wi512", 600),
    "b6_wi1024": ("bottleneck_mlp_b6_wi1024", 800),
    "b12_wi1024": ("bottleneck_mlp_b12_wi1024", 800),
}
#: forward MFLOP per 64x64 image at 11,230 classes (models.counting.count_flops; a test keeps them
#: equal), for the Time lines
_MFLOP = {"b6_wi256": 18.3, "b12_wi256": 24.6, "b6_wi512": 49.2, "b12_wi512": 74.4, "b6_wi1024": 148.8,
          "b12_wi1024": 249.5}
#: scaling_mlps' pre-training augmentation (data_utils/dataloader.py): RandomResizedCrop (scale (0.08, 1),
#: ratio (3/4, 4/3), the defaults of augment.rrc_*) + flip, mixup 0.8, label smoothing 0.3
SCALING_AUGMENT: dict[str, Any] = {"random_resized_crop": True, "hflip": True, "mixup": 0.8, "label_smoothing": 0.3}

for _size, (_model, _epochs) in SCALING_PRETRAIN.items():
    _L, _m = _size[1:].split("_wi")
    _eflop = 3 * _MFLOP[_size] * 1e6 * 12e6 * _epochs / 1e18
    _hours = _eflop * 1e18 / (0.4 * 989e12) / 3600  # on one H100 at 40% of its bf16 peak
    _register(
        f"in21k_{_size}",
        f"""Scaling-MLPs pre-training of B-{_L}/Wi-{_m} ({SCALING_MLP_PRESETS[_model][2]}M parameters published at
    11,230 classes) on ImageNet-21k at 64x64 (Bachmann et al. 2023, docs/science.md §7): LION lr 1e-5, weight decay
    1e-3, constant lr (scaling_mlps' default), label smoothing 0.3, RandomResizedCrop + flip + mixup 0.8, global
    batch 16,384 as 4 accumulated micro-batches of 4,096 (one 24 GB GPU in the paper; under torchrun
    with N GPUs lower run.accumulate_steps, the batch stays 16,384), {_epochs} epochs. The data is an
    ImageNet-21k pack (mlplab pack IN21K_DIR DST --image-size 64); the class count comes from it.
    Run:      mlplab train in21k_{_size} data.root=DST
    Expect:   fine-tuned (in21k_finetune_cifar10/100): docs/science.md §7 Table 2 / the released checkpoints
    Time:     {_epochs} x ~12M = {_epochs * 12e6:.2g} images, {_eflop:.2g} EFLOP of training: >= {_hours:.1f} h
              on one H100 at 40% of its bf16 peak; in practice the loader's img/s bounds it.""",
        {
            "model": {"name": _model},
            "data": {"dataset": "packed", "image_size": 64},
            "augment": dict(SCALING_AUGMENT),
            "optim": {"name": "lion", "lr": 1e-5, "weight_decay": 1e-3, "betas": [0.9, 0.99]},
            "schedule": {"epochs": _epochs, "schedule": "constant"},
            "run": {"batch_size": 16384, "accumulate_steps": 4, "eval_every": 10, "checkpoint_every": 1},
        },
    )

#: Scaling-MLPs fine-tuning (docs/science.md §7; scaling_mlps README): SGD momentum 0.9, lr 0.01 head / 0.001 body,
#: weight decay 1e-4, label smoothing 0.3, gradient clipping 1, RandomResizedCrop scale (0.4, 1) of square
#: boxes + flip, batch 2048, 50 epochs, 64x64
_FINETUNE: dict[str, Any] = {
    "augment": {"random_resized_crop": True, "rrc_scale": [0.4, 1.0], "rrc_ratio": [1.0, 1.0], "hflip": True,
                "label_smoothing": 0.3},
    "optim": {"name": "sgd", "lr": 1e-3, "head_lr": 1e-2, "momentum": 0.9, "nesterov": False,
              "weight_decay": 1e-4, "grad_clip": 1.0},
    "schedule": {"epochs": 50, "warmup_epochs": 1},
    "run": {"batch_size": 2048, "eval_every": 5, "checkpoint_every": 5},
}

for _ds, _what, _expect in (
        ("cifar10", "CIFAR-10 (32x32, upscaled to the model's 64x64)",
         "B-12/Wi-1024: 93.6% (docs/science.md §7 Table 2; released checkpoint, 100 epochs: 94.2%)"),
        ("cifar100", "CIFAR-100 (32x32, upscaled to the model's 64x64)",
         "B-12/Wi-1024: 79.2% (docs/science.md §7 Table 2; released checkpoint, 100 epochs: 80.0%)"),
        ("imagefolder", "an image folder (data.root=DIR: a subfolder per class, resized to 64x64)",
         "depends on the data")):
    _root = " data.root=DIR" if _ds == "imagefolder" else ""
    _register(
        f"in21k_finetune_{_ds}",
        f"""Fine-tuning an ImageNet-21k pre-trained bottleneck MLP (in21k_*) on {_what},
    Scaling-MLPs recipe (docs/science.md §7): SGD momentum 0.9, lr 0.01 for the new head and 0.001 for the body, """
        f"""weight decay
    1e-4, label smoothing 0.3, gradient clipping 1, RandomResizedCrop (scale 0.4-1, square) + flip,
    batch 2048, 50 epochs, cosine.
    Run:      mlplab finetune runs/in21k_b12_wi1024 in21k_finetune_{_ds}{_root}
    Expect:   {_expect}
    Time:     50 epochs; CIFAR: 2.5M images, 1.9 PFLOP through B-12/Wi-1024 (seconds of H100
              compute): the loader's img/s bounds it.""",
        {"model": {"new_head": "auto"}, "data": {"dataset": _ds}, **_FINETUNE},
    )
