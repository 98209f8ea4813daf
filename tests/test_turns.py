"""The models' queue (specviz/ui/turns.py): first come first served, the wait a visitor is told,
and stranded runs that must not block it. A fake clock: no sleeping."""

import pytest

from specviz.ui.turns import Standing, Turns, expected_seconds, ordinal, waiting_message


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


@pytest.fixture
def clock():
    return Clock()


def test_first_come_first_served(clock):
    turns = Turns(clock=clock)
    first, second, third = turns.join(30.0), turns.join(20.0), turns.join(10.0)
    assert not turns.try_start(second) and not turns.try_start(third)
    assert turns.try_start(first)
    assert not turns.try_start(third)  # second is ahead
    turns.leave(first)
    assert not turns.try_start(third) and turns.try_start(second)
    turns.leave(second)
    assert turns.try_start(third)
    assert turns.waiting() == 0


def test_the_wait_comes_from_the_running_comparisons_progress(clock):
    turns = Turns(clock=clock)
    holder, me = turns.join(60.0), turns.join(40.0)
    assert turns.try_start(holder)
    # before it has made progress: its own estimate, less what it has run
    clock.now += 10
    assert turns.standing(me) == Standing(1, pytest.approx(50.0))
    # a quarter done after 20 s: 60 s more, whatever the estimate said
    clock.now += 10
    assert turns.alive(holder, done=0.25)
    turns.try_start(me)  # still waiting, and alive
    assert turns.standing(me) == Standing(1, pytest.approx(60.0))
    # a third in line also waits for the second's own estimate
    late = turns.join(5.0)
    assert turns.standing(late) == Standing(2, pytest.approx(60.0 + 40.0))


def test_an_unknown_estimate_gives_no_wait(clock):
    turns = Turns(clock=clock)
    holder, me = turns.join(None), turns.join(10.0)
    turns.try_start(holder)
    assert turns.standing(me) == Standing(1, None)
    turns.alive(holder, done=0.5)  # progress is enough
    clock.now += 8
    assert turns.standing(me).wait_s == pytest.approx(8.0)


def test_a_stranded_run_loses_its_turn_and_cannot_go_on(clock):
    """A visitor who pressed Stop or left: nobody resumes the run, so it stops showing life."""
    turns = Turns(stale_s=15, clock=clock)
    stranded, waiting = turns.join(30.0), turns.join(30.0)
    assert turns.try_start(stranded)
    for _ in range(4):  # the waiting run polls; the stranded one never comes back
        clock.now += 5
        turns.try_start(waiting)
    assert turns.try_start(waiting)
    assert not turns.alive(stranded)  # if it ever resumes, it is told to stop
    assert turns.standing(waiting) == Standing(0, 0)


def test_a_waiting_run_that_stops_polling_leaves_the_line(clock):
    turns = Turns(stale_s=15, clock=clock)
    holder, _gone, me = turns.join(30.0), turns.join(30.0), turns.join(30.0)
    turns.try_start(holder)
    clock.now += 16
    turns.alive(holder)
    # gone and me were both last seen 16 s ago: both are out of the line, and me would come after
    # the holder ...
    assert turns.standing(me) == Standing(2, None)
    turns.try_start(me)  # ... as it does when it polls again
    assert turns.standing(me).place == 1
    assert turns.waiting() == 1


def test_stop_hands_the_visitors_tickets_back_at_once(clock):
    turns = Turns(clock=clock)
    stopped, other, me = turns.join(30.0, owner="a"), turns.join(30.0, owner="b"), turns.join(30.0, owner="c")
    assert turns.try_start(stopped)
    assert turns.cancel("a")  # no waiting for it to go stale
    assert not turns.alive(stopped)
    assert turns.try_start(other) and turns.standing(me).place == 1
    assert not turns.cancel("a") and not turns.cancel("nobody")  # nothing left to stop: the page says so itself


def test_expected_seconds_come_from_the_presets_measured_cost():
    assert expected_seconds("smollm2-135m-int8", 128, 5) == pytest.approx(0.07 * 128 * 5)
    assert expected_seconds("no-such-pair", 128, 5) is None


