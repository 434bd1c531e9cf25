"""The controller's incremental queue read (slurm/queue_read.py) against a fake Slurm that answers the compact
listing and ``squeue --json [-j ids]`` from recorded 24.11 records (what each call asked is logged)."""
from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path

import pytest

from slurm_shockwave.slurm import SlurmCLI
from slurm_shockwave.slurm.errors import SlurmError
from slurm_shockwave.slurm.queue_read import FIELDS, FULL_SHARE, REFRESH_READS, QueueReader, parse_listing

DATA = Path(__file__).parent / "data" / "slurm" / "24.11" / "squeue_mixed.json"


class FakeSlurm:
    """24.11's answers for a queue of N copies of one recorded pending job (ids 1..N)."""

    def __init__(self, n: int):
        doc = json.loads(DATA.read_text())
        self.doc = {k: v for k, v in doc.items() if k != "jobs"}
        pending = next(r for r in doc["jobs"] if "PENDING" in r["job_state"])
        self.jobs = {}
        for i in range(1, n + 1):
            rec = copy.deepcopy(pending)
            rec["job_id"] = i
            self.jobs[i] = rec
        self.calls: list[list[str]] = []
        self.listing_error = None

    def json_of(self, ids) -> str:
        return json.dumps({**self.doc, "jobs": [self.jobs[i] for i in ids]})

    def listing(self, spec: str) -> str:
        seps = {part.split(":", 1)[1] for part in spec.split(",")}
        assert len(seps) == 1
        sep = seps.pop()
        lines = []
        for i, rec in self.jobs.items():
            values = {"JobID": str(i), "State": rec["job_state"][0], "Comment": rec["comment"],
                      "AdminComment": rec["admin_comment"], "PriorityLong": str(rec["priority"]["number"])}
            lines.append("".join(values.get(f, "x") + sep for f in FIELDS))
        return "\n".join(lines) + "\n"

    def __call__(self, argv, **kwargs):
        argv = [a.rsplit("/", 1)[-1] if k == 0 else a for k, a in enumerate(argv)]
        self.calls.append(argv)
        if argv[0] == "squeue" and "-O" in argv:
            if self.listing_error:
                return subprocess.CompletedProcess(argv, 1, "", self.listing_error)
            return subprocess.CompletedProcess(argv, 0, self.listing(argv[argv.index("-O") + 1]), "")
        if argv[0] == "squeue" and "--json" in argv:
            if "-j" in argv:
                ids = [int(x) for x in argv[argv.index("-j") + 1].split(",") if int(x) in self.jobs]
                if not ids:
                    return subprocess.CompletedProcess(argv, 1, "", "slurm_load_jobs error: Invalid job id specified")
                return subprocess.CompletedProcess(argv, 0, self.json_of(ids), "")
            return subprocess.CompletedProcess(argv, 0, self.json_of(list(self.jobs)), "")
        if argv[0] == "sprio":
            return subprocess.CompletedProcess(argv, 0, "", "")
        raise AssertionError(f"unexpected call {argv}")

    def json_reads(self) -> list[list[int] | str]:
        """What each ``squeue --json`` since the last call read: 'all' or the ids asked for."""
        out = [("all" if "-j" not in c else [int(x) for x in c[c.index("-j") + 1].split(",")])
               for c in self.calls if c[0] == "squeue" and "--json" in c]
        self.calls.clear()
        return out


def reader(n: int = 100):
    fake = FakeSlurm(n)
    cli = SlurmCLI(runner=fake)
    return fake, cli


def test_a_quiet_queue_reads_only_the_refresh_turn():
    fake, cli = reader(100)
    first = cli.squeue_jobs(incremental=True)          # the version is not known yet: everything
    assert [j.job_id for j in first] == list(range(1, 101)) and fake.json_reads() == ["all"]
    assert cli.slurm_version == "24.11"
    cli.squeue_jobs(incremental=True)                  # listed once with signatures: read all again? no
    reads = fake.json_reads()
    assert reads != ["all"] and len(reads) == 1 and len(reads[0]) == 100 // REFRESH_READS
    seen: set[int] = set()
    for _ in range(REFRESH_READS):
        jobs = cli.squeue_jobs(incremental=True)
        assert [j.job_id for j in jobs] == list(range(1, 101))
        [ids] = fake.json_reads()
        seen |= set(ids)
    assert seen == set(range(1, 101))                  # every record read again within REFRESH_READS reads


def test_a_changed_job_is_read_again_and_a_gone_one_dropped():
    fake, cli = reader(100)
    cli.squeue_jobs(incremental=True)
    cli.squeue_jobs(incremental=True)
    fake.json_reads()
    fake.jobs[7]["comment"] = "shockwave epochs=9\nfake~0123456789abcdef~line"   # newline and a separator-like text
    fake.jobs[8]["priority"]["number"] = 0             # held
    del fake.jobs[9]
    jobs = {j.job_id: j for j in cli.squeue_jobs(incremental=True)}
    [ids] = fake.json_reads()
    assert {7, 8} <= set(ids) and 9 not in ids
    assert jobs[7].comment == fake.jobs[7]["comment"] and jobs[8].held and 9 not in jobs
    assert len(jobs) == 99


