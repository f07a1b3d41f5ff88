"""The Faust app: the assignment of telemetry partitions to workers, the consuming loop, retraining alongside.

Faust does one thing here: it is the consumer group of the workers of an app id and assigns them the
partitions of a table (``assignment``, which holds nothing) that has one partition per telemetry
partition; table partition ``p`` stands for telemetry partition ``p``. Everything else runs outside
Faust's per-event path, which would cost more than the ingest work itself: the worker reads its telemetry
partitions in batches (:mod:`streams.consume`, :mod:`streams.reader`) and keeps its windows in
``<app id>-windows-changelog`` (:mod:`streams.state_topic`), writing them in the transactions of the
partitions it owns (:mod:`streams.ownership`). A worker with an instance id is a static member of the group:
restarted, it takes its partitions back without a rebalance. Invalid records go to the dead-letter topic in the
same transactions (:func:`streams.dead_letters.letter_of`: bounded, with the reason, the source, the original's
size and checksum; a letter the topic refuses for its size is written again without the original's bytes); a
drift detection wakes the retrainer. Beside them, the model guard (:mod:`streams.model_guard`) puts a model's
newest version back on ``model-updates`` when anything else lands under its key.

Faust's own clients (the group's consumer and assignor) authenticate as the
worker's other Kafka clients do: :func:`headroom.kafka_auth.faust_credentials`.

Producers key records by :func:`contract.telemetry.partition_key` (the pool key), so each pool's records
share a partition — its :func:`~contract.partitions.home_partition` — and one worker holds a pool's whole
window. As soon as Faust assigns a worker partitions, it fences their earlier owners (blocking: nothing
else runs meanwhile); then it restores their windows from what is committed on the windows' changelog,
reads the newest version of each of their pools' models from ``model-updates`` (so version numbers go on
from there), and reads telemetry from one past each high-water mark. Only the pools it owns are trained.
Drift detectors are not in the changelog: a pool that moves starts with fresh ones. Before giving
partitions up, a worker writes its window changes, then stops writing. Every change of ownership is
logged (``owning telemetry partitions ...``, ``released telemetry partitions ...``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass

import faust
from confluent_kafka import KafkaException
from faust.types import TP

from headroom.contract.signing import SigningKey, TrustedKeys
from headroom.contract.topics import KafkaSettings
from headroom.kafka_auth import faust_credentials
from headroom.model_topic import read_latest
from headroom.streams.consume import Entries, IngestLoop, Letters
from headroom.streams.dead_letters import Letter, letter_of, refused_for_size, without_original
from headroom.streams.ingest import Ingestor, build_ingestor
from headroom.streams.metrics import WORKER
from headroom.streams.model_guard import ModelGuard
from headroom.streams.ownership import FencedPublisher, Message, PartitionOwnership
from headroom.streams.reader import TelemetryReader
from headroom.streams.retrain import Retrainer
from headroom.streams.settings import PipelineSettings
from headroom.streams.state_topic import entry_key, read_state, state_topic
from headroom.streams.windows import WindowKey
from headroom.trainer.live import LiveModels, live_model
from headroom.trainer.publish import PublishError, PublishFenced

log = logging.getLogger(__name__)

ASSIGNMENT_TABLE = "assignment"


class WorkerApp(faust.App):
    """A Faust app that, stopping gracefully, runs :attr:`before_leaving` before it leaves the group (Faust
    signals revocation only for rebalances, and its stop signals come after the consumer has left)."""

    before_leaving: Callable[[], Awaitable[None]] | None = None

    async def on_stop(self) -> None:
        if self.before_leaving is not None:
            await self.before_leaving()
        await super().on_stop()


@dataclass(frozen=True)
class Topology:
    """The worker's Faust app, its consuming loop and retraining task, and what it owns."""

    app: faust.App
    ingestor: Ingestor
    retrainer: Retrainer
    loop: IngestLoop
    ownership: PartitionOwnership