@pytest.mark.parametrize(("n", "text"), [(1, "1st"), (2, "2nd"), (3, "3rd"), (4, "4th"), (11, "11th"),
                                         (12, "12th"), (21, "21st"), (102, "102nd")])
def test_ordinal(n, text):
    assert ordinal(n) == text


def test_the_waiting_message_names_the_queue_and_the_wait():
    assert waiting_message(Standing(1, 24.4)) == (
        "Waiting for the models: another comparison is running. Your run is 1st in the queue; "
        "it starts in about 24 s.")
    assert "and 2 more are waiting ahead of yours" in waiting_message(Standing(3, 300))
    assert "3rd in the queue" in waiting_message(Standing(3, 300)) and "about 5 min" in waiting_message(
        Standing(3, 300))
    assert "and 1 more is waiting" in waiting_message(Standing(2, None))
    assert "as soon as the models are free" in waiting_message(Standing(2, None))


def test_a_run_waits_its_turn_then_gets_the_pair_loaded_in_it(clock, monkeypatch):
    """take_turn, shared by the page's runs and the API's: Standing while another run holds the
    models, then the pair's load states, then the pair; the pair is never asked for before."""
    from specviz.pair.models import LoadState
    from specviz.ui import turns as turns_module

    asked = []

    def fake_wait_for_pair(name):
        asked.append(name)
        yield LoadState("loading", "Reading the target")
        yield "the pair"

    monkeypatch.setattr(turns_module, "wait_for_pair", fake_wait_for_pair)
    turns = Turns(clock=clock)
    holder, me = turns.join(30.0), turns.join(20.0)
    assert turns.try_start(holder)
    steps = turns_module.take_turn(turns, me, "some-preset", poll_s=0)
    assert next(steps) == Standing(1, 30.0) and next(steps) == Standing(1, 30.0)
    assert asked == []
    turns.leave(holder)
    loading = next(steps)
    assert isinstance(loading, LoadState) and loading.step == "Reading the target" and asked == ["some-preset"]
    assert next(steps) == "the pair" and next(steps, None) is None
    assert turns.alive(me)  # it holds the models until it leaves


def test_a_stopped_run_never_waits_or_runs_again_even_if_it_is_resumed(clock, monkeypatch):
    """Gradio's cancel does not always reach a run before its next step: a run whose visitor pressed
    Stop must then end by itself, not rejoin the line (a waiting run once did, and its next
    "Waiting for the models" replaced "Stopped" on the page)."""
    from specviz.ui import turns as turns_module

    monkeypatch.setattr(turns_module, "wait_for_pair", lambda name: iter(["the pair"]))
    turns = Turns(clock=clock)
    holder, waiting = turns.join(30.0, owner="b"), turns.join(30.0, owner="a")
    assert turns.try_start(holder)
    steps = turns_module.take_turn(turns, waiting, "some-preset", poll_s=0)
    assert isinstance(next(steps), Standing)
    turns.cancel("a")
    assert next(steps, None) is None  # no more standing, no pair
    turns.leave(holder)
    assert not turns.try_start(waiting) and not turns.alive(waiting) and turns.waiting() == 0
    mine = turns.join(30.0, owner="a")  # the visitor's next Run is a new ticket, served as usual
    assert turns.try_start(mine) and turns.alive(mine)


def test_a_run_stopped_while_its_pair_loads_ends_there(clock, monkeypatch):
    """Stop during a cold start: the run says nothing more of the load (a later "Loading…" would
    replace "Stopped" on the page) and gets no pair; the load itself is not this run's to end."""
    from specviz.pair.models import LoadState
    from specviz.ui import turns as turns_module

    loaded = []

    def fake_wait_for_pair(name):
        for step in ("Reading the draft", "Reading the target"):
            yield LoadState("loading", step)
        loaded.append(name)
        yield "the pair"

    monkeypatch.setattr(turns_module, "wait_for_pair", fake_wait_for_pair)
    turns = Turns(clock=clock)
    mine = turns.join(30.0, owner="a")
    steps = turns_module.take_turn(turns, mine, "some-preset", poll_s=0)
    assert isinstance(next(steps), LoadState)
    turns.cancel("a")
    assert next(steps, None) is None
    assert loaded == [] and not turns.alive(mine)
