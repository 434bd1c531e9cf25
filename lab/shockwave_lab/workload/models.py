"""Facts about the reference workload's models (docs/reference.md §4.2 and §4.3).

Dataset sizes set how many iterations an epoch has: ceil(samples / batch_size).  The batch-size caps
are the largest batch sizes with a throughput profile; Accordion switches between the initial batch size
and the cap.
"""
from __future__ import annotations

import math

DATASET_SIZE = {
    "ResNet-18": 50000,        # CIFAR-10
    "ResNet-50": 100000,       # ImageNet subset
    "Transformer": 10000,      # Multi30k
    "LM": 59675,               # Wikitext-2
    "Recommendation": 117907,  # ML-20M
}

MAX_BATCH_SIZE = {"ResNet-18": 256, "ResNet-50": 128, "Transformer": 128, "LM": 80, "Recommendation": 8192}
MIN_BATCH_SIZE = {"ResNet-18": 16, "ResNet-50": 16, "Transformer": 16, "LM": 5, "Recommendation": 512}
# models whose batch size the reference's adaptation may change (Transformer only under GNS)
ADAPTIVE_MAX_BS = {"LM": 80, "ResNet-18": 256, "ResNet-50": 128, "Recommendation": 8192}


def model_of(job_type: str) -> str:
    """'ResNet-18 (batch size 32)' -> 'ResNet-18'."""
    return job_type.split(" (", 1)[0].strip()


def job_type_for(model: str, batch_size: int) -> str:
    return f"{model} (batch size {batch_size})"


def steps_per_epoch(samples: int, batch_size: int) -> int:
    return math.ceil(samples / batch_size)


def accordion_critical(model: str, initial_bs: int, epoch: int) -> bool | None:
    """Whether `epoch` is in Accordion's critical regime as the reference *simulator* applies it.

    None means the model never adapts under Accordion (Transformer and unknown models).
    """
    if model == "LM":
        return epoch < 10
    if model == "Recommendation":
        if initial_bs in (512, 1024):
            return epoch < 30
        if initial_bs == 2048:
            return epoch < 40
        return epoch < 10
    if model == "ResNet-50":
        return epoch % 30 < 10
    if model == "ResNet-18":
        head = 20 if initial_bs == 256 else 10
        return epoch < head or 150 <= epoch < 160 or 250 <= epoch < 260
    return None
