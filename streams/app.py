"""The Faust app: the windows table and its changelog, the consuming loop, retraining alongside.

Faust owns the windows table: it creates the changelog topic, assigns the table's partitions among the
workers of the app id, and recovers them after a start or a rebalance. A worker with an instance id is a
static member of the group: restarted, it takes its partitions back without a rebalance. Table partition ``p`` holds the
windows built from telemetry partition ``p``, so once Faust has recovered a worker's active table
partitions, the in-memory windows are rebuilt from them and the worker reads those telemetry partitions
(:mod:`streams.consume`, :mod:`streams.reader`) — in batches, outside Faust's per-event path, which
would cost more than the ingest work itself. Workers keep no standby replicas of each other's table
partitions (a standby would read the other workers' changelog through that per-event path); a partition
that moves is recovered from its compacted changelog. Invalid records go to the dead-letter topic
(:mod:`streams.dead_letters`: bounded, with the reason, the source, the original's size and checksum, sent
until stored); a drift detection wakes the retrainer.

Faust's own clients (the changelog's producer and consumer, the group's assignor) authenticate as the
worker's other Kafka clients do: :func:`headroom.kafka_auth.faust_credentials`.

Several workers of one app id share the telemetry partitions. Producers key records by
:func:`contract.telemetry.partition_key` (the pool key), so each pool's records share a partition — its
:func:`~contract.partitions.home_partition` — and one worker holds a pool's whole window. Taking over
partitions, a worker restores their windows, fences every earlier publisher of their pools
(:class:`trainer.publish.FencedPublisher`), reads the newest version of each of those pools' models from
``model-updates`` (so version numbers go on from there) and only then reads telemetry; only the pools it
owns are trained. Drift detectors are not in the changelog: a pool that moves starts with fresh ones.
Before giving partitions up it stops publishing (waiting for a version being written), then writes its
window changes. Every change of ownership is logged (``owning telemetry partitions ...``,
``released telemetry partitions ...``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass

import faust
from confluent_kafka import KafkaException

from headroom.contract.signing import SigningKey, TrustedKeys
from headroom.contract.topics import REASON_HEADER, SOURCE_HEADER, KafkaSettings
from headroom.kafka_auth import faust_credentials
from headroom.model_topic import read_latest
from headroom.streams import metrics
from headroom.streams.consume import IngestLoop
from headroom.streams.dead_letters import DeadLetters
from headroom.streams.ingest import Ingestor, build_ingestor
from headroom.streams.reader import TelemetryReader
from headroom.streams.retrain import Retrainer
from headroom.streams.settings import PipelineSettings
from headroom.streams.windows import WindowKey
from headroom.trainer.live import LiveModels, live_model
from headroom.trainer.publish import FencedPublisher, PublishError

log = logging.getLogger(__name__)

WINDOWS_TABLE = "windows"
__all__ = ["REASON_HEADER", "SOURCE_HEADER", "WINDOWS_TABLE", "Topology", "create_topology"]


@dataclass(frozen=True)
class Topology:
    """The worker's Faust app with its windows table, the consuming loop and the retraining task."""

    app: faust.App
    ingestor: Ingestor
    retrainer: Retrainer
    table: faust.Table
    loop: IngestLoop
    dead_letters: DeadLetters
    publisher: FencedPublisher


