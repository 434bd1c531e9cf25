"""The controller's Prometheus endpoint, scraped over HTTP and parsed with prometheus_client's own text parser:
cumulative values are counters (`_total`), event lines accepted are counted, `shockwave_up` and the last
completed round's timestamp let a stuck or degraded controller be alerted on, `metrics_address` is honoured."""
from __future__ import annotations

import socket
import threading
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from slurm_shockwave.controller.config import config_from_dict
from slurm_shockwave.controller.daemon import Controller
from slurm_shockwave.controller.metrics_server import ControllerMetrics
from slurm_shockwave.events.reader import EventReader
from slurm_shockwave.events.writer import EventWriter
from slurm_shockwave.slurm import SlurmCLI
from tests.slurm_fixtures import wait_for
from tests.test_controller_outage import FlakySlurm


def free_port(addr="127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


def scrape(addr: str, port: int) -> dict:
    """{sample name: {labels tuple: value}} and the family types, from a real HTTP scrape."""
    text = urllib.request.urlopen(f"http://{addr}:{port}/metrics", timeout=10).read().decode()
    samples, types = {}, {}
    for fam in text_string_to_metric_families(text):
        types[fam.name] = fam.type
        for s in fam.samples:
            samples.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return {"samples": samples, "types": types}


def make_controller(tmp_path, runner, **ctl):
    cfg = config_from_dict({"controller": {"round_seconds": 0.2, "state_dir": str(tmp_path / "state"),
                                           "event_store": str(tmp_path / "events"), "managed_by": "partition",
                                           "dry_run": True, **ctl},
                            "policy": {"name": "fifo"}}, "test")
    (tmp_path / "events").mkdir(exist_ok=True)
    metrics = ControllerMetrics()
    ctl_ = Controller(cfg, cli=SlurmCLI(runner=runner), reader=EventReader(cfg.event_store), metrics=metrics)
    return ctl_, metrics


def test_scrape_counters_event_lines_and_liveness(tmp_path):
    (tmp_path / "events").mkdir()
    w = EventWriter.for_job(tmp_path / "events", "3")           # job 3 of the recording: root, running, no comment
    for epoch in range(3):
        w.emit("epoch_end", epoch=epoch, batch_size=32, duration_s=10.0)
    with open(w.path, "ab") as f:
        f.write(b"this is not json\n")
    ctl, metrics = make_controller(tmp_path, FlakySlurm(failures=0))
    port = free_port()
    metrics.serve(port, "127.0.0.1")
    try:
        before = time.time()
        assert scrape("127.0.0.1", port)["samples"]["shockwave_up"][()] == 0      # no round completed yet
        assert ctl.run(max_rounds=2) == 2
        after = time.time()
        got = scrape("127.0.0.1", port)
    finally:
        metrics.shutdown()
        ctl.close()
    s, types = got["samples"], got["types"]
    assert s["shockwave_event_lines_accepted_total"][()] == 3
    assert sum(s["shockwave_event_lines_rejected_total"].values()) == 1
    assert s["shockwave_up"][()] == 1
    assert before <= s["shockwave_last_round_completed_timestamp_seconds"][()] <= after
    assert s["shockwave_round_length_seconds"][()] == 0.2
    assert s["shockwave_rounds_total"][(("status", "done"),)] == 2
    assert s["shockwave_enacting"][()] == 0                    # dry run enacts nothing
    # every cumulative family is a counter, exposed with _total
    for name in ("shockwave_rounds", "shockwave_event_lines_accepted", "shockwave_event_lines_rejected",
                 "shockwave_slurm_failures", "shockwave_state_write_failures", "shockwave_enact_actions",
                 "shockwave_enact_errors", "shockwave_solver_fallbacks", "shockwave_config_reloads"):
        assert types[name] == "counter", name
    for name, kind in types.items():
        if kind == "counter":
            assert all(n.endswith(("_total", "_created")) for n in s if n.startswith(name + "_")), name
    assert types["shockwave_up"] == "gauge" and types["shockwave_last_round_completed_timestamp_seconds"] == "gauge"


class ControllerThread(threading.Thread):
    """Builds and runs a Controller in its own thread (SQLite connections belong to their thread)."""

    def __init__(self, tmp_path, runner, **ctl):
        super().__init__(daemon=True)
        self.args, self.ready, self.error = (tmp_path, runner, ctl), threading.Event(), None

    def run(self):
        tmp_path, runner, ctl = self.args
        try:
            self.ctl, self.metrics = make_controller(tmp_path, runner, **ctl)
            self.port = free_port()
            self.metrics.serve(self.port, "127.0.0.1")
        except BaseException as e:      # reported by the test
            self.error = e
            self.ready.set()
            raise
        self.ready.set()
        try:
            self.ctl.run()
        finally:
            self.metrics.shutdown()
            self.ctl.close()

    def stop(self):
        self.ctl.backend.stop_event.set()
        self.join(30)
        assert not self.is_alive()


def test_up_drops_while_slurm_is_down_and_comes_back(tmp_path):
    runner = FlakySlurm(failures=10**6)
    t = ControllerThread(tmp_path, runner)
    t.start()
    assert t.ready.wait(30) and t.error is None
    try:
        down = wait_for(lambda: (lambda s: s if s["shockwave_slurm_failures_total"][()] >= 2 else None)(
            scrape("127.0.0.1", t.port)["samples"]), timeout=30, what="two failed Slurm reads")
        assert down["shockwave_up"][()] == 0
        assert down["shockwave_rounds_total"][(("status", "slurm_error"),)] >= 2
        assert down["shockwave_last_round_completed_timestamp_seconds"][()] == 0
        runner.failures = 0
        up = wait_for(lambda: (lambda s: s if s["shockwave_up"][()] == 1 else None)(
            scrape("127.0.0.1", t.port)["samples"]), timeout=30, what="recovery")
        assert up["shockwave_last_round_completed_timestamp_seconds"][()] > 0
    finally:
        t.stop()


def test_metrics_address_is_where_it_listens(tmp_path):
    metrics = ControllerMetrics()
    port = free_port("127.0.0.2")
    assert metrics.serve(port, "127.0.0.2") == port
    try:
        assert "shockwave_up" in scrape("127.0.0.2", port)["samples"]
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)
    finally:
        metrics.shutdown()


