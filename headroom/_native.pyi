"""headroom's compiled parts (``native/``, Rust), built by ``pip install``: the ext_proc front that
:mod:`headroom.router.fronts.ext_proc_front` drives, the heuristic profile's default pipeline that
:mod:`headroom.router.framework.compiled` runs, the tree walk of :mod:`headroom.predictor.kernels` and the
predicted-latency producer's arithmetic that :mod:`headroom.router.framework.compiled_producer` runs."""

import random

import numpy as np

DECIDE: int  # (DECIDE, token, headers, body | None, to_body, trusted): awaits answer() or fail()
TOO_LARGE: int  # (TOO_LARGE, token, size): the request body grew over max_body_bytes; awaits answer() or fail()
FEED: int  # (FEED, token, data): a chunk of a streaming response
FINISH: int  # (FINISH, token, sse, json_answer, json_body): the response ended
ABANDON: int  # (ABANDON, token): the stream ended before the response did
UNAUTHENTICATED: int  # (UNAUTHENTICATED,): a caller was refused for not proving it is the gateway
REFUSED: int  # (REFUSED, reason): a stream was refused
STOPPED: int  # (STOPPED,): the server has stopped

class ExtProcFront:
    port: int
    def __init__(self, host: str, port: int, *, max_body_bytes: int, duplex: bool, max_connections: int,
                 max_message_bytes: int, idle_s: float, certificate_pem: bytes | None = None,
                 key_pem: bytes | None = None, client_ca_pem: bytes | None = None, gateway: bool = False,
                 gateway_digests: list[bytes] = ..., gateway_identities: list[str] = ...,
                 unauthenticated: bool = False) -> None: ...
    def fileno(self) -> int: ...
    def take(self) -> list[tuple[object, ...]]: ...
    def answer(self, token: int, answer: bytes, routed: bool, stream: bool) -> bool: ...
    def fail(self, token: int, message: str) -> bool: ...
    def stop(self, grace_s: float) -> None: ...
    def join(self) -> None: ...

class HeuristicProfile:
    def __init__(self, scorers: list[tuple[str, float]]) -> None: ...
    def pick(self, kv_cache_usage: np.ndarray, num_waiting: np.ndarray, prefix_match: np.ndarray, scores: np.ndarray,
             rng: random.Random) -> int: ...

class PredictedProfile:
    def __init__(self, filters: list[tuple[str, list[float]]], scorers: list[tuple[bool, float, float, float]],
                 protect_running: bool | None, tie_tolerance: float) -> None: ...
    def decide(self, ttft: np.ndarray, tpot: np.ndarray, e2e: np.ndarray, ttft_headroom: np.ndarray,
               tpot_headroom: np.ndarray, prefix_match: np.ndarray, inflight_prefill_tokens: np.ndarray,
               tpot_at_risk: np.ndarray, num_waiting: np.ndarray, num_running: np.ndarray,
               inflight_requests: np.ndarray, kv_cache_usage: np.ndarray, cold_kv_usage: float,
               slo_ttft_ms: float | None, has_slo: bool, stream: bool, sheddable: bool, survivors: np.ndarray,
               scores: np.ndarray, rng: random.Random) -> tuple[int, int | None, bool]: ...

class Forests:
    def __init__(self, nodes: np.ndarray, default_left: np.ndarray, leaves: np.ndarray, node_offset: np.ndarray,
                 leaf_offset: np.ndarray, tree_start: np.ndarray, depth: np.ndarray, base_score: np.ndarray) -> None: ...
    def predict(self, bits: np.ndarray, width: int, out: np.ndarray, start: int, stop: int) -> None: ...
    def predict_columns(self, columns: list[np.ndarray | float], rows: int, derived: tuple[int, int, int],
                        out: np.ndarray) -> bool: ...

def finish_predictions(values: np.ndarray, rows: tuple[int, int, int | None], factors: np.ndarray | None,
                       floor: tuple[np.ndarray, np.ndarray, np.ndarray] | None, prompt_tokens: float,
                       tightest_tpot_slo: np.ndarray, slo_ttft_ms: float | None, slo_tpot_ms: float | None,
                       has_slo: bool, stream: bool, slo_buffer_factor: float, tpot_factor: float,
                       out: np.ndarray) -> bool | None: ...
