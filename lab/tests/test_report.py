"""`shockwave report`: HTML + PNG figures from real `shockwave simulate -o` results on a tiny workload."""
import base64
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_shockwave.cli.main import cli
from shockwave_lab.data_files import THROUGHPUTS
from shockwave_lab.report.load import ReportError, load_results, ordered
from shockwave_lab.report.plots import FIGURES, _steps, time_unit

THR = THROUGHPUTS / "tacc_throughputs.json"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
IMG = '<img src="data:image/png;base64,'

SPEC = [
    {"id": 0, "arrival": 0, "model": "ResNet-18", "batch_size": 32, "epochs": 2},
    {"id": 1, "arrival": 0, "model": "ResNet-50", "batch_size": 32, "epochs": 1, "gpus": 2},
    {"id": 2, "arrival": 60, "model": "Transformer", "batch_size": 32, "epochs": 3},
    {"id": 3, "arrival": 120, "model": "LM", "batch_size": 20, "epochs": 1},
    {"id": 4, "arrival": 300, "model": "Recommendation", "batch_size": 1024, "epochs": 2},
    {"id": 5, "arrival": 400, "model": "ResNet-18", "batch_size": 64, "epochs": 1, "gpus": 2},
]
METRICS = ("makespan", "avg_jct", "worst_rho", "unfair_fraction", "unfair_fraction_1_1", "utilization", "jobs")


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    """Results files of two baselines simulated (by the real CLI) on a 6-job, 4-GPU workload."""
    d = tmp_path_factory.mktemp("sim")
    spec = d / "spec.jsonl"
    spec.write_text("".join(json.dumps(j) + "\n" for j in SPEC))
    out = {}
    for policy in ("gandiva_fair", "fifo"):
        path = d / f"{policy}.json"
        r = CliRunner().invoke(cli, ["simulate", "--trace", str(spec), "--throughputs", str(THR), "--gpus", "4",
                                     "--policy", policy, "--no-progress", "-o", str(path)])
        assert r.exit_code == 0, r.output
        out[policy] = path
    return out


def _report(*args):
    return CliRunner().invoke(cli, ["report", *map(str, args)])


def test_html_and_pngs(sim, tmp_path):
    html = tmp_path / "out" / "report.html"
    r = _report(sim["gandiva_fair"], sim["fifo"], "-o", html)
    assert r.exit_code == 0, r.output
    page = html.read_text()
    assert "gandiva_fair" in page and "fifo" in page
    assert page.count(IMG) == len(FIGURES) == 3
    # self-contained: no scripts, no remote assets
    assert "<script" not in page.lower()
    assert not re.search(r'(src|href)="(https?:)?//', page)
    embedded = [base64.b64decode(b) for b in re.findall(r'data:image/png;base64,([A-Za-z0-9+/=]+)"', page)]
    for name in FIGURES:
        png = html.parent / f"report_{name}.png"
        data = png.read_bytes()
        assert data.startswith(PNG_MAGIC)
        assert len(data) > 10_000, (name, len(data))
        assert data in embedded
    # the table: one row per simulated policy, no reference rows for a non-reference workload
    assert page.count('<tr class="ours">') == 2
    assert '<tr class="ref">' not in page
    assert "Wrote" in r.output and str(html) in r.output


def test_json_summary_and_png_dir(sim, tmp_path):
    html, pngs = tmp_path / "r.html", tmp_path / "figs"
    r = _report(sim["fifo"], sim["gandiva_fair"], "-o", html, "--png-dir", pngs, "--json")
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert summary["html"] == str(html) and html.exists()
    assert summary["policies"] == ["gandiva_fair", "fifo"]  # canonical order, not argument order
    assert set(summary["pngs"]) == set(FIGURES)
    for name, path in summary["pngs"].items():
        assert Path(path) == pngs / f"r_{name}.png"
        assert Path(path).read_bytes().startswith(PNG_MAGIC)
    assert not list(tmp_path.glob("r_*.png"))  # not next to the HTML when --png-dir is given
    assert summary["warnings"] == []
    rows = {row["policy"]: row for row in summary["metrics"]}
    assert [row["kind"] for row in summary["metrics"]] == ["ours", "ours"]
    for policy in ("gandiva_fair", "fifo"):
        expected = json.loads(sim[policy].read_text())["results"][policy]
        for key in METRICS:
            assert rows[policy][key] == expected[key], (policy, key)
        assert rows[policy]["source"] == str(sim[policy])


