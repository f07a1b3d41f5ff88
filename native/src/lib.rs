//! headroom's compiled parts, as the Python extension `headroom._native`.
//!
//! [`ExtProcFront`]: Envoy's ext_proc gRPC server on a thread of its own (tokio, h2, rustls), which hands each
//! request's scheduling and completion to the Python event loop ([`handoff`]); `router/fronts/ext_proc_front.py`
//! drives it. No Python object is touched off the event loop's thread: events become Python objects when the
//! loop takes them.
//!
//! [`heuristic::HeuristicProfile`]: the heuristic profile's default pipeline (scorers and picker) as one call, which
//! `router/framework/compiled.py` takes over from the Python plugins when a profile is exactly that pipeline.
//!
//! [`predicted::PredictedProfile`]: the predicted profile's filters, latency scorers, SLO admitter and max-score
//! picker as one call, taken over the same way when every candidate has a prediction.
//!
//! [`forest::Forests`]: the tree walk of the models' forests (`predictor/kernels.py`), without the GIL; with
//! [`producer::finish_predictions`], the predicted-latency producer for one pool's candidates, taken over the same
//! way when the models are in process.

mod auth;
mod exchange;
mod handoff;
mod forest;
mod heuristic;
mod predicted;
mod producer;
mod proto;
mod server;
mod tls;

use std::collections::HashSet;
use std::net::TcpListener as StdListener;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use tokio::sync::watch;

use crate::auth::GatewayCheck;
use crate::exchange::Limits;
use crate::handoff::{Event, Handoff, Reply};
use crate::server::Server;

/// Event kinds, as `take` hands them over (the first item of each tuple).
const DECIDE: u8 = 0;
const TOO_LARGE: u8 = 1;
const FEED: u8 = 2;
const FINISH: u8 = 3;
const ABANDON: u8 = 4;
const UNAUTHENTICATED: u8 = 5;
const REFUSED: u8 = 6;
const STOPPED: u8 = 7;

/// Envoy's ext_proc server, listening from construction until `stop`.
#[pyclass(frozen, module = "headroom._native")]
struct ExtProcFront {
    handoff: Arc<Handoff>,
    stop: watch::Sender<Option<Duration>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    #[pyo3(get)]
    port: u16,
}

