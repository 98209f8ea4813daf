"""The app's column pacer: an update about every `every_s`, preferring frames with a pending draft."""

from specviz.ui.pacing import Pacer


def test_after_the_interval_a_pending_frame_is_sent_and_others_wait():
    pacer = Pacer(0.4)
    assert pacer.due(0.0)  # nothing sent yet
    assert not pacer.due(0.2, pending=True)  # too soon, even with a pending draft
    assert not pacer.due(0.5)  # past the interval, but no pending draft: wait for one
    assert pacer.due(0.55, pending=True)
    assert not pacer.due(0.7, pending=True)


def test_without_pending_frames_updates_still_come_and_must_goes_at_once():
    pacer = Pacer(0.4)
    assert pacer.due(0.0)
    assert not pacer.due(0.79)
    assert pacer.due(0.8)  # twice the interval: any frame
    assert pacer.due(0.81, must=True)  # a policy ended, or its first verdict
    assert not pacer.due(1.0, pending=True)
