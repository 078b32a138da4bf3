"""submit's settings: the stack's config plus the changes, judged by the program's own rules
(tfd.settings -> infra.config.parse_config)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from pulumi import automation as auto

from tfd import settings
from tfd.errors import UsageError
from trainer import contract

ROOT = Path(__file__).resolve().parents[2]


def current(stack_file: str, **extra: auto.ConfigValue) -> dict[str, auto.ConfigValue]:
    """A stack's config as the Automation API returns it: its stack file's values, as text."""
    doc = yaml.safe_load((ROOT / f"Pulumi.{stack_file}.yaml").read_text())["config"]
    out = {k: auto.ConfigValue(value=settings.to_config_text(v)) for k, v in doc.items()}
    out.update({f"tf-distributed:{k}": v for k, v in extra.items()})
    return out


E2E = current("e2e", kubeconfig=auto.ConfigValue(value="apiVersion: v1", secret=True))


def check(changes: dict, config: dict | None = None) -> settings.StackConfig:
    raw, secret_keys = settings.merged(settings.project_values(ROOT), config or E2E, changes)
    return settings.validate(raw, secret_keys, stack="e2e", environ={})


def test_changes_win_over_the_stack_and_the_defaults() -> None:
    cfg = check(settings.parse_sets(["epochs=7", "batchSize=16", "runId=r2",
                                     'gpuTolerations=["a=b:NoSchedule"]']))  # fmt: skip
    assert (cfg.training.epochs, cfg.training.batch_size, cfg.training.run_id) == (7, 16, "r2")
    assert cfg.namespace == "tfd-e2e" and cfg.workers.replicas == 2  # from the stack file
    assert cfg.training.checkpoint_every == 200  # Pulumi.yaml's default


@pytest.mark.parametrize(
    ("sets", "line"),
    [
        (["epoch=2"], "tf-distributed:epoch: unknown key (not declared in Pulumi.yaml; did you "
                      "mean tf-distributed:epochs?); got '2'"),
        (["epochs=0"], "tf-distributed:epochs: "),
        (["runId=-bad-"], "tf-distributed:runId: "),
    ],
    ids=["unknown key", "a range", "run id"],
)  # fmt: skip
def test_the_programs_own_message_one_line_per_problem(sets: list[str], line: str) -> None:
    with pytest.raises(UsageError) as refused:
        check(settings.parse_sets(sets))
    lines = str(refused.value).splitlines()
    assert len(lines) == 1 and lines[0].startswith(line), lines


def test_every_problem_at_once() -> None:
    with pytest.raises(UsageError) as refused:
        check(settings.parse_sets(["epochs=0", "batchSize=0"]))
    assert len(str(refused.value).splitlines()) == 2, refused.value


@pytest.mark.parametrize(
    ("item", "words"),
    [("epochs", "must be key=value"), ("=3", "must be key=value"),
     ("kubeconfig=x", "a secret: set it with pulumi config set --secret kubeconfig"),
     ("apiServerCidrs=[oops", "an array must be JSON")],
)  # fmt: skip
def test_bad_set_items(item: str, words: str) -> None:
    with pytest.raises(UsageError, match=re.escape(words)):
        settings.parse_sets([item])


def test_a_secret_stays_a_secret_key_and_its_value_is_not_needed() -> None:
    raw, secret_keys = settings.merged(settings.project_values(ROOT), E2E, {})
    assert secret_keys == {"tf-distributed:kubeconfig"}
    assert check({}).cluster.kubeconfig is None  # only "set as a secret" is checked here


def test_pulumi_yaml_gives_every_stack_the_provider_rule() -> None:
    values = settings.project_values(ROOT)
    assert values["pulumi:disable-default-providers"] == '["kubernetes"]'
    assert values["tf-distributed:epochs"] == "3"


def test_new_run_ids_are_valid_and_differ() -> None:
    ids = {settings.new_run_id() for _ in range(20)}
    assert len(ids) == 20
    assert all(contract.RUN_ID.match(i) for i in ids), ids
