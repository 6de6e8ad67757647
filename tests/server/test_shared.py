"""The dashboard's costly views are shared by every tab: recomputed only when the
campaign changed and ten times their cost has passed (a fake clock makes it exact)."""

from __future__ import annotations

from hpcopt_server.service.shared_answers import SharedAnswers


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_answer_is_kept_while_the_campaign_is_unchanged_or_it_is_young() -> None:
    clock = Clock()
    shared = SharedAnswers(factor=10.0, clock=clock)
    calls: list[str] = []

    def compute(tag: str, cost: float = 0.0) -> str:
        calls.append(tag)
        clock.now += cost
        return tag

    assert shared.get("plot", "r1", lambda: compute("a", cost=1.5)) == ("r1", "a")
    clock.now += 60
    assert shared.get("plot", "r1", lambda: compute("b")) == ("r1", "a")  # unchanged: kept however old
    assert shared.get("plot", "r2", lambda: compute("c", cost=1.5)) == ("r2", "c")  # changed and old: new
    clock.now += 14.0
    # Changed again, but 14 s < 10 x 1.5 s since it cost that much: the kept one, with its revision.
    assert shared.served("plot", "r3") == "r2"
    assert shared.get("plot", "r3", lambda: compute("d")) == ("r2", "c")
    clock.now += 1.1
    assert shared.served("plot", "r3") == "r3"
    assert shared.get("plot", "r3", lambda: compute("e")) == ("r3", "e")
    assert calls == ["a", "c", "e"]


def test_a_cheap_answer_is_always_fresh_and_the_kept_ones_are_bounded() -> None:
    clock = Clock()
    shared = SharedAnswers(factor=10.0, size=2, clock=clock)
    assert shared.get(1, "r1", lambda: "x") == ("r1", "x")
    assert shared.get(1, "r2", lambda: "y") == ("r2", "y")  # cost 0: no window
    shared.get(2, "r", lambda: "two")
    shared.get(3, "r", lambda: "three")
    assert shared.get(1, "r2", lambda: "again") == ("r2", "again")  # 1 was evicted
