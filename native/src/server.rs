//! The gRPC server: HTTP/2 (h2) over TCP or TLS, one task per connection and per stream, on one thread.
//!
//! It serves one method, `envoy.service.ext_proc.v3.ExternalProcessor/Process`, as the grpcio listener does:
//! at most `max_connections` connections (one more is closed as it opens), a connection without a call for
//! `idle` closed with a GOAWAY, messages up to `max_message_bytes` (`RESOURCE_EXHAUSTED` beyond), callers
//! judged by [`crate::auth::GatewayCheck`] (`UNAUTHENTICATED` when refused). Stopping stops accepting, sends
//! every connection a GOAWAY, lets streams in progress finish for the grace period, then cuts the rest.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use h2::server::SendResponse;
use h2::SendStream;
use h2::RecvStream;
use http::{HeaderMap, HeaderValue, Request, Response};
use prost::Message;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

use crate::auth::{certificate_names, GatewayCheck};
use crate::exchange::{Exchange, Limits, Step};
use crate::handoff::{Event, Handoff};
use crate::proto::ProcessingRequest;

const PROCESS: &str = "/envoy.service.ext_proc.v3.ExternalProcessor/Process";
const OK: u32 = 0;
const INTERNAL: u32 = 13;
const UNIMPLEMENTED: u32 = 12;
const RESOURCE_EXHAUSTED: u32 = 8;
const UNAUTHENTICATED: u32 = 16;
const NOT_GATEWAY: &str = "the caller is not the gateway: no gateway token or certificate identity";

pub struct Server {
    pub handoff: Arc<Handoff>,
    pub limits: Arc<Limits>,
    pub tls: Option<TlsAcceptor>,
    pub gateway: Option<GatewayCheck>,
    pub max_connections: usize,
    pub max_message_bytes: usize,
    pub idle: Duration,
    pub tokens: AtomicU64,
    pub connections: AtomicUsize,
}

/// Accept and serve connections until `stop` says a grace period; then stop as the module says.
pub async fn serve(server: Arc<Server>, listener: TcpListener, mut stop: watch::Receiver<Option<Duration>>) {
    let all_closed = Arc::new(Notify::new());
    let grace = loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((socket, _)) = accepted else { continue };
                if server.connections.load(Ordering::Relaxed) >= server.max_connections {
                    tokio::spawn(refuse(socket)); // over the limit: closed as it opens
                    continue;
                }
                server.connections.fetch_add(1, Ordering::Relaxed);
                let (server, stop, all_closed) = (server.clone(), stop.clone(), all_closed.clone());
                tokio::spawn(async move {
                    let _ = socket.set_nodelay(true);
                    connection(&server, socket, stop).await;
                    if server.connections.fetch_sub(1, Ordering::Relaxed) == 1 {
                        all_closed.notify_waiters();
                    }
                });
            }
            changed = stop.changed() => {
                if changed.is_err() { break Duration::ZERO; }
                if let Some(grace) = *stop.borrow() { break grace; }
            }
        }
    };
    drop(listener);
    let deadline = Instant::now() + grace;
    while server.connections.load(Ordering::Relaxed) > 0 {
        let closed = all_closed.notified();
        if server.connections.load(Ordering::Relaxed) == 0 {
            break;
        }
        if tokio::time::timeout_at(deadline, closed).await.is_err() {
            break;
        }
    }
}

