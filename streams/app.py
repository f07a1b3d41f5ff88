"""The Faust app: telemetry in, dead letters and window changelog out, retraining alongside.

The agent is thin: it hands each message to :class:`~streams.ingest.Ingestor` and acts on the result — a
dead letter carrying the original bytes and the reason in headers, a wake-up of the retrainer when drift
was detected. Every few hundred records (or fraction of a second) per partition it writes the window
changes to the changelog of the ``windows`` table and only then acknowledges those records, so the
committed offsets never run ahead of the persisted windows. The writes go to the partition the records
came from, as Faust's own table writes would, but in batches and also from a timer, so a quiet partition
is flushed too. When
the table has been recovered from its changelog (at start-up and after rebalances) the in-memory windows
are rebuilt from it.

Telemetry producers should key records by pool key, so each pool's records share a partition and one
worker holds a pool's whole window.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import faust

from contract.topics import KafkaSettings
from streams import metrics
from streams.ingest import Ingestor, build_ingestor
from streams.retrain import Publisher, Retrainer
from streams.settings import PipelineSettings
from trainer.live import LiveModels

log = logging.getLogger(__name__)

REASON_HEADER = "headroom-reject-reason"
SOURCE_HEADER = "headroom-source"  # topic/partition/offset of the original record
WINDOWS_TABLE = "windows"


@dataclass(frozen=True)
class Pipeline:
    app: faust.App
    ingestor: Ingestor
    retrainer: Retrainer
    table: faust.Table


def create_pipeline(kafka: KafkaSettings, settings: PipelineSettings, live: LiveModels,
                    publisher: Publisher, *, store: str = "memory://") -> Pipeline:
    """The app with its agent, windows table and retraining task; start it with a Faust worker."""
    app = faust.App(
        settings.app_id, broker=f"kafka://{kafka.bootstrap_servers}", store=store,
        topic_partitions=kafka.telemetry_partitions, web_enabled=False, datadir=str(settings.data_dir),
        consumer_auto_offset_reset="earliest", producer_acks=-1, producer_linger_ms=5,
        producer_max_batch_size=256 * 1024)
    telemetry = app.topic(kafka.telemetry_topic, key_serializer="raw", value_serializer="raw",
                          partitions=kafka.telemetry_partitions)
    dead_letters = app.topic(kafka.dlq_topic, key_serializer="raw", value_serializer="raw")
    table = app.Table(WINDOWS_TABLE, default=None, partitions=kafka.telemetry_partitions,
                      key_type=str)  # values: JSON written raw by Windows.flush, read back by Faust's json codec

    ingestor = build_ingestor(settings)
    retrainer = Retrainer(ingestor, live, publisher, settings)

    @table.on_recover
    async def rebuild_windows() -> None:
        rows = ingestor.windows.restore(table.items())
        log.info("windows rebuilt from the changelog: %d rows, high-water marks %s", rows,
                 dict(sorted(ingestor.windows.high_water.items())))

    unflushed: dict[int, list[faust.EventT]] = {}  # per partition: processed, not yet acknowledged
    flushed_at: dict[int, float] = {}
    manual: list[faust.StreamT] = []  # the agent's stream, acknowledged by hand

    async def flush(partition: int) -> None:
        """Write a partition's window changes to the changelog, then acknowledge its records."""
        events, unflushed[partition] = unflushed.get(partition, []), []
        flushed_at[partition] = time.monotonic()
        for key, value in ingestor.windows.flush(partition):
            if value is None:
                table.data.pop(key, None)
            else:
                table.data[key] = value
            table.send_changelog(partition, key, value, value_serializer="raw")
        for event in events:
            await manual[0].ack(event)

    @app.agent(telemetry, name="headroom.ingest")
    async def ingest(stream: faust.StreamT) -> None:
        manual[:] = [stream.noack()]  # a record is acknowledged only once its window rows are in the changelog
        async for event in manual[0].events():
            message = event.message
            unflushed.setdefault(message.partition, []).append(event)
            result = ingestor.ingest(event.value, message.partition, message.offset)
            if result.duplicate:
                metrics.DUPLICATES.inc()
            elif result.rejection is not None:
                metrics.DEAD_LETTERS.inc()
                await dead_letters.send(key=message.key, value=event.value, headers=[
                    (REASON_HEADER, result.rejection.encode()),
                    (SOURCE_HEADER, f"{message.topic}/{message.partition}/{message.offset}".encode())])
            else:
                metrics.INGESTED.inc()
            for window in result.drifted:
                metrics.DRIFTS.labels(*window).inc()
                log.info("drift on %s/%s: %s", *window, ingestor.policy(window).drift_reason)
                retrainer.wake()
            if len(unflushed[message.partition]) >= settings.flush_records:
                await flush(message.partition)

    @app.timer(settings.flush_interval_s)
    async def flush_quiet_partitions() -> None:
        now = time.monotonic()
        for partition, events in list(unflushed.items()):
            if events and now - flushed_at.get(partition, 0.0) >= settings.flush_interval_s:
                await flush(partition)

    @app.task
    async def retrain() -> None:
        await retrainer.run()

    return Pipeline(app=app, ingestor=ingestor, retrainer=retrainer, table=table)
