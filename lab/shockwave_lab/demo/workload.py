"""The demo's mixed workload: GNS, Accordion and static jobs of 1, 2 and 4 GPUs, from several users."""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class DemoJob:
    name: str
    user: str
    template: str        # gns | accordion | static  (job_templates/<template>.sbatch)
    gpus: int
    epochs: int
    samples: int
    batch_size: int = 32
    max_batch_size: int = 256
    delay_s: float = 0.0  # submitted this long after the first job

    def steps_per_epoch(self, bs=None) -> int:
        return math.ceil(self.samples / (bs or self.batch_size))


USERS = ("swdemo-ana", "swdemo-ben", "swdemo-chi")


def default_workload(scale: float = 1.0) -> list[DemoJob]:
    """The comparison workload (7 jobs, 16 GPUs of demand on 8 GPUs): user ana fills the cluster first with
    two long 4-GPU jobs; ben's two adaptive 2-GPU jobs (GNS, Accordion: their batch size grows and their
    epochs get shorter) and chi's three smaller jobs arrive 5-15 s later.  First come, first served (plain
    Slurm) makes ben and chi wait for all of ana's work; a fair scheduler shares the GPUs at once, paying
    for it with checkpoint/restart overhead.  `scale` stretches epochs."""
    e = lambda n: max(2, round(n * scale))  # noqa: E731
    a, b, c = USERS
    return [
        DemoJob("static-4a", a, "static", 4, e(12), 4096),
        DemoJob("static-4a2", a, "static", 4, e(12), 4096),
        DemoJob("gns-2b", b, "gns", 2, e(12), 4096, delay_s=5),
        DemoJob("acc-2b", b, "accordion", 2, e(12), 4096, delay_s=5),
        DemoJob("gns-1c", c, "gns", 1, e(6), 4096, delay_s=10),
        DemoJob("static-1c", c, "static", 1, e(4), 4096, delay_s=10),
        DemoJob("acc-2c", c, "accordion", 2, e(8), 4096, delay_s=15),
    ]


def previous_workload(scale: float = 1.0) -> list[DemoJob]:
    """The earlier demo's 10 jobs (18 GPUs of demand on 8 GPUs, arrivals spread over a minute)."""
    e = lambda n: max(2, round(n * scale))  # noqa: E731
    a, b, c = USERS
    return [
        DemoJob("gns-1a", a, "gns", 1, e(8), 8192),
        DemoJob("acc-1a", a, "accordion", 1, e(8), 8192),
        DemoJob("static-4a", a, "static", 4, e(5), 8192, delay_s=5),
        DemoJob("gns-2b", b, "gns", 2, e(8), 8192, delay_s=10),
        DemoJob("static-1b", b, "static", 1, e(6), 8192, delay_s=15),
        DemoJob("acc-2b", b, "accordion", 2, e(8), 8192, delay_s=20),
        DemoJob("gns-4c", c, "gns", 4, e(6), 8192, delay_s=30),
        DemoJob("static-1c", c, "static", 1, e(4), 8192, delay_s=40),
        DemoJob("acc-1c", c, "accordion", 1, e(6), 8192, delay_s=50),
        DemoJob("gns-1c", c, "gns", 1, e(6), 8192, delay_s=60),
    ]


def short_workload() -> list[DemoJob]:
    """What the CI integration test runs: 5 jobs, 3 users, 1/2/4 GPUs, a few epochs each; ana fills the
    8 GPUs first, ben and chi arrive after (the comparison's shape, small)."""
    a, b, c = USERS
    return [DemoJob("gns-4a", a, "gns", 4, 4, 1024), DemoJob("acc-2a", a, "accordion", 2, 4, 1024),
            DemoJob("static-2a", a, "static", 2, 4, 1024),
            DemoJob("static-1b", b, "static", 1, 2, 1024, delay_s=4),
            DemoJob("gns-2c", c, "gns", 2, 2, 1024, delay_s=6)]
