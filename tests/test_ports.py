"""Ports for loopback servers come from below the ephemeral range, each once, free on every host asked for."""

import socket

import pytest

from headroom.ports import HIGH, LOW, free_port


def test_ports_are_below_the_ephemeral_range_and_never_handed_out_twice():
    ports = [free_port() for _ in range(200)]
    assert all(LOW <= p < HIGH < 32768 for p in ports)
    assert len(set(ports)) == len(ports)


def test_a_port_is_free_on_every_host_asked_for():
    hosts = ["127.0.0.1", "127.0.0.2"]
    port = free_port(hosts)
    for host in hosts:
        with socket.socket() as server:
            server.bind((host, port))


def test_a_taken_port_is_never_handed_out():
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        with pytest.raises(RuntimeError, match=f"no port in \\[{taken}, {taken + 1}\\) is free on all of 127.0.0.1"):
            free_port(low=taken, high=taken + 1)
