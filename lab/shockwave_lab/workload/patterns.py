"""The reference's per-job batch-size patterns and exclusive run times (its `utils.generate_pickle_file`).

These are what the reference computes for every job of a `.trace` before simulating it (docs/reference.md
§4.2, §4.3), restated as data:

- GNS: a table per (model, initial batch size, GPUs) of the epochs where the batch size becomes x2, x4, x8,
  x16 the initial one (`utils.get_gns_bs_pattern`), capped at the model's largest batch size.  A quirk of the
  reference's loops is kept: the last epoch stays at the initial batch size unless it falls in the first
  doubling range.  Models/sizes without an entry (Transformer, ResNet-50 bs16, ...) never change.
- Accordion (profile only, the FTF denominator): outside the critical regime and after the first 30% of the
  epochs the batch size is the model maximum (`utils.get_accordion_bs_pattern`).  The *simulator* does not
  force the first 30% (workload/models.py `accordion_critical`); that mismatch is the reference's.
- Exclusive run time = sum over epochs of (samples / bs) / throughput(bs, GPUs).
"""
from __future__ import annotations

from shockwave_lab.workload.models import DATASET_SIZE

BS_LIMIT = {"ResNet-18": 256, "ResNet-50": 128, "Transformer": 128, "LM": 80, "Recommendation": 8192}
ACCORDION_MAX_BS = {"LM": 80, "ResNet-18": 256, "ResNet-50": 128, "Recommendation": 8192}

# (model, initial bs, GPUs) -> epochs where the multiplier becomes 2, 4, 8, 16 (reference utils.py:801-1328)
GNS_BREAKPOINTS: dict[tuple[str, int, int], tuple[int, ...]] = {
    ("ResNet-18", 16, 1): (31, 41, 51, 71), ("ResNet-18", 32, 1): (21, 31, 51), ("ResNet-18", 64, 1): (11, 31),
    ("ResNet-18", 128, 1): (11,),
    ("ResNet-18", 16, 2): (21, 31, 91, 111), ("ResNet-18", 32, 2): (11, 21, 41), ("ResNet-18", 64, 2): (21, 41),
    ("ResNet-18", 128, 2): (41,),
    ("ResNet-18", 16, 4): (11, 21, 81, 91), ("ResNet-18", 32, 4): (21, 31, 61), ("ResNet-18", 64, 4): (11, 61),
    ("ResNet-18", 128, 4): (11,),
    ("ResNet-50", 64, 1): (101,), ("ResNet-50", 32, 2): (101, 111), ("ResNet-50", 64, 2): (81,),
    ("ResNet-50", 32, 4): (131, 221), ("ResNet-50", 64, 4): (191,),
    ("LM", 5, 1): (31, 41, 61, 71), ("LM", 10, 1): (11, 21, 41), ("LM", 20, 1): (11, 41), ("LM", 40, 1): (11,),
    ("LM", 5, 2): (31, 51, 61, 71), ("LM", 10, 2): (11, 31, 41), ("LM", 20, 2): (31, 41), ("LM", 40, 2): (11,),
    ("LM", 5, 4): (11, 31, 71, 91), ("LM", 10, 4): (11, 31, 61), ("LM", 20, 4): (11, 61), ("LM", 40, 4): (61,),
    ("Recommendation", 512, 1): (21, 41, 71, 91), ("Recommendation", 1024, 1): (21, 51, 91),
    ("Recommendation", 2048, 1): (21, 41), ("Recommendation", 4096, 1): (41,),
}


def gns_pattern(model: str, bs: int, gpus: int, num_epochs: int) -> list[int]:
    """The reference's GNS batch size of every epoch, quirks included."""
    out = [bs] * num_epochs
    bps = GNS_BREAKPOINTS.get((model, bs, gpus))
    if not bps or num_epochs <= bps[0]:
        return out
    for e in range(bps[0], num_epochs):
        level = sum(1 for b in bps if b <= e)
        if e == num_epochs - 1 and level > 1:
            break                                  # the reference's loops skip the last epoch after range one
        out[e] = bs * 2 ** level
    cap = BS_LIMIT.get(model, bs)
    return [min(x, cap) for x in out]


def accordion_profile_pattern(model: str, bs: int, num_epochs: int) -> list[int]:
    """The reference profile's Accordion batch size of every epoch (first 30% forced critical)."""
    out = [bs] * num_epochs
    if model == "ResNet-18":
        head = 20 if bs == 256 else 10
        critical = set(range(head)) | set(range(150, 160)) | set(range(250, 260))
    elif model == "ResNet-50":
        critical = {x for x in range(600) if x % 30 < 10}
    elif model == "LM":
        critical = set(range(10))
    elif model == "Recommendation":
        head = 30 if bs in (512, 1024) else 40 if bs == 2048 else 10
        critical = set(range(head)) | set(range(60, 70)) | set(range(80, 90))
    else:
        return out
    big = ACCORDION_MAX_BS.get(model, bs)
    return [big if (e not in critical and e > num_epochs * 0.3) else b for e, b in enumerate(out)]


def profile_pattern(model: str, bs: int, gpus: int, mode: str, num_epochs: int) -> list[int]:
    if mode == "gns":
        return gns_pattern(model, bs, gpus, num_epochs)
    if mode == "accordion":
        return accordion_profile_pattern(model, bs, num_epochs)
    return [bs] * num_epochs


def exclusive_runtime(model: str, pattern: list[int], gpus: int, throughputs, samples: int | None = None) -> float:
    """Sum of (samples / bs) / throughput over the epochs (reference `get_metric(..., "duration")`)."""
    samples = samples or DATASET_SIZE[model]
    total = 0.0
    for b in pattern:
        thr = throughputs.get(model, b, gpus)
        if thr is None:
            raise ValueError(f"no throughput for {model} batch size {b} on {gpus} GPU(s)")
        total += (samples / b) / thr
    return total
