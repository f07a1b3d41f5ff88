from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ServerState(_message.Message):
    __slots__ = ("server_id", "address", "pool_key", "kv_cache_usage", "num_waiting", "num_running", "prefix_match", "inflight_requests", "inflight_prompt_tokens", "running_tpot_slos_ms", "metrics_age_s", "inflight_prefill_tokens", "last_token_age_ms", "token_interval_ms", "inflight_decode_tokens", "encoder_matched_size", "tpot_at_risk")
    SERVER_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    POOL_KEY_FIELD_NUMBER: _ClassVar[int]
    KV_CACHE_USAGE_FIELD_NUMBER: _ClassVar[int]
    NUM_WAITING_FIELD_NUMBER: _ClassVar[int]
    NUM_RUNNING_FIELD_NUMBER: _ClassVar[int]
    PREFIX_MATCH_FIELD_NUMBER: _ClassVar[int]
    INFLIGHT_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    INFLIGHT_PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    RUNNING_TPOT_SLOS_MS_FIELD_NUMBER: _ClassVar[int]
    METRICS_AGE_S_FIELD_NUMBER: _ClassVar[int]
    INFLIGHT_PREFILL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    LAST_TOKEN_AGE_MS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    INFLIGHT_DECODE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ENCODER_MATCHED_SIZE_FIELD_NUMBER: _ClassVar[int]
    TPOT_AT_RISK_FIELD_NUMBER: _ClassVar[int]
    server_id: str
    address: str
    pool_key: str
    kv_cache_usage: float
    num_waiting: int
    num_running: int
    prefix_match: float
    inflight_requests: int
    inflight_prompt_tokens: int
    running_tpot_slos_ms: _containers.RepeatedScalarFieldContainer[float]
    metrics_age_s: float
    inflight_prefill_tokens: int
    last_token_age_ms: float
    token_interval_ms: float
    inflight_decode_tokens: int
    encoder_matched_size: int
    tpot_at_risk: float
    def __init__(self, server_id: _Optional[str] = ..., address: _Optional[str] = ..., pool_key: _Optional[str] = ..., kv_cache_usage: _Optional[float] = ..., num_waiting: _Optional[int] = ..., num_running: _Optional[int] = ..., prefix_match: _Optional[float] = ..., inflight_requests: _Optional[int] = ..., inflight_prompt_tokens: _Optional[int] = ..., running_tpot_slos_ms: _Optional[_Iterable[float]] = ..., metrics_age_s: _Optional[float] = ..., inflight_prefill_tokens: _Optional[int] = ..., last_token_age_ms: _Optional[float] = ..., token_interval_ms: _Optional[float] = ..., inflight_decode_tokens: _Optional[int] = ..., encoder_matched_size: _Optional[int] = ..., tpot_at_risk: _Optional[float] = ...) -> None: ...

class PickRequest(_message.Message):
    __slots__ = ("request_id", "headers", "body", "chat", "prompt_tokens", "max_tokens", "stream", "block_hashes", "candidates", "media_hashes")
    class HeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    CHAT_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    BLOCK_HASHES_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    MEDIA_HASHES_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    headers: _containers.ScalarMap[str, str]
    body: bytes
    chat: bool
    prompt_tokens: int
    max_tokens: int
    stream: bool
    block_hashes: _containers.RepeatedScalarFieldContainer[int]
    candidates: _containers.RepeatedCompositeFieldContainer[ServerState]
    media_hashes: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, request_id: _Optional[str] = ..., headers: _Optional[_Mapping[str, str]] = ..., body: _Optional[bytes] = ..., chat: _Optional[bool] = ..., prompt_tokens: _Optional[int] = ..., max_tokens: _Optional[int] = ..., stream: _Optional[bool] = ..., block_hashes: _Optional[_Iterable[int]] = ..., candidates: _Optional[_Iterable[_Union[ServerState, _Mapping]]] = ..., media_hashes: _Optional[_Iterable[int]] = ...) -> None: ...

class CandidateResult(_message.Message):
    __slots__ = ("server_id", "predicted", "predicted_ttft_ms", "predicted_tpot_ms", "ttft_headroom_ms", "tpot_headroom_ms", "score", "fallback_reason")
    SERVER_ID_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_TTFT_MS_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_TPOT_MS_FIELD_NUMBER: _ClassVar[int]
    TTFT_HEADROOM_MS_FIELD_NUMBER: _ClassVar[int]
    TPOT_HEADROOM_MS_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_REASON_FIELD_NUMBER: _ClassVar[int]
    server_id: str
    predicted: bool
    predicted_ttft_ms: float
    predicted_tpot_ms: float
    ttft_headroom_ms: float
    tpot_headroom_ms: float
    score: float
    fallback_reason: str
    def __init__(self, server_id: _Optional[str] = ..., predicted: _Optional[bool] = ..., predicted_ttft_ms: _Optional[float] = ..., predicted_tpot_ms: _Optional[float] = ..., ttft_headroom_ms: _Optional[float] = ..., tpot_headroom_ms: _Optional[float] = ..., score: _Optional[float] = ..., fallback_reason: _Optional[str] = ...) -> None: ...

class PickResponse(_message.Message):
    __slots__ = ("server_id", "address", "profile", "fallback", "fallback_reasons", "candidates", "model_versions")
    class ModelVersionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    SERVER_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_REASONS_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    server_id: str
    address: str
    profile: str
    fallback: str
    fallback_reasons: _containers.RepeatedScalarFieldContainer[str]
    candidates: _containers.RepeatedCompositeFieldContainer[CandidateResult]
    model_versions: _containers.ScalarMap[str, int]
    def __init__(self, server_id: _Optional[str] = ..., address: _Optional[str] = ..., profile: _Optional[str] = ..., fallback: _Optional[str] = ..., fallback_reasons: _Optional[_Iterable[str]] = ..., candidates: _Optional[_Iterable[_Union[CandidateResult, _Mapping]]] = ..., model_versions: _Optional[_Mapping[str, int]] = ...) -> None: ...

class ReportRequest(_message.Message):
    __slots__ = ("request_id", "failed", "e2e_ms", "ttft_ms", "tpot_ms", "output_tokens", "prompt_tokens")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    E2E_MS_FIELD_NUMBER: _ClassVar[int]
    TTFT_MS_FIELD_NUMBER: _ClassVar[int]
    TPOT_MS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    failed: bool
    e2e_ms: float
    ttft_ms: float
    tpot_ms: float
    output_tokens: int
    prompt_tokens: int
    def __init__(self, request_id: _Optional[str] = ..., failed: _Optional[bool] = ..., e2e_ms: _Optional[float] = ..., ttft_ms: _Optional[float] = ..., tpot_ms: _Optional[float] = ..., output_tokens: _Optional[int] = ..., prompt_tokens: _Optional[int] = ...) -> None: ...

class ReportResponse(_message.Message):
    __slots__ = ("telemetry_sent",)
    TELEMETRY_SENT_FIELD_NUMBER: _ClassVar[int]
    telemetry_sent: bool
    def __init__(self, telemetry_sent: _Optional[bool] = ...) -> None: ...