def test_later_file_wins_with_warning_and_reference_rows(sim, tmp_path):
    data = json.loads(sim["gandiva_fair"].read_text())
    data["results"]["gandiva_fair"]["makespan"] = 12345.0
    ref = {"makespan": 1000.0, "avg_jct": 500.0, "worst_rho": 1.5, "unfair_fraction": 20.0, "utilization": 0.5}
    data["reference"] = {"gandiva_fair": ref, "shockwave": {**ref, "makespan": 900.0}}
    later = tmp_path / "later.json"
    later.write_text(json.dumps(data))
    r = _report(sim["gandiva_fair"], sim["fifo"], later, "-o", tmp_path / "r.html", "--json")
    assert r.exit_code == 0, r.output
    assert "Warning: policy gandiva_fair is in both" in r.stderr
    summary = json.loads(r.stdout)
    assert summary["sources"]["gandiva_fair"] == str(later)
    rows = [(row["policy"], row["kind"], row["makespan"]) for row in summary["metrics"]]
    assert rows == [("gandiva_fair", "ours", 12345.0), ("gandiva_fair", "reference", 1000.0),
                    ("fifo", "ours", json.loads(sim["fifo"].read_text())["results"]["fifo"]["makespan"]),
                    ("shockwave", "reference", 900.0)]
    page = (tmp_path / "r.html").read_text()
    assert page.count('<tr class="ref">') == 2 and "reference only (not simulated)" in page


@pytest.mark.parametrize("content, message", [
    (None, "no such file"),
    ("this is not json", "not JSON"),
    ('{"workload": "x", "gpus": 4}', 'no "results"'),
    ('[1, 2]', 'no "results"'),
    ('{"results": {}}', "empty"),
    ('{"results": {"fifo": {"avg_jct": 1, "worst_rho": 1, "unfair_fraction": 0}}}', "fifo.makespan"),
])
def test_bad_input_one_line_error_nothing_written(sim, tmp_path, content, message):
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_text(content)
    out = tmp_path / "out" / "report.html"
    r = _report(sim["fifo"], bad, "-o", out)
    assert r.exit_code != 0
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and message in lines[0], r.output
    assert str(bad) in lines[0]
    assert "Traceback" not in r.output
    assert not (tmp_path / "out").exists()
    assert not list(tmp_path.rglob("*.png")) and not list(tmp_path.rglob("*.html"))


def test_output_is_a_directory(sim, tmp_path):
    r = _report(sim["fifo"], "-o", tmp_path)
    assert r.exit_code != 0 and len(r.output.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())


def test_load_and_helpers(sim):
    m = load_results([sim["fifo"], sim["gandiva_fair"]])
    assert m.policies == ["gandiva_fair", "fifo"] and m.warnings == []
    assert m.gpus_of("fifo") == 4
    assert ordered(["custom", "fifo", "max_sum_throughput_perf", "shockwave"]) == [
        "shockwave", "max_sum_throughput_perf", "fifo", "custom"]
    with pytest.raises(ReportError):
        load_results([])
    # utilisation steps: sorted, gaps drawn as idle, fraction of the cluster
    edges, values = _steps([[120, 240, 2], [0, 120, 4], [360, 480, 1]], 4)
    assert edges == [0, 120, 240, 360, 480] and values == [1.0, 0.5, 0.0, 0.25]
    assert time_unit(9 * 3600) == (1 / 3600, "h") and time_unit(1200)[1] == "min" and time_unit(60)[1] == "s"
