"""Datasets (one table), download + verify, on-device loading and batched augmentation.

    from mlplab.data import load_dataset, DeviceLoader, build_augment, AugmentConfig
    train = load_dataset("cifar10", "train")            # ImageData: uint8 (N, 3, 32, 32), int64 labels
    aug = build_augment(AugmentConfig(crop_padding=4, hflip=True), train.info)
    loader = DeviceLoader(train.images, train.labels, 128, augment=aug, device="cuda", seed=0)
    for x, y in loader: ...                              # x float normalised, y int64 or (B, K)
"""
from .augment import Augment, AugmentConfig, build_augment
from .autoaugment import AutoAugment, RandAugment, parse_randaugment
from .datasets import ImageData, holdout_split, load_dataset, make_synthetic, resize_images
from .download import BadData, ChecksumError, DataError, cache_dir, download_file, safe_extract, verify_checksum
from .loader import DeviceLoader, ImageFolderDataset, MicroBatches, PackedLoader, StreamingLoader
from .packed import Pack, PackedImages, verify_pack
from .packing import pack
from .table import DATASETS, FASHION_MNIST_DEBIAN_DIR, DataFile, DatasetInfo, get_info, restrict_classes

__all__ = [
    "DATASETS", "DataFile", "DatasetInfo", "FASHION_MNIST_DEBIAN_DIR", "get_info", "restrict_classes",
    "BadData", "ChecksumError", "DataError", "cache_dir", "download_file", "safe_extract", "verify_checksum",
    "ImageData", "holdout_split", "load_dataset", "make_synthetic", "resize_images",
    "Augment", "AugmentConfig", "build_augment", "AutoAugment", "RandAugment", "parse_randaugment",
    "DeviceLoader", "ImageFolderDataset", "MicroBatches", "PackedLoader", "StreamingLoader",
    "Pack", "PackedImages", "pack", "verify_pack",
]
