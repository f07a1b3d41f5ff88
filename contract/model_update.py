"""The model-update message: one trained model version, published to the compacted ``model-updates`` topic.

Wire format: ``MAGIC`` (4 bytes), the header length (4 bytes, big-endian), a UTF-8 JSON header with the
metadata below, then the model bytes in XGBoost's own format (``ubj`` or ``json``; never pickle).
The header's ``sha256`` is of the model bytes; :func:`decode_update` checks it, so a torn or tampered
message is rejected before anything tries to load it. Consumers then check the feature schema and a
probe prediction before they swap the model in.

The Kafka key is :func:`model_key` — pool key, target and objective — so compaction keeps the newest
version of each model.

``output_transform`` says how the model's raw output maps to milliseconds (:func:`to_milliseconds`):
``"identity"``, or ``"log"`` for a model trained on the logarithm of the latency, whose outputs every
consumer exponentiates. Quantiles survive a monotone transform exactly, and ``exp`` is always positive.
The trainer also stores the transform in the model bytes (booster attribute :data:`TRANSFORM_ATTRIBUTE`)
so a booster loaded on its own predicts in milliseconds too; consumers check that the two agree
(:func:`check_transform`).

Messages travel signed (:mod:`contract.signing`): :func:`decode_update` first opens the signed message with
the reader's trusted keys, so an unsigned or forged message is rejected before its header is read, and the
update carries the id of the key that signed it (``signer``). Every consumer then checks a decoded update's
feature schema and output transform (:func:`check_schema`, :func:`check_transform`), the checks that decide
whether a model may be used at all (:class:`RejectedUpdate` says why not): :func:`load_update` makes both for a
consumer that loads the booster with XGBoost, :meth:`predictor.runtime.ModelRuntime.apply` for the readers that
walk its trees without it.

A signature says who made a model, not that it is safe to serve: a reader also bounds what it takes
(:class:`ModelBounds`, carried by its :class:`~contract.signing.TrustedKeys`): a message over ``max_bytes`` is
rejected before anything else (``bytes``), and the prediction servers and routers reject a model of more
trees or deeper trees than allowed (``trees``, ``depth``), with a leaf or split that is not a finite number
(``leaf``), or whose outputs could leave the finite numbers (``range``) — every leaf, not only those a probe
row reaches.

Versions are integers from 1 to :data:`MAX_VERSION` (what every JSON reader and proto field holds
exactly), and they only grow: each reader keeps, per model key, the newest version it accepted, and
:func:`refusal` says whether an update may follow it — newer, and not more than a configured distance ahead
of it: one bad message must not outrank every honest version that follows it on the compacted topic.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from headroom.contract.features import FEATURE_SCHEMA
from headroom.contract.settings import SettingsError, setting
from headroom.contract.targets import TARGETS
from headroom.errors import HeadroomError

if TYPE_CHECKING:
    import xgboost

    from headroom.contract.signing import TrustedKeys

MAGIC = b"HRMU"
FORMAT_VERSION = 1
OBJECTIVES = ("mean", "quantile")
MODEL_FORMATS = ("ubj", "json")
OUTPUT_TRANSFORMS = ("identity", "log")
TRANSFORM_ATTRIBUTE = "headroom_output_transform"  # booster attribute holding the output transform
MAX_VERSION = 2**53 - 1
MAX_VERSION_JUMP = 1000  # default farthest a version may lead the live one (trainers publish live + 1)
STALE, REPLAYED = "stale", "replayed"  # refusal reasons of a version that is not newer than the held one
_HEADER_LEN = struct.Struct(">I")


LAYOUT_DEPTH = 12  # the deepest tree the prediction servers lay out (a complete tree of 4096 leaves)


@dataclass(frozen=True)
class ModelBounds:
    """The largest model a reader takes, however well it is signed (rejection reasons ``bytes``, ``trees``,
    ``depth``). The defaults hold five times the reference model (200 trees of depth 6, about 0.9 MB)."""

    max_bytes: int = setting(8 * 1024 * 1024, "HEADROOM_MODEL_MAX_BYTES", "Largest model-update message a reader "
                             "takes (signature and header included).")
    max_trees: int = setting(1000, "HEADROOM_MODEL_MAX_TREES", "Most trees in a model a reader serves (each one "
                             "costs every prediction).")
    max_depth: int = setting(10, "HEADROOM_MODEL_MAX_DEPTH", f"Deepest tree of a model a reader serves (at most "
                             f"{LAYOUT_DEPTH}).")

    def __post_init__(self) -> None:
        for name, env in (("max_bytes", "HEADROOM_MODEL_MAX_BYTES"), ("max_trees", "HEADROOM_MODEL_MAX_TREES")):
            if getattr(self, name) < 1:
                raise SettingsError(f"{env} must be at least 1, got {getattr(self, name)}")
        if not 1 <= self.max_depth <= LAYOUT_DEPTH:
            raise SettingsError(f"HEADROOM_MODEL_MAX_DEPTH must be within [1, {LAYOUT_DEPTH}], got {self.max_depth}")


class InvalidUpdate(HeadroomError, ValueError):
    """A model-update message that must not be applied; the message says why."""


class RejectedUpdate(InvalidUpdate):
    """An update whose model must not be used; ``reason`` is its category: ``unsigned``, ``unknown-key`` or
    ``bad-signature`` (:mod:`contract.signing`), ``version``, ``stale`` or ``replayed`` (:func:`refusal`),
    ``bytes``, ``trees``, ``depth``, ``leaf`` or ``range`` (:class:`ModelBounds`), ``schema``, ``model`` or
    ``transform``."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason, self.detail = reason, detail


