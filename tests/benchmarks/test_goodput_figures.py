"""The goodput benchmark's figures, from made-up launcher output (nothing is timed here)."""

from __future__ import annotations

import json

import pytest

from benchmarks import goodput_figures as gp
from benchmarks.goodput_figures import Failure, GoodputConfig, JobRecord


def worker(i: int, ts: float, event: str, **fields) -> tuple[float, str]:
    return ts, f"[worker-{i}] " + json.dumps({"ts": ts, "event": event, "worker": i, **fields})


def launcher(ts: float) -> tuple[float, str]:
    return ts, "[launcher] starting 2 workers, checkpoints in /tmp/x"


def job_with_one_kill() -> JobRecord:
    """Attempt 1 trains from step 0, is killed at t=20 after step 120 (checkpoint at 100);
    attempt 2 resumes from 100 and finishes at 400."""
    lines = [
        launcher(0.0),
        worker(0, 3.0, "forming"),
        worker(1, 3.1, "forming"),
        worker(0, 5.0, "start", pid=11, start_step=0),
        worker(1, 5.0, "start", pid=12, start_step=0),
        worker(0, 6.0, "first_step", step=4),
        worker(0, 15.0, "checkpoint", step=100, seconds=0.2),
        worker(0, 19.5, "progress", step=120),
        (21.0, "[launcher] worker exit codes [75, -9]"),
        (21.5, "[launcher] restarting all workers (1/3)"),
        launcher(25.0),
        worker(0, 28.0, "forming"),
        worker(0, 29.0, "resume", step=100),
        worker(0, 30.0, "start", pid=21, start_step=100),
        worker(0, 31.5, "first_step", step=104),
        worker(0, 40.0, "checkpoint", step=200, seconds=0.4),
        worker(0, 60.0, "done", step=400),
    ]
    return JobRecord(lines=lines, failures=[Failure(20.0, 1, "kill")], wall_s=62.0, exit_code=0)


def clean_job() -> JobRecord:
    lines = [
        launcher(0.0),
        worker(0, 3.0, "forming"),
        worker(0, 5.0, "start", pid=11, start_step=0),
        worker(0, 6.0, "first_step", step=4),
        worker(0, 46.0, "done", step=400),
    ]
    return JobRecord(lines=lines, wall_s=48.0, exit_code=0)


def test_a_failure_is_resolved_from_the_chiefs_events():
    job = job_with_one_kill()
    gp.resolve_failures(job)
    f = job.failures[0]
    assert (f.step_before, f.resumed_step, f.first_step_t) == (120, 100, 31.5)
    assert f.to_first_step_s == 11.5 and f.recomputed == 20
    assert f.to_restart_s == 1.5


def test_every_attempt_has_its_start_up_split():
    assert gp.attempts(job_with_one_kill()) == [
        {"import_s": 3.0, "forming_to_start_s": 2.0, "start_to_first_step_s": 1.0,
         "launch_to_first_step_s": 6.0},
        {"import_s": 3.0, "forming_to_start_s": 2.0, "start_to_first_step_s": 1.5,
         "launch_to_first_step_s": 6.5},
    ]  # fmt: skip


def test_the_figures_of_a_pair():
    cfg = GoodputConfig(checkpoint_every=100, failures=1, every_s=10)
    failing = job_with_one_kill()
    gp.resolve_failures(failing)
    f = gp.figures(cfg, 400, [(clean_job(), failing)])
    # Useful work: the undisturbed run's first step (6) to its end (46): 40 s, 0.1 s a step.
    assert f["pairs"][0]["useful_s"] == 40.0 and f["pairs"][0]["step_s"] == 0.1
    assert f["goodput_undisturbed"] == round(40 / 48, 4)
    assert f["goodput_with_failures"]["median"] == round(40 / 62, 4)
    assert f["failure_to_first_step_s"]["p50"] == 11.5
    assert f["failure_to_first_step_s"]["median_interval_95"] is None  # 1 failure: no interval
    # Logged: step 120 at t=19.5, resumed from 100; the kill at t=20 came 5 steps of 0.1 s later.
    assert f["recomputed_steps"] == {
        "mean": 25, "max": 25, "fraction_of_interval": 0.25, "logged_mean": 20
    }  # fmt: skip
    assert f["pairs"][0]["failures"][0]["recomputed_estimate"] == 25
    # Saves of 0.2 and 0.4 s on a 0.1 s step.
    assert f["save_stall_fraction_of_step"] == {"median": 3.0, "max": 4.0}
    # 0.6 s of saves over 40 s of training: 1.5% of the step time.
    assert f["save_stall_share_of_training"] == 0.015
    lines = gp.verdicts(cfg, f)
    assert lines[0].startswith("N/A"), lines  # fewer than 10 kills
    assert lines[1].startswith("MISS") and "25.0 of 100 (25.0%)" in lines[1], lines
    assert lines[2].startswith("MISS"), lines
    assert lines[3].startswith("PASS") and "1.50% of the training time" in lines[3], lines
    assert lines[4].startswith("N/A"), lines  # not the target's 2-minute schedule


