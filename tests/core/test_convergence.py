"""The converged protocol's stopping rule (fairseq_heads/convergence.py) on hand-made validation
sequences, and the task hook that applies it inside fairseq-train (tasks/head_hooks.py)."""
import json
import sys
import types

import pytest
import torch

from fairseq_heads.convergence import (
    Validation,
    converged_at,
    phase_summary,
    read_validations,
    unchanged,
    validation_line,
)


def sequence(pairs, start=100, step=100):
    """Validations every `step` updates from (loss, open heads) pairs."""
    return [Validation(start + i * step, loss, heads) for i, (loss, heads) in enumerate(pairs)]


def test_plateau_is_found_exactly_after_n_unchanged_validations_not_before():
    records = sequence([(5.0, 48), (4.0, 30), (3.9, 20), (3.9, 20), (3.901, 20), (3.9005, 20), (3.9, 20)])
    # changes: 4.0 vs 5.0, 3.9 vs 4.0 (2.5%), then unchanged at indices 3, 4, 5, 6
    assert converged_at(records, 3) == 5
    assert converged_at(records[:5], 3) is None  # one validation short
    assert converged_at(records, 1) == 3
    assert converged_at(records, 4) == 6
    assert converged_at(records, 5) is None


def test_a_change_of_open_heads_restarts_the_count():
    flat = [(3.0, 20), (3.0, 20), (3.0, 19), (3.0, 19), (3.0, 19)]
    assert converged_at(sequence(flat), 2) == 4  # not 2: a head closed at index 2
    assert converged_at(sequence(flat[:4]), 2) is None
    # heads flat but the loss still falling by more than 0.5% per validation: no plateau
    falling = [(3.0 * 0.99 ** i, 20) for i in range(8)]
    assert converged_at(sequence(falling), 2) is None
    assert converged_at(sequence(falling), 2, loss_tolerance=0.02) == 2


def test_tolerance_is_relative_and_strict():
    assert unchanged(Validation(1, 4.0, 10), Validation(2, 4.0199, 10), 0.005)
    # exactly the tolerance (1/128 of 4.0, no rounding in binary) is a change
    assert not unchanged(Validation(1, 4.0, 10), Validation(2, 4.03125, 10), 1 / 128)
    assert not unchanged(Validation(1, 4.0, 10), Validation(2, 3.97, 10), 0.005)  # falling counts too
    assert unchanged(Validation(1, 2.0, None), Validation(2, 2.0, None), 0.0)  # no gates, no change


def test_bad_rule_settings_are_refused():
    with pytest.raises(ValueError, match="at least 1"):
        converged_at([], 0)
    with pytest.raises(ValueError, match="tolerance"):
        converged_at([], 2, loss_tolerance=-0.1)


def test_phase_summary_and_trace_file(tmp_path):
    records = sequence([(5.0, 48), (4.0, 30), (3.9, 20), (3.9, 20), (3.95, 20)])
    path = tmp_path / "validations.jsonl"
    path.write_text("".join(validation_line(r) for r in records) + '{"update": 60')  # cut by a kill
    assert read_validations(str(path)) == records
    summary = phase_summary(records, validations=1)
    assert summary["updates"] == 500 and summary["validations"] == 5
    assert summary["best_update"] == 400 and summary["best_loss"] == 3.9  # the last of equals
    assert summary["converged_at"] == 400 and summary["open_heads"] == 20
    assert "converged_at" not in phase_summary(records)
    assert phase_summary(records, validations=3)["converged_at"] is None


class _Gate:
    def __init__(self, opened):
        self.opened = torch.tensor(opened)

    def is_open(self):
        return self.opened


def _hooked_task(cfg):
    """A HeadHooksMixin on a stand-in task whose own train_step does nothing, with options cfg."""
    from fairseq_heads.tasks import head_hooks

    class Base:
        def train_step(self, *args, **kwargs):
            return "trained"

    class Task(head_hooks.HeadHooksMixin, Base):
        def __init__(self, cfg):
            self.cfg = cfg
            self._init_head_hooks()

    return Task(cfg)


def _task(tmp_path, monkeypatch, fairseq_says=False, **options):
    """A HeadHooksMixin on a stand-in task, its model's open heads set by the test."""
    from fairseq_heads.tasks import head_hooks

    fake_train = types.ModuleType("fairseq_cli.train")
    fake_train.should_stop_early = lambda cfg, valid_loss: fairseq_says  # fairseq's --patience
    fake_train.validate_and_save = None
    monkeypatch.setitem(sys.modules, "fairseq_cli.train", fake_train)
    cfg = types.SimpleNamespace(head_mask=None, gate_trace=None, gate_trace_interval=50,
                                validation_trace=str(tmp_path / "validations.jsonl"),
                                stop_on_plateau=2, plateau_loss_tolerance=0.005)
    for name, value in options.items():
        setattr(cfg, name, value)
    heads = {"open": [1, 1, 1, 1]}
    monkeypatch.setattr(head_hooks, "iter_gates", lambda model: [("enc-self", 0, _Gate(heads["open"]))])
    return _hooked_task(cfg), fake_train, heads