@dataclass(frozen=True)
class ModelUpdate:
    version: int
    pool_key: str
    target: str  # one of contract.targets.TARGETS
    objective: str  # "mean" or "quantile"
    feature_schema: str  # contract.features.FEATURE_SCHEMA of the trainer
    model_format: str  # "ubj" or "json"
    model: bytes = field(repr=False)
    sha256: str
    created_at: float  # unix seconds
    quantile: float | None = None  # alpha of a quantile model
    window_stats: dict[str, Any] = field(default_factory=dict)
    holdout_metrics: dict[str, float] = field(default_factory=dict)
    drift_reason: str | None = None
    output_transform: str = "identity"  # one of OUTPUT_TRANSFORMS: raw model output -> milliseconds
    signer: str | None = None  # id of the key the message was signed with (set by decode_update; not in the header)

    @property
    def key(self) -> str:
        return model_key(self.pool_key, self.target, self.objective)


def model_key(pool_key: str, target: str, objective: str) -> str:
    return f"{pool_key}/{target}/{objective}"


def booster_transform(booster: Any) -> str:
    """The output transform an XGBoost booster was trained with (its :data:`TRANSFORM_ATTRIBUTE`; ``"identity"``
    when it has none)."""
    return model_transform(booster.attributes())


def model_transform(attributes: Mapping[str, str | None]) -> str:
    """The output transform of a model with these attributes."""
    return attributes.get(TRANSFORM_ATTRIBUTE) or "identity"


def to_milliseconds(raw: np.ndarray, transform: str) -> np.ndarray:
    """A model's raw outputs in milliseconds under ``transform`` (one of :data:`OUTPUT_TRANSFORMS`).

    >>> to_milliseconds(np.array([0.0, np.log(250.0)]), "log").round(3).tolist()
    [1.0, 250.0]
    """
    if transform == "identity":
        return raw
    if transform == "log":
        milliseconds: np.ndarray = np.exp(raw)
        return milliseconds
    raise ValueError(f"unknown output transform {transform!r}; expected one of {OUTPUT_TRANSFORMS}")


def make_update(*, model: bytes, **metadata: Any) -> ModelUpdate:
    """A :class:`ModelUpdate` whose checksum is computed from ``model``."""
    return ModelUpdate(model=model, sha256=hashlib.sha256(model).hexdigest(), **metadata)


def encode_update(update: ModelUpdate) -> bytes:
    """The message of ``update``, unsigned (:meth:`contract.signing.SigningKey.sign` signs it)."""
    header = asdict(update)
    del header["model"], header["signer"]
    header["format_version"] = FORMAT_VERSION
    raw = json.dumps(header, separators=(",", ":"), allow_nan=False).encode()
    return MAGIC + _HEADER_LEN.pack(len(raw)) + raw + update.model


def decode_update(raw: bytes, trust: TrustedKeys) -> ModelUpdate:
    """Open a signed message with ``trust``, parse it and verify its checksum; raises :class:`RejectedUpdate`
    for a message ``trust`` refuses (one over its ``max_bytes`` first) and :class:`InvalidUpdate` for a
    malformed one, saying why."""
    if len(raw) > trust.bounds.max_bytes:
        raise RejectedUpdate("bytes", f"a message of {len(raw)} bytes is over the {trust.bounds.max_bytes} a "
                                      "reader takes (HEADROOM_MODEL_MAX_BYTES)")
    raw, signer = trust.open(raw)
    if raw[:4] != MAGIC:
        raise InvalidUpdate(f"not a model-update message (magic {raw[:4]!r}, expected {MAGIC!r})")
    if len(raw) < 8:
        raise InvalidUpdate("truncated model-update message: no header length")
    (length,) = _HEADER_LEN.unpack_from(raw, 4)
    if 8 + length > len(raw):
        raise InvalidUpdate(f"truncated model-update message: header of {length} bytes, {len(raw) - 8} present")
    try:
        header = json.loads(raw[8:8 + length])
    except ValueError as err:
        raise InvalidUpdate(f"model-update header is not valid JSON: {err}") from err
    if not isinstance(header, dict):
        raise InvalidUpdate("model-update header must be a JSON object")
    if header.pop("format_version", None) != FORMAT_VERSION:
        raise InvalidUpdate(f"unknown model-update format version; this reader knows {FORMAT_VERSION}")
    if "signer" in header:
        raise InvalidUpdate("model-update header fields are wrong: 'signer' is not a header field")
    model = raw[8 + length:]
    try:
        update = ModelUpdate(model=model, signer=signer, **header)
    except TypeError as err:
        raise InvalidUpdate(f"model-update header fields are wrong: {err}") from err
    _check(update)
    return update


