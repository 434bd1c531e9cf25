"""The analytic centre of {l <= x <= 1, x >= 0, sum sf x <= G}: the point an interior-point solver returns
for a feasibility LP (constant objective), and on the optimal face when the optimum is not unique.

Maximises sum_i [log x_i + log(x_i - l_i) + log(1 - x_i)] + log(G - sum_i sf_i x_i).  For a price mu of the
capacity constraint each x_i solves 1/x + 1/(x - l) - 1/(1 - x) = sf_i mu (decreasing in x: bisection);
mu itself is bisected until the capacity slack equals 1/mu.
"""
from __future__ import annotations

import numpy as np


def analytic_center(lower, sf, capacity, iters=80):
    """argmax sum log x + log(x - l) + log(1 - x) + log(G - sum sf x), per the barrier's KKT conditions."""
    lo_x = np.maximum(lower, 0.0)

    def x_of(mu):
        a, b = lo_x.copy(), np.ones_like(lo_x)
        for _ in range(iters):
            mid = (a + b) / 2
            f = 1 / np.maximum(mid, 1e-300) + 1 / np.maximum(mid - lower, 1e-300) - 1 / np.maximum(1 - mid, 1e-300)
            big = f > sf * mu
            a = np.where(big, mid, a)
            b = np.where(big, b, mid)
        return (a + b) / 2

    lo_mu, hi_mu = 1e-9, 1e9
    for _ in range(iters):
        mu = np.sqrt(lo_mu * hi_mu)
        slack = capacity - float(np.sum(sf * x_of(mu)))
        if slack <= 0 or slack < 1.0 / mu:
            lo_mu = mu
        else:
            hi_mu = mu
    return x_of(np.sqrt(lo_mu * hi_mu))
