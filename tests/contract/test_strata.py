import pytest

from headroom.contract.strata import all_strata, kv_bucket, prefix_bucket, queue_bucket, stratum_key


@pytest.mark.parametrize(("waiting", "bucket"), [
    pytest.param(0, 0, id="empty"), pytest.param(1, 1, id="1"), pytest.param(2, 1, id="2"),
    pytest.param(3, 2, id="3"), pytest.param(5, 2, id="5"), pytest.param(6, 3, id="6"),
    pytest.param(10, 3, id="10"), pytest.param(11, 4, id="11"), pytest.param(500, 4, id="500"),
])
def test_queue_bucket(waiting, bucket):
    assert queue_bucket(waiting) == bucket


def test_queue_bucket_rejects_negative():
    with pytest.raises(ValueError, match="must not be negative"):
        queue_bucket(-1)


@pytest.mark.parametrize(("kv", "bucket"), [
    pytest.param(0.0, 0, id="0"), pytest.param(0.0499, 0, id="just-under-5%"), pytest.param(0.05, 1, id="5%"),
    pytest.param(0.15, 3, id="15%-binary-rounding"), pytest.param(0.35, 7, id="35%"),
    pytest.param(0.999, 19, id="99.9%"), pytest.param(1.0, 19, id="full"),
])
def test_kv_bucket(kv, bucket):
    assert kv_bucket(kv) == bucket


@pytest.mark.parametrize(("prefix", "bucket"), [
    pytest.param(0.0, 0, id="none"), pytest.param(0.2499, 0, id="under-quarter"), pytest.param(0.25, 1, id="quarter"),
    pytest.param(0.5, 2, id="half"), pytest.param(0.75, 3, id="three-quarters"), pytest.param(1.0, 3, id="all"),
])
def test_prefix_bucket(prefix, bucket):
    assert prefix_bucket(prefix) == bucket


@pytest.mark.parametrize(("waiting", "kv", "prefix", "key"), [
    pytest.param(0, 0.0, 0.0, "q0/kv00/pm0", id="idle"),
    pytest.param(2, 0.42, 0.5, "q1-2/kv40/pm2", id="light"),
    pytest.param(7, 0.951, 0.99, "q6-10/kv95/pm3", id="busy"),
    pytest.param(40, 1.0, 0.1, "q11+/kv95/pm0", id="saturated"),
])
def test_stratum_key(waiting, kv, prefix, key):
    assert stratum_key(num_waiting=waiting, kv_cache_usage=kv, prefix_match=prefix) == key


def test_there_are_400_distinct_strata_and_every_key_is_one_of_them():
    strata = all_strata()
    assert len(strata) == len(set(strata)) == 400
    keys = {stratum_key(num_waiting=w, kv_cache_usage=k / 100, prefix_match=p / 8)
            for w in range(15) for k in range(101) for p in range(9)}
    assert keys == set(strata)
