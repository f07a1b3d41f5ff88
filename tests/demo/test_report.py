"""The demo report's window-by-window comparison of the two arms after the change, and the data it keeps."""

import polars as pl

from headroom.demo.load import ClientOutcome
from headroom.demo.report import Evidence, compare_windows, write_evidence


def outcome(arm, sent_at, ttft_ms, met):
    return ClientOutcome(arm=arm, request_id=f"{arm}{sent_at}", sent_at=sent_at, status=200, stream=True,
                         has_slo=True, ttft_ms=ttft_ms, e2e_ms=ttft_ms, slo_met=met)


def test_counts_the_windows_after_the_change_where_headroom_held_its_own():
    outcomes = []
    for second in range(0, 20):  # the change at 10 s: two 5-s windows after it
        ours_met = second < 15  # headroom meets every SLO in the first window after the change, none in the second
        outcomes += [outcome("headroom", second + 0.5, 100.0 if ours_met else 900.0, ours_met),
                     outcome("baseline", second + 0.5, 300.0, second % 2 == 0)]
    compared = compare_windows(outcomes, change_at=10.0, seconds=20.0)
    assert compared["windows"] == 2
    assert compared["attainment_at_least"] == 1 and compared["p99_at_most"] == 1
    low, high = compared["attainment_gap_range"]
    assert low < 0 < high
    assert compared["p99_ratio_range"][0] < 1 < compared["p99_ratio_range"][1]


def test_no_window_after_the_change():
    assert compare_windows([], change_at=10.0, seconds=12.0) == {
        "windows": 0, "window_s": 5.0, "attainment_at_least": 0, "p99_at_most": 0, "attainment_gap_range": [],
        "p99_ratio_range": []}


def test_keeps_every_request_and_record_it_was_drawn_from(tmp_path):
    failed = ClientOutcome(arm="baseline", request_id="b1", sent_at=1.0, status=0, stream=True, has_slo=True,
                           error="connection refused")
    records = pl.DataFrame({"request_id": ["h1"], "server_id": ["h100-0"], "ttft_ms": [120.0]})
    write_evidence(Evidence([outcome("headroom", 0.5, 120.0, True), failed], [], records, None), tmp_path)
    requests = pl.read_parquet(tmp_path / "requests.parquet")
    assert requests["request_id"].to_list() == ["headroom0.5", "b1"]
    assert requests["error"].to_list() == ["", "connection refused"] and requests["ttft_ms"].to_list() == [120.0, None]
    assert pl.read_parquet(tmp_path / "telemetry.parquet").equals(records)


def test_an_empty_run_still_writes_its_requests_table(tmp_path):
    write_evidence(Evidence([], [], None, None), tmp_path)
    assert pl.read_parquet(tmp_path / "requests.parquet").columns[:3] == ["arm", "request_id", "sent_at"]
    assert not (tmp_path / "telemetry.parquet").exists()