def create_topology(kafka: KafkaSettings, settings: PipelineSettings, live: LiveModels, key: SigningKey | None,
                    trust: TrustedKeys, *, store: str = "memory://") -> Topology:
    """The app with its windows table, consuming loop and retraining task; start it with a Faust worker.
    Versions are signed with ``key``; a pool's newest version is read back trusting ``trust``."""
    app = faust.App(
        settings.app_id, broker=f"kafka://{kafka.bootstrap_servers}", store=store,
        broker_credentials=faust_credentials(kafka.security),
        topic_partitions=kafka.telemetry_partitions, web_enabled=False, datadir=str(settings.data_dir),
        producer_acks=-1, producer_linger_ms=5, producer_max_batch_size=256 * 1024, table_standby_replicas=0,
        broker_session_timeout=settings.session_timeout_s, broker_heartbeat_interval=settings.session_timeout_s / 4,
        consumer_group_instance_id=settings.instance_id or None)
    dead_letters = DeadLetters(kafka)
    table = app.Table(WINDOWS_TABLE, default=None, partitions=kafka.telemetry_partitions,
                      key_type=str)  # values: JSON written raw by Windows.flush, read back by Faust's json codec
    changelog_topic = table.changelog_topic.get_topic_name()

    ingestor = build_ingestor(settings)
    publisher = FencedPublisher(kafka, settings.app_id, key)
    retrainer = Retrainer(ingestor, live, publisher, settings)
    held: set[int] = set()  # partitions owned before the latest revocation

    def write_changelog(partition: int, entries: list[tuple[str, bytes | None]]) -> None:
        for key, value in entries:
            if value is None:
                table.data.pop(key, None)
            else:
                table.data[key] = value
            table.send_changelog(partition, key, value, value_serializer="raw")

    def on_drift(window: WindowKey) -> None:
        metrics.DRIFTS.labels(*window).inc()
        log.info("drift on %s/%s: %s", *window, ingestor.policy(window).drift_reason)
        retrainer.wake()

    reader = TelemetryReader(kafka, f"{settings.app_id}-telemetry", batch_records=settings.batch_records)
    loop = IngestLoop(ingestor, reader, flush_records=settings.flush_records,
                      flush_interval_s=settings.flush_interval_s, write_changelog=write_changelog,
                      send_dead_letter=dead_letters.send, on_drift=on_drift)

    @table.on_recover
    async def take_over() -> None:
        owned = {tp.partition for tp in app.assignor.assigned_actives() if tp.topic == changelog_topic}
        rows = ingestor.windows.restore(table.items(), owned)
        try:
            await asyncio.to_thread(publisher.own, owned)
            caught_up = await asyncio.to_thread(catch_up_versions, kafka, live, publisher.home, owned)
        except (PublishError, KafkaException, TimeoutError) as err:
            await asyncio.to_thread(publisher.release)
            log.error("cannot publish for telemetry partitions %s until the next rebalance: %s", sorted(owned), err)
            caught_up = 0
        kept = held & owned
        ingestor.keep_policies(lambda window: publisher.home(window[0]) in kept)
        held.clear()
        held.update(owned)
        log.info("owning telemetry partitions %s: windows restored (%d rows, high-water marks %s), publishing for "
                 "partitions %s, %d model version(s) caught up from %r", sorted(owned), rows,
                 dict(sorted(ingestor.windows.high_water.items())), sorted(publisher.owned), caught_up,
                 kafka.model_topic)
        await loop.own(owned)

    @app.on_partitions_revoked.connect
    async def write_before_revocation(_app: faust.App, revoked: set, **_: object) -> None:
        await asyncio.to_thread(publisher.release)
        await loop.release()
        await app.producer.flush()
        log.info("released telemetry partitions %s", sorted(held))

    @app.task
    async def ingest() -> None:
        try:
            await loop.run()
        finally:
            await reader.close()

    @app.task
    async def deliver_dead_letters() -> None:
        await dead_letters.run()

    @app.task
    async def retrain() -> None:
        await retrainer.run()

    return Topology(app=app, ingestor=ingestor, retrainer=retrainer, table=table, loop=loop,
                    dead_letters=dead_letters, publisher=publisher)


def catch_up_versions(kafka: KafkaSettings, live: LiveModels, home: Callable[[str], int],
                      partitions: Collection[int]) -> int:
    """Offer ``live`` the newest published version of every model of the pools homed in ``partitions``;
    returns how many were newer than what it held."""
    latest, _ = read_latest(kafka, trust)
    return sum(live.offer(live_model(update)) for update in latest.values() if home(update.pool_key) in partitions)
