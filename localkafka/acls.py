"""Each component's grants (declared once, in :func:`localkafka.strimzi.grants`) as the ACLs of the local secure
broker: one ALLOW binding per principal, resource and operation, from any host; everything else is denied
(``allow.everyone.if.no.acl.found`` is false). On Kubernetes the same grants are Strimzi ``KafkaUser``
resources (``headroom kafka strimzi``).
"""

from __future__ import annotations

import re

from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

from headroom.contract.topics import KafkaSettings
from headroom.kafka_clients import admin


def bindings(kafka: KafkaSettings, worker_app_id: str) -> list[AclBinding]:
    """The grants of every component as ACL bindings, the principal being ``User:<user name>``."""
    from headroom.localkafka.strimzi import grants

    return [AclBinding(ResourceType[_constant(grant.kind)], grant.name, ResourcePatternType[_PATTERNS[grant.pattern]],
                       f"User:{user}", "*", AclOperation[_constant(operation)], AclPermissionType.ALLOW)
            for user, user_grants in grants(kafka, worker_app_id).items()
            for grant in user_grants for operation in grant.operations]


def apply(admin_kafka: KafkaSettings, kafka: KafkaSettings, worker_app_id: str, timeout_s: float = 30.0) -> int:
    """Create the ACLs (as a super user, ``admin_kafka``); returns how many bindings there are. Idempotent."""
    wanted = bindings(kafka, worker_app_id)
    client = admin(admin_kafka)  # must outlive the futures
    for future in client.create_acls(wanted, request_timeout=timeout_s).values():
        future.result()
    return len(wanted)


_PATTERNS = {"literal": "LITERAL", "prefix": "PREFIXED"}


def _constant(strimzi_name: str) -> str:
    """``DescribeConfigs``, ``transactionalId`` (Strimzi's spelling) -> ``DESCRIBE_CONFIGS``, ``TRANSACTIONAL_ID``
    (the admin client's)."""
    return re.sub(r"(?<=[a-z])(?=[A-Z])", "_", strimzi_name).upper()
