"""Targets resolved to instances: a ``dns:///`` name stands for every address it resolves to, followed as it changes.

Three real prediction servers listen on one port of three loopback addresses, as pods behind a headless
Service do; the name lookup (the one-method network edge) is the only thing replaced.
"""

import pytest

from headroom.predictor.client import PredictorClient
from headroom.predictor.instances import Instances, instance_address, split_target
from headroom.predictor.runtime import ModelRuntime
from headroom.predictor.service import GRPC_MESSAGE_OPTIONS
from tests.conftest import free_port
from tests.keys import TRUST
from tests.predictor.models import candidate_rows, message, train

ADDRESSES = ("127.0.0.1", "127.0.0.2", "127.0.0.3")


class Names:
    """A name lookup whose answer the test changes."""

    def __init__(self, addresses):
        self.addresses = list(addresses)
        self.asked = 0

    def __call__(self, host: str, port: int) -> list[str]:
        self.asked += 1
        assert host == "predictors"
        return list(self.addresses)


@pytest.fixture
def servers(start_server):
    runtime = ModelRuntime(trust=TRUST)
    runtime.apply(message(train(seed=3), 1))
    port = free_port()
    return port, [start_server(runtime=runtime, host=host, port=port) for host in ADDRESSES]


def served_by(servers) -> list[float]:
    return [s.metrics.requests.labels("OK")._value.get() for s in servers]


def test_a_dns_target_spreads_calls_over_every_address_and_follows_the_name(servers):
    port, started = servers
    names = Names(ADDRESSES)
    instances = Instances([f"dns:///predictors:{port}"], channel_options=GRPC_MESSAGE_OPTIONS, lookup=names,
                          resolve_interval_s=3600)
    rows = candidate_rows(10, seed=1)
    with PredictorClient([], instances=instances, timeout_seconds=5.0, window_seconds=0.0) as client:
        for _ in range(30):
            assert client.predict("pool-a", rows).ok.all()
        assert served_by(started) == [10, 10, 10]

        names.addresses = ADDRESSES[:2]  # one pod left the Service
        instances.refresh()
        for _ in range(10):
            assert client.predict("pool-a", rows).ok.all()
        assert served_by(started) == [15, 15, 10]
        assert [i.address for i in instances.current] == [f"127.0.0.1:{port}", f"127.0.0.2:{port}"]


def test_a_name_that_stops_resolving_keeps_the_instances_it_had(servers):
    port, _ = servers
    names = Names(ADDRESSES)
    instances = Instances([f"dns:///predictors:{port}"], lookup=names, resolve_interval_s=3600)

    def fail(host, port):
        raise OSError("Temporary failure in name resolution")

    instances._lookup = fail
    instances.refresh()
    assert len(instances.current) == 3
    instances.close()


def test_every_instance_set_aside_still_leaves_one_to_try():
    instances = Instances(["127.0.0.1:1", "127.0.0.1:2"], resolve_interval_s=3600)
    for instance in instances.current:
        instances.set_aside(instance, 60)
    assert instances.pick() in instances.current
    instances.close()


@pytest.mark.parametrize("target, expected", [
    ("10.0.0.7:50061", ("10.0.0.7", 50061, False)),
    ("dns:///headroom-predictor.ns.svc.cluster.local:50061", ("headroom-predictor.ns.svc.cluster.local", 50061, True)),
    ("[::1]:50061", ("::1", 50061, False)),
], ids=["address", "dns name", "ipv6"])
def test_targets(target, expected):
    assert split_target(target) == expected


@pytest.mark.parametrize("target", ["predictor", "dns:///predictor", "host:port", ":50061"])
def test_a_target_without_a_port_is_refused(target):
    with pytest.raises(ValueError, match="host:port"):
        split_target(target)


def test_ipv6_instances_are_bracketed():
    assert instance_address("fd00::5", 50061) == "[fd00::5]:50061"
    assert instance_address("10.1.2.3", 50061) == "10.1.2.3:50061"


def test_no_targets_is_refused():
    with pytest.raises(ValueError, match="at least one"):
        Instances([])