/// Close a connection before any frame: our side first, then what the client sent is read and dropped (for a
/// second at most), so that it sees the end of the stream rather than a reset.
async fn refuse(mut socket: TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = socket.shutdown().await;
    let mut sink = [0u8; 1024];
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        while matches!(socket.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await;
}

async fn connection(server: &Arc<Server>, socket: TcpStream, stop: watch::Receiver<Option<Duration>>) {
    match &server.tls {
        None => http2(server, socket, Vec::new(), stop).await,
        Some(acceptor) => {
            let Ok(Ok(stream)) = tokio::time::timeout(Duration::from_secs(10), acceptor.accept(socket)).await else {
                return;
            };
            let names = match stream.get_ref().1.peer_certificates() {
                Some([leaf, ..]) if server.gateway.is_some() => certificate_names(leaf),
                _ => Vec::new(),
            };
            http2(server, stream, names, stop).await
        }
    }
}

async fn http2<T>(server: &Arc<Server>, io: T, names: Vec<String>, mut stop: watch::Receiver<Option<Duration>>)
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    let handshake = h2::server::Builder::new()
        .initial_window_size(1 << 20)
        .initial_connection_window_size(1 << 24)
        .max_concurrent_streams(1 << 16)
        .max_send_buffer_size(1 << 22)
        .handshake::<_, Bytes>(io);
    let Ok(Ok(mut conn)) = tokio::time::timeout(Duration::from_secs(10), handshake).await else { return };
    let names = Arc::new(names);
    let active = Arc::new(AtomicUsize::new(0));
    let ended = Arc::new(Notify::new());
    let mut idle_since = Instant::now();
    let mut closing = stop.borrow().is_some();
    if closing {
        conn.graceful_shutdown();
    }
    loop {
        let idle = active.load(Ordering::Relaxed) == 0 && !closing;
        tokio::select! {
            request = conn.accept() => match request {
                Some(Ok((request, respond))) => {
                    active.fetch_add(1, Ordering::Relaxed);
                    let (server, names, active, ended) = (server.clone(), names.clone(), active.clone(), ended.clone());
                    tokio::spawn(async move {
                        call(&server, request, respond, &names).await;
                        active.fetch_sub(1, Ordering::Relaxed);
                        ended.notify_one();
                    });
                }
                _ => break,
            },
            _ = ended.notified() => {
                if active.load(Ordering::Relaxed) == 0 {
                    idle_since = Instant::now();
                }
            }
            _ = tokio::time::sleep_until(idle_since + server.idle), if idle => {
                closing = true;
                conn.graceful_shutdown();
            }
            changed = stop.changed(), if !closing => {
                if changed.is_err() || stop.borrow().is_some() {
                    closing = true;
                    conn.graceful_shutdown();
                }
            }
        }
    }
}

/// One call: the ext_proc stream, message by message.
async fn call(server: &Server, request: Request<RecvStream>, mut respond: SendResponse<Bytes>, names: &[String]) {
    if request.uri().path() != PROCESS {
        let message = format!("Method not found: {}", request.uri().path());
        return trailers_only(&mut respond, UNIMPLEMENTED, &message);
    }
    let trusted = match &server.gateway {
        None => Some(true),
        Some(gateway) => {
            // the last value, as grpcio's servicer reads the call's metadata into a dict
            let authorization = request.headers().get_all("authorization").iter().last();
            gateway.judge(authorization.map(|v| v.as_bytes()), names)
        },
    };
    let Some(trusted) = trusted else {
        server.handoff.push(Event::Unauthenticated);
        // refused once the caller's first message has come (or the request's end, or a second has passed): a
        // client that writes before it reads then reads the status, not its write failing under a reset stream
        let mut body = request.into_body();
        let _ = tokio::time::timeout(Duration::from_secs(1), body.data()).await;
        return trailers_only(&mut respond, UNAUTHENTICATED, NOT_GATEWAY);
    };
    let token = server.tokens.fetch_add(1, Ordering::Relaxed);
    let mut exchange = Exchange::new(token, trusted, server.handoff.clone(), server.limits.clone());
    let mut body = request.into_body();
    let mut send: Option<SendStream<Bytes>> = None;
    let mut buffer = BytesMut::new();
    loop {
        let data = match body.data().await {
            Some(Ok(data)) => data,
            Some(Err(_)) => return, // reset by the client: the exchange releases its request
            None => break,          // half-closed: the call ends with OK
        };
        let _ = body.flow_control().release_capacity(data.len());
        buffer.put(data);
        loop {
            let message = match next_message(&mut buffer, server.max_message_bytes) {
                Ok(Some(message)) => message,
                Ok(None) => break,
                Err((code, text)) => return end(&mut respond, send, code, &text),
            };
            let message = match ProcessingRequest::decode(message) {
                Ok(message) => message,
                Err(err) => return end(&mut respond, send, INTERNAL, &format!("cannot decode the request: {err}")),
            };
            match exchange.step(message).await {
                Step::Answers(answers) => {
                    if !answers.is_empty() && !write(&mut respond, &mut send, &answers) {
                        return;
                    }
                }
                Step::End(answers) => {
                    if write(&mut respond, &mut send, &answers) {
                        end(&mut respond, send, OK, "");
                    }
                    return;
                }
                Step::Status(code, text) => return end(&mut respond, send, code, &text),
            }
        }
    }
    end(&mut respond, send, OK, "")
}

