"""The local broker's files — ``pom.xml`` (the broker jars), ``server.properties`` (KRaft, loopback) and
``log4j2.yaml`` — installed as package data of ``headroom.localkafka.infra`` so ``headroom kafka up``
finds them in a source checkout and in an installed wheel alike."""
