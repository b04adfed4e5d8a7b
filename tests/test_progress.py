"""Progress lines: counts as a person reads them, counts over a whole audit, a plan up front, the
current stage, CPU time beside wall time, and lines a log keeps whole."""
import io
import json

import pytest
from typer.testing import CliRunner

from sepo import progress
from sepo.cli.main import app
from sepo.progress import LineReporter, _Task


def test_a_large_count_prints_as_an_integer_not_in_e_notation():
    task = _Task("model replies", 1_916_928)
    assert "0/1,916,928 (0%)" in task.text() and "e+" not in task.text()
    assert "time left not known yet" in task.text()
    task.completed = 3
    assert "3/1,916,928" in task.text() and "about" in task.text()
    unbounded = _Task("steps", None)
    unbounded.completed = 1_234_567
    assert "1,234,567 done" in unbounded.text()


@pytest.fixture
def lines(monkeypatch):
    """A line reporter on a string, printing every line at once."""
    monkeypatch.setattr(progress, "STAGE_SECONDS", 0.0)
    monkeypatch.setattr(progress, "LINE_SECONDS", 0.0)
    return io.StringIO()


def test_counts_in_a_whole_block_add_up_over_its_calls(lines):
    """An audit's replies came in many batched calls, each counted from 0: "model replies: 0/2"
    for sixteen minutes said nothing of what was left. In a `whole` block they add up."""
    with LineReporter(lines):
        with progress.whole("model replies"):
            for asked in (2, 3):
                with progress.counting("model replies", asked) as advance:
                    advance(asked)
            with progress.counting("model replies", 4) as advance:
                advance(1)
                progress.stage("between")
            assert "model replies: 6/9 asked so far" in lines.getvalue().splitlines()[-1]
        progress.stage("after the block")
        with progress.counting("model replies", 2) as advance:  # outside: a count of its own again
            advance(1)
    last = lines.getvalue().splitlines()
    assert "model replies: 1/2 (50%)" in last[-1] and "asked so far" not in last[-1]
    assert not any("asked so far" in line for line in last if "after the block" in line)


def test_a_counter_lasts_its_block_and_its_total_can_shrink(lines):
    with LineReporter(lines) as reporter:
        with progress.whole():
            episodes = progress.counter("audit episodes", 600)
            episodes(100)
            episodes.set_total(500)  # an opponent that could not be played
            assert "audit episodes: 100/500 (20%)" in lines.getvalue().splitlines()[-1]
        assert not reporter.tasks
    assert progress.counter("audit episodes", 10)(1) is None  # no reporter: counts nothing


def test_a_stage_that_goes_on_is_printed_once_and_lines_carry_cpu_time(lines):
    """`sepo model get` printed "converting ... to float32" twice: the line that keeps the pace
    repeated the stage. It now says only that work goes on, with the CPU time that tells slow
    work (CPU time grows) from a stuck one."""
    with LineReporter(lines) as reporter:
        progress.stage("converting model.gguf (llama) to float32")
        for _ in range(3):
            reporter.tick()
    text = lines.getvalue()
    assert text.count("to float32") == 1, text
    assert "still at work on the last stage" in text
    assert all(line.startswith("sepo [") and ", CPU " in line.split("]")[0] for line in text.splitlines())


def test_a_note_waits_for_the_reporter_and_a_quick_command_drops_it(monkeypatch):
    stream = io.StringIO()
    progress.note("torch threads: 1", keep=True)
    with LineReporter(stream):  # lasts less than STAGE_SECONDS
        pass
    assert stream.getvalue() == ""
    monkeypatch.setattr(progress, "STAGE_SECONDS", 0.0)
    progress.note("torch threads: 1", keep=True)
    with LineReporter(stream):
        pass
    assert "torch threads: 1" in stream.getvalue()


def test_a_checkpoint_is_a_line_not_the_stage_of_the_steps_after_it(lines):
    """Training said "checkpoint at step 9" during steps 10 and 11."""
    from sepo.training.sft import checkpoint_note

    with LineReporter(lines):
        progress.stage("training")
        with progress.counting("training steps", 12) as advance:
            advance(9)
            checkpoint_note(9)
            advance(2)
    text = lines.getvalue().splitlines()
    assert any(line.endswith("checkpoint at step 9 written") for line in text)
    assert any("training; training steps: 11/12" in line for line in text)
    assert not any("checkpoint" in line and "training steps" in line for line in text)


