from headroom.process import configure


def test_the_defaults_go_into_the_environment():
    environ = {"HOME": "/home/someone"}
    settings = configure(environ)
    assert environ["OMP_WAIT_POLICY"] == settings.omp_wait_policy == "PASSIVE"


def test_a_value_already_in_the_environment_wins():
    environ = {"OMP_WAIT_POLICY": "ACTIVE"}
    configure(environ)
    assert environ == {"OMP_WAIT_POLICY": "ACTIVE"}
