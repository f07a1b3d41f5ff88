"""What the chaos run asks the components it runs: whether a URL answers, how many records the worker has
processed, how many the router has delivered, whether the predictor is SERVING; and the run's model-signing
keys."""

from __future__ import annotations

import urllib.request
from collections.abc import Callable
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from headroom.certificates import write_signing_key
from headroom.contract.signing import SigningKey
from headroom.demo.scrape import scrape, total


def signing_keys(folder: Path) -> dict[str, str]:
    """A fresh key pair: the worker signs the models it publishes, the predictor and the router trust it."""
    private, public = write_signing_key(SigningKey.generate(), folder, "worker")
    return {"HEADROOM_MODEL_SIGNING_KEY_FILE": str(private), "HEADROOM_MODEL_TRUSTED_KEYS": str(public)}


def answers(url: str) -> Callable[[], bool]:
    def ready() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=1.0) as response:
                return bool(response.status == 200)
        except (OSError, ValueError):
            return False
    return ready


def quietly(condition: Callable[[], object]) -> bool:
    try:
        return bool(condition())
    except (OSError, ValueError, KeyError, TimeoutError):
        return False


def processed(url: str) -> float:
    samples = scrape(url, timeout_s=1.0)
    return total(samples, "headroom_telemetry_ingested_total") + total(samples, "headroom_telemetry_dead_letters_total")


def delivered(url: str) -> float:
    return total(scrape(url, timeout_s=1.0), "headroom_router_telemetry_delivery_total", outcome="delivered")


def serving(address: str) -> bool:
    with grpc.insecure_channel(address) as channel:
        answer = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=1.0)
    return bool(answer.status == health_pb2.HealthCheckResponse.SERVING)
