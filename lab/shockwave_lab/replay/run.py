"""Run a trace on a real local Slurm cluster: emulated jobs, the real wrapper, event store, controller and requeue.

`Replay(...).run()` starts a `LocalCluster` (N slurmd on loopback ports, G/N fake GPUs each), creates the users,
the event store (root-owned, one directory per user, as the prolog hook makes them) and one work directory per
user, starts the controller (`shockwave controller run`, authoritative, rounds of 120 s / S; no controller for
policy "slurm": Slurm's own multifactor priority and backfill), submits every trace job at its arrival / S as
its user with `sbatch` (replay/emujob.sh: `shockwave-run` around the emulated program), waits until every job
has completed, stops the controller and every daemon it started, then measures (replay/collect.py) and
simulates the same trace with the restart cost measured here (replay/compare.py).

Anything that would make the comparison meaningless fails loudly (`ReplayError`), after the cleanup: a job that
ends in another state than COMPLETED, an epoch lost or reported twice, the controller exiting, the time limit,
a daemon left running.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import shockwave_lab
import slurm_shockwave
from shockwave_lab.localcluster import LocalCluster, SlurmUnavailable, signals
from shockwave_lab.localcluster.daemons import stop_child
from slurm_shockwave.slurm import FINISHED_STATES
from shockwave_lab.replay.collect import gather
from shockwave_lab.replay.site import account_of, controller_timing, site_priority
from shockwave_lab.replay import plan as P
from shockwave_lab.replay.errors import ReplayError

#: where the product and the lab are imported from: on the jobs' and the controller's PYTHONPATH, and bound (read-only,
#: at the same path) into a Debian root, so that a job run there imports both as the host does
SOURCES = tuple(dict.fromkeys(Path(m.__file__).resolve().parents[1] for m in (slurm_shockwave, shockwave_lab)))
PYTHONPATH = os.pathsep.join(map(str, SOURCES))
#: the folders to bind: a source inside another (the lab inside the product's checkout) comes with it
BINDS = [s for s in SOURCES if not any(o != s and s.is_relative_to(o) for o in SOURCES)]
JOB_SCRIPT = Path(__file__).resolve().parent / "emujob.sh"
TIME_LIMIT_FACTOR = 1.5
#: CPUs of a node per GPU: a job asks for its GPUs' share of a node's CPUs (Slurm's job size factor counts CPUs); an
#: elastic job its smallest count's (a resize changes its GPUs, not its CPUs: a shrunk job keeps no CPUs of a node
#: that its freed GPUs need)
CPUS_PER_GPU = 2
#: the controller's preemption cost until a job's own is measured from its events (wall seconds: what a
#: checkpoint + requeue + restart of an emulated job costs on this machine, measured by the replay)
PREEMPTION_COST_WALL_S = 1.5


class Replay:
    def __init__(self, jobs: list[P.ReplayJob], gpus: int = 32, nodes: int = 8, time_scale: float = 30.0,
                 policy: str = "shockwave", out=print, keep: bool = False, slurm: str | None = None,
                 timeout_s: float | None = None, expected_s: float | None = None, progress_every: float = 15.0,
                 grace_seconds: float = 2.0, after_jobs=None, gpu_types=(), speeds=None):
        if gpus % nodes:
            raise ValueError(f"--gpus {gpus} is not a multiple of --nodes {nodes}")
        too_big = [j.name for j in jobs if j.gpus > gpus // nodes]
        if too_big:
            raise ValueError(f"jobs {too_big[:3]} ask for more GPUs than a node has ({gpus // nodes})")
        P.check_counts(jobs, gpus // nodes)
        if gpu_types and len(gpu_types) != nodes:
            raise ValueError(f"{len(gpu_types)} GPU types for {nodes} nodes: one type per node")
        self.gpu_types, self.speeds = tuple(gpu_types), dict(speeds or {})
        self.jobs, self.gpus, self.nodes, self.scale = jobs, gpus, nodes, float(time_scale)
        self.policy, self.out, self.keep, self.slurm = policy, out, keep, slurm
        self.round_seconds = 120.0 / self.scale
        self.grace = grace_seconds
        self.after_jobs = after_jobs                # called with the replay once every job ended, cluster still up
        self.expected_s = expected_s
        self.timeout_s = timeout_s or max(600.0, 3 * (expected_s or 3600.0))
        self.progress_every = progress_every
        self.root = Path(tempfile.mkdtemp(prefix="shockwave-replay-"))
        self.root.chmod(0o755)
        self.store = self.root / "events"
        self.cluster: LocalCluster | None = None
        self.controller: subprocess.Popen | None = None
        self.submitted: dict[str, dict] = {}        # job name -> {"job_id", "submit"}
        self.ended: dict[int, object] = {}          # job id -> SlurmJob as first seen finished
        self.t0 = 0.0
        self.left_daemons: list[int] = []
        self._submit_error: Exception | None = None
        self._submit_stop = threading.Event()       # set: the submitter starts no more sbatch
        self._submit_lock = threading.Lock()
        self._sbatch_proc: subprocess.Popen | None = None

    # ------------------------------------------------------------------ entry point
    def run(self) -> dict:
        """Run and measure; returns the raw measurements (collect.measure's input plus timings).

        SIGTERM, SIGHUP and SIGINT meanwhile stop the submitter, the controller, every daemon and job, by pid,
        before the exception (Terminated, KeyboardInterrupt) leaves (localcluster/signals.py)."""
        started = time.monotonic()
        submitter = None
        with signals.orderly_teardown():
            try:
                self._start_cluster()
                self._prepare()
                if self.policy != "slurm":
                    self._start_controller()
                self.t0 = time.time()
                submitter = threading.Thread(target=self._submit_all, daemon=True)
                submitter.start()
                self._watch(submitter)
                self._stop_controller()
                raw = gather(self)
                if self.after_jobs is not None:     # e.g. replay/history.py: sacct before the teardown
                    raw["after_jobs"] = self.after_jobs(self)
            finally:
                with signals.shielded():
                    try:
                        self._stop_submitter(submitter)
                        self._stop_controller()
                    finally:
                        self._stop()
        raw["wall_s"] = time.monotonic() - started
        if self.left_daemons:
            raise ReplayError(f"daemons still alive after the cluster was stopped: {self.left_daemons}")
        return raw

    # ------------------------------------------------------------------ steps
    def _start_cluster(self) -> None:
        if os.geteuid() != 0:
            raise SlurmUnavailable("not root")
        users = sorted({j.user for j in self.jobs})
        self.cluster = LocalCluster(self.root / "slurm", nodes=self.nodes, gpus_per_node=self.gpus // self.nodes,
                                    cpus_per_node=CPUS_PER_GPU * max(1, self.gpus // self.nodes), slurm=self.slurm,
                                    binds=BINDS, rw_binds=[self.root], host_python=sys.executable,
                                    extra_conf=site_priority(self.scale),
                                    accounts={account_of(u): 1 for u in users}, users={u: account_of(u) for u in users},
                                    gpu_types=self.gpu_types)
        self.cluster.ensure_installed()
        self.cluster.up()
        self.out(f"local Slurm {self.cluster.slurm_version} cluster up: {self.nodes} nodes x "
                 f"{self.gpus // self.nodes} fake GPUs ({self.root})")

    def _prepare(self) -> None:
        from shockwave_lab.localcluster.accounting import ensure_users
        from slurm_shockwave.events.store import provision_user_dir
        users = sorted({j.user for j in self.jobs})
        pws = ensure_users(users)
        self.as_users = self.cluster.bin_dir is None and self._users_can_run_python(users[0])
        if not self.as_users:
            self.out("note: jobs are submitted as root (Slurm from a Debian root, or this python is not usable by "
                     "other users); the users stay the trace's users in every figure")
        self.store.mkdir()
        self.store.chmod(0o755)
        for u, pw in pws.items():
            uid, gid = (pw.pw_uid, pw.pw_gid) if self.as_users else (0, 0)
            provision_user_dir(self.store, uid, gid)
            work = self.workdir(u)
            work.mkdir(parents=True)
            os.chown(work, uid, gid)
            work.parent.chmod(0o755)
        for j in self.jobs:
            spec = self.workdir(j.user) / f"{j.name}.json"
            P.write_spec(spec, j, self.scale)
            spec.chmod(0o644)

    def workdir(self, user: str) -> Path:
        return self.root / "work" / user

    def _users_can_run_python(self, user: str) -> bool:
        r = signals.run_group(["runuser", "-u", user, "--", sys.executable, "-c", "import slurm_shockwave.wrapper"],
                              env={**os.environ, "PYTHONPATH": PYTHONPATH}, capture_output=True, timeout=120,
                              stdin=subprocess.DEVNULL, cwd="/")
        return r.returncode == 0

    def config_text(self) -> str:
        c = self.cluster
        poll, gap = controller_timing(self.scale)
        return (f'[controller]\nround_seconds = {self.round_seconds}\nmode = "authoritative"\n'
                f'grace_seconds = {self.grace}\npreemption_cost_s = {PREEMPTION_COST_WALL_S}\n'
                f'poll_seconds = {poll:g}\nmin_round_seconds = {gap:g}\n'
                + (f"gpu_type_speeds = {{{', '.join(f'{t} = {x:g}' for t, x in self.speeds.items())}}}\n"
                   if self.speeds else "")
                + f'partition = "{c.partition}"\nstate_dir = "{self.root}/state"\nevent_store = "{self.store}"\n'
                f'[policy]\nname = "{self.policy}"\n'
                + (f'[slurm]\nbin_dir = "{c.bin_dir}"\n' if c.bin_dir else "")
                + f'[slurm.env]\nSLURM_CONF = "{c.env["SLURM_CONF"]}"\n')

    def _start_controller(self) -> None:
        cfg = self.root / "controller.toml"
        cfg.write_text(self.config_text())
        self.controller_log = open(self.root / "controller.log", "w")
        with signals.shielded():     # started and recorded together; its own session: a terminal's ^C is ours
            self.controller = subprocess.Popen([sys.executable, "-m", "slurm_shockwave", "controller", "run",
                                                "--config", str(cfg)], env={**os.environ, "PYTHONPATH": PYTHONPATH},
                                               stdout=self.controller_log, stderr=subprocess.STDOUT,
                                               stdin=subprocess.DEVNULL, start_new_session=True)
        self.out(f"controller started (pid {self.controller.pid}, policy {self.policy}, authoritative, "
                 f"{self.round_seconds:g} s rounds = 120 s / {self.scale:g})")

    def _sbatch(self, j: P.ReplayJob) -> int:
        work = self.workdir(j.user)
        prefix = ["runuser", "-u", j.user, "--"] if self.as_users else []
        cpus = CPUS_PER_GPU * (j.gpus_range[0] if j.gpus_range else j.gpus)
        argv = [*prefix, "sbatch", "--parsable", f"--job-name={j.name}", f"--comment={j.comment(self.scale)}",
                f"--gres=gpu:{j.gpus}", "--nodes=1", "--ntasks=1", f"--cpus-per-task={cpus}",
                # no --signal=B:USR1@T: Slurm sends it up to 60 s before the time limit, which at a scaled time limit
                # of a few minutes would checkpoint and requeue jobs with work left; the controller signals itself
                f"--time={j.time_limit_min(self.scale, TIME_LIMIT_FACTOR)}",
                "--requeue" if j.requeue else "--no-requeue",    # --no-requeue: never preempted (solver/pinned.py)
                "--open-mode=append", f"--chdir={work}",
                f"--output={work}/{j.name}-%j.out", "-p", self.cluster.partition, str(JOB_SCRIPT),
                "--spec", str(work / f"{j.name}.json"), "--timeline", str(work / f"{j.name}.timeline.jsonl")]
        python = str(self.cluster.bin_dir / "host-python") if self.cluster.bin_dir else sys.executable
        env = {**os.environ, **self.cluster.env, "SHOCKWAVE_PYTHON": python, "SHOCKWAVE_STORE": str(self.store),
               "PYTHONPATH": PYTHONPATH}
        with self._submit_lock:      # the replay's teardown kills the sbatch running, and no other starts
            if self._submit_stop.is_set():
                raise ReplayError("the replay is stopping")
            self._sbatch_proc = proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE,
                                                        stderr=subprocess.PIPE, text=True, cwd=work,
                                                        stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            signals.kill_group(proc)
            raise ReplayError(f"sbatch for {j.name} did not return within 60 s") from None
        finally:
            with self._submit_lock:
                self._sbatch_proc = None
        if proc.returncode != 0:
            raise ReplayError(f"sbatch for {j.name} failed: {err.strip()}")
        return int(out.strip().split(";")[0])

    def _submit_all(self) -> None:
        try:
            for j in sorted(self.jobs, key=lambda j: (j.arrival_s, j.index)):
                if self._submit_stop.wait(max(0.0, self.t0 + j.arrival_s / self.scale - time.time())):
                    return
                at = time.time()
                self.submitted[j.name] = {"job_id": self._sbatch(j), "submit": at}
        except Exception as e:  # noqa: BLE001 - reported by the watcher, which stops the replay
            self._submit_error = e

    def _watch(self, submitter: threading.Thread) -> None:
        last = 0.0
        while True:
            if self._submit_error is not None:
                raise ReplayError(f"submitting failed: {self._submit_error}")
            ids = {s["job_id"] for s in list(self.submitted.values())}
            if ids:
                for s in self.cluster.cli.squeue_jobs():
                    if s.job_id in ids and s.state in FINISHED_STATES and s.job_id not in self.ended:
                        self.ended[s.job_id] = s
                        if s.state != "COMPLETED":
                            raise ReplayError(f"job {s.job_id} ({s.name}) ended {s.state}: see "
                                              f"{self.workdir(s.user)}/{s.name}-{s.job_id}.out")
            elapsed = time.time() - self.t0
            if not submitter.is_alive() and len(self.ended) == len(self.jobs):
                self._progress(elapsed)
                return
            if self.controller is not None and self.controller.poll() is not None:
                raise ReplayError(f"the controller exited with {self.controller.returncode}; see "
                                  f"{self.root / 'controller.log'}")
            if elapsed > self.timeout_s:
                raise ReplayError(f"time limit: {len(self.jobs) - len(self.ended)} job(s) still not done after "
                                  f"{elapsed:.0f} s")
            if time.monotonic() - last >= self.progress_every:
                self._progress(elapsed)
                last = time.monotonic()
            time.sleep(1.0)

    def current_round(self) -> int | None:
        import sqlite3
        db = self.root / "state" / "state.sqlite"
        if not db.exists():
            return None
        try:
            con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=2)
            try:
                row = con.execute("SELECT MAX(round) FROM rounds").fetchone()
            finally:
                con.close()
            return row[0]
        except sqlite3.Error:
            return None

    def _progress(self, elapsed: float) -> None:
        r = self.current_round() if self.policy != "slurm" else None
        rnd = f"round {r}" if r is not None else f"round ~{int(elapsed / self.round_seconds)} (no controller)"
        exp = f", expected end ~{self.expected_s:.0f} s" if self.expected_s else ""
        self.out(f"[replay {self.policy}] {len(self.ended)}/{len(self.jobs)} jobs done, {len(self.submitted)} "
                 f"submitted, {rnd}, elapsed {elapsed:.0f} s{exp}")

    # ------------------------------------------------------------------ stop
    def _stop_submitter(self, submitter: threading.Thread | None) -> None:
        """No sbatch after this; the one running (if any) is killed with its process group."""
        with self._submit_lock:
            self._submit_stop.set()
            proc = self._sbatch_proc
        if proc is not None and proc.returncode is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)     # reaped by the submitter's communicate()
            except (ProcessLookupError, PermissionError):
                pass
        if submitter is not None:
            submitter.join(10)

    def _stop_controller(self) -> None:
        if self.controller is not None:
            stop_child(self.controller, grace=10 if signals.stopping() else 60)
            self.controller_log.close()
            self.controller = None

    def _stop(self) -> None:
        if self.cluster is not None:
            self.left_daemons = self.cluster.down()
        if not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)
