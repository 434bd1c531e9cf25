"""Run the demo on a local Slurm cluster (or, where Slurm cannot start, on the simulated cluster)."""
from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..events.reader import EventReader
from ..events.summary import summarize
from ..localcluster import LocalCluster, SlurmUnavailable
from ..slurmcli import FINISHED_STATES
from . import summary as S
from .workload import default_workload

REPO = Path(__file__).resolve().parent.parent.parent
TEMPLATES = REPO / "job_templates"
# the demo's Shockwave settings (short rounds: a shorter window, re-solved more often)
POLICY = {"future_rounds": 10, "reopt_rounds": 4, "k": 0.001, "lambda": 12.0}


def ensure_user(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "-M", "-s", "/bin/sh", name], check=True, capture_output=True,
                       stdin=subprocess.DEVNULL, timeout=30)
        return pwd.getpwnam(name)


class Demo:
    def __init__(self, workload=None, nodes=2, gpus_per_node=4, round_seconds=20.0, mode="authoritative",
                 step_sleep=0.04, timeout=720.0, status_every=30.0, out=print, keep=False):
        self.workload = workload or default_workload()
        self.nodes, self.gpus_per_node = nodes, gpus_per_node
        self.num_gpus = nodes * gpus_per_node
        self.round_seconds, self.mode, self.step_sleep = round_seconds, mode, step_sleep
        self.timeout, self.status_every, self.out, self.keep = timeout, status_every, out, keep
        self.root = Path(tempfile.mkdtemp(prefix="shockwave-demo-"))
        self.root.chmod(0o755)
        self.cluster = None
        self.controller = None
        self.submitted: list[tuple] = []
        self.submitted_at: dict = {}

    # ------------------------------------------------------------------ entry point
    def run(self) -> dict:
        try:
            try:
                self._start_cluster()
            except SlurmUnavailable as e:
                self.out(f"Slurm cannot be started here ({e}); running the same workload on the simulated cluster.")
                return self._simulated_only()
            self._prepare()
            self._start_controller()
            self._submit_all()
            self._watch()
            return self._summarise()
        finally:
            self._stop()

    # ------------------------------------------------------------------ steps
    def _start_cluster(self):
        if os.geteuid() != 0:
            raise SlurmUnavailable("not root")
        self.cluster = LocalCluster(self.root / "slurm", nodes=self.nodes, gpus_per_node=self.gpus_per_node,
                                    cpus_per_node=8)
        self.cluster.ensure_installed()
        self.cluster.up()
        self.out(f"local Slurm cluster up: {self.nodes} nodes x {self.gpus_per_node} fake GPUs "
                 f"(SLURM_CONF={self.cluster.env['SLURM_CONF']})")

    def _prepare(self):
        self.store = self.root / "events"
        self.store.mkdir()
        self.store.chmod(0o1777)                    # every user creates its own job directories
        for user in sorted({j.user for j in self.workload}):
            pw = ensure_user(user)
            work = self.root / "work" / user
            work.mkdir(parents=True)
            shutil.copy(TEMPLATES / "train_cnn.py", work / "train_cnn.py")
            for p in (work, work / "train_cnn.py"):
                os.chown(p, pw.pw_uid, pw.pw_gid)
            work.parent.chmod(0o755)
        self.as_users = self._users_can_run_python(sorted({j.user for j in self.workload})[0])
        if not self.as_users:
            self.out(f"note: {sys.executable} is not usable by other users (its interpreter lives in a private "
                     "directory); submitting every job as root instead of as the demo users")
        self.config = self.root / "controller.toml"
        self.config.write_text(
            f'[controller]\nround_seconds = {self.round_seconds}\nmode = "{self.mode}"\ngrace_seconds = 10\n'
            f'partition = "{self.cluster.partition}"\nstate_dir = "{self.root}/state"\n'
            f'event_store = "{self.store}"\n'
            '[policy]\nname = "shockwave"\n[policy.shockwave]\n'
            + "".join(f"{k} = {v}\n" for k, v in POLICY.items())
            + f'[slurm.env]\nSLURM_CONF = "{self.cluster.env["SLURM_CONF"]}"\n')

    def _users_can_run_python(self, user) -> bool:
        r = subprocess.run(["runuser", "-u", user, "--", sys.executable, "-c", "import slurm_shockwave, torch"],
                           env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, timeout=120,
                           stdin=subprocess.DEVNULL, cwd="/")
        return r.returncode == 0

    def _start_controller(self):
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.controller_log = open(self.root / "controller.log", "w")
        self.controller = subprocess.Popen([sys.executable, "-m", "slurm_shockwave", "controller", "run",
                                            "--config", str(self.config)], env=env, stdout=self.controller_log,
                                           stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.out(f"controller started (pid {self.controller.pid}, {self.mode}, {self.round_seconds:g} s rounds); "
                 f"log: {self.root / 'controller.log'}")

    def _submit_all(self):
        start = time.monotonic()
        for dj in sorted(self.workload, key=lambda j: j.delay_s):
            time.sleep(max(0.0, dj.delay_s - (time.monotonic() - start)))
            work = self.root / "work" / dj.user
            comment = (f"shockwave epochs={dj.epochs} bs={dj.batch_size} max_bs={dj.max_batch_size} "
                       f"samples={dj.samples}")
            prefix = ["runuser", "-u", dj.user, "--"] if self.as_users else []
            argv = [*prefix, "sbatch", "--parsable", f"--job-name={dj.name}",
                    f"--comment={comment}", f"--gres=gpu:{dj.gpus}", f"--chdir={work}",
                    f"--output={work}/{dj.name}-%j.out", "-p", self.cluster.partition,
                    str(TEMPLATES / f"{dj.template}.sbatch"), "--epochs", str(dj.epochs), "--samples",
                    str(dj.samples), "--batch-size", str(dj.batch_size), "--max-batch-size",
                    str(dj.max_batch_size), "--threads", "1", "--step-sleep", str(self.step_sleep)]
            env = {**os.environ, **self.cluster.env, "SHOCKWAVE_PYTHON": sys.executable,
                   "SHOCKWAVE_STORE": str(self.store), "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
            r = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=work, timeout=60,
                               stdin=subprocess.DEVNULL)
            if r.returncode != 0:
                raise RuntimeError(f"sbatch for {dj.name} failed: {r.stderr.strip()}")
            job_id = int(r.stdout.strip().split(";")[0])
            self.submitted.append((dj, job_id))
            self.submitted_at[job_id] = time.time()
            self.out(f"submitted {dj.name} as {dj.user}: job {job_id} ({dj.template}, {dj.gpus} GPU(s), "
                     f"{dj.epochs} epochs)")

    def _watch(self):
        ids = {j for _, j in self.submitted}
        started, last_status = time.monotonic(), 0.0
        while True:
            jobs = {j.job_id: j for j in self.cluster.cli.squeue_jobs() if j.job_id in ids}
            active = [j for j in jobs.values() if j.state not in FINISHED_STATES]
            if not active:
                break
            if time.monotonic() - started > self.timeout:
                self.out(f"timeout after {self.timeout:.0f} s with {len(active)} job(s) still active")
                break
            if self.controller.poll() is not None:
                raise RuntimeError(f"the controller exited with {self.controller.returncode}; see its log")
            if time.monotonic() - last_status >= self.status_every:
                self._show_status()
                last_status = time.monotonic()
            time.sleep(2)
        self._show_status()

    def _show_status(self):
        from ..cli.status import status_rows
        from ..controller.state import StateStore
        db = self.root / "state" / "state.sqlite"
        if not db.exists():
            return
        store = StateStore(db, readonly=True)
        try:
            summary, rows = status_rows(store)
        finally:
            store.close()
        self.out(f"--- shockwave status: round {summary['round']}, {summary['gpus_busy']}/{summary['gpus']} GPUs busy, "
                 f"{summary['gpus_planned']} planned, last solve {(summary['last_solve_seconds'] or 0):.2f} s")
        for r in rows:
            self.out(f"    job {r['job_id']:>4} {r['user']:<11} {r['gpus']} GPU {r['state']:<8} bs={r['batch_size']} "
                     f"epochs {r['epochs_done']}/{r['total_epochs']}  {r['reason']}")

    def _summarise(self) -> dict:
        ids = {j for _, j in self.submitted}
        slurm_jobs = {j.job_id: j for j in self.cluster.cli.squeue_jobs() if j.job_id in ids}
        reader = EventReader(self.store)
        progress = {j: summarize(reader.read_job(str(j)).events) for j in ids}
        rows = S.job_rows(self.submitted, slurm_jobs, progress, self.num_gpus, self.submitted_at)
        real = S.aggregate(rows)
        sim = S.simulate_same(self.submitted, rows, self.num_gpus, self.round_seconds, dict(POLICY))
        return {"where": "slurm", "jobs": rows, "real": real, "simulated": sim, "deviation": S.deviation(real, sim),
                "root": str(self.root)}

    def _simulated_only(self) -> dict:
        fake = [(dj, i) for i, dj in enumerate(self.workload)]
        rows = [{"bs_per_epoch": [], "epoch_duration_by_bs": {}, "submit": dj.delay_s} for dj in self.workload]
        sim = S.simulate_same(fake, rows, self.num_gpus, self.round_seconds, dict(POLICY),
                              step_time_guess=self.step_sleep + 0.02)
        return {"where": "simulated", "jobs": [], "real": {}, "simulated": sim, "deviation": {}, "root": str(self.root)}

    def _stop(self):
        if self.controller is not None and self.controller.poll() is None:
            self.controller.send_signal(signal.SIGTERM)
            try:
                self.controller.wait(60)
            except subprocess.TimeoutExpired:
                self.controller.kill()
                self.controller.wait(10)
        if self.controller is not None:
            self.controller_log.close()
        if self.cluster is not None:
            left = self.cluster.down()
            if left:
                self.out(f"warning: daemons still alive after down(): {left}")
        if not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)
