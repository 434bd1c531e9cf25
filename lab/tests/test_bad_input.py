"""Bad workload files: one-line errors naming file, line and field; nothing is written."""
import json
import re

import pytest
from click.testing import CliRunner

from slurm_shockwave.cli.main import cli
from shockwave_lab.data_files import experiment_paths
from shockwave_lab.workload.errors import WorkloadError
from shockwave_lab.workload.spec import read_spec
from shockwave_lab.workload.throughputs import ThroughputTable
from shockwave_lab.workload.trace import read_trace

GOOD = "ResNet-18 (batch size 32)\tpython3 main.py\tcifar\t--num_steps\t1\t1000\t1\tstatic\t1\t-1\t100\t0"
THR = experiment_paths("tacc_32gpus")["throughputs"]


def trace(tmp_path, *lines):
    p = tmp_path / "bad.trace"
    p.write_text("\n".join(lines) + "\n")
    return p


@pytest.mark.parametrize("line,field,problem", [
    (GOOD.rsplit("\t", 1)[0], "arrival_time_s", "expected 12"),
    (GOOD.replace("ResNet-18 (batch", "ResNet-99 (batch"), "job_type", "unknown model"),
    (GOOD.replace("\t1000\t1\t", "\t1000\t-2\t"), "scale_factor", "must be positive"),
    (GOOD.replace("\t1000\t1\t", "\t1000\t64\t"), "scale_factor", "cluster has 32"),
    (GOOD.replace("\t1000\t", "\tlots\t"), "total_steps", "not a number"),
    (GOOD.replace("static", "elastic"), "mode", "must be one of"),
])
def test_trace_errors_name_file_line_field(tmp_path, line, field, problem):
    p = trace(tmp_path, GOOD, line)
    with pytest.raises(WorkloadError) as e:
        read_trace(p, num_gpus=32)
    msg = str(e.value)
    assert msg.startswith(f"{p}:2: {field}: ") and problem in msg and "\n" not in msg


def test_trace_job_without_throughput_profile(tmp_path):
    p = trace(tmp_path, GOOD.replace("batch size 32", "batch size 33"))
    with pytest.raises(WorkloadError, match=r":1: job_type: no throughput"):
        read_trace(p, num_gpus=32, throughputs=ThroughputTable.load(THR))


@pytest.mark.parametrize("job,field", [
    ({"batch_size": 32, "epochs": 2}, "model"),
    ({"model": "ResNet-18", "batch_size": 32, "epochs": 2, "gpus": -1}, "gpus"),
    ({"model": "ResNet-18", "batch_size": 32, "epochs": 2, "gpus": 99}, "gpus"),
    ({"model": "ResNet-18", "batch_size": 32}, "epochs"),
    ({"model": "ResNet-18", "batch_size": 32, "epochs": 2, "colour": "red"}, "colour"),
    ({"model": "ResNet-18", "batch_size": 32, "epochs": 2, "weight": 0}, "weight"),
])
def test_spec_errors_name_file_line_field(tmp_path, job, field):
    p = tmp_path / "jobs.jsonl"
    p.write_text(json.dumps({"model": "LM", "batch_size": 10, "epochs": 1}) + "\n" + json.dumps(job) + "\n")
    with pytest.raises(WorkloadError) as e:
        read_spec(p, num_gpus=8)
    assert re.match(rf"{re.escape(str(p))}:2: {field}( = [^:]+)?: ", str(e.value)), str(e.value)


def test_toml_errors_name_the_job_header_line(tmp_path):
    p = tmp_path / "jobs.toml"
    p.write_text('[[job]]\nmodel = "LM"\nbatch_size = 10\nepochs = 1\n\n[[job]]\nmodel = "LM"\nbatch_size = "x"\n')
    with pytest.raises(WorkloadError, match=r"jobs.toml:6: batch_size = 'x': must be an integer"):
        read_spec(p)


def test_cli_bad_input_is_one_line_and_writes_nothing(tmp_path):
    p = trace(tmp_path, GOOD.replace("\t1000\t1\t", "\t1000\t64\t"))
    out = tmp_path / "out.json"
    r = CliRunner().invoke(cli, ["simulate", "--trace", str(p), "--throughputs", str(THR), "--gpus", "32",
                                 "--policy", "gandiva_fair", "-o", str(out)])
    assert r.exit_code == 2
    assert r.output.strip().count("\n") == 0 and "scale_factor" in r.output
    assert not out.exists()


def test_cli_rejects_non_positive_gpus():
    r = CliRunner().invoke(cli, ["simulate", "--gpus", "0", "--policy", "fifo"])
    assert r.exit_code == 2 and "--gpus must be positive" in r.output


def test_cli_json_output_parses(tmp_path):
    p = tmp_path / "jobs.jsonl"
    p.write_text("\n".join(json.dumps({"model": "LM", "batch_size": 10, "epochs": 2, "arrival": i * 30,
                                       "mode": "gns" if i % 2 else "static"}) for i in range(4)) + "\n")
    r = CliRunner().invoke(cli, ["simulate", "--trace", str(p), "--throughputs", str(THR), "--gpus", "2",
                                 "--policy", "max_min_fairness", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    res = data["results"]["max_min_fairness"]
    assert res["jobs"] == 4 and res["makespan"] > 0 and res["worst_rho"] > 0


def test_uninstall_refuses_while_a_controller_runs_in_one_line(tmp_path):
    """`controller uninstall` under a live controller's lock: one line, exit 2, nothing touched."""
    import fcntl
    import os
    state = tmp_path / "state"
    state.mkdir()
    (tmp_path / "events").mkdir()
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[controller]\nstate_dir = "{state}"\nevent_store = "{tmp_path / "events"}"\n'
                   '[policy]\nname = "fifo"\n')
    (state / "controller.lock").write_text("31337")
    fd = os.open(state / "controller.lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        res = CliRunner().invoke(cli, ["controller", "uninstall", "--config", str(cfg)])
    finally:
        os.close(fd)
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and "pid 31337" in lines[0] and "Traceback" not in res.output
