import pytest

from headroom.contract.topics import TopicSpec
from headroom.topic_drift import TopicDrift, compare

SPEC = TopicSpec("model-updates", 2, {"cleanup.policy": "compact", "segment.ms": "3600000"})


@pytest.mark.parametrize("partitions, configs, expected", [
    (2, {"cleanup.policy": "compact", "segment.ms": "3600000", "retention.ms": "1"}, None),
    (3, {"cleanup.policy": "compact", "segment.ms": "3600000"}, None),
    (2, {"cleanup.policy": "delete", "segment.ms": "3600000"},
     TopicDrift("model-updates", {"cleanup.policy": ("delete", "compact")})),
    (2, {"cleanup.policy": "compact"}, TopicDrift("model-updates", {"segment.ms": (None, "3600000")})),
    (1, {"cleanup.policy": "compact", "segment.ms": "3600000"}, TopicDrift("model-updates", {}, (1, 2))),
], ids=["matches, undeclared keys ignored", "more partitions", "other value", "unset key", "fewer partitions"])
def test_compare(partitions, configs, expected):
    assert compare(SPEC, partitions, configs) == expected


def test_describe_names_every_difference():
    text = TopicDrift("t", {"cleanup.policy": ("delete", "compact"), "segment.ms": (None, "1")}, (1, 4)).describe()
    assert "cleanup.policy=delete (declared compact)" in text
    assert "segment.ms=(unset) (declared 1)" in text
    assert "1 partitions (declared 4" in text