def test_the_share_each_rule_decided_and_the_moves_between_gpu_types_are_exported_per_round():
    """`explain` names the rule that placed each job; the metrics say which rules decide (issue 21)."""
    from types import SimpleNamespace

    from prometheus_client import generate_latest

    from slurm_shockwave.controller.daemon import Controller
    from slurm_shockwave.controller.metrics_server import ControllerMetrics
    from slurm_shockwave.journal.record import RoundRecord
    from solver.types import ClusterView, JobPlan, JobView, RoundDecision

    def job(i, g):
        return JobView(job_id=i, arrival_time=0.0, num_gpus=g, batch_size=32, epochs_done=0, total_epochs=5,
                       samples_per_epoch=320, steps_done=0, total_steps=50, throughput=1.0)
    view = ClusterView(now=0.0, round_index=3, round_length=120.0, num_gpus=8, jobs=(job(1, 4), job(2, 2), job(3, 2)))
    decision = RoundDecision(run=(1, 2, 3), plans={1: JobPlan(1, rule="critical_path"), 2: JobPlan(2, rule="market"),
                                                   3: JobPlan(3, rule="market")})
    loop = SimpleNamespace(last_type_moves={2: ("k80", "v100")})          # the round moved job 2 to a v100
    fake = SimpleNamespace(metrics=ControllerMetrics(), reader=None, loop=loop)
    for _ in range(2):
        Controller._round_metrics(fake, RoundRecord(view, decision, 0.01, False, "p"), busy=8)
        loop.last_type_moves = {}
    text = generate_latest(fake.metrics.registry).decode()
    assert 'shockwave_type_moves_total{from_type="k80",to_type="v100"} 1.0' in text
    assert 'shockwave_round_rule_share{rule="market"} 0.5' in text
    assert 'shockwave_round_rule_share{rule="critical_path"} 0.5' in text
    assert 'shockwave_round_rule_share{rule="guard"} 0.0' in text
    assert 'shockwave_gpu_rounds_total{rule="market"} 8.0' in text


def test_gpu_share_and_fairness_are_exported_per_account_and_user():
    """Per (account, user): GPUs planned this round, GPU-rounds since start, worst rho-hat; gone with their jobs."""
    from types import SimpleNamespace

    from prometheus_client import generate_latest

    from slurm_shockwave.controller.daemon import Controller
    from slurm_shockwave.controller.metrics_server import ControllerMetrics
    from slurm_shockwave.journal.record import RoundRecord
    from solver.types import ClusterView, JobPlan, JobView, RoundDecision

    def job(i, g, user, account):
        return JobView(job_id=i, arrival_time=0.0, num_gpus=g, batch_size=32, epochs_done=0, total_epochs=5,
                       samples_per_epoch=320, steps_done=0, total_steps=50, throughput=1.0, user=user, account=account)
    jobs = (job(1, 4, "ann", "physics"), job(2, 2, "ann", "physics"), job(3, 2, "bob", "bio"))
    plans = {1: JobPlan(1, rule="market", rho_hat=1.2), 2: JobPlan(2, rho_hat=0.9), 3: JobPlan(3, rule="market",
                                                                                               rho_hat=float("nan"))}
    fake = SimpleNamespace(metrics=ControllerMetrics(), reader=None, loop=SimpleNamespace(last_type_moves={}))
    for _ in range(2):      # ann's job 2 waits: 4 of her 6 GPUs run
        view = ClusterView(now=0.0, round_index=3, round_length=120.0, num_gpus=8, jobs=jobs)
        Controller._round_metrics(fake, RoundRecord(view, RoundDecision(run=(1, 3), plans=plans), 0.01, False, "p"),
                                  busy=6)
    text = generate_latest(fake.metrics.registry).decode()
    assert 'shockwave_user_gpus_planned{account="physics",user="ann"} 4.0' in text
    assert 'shockwave_user_gpus_planned{account="bio",user="bob"} 2.0' in text
    assert 'shockwave_user_gpu_rounds_total{account="physics",user="ann"} 8.0' in text
    assert 'shockwave_user_rho_hat_max{account="physics",user="ann"} 1.2' in text
    assert 'shockwave_user_rho_hat_max{account="bio"' not in text          # no finite rho-hat: no sample
    view = ClusterView(now=0.0, round_index=4, round_length=120.0, num_gpus=8, jobs=jobs[2:])   # ann's jobs ended
    Controller._round_metrics(fake, RoundRecord(view, RoundDecision(run=(3,), plans={3: plans[3]}), 0.01, False, "p"),
                              busy=2)
    text = generate_latest(fake.metrics.registry).decode()
    assert 'shockwave_user_gpus_planned{account="physics"' not in text
    assert 'shockwave_user_rho_hat_max{account="physics"' not in text
    assert 'shockwave_user_gpu_rounds_total{account="physics",user="ann"} 8.0' in text   # a counter keeps its total
    assert 'shockwave_user_gpus_planned{account="bio",user="bob"} 2.0' in text