def test_many_changes_read_everything_once():
    fake, cli = reader(100)
    cli.squeue_jobs(incremental=True)
    cli.squeue_jobs(incremental=True)
    fake.json_reads()
    for i in range(1, int(100 * FULL_SHARE) + 11):
        fake.jobs[i]["admin_comment"] = "shockwave:held"
    jobs = cli.squeue_jobs(incremental=True)
    # every listed job's record, by id (the Slurm applies -j): one list, as one full read would be
    assert fake.json_reads() == [list(range(1, 101))] and jobs[0].admin_comment == "shockwave:held"
    assert cli.queue.last["mode"] == "full"


def test_a_long_list_is_read_in_two_calls_at_once_and_the_version_is_asked_before_the_first_read():
    fake, cli = reader(450)
    calls = []
    inner = cli.runner

    def runner(argv, **kw):
        calls.append(argv[0].rsplit("/", 1)[-1] + " " + argv[1])
        if argv[1] == "--version":
            return subprocess.CompletedProcess(argv, 0, "slurm 24.11.5\n", "")
        return inner(argv, **kw)
    cli.runner = runner
    jobs = cli.squeue_jobs(incremental=True)                 # the first read: by ids already, split in two
    assert calls[:2] == ["squeue --version", "squeue -h"] and cli.slurm_version == "24.11"
    reads = fake.json_reads()
    assert sorted(len(r) for r in reads) == [225, 225] and sorted(sum(reads, [])) == list(range(1, 451))
    assert len(jobs) == 450 and len({j.job_id for j in jobs}) == 450
    cli.squeue_jobs(incremental=True)
    assert calls.count("squeue --version") == 1                # asked once


def test_a_slurm_that_does_not_say_its_version_is_read_whole_until_an_answer_declares_it():
    fake, cli = reader(5)
    inner = cli.runner
    cli.runner = lambda argv, **kw: (subprocess.CompletedProcess(argv, 0, "something else\n", "")
                                     if argv[1] == "--version" else inner(argv, **kw))
    cli.squeue_jobs(incremental=True)
    assert fake.json_reads() == ["all"] and cli.slurm_version == "24.11"     # from the JSON's meta


def test_ids_gone_between_listing_and_read_are_not_listed():
    fake, cli = reader(3)
    cli.squeue_jobs(incremental=True)
    cli.squeue_jobs(incremental=True)
    q = cli.queue
    listed_then_gone = fake.listing
    fake.listing = lambda spec: (text := listed_then_gone(spec), fake.jobs.clear(), text)[-1]
    fake.jobs[1]["comment"] = "changed"
    jobs, _meta = q.read(lambda argv: cli.run(argv).stdout, "24.11")
    assert 1 not in {j.job_id for j in jobs} and q.last["mode"] == "changed"   # asked for, gone: not listed
    assert {j.job_id for j in jobs} <= {2, 3}                  # listed and unchanged: as last read


def test_listing_failures():
    fake, cli = reader(5)
    cli.squeue_jobs(incremental=True)
    fake.listing_error = "squeue: error: Invalid job format specification: Feature"
    assert len(cli.squeue_jobs(incremental=True)) == 5 and fake.json_reads()[-1] == "all"   # read everything
    fake.listing_error = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"
    with pytest.raises(SlurmError):                    # slurmctld down: the round's read fails, as before
        cli.squeue_jobs(incremental=True)


def test_parse_listing_rejects_what_it_did_not_ask_for():
    sep = "~00~"
    row = "".join(["12" + sep] + ["v" + sep] * (len(FIELDS) - 1))
    assert list(parse_listing(row + "\n" + row.replace("12", "\n13", 1), sep)) == [12, 13]
    assert parse_listing(row + "trailing", sep) is None
    assert parse_listing(row.replace("12", "12_3", 1), sep) is None
    assert parse_listing(sep.join(["1"] * 3) + sep, sep) is None


def test_22_05_always_reads_everything():
    fake, _cli = reader(4)
    q = QueueReader()
    run = lambda argv: fake(argv).stdout
    for _ in range(3):
        q.read(run, "22.05")
    assert fake.json_reads() == ["all"] * 3 and q.last["mode"] == "full"


def test_selected_jobs_are_asked_of_slurm_from_23():
    fake, cli = reader(10)
    cli.squeue_jobs()
    fake.json_reads()
    assert [j.job_id for j in cli.squeue_jobs(job_ids=[3, 4, 99])] == [3, 4]
    assert fake.json_reads() == [[3, 4, 99]]
    assert cli.squeue_jobs(job_ids=[99]) == []