#[pymethods]
impl ExtProcFront {
    /// Bind `host:port` (0: a free port) and serve on a thread of its own. TLS with `certificate_pem` and
    /// `key_pem`, requiring client certificates from `client_ca_pem`; callers judged by the gateway's token
    /// digests (SHA-256) and identities when `gateway` is true (else every exchange is trusted).
    #[new]
    #[pyo3(signature = (host, port, *, max_body_bytes, duplex, max_connections, max_message_bytes, idle_s,
                        certificate_pem=None, key_pem=None, client_ca_pem=None, gateway=false,
                        gateway_digests=Vec::new(), gateway_identities=Vec::new(), unauthenticated=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(host: &str, port: u16, max_body_bytes: usize, duplex: bool, max_connections: usize,
           max_message_bytes: usize, idle_s: f64, certificate_pem: Option<Vec<u8>>, key_pem: Option<Vec<u8>>,
           client_ca_pem: Option<Vec<u8>>, gateway: bool, gateway_digests: Vec<Vec<u8>>,
           gateway_identities: Vec<String>, unauthenticated: bool) -> PyResult<Self> {
        let tls = match (&certificate_pem, &key_pem) {
            (Some(certificate), Some(key)) => {
                let config = tls::server_config(certificate, key, client_ca_pem.as_deref()).map_err(PyValueError::new_err)?;
                Some(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
            }
            (None, None) => None,
            _ => return Err(PyValueError::new_err("a certificate and its key go together")),
        };
        let gateway = if gateway {
            let digests = gateway_digests
                .into_iter()
                .map(|d| <[u8; 32]>::try_from(d.as_slice()).map_err(|_| PyValueError::new_err("a SHA-256 digest is 32 bytes")))
                .collect::<PyResult<Vec<_>>>()?;
            Some(GatewayCheck { digests, identities: gateway_identities.into_iter().collect::<HashSet<_>>(), unauthenticated })
        } else {
            None
        };
        let listener = StdListener::bind((host.trim_start_matches('[').trim_end_matches(']'), port))
            .map_err(|err| PyOSError::new_err(format!("ext_proc cannot listen on {host}:{port}: {err}")))?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let handoff = Arc::new(Handoff::new()?);
        let server = Arc::new(Server {
            handoff: handoff.clone(),
            limits: Arc::new(Limits { max_body_bytes, duplex_by_default: duplex }),
            tls,
            gateway,
            max_connections,
            max_message_bytes,
            idle: Duration::from_secs_f64(idle_s.max(0.001)),
            tokens: AtomicU64::new(1),
            connections: AtomicUsize::new(0),
        });
        let (stop, stopping) = watch::channel(None);
        let stopped = handoff.clone();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let thread = std::thread::Builder::new().name("ext-proc-front".into()).spawn(move || {
            runtime.block_on(async move {
                match tokio::net::TcpListener::from_std(listener) {
                    Ok(listener) => server::serve(server, listener, stopping).await,
                    Err(err) => server.handoff.push(Event::Refused { reason: format!("ext_proc listener: {err}") }),
                }
            });
            drop(runtime); // streams still open are cut here, releasing their requests
            stopped.push(Event::Stopped);
        })?;
        Ok(ExtProcFront { handoff, stop, thread: Mutex::new(Some(thread)), port })
    }

    /// The descriptor that becomes readable when events wait to be taken.
    fn fileno(&self) -> i32 {
        self.handoff.fileno()
    }

    /// Every event since the last call, as tuples whose first item is the kind.
    fn take(&self, py: Python<'_>) -> PyResult<Vec<Py<PyAny>>> {
        let mut out = Vec::new();
        for event in self.handoff.take() {
            let item = match event {
                Event::Decide { token, headers, body, to_body, trusted, response_streamed } => {
                    let names = PyDict::new(py);
                    for (name, value) in headers {
                        names.set_item(name, value)?;
                    }
                    let body = body.map(|b| PyBytes::new(py, &b));
                    (DECIDE, token, names, body, to_body, trusted, response_streamed).into_pyobject(py)?.into_any().unbind()
                }
                Event::TooLarge { token, size } => (TOO_LARGE, token, size).into_pyobject(py)?.into_any().unbind(),
                Event::Feed { token, data } => (FEED, token, PyBytes::new(py, &data)).into_pyobject(py)?.into_any().unbind(),
                Event::Finish { token, sse, json_answer, json_body } => {
                    (FINISH, token, sse, json_answer, PyBytes::new(py, &json_body)).into_pyobject(py)?.into_any().unbind()
                }
                Event::Abandon { token } => (ABANDON, token).into_pyobject(py)?.into_any().unbind(),
                Event::Unauthenticated => (UNAUTHENTICATED,).into_pyobject(py)?.into_any().unbind(),
                Event::Refused { reason } => (REFUSED, reason).into_pyobject(py)?.into_any().unbind(),
                Event::Stopped => (STOPPED,).into_pyobject(py)?.into_any().unbind(),
            };
            out.push(item);
        }
        Ok(out)
    }

    /// Answer a request awaiting its decision (or its refusal) with a serialized `ProcessingResponse`; false
    /// when its stream is gone.
    fn answer(&self, token: u64, answer: &[u8], routed: bool, stream: bool) -> bool {
        self.handoff.reply(token, Reply::Answer { answer: Bytes::copy_from_slice(answer), routed, stream })
    }

    /// End a request's stream with gRPC `UNKNOWN` and `message`; false when its stream is gone.
    fn fail(&self, token: u64, message: String) -> bool {
        self.handoff.reply(token, Reply::Fail { message })
    }

    /// Stop accepting, send every connection a GOAWAY, cut the streams still open after `grace_s`; the
    /// `STOPPED` event says when it is done.
    fn stop(&self, grace_s: f64) {
        let _ = self.stop.send(Some(Duration::from_secs_f64(grace_s.max(0.0))));
    }

    /// Wait for the server's thread to end (after `stop`).
    fn join(&self, py: Python<'_>) {
        let thread = self.thread.lock().unwrap().take();
        if let Some(thread) = thread {
            py.detach(|| {
                let _ = thread.join();
            });
        }
    }
}

impl Drop for ExtProcFront {
    fn drop(&mut self) {
        let _ = self.stop.send(Some(Duration::ZERO));
    }
}

#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<ExtProcFront>()?;
    module.add_class::<heuristic::HeuristicProfile>()?;
    module.add_class::<predicted::PredictedProfile>()?;
    module.add_class::<forest::Forests>()?;
    module.add_function(wrap_pyfunction!(producer::finish_predictions, module)?)?;
    module.add("DECIDE", DECIDE)?;
    module.add("TOO_LARGE", TOO_LARGE)?;
    module.add("FEED", FEED)?;
    module.add("FINISH", FINISH)?;
    module.add("ABANDON", ABANDON)?;
    module.add("UNAUTHENTICATED", UNAUTHENTICATED)?;
    module.add("REFUSED", REFUSED)?;
    module.add("STOPPED", STOPPED)?;
    Ok(())
}
