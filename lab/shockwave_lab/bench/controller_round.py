"""One controller round over N queued managed jobs on a local Slurm cluster: read + solve + enact.

    .venv/bin/python bench/controller_round.py --jobs 1000                       (as root; ~1-2 min)
    nice -n 10 .venv/bin/python bench/controller_round.py --jobs 1000 --event-lines 1000   (issue 10 item 4)

Without ``--event-lines``: rounds of one controller (target: <= 5 s per round at 1,000 jobs).

With ``--event-lines L``: every job has an event file of L ``epoch_end`` lines (plus one hostile job whose
single 133-byte line says ``"epoch": 9999999`` with no total), and two dry-run controllers (decide, enact
nothing, so both see the same Slurm) run alternately on the same jobs: one with an empty event store, one with
the populated store.  The second one first catches up on the backlog (at most MAX_LINES_PER_ROUND lines per round; reported
separately); in the steady rounds every job appends one more epoch line per round.  Reported: steady round time with events /
without (target <= 1.5x), the ingest round, memory growth per job (RSS, and the size of the saved summary).
Results are appended to docs/performance.md.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from shockwave_lab.bench import ROOT

from slurm_shockwave.controller.config import config_from_dict
from slurm_shockwave.controller.daemon import Controller
from slurm_shockwave.events.schema import encode_line, make_record
from slurm_shockwave.events.store import ensure_job_dir, job_event_path
from shockwave_lab.localcluster import LocalCluster


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def controller(c, root: Path, name: str, store: Path, dry_run: bool) -> Controller:
    cfg = config_from_dict({"controller": {"round_seconds": 0.01, "mode": "authoritative", "dry_run": dry_run,
                                           "partition": c.partition, "state_dir": str(root / f"state-{name}"),
                                           "event_store": str(store)},
                            "policy": {}}, "bench")                       # the default policy
    cfg.slurm.env = dict(c.env)
    return Controller(cfg)


def write_events(store: Path, ids: list[int], lines: int, t0: float) -> int:
    """L epoch lines per job (batch size doubling twice), and the hostile line for the last job."""
    total = 0
    for n, jid in enumerate(ids):
        ensure_job_dir(store, str(jid))
        path = job_event_path(store, str(jid))
        if n == len(ids) - 1:   # the hostile job: one valid line, no total, epoch 9,999,999
            data = encode_line(make_record("epoch_end", str(jid), 0, t0, epoch=9_999_999, batch_size=32,
                                           duration_s=1.0))
        else:
            data = b"".join(encode_line(make_record(
                "epoch_end", str(jid), 0, t0 + e, epoch=e, batch_size=32 * 2 ** (3 * e // lines),
                duration_s=30.0 - 5 * (3 * e // lines), samples=50000, total_epochs=lines + 1000,
                samples_per_epoch=50000, min_batch_size=32, max_batch_size=512)) for e in range(lines))
        path.write_bytes(data)
        total += len(data)
    return total


def append_one(store: Path, ids: list[int], epoch: int, t: float) -> None:
    for jid in ids[:-1]:
        with open(job_event_path(store, str(jid)), "ab") as fh:
            fh.write(encode_line(make_record("epoch_end", str(jid), 0, t, epoch=epoch, batch_size=128,
                                             duration_s=20.0, samples=50000)))


def submit_jobs(c, root: Path, n: int) -> tuple[list[int], float]:
    """n managed `sleep` jobs of 1, 2 or 4 GPUs with Shockwave hints (8 sbatch at a time); (ids, seconds)."""
    script = root / "job.sh"
    script.write_text("#!/bin/sh\nsleep 3600\n")
    t0 = time.perf_counter()

    def one(i):
        gpus = (1, 1, 1, 2, 4)[i % 5]
        return c.cli.sbatch(str(script), [f"--gres=gpu:{gpus}", "--requeue", "--output=/dev/null",
                                          f"--comment=shockwave epochs={10 + i % 50} bs=32 epoch_s={30 + i % 7}",
                                          "-p", c.partition, f"--job-name=b{i}"])
    with ThreadPoolExecutor(8) as ex:
        ids = [int(j) for j in ex.map(one, range(n))]
    return ids, time.perf_counter() - t0


def timed_round(ctl: Controller) -> float:
    t = time.perf_counter()
    ctl.run(max_rounds=1)
    return time.perf_counter() - t


def timed_rounds(ctl: Controller, n: int) -> list[dict]:
    """n rounds of the controller, each with its phases (read = observe: squeue --json + sprio + nodes + events;
    decide = the policy and the gate; enact = the reconcile's Slurm calls and their journal) and the process's
    RSS after it."""
    backend, phases = ctl.backend, {}

    def timed(name, fn):
        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                phases[name] = phases.get(name, 0.0) + time.perf_counter() - t
        return wrapper
    observe, apply = backend.observe, backend.apply
    backend.observe, backend.apply = timed("read", observe), timed("enact", apply)
    calls = []
    run = backend.cli.run
    backend.cli.run = lambda argv, *a, **k: (calls.append(argv[0]), run(argv, *a, **k))[1]
    out = []
    try:
        for _ in range(n):
            phases.clear()
            calls.clear()
            total = timed_round(ctl)
            out.append({"total": total, "read": phases.get("read", 0.0), "enact": phases.get("enact", 0.0),
                        "decide": total - phases.get("read", 0.0) - phases.get("enact", 0.0),
                        "calls": len(calls), "rss_mb": rss_bytes() / 1e6,
                        "json_jobs": backend.cli.queue.last.get("json_jobs")})
    finally:
        backend.observe, backend.apply, backend.cli.run = observe, apply, run
    return out


def round_row(label: str, jobs: int, gpus: int, rounds: list[dict]) -> list[str]:
    return [f"| {label} | {jobs} | {gpus} | {i} | **{r['total']:.2f}** | {r['read']:.2f} | {r['decide']:.2f} | "
            f"{r['enact']:.2f} | {r['calls']} | {r.get('json_jobs', '-')} | {r['rss_mb']:.0f} |"
            for i, r in enumerate(rounds)]


ROUND_HEAD = ("| Slurm | pending jobs | GPUs | round | total s | read s | decide s | enact s | Slurm calls | "
              "jobs read as JSON | controller RSS MB |\n|---|---|---|---|---|---|---|---|---|---|---|\n")


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--gpus-per-node", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--event-lines", type=int, default=0, help="epoch lines per job (0: the plain round bench)")
    ap.add_argument("--profile", action="store_true", help="print a cProfile of one steady round with events")
    ap.add_argument("--no-doc", action="store_true", help="do not append to docs/performance.md")
    args = ap.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="shockwave-bench-"))
    root.chmod(0o755)
    c = LocalCluster(root, nodes=args.nodes, gpus_per_node=args.gpus_per_node, cpus_per_node=64)
    c.ensure_installed()
    c.up()
    try:
        ids, submit_s = submit_jobs(c, root, args.jobs)
        print(f"submitted {args.jobs} jobs in {submit_s:.1f} s")
        if args.event_lines:
            events_bench(c, root, ids, args)
        else:
            plain_bench(c, root, args)
    finally:
        c.down()


def plain_bench(c, root: Path, args) -> None:
    rss0 = rss_bytes() / 1e6
    ctl = controller(c, root, "plain", root / "events", dry_run=False)
    rounds = timed_rounds(ctl, args.rounds)
    ctl.close()
    rows = round_row(c.run(["sinfo", "-V"]).stdout.split()[-1], args.jobs, args.nodes * args.gpus_per_node, rounds)
    print("\n".join(rows))
    append_doc("\n## Controller round on a local Slurm cluster\n\n"
               f"`.venv/bin/python bench/controller_round.py --jobs {args.jobs} --nodes {args.nodes} --gpus-per-node "
               f"{args.gpus_per_node}` ({time.strftime('%Y-%m-%d')}; RSS of the bench process before the controller: "
               f"{rss0:.0f} MB).\n\n" + ROUND_HEAD + "\n".join(rows) + "\n")


def events_bench(c, root: Path, ids: list[int], args) -> None:
    empty, store = root / "events-empty", root / "events"
    empty.mkdir()
    store.mkdir()
    t_ev = time.time() - 10 * args.event_lines - 3600
    nbytes = write_events(store, ids, args.event_lines, t_ev)
    print(f"wrote {args.event_lines} lines x {len(ids) - 1} jobs + 1 hostile job ({nbytes / 1e6:.0f} MB)")
    plain = controller(c, root, "plain", empty, dry_run=True)
    ev = controller(c, root, "events", store, dry_run=True)
    warm_plain = timed_round(plain)
    rss0 = rss_bytes()
    tracker = ev.backend._events
    ingest = []
    while True:                  # the backlog is read over several rounds (events/tracker.MAX_LINES_PER_ROUND)
        before = tracker.reader.accepted
        ingest.append(timed_round(ev))
        if tracker.reader.accepted == before or len(ingest) > 200:
            break
    rss1 = rss_bytes()
    summary_bytes = [len(json.dumps(st.to_dict())) for st in tracker.jobs.values()]
    hostile = tracker.progress(str(ids[-1]))
    without, with_ev = [], []
    for r in range(args.rounds):
        without.append(timed_round(plain))
        append_one(store, ids, args.event_lines + r, time.time())
        with_ev.append(timed_round(ev))
    rss2 = rss_bytes()
    if args.profile:
        import cProfile
        import pstats
        append_one(store, ids, args.event_lines + args.rounds, time.time())
        prof = cProfile.Profile()
        prof.enable()
        timed_round(ev)
        prof.disable()
        pstats.Stats(prof).sort_stats("cumulative").print_stats(45)
    plain.close()
    ev.close()
    med_without, med_with = statistics.median(without), statistics.median(with_ev)
    ratio = med_with / med_without
    per_job = (rss1 - rss0) / len(ids)
    lines = [
        f"- steady round (1 new line per job per round), median of {args.rounds}: **{med_with:.2f} s with events, "
        f"{med_without:.2f} s without: ratio {ratio:.2f}** (target <= 1.5)",
        f"- rounds with events: {', '.join(f'{t:.2f}' for t in with_ev)} s; without: "
        f"{', '.join(f'{t:.2f}' for t in without)} s (first round without events, warm-up: {warm_plain:.2f} s)",
        f"- catching up on the backlog of {args.event_lines * (len(ids) - 1) + 1:,} lines (read once, at most "
        f"{tracker.max_lines_per_round:,} per round): {len(ingest)} rounds, {sum(ingest):.0f} s in all, the longest "
        f"{max(ingest):.2f} s",
        f"- memory: RSS +{(rss1 - rss0) / 1e6:.1f} MB over the ingest = {per_job / 1e3:.1f} KB per job; after "
        f"{args.rounds} more rounds +{(rss2 - rss1) / 1e6:.1f} MB; saved summary per job: median "
        f"{statistics.median(summary_bytes)} B, max {max(summary_bytes)} B",
        f"- hostile job (`\"epoch\": 9999999`, no total, declared epochs={10 + (len(ids) - 1) % 50}): epochs_done "
        f"{hostile.epochs_done}, ignored lines {hostile.ignored}, history runs {len(hostile.bs_runs)}",
    ]
    print("\n".join(lines))
    append_doc(f"\n## Controller round with event files (issue 10 item 4)\n\n"
               f"`nice -n 10 .venv/bin/python bench/controller_round.py --jobs {args.jobs} --event-lines "
               f"{args.event_lines} --rounds {args.rounds}` ({time.strftime('%Y-%m-%d')}; {args.nodes * args.gpus_per_node} "
               "GPUs; other helpers' jobs were loading the 2 cores, so absolute times are noisy): two dry-run "
               "controllers (decide, enact nothing) alternate on the same queue, one with an empty event store and "
               f"one where every job has {args.event_lines} `epoch_end` lines and one job has the hostile line. "
               "Per-job state is a bounded incremental summary (run-length encoded batch-size history, counts and "
               "duration sums per batch size); reader offsets and summaries are saved in the state, so a round reads "
               "only new lines.\n\n" + "\n".join(lines) + "\n")


def append_doc(text: str) -> None:
    if "--no-doc" in sys.argv:
        return
    perf = ROOT / "docs" / "performance.md"
    perf.write_text((perf.read_text() if perf.exists() else "# Performance\n") + text)


if __name__ == "__main__":
    main()
