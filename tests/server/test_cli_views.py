"""What the CLI prints about trials and campaigns (issue 62's smaller items): values that
are not results never pass for them, fold metric names are never cut, and ``watch``
times the campaign, not itself."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hpcopt.cli.views import trial_text, trials_table
from hpcopt.cli.watch import campaign_seconds, duration
from hpcopt.core.records import Campaign, CampaignState, Fold, Trial, TrialState

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


def trial(number: int, state: str, value: float | None, folds: list[Fold] | None = None) -> Trial:
    return Trial(
        id=number + 1,
        campaign_id=1,
        number=number,
        state=TrialState(state),
        attempt=1,
        params={"lr": 0.1},
        value=value,
        value_std=0.01 if value is not None else None,
        agent_id="a",
        error="",
        created_at=NOW,
        started_at=NOW,
        finished_at=None,
        folds=folds or [],
    )


def test_only_completed_trials_show_a_value_the_others_a_labelled_latest_report() -> None:
    rows = [trial(0, "COMPLETED", 0.25), trial(1, "QUEUED", 2.28), trial(2, "RUNNING", 0.64), trial(3, "FAILED", 9.0)]
    text = trials_table(rows, ["lr"]).render(200)
    header, *lines = [line.split() for line in text.splitlines() if line.strip() and not line.startswith("-")]
    assert header[:7] == ["#", "state", "attempt", "value", "±", "std", "latest"]
    by_number = {line[0]: line for line in lines}
    assert by_number["0"][3] == "0.25" and "0.25" not in by_number["0"][5:6]
    for number, value in (("1", "2.28"), ("2", "0.64"), ("3", "9")):
        assert by_number[number][3:5] == ["-", "-"] and by_number[number][5] == value, by_number[number]
    # With no such trial the column is not there at all.
    assert "latest" not in trials_table(rows[:1], ["lr"]).render(200)
    assert "not a result; latest report 2.28" in trial_text(rows[1])


def test_fold_metric_names_are_never_cut_and_an_unfinished_fold_has_no_value() -> None:
    long = "validation_top5_accuracy_on_the_held_out_calorimeter_showers"
    folds = [
        Fold(0, True, 0.5, {long: 0.91, "samples_per_second": 31000.0}, "", 1),
        Fold(1, False, 2.28, {}, "", 1),  # in progress: its first epoch's value
    ]
    text = trial_text(trial(0, "RUNNING", 0.64, folds), fit=80)
    assert long in text and "samples_per_second" in text and "0.91" in text
    assert all(len(line) <= 80 for line in text.splitlines()), text
    fold_rows = [line.split() for line in text.splitlines() if line.strip().startswith("1 ")]
    assert fold_rows and fold_rows[0][1] == "-" and "2.28" not in " ".join(fold_rows[0]), text


def test_watch_times_the_campaign_from_its_submission_not_the_watch() -> None:
    created = NOW - timedelta(minutes=9)
    done = Campaign(
        id=1,
        name="c",
        state=CampaignState.COMPLETED,
        algorithm="bo",
        metric="loss",
        direction="minimize",
        max_trials=30,
        finished=30,
        trial_counts={"COMPLETED": 30},
        best_value=0.1,
        best_trial_id=1,
        best_trial_number=0,
        created_at=created,
        finished_at=created + timedelta(seconds=526),
        spec=None,
    )
    assert campaign_seconds(done, now=NOW + timedelta(hours=5)) == 526
    assert duration(526) == "8 min 46 s" and duration(37) == "37 s" and duration(7380) == "2 h 03 min"
    running = Campaign(**{**done.__dict__, "state": CampaignState.RUNNING, "finished_at": None})
    assert campaign_seconds(running, now=NOW) == 540
