"""Fetching the Kafka broker's jars from Maven Central, once per Kafka version, with Maven and infra/kafka/pom.xml."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from headroom.localkafka.errors import BrokerError, PrerequisiteMissing
from headroom.localkafka.settings import BrokerSettings

MIN_JAVA = 17


def kafka_version(settings: BrokerSettings) -> str:
    """The Kafka version the POM asks for (the POM is the one place it is written)."""
    pom = (settings.infra_dir / "pom.xml").read_text()
    found = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", pom)
    if not found:
        raise BrokerError(f"{settings.infra_dir / 'pom.xml'} does not declare <kafka.version>")
    return found.group(1)


def jar_dir(settings: BrokerSettings) -> Path:
    """The cached jar folder, fetching it first if needed."""
    target = settings.jar_cache / kafka_version(settings) / "lib"
    if (target / ".complete").exists():
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise PrerequisiteMissing("Maven (mvn) is needed once to fetch the Kafka broker jars from Maven Central; "
                                  "install it (e.g. apt-get install maven) or put it on PATH")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="lib-", dir=target.parent))
    done = subprocess.run(
        [mvn, "-q", "-B", "-f", str(settings.infra_dir / "pom.xml"), "dependency:copy-dependencies",
         f"-DoutputDirectory={staging}"], capture_output=True, text=True)
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise BrokerError(f"Maven could not fetch the Kafka jars (exit {done.returncode}):\n"
                          f"{(done.stdout + done.stderr)[-3000:]}")
    (staging / ".complete").touch()
    staging.chmod(0o755)  # mkdtemp makes it private; the cache may serve other users (an image's runtime user)
    try:
        staging.rename(target)
    except OSError:  # another process finished the same fetch first
        shutil.rmtree(staging, ignore_errors=True)
    return target


def java_command() -> str:
    """The ``java`` executable, checked to be version 17 or newer."""
    java = shutil.which("java")
    if java is None:
        raise PrerequisiteMissing(f"Java {MIN_JAVA}+ is needed to run the Kafka broker; no `java` on PATH "
                                  "(install e.g. openjdk-17-jre-headless)")
    shown = subprocess.run([java, "-version"], capture_output=True, text=True)
    found = re.search(r'version "(\d+)(?:\.(\d+))?', shown.stderr + shown.stdout)
    if not found:
        raise PrerequisiteMissing(f"could not read the Java version from `{java} -version`")
    major = int(found.group(1))
    if major == 1:  # "1.8" style
        major = int(found.group(2) or 0)
    if major < MIN_JAVA:
        raise PrerequisiteMissing(f"Java {MIN_JAVA}+ is needed to run the Kafka broker; {java} is Java {major}")
    return java
