import asyncio
import threading

import numpy as np
import pytest

from headroom.predictor.client import PredictorClient
from headroom.predictor.runtime import ModelRuntime
from tests.conftest import free_port
from tests.keys import TRUST
from tests.predictor.models import candidate_rows, message, train


@pytest.fixture(scope="module")
def boosters():
    return {"ttft": train(seed=1), "tpot": train("tpot", seed=3)}


def runtime_with(boosters) -> ModelRuntime:
    runtime = ModelRuntime(trust=TRUST)
    runtime.apply(message(boosters["ttft"], 3))
    runtime.apply(message(boosters["tpot"], 1, target="tpot"))
    return runtime


def run_callers(client, callers: int, calls_each: int, answers: list):
    def work(caller):
        for call in range(calls_each):
            rows = candidate_rows(1 + (caller * 7 + call) % 23, seed=caller * 1000 + call)
            answers.append((rows, client.predict("pool-a", rows, timeout=2.0)))
    threads = [threading.Thread(target=work, args=(i,)) for i in range(callers)]
    for thread in threads:
        thread.start()
    return threads


def test_concurrent_calls_are_coalesced_and_sliced_back(start_server, boosters):
    servers = [start_server(runtime=runtime_with(boosters)) for _ in range(2)]
    answers = []
    with PredictorClient([s.address for s in servers], window_seconds=0.002, timeout_seconds=2.0) as client:
        for thread in run_callers(client, callers=12, calls_each=10, answers=answers):
            thread.join(60)
        assert client.calls == 120
        assert client.rpcs < client.calls
    assert len(answers) == 120
    for rows, answer in answers:
        assert answer.ok.all()
        np.testing.assert_allclose(answer.get("ttft"), boosters["ttft"].inplace_predict(rows), rtol=1e-6)
        np.testing.assert_allclose(answer.get("tpot"), boosters["tpot"].inplace_predict(rows), rtol=1e-6)
        assert answer.versions == {("ttft", "mean"): 3, ("tpot", "mean"): 1}


def test_killing_one_of_two_instances_mid_load_loses_no_call(start_server, boosters):
    servers = [start_server(runtime=runtime_with(boosters)) for _ in range(2)]
    answers = []
    with PredictorClient([s.address for s in servers], window_seconds=0.0005, timeout_seconds=2.0) as client:
        threads = run_callers(client, callers=6, calls_each=60, answers=answers)
        while len(answers) < 60 and any(t.is_alive() for t in threads):
            threading.Event().wait(0.01)
        servers[0].stop(grace=0.2)
        for thread in threads:
            thread.join(120)
    assert len(answers) == 360
    failed = [answer.errors for _, answer in answers if not answer.ok.all()]
    assert failed == []


def test_failures_are_per_candidate_and_never_raise(start_server, boosters):
    server = start_server(runtime=runtime_with(boosters))
    rows = candidate_rows(5, seed=2)
    rows[1, 0] = np.nan
    with PredictorClient([server.address], timeout_seconds=2.0) as client:
        answer = client.predict("pool-a", rows)
        assert answer.ok.tolist() == [True, False, True, True, True]
        assert answer.errors[1] == "non-finite feature value"
        assert np.isnan(answer.get("ttft")[1])
        np.testing.assert_allclose(answer.get("ttft")[[0, 2, 3, 4]],
                                   boosters["ttft"].inplace_predict(rows[[0, 2, 3, 4]]), rtol=1e-6)
        by_asyncio = asyncio.run(client.predict_async("pool-a", rows))
        assert by_asyncio.ok.tolist() == answer.ok.tolist()
        unknown = client.predict("pool-z", rows)
        assert not unknown.ok.any()
        assert "INVALID_ARGUMENT" in unknown.errors[0] and "pool-z" in unknown.errors[0]
    with PredictorClient([f"127.0.0.1:{free_port()}"], timeout_seconds=0.3) as nowhere:
        answer = nowhere.predict("pool-a", candidate_rows(3))
        assert not answer.ok.any()
        assert all(answer.errors)


def test_a_call_holds_at_most_the_row_limit(start_server, boosters):
    server = start_server(runtime=runtime_with(boosters), max_rows=5000)
    rows = candidate_rows(5001, seed=4)
    with PredictorClient([server.address], timeout_seconds=10.0) as client:
        answer = client.predict("pool-a", rows[:5000])
        refused = client.predict("pool-a", rows)
    assert answer.ok.all()
    np.testing.assert_allclose(answer.get("ttft"), boosters["ttft"].inplace_predict(rows[:5000]), rtol=1e-6)
    assert not refused.ok.any() and "over the limit of 5000 per call" in refused.errors[0]