def test_the_hook_stops_fairseq_train_at_the_plateau_and_records_each_validation(tmp_path, monkeypatch):
    task, fairseq_train, heads = _task(tmp_path, monkeypatch)
    task.train_step(None, None, None, None, 0)
    answers = []
    for update, loss, opened in [(5, 4.0, [1, 1, 1, 1]), (10, 3.5, [1, 0, 1, 1]), (15, 3.5, [1, 0, 1, 1]),
                                 (20, 3.501, [1, 0, 1, 1]), (25, 3.5, [1, 0, 1, 1])]:
        heads["open"] = opened
        task.post_validate(None, {"loss": loss, "num_updates": update}, None)
        answers.append(fairseq_train.should_stop_early(None, loss))
    assert answers == [False, False, False, True, True]
    assert task.converged == Validation(20, 3.501, 3, None)
    lines = [json.loads(line) for line in (tmp_path / "validations.jsonl").read_text().splitlines()]
    assert [(r["update"], r["open_heads"]) for r in lines] == [(5, 4), (10, 3), (15, 3), (20, 3), (25, 3)]
    assert fairseq_train.should_stop_early(None, None) is False  # no validation, nothing to stop


def test_a_resumed_run_remembers_the_validations_up_to_its_checkpoint(tmp_path, monkeypatch):
    trace = tmp_path / "validations.jsonl"
    trace.write_text("".join(validation_line(r) for r in sequence(
        [(3.5, 4), (3.5, 4), (3.0, 4)], start=5, step=5)))  # updates 5, 10, 15; checkpoint at 10
    task, fairseq_train, _ = _task(tmp_path, monkeypatch)
    task.train_step(None, None, None, None, 10)
    assert [r.update for r in read_validations(str(trace))] == [5, 10]  # 15 is validated again
    task.post_validate(None, {"loss": 3.5, "num_updates": 15}, None)
    assert fairseq_train.should_stop_early(None, 3.5)  # 5, 10, 15 unchanged: 2 in a row


def test_fairseq_patience_still_stops_training_before_any_plateau(tmp_path, monkeypatch):
    task, fairseq_train, _ = _task(tmp_path, monkeypatch, fairseq_says=True)
    task.post_validate(None, {"loss": 4.0, "num_updates": 5}, None)
    assert task.converged is None and fairseq_train.should_stop_early(None, 4.0)



def _fairseq_patience(tmp_path, monkeypatch, records, resumed_at, patience):
    """fairseq's own --patience rule (fairseq_cli.train.should_stop_early, which keeps its count
    as attributes of the module's function, in the process only) under the task hook of a run
    with a validation trace holding `records`, (re)started at update `resumed_at`."""
    import fairseq_cli.train as fairseq_train

    monkeypatch.setattr(fairseq_train, "should_stop_early", fairseq_train.should_stop_early)
    for attribute in ("best", "num_runs"):
        monkeypatch.delattr(fairseq_train.should_stop_early, attribute, raising=False)
    trace = tmp_path / "validations.jsonl"
    trace.write_text("".join(validation_line(r) for r in records))
    options = types.SimpleNamespace(head_mask=None, gate_trace=None, gate_trace_interval=50,
                                    validation_trace=str(trace), stop_on_plateau=None,
                                    plateau_loss_tolerance=0.005)
    _hooked_task(options).train_step(None, None, None, None, resumed_at)
    cfg = types.SimpleNamespace(checkpoint=types.SimpleNamespace(
        patience=patience, maximize_best_checkpoint_metric=False, best_checkpoint_metric="loss"))
    return lambda loss: fairseq_train.should_stop_early(cfg, loss)


def test_fairseq_patience_counts_across_a_resume_as_in_one_run(tmp_path, monkeypatch):
    # best at 200, then 300 without improvement; the run was killed after its checkpoint at 300
    # (400 had been validated too, but is after the checkpoint: it is validated again)
    records = sequence([(4.0, None), (3.0, None), (3.2, None), (3.1, None)], start=100, step=100)
    should_stop = _fairseq_patience(tmp_path, monkeypatch, records, resumed_at=300, patience=3)
    # 400 and 500: the second and third validations without improvement since 200 - stop at
    # 500, as one uninterrupted run would have (a fresh count would go on to 700)
    assert [should_stop(loss) for loss in (3.05, 3.01)] == [False, True]


def test_a_fresh_run_starts_its_patience_count_empty(tmp_path, monkeypatch):
    records = [Validation(100, 1.0, None)]  # another run's record, after this run's update 0
    should_stop = _fairseq_patience(tmp_path, monkeypatch, records, resumed_at=0, patience=1)
    assert [should_stop(loss) for loss in (3.0, 3.5)] == [False, True]
