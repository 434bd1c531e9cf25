"""The one file loader (slurm_shockwave/loader.py) and the one wording of pydantic errors (validation.py):
every unreadable file is one line naming it, every invalid value one line naming the key and the value."""
import math

import pytest
from click.testing import CliRunner
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from slurm_shockwave.cli.main import cli
from slurm_shockwave.controller.config import ConfigError, load_config
from slurm_shockwave.loader import InputFileError, load, read_text
from slurm_shockwave.validation import describe
from shockwave_lab.workload.spec import read_spec
from shockwave_lab.workload.throughputs import ThroughputTable


@pytest.mark.parametrize("name,content,needle", [
    ("none.toml", None, "none.toml: file not found"),
    ("d.json", "DIR", "d.json: is a directory, not a file"),
    ("b.toml", b"round = 1\nx = ]\n", "b.toml:2: bad TOML: Invalid value (column 5)"),
    ("b.json", b'{\n "a": 1,\n}', "b.json:3: bad JSON: "),
    ("b.jsonl", b'{"a": 1}\n\n{"a": \n', "b.jsonl:3: bad JSON: "),
    ("u.toml", b"x = '\xff\xfe'\n", "u.toml: not UTF-8 text (byte 0xff at offset 5)"),
])
def test_unreadable_files_are_one_line_naming_the_file(tmp_path, name, content, needle):
    p = tmp_path / name
    if content == "DIR":
        p.mkdir()
    elif content is not None:
        p.write_bytes(content)
    with pytest.raises(InputFileError) as e:
        load(p)
    assert str(e.value) == f"{tmp_path}/{needle}" or str(e.value).startswith(f"{tmp_path}/{needle}")
    assert "\n" not in str(e.value)
    if "bad " in needle:
        return
    for reader in (load_config, read_spec, ThroughputTable.load):            # every user says the same
        with pytest.raises((InputFileError, ConfigError)) as e2:
            reader(p)
        assert needle in str(e2.value) and "\n" not in str(e2.value)


def test_formats_by_suffix_and_by_request(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"a": 1}\n\n[2]\n')
    assert load(tmp_path / "a.jsonl") == [{"a": 1}, [2]]
    (tmp_path / "conf").write_text("a = 1\n")
    assert load(tmp_path / "conf", "toml") == {"a": 1}
    assert read_text(tmp_path / "conf") == "a = 1\n"
    (tmp_path / "a.yaml").write_text("a: 1\n")
    try:
        import yaml  # noqa: F401
    except ImportError:
        with pytest.raises(InputFileError, match="PyYAML"):
            load(tmp_path / "a.yaml")
    else:
        assert load(tmp_path / "a.yaml") == {"a": 1}


class Model(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)
    rate: float = Field(1.0, gt=0, le=10)
    name: str = Field("x", min_length=1)
    needed: int


def test_one_line_per_problem_naming_key_and_value():
    with pytest.raises(ValidationError) as e:
        Model.model_validate({"rate": math.inf, "name": "", "colour": "red", "nested": {"a": 1}})
    assert describe(e.value, prefix=("model",)) == [
        "model.rate = inf: must be a finite number (not nan or inf)", "model.name = '': must not be empty",
        "model.needed: missing", "model.colour: unknown setting", "model.nested: unknown setting"]
    with pytest.raises(ValidationError) as e:
        Model.model_validate({"rate": "2", "needed": 2.5})
    assert describe(e.value) == ["rate = '2': must be a number", "needed = 2.5: must be an integer"]


def test_simulate_config_errors_are_one_line(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text("[shockwave]\nk = -1\nfuture_rounds = 0\n")
    res = CliRunner().invoke(cli, ["simulate", "--policy", "shockwave", "--config", str(p), "--gpus", "2"])
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output
    assert "future_rounds = 0: must be >= 1" in res.output and "k = -1: must be >= 0" in res.output
    res = CliRunner().invoke(cli, ["simulate", "--policy", "shockwave", "--config", str(tmp_path / "x.json")])
    assert res.exit_code == 2 and "x.json: file not found" in res.output
