"""Shared set-up of the fault tests (test_safety_kill9.py, test_safety_outage.py): a local cluster, managed
jobs that checkpoint and resume under `shockwave-run` (tests/safety_train.py), the controller as a real
process (tests/safety_ctl.py, with its kill switch), and the end-of-test checks:

every job COMPLETED with all its epochs, each epoch done once (none lost, none repeated), every run resumed
where the runs before it ended (no work lost to a requeue), every launch of a batch script printed its start,
Slurm's restart count = runs - 1 (more only by runs whose launch never reached the node), no active job left held, the
state database intact (`PRAGMA integrity_check`), rounds numbered without gaps, no requeue journalled
twice at one restart count.

On a cluster of another Slurm version (run from a Debian root, ``cluster.bin_dir`` set) the jobs run inside
that root: build the cluster with ``binds=[REPO]``, ``rw_binds=[<lab root>]`` and ``host_python=sys.executable``
(see tests/test_versions_kill9.py); the jobs then run the host's Python through ``bin_dir/host-python`` and
the controller's config names ``bin_dir``.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

from shockwave_lab.localcluster import daemons as d
from shockwave_lab.localcluster import statefile
from tests.slurm_fixtures import keep_root, wait_for

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


class Lab:
    def __init__(self, cluster, root: Path, epochs: int, epoch_s: float, round_s: float = 3,
                 policy: str = "max_min_fairness", grace: float = 2, rotate: bool = True, rotate_slice: int = 1,
                 rotate_memory: bool = False):
        self.c, self.root, self.epochs, self.epoch_s = cluster, root, epochs, epoch_s
        self.store, self.work, self.state_dir = root / "store", root / "work", root / "state"
        for p in (self.store, self.work):
            p.mkdir(parents=True, exist_ok=True)
        os.chmod(self.store, 0o1777)
        self.calls = root / "calls.log"
        self.log = root / "controller.log"
        self.config = root / "config.toml"
        self.config.write_text(
            f"[controller]\nround_seconds = {round_s}\nmode = \"authoritative\"\ngrace_seconds = {grace}\n"
            "rounds_per_restart = 0\n"
            f"slurm_timeout = 5\n"
            f"partition = \"{cluster.partition}\"\nstate_dir = \"{self.state_dir}\"\nevent_store = \"{self.store}\"\n"
            f"[policy]\nname = \"{policy}\"\n"
            + (f"[slurm]\nbin_dir = \"{cluster.bin_dir}\"\n" if cluster.bin_dir else "") +
            f"[slurm.env]\nSLURM_CONF = \"{cluster.env['SLURM_CONF']}\"\n")
        self.jobs: list[int] = []
        self.policy = "rotate" if rotate else policy
        self.rotate_slice = rotate_slice       # rounds the rotating policy keeps a plan (tests/safety_ctl.py)
        # the rotation survives a restart of the controller (else each controller process plans afresh)
        self.rotate_state = root / "rotate.json" if rotate_memory else None
        self.proc: subprocess.Popen | None = None

    # ------------------------------------------------------------------ jobs
    def submit(self, n: int, ignore_signal=lambda i: i % 2 == 1, checkpoint_s=lambda i: 0) -> list[int]:
        """Submit ``n`` jobs; job ``i`` ignores the checkpoint signal if ``ignore_signal(i)`` (default: the odd
        ones): the controller's requeuehold (after the grace) stops it; the others checkpoint and requeue
        themselves (shockwave-run's ``scontrol requeue``), in ``checkpoint_s(i)`` seconds (a slow checkpoint
        outlives the grace: the controller's requeuehold meets the job's own requeue)."""
        script = self.root / "job.sh"
        # inside another version's Debian root the host's Python runs through the cluster's host-python wrapper
        # (the venv's python is a link to /usr/bin/python3, which inside the root is not the host's)
        python = str(self.c.bin_dir / "host-python") if self.c.bin_dir else sys.executable
        run = f"{python} {BIN / 'shockwave-run'}" if self.c.bin_dir else str(BIN / "shockwave-run")
        # USR1 ignored until shockwave-run installs its handler (SIG_IGN survives exec): a checkpoint signal
        # that comes while the job is still starting must not kill it (the default action of USR1)
        script.write_text(f"#!/bin/sh\ntrap '' USR1\nexec {run} --store {self.store} -- "
                          f"{python} {REPO / 'tests' / 'safety_train.py'} {self.epochs} {self.epoch_s}\n")
        for i in range(n):
            env = {"PYTHONPATH": str(REPO), "SHOCKWAVE_STORE": str(self.store),
                   "SAFETY_IGNORE_CHECKPOINT_SIGNAL": "1" if ignore_signal(i) else "0",
                   "SAFETY_CHECKPOINT_S": str(checkpoint_s(i))}
            self.jobs.append(self.c.cli.sbatch(str(script), [
                f"--job-name=ft{i}", "--gres=gpu:1", "--requeue", "--open-mode=append",
                f"--output={self.work}/out.%j", f"--chdir={self.work}", "-p", self.c.partition,
                f"--comment=shockwave epochs={self.epochs} bs=32 samples=320 epoch_s={self.epoch_s}"], env=env))
        return self.jobs

    def raw(self) -> dict:
        """job id -> {job_state, state_reason, restart_cnt} of our jobs (22.05's squeue --json field names),
        read through the version-tolerant parser (newer versions print job_state as a list)."""
        return {j.job_id: {"job_state": j.state, "state_reason": j.state_reason, "restart_cnt": j.restart_count}
                for j in self.c.cli.squeue_jobs(job_ids=self.jobs)}

    def all_finished(self) -> bool:
        try:
            raw = self.raw()
        except Exception:  # noqa: BLE001 - slurmctld may be down in the outage test
            return False
        return len(raw) == len(self.jobs) and all(r["job_state"] not in ("PENDING", "RUNNING", "COMPLETING",
                                                                          "CONFIGURING", "REQUEUED", "SUSPENDED")
                                                  for r in raw.values())

    # ------------------------------------------------------------------ controller process
    def start(self, kill: str | None = None) -> subprocess.Popen:
        ready = self.root / "ready"
        ready.unlink(missing_ok=True)
        env = {**os.environ, "PYTHONPATH": str(REPO), "SAFETY_CALL_LOG": str(self.calls),
               "SAFETY_READY": str(ready), "SAFETY_POLICY": self.policy,
               "SAFETY_ROTATE_SLICE": str(self.rotate_slice), "SAFETY_ROTATE_STATE": str(self.rotate_state or "")}
        with open(self.log, "a") as log:
            log.write(f"=== start kill={kill}\n")
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.safety_ctl", str(self.config), kill or "none"],
                                     env=env, cwd=str(REPO), stdout=open(self.log, "a"), stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        # SIGTERM is the controller's clean stop only once its handlers are installed
        wait_for(lambda: ready.exists() or self.proc.poll() is not None, timeout=60, interval=0.1,
                 what="the controller started")
        return self.proc

    def stop(self) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            return None

    def strike(self, points, window: float, tries: int = 1) -> list[str]:
        """Start one controller per kill point ("TOKEN:N:before|after", tests/safety_ctl.py), up to ``tries``
        times each, until the workload has finished; a process that does not reach its point within
        ``window`` seconds is stopped cleanly.  Returns the points that struck (the process died of SIGKILL)."""
        struck = []
        for token, n, when in points:
            spec = f"{token}:{n}:{when}"
            for _ in range(tries):
                if self.all_finished():
                    return struck
                proc = self.start(spec)
                try:
                    proc.wait(window)
                except subprocess.TimeoutExpired:   # not reached in its window: stop it cleanly, try again
                    self.stop()
                    continue
                if proc.returncode == -9:
                    struck.append(spec)
                    break
        return struck

    def kill9(self, points, window: float, tries: int = 1, first_timeout: float = 60,
              finish_timeout: float = 400) -> tuple[list[str], dict]:
        """The run of both kill -9 tests: a clean controller gets the workload going, one controller per kill
        point (`strike`), a last one runs the workload to its end and stops cleanly (exit 0) on SIGTERM; then the
        end checks.  Returns (the points that struck, the summary of `check`).  Any failure keeps the lab's
        directory and still prints the figures."""
        struck: list[str] = []
        try:
            try:
                self.start()
                wait_job_progress(self, timeout=first_timeout)
                self.stop()
                struck = self.strike(points, window, tries)
                self.start()
                wait_for(self.all_finished, timeout=finish_timeout, interval=1, what="every job completed")
                rc = self.stop()
                assert rc == 0, f"the last controller exited {rc} on SIGTERM, not 0 after a clean stop"
            finally:
                self.stop()
        except BaseException:
            try:
                self.check()                            # the figures of what did happen
            except AssertionError:
                pass
            print(keep_root(self.root), flush=True)
            raise
        return struck, self.check()

    # ------------------------------------------------------------------ slurmctld outage
    def stop_slurmctld(self) -> None:
        state = statefile.read(self.c.paths)
        pid = state["daemons"]["slurmctld"]["pid"]
        os.kill(pid, signal.SIGTERM)
        wait_for(lambda: not _alive(pid), timeout=30, what="slurmctld stopped")

    def start_slurmctld(self) -> None:
        state = statefile.read(self.c.paths)
        settings = statefile.settings_from(state)
        env = self.c.full_env()
        proc = d.start_slurmctld(self.c.paths, env, bin_dir=self.c.bin_dir)
        procs = dict(state["daemons"])
        procs["slurmctld"] = proc
        statefile.write(self.c.paths, self.c.root, settings, procs, "up")
        d.wait_ctld_ready(env, 30, bin_dir=self.c.bin_dir)

    # ------------------------------------------------------------------ checks
    def outputs(self) -> dict[int, str]:
        return {j: (self.work / f"out.{j}").read_text() if (self.work / f"out.{j}").exists() else ""
                for j in self.jobs}

    def launches(self) -> dict[int, int] | None:
        """job -> how often slurmd launched its batch script (its log: "Launching batch job 7" before 26.05, then
        "Launching batch JobId=7 SLUID=..."); None where the log names no launch of any job."""
        text = "".join(f.read_text(errors="replace") for f in self.c.paths.log.glob("slurmd*.log")
                       if ".start." not in f.name)
        if "Launching batch " not in text:
            return None
        found = re.findall(r"Launching batch (?:job |JobId=|StepId=)(\d+)[ .]", text)
        return {j: found.count(str(j)) for j in self.jobs}

    def check(self) -> dict:
        """Assert the guarantees; returns a summary (restarts per job, rounds, kills, figures).  The figures
        (jobs, jobs lost, preemptions: preempted / kept / wasted) are printed on one line first,
        ``KILL9-FIGURES {json}``, whatever the outcome (bench/kill9_loop.py reads them); a failed check keeps
        the lab's directory (controller log, calls, state, job outputs) and says where."""
        raw = self.raw()
        problems = []
        restarts = {}
        lost = set()
        launches = self.launches()
        for j, out in self.outputs().items():
            r = raw.get(j, {})
            if r.get("job_state") != "COMPLETED":
                problems.append(f"job {j}: {r.get('job_state')} {r.get('state_reason')}")
                lost.add(j)
            done = [int(e) for e in re.findall(r"^epoch (\d+) restart", out, re.M)]
            if sorted(done) != list(range(self.epochs)):
                problems.append(f"job {j}: epochs done {sorted(done)} (lost or repeated)")
                lost.add(j)
            starts = re.findall(r"^start restart=(\d+)", out, re.M)
            restarts[j] = r.get("restart_cnt", len(starts) - 1)
            # every run resumes exactly where the work of the runs before it ended (nothing lost, nothing redone)
            done_so_far = 0
            for line in out.splitlines():
                m = re.match(r"start restart=(\d+) resume epoch=(\d+)", line)
                if m and int(m.group(2)) != done_so_far:
                    problems.append(f"job {j}: run {m.group(1)} resumed at epoch {m.group(2)}, {done_so_far} were done")
                if re.match(r"epoch \d+ restart", line):
                    done_so_far += 1
            # every launch of its batch script printed its start (none was killed while starting); a restart without a
            # launch is a run whose launch never reached the node (slurmctld stopped as it started the job), which
            # Slurm or the controller then requeued: checked only where slurmd's log names the launches
            launched = launches[j] if launches is not None else None
            if launched is not None and launched != len(starts):
                problems.append(f"job {j}: {launched} launches of its batch script, {len(starts)} printed a start")
            if restarts[j] < len(starts) - 1 or (restarts[j] > len(starts) - 1 and launched is None):
                problems.append(f"job {j}: Slurm restart count {restarts[j]} but {len(starts)} runs")
        db = sqlite3.connect(f"file:{self.state_dir / 'state.sqlite'}?mode=ro", uri=True)
        integrity = db.execute("PRAGMA integrity_check").fetchone()[0]
        rounds = [r[0] for r in db.execute("SELECT round FROM rounds ORDER BY round")]
        requeues = [(r[0], r[1]) for r in db.execute(
            "SELECT job_id, restart_count FROM actions WHERE verb='requeue_hold' AND status IN ('intent', 'done')")]
        row = db.execute("SELECT value FROM kv WHERE key='preemptions'").fetchone()
        db.close()
        preemptions = (json.loads(row[0]).get("counts") or {}) if row else {}
        figures = {"jobs": len(self.jobs), "lost": len(lost), **{k: preemptions.get(k, 0) for k in
                                                                 ("preempted", "kept", "wasted")}}
        print(f"\nKILL9-FIGURES {json.dumps(figures)}", flush=True)
        if figures["wasted"]:
            problems.append(f"wasted preemptions (target 0): {preemptions}")
        if integrity != "ok":
            problems.append(f"state integrity: {integrity}")
        if rounds != list(range(len(rounds))):
            problems.append(f"rounds not contiguous: {rounds}")
        if len(requeues) != len(set(requeues)):
            problems.append("a requeue journalled twice at one restart count")
        held = [j for j, r in raw.items() if r.get("job_state") == "PENDING"]
        if held:
            problems.append(f"jobs left pending/held: {held}")
        kills = [line.split(" ", 2)[2].strip() for line in self.calls.read_text().splitlines()
                 if " KILL " in line] if self.calls.exists() else []
        if problems:
            # Slurm's own logs (slurmctld, slurmd) go with the kept directory: the cluster's root is removed
            shutil.copytree(self.c.paths.log, self.root / "slurm-log", dirs_exist_ok=True)
            raise AssertionError("\n".join(problems) + f"\n{keep_root(self.root)}"
                                 f"\n--- controller log tail:\n{self.log.read_text()[-3000:]}")
        return {"restarts": restarts, "rounds": len(rounds), "kills": kills, "requeues": len(requeues),
                "figures": figures}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except OSError:
        return False


def wait_job_progress(lab: Lab, timeout: float = 60) -> None:
    """Until some job has finished an epoch (the workload runs)."""
    wait_for(lambda: any(re.search(r"^epoch \d+ restart", o, re.M) for o in lab.outputs().values()),
             timeout=timeout, interval=0.5, what="a first epoch")
