"""The learner borrowing idle actors' cores (``processes/learner_threads.py``), against the counts it must set."""

from __future__ import annotations

import pytest
import torch

from rl_lightning.processes import learner_threads


@pytest.fixture
def one_thread(monkeypatch):
    """The learner at one thread of its own on a machine of ``cores`` cores; thread count and lending restored."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)

    def cores(n: int) -> None:
        monkeypatch.setattr(learner_threads.os, "sched_getaffinity", lambda pid: set(range(n)))

    yield cores
    learner_threads.stop_lending()
    torch.set_num_threads(before)


def test_each_idle_actor_adds_a_thread_at_the_next_step_and_takes_it_back_when_it_collects(one_thread):
    one_thread(8)
    idle = torch.zeros(3, dtype=torch.int8)
    learner_threads.lend_idle_actors(idle)
    counts = []
    for flags in ([0, 0, 0], [1, 0, 0], [1, 0, 1], [0, 0, 1], [0, 0, 0]):
        idle.copy_(torch.tensor(flags, dtype=torch.int8))
        learner_threads.follow_actors()
        counts.append(torch.get_num_threads())
    assert counts == [1, 2, 3, 2, 1]
    assert learner_threads.mean_threads_since_last_read() == pytest.approx(9 / 5)
    assert learner_threads.mean_threads_since_last_read() is None  # nothing stepped since


def test_never_more_threads_than_cores_and_stop_lending_restores_the_learners_own(one_thread):
    one_thread(2)
    idle = torch.ones(4, dtype=torch.int8)
    learner_threads.lend_idle_actors(idle)
    learner_threads.follow_actors()
    assert torch.get_num_threads() == 2
    learner_threads.follow_actors(step=False)  # the learner handing out slots: not an optimiser step
    assert learner_threads.mean_threads_since_last_read() == 2
    learner_threads.stop_lending()
    assert torch.get_num_threads() == 1
    learner_threads.follow_actors()  # nothing lent any more: no change, nothing counted
    assert torch.get_num_threads() == 1
    assert learner_threads.mean_threads_since_last_read() is None


def test_without_lending_an_optimiser_step_leaves_the_threads_alone(one_thread):
    one_thread(8)
    torch.set_num_threads(3)
    learner_threads.follow_actors()
    assert torch.get_num_threads() == 3
