"""``headroom models list|tail|keygen|export`` — the model versions on ``model-updates``, each shown with the
key that signed it (checked against HEADROOM_MODEL_TRUSTED_KEYS), the key pairs that sign them, and the
newest trusted versions written to files as they were signed."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from headroom.certificates import write_signing_key
from headroom.cli.environment import reads
from headroom.contract.model_update import ModelUpdate
from headroom.contract.settings import SettingsError, from_env
from headroom.contract.signing import SigningKey, SigningSettings, TrustedKeys
from headroom.contract.topics import KafkaSettings
from headroom.errors import CommandError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = subparsers.add_parser("models", help="show the latency model versions published on model-updates")
    commands = group.add_subparsers(dest="models_command", required=True, metavar="ACTION")
    listing = commands.add_parser("list", help="the latest trusted version of every model",
                                  **reads(KafkaSettings, SigningSettings))
    listing.add_argument("--bootstrap", help="Kafka bootstrap servers (overrides HEADROOM_KAFKA_BOOTSTRAP)")
    listing.set_defaults(run=run_list)
    keygen = commands.add_parser("keygen", help="write an Ed25519 key pair that signs model updates")
    keygen.add_argument("--out", type=Path, required=True, help="directory for <name>.key (private, mode 0600) "
                        "and <name>.pub")
    keygen.add_argument("--name", default="model-signing", help="file name of the pair (default model-signing)")
    keygen.set_defaults(run=run_keygen)
    tail = commands.add_parser("tail", help="print each model version as it is published",
                               **reads(KafkaSettings, SigningSettings))
    tail.add_argument("--bootstrap", help="Kafka bootstrap servers (overrides HEADROOM_KAFKA_BOOTSTRAP)")
    tail.add_argument("--from-beginning", action="store_true", help="start with the versions already published")
    tail.add_argument("--idle-seconds", type=float, help="stop after this long without a new version")
    tail.add_argument("--count", type=int, help="stop after this many versions")
    tail.set_defaults(run=run_tail)
    export = commands.add_parser("export", help="write the newest trusted version of every model into a folder, "
                                                "one file per model, signed as published (what headroom predictor "
                                                "serve --models reads)", **reads(KafkaSettings, SigningSettings))
    export.add_argument("folder", type=Path)
    export.add_argument("--bootstrap", help="Kafka bootstrap servers (overrides HEADROOM_KAFKA_BOOTSTRAP)")
    export.add_argument("--timeout", type=float, default=60.0, help="longest time to read the topic, in seconds")
    export.set_defaults(run=run_export)


def _settings(args: argparse.Namespace) -> tuple[KafkaSettings, TrustedKeys]:
    try:
        return (from_env(KafkaSettings, **({"bootstrap_servers": args.bootstrap} if args.bootstrap else {})),
                from_env(SigningSettings).trust())
    except SettingsError as err:
        raise CommandError(str(err)) from err


def signer_of(update: ModelUpdate) -> str:
    return f"key {update.signer}" if update.signer else "UNSIGNED"


def describe_update(update: ModelUpdate) -> str:
    """One line about a version: key, version, signer, age, window, holdout metrics, drift reason."""
    m = update.holdout_metrics
    when = time.strftime("%H:%M:%S", time.gmtime(update.created_at))
    parts = [f"{update.key} v{update.version}", f"signed by {signer_of(update)}", f"at {when}Z",
             f"rows {update.window_stats.get('train_rows', '?')}+{update.window_stats.get('holdout_rows', '?')}"]
    if "mae" in m:
        parts.append(f"holdout MAE {m['mae']:.2f} ms MAPE {100 * m['mape']:.1f}%")
    if _coverage(update):
        parts.append(f"coverage {_coverage(update)}")
    if update.drift_reason:
        parts.append(f"drift: {update.drift_reason}")
    return "  ".join(parts)


def run_list(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException
    from rich.console import Console
    from rich.table import Table

    from headroom.kafka_clients import why
    from headroom.model_topic import read_latest

    kafka, trust = _settings(args)
    try:
        latest, rejected = read_latest(kafka, trust)
    except (KafkaException, TimeoutError) as err:
        raise CommandError(f"cannot read {kafka.model_topic!r} at {kafka.bootstrap_servers}: {why(err)}") from err
    table = Table(title=f"latest model versions on {kafka.model_topic}")
    for column in ("model", "version", "signed by", "created (UTC)", "train+holdout rows", "MAE ms", "MAPE",
                   "coverage", "drift"):
        table.add_column(column, no_wrap=column != "drift")
    for key, update in sorted(latest.items()):
        m, stats = update.holdout_metrics, update.window_stats
        table.add_row(key, str(update.version), signer_of(update), time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(update.created_at)),
                      f"{stats.get('train_rows', '?')}+{stats.get('holdout_rows', '?')}",
                      f"{m['mae']:.2f}" if "mae" in m else "-", f"{100 * m['mape']:.1f}%" if "mape" in m else "-",
                      _coverage(update), update.drift_reason or "")
    console = Console(width=max(Console().width, 140))
    console.print(table)
    if rejected:
        console.print(f"{len(rejected)} message(s) rejected, e.g. offset {rejected[0].offset} "
                      f"({rejected[0].reason}): {rejected[0].error}")
    return 0


def _coverage(update: ModelUpdate) -> str:
    """A quantile model's holdout coverage (the share of actuals below it); a mean model has none."""
    m = update.holdout_metrics
    if update.objective != "quantile" or "coverage" not in m:
        return ""
    return f"{m['coverage']:.3f} (p{round(100 * (update.quantile or 0))})"


def run_tail(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    from headroom.kafka_clients import why
    from headroom.model_topic import tail

    kafka, trust = _settings(args)
    seen = 0
    try:
        for item in tail(kafka, trust, from_beginning=args.from_beginning, idle_s=args.idle_seconds):
            if item.update is None:
                print(f"offset {item.offset}: rejected ({item.reason}): {item.error}", flush=True)
            else:
                print(describe_update(item.update), flush=True)
            seen += 1
            if args.count is not None and seen >= args.count:
                break
    except KafkaException as err:
        raise CommandError(f"cannot tail {kafka.model_topic!r} at {kafka.bootstrap_servers}: {why(err)}") from err
    return 0


def run_keygen(args: argparse.Namespace) -> int:
    key = SigningKey.generate()
    try:
        private, public = write_signing_key(key, args.out, args.name)
    except FileExistsError as err:
        raise CommandError(f"{err} (choose another --name or --out)") from err
    print(f"key {key.key_id}\n  private: {private} (the worker's HEADROOM_MODEL_SIGNING_KEY_FILE; keep it secret)\n"
          f"  public:  {public} (in every reader's HEADROOM_MODEL_TRUSTED_KEYS)")
    return 0


def run_export(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    from headroom.kafka_clients import why
    from headroom.model_files import export_latest

    kafka, trust = _settings(args)
    try:
        written = export_latest(kafka, trust, args.folder, timeout_s=args.timeout)
    except (KafkaException, OSError, TimeoutError) as err:
        raise CommandError(f"cannot export the models of {kafka.model_topic!r} to {args.folder}: {why(err)}") from err
    for path, update in sorted(written, key=lambda item: item[1].key):
        print(f"{update.key} v{update.version} -> {path}")
    print(f"{len(written)} model files in {args.folder}")
    return 0
