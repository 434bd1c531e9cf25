"""The admins' Grafana dashboard (docs/grafana/shockwave-dashboard.json, built by shockwave_lab/grafana.py):

(a) every metric and label in every panel's PromQL and every variable's label_values() is one the controller
    exports: read from a real ControllerMetrics served over HTTP and parsed with prometheus_client's own parser;
(b) the committed JSON is what the generator builds now (it cannot drift from the code or from the controller);
(c) it is a valid dashboard: uid, title, every panel and query on the `datasource` variable, the grid laid out
    without overlap, decodable by grafana-foundation-sdk's model; with the per-account/user row the `account` and
    `user` variables are label_values() queries of the metrics that row plots.
"""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families

from shockwave_lab import grafana
from slurm_shockwave.controller.metrics_server import ControllerMetrics

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "docs" / "grafana" / "shockwave-dashboard.json"
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}
GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
KEYWORDS = {"and", "or", "unless", "bool", "offset"}
TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|\[[^\]]*\]|\{[^}]*\}|[A-Za-z_:][A-Za-z0-9_:]*|\S')
MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*,?')


@pytest.fixture(scope="module")
def exported() -> dict[str, set[str]]:
    """{series name Prometheus stores: its label names}, scraped from the controller's own registry over HTTP."""
    metrics = ControllerMetrics()
    metrics.set_event_counts(1, {"not_json": 1})  # the event-line collector shows its labels once it has counts
    port = metrics.serve(0, "127.0.0.1")
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    finally:
        metrics.shutdown()
    # label names of the labelled metrics that have no child yet (prometheus_client keeps them in `_labelnames`)
    declared = {m._name: set(m._labelnames) for m in vars(metrics).values() if isinstance(m, MetricWrapperBase)}
    out: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        labels = set(declared.get(family.name, ())) | {k for s in family.samples for k in s.labels}
        for suffix in SUFFIXES[family.type]:
            out[family.name + suffix] = labels - {"le"} | ({"le"} if suffix == "_bucket" else set())
    assert "shockwave_up" in out and "shockwave_rounds_total" in out  # the scrape is the controller's
    return out


def promql_names(expr: str) -> tuple[dict[str, set[str]], set[str]]:
    """({metric: label names matched on it}, label names of by/without/on/ignoring/group_* clauses) of a PromQL
    expression (Grafana's $variables stand only in ranges and label values here)."""
    tokens = TOKEN.findall(expr)
    metrics: dict[str, set[str]] = {}
    grouping: set[str] = set()
    i = 0
    while i < len(tokens):
        tok, nxt = tokens[i], tokens[i + 1] if i + 1 < len(tokens) else ""
        if tok in GROUPING:
            assert nxt == "(", expr
            close = tokens.index(")", i)
            grouping.update(t for t in tokens[i + 2 : close] if t != ",")
            i = close + 1
            continue
        name = re.fullmatch(r"[A-Za-z_:][A-Za-z0-9_:]*", tok) and tok not in KEYWORDS
        if name and nxt != "(" and nxt not in GROUPING:  # a function or an aggregation is followed by ( or by
            labels = metrics.setdefault(tok, set())
            if nxt.startswith("{"):
                body = nxt[1:-1]
                assert MATCHER.sub("", body).strip() == "", f"unparsed matchers {body!r} in {expr}"
                labels.update(MATCHER.findall(body))
        i += 1
    return metrics, grouping


def queries(dashboard: dict) -> list[tuple[str, str]]:
    """(where, PromQL) of every panel target and every label_values() variable, as label_values(metric, label) ->
    `max by (label) (metric)` so that the same check covers both."""
    out = []
    for p in dashboard["panels"]:
        for t in p.get("targets", []):
            out.append((p["title"], t["expr"]))
    for v in dashboard.get("templating", {}).get("list", []):
        if v["type"] == "query":
            m = re.fullmatch(r"label_values\((.+),\s*([A-Za-z_]\w*)\)", v["query"])
            assert m, v["query"]
            out.append((f"variable {v['name']}", f"max by ({m.group(2)}) ({m.group(1)})"))
    return out


def unexported(dashboard: dict, exported: dict[str, set[str]]) -> list[str]:
    problems = []
    for where, expr in queries(dashboard):
        metrics, grouping = promql_names(expr)
        assert metrics, f"{where}: no metric in {expr}"
        for name, labels in metrics.items():
            if name not in exported:
                problems.append(f"{where}: {name} is not exported")
            elif labels - exported[name]:
                problems.append(f"{where}: {name} has no label {sorted(labels - exported[name])}")
        known = set().union(*(exported.get(n, set()) for n in metrics))
        if grouping - known:
            problems.append(f"{where}: grouping by {sorted(grouping - known)}, not a label of {sorted(metrics)}")
    return problems