def _check(update: ModelUpdate) -> None:
    if update.target not in TARGETS:
        raise InvalidUpdate(f"unknown target {update.target!r}; expected one of {TARGETS}")
    if update.objective not in OBJECTIVES:
        raise InvalidUpdate(f"unknown objective {update.objective!r}; expected one of {OBJECTIVES}")
    if update.objective == "quantile" and not (isinstance(update.quantile, float) and 0 < update.quantile < 1):
        raise InvalidUpdate(f"quantile model needs a quantile in (0, 1), got {update.quantile!r}")
    if update.output_transform not in OUTPUT_TRANSFORMS:
        raise InvalidUpdate(f"unknown output transform {update.output_transform!r}; expected one of "
                            f"{OUTPUT_TRANSFORMS}")
    if update.model_format not in MODEL_FORMATS:
        raise InvalidUpdate(f"unknown model format {update.model_format!r}; expected one of {MODEL_FORMATS}")
    if not isinstance(update.version, int) or isinstance(update.version, bool) or update.version < 1:
        raise InvalidUpdate(f"version must be a positive integer, got {update.version!r}")
    if update.version > MAX_VERSION:
        raise RejectedUpdate("version", f"version {update.version} is beyond the largest allowed, 2^53 - 1")
    digest = hashlib.sha256(update.model).hexdigest()
    if digest != update.sha256:
        raise InvalidUpdate(f"checksum mismatch: model bytes hash to {digest[:12]}…, header says "
                            f"{str(update.sha256)[:12]}…")


def refusal(update: ModelUpdate, held: int | None, max_jump: int = MAX_VERSION_JUMP) -> RejectedUpdate | None:
    """Why ``update`` may not follow ``held``, the newest version of its key the reader accepted (None: none
    yet), or None when it may: ``stale`` (that version again), ``replayed`` (an older one) or ``version``
    (more than ``max_jump`` ahead of it)."""
    if held is None:
        return None
    if update.version == held:
        return RejectedUpdate(STALE, f"version {update.version} of {update.key} is the held version")
    if update.version < held:
        return RejectedUpdate(REPLAYED, f"version {update.version} of {update.key} is older than the held version "
                                        f"{held}")
    if update.version - held > max_jump:
        return RejectedUpdate("version", f"version {update.version} of {update.key} is {update.version - held} "
                                         f"ahead of the held version {held} (at most {max_jump} allowed)")
    return None


def load_update(update: ModelUpdate) -> xgboost.Booster:
    """The booster of a decoded ``update``, once it passed every check a consumer makes before using it:
    the serving feature schema, a model XGBoost loads, and an output transform the booster agrees with.
    Raises :class:`RejectedUpdate`."""
    check_schema(update)
    booster = load_booster(update.model)
    check_transform(update, booster.attributes())
    return booster


def check_schema(update: ModelUpdate) -> None:
    """Raises :class:`RejectedUpdate` (``schema``) unless ``update`` was trained on the serving feature schema."""
    if update.feature_schema != FEATURE_SCHEMA:
        raise RejectedUpdate("schema", f"feature schema {update.feature_schema!r} does not match the "
                                       f"serving schema {FEATURE_SCHEMA!r}")


def check_transform(update: ModelUpdate, attributes: Mapping[str, str | None]) -> None:
    """Raises :class:`RejectedUpdate` (``transform``) unless the model, by its ``attributes``, was trained with the
    output transform ``update`` declares."""
    trained_with = model_transform(attributes)
    if trained_with != update.output_transform:
        raise RejectedUpdate("transform", f"message says output transform {update.output_transform!r} but the "
                                          f"model was trained with {trained_with!r}")


def load_booster(model: bytes) -> xgboost.Booster:
    """An XGBoost booster from model bytes (UBJ or JSON), predicting on one thread."""
    import xgboost  # only the readers of models need it

    booster = xgboost.Booster(params={"nthread": 1})
    try:
        booster.load_model(bytearray(model))
    except xgboost.core.XGBoostError as err:
        raise RejectedUpdate("model", f"XGBoost cannot load the model bytes: {str(err).splitlines()[0]}") from err
    booster.set_param({"nthread": 1})
    return booster
