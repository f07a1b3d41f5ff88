# One image for every headroom process; the command picks the component:
#   headroom router serve --config ... | headroom predictor serve | headroom worker start | headroom models tail ...
#
#   docker build -t headroom .                             # the image the Helm chart runs (no Java: the
#                                                          # processes are Kafka clients, not brokers)
#   docker build -t headroom-local --target local-broker .  # + Java 17 and the Kafka broker jars, only
#                                                          # for `headroom kafka up` inside a container
#   docker build -t headroom-llmd --target llmd-sidecars .  # llm-d's latency predictor sidecars, started
#                                                          # as its Helm chart starts them (docs/llm-d-drop-in.md)
#
# Runs as an unprivileged user with a read-only root filesystem: everything a process writes (Faust's
# data, a local broker's data) goes under /var/lib/headroom (mount a volume there) or /tmp.
# infra/image/build-wheels and infra/image/install are the two build steps; the standalone-install test
# runs the same two scripts.

ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm
ARG RUST_IMAGE=rust:1.88-slim-bookworm

FROM ${RUST_IMAGE} AS rust

# The wheels, headroom's with its compiled parts (native/: Rust and a C compiler, build stage only).
FROM ${PYTHON_IMAGE} AS wheels
COPY --from=rust /usr/local/cargo /usr/local/cargo
COPY --from=rust /usr/local/rustup /usr/local/rustup
ENV CARGO_HOME=/usr/local/cargo RUSTUP_HOME=/usr/local/rustup PATH=/usr/local/cargo/bin:$PATH
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN infra/image/build-wheels /src /wheels

FROM ${PYTHON_IMAGE} AS runtime
COPY --from=wheels /wheels /wheels
COPY infra/image/install /usr/local/bin/headroom-install
RUN headroom-install /wheels /opt/headroom && rm -rf /wheels /usr/local/bin/headroom-install \
    && groupadd --gid 10001 headroom \
    && useradd --uid 10001 --gid headroom --no-create-home --home-dir /var/lib/headroom --shell /usr/sbin/nologin headroom \
    && mkdir -p /var/lib/headroom && chown headroom:headroom /var/lib/headroom
ENV PATH=/opt/headroom/bin:$PATH \
    HOME=/var/lib/headroom \
    HEADROOM_STATE_DIR=/var/lib/headroom \
    MPLCONFIGDIR=/tmp/matplotlib \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001:10001
WORKDIR /var/lib/headroom
ENTRYPOINT ["headroom"]
CMD ["--help"]

# The broker jars, fetched from Maven Central with the POM the package carries.
FROM runtime AS broker-jars
USER root
RUN apt-get update && apt-get install -y --no-install-recommends maven openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*
ENV HEADROOM_KAFKA_JAR_CACHE=/opt/kafka-jars
RUN python -c "from headroom.contract.settings import from_env; from headroom.localkafka import jars; \
from headroom.localkafka.settings import BrokerSettings; print(jars.jar_dir(from_env(BrokerSettings)))"

# `headroom kafka up` inside a container: Java 17 and the jars, no Maven.
FROM runtime AS local-broker
USER root
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*
COPY --from=broker-jars /opt/kafka-jars /opt/kafka-jars
ENV HEADROOM_KAFKA_JAR_CACHE=/opt/kafka-jars
USER 10001:10001

# llm-d's latency predictor sidecars: the reference's Helm chart runs `uvicorn prediction_server:app ...` for
# each prediction sidecar and the image's own command for the training sidecar; both are
# `headroom llmd sidecar` here (SERVER_TYPE tells them apart).
FROM runtime AS llmd-sidecars
COPY infra/image/uvicorn /usr/local/bin/uvicorn
ENTRYPOINT ["headroom", "llmd", "sidecar", "--"]
CMD []

# The default target: the image without Java.
FROM runtime