def test_the_checker_reads_promql():
    metrics, grouping = promql_names(
        'sum by (rule) (increase(shockwave_gpu_rounds_total{rule=~"$r", le="1.1"}[$window])) '
        "/ scalar(sum(shockwave_x)) > 0 and on(job) time() - shockwave_y"
    )
    assert metrics == {"shockwave_gpu_rounds_total": {"rule", "le"}, "shockwave_x": set(), "shockwave_y": set()}
    assert grouping == {"rule", "job"}


def test_the_checker_catches_what_the_controller_does_not_export(exported):
    bad = {"panels": [{"title": "t", "targets": [
        {"expr": "rate(shockwave_rounds[5m])"},  # the counter is stored as shockwave_rounds_total
        {"expr": 'shockwave_preemptions_total{reason="x"}'},  # its label is `outcome`
        {"expr": "sum by (user) (shockwave_gpus_used)"},
    ]}]}  # fmt: skip
    assert unexported(bad, exported) == [
        "t: shockwave_rounds is not exported",
        "t: shockwave_preemptions_total has no label ['reason']",
        "t: grouping by ['user'], not a label of ['shockwave_gpus_used']",
    ]


def test_every_metric_the_dashboard_plots_is_one_the_controller_exports(exported):
    committed = json.loads(COMMITTED.read_text())
    assert unexported(committed, exported) == []
    assert len(queries(committed)) >= 30


def test_the_per_account_and_user_row_plots_exactly_the_metrics_still_missing(exported):
    """The row the controller's per-account/user metrics would fill: what it needs and the controller lacks is
    `missing_owner_metrics()` (docs/grafana/README.md proposes them), no other metric."""
    missing = grafana.missing_owner_metrics()
    assert missing == [m for m in grafana.OWNER_METRICS if m not in exported]
    full = grafana.build_dashboard(owners=True)
    absent = {p.split(": ")[1].split(" ")[0] for p in unexported(full, exported) if p.endswith(" is not exported")}
    assert absent == set(missing)
    # with those metrics as proposed (labels account and user) nothing else is missing
    assert unexported(full, {**exported, **{m: {"account", "user"} for m in missing}}) == []
    committed = json.loads(COMMITTED.read_text())
    names = [v["name"] for v in committed["templating"]["list"]]
    assert ("account" in names and "user" in names) == (not missing)
    assert any(p["title"] == "Accounts and users" for p in committed["panels"]) == (not missing)


def test_the_committed_json_is_what_the_generator_builds():
    assert COMMITTED.read_text() == grafana.dashboard_json(), "regenerate: shockwave grafana -o " + str(COMMITTED)


@pytest.mark.parametrize("owners", [False, True])
def test_it_is_a_valid_dashboard(owners):
    from grafana_foundation_sdk.cog.plugins import register_default_plugins
    from grafana_foundation_sdk.models.dashboard import Dashboard

    d = grafana.build_dashboard(owners=owners)
    assert d["uid"] == grafana.UID and d["title"] == grafana.TITLE and d["schemaVersion"] >= 39
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert variables["window"]["type"] == "interval" and variables["window"]["current"]["value"] in grafana.WINDOWS
    ids, cells = set(), set()
    for p in d["panels"]:
        assert p["id"] not in ids and p["title"], p
        ids.add(p["id"])
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        cell = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cell & cells, f"{p['title']} overlaps another panel"
        cells |= cell
        if p["type"] == "row":
            continue
        assert p["type"] in ("timeseries", "stat", "bargauge") and p["description"], p["title"]
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"] and all(t["datasource"] == p["datasource"] for t in p["targets"]), p["title"]
        assert len({t["refId"] for t in p["targets"]}) == len(p["targets"]), p["title"]
        assert all("[$window]" in t["expr"] or "[" not in t["expr"] for t in p["targets"]), p["title"]
    if owners:
        for name, label in (("account", "account"), ("user", "user")):
            v = variables[name]
            assert v["type"] == "query" and v["datasource"]["uid"] == "${datasource}" and v["includeAll"]
            assert v["allValue"] == ".*" and v["multi"]
            assert re.fullmatch(rf"label_values\({grafana.OWNER_METRICS[0]}(\{{.*\}})?, {label}\)", v["query"])
        targets = [(p, " ".join(t["expr"] for t in p.get("targets", []))) for p in d["panels"]]
        row = [p for p, exprs in targets if "shockwave_user_" in exprs]
        assert len(row) == 4
        assert all('account=~"$account", user=~"$user"' in p["targets"][0]["expr"] for p in row)
    else:
        assert not {"account", "user"} & set(variables)
    # grafana-foundation-sdk's own model reads it back: the same panels, queries and layout
    register_default_plugins()
    back = json.loads(json.dumps(Dashboard.from_json(d).to_json(), default=lambda o: o.to_json()))

    def shape(x: dict) -> list:
        return [(p["id"], p["type"], p["title"], p["gridPos"], [t["expr"] for t in p.get("targets", [])])
                for p in x["panels"]]  # fmt: skip

    assert shape(back) == shape(d) and back["templating"] == d["templating"]
