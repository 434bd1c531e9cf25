import copy
import dataclasses
import math
import random

import pytest

from solver.predictor import (DURATION_BS_EXPONENT, UNOBSERVED_PRIOR_MASS, candidate_regimes,
                              done_epochs_duration, mean_past_epoch_duration, observed_batch_sizes,
                              predict_remaining, regime_durations)
from solver.types import JobView


def job(bs, done, total, hist=None, durations=None, max_bs=None, min_bs=None, **kw):
    return JobView(job_id=kw.pop("job_id", 1), arrival_time=0.0, num_gpus=1, batch_size=bs, epochs_done=done,
                   total_epochs=total, samples_per_epoch=1000, steps_done=0, total_steps=100,
                   throughput=1.0, epoch_duration_by_bs=durations or {}, bs_history=tuple(hist or ()),
                   max_batch_size=max_bs, min_batch_size=min_bs, **kw)


def reference_remaining(bs_schedule, epoch_duration, progress):
    """Straight transcription of JobMetaData.dirichlet_posterior_remaining_runtime (oracle support)."""
    epochs = len(bs_schedule)
    modes = sorted(set(bs_schedule))
    prior = {b: epochs / len(modes) for b in modes}
    observed = bs_schedule[: progress + 1]
    post = copy.deepcopy(prior)
    for b in observed:
        post[b] += 1
    conc = sum(post.values())
    rebased = {b: epochs * c / conc for b, c in post.items()}
    for b in observed:
        if rebased[b] >= 1:
            rebased[b] -= 1
    inflated = int(sum(rebased.values()) + 1)
    remaining = epochs - progress
    if inflated < remaining:
        inflated = remaining
    if inflated <= 0 or remaining <= 0:
        return 1.0
    dmap = {}
    for e, d in enumerate(epoch_duration):
        dmap.setdefault(bs_schedule[e], []).append(d)
    dmap = {b: sum(v) / len(v) for b, v in dmap.items()}
    rt = sum(n * dmap[b] for b, n in rebased.items())
    return rt * remaining / inflated


def test_hand_computed_two_regimes():
    # E=10, support {32,64}, 3 epochs done at 32 and the current epoch at 32: observed 32 x4.
    # alpha = {32: 5+4, 64: 5}; rebased = {32: 90/14 - 4, 64: 50/14}; sum = 6 -> N~ = max(7, int(7)) = 7
    j = job(32, 3, 10, hist=[32, 32, 32], durations={32: 10.0, 64: 6.0})
    p = predict_remaining(j, support=[32, 64])
    expected = (90 / 14 - 4) * 10.0 + (50 / 14) * 6.0
    assert p.remaining_s == pytest.approx(expected)
    assert p.posterior_alpha == {32: 9.0, 64: 5.0}
    assert sum(p.regimes.values()) == pytest.approx(6.0)


def test_hand_computed_restatement_inflates():
    # E=3, support {a,b,c}, 1 epoch done: observed [a, a].  alpha = {a: 3, b: 1, c: 1}, conc 5
    # rebased = {a: 1.8, b: 0.6, c: 0.6}; subtract a: 0.8 then (0.8 < 1) skip.  sum = 2.0 -> int(3.0) = 3
    # R = 2, N~ = max(2, 3) = 3  ->  R^ = 2/3 * (0.8*3 + 0.6*6 + 0.6*9)
    j = job(1, 1, 3, hist=[1], durations={1: 3.0, 2: 6.0, 4: 9.0})
    p = predict_remaining(j, support=[1, 2, 4])
    assert p.remaining_s == pytest.approx(2 / 3 * (0.8 * 3 + 0.6 * 6 + 0.6 * 9))
    assert p.regimes[1] == pytest.approx(0.8 * 2 / 3)


def test_static_job_is_remaining_minus_current_epoch():
    j = job(64, 4, 10, hist=[64] * 4, durations={64: 7.0})
    assert predict_remaining(j).remaining_s == pytest.approx((10 - 4 - 1) * 7.0)


def test_remaining_restatement_counts_every_epoch_left():
    # a static job: exactly the epochs left, the current one included, down to its last epoch
    for done in range(10):
        j = job(64, done, 10, hist=[64] * done, durations={64: 7.0})
        assert predict_remaining(j, restate="remaining").remaining_s == pytest.approx((10 - done) * 7.0)
    j = job(64, 10, 10, hist=[64] * 10, durations={64: 7.0})
    assert predict_remaining(j, restate="remaining").remaining_s == 0.0
    # the posterior's mix of what is left, scaled to R = 2 epochs: the reference's rebased counts
    # {1: 0.8, 2: 0.6, 4: 0.6} (test_hand_computed_restatement_inflates) sum to 2.0
    j = job(1, 1, 3, hist=[1], durations={1: 3.0, 2: 6.0, 4: 9.0})
    p = predict_remaining(j, support=[1, 2, 4], restate="remaining")
    assert p.remaining_s == pytest.approx(0.8 * 3 + 0.6 * 6 + 0.6 * 9)
    assert sum(p.regimes.values()) == pytest.approx(2.0)
    # a job that switches: the remaining epochs always add up to E - e
    sched = [32] * 3 + [64] * 5 + [32] * 2
    for e in range(10):
        j = job(sched[e], e, 10, hist=sched[:e], durations={32: 10.0, 64: 6.0}, max_bs=64)
        p = predict_remaining(j, restate="remaining")
        assert sum(p.regimes.values()) == pytest.approx(10 - e)
        assert 6.0 * (10 - e) <= p.remaining_s <= 10.0 * (10 - e)
    with pytest.raises(ValueError):
        predict_remaining(j, restate="exact")