def test_eval_shows_its_plan_and_counts_episodes_over_the_whole_audit(monkeypatch):
    """The audit's plan (episodes, opponents, where the policy is read) up front, then the
    opponents by number and one episode count over every pool (before: "0 done" until the
    first opponent ended, and no count of what was left)."""
    monkeypatch.setattr(progress, "STAGE_SECONDS", 0.0)
    monkeypatch.setattr(progress, "LINE_SECONDS", 0.0)
    args = ["eval", "--game", "kuhn", "--agent", "uniform", "--episodes", "4", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    json.loads(result.stdout)
    err = result.stderr
    assert ("audit plan: 24 episodes, 4 against each of 6 opponents (train 3, collusive 1, exploiter 2); "
            "the agent's policy read first, at 12 information states") in err, err
    assert "(opponent 1 of 6)" in err and "(opponent 6 of 6)" in err
    assert "audit episodes: 24/24 (100%)" in err and "0 done" not in err


def test_a_model_batch_counts_its_decoding_steps(monkeypatch, tmp_path):
    """A batch of a slow model counted nothing until it was whole: its steps are counted now, so
    the ETA follows from the first one."""
    pytest.importorskip("transformers")
    from sepo.games.kuhn.exact import canonical_decisions
    from sepo.games.kuhn.text import KuhnText
    from sepo.models.tiny import init_tiny_model
    from sepo.policies.hf import HFDecoding, HFPolicy

    monkeypatch.setattr(progress, "LINE_SECONDS", 0.0)
    folder = init_tiny_model(tmp_path / "tiny", seed=0, episodes=2, num_hidden_layers=1)
    policy = HFPolicy(folder, KuhnText(), device="cpu",
                      decoding=HFDecoding(max_new_tokens=5, temperature=0.0))
    decisions = list(canonical_decisions().values())[:2]
    stream = io.StringIO()
    with LineReporter(stream):
        policy.replies(decisions, 1, seed=0)
    assert "this batch's tokens (at most): 1/5" in stream.getvalue(), stream.getvalue()


def test_output_without_a_terminal_is_not_wrapped_at_80_columns(monkeypatch):
    """Summary lines and table titles were cut mid-phrase at 80 columns in a log or a pipe."""
    from sepo.cli import common

    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(common.console, "_width", 80)  # a COLUMNS=80 seen at import
    result = CliRunner().invoke(app, ["exploit", "--game", "kuhn", "--agent", "uniform"])
    assert result.exit_code == 0, result.output
    title = "uniform in kuhn: exact values (exact closed form over the 6 deals and 5 betting sequences)"
    assert title in result.stdout


def test_a_long_command_ends_with_its_wall_and_cpu_time(monkeypatch):
    """README times are an idle machine's; a command's own wall and CPU time let a user on a busy
    machine tell slow work (CPU time grows with wall time) from a stuck one."""
    monkeypatch.setattr(progress, "SUMMARY_SECONDS", 0.0)
    readings = iter([10.0])
    monkeypatch.setattr(progress, "cpu_seconds", lambda: next(readings, 13.0))  # 3 CPU-s after the start
    args = ["eval", "--game", "kuhn", "--agent", "uniform", "--episodes", "2", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("took ") and "wall time, 3 s CPU time (sepo and the processes it ran)" in last
    json.loads(result.stdout)  # stdout holds the object alone
    assert CliRunner().invoke(app, [*args, "--quiet"]).stderr == ""
    failed = CliRunner().invoke(app, ["eval", "--game", "kuhn", "--agent", "uniform", "--episodes", "0"])
    assert failed.exit_code == 2 and "took" not in failed.stderr


def test_a_quick_command_ends_without_a_time_line():
    result = CliRunner().invoke(app, ["eval", "--game", "kuhn", "--agent", "uniform", "--episodes", "2"])
    assert result.exit_code == 0 and "took" not in result.stderr