def create_topology(kafka: KafkaSettings, settings: PipelineSettings, live: LiveModels, key: SigningKey | None,
                    trust: TrustedKeys, *, store: str = "memory://") -> Topology:
    """The app with its consuming loop and retraining task; start it with a Faust worker (the windows'
    changelog topic must exist: :func:`streams.state_topic.state_spec`). Versions are signed
    with ``key``; a pool's newest version is read back trusting ``trust``."""
    app = WorkerApp(
        settings.app_id, broker=f"kafka://{kafka.bootstrap_servers}", store=store,
        broker_credentials=faust_credentials(kafka.security),
        topic_partitions=kafka.telemetry_partitions, web_enabled=False, datadir=str(settings.data_dir),
        producer_acks=-1, producer_linger_ms=5, producer_max_batch_size=256 * 1024, table_standby_replicas=0,
        broker_session_timeout=settings.session_timeout_s, broker_heartbeat_interval=settings.session_timeout_s / 4,
        consumer_group_instance_id=settings.instance_id or None)
    assignment = app.Table(ASSIGNMENT_TABLE, default=None, partitions=kafka.telemetry_partitions)
    assigned_topic = assignment.changelog_topic.get_topic_name()
    windows_topic = state_topic(settings.app_id)

    ingestor = build_ingestor(settings)
    ownership = PartitionOwnership(kafka, settings.app_id)
    publisher = FencedPublisher(ownership, kafka, key)
    retrainer = Retrainer(ingestor, live, publisher, settings)
    guard = ModelGuard(kafka, trust, live, publisher)
    held: set[int] = set()  # partitions owned now
    previously: set[int] = set()  # partitions owned before the latest revocation

    refused: set[tuple[int, int]] = set()  # (partition, offset) of records whose letters go without their bytes

    async def write(partition: int, entries: Entries, letters: Letters) -> None:
        sources = [(delivery.partition, delivery.offset) for delivery, _ in letters]
        dead = [letter_of(delivery, reason, kafka.telemetry_topic) for delivery, reason in letters]
        dead = [without_original(letter) if source in refused else letter for source, letter in zip(sources, dead)]
        changes = [Message(windows_topic, entry_key(key), value, partition) for key, value in entries]
        try:
            await asyncio.to_thread(ownership.write, partition, [*map(dead_letter_message, dead), *changes])
        except PublishError as err:
            if dead and not isinstance(err, PublishFenced) and refused_for_size(err):
                refused.update(sources)  # the loop writes them again at its next flush, smaller
                WORKER.dead_letter_failures.labels("too_large").inc()
                log.warning("telemetry partition %d: the dead-letter topic refused a dead letter for its size; its "
                            "reason, source, size and checksum are written again without the original's bytes",
                            partition)
            raise
        refused.difference_update(sources)

    def dead_letter_message(letter: Letter) -> Message:
        return Message(kafka.dlq_topic, letter.key, letter.value, headers=letter.headers)

    def on_drift(window: WindowKey) -> None:
        WORKER.drifts.labels(*window).inc()
        log.info("drift on %s/%s: %s", *window, ingestor.policy(window).drift_reason)
        retrainer.wake()

    reader = TelemetryReader(kafka, f"{settings.app_id}-telemetry", batch_records=settings.batch_records)
    loop = IngestLoop(ingestor, reader, flush_records=settings.flush_records,
                      flush_interval_s=settings.flush_interval_s, write=write, on_drift=on_drift)

    def actives() -> set[int]:
        return {tp.partition for tp in app.assignor.assigned_actives() if tp.topic == assigned_topic}

    @app.on_partitions_assigned.connect  # type: ignore[arg-type]  # mode's handler type demands *args faust never sends
    async def fence(_app: faust.App, assigned: set[TP], **_: object) -> None:
        """Take the partitions over at once, before anything reads their windows (blocking: nothing else runs)."""
        try:
            ownership.fence(actives())
        except PublishError as err:
            log.error("%s; they stay unread until the next rebalance", err)

    @assignment.on_recover
    async def take_over() -> None:
        taken = actives() & ownership.taken
        try:
            state = await asyncio.to_thread(read_state, kafka, windows_topic, taken)
            caught_up = await asyncio.to_thread(catch_up_versions, kafka, trust, live, ownership.home, taken)
        except (KafkaException, TimeoutError) as err:
            log.error("cannot take over telemetry partitions %s until the next rebalance: %s", sorted(taken), err)
            await asyncio.to_thread(ownership.release)
            taken, state, caught_up = set(), {}, 0
        rows = ingestor.windows.restore(state.items(), taken)
        kept = previously & taken
        ingestor.keep_policies(lambda window: ownership.home(window[0]) in kept)
        previously.clear()
        previously.update(taken)
        owned = await asyncio.to_thread(ownership.open)
        held.update(owned)
        log.info("owning telemetry partitions %s: windows restored (%d rows, high-water marks %s), %d model "
                 "version(s) caught up from %r", sorted(owned), rows, dict(sorted(ingestor.windows.high_water.items())),
                 caught_up, kafka.model_topic)
        await loop.own(owned)

    @app.on_partitions_revoked.connect  # type: ignore[arg-type]  # as above
    async def write_before_revocation(_app: faust.App, revoked: set[TP], **_: object) -> None:
        await give_up()

    async def give_up() -> None:
        await loop.release()
        await asyncio.to_thread(ownership.release)
        if held:
            log.info("released telemetry partitions %s", sorted(held))
            held.clear()

    async def leave() -> None:
        await give_up()
        await asyncio.to_thread(guard.stop)

    app.before_leaving = leave

    @app.task  # type: ignore[untyped-decorator]  # faust's decorators are untyped
    async def ingest() -> None:
        try:
            await loop.run()
        finally:
            await reader.close()

    @app.task  # type: ignore[untyped-decorator]  # faust's decorators are untyped
    async def retrain() -> None:
        await retrainer.run()

    @app.task  # type: ignore[untyped-decorator]  # faust's decorators are untyped
    async def keep_models() -> None:
        guard.start()  # a thread of its own (streams.model_guard), stopped before the worker leaves

    return Topology(app=app, ingestor=ingestor, retrainer=retrainer, loop=loop, ownership=ownership)


def catch_up_versions(kafka: KafkaSettings, trust: TrustedKeys, live: LiveModels, home: Callable[[str], int],
                      partitions: Collection[int]) -> int:
    """Offer ``live`` the newest published version trusted by ``trust`` of every model of the pools homed in
    ``partitions``; returns how many were newer than what it held."""
    latest, _ = read_latest(kafka, trust)
    return sum(live.offer(live_model(update)) for update in latest.values() if home(update.pool_key) in partitions)
