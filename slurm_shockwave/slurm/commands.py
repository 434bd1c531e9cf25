"""Run Slurm's command-line tools (argument lists only, never a shell string).

Job names, comments and other user-controlled strings are passed as single ``argv`` items,
so quotes, ``;``, ``$(...)`` and backticks reach Slurm verbatim and nothing is interpreted by
a shell.

Facts relied on (Slurm 22.05.8):

* ``scontrol update JobId=1,2,3 Key=Value ...`` updates a comma-separated list in one call (not for
  ``NodeList=``, refused with a list on 22.05, 24.11 and 26.05: ``scontrol_update_jobs``, one
  ``update`` line per job on scontrol's standard input, each failed line named on stderr);
  ``scontrol hold|release|requeue|requeuehold 1,2,3`` likewise. If one id in the list is
  unknown, scontrol exits 1 (``Invalid job id specified``) but still acts on the others.
* ``scancel`` takes job ids as separate arguments; ``--signal=SIG`` without ``--batch`` or
  ``--full`` does not reach the batch step. ``--batch`` signals only the batch shell,
  ``--full`` every process of the batch step and of all other steps.
* ``scontrol release`` drops an admin-set ``Priority=`` (500 -> hold -> release -> 1);
  ``SiteFactor=`` survives.
* ``scontrol requeuehold`` (even by root) leaves a *user* hold (``JobHeldUser``) that the
  job's owner can release; follow it with ``hold`` to turn it into an admin hold
  (``JobHeldAdmin``), which only root/the operator can release.
* A requeued job is PENDING with reason ``BeginTime`` until completion + ``cred_expire`` + 1 s;
  ``scontrol_update(ids, StartTime="now")`` lets it start at the next scheduler pass (<1 s).
  Slurm 24.11 kills a restart whose credential dates from the same second as the requeue
  ("Job credential revoked": the job ends FAILED, 3 of 6 tries): send ``StartTime=now`` or a
  release only >= 1.1 s after the job is seen PENDING (22.05 and 26.05: 0 of 8 failed).
* ``squeue --json`` ignores ``-j``/``-t`` filters in 22.05 (filter here); from 23.x it applies
  them and, like plain ``squeue``, hides finished jobs unless ``--states=all``, so that is
  always passed (22.05 ignores it). ``sprio`` lists only
  pending, non-held jobs, and omits a job just released from a hold until its priority is
  recomputed (``PriorityCalcPeriod``, default 5 min) or the job is updated again.
* Priority floor under ``priority/multifactor`` is 1 (a negative SiteFactor cannot push a job
  to 0); priority 0 therefore always means held.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from slurm_shockwave.slurm.argv import PARALLEL, chunks, field_arg, job_ids_of, split
from slurm_shockwave.slurm.errors import SlurmError, SlurmTimeout
from slurm_shockwave.slurm.models import SlurmJob, SlurmNode
from slurm_shockwave.slurm.parse import (
    NoNodeList,
    filter_jobs,
    parse_sbatch_parsable,
    parse_sinfo_json,
    parse_sprio_site,
    parse_squeue_meta,
)
from slurm_shockwave.slurm.queue_read import QueueReader, read_selected
from slurm_shockwave.slurm.shapes import Meta

log = logging.getLogger("slurm_shockwave.slurm")

#: seconds between first seeing a requeued job PENDING and releasing it / ``StartTime=now`` (Slurm 24.11 kills a
#: restart whose credential dates from the same second as the requeue: see the module docstring)
RESTART_GAP_SECONDS = 1.1

_SIGNAL_RE = re.compile(r"^(SIG)?[A-Z0-9+]+$|^\d+$")
_VERSION_RE = re.compile(r"^(\d{2})\.(\d{2})(?:\.\d+)?$")
#: the job an error line of scontrol's input mode is about ("... for job 5", "... for job 9: ...")
_FAILED_JOB_RE = re.compile(r"\bjob (\d+)\b", re.IGNORECASE)
SIGNAL_SCOPES = ("batch", "full", "steps")
#: commands that ``bin_dir`` applies to
# fmt: off
SLURM_COMMANDS = frozenset({"squeue", "sinfo", "sprio", "scontrol", "sbatch", "scancel", "srun", "salloc", "sacct",
                            "sstat", "sdiag", "sshare", "sattach", "sbcast"})
# fmt: on


class SlurmCLI:
    """Thin, validated wrapper around squeue/sinfo/sprio/scontrol/sbatch/scancel.

    ``env`` is laid over ``os.environ`` for every call (e.g. ``LocalCluster.env`` with
    ``SLURM_CONF``). ``timeout`` (seconds) applies per command; on expiry the command is
    killed and :class:`SlurmTimeout` raised. Any non-zero exit raises :class:`SlurmError`.
    ``runner`` replaces ``subprocess.run`` (same keyword arguments), e.g. a fake in tests.
    ``bin_dir`` (config ``[slurm] bin_dir``): run Slurm's commands from this directory (a
    site's own install, or the wrappers of ``shockwave cluster up --slurm 24.11``) instead
    of the first on ``PATH``.
    """

    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        timeout: float = 30,
        *,
        runner: Callable[..., subprocess.CompletedProcess] | None = None,
        bin_dir: str | os.PathLike | None = None,
    ):
        self.env = dict(env or {})
        self.timeout = timeout
        self.bin_dir = os.fspath(bin_dir) if bin_dir else None
        #: major.minor of the Slurm answering, as its last JSON output declared ("" = not yet known)
        self.slurm_version = ""
        #: where node lists come from: "sinfo" (22.05) or "scontrol" (>= 23.x); None = not yet known
        self.node_source: str | None = None
        self._version_asked = False
        #: the last queue read succeeded: the round's other reads (sprio, nodes) may run beside the next one
        self.answering = False
        #: stand-in for ``subprocess.run`` (tests inject a fake Slurm here)
        self.runner = runner or subprocess.run
        #: the controller's incremental queue read (``squeue_jobs(incremental=True)``)
        self.queue = QueueReader()

    @classmethod
    def from_config(cls, cfg) -> SlurmCLI:
        """The Slurm CLI of a controller config: its ``[slurm] env``, ``bin_dir`` and ``slurm_timeout``."""
        return cls(env=cfg.slurm.env, timeout=cfg.slurm_timeout, bin_dir=cfg.slurm.bin_dir)

    # ------------------------------------------------------------------ running commands
    def full_env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        return {**os.environ, **self.env, **(extra or {})}

    def run(
        self,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        input: str | None = None,
    ) -> subprocess.CompletedProcess:
        """Run ``argv`` (a list, no shell; ``input``: its standard input, else none); return the CompletedProcess
        or raise SlurmError."""
        if isinstance(argv, (str, bytes)):
            raise TypeError("argv must be a list of arguments, not a string")
        argv = [str(a) for a in argv]
        if self.bin_dir and argv and argv[0] in SLURM_COMMANDS:
            argv[0] = os.path.join(self.bin_dir, argv[0])
        limit = self.timeout if timeout is None else timeout
        try:
            stdin = {"stdin": subprocess.DEVNULL} if input is None else {"input": input}
            proc = self.runner(
                argv,
                env=self.full_env(env),
                capture_output=True,
                text=True,
                timeout=limit,
                check=False,
                errors="replace",
                **stdin,
            )
        except subprocess.TimeoutExpired as exc:
            stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
            raise SlurmTimeout.from_command(argv, None, stderr, what=f"timed out after {limit:g}s") from exc
        except OSError as exc:
            raise SlurmError.from_command(argv, None, str(exc), what="could not run") from exc
        if proc.returncode != 0:
            raise SlurmError.from_command(argv, proc.returncode, proc.stderr or proc.stdout)
        return proc

    # ------------------------------------------------------------------ reading
    def squeue_jobs(
        self,
        job_ids: Iterable[int] | None = None,
        states: Iterable[str] | None = None,
        with_site_factor: bool = False,
        incremental: bool = False,
    ) -> list[SlurmJob]:
        """Jobs from ``squeue --json`` (finished ones included while Slurm keeps them).

        ``job_ids``/``states`` filter on the client (and ``job_ids`` in Slurm too from 23.x, so only those are
        read). ``with_site_factor`` adds one ``sprio`` call, run while the queue is read, and fills
        ``site_factor`` for the pending, non-held jobs it lists. ``incremental`` (the controller's round): a compact
        listing, then JSON only for the jobs whose listing changed (:mod:`.queue_read`).
        """
        # sprio runs beside the queue read (another process) while Slurm answers; after a failed read, only after it
        # (no calls piled on a slurmctld that is away)
        with ThreadPoolExecutor(1) as pool:
            sprio = pool.submit(self.site_factors) if with_site_factor and self.answering else None
            try:
                if incremental and job_ids is None:
                    if not self.slurm_version and not self._version_asked:
                        self.slurm_version = self.client_version()
                    jobs, meta = self.queue.read(lambda argv: self.run(argv).stdout, self.slurm_version)
                elif job_ids is not None and self.slurm_version and not self.slurm_version.startswith("22."):
                    jobs, selected = read_selected(
                        lambda argv: self.run(argv).stdout, sorted({int(j) for j in job_ids})
                    )
                    meta = selected or Meta()
                else:
                    jobs, meta = parse_squeue_meta(self.run(["squeue", "--json", "--states=all"]).stdout)
            except Exception:
                self.answering = False
                raise
            self.answering = True
            factors = sprio.result() if sprio is not None else self.site_factors() if with_site_factor else None
        if meta.version:
            self.slurm_version = meta.version
        jobs = filter_jobs(jobs, job_ids, states)
        if factors is not None:
            jobs = [_with_site(j, factors.get(j.job_id)) for j in jobs]
        return jobs

    def client_version(self) -> str:
        """major.minor of the squeue this CLI runs (``squeue --version``: ``slurm 26.05.5``, ``slurm-wlm 22.05.8``),
        asked once, before any JSON answer declares it (so the controller's first queue read is already the
        version's); "" when it does not say (every JSON answer's own declaration still wins)."""
        self._version_asked = True
        try:
            words = self.run(["squeue", "--version"]).stdout.split()
        except Exception as e:  # noqa: BLE001 - not known: the queue read reads everything until an answer declares it
            log.info("`squeue --version` failed (%s): the Slurm version is read from its JSON answers", e)
            return ""
        m = _VERSION_RE.match(words[-1]) if len(words) == 2 and words[0].startswith("slurm") else None
        return f"{m.group(1)}.{m.group(2)}" if m else ""

    def sinfo_nodes(self) -> list[SlurmNode]:
        """Every node once: ``sinfo --json`` on 22.05; ``scontrol show nodes --json`` on newer
        versions, whose ``sinfo --json`` has no per-node list (learned on the first call, or from
        the version a ``squeue --json`` declared)."""
        source = self.node_source
        if source is None and self.slurm_version:
            source = "sinfo" if self.slurm_version.startswith("22.") else "scontrol"
        if source != "scontrol":
            try:
                nodes = parse_sinfo_json(self.run(["sinfo", "--json"]).stdout)
                self.node_source = "sinfo"
                return nodes
            except NoNodeList:
                pass
        nodes = parse_sinfo_json(self.run(["scontrol", "show", "nodes", "--json"]).stdout)
        self.node_source = "scontrol"
        return nodes

    def site_factors(self) -> dict[int, int]:
        """{job_id: SiteFactor} for pending non-held jobs (``sprio -h -o '%i|%S'``)."""
        return parse_sprio_site(self.run(["sprio", "-h", "-o", "%i|%S"]).stdout)

    # ------------------------------------------------------------------ changing jobs
    def scontrol_update(self, job_ids: Iterable[int | str], **fields: object) -> None:
        """``scontrol update JobId=<a,b,c> K=V ...``; e.g. ``SiteFactor=5000, Nice=10``.

        Batched: one call per :data:`.argv.BATCH_SIZE` ids. Fields are validated identifiers; values
        are single argv items (spaces and quotes are safe).
        """
        ids = job_ids_of(job_ids)
        if not fields:
            raise ValueError("scontrol_update needs at least one field")
        args = [field_arg(k, v) for k, v in fields.items()]
        self._run_all([["scontrol", "update", f"JobId={','.join(chunk)}", *args] for chunk in split(ids)])

    def scontrol_update_each(self, job_ids: Iterable[int | str], **fields: object) -> None:
        """``update JobId=<id> K=V`` for each job, for the fields scontrol refuses with an id list: ``NodeList=``
        (22.05, 24.11 and 26.05: ``Invalid job ID 2,4``, rc 1, no job updated).  Every job is tried; the first
        error is raised once all are done."""
        ids = job_ids_of(job_ids)
        failed = self.scontrol_update_jobs([(j, fields) for j in ids])
        if failed:
            first = next(j for j in ids if int(j.split("_")[0]) in failed)
            raise SlurmError(
                f"scontrol update JobId={first}: {failed[int(first.split('_')[0])]}",
                cmd=["scontrol"],
                returncode=1,
                stderr="\n".join(failed.values()),
            )

    def scontrol_update_jobs(self, updates: Sequence[tuple[int | str, Mapping[str, object]]]) -> dict[int, str]:
        """Several ``update JobId=<id> K=V ...`` (one per job, each its own fields) in one ``scontrol`` that reads
        them from its standard input.  scontrol runs every line and exits 1 if any failed, naming each failed job on
        stderr (``Invalid node name specified for job 5``, ``... for job 9: Invalid job id specified``; 22.05,
        24.11, 26.05), so one process does what took one per job.  Returns {job id: its error} for the lines that
        failed; raises SlurmError when the call failed and no failure names a job of the list (slurmctld away)."""
        lines, ids = [], set()
        for job_id, fields in updates:
            (jid,) = job_ids_of([job_id])
            if not fields:
                raise ValueError("an update needs at least one field")
            args = [field_arg(k, v) for k, v in fields.items()]
            if any(c.isspace() or c in "\"'" for a in args for c in a):
                raise ValueError(f"a value read from scontrol's input may not hold blanks or quotes: {args}")
            lines.append(" ".join(["update", f"JobId={jid}", *args]))
            ids.add(int(jid.split("_")[0]))
        if not lines:
            return {}
        try:
            self.run(["scontrol"], input="\n".join(lines) + "\n")
        except SlurmTimeout:
            raise
        except SlurmError as exc:
            failed: dict[int, str] = {}
            for line in (exc.stderr or "").splitlines():
                m = _FAILED_JOB_RE.search(line)
                if m and int(m.group(1)) in ids:
                    failed.setdefault(int(m.group(1)), line.strip())
            if not failed:
                raise
            return failed
        return {}

    def pending_ids(self, job_ids: Iterable[int | str]) -> set[int]:
        """The jobs of the list that are pending now (``squeue -t PENDING -o %A``, version-independent): read right
        before an update only a pending job may take (a running job's ``NodeList`` would resize it: slurm/nodes.py)."""
        out: set[int] = set()
        for chunk in chunks(job_ids_of(job_ids)):
            text = self.run(["squeue", "--noheader", "--states=PENDING", "--format=%A", "--jobs", ",".join(chunk)])
            out |= {int(t) for t in text.stdout.split() if t.isdigit()}
        return out

    def _scontrol_jobs(self, verb: str, job_ids: Iterable[int | str]) -> None:
        self._run_all([["scontrol", verb, ",".join(chunk)] for chunk in split(job_ids_of(job_ids))])

    def _run_all(self, argvs: list[list[str]]) -> None:
        """Run these calls (the chunks of one job list), up to PARALLEL at once; every chunk is tried, the first
        error is raised once all are done."""
        if len(argvs) <= 1:
            for argv in argvs:
                self.run(argv)
            return
        with ThreadPoolExecutor(min(PARALLEL, len(argvs))) as pool:
            futures = [pool.submit(self.run, argv) for argv in argvs]
        errors = [e for f in futures if (e := f.exception()) is not None]
        if errors:
            raise errors[0]

    def hold(self, job_ids: Iterable[int | str]) -> None:
        """Admin hold (priority 0, reason JobHeldAdmin); a running job keeps running."""
        self._scontrol_jobs("hold", job_ids)

    def release(self, job_ids: Iterable[int | str]) -> None:
        """Release a hold; an admin ``Priority=`` is reset, ``SiteFactor`` is kept."""
        self._scontrol_jobs("release", job_ids)

    def requeue(self, job_ids: Iterable[int | str], hold: bool = False) -> None:
        """``scontrol requeue`` (or ``requeuehold`` with ``hold=True``) running/finished batch jobs."""
        self._scontrol_jobs("requeuehold" if hold else "requeue", job_ids)

    def signal(self, job_ids: Iterable[int | str], sig: str | int, scope: str = "batch") -> None:
        """``scancel --signal=SIG`` to jobs.

        ``scope``: ``"batch"`` (``--batch``: only the batch shell, as ``--signal=B:``),
        ``"full"`` (``--full``: every process of the batch step and all other steps),
        ``"steps"`` (neither flag: only the non-batch steps, e.g. srun tasks).
        """
        if scope not in SIGNAL_SCOPES:
            raise ValueError(f"scope must be one of {SIGNAL_SCOPES}, not {scope!r}")
        sig_s = str(sig).upper()
        if not _SIGNAL_RE.match(sig_s):
            raise ValueError(f"invalid signal: {sig!r}")
        flags = {"batch": ["--batch"], "full": ["--full"], "steps": []}[scope]
        for chunk in chunks(job_ids_of(job_ids)):
            self.run(["scancel", f"--signal={sig_s}", *flags, *chunk])

    def cancel(self, job_ids: Iterable[int | str]) -> None:
        for chunk in chunks(job_ids_of(job_ids)):
            self.run(["scancel", *chunk])

    def reservation(self, name: str, fields: str | None = None) -> None:
        """Create the reservation `name` from now (`fields`: ``Nodes=a,b Duration=MINUTES Users=NAME``; the jobs
        running there keep running, and it may overlap any other reservation), or delete it (`fields` None; one
        already gone, ended by itself or deleted by an admin, is not an error)."""
        if fields is not None:
            argv = ["scontrol", "create", "reservation", f"ReservationName={name}", "StartTime=now", *fields.split()]
            self.run([*argv, "Flags=IGNORE_JOBS,OVERLAP"])
            return
        try:
            self.run(["scontrol", "delete", f"ReservationName={name}"])
        except SlurmError as e:
            if "requested reservation is invalid" not in str(e).lower():
                raise

    def sbatch(
        self,
        script_path: str | os.PathLike,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        script_args: Sequence[str] = (),
    ) -> int:
        """Submit ``script_path`` with sbatch options ``args``; return the job id.

        ``env`` is added to the submission environment (sbatch exports it to the job by
        default). ``script_args`` are passed to the script after its path.
        """
        if isinstance(args, (str, bytes)) or isinstance(script_args, (str, bytes)):
            raise TypeError("args/script_args must be lists of arguments, not strings")
        argv = ["sbatch", "--parsable", *map(str, args), os.fspath(script_path), *map(str, script_args)]
        return parse_sbatch_parsable(self.run(argv, env=env).stdout)


def _with_site(job: SlurmJob, factor: int | None) -> SlurmJob:
    return replace(job, site_factor=factor)
