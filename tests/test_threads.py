"""Torch's thread count in a command: chosen from how busy the machine is unless `--threads` says."""
import pytest

from sepo import threads
from sepo.threads import Machine, choose_threads


@pytest.mark.parametrize("machine, expected", [
    (Machine(cores=2, machine_cores=2, load=0.1, busy=0.03), 2),  # idle
    (Machine(cores=2, machine_cores=2, load=5.6, busy=1.0), 1),  # load 4-8 on two cores
    (Machine(cores=2, machine_cores=2, load=1.9, busy=0.02), 2),  # a command that just ended: the load lags
    (Machine(cores=2, machine_cores=2, load=0.0, busy=0.97), 2),  # a burst, no load yet: the calmer counts
    (Machine(cores=2, machine_cores=2, load=0.2, busy=0.05, other_sepo=1), 1),  # another sepo command at work
    (Machine(cores=1, machine_cores=1, load=0.0, busy=0.0), 1),
    (Machine(cores=16, machine_cores=16, load=4.0, busy=0.3), 12),
    (Machine(cores=2, machine_cores=64, load=16.0, busy=0.25), 2),  # 2 cores of a big machine, 1/4 busy
    (Machine(cores=4, machine_cores=4, load=None, busy=None), 4),  # nothing measurable: every core
    (Machine(cores=16, machine_cores=16, load=0.0, busy=0.0, torch_default=8), 8),  # torch's default caps it
])
def test_the_thread_count_leaves_the_cores_other_work_keeps_busy(machine, expected):
    chosen, why = choose_threads(machine)
    assert chosen == expected, why


def test_the_reason_names_what_was_measured():
    chosen, why = choose_threads(Machine(cores=2, machine_cores=2, load=5.59, busy=0.96, other_sepo=3))
    assert chosen == 1 and "load average 5.59" in why and "96%" in why and "3 other sepo commands" in why
    assert "free" in choose_threads(Machine(2, 2, 0.0, 0.0))[1]
    assert "torch's own default" in choose_threads(Machine(16, 16, 0.0, 0.0, torch_default=8))[1]


def test_a_sepo_command_line_is_recognised():
    assert threads._is_sepo(["/usr/bin/python3", "/home/u/.venv/bin/sepo", "eval"])
    assert threads._is_sepo(["python", "-m", "sepo.cli.main", "train"])
    assert not threads._is_sepo(["bash", "-c", "sepo eval --agent x"])
    assert not threads._is_sepo(["python", "-m", "pytest"])


def test_measure_reads_this_machine():
    machine = threads.measure(0.05)
    assert machine.cores >= 1 and machine.machine_cores >= machine.cores
    assert machine.busy is None or 0.0 <= machine.busy <= 1.0


@pytest.fixture
def tiny(tmp_path_factory):
    from sepo.models.tiny import init_tiny_model

    return init_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny", seed=0, episodes=2, num_hidden_layers=1)


def test_a_command_chooses_its_threads_when_the_model_loads_and_says_so(tiny, monkeypatch):
    """On a busy machine a model command runs one torch thread without being told (two threads on
    two busy cores ran the README's audit several times slower), and says why in one line."""
    import torch

    from sepo import progress
    from tests.cli.cli_helpers import _run

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(progress, "STAGE_SECONDS", 0.0)
    monkeypatch.setattr(threads, "measure", lambda: Machine(cores=2, machine_cores=2, load=6.0, busy=1.0))
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        result = _run("exploit", "--game", "kuhn", "--agent", f"hf:{tiny}", "--max-new-tokens", "2")
        assert result.exit_code == 0, result.output
        assert torch.get_num_threads() == 1
        line = next(line for line in result.stderr.splitlines() if "torch threads" in line)
        assert "torch threads: 1: about 2.0 of the 2 usable cores busy" in line and "--threads N" in line
        assert result.stderr.count("torch threads") == 1
    finally:
        torch.set_num_threads(before)
    assert not threads._COMMAND  # after the command, library use is left alone


def _settled(monkeypatch, given, machine):
    """The line a command's `settle` shows, and torch's thread count after it."""
    import io

    import torch

    from sepo import progress

    monkeypatch.setattr(threads, "measure", lambda: machine)
    monkeypatch.setattr(progress, "STAGE_SECONDS", 0.0)
    stream = io.StringIO()
    before = torch.get_num_threads()
    try:
        threads.configure(given)
        threads.settle()  # before the reporter: the line waits for it
        with progress.LineReporter(stream):
            threads.settle()  # once a command
        return stream.getvalue(), torch.get_num_threads()
    finally:
        threads.reset()
        torch.set_num_threads(before)


def test_an_idle_machine_gets_every_core_and_a_given_count_or_omp_is_kept(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    idle = Machine(cores=2, machine_cores=2, load=0.0, busy=0.01)
    text, count = _settled(monkeypatch, None, idle)
    assert count == 2 and text.count("torch threads: 2: the 2 usable cores are free") == 1
    text, count = _settled(monkeypatch, 1, idle)
    assert count == 1 and "torch threads: 1 (--threads)" in text
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    text, _ = _settled(monkeypatch, None, idle)
    assert "(OMP_NUM_THREADS=1)" in text


def test_library_use_leaves_torch_alone(monkeypatch):
    import torch

    threads.reset()
    monkeypatch.setattr(threads, "measure", lambda: pytest.fail("measured without a command"))
    before = torch.get_num_threads()
    threads.settle()
    assert torch.get_num_threads() == before


def test_experiment_workers_use_one_thread(monkeypatch):
    import concurrent.futures

    from sepo.experiments import runner

    made = {}

    class Pool:
        def __init__(self, workers, **kwargs):
            made.update(kwargs)

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", Pool)
    runner.LocalBackend(2)
    assert made["initargs"] == (1,)
