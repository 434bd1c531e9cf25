"""Run the demo on a local Slurm cluster (or, where Slurm cannot start, on the simulated cluster)."""
from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from slurm_shockwave.events.reader import EventReader
from slurm_shockwave.events.summary import summarize
from shockwave_lab.localcluster import LocalCluster, SlurmUnavailable
from shockwave_lab.localcluster.daemons import stop_child
from slurm_shockwave.slurm import FINISHED_STATES
from shockwave_lab.demo import preemption
from shockwave_lab.demo import summary as S
from shockwave_lab.demo.workload import default_workload

REPO = Path(__file__).resolve().parent.parent.parent
TEMPLATES = REPO / "job_templates"


def ensure_user(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "-M", "-s", "/bin/sh", name], check=True, capture_output=True,
                       stdin=subprocess.DEVNULL, timeout=30)
        return pwd.getpwnam(name)


class Demo:
    def __init__(self, workload=None, nodes=2, gpus_per_node=4, round_seconds=20.0, mode="authoritative",
                 step_sleep=0.04, timeout=720.0, status_every=30.0, out=print, keep=False, compare=True,
                 slurm=None):
        self.workload = workload or default_workload()
        self.nodes, self.gpus_per_node = nodes, gpus_per_node
        self.num_gpus = nodes * gpus_per_node
        self.round_seconds, self.mode, self.step_sleep = round_seconds, mode, step_sleep
        self.timeout, self.status_every, self.out, self.keep = timeout, status_every, out, keep
        self.root = Path(tempfile.mkdtemp(prefix="shockwave-demo-"))
        self.root.chmod(0o755)
        self.cluster = None
        self.controller = None
        self.compare = compare
        self.slurm = slurm      # Slurm version (None: the host's; another runs from a Debian root, jobs as root)
        self.submitted: list[tuple] = []
        self.submitted_at: dict = {}
        self.label = "shockwave"

    # ------------------------------------------------------------------ entry point
    def run(self) -> dict:
        """The same workload on the same cluster: first plain Slurm (no controller), then Shockwave."""
        try:
            try:
                self._start_cluster()
            except SlurmUnavailable as e:
                self.out(f"Slurm cannot be started here ({e}); running the same workload on the simulated cluster.")
                return self._simulated_only()
            self._prepare()
            runs = {}
            labels = ("slurm", "shockwave") if self.compare else ("shockwave",)
            for label in labels:
                runs[label] = self._one_run(label)
            return self._summarise(runs)
        finally:
            self._stop()

    def _one_run(self, label: str) -> dict:
        self.label, self.submitted, self.submitted_at = label, [], {}
        self.store = self.root / label / "events"
        self._prepare_run(label)
        started = time.monotonic()
        if label == "shockwave":
            self.out("=== run 2: the same jobs under Shockwave (the controller holds, releases, preempts) ===")
            self._start_controller()
        else:
            self.out("=== run 1: plain Slurm (no controller: priority/multifactor + backfill as configured) ===")
        self._submit_all()
        self._watch()
        self._stop_controller()
        res = self._collect()
        self.out(f"{label} run done in {time.monotonic() - started:.0f} s: makespan "
                 f"{(res['real'].get('makespan_s') or 0):.0f} s, average JCT {(res['real'].get('avg_jct_s') or 0):.0f} s")
        return res

    # ------------------------------------------------------------------ steps
    def _start_cluster(self):
        if os.geteuid() != 0:
            raise SlurmUnavailable("not root")
        self.cluster = LocalCluster(self.root / "slurm", nodes=self.nodes, gpus_per_node=self.gpus_per_node,
                                    cpus_per_node=8, slurm=self.slurm, binds=[REPO], rw_binds=[self.root],
                                    host_python=sys.executable)
        self.cluster.ensure_installed()
        self.cluster.up()
        self.out(f"local Slurm cluster up: {self.nodes} nodes x {self.gpus_per_node} fake GPUs "
                 f"(SLURM_CONF={self.cluster.env['SLURM_CONF']})")

    def _prepare(self):
        users = sorted({j.user for j in self.workload})
        for user in users:
            ensure_user(user)
        # through a chroot (another Slurm version) only root can submit
        self.as_users = self.cluster.bin_dir is None and self._users_can_run_python(users[0])
        if not self.as_users and self.cluster.bin_dir is not None:
            self.out(f"note: Slurm {self.cluster.slurm_version} runs from a Debian root (chroot), where only root "
                     "can submit: submitting every job as root instead of as the demo users")
        elif not self.as_users:
            self.out(f"note: {sys.executable} is not usable by other users (its interpreter lives in a private "
                     "directory); submitting every job as root instead of as the demo users")

    def _prepare_run(self, label: str):
        base = self.root / label
        base.mkdir(parents=True, exist_ok=True)
        base.chmod(0o755)
        self.store.mkdir()
        self.store.chmod(0o755)                     # root-owned; root creates one directory per user
        try:
            from slurm_shockwave.events.store import provision_user_dir
        except ImportError:                         # an older store layout: a shared 1777 root
            provision_user_dir = None
            self.store.chmod(0o1777)
        for user in sorted({j.user for j in self.workload}):
            pw = pwd.getpwnam(user)
            if provision_user_dir is not None:
                provision_user_dir(self.store, pw.pw_uid if self.as_users else 0,
                                   pw.pw_gid if self.as_users else 0)
            work = base / "work" / user
            work.mkdir(parents=True)
            shutil.copy(TEMPLATES / "train_cnn.py", work / "train_cnn.py")
            for p in (work, work / "train_cnn.py"):
                os.chown(p, pw.pw_uid, pw.pw_gid)
            work.parent.chmod(0o755)
        self.config = base / "controller.toml"
        self.config.write_text(
            f'[controller]\nround_seconds = {self.round_seconds}\nmode = "{self.mode}"\ngrace_seconds = 10\n'
            f'min_run_seconds = {2 * self.round_seconds}\n'
            f'partition = "{self.cluster.partition}"\nstate_dir = "{base}/state"\n'
            f'event_store = "{self.store}"\n'
            + (f'[slurm]\nbin_dir = "{self.cluster.bin_dir}"\n' if self.cluster.bin_dir else "")
            + f'[slurm.env]\nSLURM_CONF = "{self.cluster.env["SLURM_CONF"]}"\n')

    def _users_can_run_python(self, user) -> bool:
        r = subprocess.run(["runuser", "-u", user, "--", sys.executable, "-c", "import slurm_shockwave, torch"],
                           env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, timeout=120,
                           stdin=subprocess.DEVNULL, cwd="/")
        return r.returncode == 0

    def _start_controller(self):
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.controller_log = open(self.root / self.label / "controller.log", "w")
        self.controller = subprocess.Popen([sys.executable, "-m", "slurm_shockwave", "controller", "run",
                                            "--config", str(self.config)], env=env, stdout=self.controller_log,
                                           stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.out(f"controller started (pid {self.controller.pid}, {self.mode}, {self.round_seconds:g} s rounds); "
                 f"log: {self.root / self.label / 'controller.log'}")

    def _submit_all(self):
        start = time.monotonic()
        for dj in sorted(self.workload, key=lambda j: j.delay_s):
            time.sleep(max(0.0, dj.delay_s - (time.monotonic() - start)))
            work = self.root / self.label / "work" / dj.user
            comment = (f"shockwave epochs={dj.epochs} bs={dj.batch_size} max_bs={dj.max_batch_size} "
                       f"samples={dj.samples}")
            prefix = ["runuser", "-u", dj.user, "--"] if self.as_users else []
            argv = [*prefix, "sbatch", "--parsable", f"--job-name={dj.name}",
                    f"--comment={comment}", f"--gres=gpu:{dj.gpus}", f"--chdir={work}",
                    f"--output={work}/{dj.name}-%j.out", "-p", self.cluster.partition,
                    str(TEMPLATES / f"{dj.template}.sbatch"), "--epochs", str(dj.epochs), "--samples",
                    str(dj.samples), "--batch-size", str(dj.batch_size), "--max-batch-size",
                    str(dj.max_batch_size), "--threads", "1", "--step-sleep", str(self.step_sleep)]
            python = str(self.cluster.bin_dir / "host-python") if self.cluster.bin_dir else sys.executable
            env = {**os.environ, **self.cluster.env, "SHOCKWAVE_PYTHON": python,
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
            if self.controller is not None and self.controller.poll() is not None:
                raise RuntimeError(f"the controller exited with {self.controller.returncode}; see its log")
            if time.monotonic() - last_status >= self.status_every:
                self._show_status(jobs)
                last_status = time.monotonic()
            time.sleep(2)
        self._show_status(jobs)

    def _show_status(self, jobs: dict):
        from slurm_shockwave.cli.status import status_rows
        from slurm_shockwave.journal import StateStore
        if self.label != "shockwave":
            names = {j: dj.name for dj, j in self.submitted}
            self.out("--- squeue: " + ", ".join(f"{names[j]} {s.state.lower()}" for j, s in sorted(jobs.items())))
            return
        db = self.root / self.label / "state" / "state.sqlite"
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

    def _collect(self) -> dict:
        """One run's measurements: per job rows, aggregates, per-user GPU shares while all users wait."""
        ids = {j for _, j in self.submitted}
        slurm_jobs = {j.job_id: j for j in self.cluster.cli.squeue_jobs() if j.job_id in ids}
        reader = EventReader(self.store)
        events = {j: reader.read_job(str(j)).events for j in ids}
        progress = {j: summarize(evs) for j, evs in events.items()}
        rows = S.job_rows(self.submitted, slurm_jobs, progress, self.num_gpus, self.submitted_at)
        real = S.aggregate(rows)
        real["user_share"] = S.user_shares(self.submitted, events, self.submitted_at, rows)
        if self.label == "shockwave":
            real.update(self._preemptions(progress))
        return {"jobs": rows, "real": real, "submitted": list(self.submitted)}

    def _preemptions(self, progress: dict) -> dict:
        """The real run's preemptions (kept, wasted) and its measured preemption cost (demo/preemption.py)."""
        from slurm_shockwave.controller.config import ControllerConfig
        from slurm_shockwave.journal import StateStore
        db = self.root / self.label / "state" / "state.sqlite"
        store = StateStore(db, readonly=True) if db.exists() else None
        try:
            return preemption.measured(store, progress, ControllerConfig.model_fields["preemption_cost_s"].default)
        finally:
            if store is not None:
                store.close()

    def _summarise(self, runs: dict) -> dict:
        sw = runs["shockwave"]
        if "slurm" in runs:                          # one exclusive time per job for both runs' rho
            for r in runs.values():
                S.rebase_rho(r["jobs"], runs["slurm"]["jobs"], len(self.workload), self.num_gpus)
                share = r["real"].get("user_share")
                r["real"] = {**S.aggregate(r["jobs"]), "user_share": share}
        # both simulations use the same inputs: the plain-Slurm run's measured epochs when there is one
        base = runs.get("slurm", sw)
        # the controller's gate, each restart charged the preemption cost the real run measured
        sims = {"shockwave": preemption.simulate_gated(base["submitted"], base["jobs"], self.num_gpus,
                                                       self.round_seconds, sw["real"]["preempt_cost_s"])}
        if "slurm" in runs:
            sims["slurm"] = S.simulate_fifo_backfill(base["submitted"], base["jobs"], self.num_gpus)
        out = {"where": "slurm", "jobs": sw["jobs"], "real": sw["real"], "simulated": sims["shockwave"],
               "deviation": S.deviation(sw["real"], sims["shockwave"]), "root": str(self.root),
               "runs": {k: {"real": r["real"], "jobs": r["jobs"], "simulated": sims.get(k, {})}
                        for k, r in runs.items()},
               "workload": [{"name": dj.name, "user": dj.user, "mode": dj.template, "gpus": dj.gpus,
                             "epochs": dj.epochs, "delay_s": dj.delay_s} for dj in self.workload],
               "nodes": self.nodes, "gpus_per_node": self.gpus_per_node, "round_seconds": self.round_seconds,
               "mode": self.mode}
        return out

    def _simulated_only(self) -> dict:
        fake = [(dj, i) for i, dj in enumerate(self.workload)]
        rows = [{"bs_per_epoch": [], "epoch_duration_by_bs": {}, "submit": dj.delay_s} for dj in self.workload]
        guess = self.step_sleep + 0.02
        sims = {"shockwave": S.simulate_same(fake, rows, self.num_gpus, self.round_seconds, step_time_guess=guess)}
        if self.compare:
            sims["slurm"] = S.simulate_fifo_backfill(fake, rows, self.num_gpus, step_time_guess=guess)
        return {"where": "simulated", "jobs": [], "real": {}, "simulated": sims["shockwave"], "deviation": {},
                "root": str(self.root), "runs": {k: {"real": {}, "jobs": [], "simulated": v} for k, v in sims.items()}}

    def _stop_controller(self):
        if self.controller is not None:
            stop_child(self.controller)
            self.controller_log.close()
        self.controller = None

    def _stop(self):
        self._stop_controller()
        if self.cluster is not None:
            left = self.cluster.down()
            if left:
                self.out(f"warning: daemons still alive after down(): {left}")
        if not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)