def test_a_failed_job_is_no_measurement():
    failing = job_with_one_kill()
    failing.exit_code = 3
    with pytest.raises(gp.GoodputError, match="exit code 3"):
        gp.figures(GoodputConfig(), 400, [(clean_job(), failing)])


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [([1.0], 0.5, 1.0), ([1.0, 3.0], 0.5, 2.0), ([4.0, 1.0, 2.0, 3.0], 0.95, 3.85)],
)
def test_percentile(values, q, expected):
    assert gp.percentile(values, q) == pytest.approx(expected)


def test_the_median_interval_needs_six_values():
    assert gp.median_interval([1.0] * 5) is None
    assert gp.median_interval([float(i) for i in range(1, 11)]) == (2.0, 9.0)


@pytest.mark.parametrize(
    ("cfg", "step_s", "steps"),
    [
        (GoodputConfig(failures=10, every_s=120, checkpoint_every=200), 0.05, 28800),
        (GoodputConfig(failures=1, every_s=1, checkpoint_every=200), 0.05, 200),  # at least one
    ],
)
def test_a_job_is_long_enough_for_every_failure(cfg, step_s, steps):
    assert gp.planned_steps(cfg, step_s) == steps


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("failure", "reboot", "failure: must be one of kill, sigterm; got 'reboot'"),
        ("every_s", 0, "every_s: must be positive; got 0"),
        ("failures", -1, "failures: must be positive; got -1"),
    ],
)
def test_a_bad_schedule_names_the_field(field, value, message):
    with pytest.raises(ValueError, match=message):
        GoodputConfig(**{field: value})


@pytest.mark.parametrize(
    ("sync", "no_rescue"), [(False, False), (True, False), (False, True)],
    ids=["async-save", "sync-save", "no-rescue"],
)  # fmt: skip
def test_the_jobs_flags_are_the_trainers_and_choose_the_save(sync: bool, no_rescue: bool):
    from trainer.contract.flags import TrainerFlags

    cfg = GoodputConfig(sync_checkpoints=sync, no_rescue_checkpoint=no_rescue)
    flags = TrainerFlags.from_argv(cfg.trainer_args(400))
    assert flags.sync_checkpoints is sync, flags
    assert flags.no_rescue_checkpoint is no_rescue, flags
    # Epochs of one checkpoint interval each: the job's data is one interval's examples.
    assert (flags.checkpoint_every, flags.epochs) == (200, 2), flags
    assert flags.synthetic_examples == 200 * 64 * 2, flags


def test_a_job_is_whole_checkpoint_intervals():
    with pytest.raises(ValueError, match="steps: must be a multiple of 200; got 300"):
        GoodputConfig().trainer_args(300)


@pytest.mark.parametrize(
    ("failure", "expected"),
    [
        # progress at step 120 at t=19.5; killed at t=20 (5 steps of 0.1 s later)
        (Failure(20.0, 1, "kill", 120, resumed_step=100, t_before=19.5, trained_before=True), 25),
        # resumed past everything trained: nothing recomputed
        (Failure(20.0, 1, "kill", 120, resumed_step=125, t_before=19.5, trained_before=True), 0),
        # killed after `start`, before any step: the time since is start-up, not steps
        (Failure(20.0, 1, "kill", 100, resumed_step=100, t_before=15.0, trained_before=False), 0),
        (Failure(20.0, 1, "kill", None, resumed_step=100), None),
    ],
)
def test_recomputed_steps_count_the_steps_since_the_last_progress_line(failure, expected):
    assert failure.recomputed_estimate(0.1) == expected, failure
