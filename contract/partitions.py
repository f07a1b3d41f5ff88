"""Which telemetry partition a pool's records land on, and so which worker owns the pool.

Telemetry is keyed by pool (:func:`contract.telemetry.partition_key`), and Kafka's default partitioner
sends a keyed record to ``murmur2(key) mod partitions`` — Java clients, aiokafka, and librdkafka with
``partitioner=murmur2_random`` (:data:`PARTITIONER`, which every producer headroom makes uses) all agree.
:func:`home_partition` computes the same partition, so a worker can tell, without reading a record, which
pools it owns: those whose home partition is assigned to it. Only the owner of a pool's home partition
trains and publishes the pool's models.

>>> home_partition("pool-a", 4), home_partition("h100", 4), home_partition("pool-b", 12)
(2, 1, 9)
"""

from __future__ import annotations

from typing import Final

PARTITIONER: Final = "murmur2_random"  # librdkafka's name for the Java client's default partitioner
_SEED, _M, _MASK = 0x9747B28C, 0x5BD1E995, 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """MurmurHash2 of ``data``, 32 bits, exactly as Kafka's Java client computes it (``Utils.murmur2``)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length % 4
    if tail:
        if tail == 3:
            h ^= data[whole + 2] << 16
        if tail >= 2:
            h ^= data[whole + 1] << 8
        h = ((h ^ data[whole]) * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    return h ^ (h >> 15)


def home_partition(pool_key: str, partitions: int) -> int:
    """The telemetry partition the records of ``pool_key`` land on, of ``partitions``."""
    if partitions < 1:
        raise ValueError(f"a topic has at least one partition, got {partitions}")
    return (murmur2(pool_key.encode()) & 0x7FFFFFFF) % partitions
