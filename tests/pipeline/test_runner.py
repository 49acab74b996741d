"""pipeline.runner on small real steps (files written by Python calls and by subprocesses):
keys from settings and inputs, exactly the dependent steps re-run, failures contained, resumable
training steps, --only, and command steps side by side."""
import json
import os
import sys

import pytest

from fairseq_heads.pipeline import Runner, Step, compute_keys


def writer(text):
    """A call step writing `text` (and what its inputs wrote) to OUT/value.txt."""
    def call(context):
        parts = [text] + [open(context.path(f"{i}/value.txt")).read() for i in context.step.inputs]
        with open(os.path.join(context.out, "value.txt"), "w") as f:
            f.write("+".join(parts))
    return call


def chain(baseline_lr=1.0, beam=5):
    """data -> baseline -> {bleu, stats}; stats -> curve; data -> other (independent of baseline)."""
    return [
        Step("data", "data", {"vocab": 8}, call=writer("d")),
        Step("baseline", "baseline", {"lr": baseline_lr}, inputs=("data",), call=writer("b")),
        Step("bleu", "bleu", {"beam": beam}, inputs=("baseline",), call=writer("u")),
        Step("stats", "stats", {}, inputs=("baseline",), call=writer("s")),
        Step("curve", "curve", {"beam": beam}, inputs=("stats",), call=writer("c")),
        Step("other", "other", {}, inputs=("data",), call=writer("o")),
    ]


def ran(capsys):
    return [line.split()[1] for line in capsys.readouterr().out.splitlines() if line.startswith(("run ", "resume "))]


def test_a_second_run_skips_every_step_and_outputs_hold_the_inputs(tmp_path, capsys):
    assert Runner(chain(), tmp_path).run() == []
    assert ran(capsys) == ["data", "baseline", "bleu", "stats", "curve", "other"]
    assert (tmp_path / "curve" / "value.txt").read_text() == "c+s+b+d"
    assert Runner(chain(), tmp_path).run() == []
    assert ran(capsys) == []
    timings = json.loads((tmp_path / "steps.json").read_text())
    assert [row["step"] for row in timings] == ["data", "baseline", "bleu", "stats", "curve", "other"]
    assert all(row["state"] == "done earlier" for row in timings)


def test_steps_json_keeps_the_steps_another_config_ran_in_the_same_folder(tmp_path, capsys):
    Runner(chain(), tmp_path).run()
    grown = chain()[:3] + [Step("stats_s2", "stats_s2", {"seed": 2}, inputs=("baseline",), call=writer("t"))]
    assert Runner(grown, tmp_path).run() == []
    assert ran(capsys)[-1] == "stats_s2"
    rows = {row["step"]: row for row in json.loads((tmp_path / "steps.json").read_text())}
    assert rows["stats_s2"]["state"] == "ran" and rows["bleu"]["state"] == "done earlier"
    earlier = {name: rows[name]["state"] for name in ("stats", "curve", "other")}
    assert earlier == dict.fromkeys(earlier, "done by another config")
    marker = json.loads((tmp_path / ".steps" / "curve.json").read_text())
    assert rows["curve"]["key"] == marker["key"] and rows["curve"]["seconds"] == marker["seconds"]


def test_changing_the_baseline_reruns_exactly_the_steps_downstream_of_it(tmp_path, capsys):
    Runner(chain(), tmp_path).run()
    capsys.readouterr()
    Runner(chain(baseline_lr=0.5), tmp_path).run()
    assert ran(capsys) == ["baseline", "bleu", "stats", "curve"]
    Runner(chain(baseline_lr=0.5, beam=4), tmp_path).run()
    assert ran(capsys) == ["bleu", "curve"]


def test_a_key_depends_on_settings_and_on_the_keys_of_inputs_only():
    keys, changed = compute_keys(chain()), compute_keys(chain(baseline_lr=2.0))
    assert [name for name in keys if keys[name] != changed[name]] == ["baseline", "bleu", "stats", "curve"]
    with pytest.raises(ValueError, match="reads late, not declared before it"):
        compute_keys([Step("early", "e", inputs=("late",), call=writer("e")), Step("late", "l", call=writer("l"))])


def failing(context):
    with open(os.path.join(context.out, "half.txt"), "w") as f:
        f.write("half")
    raise RuntimeError("disk full")


def test_a_failed_step_leaves_nothing_and_only_its_dependants_are_skipped(tmp_path, capsys):
    steps = chain()
    steps[3] = Step("stats", "stats", {}, inputs=("baseline",), call=failing)
    assert Runner(steps, tmp_path).run() == ["stats", "curve"]
    out = capsys.readouterr()
    assert "FAILED stats: RuntimeError: disk full" in out.err
    assert not (tmp_path / "stats").exists() and not (tmp_path / "stats.partial").exists()
    assert not (tmp_path / ".steps" / "stats.json").exists() and not (tmp_path / "curve").exists()
    assert (tmp_path / "bleu" / "value.txt").exists() and (tmp_path / "other" / "value.txt").exists()
    assert "RuntimeError: disk full" in (tmp_path / "logs" / "stats.log").read_text()
    # fixed: the next run runs the two that did not finish, nothing else
    Runner(chain(), tmp_path).run()
    assert ran(capsys) == ["stats", "curve"]


TRAIN = """
import os, sys
out, stop_at = sys.argv[1], int(sys.argv[2])
done = int(open(os.path.join(out, "updates")).read()) if os.path.exists(os.path.join(out, "updates")) else 0
for update in range(done + 1, 6):
    open(os.path.join(out, "updates"), "w").write(str(update))
    if update == stop_at:
        sys.exit(3)
"""


