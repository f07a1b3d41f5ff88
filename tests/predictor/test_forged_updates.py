"""The forged-model attack: someone who can write to ``model-updates`` publishes an h100 TTFT model of their own
— a consistent header and sha256, a high version — meant to steer SLO traffic. Unsigned, signed by their own
key, or carrying a trusted key's id over a signature they cannot make, it is rejected with a counted reason
and the old model keeps serving; so is an older, genuinely signed update replayed to roll the model back.
Key rotation: a reader trusting the old and the new key serves both; one trusting only the new key does not
take the old one's models. The last test makes the attack through the real broker against a real server."""

import time

import numpy as np
import pytest

from headroom import kafka_clients
from headroom.contract.signing import SIGNED_MAGIC, SigningKey, TrustedKeys
from headroom.predictor.runtime import ApplyOutcome, ModelRuntime
from tests.keys import NEXT_KEY, TEST_KEY, TRUST
from tests.predictor.models import candidate_rows, message, train

ROWS = candidate_rows(40, seed=5)


@pytest.fixture(scope="module")
def boosters():
    return {"honest": train(seed=1), "newer": train(seed=2), "forged": train(seed=3, scale=0.01)}


def forgeries(boosters) -> dict[str, tuple[bytes, str]]:
    """Each way of publishing the forged model (version 999), and the reason it must be rejected for."""
    forged = message(boosters["forged"], 999, pool_key="h100", key=None)
    signed_by_trusted = message(boosters["honest"], 999, pool_key="h100")
    return {
        "unsigned": (forged, "unsigned"),
        "signed by the attacker's key": (SigningKey.generate().sign(forged), "unknown-key"),
        "trusted key id, made-up signature": (SIGNED_MAGIC + bytes.fromhex(TEST_KEY.key_id) + bytes(64) + forged,
                                              "bad-signature"),
        "a trusted signature over another message": (signed_by_trusted[:76] + forged, "bad-signature"),
        "a genuine older version replayed": (message(boosters["honest"], 1, pool_key="h100"), "replayed"),
    }


def test_forged_models_are_rejected_by_reason_and_the_old_model_keeps_serving(boosters):
    runtime = ModelRuntime(trust=TRUST)
    assert runtime.apply(message(boosters["honest"], 1, pool_key="h100")).outcome is ApplyOutcome.APPLIED
    assert runtime.apply(message(boosters["newer"], 2, pool_key="h100")).outcome is ApplyOutcome.APPLIED
    serving = runtime.predict("h100", ROWS).get("ttft").copy()
    for name, (raw, reason) in forgeries(boosters).items():
        result = runtime.apply(raw)
        assert (result.outcome, result.reason) == (ApplyOutcome.REJECTED, reason), name
        assert runtime.version("h100", "ttft", "mean") == 2, name
        np.testing.assert_array_equal(runtime.predict("h100", ROWS).get("ttft"), serving)
    assert runtime.rejected == {"unsigned": 1, "unknown-key": 1, "bad-signature": 2, "replayed": 1}
    assert [m.signer for m in runtime.live()] == [TEST_KEY.key_id]


def test_rotation_with_two_trusted_keys(boosters):
    both = ModelRuntime(trust=TrustedKeys([TEST_KEY.public_key, NEXT_KEY.public_key]))
    assert both.apply(message(boosters["honest"], 1, key=TEST_KEY)).outcome is ApplyOutcome.APPLIED
    assert both.apply(message(boosters["newer"], 2, key=NEXT_KEY)).outcome is ApplyOutcome.APPLIED
    assert both.live()[0].signer == NEXT_KEY.key_id
    retired = ModelRuntime(trust=TrustedKeys([NEXT_KEY.public_key]))
    assert retired.apply(message(boosters["honest"], 3, key=TEST_KEY)).reason == "unknown-key"
    assert retired.apply(message(boosters["newer"], 2, key=NEXT_KEY)).outcome is ApplyOutcome.APPLIED


@pytest.mark.kafka
def test_the_attack_through_the_broker_against_a_serving_predictor(pipeline_kafka, start_server, boosters):
    producer = kafka_clients.producer(pipeline_kafka, {"message.max.bytes": 16 * 1024 * 1024})

    def publish(raw: bytes) -> None:
        producer.produce(pipeline_kafka.model_topic, key=b"h100/ttft/mean", value=raw)
        assert producer.flush(10) == 0

    publish(message(boosters["honest"], 1, pool_key="h100"))
    publish(message(boosters["newer"], 2, pool_key="h100"))
    server = start_server(kafka=pipeline_kafka, runtime=ModelRuntime(trust=TRUST))
    assert server.tailer.wait_ready(30)
    serving = server.runtime.predict("h100", ROWS).get("ttft").copy()
    attacks = forgeries(boosters)
    for raw, _ in attacks.values():
        publish(raw)
    deadline = time.monotonic() + 30
    while sum(server.runtime.rejected.values()) < len(attacks) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.runtime.rejected == {"unsigned": 1, "unknown-key": 1, "bad-signature": 2, "replayed": 1}
    assert server.runtime.version("h100", "ttft", "mean") == 2
    np.testing.assert_array_equal(server.runtime.predict("h100", ROWS).get("ttft"), serving)
    restarted = start_server(kafka=pipeline_kafka, runtime=ModelRuntime(trust=TRUST))  # replays the whole topic
    assert restarted.tailer.wait_ready(30)
    assert restarted.runtime.version("h100", "ttft", "mean") == 2
    assert restarted.runtime.rejected == server.runtime.rejected
