"""The router's typed settings: each declared once with a type, default, environment variable and meaning.

Built once at the entry point: defaults, then the environment, then the ``settings:`` section of the
config file (camelCase keys, e.g. ``httpPort``). TLS, the predictor client's TLS and the model-signing keys
are nested settings of the contract and come from the environment only (they name Secrets' files).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from headroom.contract.settings import nested, setting
from headroom.contract.signing import SigningSettings
from headroom.contract.tls import PredictorClientTls, ServerTls


@dataclass(frozen=True)
class RouterSettings:
    host: str = setting("127.0.0.1", "HEADROOM_ROUTER_HOST", "Interface every router listener binds.")
    http_port: int = setting(8080, "HEADROOM_ROUTER_HTTP_PORT", "OpenAI-compatible proxy (and /metrics, /healthz unless on their own port); 0 picks a free port.")
    metrics_port: int = setting(-1, "HEADROOM_ROUTER_METRICS_PORT", "Plain-HTTP port of /metrics, /healthz and /readyz alone, without TLS or tokens; 0 picks a free port, -1 serves them on the HTTP port.")
    pick_port: int = setting(9090, "HEADROOM_ROUTER_PICK_PORT", "gRPC Pick/Report API; 0 picks a free port, -1 disables.")
    ext_proc_port: int = setting(9091, "HEADROOM_ROUTER_EXT_PROC_PORT", "Envoy ext_proc gRPC server; 0 picks a free port, -1 disables.")
    ext_proc_body_mode: str = setting("full-duplex", "HEADROOM_ROUTER_EXT_PROC_BODY_MODE", "How Envoy sends ext_proc bodies when a stream does not say (no protocol_config, Envoy before 1.34): full-duplex (FULL_DUPLEX_STREAMED, the endpoint picker's) or buffered (request body BUFFERED).")
    ext_proc_front: str = setting("native", "HEADROOM_ROUTER_EXT_PROC_FRONT", "What serves ext_proc's gRPC: native (the compiled front, router/fronts/ext_proc_front.py) or grpcio (the Python servicer, router/fronts/ext_proc.py: the reference).")
    ext_proc_secure: bool = setting(True, "HEADROOM_EXT_PROC_SECURE", "ext_proc speaks TLS, with a self-signed certificate when HEADROOM_TLS_CERT_FILE is not given (the endpoint picker's convention).")
    auth_tokens_file: Path | None = setting(None, "HEADROOM_ROUTER_AUTH_TOKENS_FILE", "Bearer tokens (one per line) the HTTP proxy and Pick API require of clients; unset, they require none (and Pick's Report, which writes telemetry, is closed unless a client CA authenticates its callers).")
    gateway_tokens_file: Path | None = setting(None, "HEADROOM_ROUTER_GATEWAY_TOKENS_FILE", "Bearer tokens (one per line) of the gateway: ext_proc requires one of its callers (Envoy's ext_proc grpc_service.initial_metadata), and only the gateway's exchanges produce telemetry.")
    gateway_identities: str = setting("", "HEADROOM_ROUTER_GATEWAY_IDENTITIES", "Comma-separated names (DNS or URI subject alternative name, or common name) of the gateway's client certificate: with HEADROOM_TLS_CLIENT_CA_FILE, ext_proc requires a caller presenting one, and only its exchanges produce telemetry.")
    gateway_by_network: bool = setting(False, "HEADROOM_ROUTER_GATEWAY_BY_NETWORK", "Take every ext_proc caller for the gateway: only where the network lets nothing else reach ext_proc (a NetworkPolicy admitting the gateway's proxies alone), for gateways that present no token or certificate, such as GKE's managed ones.")
    unauthenticated_telemetry: bool = setting(False, "HEADROOM_ROUTER_UNAUTHENTICATED_TELEMETRY", "Let unauthenticated callers of ext_proc and Pick's Report produce telemetry: for a local experiment only.")
    scrape_interval_s: float = setting(0.05, "HEADROOM_ROUTER_SCRAPE_INTERVAL_S", "How often each server's /metrics is scraped.")
    scrape_timeout_s: float = setting(1.0, "HEADROOM_ROUTER_SCRAPE_TIMEOUT_S", "Timeout of one metrics scrape.")
    unhealthy_after_s: float = setting(5.0, "HEADROOM_ROUTER_UNHEALTHY_AFTER_S", "A server unscraped this long stops being a candidate.")
    inflight_ttl_s: float = setting(600.0, "HEADROOM_ROUTER_INFLIGHT_TTL_S", "In-flight accounting forgets a request after this long.")
    prefix_max_blocks: int = setting(200_000, "HEADROOM_ROUTER_PREFIX_MAX_BLOCKS", "Prefix-index blocks kept per server (LRU).")
    server_file_poll_s: float = setting(1.0, "HEADROOM_ROUTER_SERVER_FILE_POLL_S", "How often a server file is checked for changes.")
    upstream_timeout_s: float = setting(600.0, "HEADROOM_ROUTER_UPSTREAM_TIMEOUT_S", "Longest a proxied request may take.")
    upstream_connect_timeout_s: float = setting(2.0, "HEADROOM_ROUTER_UPSTREAM_CONNECT_TIMEOUT_S", "Longest wait to connect to a model server.")
    upstream_first_byte_timeout_s: float = setting(0.0, "HEADROOM_ROUTER_UPSTREAM_FIRST_BYTE_TIMEOUT_S", "Longest wait for a model server's response headers (a non-streaming answer's whole generation), counted as the server's failure beyond; 0 derives it per request: upstreamFirstByteFactor x its TTFT SLO, else the TTFT (E2E when not streaming) predicted on that server, within [upstreamFirstByteMinS, upstreamFirstByteMaxS].")
    upstream_first_byte_factor: float = setting(4.0, "HEADROOM_ROUTER_UPSTREAM_FIRST_BYTE_FACTOR", "A derived first-byte limit is this many times the request's TTFT SLO or predicted TTFT.")
    upstream_first_byte_min_s: float = setting(2.0, "HEADROOM_ROUTER_UPSTREAM_FIRST_BYTE_MIN_S", "Shortest derived first-byte limit.")
    upstream_first_byte_max_s: float = setting(120.0, "HEADROOM_ROUTER_UPSTREAM_FIRST_BYTE_MAX_S", "Longest derived first-byte limit, and the limit of a request with neither SLO nor prediction.")
    upstream_idle_timeout_s: float = setting(30.0, "HEADROOM_ROUTER_UPSTREAM_IDLE_TIMEOUT_S", "Longest gap between chunks of a model server's response.")
    upstream_pool_idle_s: float = setting(4.0, "HEADROOM_ROUTER_UPSTREAM_POOL_IDLE_S", "A kept-alive connection to a model server unused this long is closed (under the servers' own keep-alive timeout: uvicorn's is 5 s).")
    upstream_retries: int = setting(2, "HEADROOM_ROUTER_UPSTREAM_RETRIES", "Other servers a request may go to when one fails before answering (0: none).")
    outlier_failures: int = setting(3, "HEADROOM_ROUTER_OUTLIER_FAILURES", "Consecutive failed requests that eject a model server.")
    outlier_ejection_s: float = setting(10.0, "HEADROOM_ROUTER_OUTLIER_EJECTION_S", "First ejection of a failing server; each next one lasts twice as long.")
    outlier_max_ejection_s: float = setting(300.0, "HEADROOM_ROUTER_OUTLIER_MAX_EJECTION_S", "Longest ejection.")
    outlier_max_ejected_fraction: float = setting(0.5, "HEADROOM_ROUTER_OUTLIER_MAX_EJECTED_FRACTION", "Most of the pool ejected at once.")
    outlier_relative_factor: float = setting(2.0, "HEADROOM_ROUTER_OUTLIER_RELATIVE_FACTOR", "A failing server is ejected only while its recent failure rate is over this many times the rest of the pool's (a pool failing as a whole, e.g. on a loaded host, ejects none); 0 ejects on consecutive failures alone.")
    max_body_bytes: int = setting(1024 * 1024, "HEADROOM_ROUTER_MAX_BODY_BYTES", "Largest request body (HTTP 413 beyond).")
    max_head_bytes: int = setting(64 * 1024, "HEADROOM_ROUTER_MAX_HEAD_BYTES", "Largest request line and headers (or chunked trailers) of an HTTP request (HTTP 431 beyond).")
    max_headers: int = setting(100, "HEADROOM_ROUTER_MAX_HEADERS", "Most headers (and trailers) of an HTTP request (HTTP 431 beyond).")
    request_arrival_s: float = setting(30.0, "HEADROOM_ROUTER_REQUEST_ARRIVAL_S", "Longest an HTTP request may take to arrive, headers and body (HTTP 408 beyond).")
    max_connections: int = setting(4096, "HEADROOM_ROUTER_MAX_CONNECTIONS", "Most client connections each listener holds; one more is refused: HTTP with a 503 naming the limit, counted (headroom_router_connections_refused_total); gRPC closed as it opens.")
    keep_alive_s: float = setting(75.0, "HEADROOM_ROUTER_KEEP_ALIVE_S", "A client's HTTP connection with nothing asked or answered for this long is closed (one that has asked nothing since it opened after requestArrivalS), one whose client takes nothing of its answers as long is cut; a gRPC connection without a call for this long is closed (GOAWAY).")
    max_json_depth: int = setting(32, "HEADROOM_ROUTER_MAX_JSON_DEPTH", "Deepest nesting of a request body's JSON.")
    max_hashed_tokens: int = setting(32768, "HEADROOM_ROUTER_MAX_HASHED_TOKENS", "Prompt tokens hashed for the prefix index; longer prompts are matched on their first tokens.")
    max_block_hashes: int = setting(8192, "HEADROOM_ROUTER_MAX_BLOCK_HASHES", "Most block hashes a request may bring (Pick API, headroom.hash_ids).")
    max_candidates: int = setting(256, "HEADROOM_ROUTER_MAX_CANDIDATES", "Most candidate servers in one Pick call.")
    predictor: str = setting("embedded", "HEADROOM_ROUTER_PREDICTOR", "Where predictions come from: embedded (models tailed from Kafka), remote (prediction servers) or none.")
    predictor_addresses: str = setting("127.0.0.1:50061", "HEADROOM_ROUTER_PREDICTOR_ADDRESSES", "Comma-separated prediction servers (remote): host:port, or dns:///name:port for every address of a name (a headless Service), resolved again every 5 s; calls go round-robin and fail over.")
    predictor_timeout_s: float = setting(0.05, "HEADROOM_ROUTER_PREDICTOR_TIMEOUT_S", "Deadline of one remote prediction call.")
    telemetry: bool = setting(True, "HEADROOM_ROUTER_TELEMETRY", "Produce completed-request telemetry to Kafka.")
    telemetry_stratum_quota: float = setting(0.0, "HEADROOM_ROUTER_TELEMETRY_STRATUM_QUOTA", "Telemetry records per second sent per stratum (waiting queue x KV x prefix match at dispatch); busier strata are sampled, each record carrying its weight. 0: send every record.")
    telemetry_sample_floor: float = setting(0.01, "HEADROOM_ROUTER_TELEMETRY_SAMPLE_FLOOR", "Smallest probability a record is sent with when sampling (its weight is at most the inverse).")
    leader_election: bool = setting(False, "HEADROOM_ROUTER_LEADER_ELECTION", "Replicas elect one leader through a Kubernetes Lease; only the leader is ready (/readyz).")
    leader_lease: str = setting("headroom-router", "HEADROOM_ROUTER_LEADER_LEASE", "Name of the Lease the replicas elect a leader with.")
    leader_namespace: str = setting("", "HEADROOM_ROUTER_LEADER_NAMESPACE", "Namespace of that Lease (empty: the watched pods' namespace, else default).")
    identity: str = setting("", "HEADROOM_ROUTER_IDENTITY", "This replica's name in the Lease (empty: host name and process id).")
    telemetry_buffer: int = setting(100_000, "HEADROOM_ROUTER_TELEMETRY_BUFFER", "Telemetry records buffered while Kafka is away; more are dropped.")
    seed: int = setting(-1, "HEADROOM_ROUTER_SEED", "Seed of the scheduling RNG; -1 seeds from the OS.")
    autoscale_refresh_s: float = setting(1.0, "HEADROOM_ROUTER_AUTOSCALE_REFRESH_S", "How often the autoscaling signals are recomputed.")
    autoscale_ttft_slo_ms: float = setting(0.0, "HEADROOM_ROUTER_AUTOSCALE_TTFT_SLO_MS", "TTFT SLO of the predicted-TTFT autoscaling signal; 0 turns it off.")
    autoscale_reference_prompt_tokens: int = setting(1024, "HEADROOM_ROUTER_AUTOSCALE_PROMPT_TOKENS", "Prompt length of the reference request the predicted-TTFT signal asks about.")
    accelerator_memory_gib: float = setting(80.0, "HEADROOM_ROUTER_ACCELERATOR_MEMORY_GIB", "Accelerator memory per server, for the memory-usage signal.")
    tls: ServerTls = nested(ServerTls, "TLS, and mTLS with a client CA, of the HTTP, Pick and ext_proc listeners.")
    predictor_tls: PredictorClientTls = nested(PredictorClientTls, "TLS of the calls to remote prediction servers.")
    signing: SigningSettings = nested(SigningSettings, "The keys the embedded predictor's models must be signed by.")
