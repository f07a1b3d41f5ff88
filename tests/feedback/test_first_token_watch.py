import math

import pytest

from headroom.feedback.first_token_watch import RECENT, FirstTokenWatch


def factor(watch, server_id, now):
    return math.exp(watch.overdue(now).get(server_id, 0.0))


def test_a_server_whose_latest_streams_wait_is_priced_by_their_median_wait_and_not_once_they_are_answered():
    watch = FirstTokenWatch()
    for i in range(RECENT):
        watch.dispatched("s", f"r{i}", now=0.0, predicted_ms=100.0)
    assert factor(watch, "s", now=0.1) == 1.0  # on time
    assert factor(watch, "s", now=0.5) == pytest.approx(5.0)
    assert factor(watch, "s", now=100.0) == pytest.approx(16.0)  # bounded
    for i in range(RECENT):
        watch.first_token("s", f"r{i}", ttft_ms=500.0)
    assert watch.overdue(now=100.0) == {}  # answered: what they teach is the corrections' to keep


def test_the_waiting_are_weighed_with_the_answered_not_alone():
    """At any moment the streams still waiting are a server's slowest; among its latest, they are half or less."""
    watch = FirstTokenWatch()
    for i in range(RECENT):
        watch.dispatched("s", f"r{i}", now=0.0, predicted_ms=100.0)
    for i in range(RECENT // 2 + 1):
        watch.first_token("s", f"r{i}", ttft_ms=90.0)
    assert factor(watch, "s", now=10.0) == 1.0  # the rest wait 100x: a minority


def test_only_the_latest_count_and_a_stream_ended_before_its_first_token_says_nothing():
    watch = FirstTokenWatch()
    watch.dispatched("s", "old", now=0.0, predicted_ms=100.0)
    for i in range(RECENT):  # pushes "old" out, answered on time
        watch.dispatched("s", f"r{i}", now=1.0, predicted_ms=100.0)
        watch.first_token("s", f"r{i}", ttft_ms=100.0)
    assert watch.overdue(now=50.0) == {}  # "old" waits still, but is no longer among the latest
    cut = FirstTokenWatch()
    cut.dispatched("s", "a", now=0.0, predicted_ms=100.0)
    cut.dispatched("s", "b", now=0.0, predicted_ms=100.0)
    cut.ended("s", "a")  # cut before its first token
    assert cut.overdue(now=1.0) == {}  # "b" alone is too few
    cut.dispatched("s", "c", now=0.0, predicted_ms=100.0)
    assert factor(cut, "s", now=1.0) == pytest.approx(10.0)


def test_bad_predictions_are_not_watched_and_a_server_that_left_is_forgotten():
    watch = FirstTokenWatch()
    for i, predicted in enumerate((0.0, -1.0, math.nan, math.inf)):
        watch.dispatched("s", f"bad{i}", now=0.0, predicted_ms=predicted)
    assert watch.overdue(now=10.0) == {}
    watch.dispatched("gone", "a", now=0.0, predicted_ms=1.0)
    watch.dispatched("gone", "b", now=0.0, predicted_ms=1.0)
    assert "gone" in watch.overdue(now=1.0)
    watch.forget("gone")
    assert watch.overdue(now=1.0) == {}
    watch.first_token("gone", "a", ttft_ms=1.0)  # late news of a server forgotten changes nothing
    watch.ended("gone", "b")
    assert watch.overdue(now=1.0) == {}
