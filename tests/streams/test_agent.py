"""The ingest agent driven through Faust's test context; dead letters go to a real topic on the test broker."""

import asyncio
import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition

from contract.telemetry import encode
from streams.app import REASON_HEADER, SOURCE_HEADER, create_pipeline
from streams.settings import PipelineSettings
from tests.contract.records import valid_record
from trainer.live import LiveModels

pytestmark = pytest.mark.kafka


def dead_letters(kafka, expected: int) -> list[tuple[bytes, dict[str, bytes]]]:
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": f"t-{uuid.uuid4()}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(kafka.dlq_topic, 0, 0)])
    found = []
    for _ in range(40):
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            found.append((message.value(), dict(message.headers() or [])))
        if len(found) >= expected:
            break
    consumer.close()
    return found


def test_bad_records_go_to_the_dead_letter_topic_with_reason_and_original_bytes(pipeline_kafka, tmp_path):
    settings = PipelineSettings(app_id=f"agent-{uuid.uuid4().hex[:8]}", data_dir=tmp_path)
    pipeline = create_pipeline(pipeline_kafka, settings, LiveModels(), publisher=None)
    garbage = [b"{not json", encode(valid_record(kv_cache_usage=1.5)), encode(valid_record()).replace(b'"num_waiting":2', b'"num_waiting":"2"')]

    async def drive():
        pipeline.app.finalize()
        pipeline.app.flow_control.resume()
        agent = pipeline.app.agents["headroom.ingest"]
        try:
            async with agent.test_context() as context:
                await context.put(garbage[0])
                await context.put(encode(valid_record()))
                for raw in garbage[1:]:
                    await context.put(raw)
                for _ in range(100):  # put() returns before the agent body has finished the last value
                    if pipeline.ingestor.windows.high_water.get(0) == 3:
                        break
                    await asyncio.sleep(0.05)
                await pipeline.app.producer.flush()
        finally:
            await pipeline.app.producer.stop()

    loop = pipeline.app.loop
    try:
        loop.run_until_complete(asyncio.wait_for(drive(), 60))
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
        pipeline.app.consumer._thread.thread_loop.close()  # the consumer thread's loop, never started here
    letters = dead_letters(pipeline_kafka, len(garbage))
    assert [value for value, _ in letters] == garbage
    reasons = [headers[REASON_HEADER].decode() for _, headers in letters]
    assert "not valid JSON" in reasons[0] and "kv_cache_usage" in reasons[1] and "num_waiting" in reasons[2]
    assert [headers[SOURCE_HEADER].rsplit(b"/", 2)[1:] for _, headers in letters] == [[b"0", b"0"], [b"0", b"2"], [b"0", b"3"]]
    assert pipeline.ingestor.windows.size(("h100/llama3-8b", "ttft")) == 1
    assert pipeline.ingestor.windows.high_water == {0: 3}
