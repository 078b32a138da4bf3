"""The renderer's command line and files: one manifest per file, integers, no secrets."""

from __future__ import annotations

import pytest
import yaml

from tools import render


def test_cli_writes_manifests_and_pulumi_records(tmp_path, capsys):
    assert render.main(["--stack", "dev", "--out", str(tmp_path)]) == 0
    manifests = sorted((tmp_path / "manifests").glob("*.yaml"))
    records = {p.name for p in (tmp_path / "pulumi").glob("*.yaml")}
    assert len(manifests) >= 12, f"{tmp_path}/manifests: {manifests}"
    for path in manifests:
        docs = list(yaml.safe_load_all(path.read_text()))
        assert len(docs) == 1 and {"apiVersion", "kind", "metadata"} <= set(docs[0]), path.name
    assert {"stack-outputs.yaml", "kubernetes-kubernetes.yaml"} <= records, records
    for name in records:
        doc = yaml.safe_load((tmp_path / "pulumi" / name).read_text())
        assert "apiVersion" not in doc, f"pulumi/{name} would be mistaken for a manifest"
    assert "16 manifests" in capsys.readouterr().out


def test_integers_are_written_as_integers(rendered_dirs):
    path = next((rendered_dirs["dev"] / "manifests").glob("statefulset-*.yaml"))
    text = path.read_text()
    sts = yaml.safe_load(text)
    assert type(sts["spec"]["replicas"]) is int, (
        f"{path.name}: replicas {sts['spec']['replicas']!r}"
    )
    ports = sts["spec"]["template"]["spec"]["containers"][0]["ports"]
    assert all(type(p["containerPort"]) is int for p in ports), f"{path.name}: {ports}"
    floats = [v for v in _leaves(sts) if isinstance(v, float)]
    assert not floats, f"{path.name}: floats {floats}"


def _leaves(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from _leaves(v)
    else:
        yield value


def test_secrets_are_placeholders_in_files(rendered_dirs):
    texts = [p.read_text() for p in rendered_dirs["prod"].rglob("*.yaml")]
    manifests = rendered_dirs["prod"] / "manifests"
    admin = yaml.safe_load((manifests / "secret-monitoring-tfd-grafana-admin.yaml").read_text())
    assert admin["stringData"]["admin-password"] == render.SECRET_TEXT
    assert not any("Placeholder" in t for t in texts), "a secure: value was written"


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--stack", "staging"], "no stack file Pulumi.staging.yaml")],
)
def test_cli_errors_name_the_problem(tmp_path, capsys, argv, message):
    assert render.main([*argv, "--out", str(tmp_path)]) == 1
    assert message in capsys.readouterr().err


def test_cli_reports_config_errors(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(
        render, "stack_config", lambda stack, overrides=None: ({"tf-distributed:replicas": "0"}, [])
    )
    assert render.main(["--stack", "dev", "--out", str(tmp_path)]) == 1
    assert (
        "tf-distributed:replicas: must be an integer in [1, 1000]; got '0'"
        in capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("file", "text", "message"),
    [
        (
            "Pulumi.dev.yaml",
            "config:\n  tf-distributed:replicas: [1\n",
            "Pulumi.dev.yaml: not valid YAML at line 3, column 1: expected ',' or ']'",
        ),
        ("Pulumi.dev.yaml", "config:\n\tfoo: 1\n", "Pulumi.dev.yaml: not valid YAML at line 2"),
        ("Pulumi.dev.yaml", "- a list\n", "Pulumi.dev.yaml: 'config' must be a mapping"),
        ("Pulumi.yaml", "name: [x\n", "Pulumi.yaml: not valid YAML at line 2, column 1"),
    ],
)
def test_a_malformed_yaml_file_is_one_line_naming_file_and_place(
    tmp_path, capsys, monkeypatch, file, text, message
):
    real = render.stack_config
    for name in ("Pulumi.yaml", "Pulumi.dev.yaml"):
        (tmp_path / name).write_text((render.ROOT / name).read_text())
    (tmp_path / file).write_text(text)
    monkeypatch.setattr(
        render, "stack_config", lambda stack, overrides=None: real(stack, overrides, tmp_path)
    )
    assert render.main(["--stack", "dev", "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert message in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