def training(stop_at, lr=1.0):
    def command(context):
        return [sys.executable, "-c", TRAIN, context.out, str(stop_at)]
    return Step("train", "model", {"lr": lr}, argv=command, resumable=True)


def test_a_resumable_step_goes_on_from_where_it_stopped_under_the_same_key(tmp_path, capsys):
    assert Runner([training(stop_at=3)], tmp_path).run() == ["train"]
    assert (tmp_path / "model.partial" / "updates").read_text() == "3"
    assert Runner([training(stop_at=0)], tmp_path).run() == []
    out = capsys.readouterr().out.splitlines()
    assert [line for line in out if line.endswith(" train")] == ["run  train", "resume train"]
    assert (tmp_path / "model" / "updates").read_text() == "5"
    assert not (tmp_path / "model" / ".step_key").exists()


def test_a_resumable_step_starts_afresh_under_another_key(tmp_path, capsys):
    Runner([training(stop_at=3)], tmp_path).run()
    capsys.readouterr()
    assert Runner([training(stop_at=2, lr=0.5)], tmp_path).run() == ["train"]
    assert (tmp_path / "model.partial" / "updates").read_text() == "2"


def test_a_resumable_step_goes_on_from_the_output_of_the_settings_it_may_resume(tmp_path, capsys):
    """A stopping rule added to a running training: the partial output of the earlier settings
    is resumed (and from then on under the new key); another earlier setting's is not."""
    Runner([training(stop_at=3)], tmp_path).run()
    with_rule = Step("train", "model", {"lr": 1.0, "stop": "plateau"}, argv=training(0).argv, resumable=True,
                     resumable_from=(("a stopping rule added", {"lr": 1.0}),))
    assert Runner([with_rule], tmp_path).run() == []
    out = capsys.readouterr().out
    assert "resume train" in out and "earlier settings (a stopping rule added)" in out
    assert (tmp_path / "model" / "updates").read_text() == "5"

    Runner([training(stop_at=3)], tmp_path).run()  # a partial of lr 1.0 again
    capsys.readouterr()
    other = Step("train", "model", {"lr": 0.5, "stop": "plateau"}, argv=training(0).argv, resumable=True,
                 resumable_from=(("a stopping rule added", {"lr": 0.5}),))
    Runner([other], tmp_path).run()
    assert "run  train" in capsys.readouterr().out
    with pytest.raises(ValueError, match="needs a resumable step"):
        Step("x", "x", {}, argv=training(0).argv, resumable_from=(("why", {}),))


def test_only_runs_the_named_steps_and_what_they_read(tmp_path, capsys):
    Runner(chain(), tmp_path, only=["stats"]).run()
    assert ran(capsys) == ["data", "baseline", "stats"]
    with pytest.raises(ValueError, match="no step named nope"):
        Runner(chain(), tmp_path, only=["nope"])


RENDEZVOUS = """
import os, sys, time
out, mine, other = sys.argv[1:4]
open(os.path.join(os.path.dirname(out), mine), "w").close()
for _ in range(600):  # up to 60 s for the other step to start: only side by side both can finish
    if os.path.exists(os.path.join(os.path.dirname(out), other)):
        sys.exit(0)
    time.sleep(0.1)
sys.exit(1)
"""


def test_command_steps_run_side_by_side_with_jobs(tmp_path):
    def step(name, other):
        return Step(name, name, argv=lambda context: [sys.executable, "-c", RENDEZVOUS, context.out,
                                                          f"{name}.started", f"{other}.started"])
    assert Runner([step("a", "b"), step("b", "a")], tmp_path, jobs=2).run() == []


def test_after_every_step_the_hook_sees_the_finished_steps(tmp_path):
    seen = []
    Runner(chain()[:3], tmp_path, on_step_done=lambda runner: seen.append(sorted(os.listdir(tmp_path / ".steps")))).run()
    assert seen == [["data.json"], ["baseline.json", "data.json"], ["baseline.json", "bleu.json", "data.json"]]


def test_list_order_is_priority_a_ready_call_runs_before_later_listed_commands(tmp_path, capsys):
    # a -> mask (a call) -> fixed; "other" reads nothing but is listed last. When a finishes, the
    # one slot goes to fixed (after its mask), not to other, though other was ready first
    def command(name, inputs=()):
        return Step(name, name, inputs=inputs, argv=lambda context: [sys.executable, "-c", "pass"])

    def write_mask(context):
        with open(os.path.join(context.out, "head_mask.json"), "w") as f:
            f.write("{}")

    steps = [command("a"), Step("mask", "mask", inputs=("a",), call=write_mask),
             command("fixed", ("mask",)), command("other")]
    assert Runner(steps, tmp_path, jobs=1).run() == []
    assert ran(capsys) == ["a", "mask", "fixed", "other"]


RUNNING = """
import os, sys, time
marker = sys.argv[1]
open(marker, "w").close()
time.sleep(1.0)
os.remove(marker)
"""


def test_a_step_that_runs_alone_waits_for_every_other_step_and_none_starts_beside_it(tmp_path, capsys):
    # jobs=2, the timing listed first and ready at once: it still runs after both trainings, with
    # neither running (their markers exist only while they run)
    seen = []

    def timing(context):
        seen.append(sorted(p.name for p in tmp_path.glob("*.running")))

    def training(name):
        return Step(name, name, argv=lambda context: [sys.executable, "-c", RUNNING,
                                                          str(tmp_path / f"{name}.running")])

    steps = [Step("timing", "timing", call=timing, alone=True), training("a"), training("b")]
    assert Runner(steps, tmp_path / "r", jobs=2).run() == []
    assert seen == [[]] and ran(capsys)[-1] == "timing"
    with pytest.raises(ValueError, match="only a call step runs alone"):
        Step("x", "x", argv=lambda context: ["true"], alone=True)
