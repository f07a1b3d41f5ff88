from pathlib import Path

from headroom.process import configure


def test_the_defaults_go_into_the_environment():
    environ = {"HOME": "/home/someone"}
    settings = configure(environ)
    assert environ["OMP_WAIT_POLICY"] == "PASSIVE"
    assert Path(environ["NUMBA_CACHE_DIR"]) == settings.numba_cache_dir
    assert settings.numba_cache_dir.parts[-2:] == ("headroom", "numba")


def test_a_value_already_in_the_environment_wins():
    environ = {"OMP_WAIT_POLICY": "ACTIVE", "NUMBA_CACHE_DIR": "/var/cache/kernels"}
    configure(environ)
    assert environ == {"OMP_WAIT_POLICY": "ACTIVE", "NUMBA_CACHE_DIR": "/var/cache/kernels"}