@pytest.mark.parametrize("seed", range(30))
def test_matches_reference_with_same_support(seed):
    rng = random.Random(seed)
    E = rng.randint(1, 60)
    sizes = rng.sample([16, 32, 64, 128, 256], rng.randint(1, 4))
    sched = []
    while len(sched) < E:
        sched += [rng.choice(sizes)] * rng.randint(1, 15)
    sched = sched[:E]
    dur = {b: rng.uniform(1, 100) for b in sizes}
    durations = [dur[b] for b in sched]
    for progress in sorted({0, E - 1, rng.randint(0, E - 1)}):
        j = job(sched[progress], progress, E, hist=sched[:progress], durations=dur)
        mine = predict_remaining(j, support=set(sched)).remaining_s
        assert mine == pytest.approx(reference_remaining(sched, durations, progress), rel=1e-12)


def test_learned_support_and_prior_mass():
    j = job(32, 0, 10, durations={32: 10.0, 64: 8.0, 128: 6.0, 256: 5.0}, max_bs=256)
    obs, cands = candidate_regimes(j)
    assert obs == [32] and cands == [64, 128, 256]
    p = predict_remaining(j)
    mass = 1 + UNOBSERVED_PRIOR_MASS * 3
    assert p.posterior_alpha[32] == pytest.approx(10 / mass + 1)
    assert p.posterior_alpha[256] == pytest.approx(10 * UNOBSERVED_PRIOR_MASS / mass)
    assert set(p.regimes) == {32, 64, 128, 256}
    # observed regimes all seen and no max declared: a single regime
    j2 = job(64, 3, 10, hist=[32, 32, 64], durations={32: 10.0, 64: 8.0})
    assert set(predict_remaining(j2).regimes) == {32, 64}


def test_no_candidates_above_max_or_below_min():
    j = job(64, 0, 10, max_bs=64)
    assert candidate_regimes(j)[1] == []
    j = job(64, 2, 10, hist=[128, 64], max_bs=100, min_bs=64)
    obs, cands = candidate_regimes(j)
    assert obs == [64, 128] and cands == []


def test_duration_extrapolation():
    j = job(32, 0, 10, durations={32: 10.0})
    d = regime_durations(j, [32, 128, 8])
    assert d[32] == 10.0
    assert d[128] == pytest.approx(10.0 * (32 / 128) ** DURATION_BS_EXPONENT)
    assert d[8] == pytest.approx(10.0 * (32 / 8) ** DURATION_BS_EXPONENT)
    # nearest in log2: 100 is closer to 128 than to 32
    j = job(32, 0, 10, durations={32: 10.0, 128: 4.0})
    assert regime_durations(j, [100])[100] == pytest.approx(4.0 * (128 / 100) ** DURATION_BS_EXPONENT)
    # no durations at all: from throughput (iterations/s) and samples per epoch
    j = job(10, 0, 10)
    assert regime_durations(j, [10])[10] == pytest.approx(1000 / 10 / 1.0)


def test_helpers_done_and_mean_duration():
    j = job(64, 3, 10, hist=[32, 32, 64], durations={32: 10.0, 64: 6.0})
    assert observed_batch_sizes(j) == [32, 32, 64, 64]
    assert done_epochs_duration(j) == pytest.approx(26.0)
    assert mean_past_epoch_duration(j) == pytest.approx(32.0 / 4)
    # missing history is padded with the current batch size
    j = job(64, 2, 10, hist=[], durations={64: 6.0})
    assert observed_batch_sizes(j) == [64, 64, 64]


def test_finished_and_degenerate_jobs():
    j = job(32, 10, 10, hist=[32] * 10, durations={32: 5.0})
    assert predict_remaining(j).remaining_s == 1.0     # the reference's sentinel for "nothing left"
    j = job(32, 0, 1, durations={32: 5.0})
    assert math.isfinite(predict_remaining(j).remaining_s)


class CountingHistory(tuple):
    """A bs_history that counts the epochs read through indexing."""
    reads = 0

    def __getitem__(self, i):
        CountingHistory.reads += 1
        return tuple.__getitem__(self, i)


@pytest.mark.parametrize("seed", range(5))
def test_regime_summary_is_incremental_and_matches_full_recompute(seed):
    from solver.predictor import RegimeSummary
    rng = random.Random(seed)
    E = rng.randint(20, 80)
    sizes = [32, 64, 128]
    hist = []
    summ = RegimeSummary()
    durations = {32: 10.0, 64: 7.0, 128: 5.5}
    for e in range(E):
        bs = rng.choice(sizes)
        CountingHistory.reads = 0
        j = job(bs, e, E, hist=None, durations=durations, max_bs=256)
        j = dataclasses.replace(j, bs_history=CountingHistory(hist))
        fast = predict_remaining(j, summary=summ)
        assert CountingHistory.reads <= 2          # only the new epoch (and a consistency check)
        full = predict_remaining(dataclasses.replace(j, bs_history=tuple(hist)))
        assert fast.remaining_s == pytest.approx(full.remaining_s, rel=1e-12)
        assert fast.posterior_alpha == pytest.approx(full.posterior_alpha)
        hist.append(bs)


def test_regime_summary_rebuilds_when_history_changes():
    from solver.predictor import RegimeSummary
    summ = RegimeSummary()
    j = job(64, 3, 10, hist=[32, 32, 64], durations={32: 10.0, 64: 6.0})
    predict_remaining(j, summary=summ)
    assert summ.counts == {32: 2, 64: 1}
    j2 = job(64, 2, 10, hist=[64, 64], durations={32: 10.0, 64: 6.0})     # requeued: history restarted
    assert predict_remaining(j2, summary=summ).remaining_s == pytest.approx(predict_remaining(j2).remaining_s)
    assert summ.counts == {64: 2}
