import dataclasses
import uuid

import pytest

from contract.topics import KafkaSettings
from localkafka.admin import ensure_topics


@pytest.fixture
def pipeline_kafka(kafka: KafkaSettings) -> KafkaSettings:
    """The test broker with this test's own telemetry, dead-letter and model topics (4 telemetry partitions)."""
    tag = uuid.uuid4().hex[:8]
    settings = dataclasses.replace(kafka, telemetry_topic=f"telemetry-{tag}", dlq_topic=f"telemetry-dlq-{tag}",
                                   model_topic=f"model-updates-{tag}", telemetry_partitions=4)
    ensure_topics(settings)
    return settings