/// The next whole gRPC message in `buffer`, if one is there.
fn next_message(buffer: &mut BytesMut, max: usize) -> Result<Option<Bytes>, (u32, String)> {
    if buffer.len() < 5 {
        return Ok(None);
    }
    let compressed = buffer[0] != 0;
    let length = u32::from_be_bytes([buffer[1], buffer[2], buffer[3], buffer[4]]) as usize;
    if length > max {
        return Err((RESOURCE_EXHAUSTED, format!("Received message larger than max ({length} vs. {max})")));
    }
    if compressed {
        return Err((UNIMPLEMENTED, "compressed messages are not supported".into()));
    }
    if buffer.len() < 5 + length {
        buffer.reserve(5 + length - buffer.len());
        return Ok(None);
    }
    buffer.advance(5);
    Ok(Some(buffer.split_to(length).freeze()))
}

/// Send `answers` as one DATA frame of gRPC messages (the response headers first, once); false if the stream
/// is gone.
fn write(respond: &mut SendResponse<Bytes>, send: &mut Option<SendStream<Bytes>>, answers: &[Bytes]) -> bool {
    if send.is_none() {
        let response = Response::builder().status(200).header("content-type", "application/grpc").body(()).unwrap();
        match respond.send_response(response, false) {
            Ok(stream) => *send = Some(stream),
            Err(_) => return false,
        }
    }
    let mut frame = BytesMut::with_capacity(answers.iter().map(|a| a.len() + 5).sum());
    for answer in answers {
        frame.put_u8(0);
        frame.put_u32(answer.len() as u32);
        frame.put_slice(answer);
    }
    send.as_mut().unwrap().send_data(frame.freeze(), false).is_ok()
}

/// End the call with a gRPC status: in trailers, or alone when nothing was sent (trailers-only).
fn end(respond: &mut SendResponse<Bytes>, send: Option<SendStream<Bytes>>, code: u32, text: &str) {
    match send {
        Some(mut stream) => {
            let _ = stream.send_trailers(status(code, text));
        }
        None => trailers_only(respond, code, text),
    }
}

fn trailers_only(respond: &mut SendResponse<Bytes>, code: u32, text: &str) {
    let mut response = Response::builder().status(200).header("content-type", "application/grpc").body(()).unwrap();
    response.headers_mut().extend(status(code, text));
    let _ = respond.send_response(response, true);
}

fn status(code: u32, text: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert("grpc-status", HeaderValue::from(code));
    if !text.is_empty() {
        if let Ok(value) = HeaderValue::from_str(&percent_encode(text)) {
            headers.insert("grpc-message", value);
        }
    }
    headers
}

/// gRPC's percent-encoding of `grpc-message`: bytes outside printable ASCII, and `%`, as `%XX`.
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if (0x20..=0x7e).contains(&byte) && byte != b'%' {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}
