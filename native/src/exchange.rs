//! One HTTP request passing through Envoy: the ext_proc protocol as `router/fronts/ext_proc.py` speaks it, with the
//! router's own work — scheduling, metering, completion — handed to the event loop ([`crate::handoff`]).
//!
//! Body modes come from the stream's `protocol_config` (else the listener's default): a `FULL_DUPLEX_STREAMED`
//! request body is kept until its end, then the request is scheduled and the headers' answer sent, followed by
//! the body's chunks handed back (the last with `end_of_stream`, unless request trailers ended it); a `BUFFERED`
//! body is answered with the destination; with `NONE` the request is scheduled on its headers. Any other request
//! body mode ends the stream with `FAILED_PRECONDITION`, a message of none of the six kinds with
//! `INVALID_ARGUMENT`. Response headers are answered at once; response body chunks are answered (handed back in
//! full duplex) as they pass, a streaming response's chunks handed to the event loop to meter, a JSON one's kept
//! (up to [`MAX_METERED_JSON`]) for its usage; the response's end completes the request, a stream ending before
//! it abandons the request.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use crate::handoff::{Event, Handoff, Reply};
use crate::proto::{self, Answer, HttpBody, HttpHeaders, Kind, ProcessingRequest, ProtocolConfiguration};

pub const MAX_METERED_JSON: usize = 4 * 1024 * 1024;
const EMPTY_REQUEST: &str = "a ProcessingRequest must carry one of request_headers, request_body, \
    request_trailers, response_headers, response_body or response_trailers";

/// gRPC status codes the front ends streams with.
pub const UNKNOWN: u32 = 2;
pub const INVALID_ARGUMENT: u32 = 3;
pub const FAILED_PRECONDITION: u32 = 9;

/// What to do after a message: send these answers and go on, or send them and end the stream (OK after an
/// immediate response, else the status given).
pub enum Step {
    Answers(Vec<Bytes>),
    End(Vec<Bytes>),
    Status(u32, String),
}

/// The listener's settings each exchange reads.
pub struct Limits {
    pub max_body_bytes: usize,
    pub duplex_by_default: bool,
}

pub struct Exchange {
    token: u64,
    trusted: bool,
    handoff: Arc<Handoff>,
    limits: Arc<Limits>,
    duplex_request: bool,
    duplex_response: bool,
    response_streamed: bool, // its body comes as it is sent (streamed or full duplex)
    headers_only: bool,
    headers: Vec<(String, String)>,
    chunks: Vec<Bytes>,
    body_size: usize,
    scheduled: Option<bool>, // routed; whether its response streams
    sse: bool,
    json_answer: bool,
    json_body: Vec<u8>,
    done: bool,
}

impl Exchange {
    pub fn new(token: u64, trusted: bool, handoff: Arc<Handoff>, limits: Arc<Limits>) -> Self {
        let duplex = limits.duplex_by_default;
        Exchange {
            token,
            trusted,
            handoff,
            limits,
            duplex_request: duplex,
            duplex_response: duplex,
            response_streamed: duplex,
            headers_only: false,
            headers: Vec::new(),
            chunks: Vec::new(),
            body_size: 0,
            scheduled: None,
            sse: false,
            json_answer: false,
            json_body: Vec::new(),
            done: false,
        }
    }

    pub async fn step(&mut self, message: ProcessingRequest) -> Step {
        if let Some(config) = &message.protocol_config {
            if let Some(refused) = self.configure(config) {
                self.handoff.push(Event::Refused { reason: refused.clone() });
                return Step::Status(FAILED_PRECONDITION, refused);
            }
        }
        match message.kind {
            None => {
                self.handoff.push(Event::Refused { reason: EMPTY_REQUEST.into() });
                Step::Status(INVALID_ARGUMENT, EMPTY_REQUEST.into())
            }
            Some(Kind::RequestBody(body)) => self.request_body(Some(body)).await,
            Some(Kind::RequestTrailers(_)) if self.scheduled.is_none() => self.request_body(None).await,
            Some(Kind::RequestTrailers(_)) => Step::Answers(vec![proto::continue_answer(Answer::RequestTrailers)]),
            Some(Kind::RequestHeaders(headers)) => self.request_headers(headers).await,
            Some(Kind::ResponseHeaders(headers)) => self.response_headers(headers),
            Some(Kind::ResponseBody(body)) => self.response_body(body),
            Some(Kind::ResponseTrailers(_)) => {
                self.finish();
                Step::Answers(vec![proto::continue_answer(Answer::ResponseTrailers)])
            }
        }
    }

    fn configure(&mut self, config: &ProtocolConfiguration) -> Option<String> {
        let mode = config.request_body_mode;
        if mode != proto::MODE_NONE && mode != proto::MODE_BUFFERED && mode != proto::MODE_FULL_DUPLEX {
            return Some(format!(
                "request body mode {} is not supported (FULL_DUPLEX_STREAMED, BUFFERED or NONE are)",
                proto::mode_name(mode)
            ));
        }
        self.duplex_request = mode == proto::MODE_FULL_DUPLEX;
        self.headers_only = mode == proto::MODE_NONE;
        self.duplex_response = config.response_body_mode == proto::MODE_FULL_DUPLEX;
        self.response_streamed = self.duplex_response || config.response_body_mode == proto::MODE_STREAMED;
        None
    }

    async fn request_headers(&mut self, message: HttpHeaders) -> Step {
        let headers = message.headers.map(|map| map.headers).unwrap_or_default();
        self.headers = headers.iter().map(|h| (h.key.to_lowercase(), h.text())).collect();
        if message.end_of_stream || self.headers_only {
            return self.decide(None, false).await;
        }
        if self.duplex_request {
            Step::Answers(Vec::new())
        } else {
            Step::Answers(vec![proto::continue_answer(Answer::RequestHeaders)])
        }
    }

    /// A chunk of the request body (None: the request trailers, which end it); at its end, the request is
    /// scheduled.
    async fn request_body(&mut self, body: Option<HttpBody>) -> Step {
        let trailers = body.is_none();
        let (data, end_of_stream) = body.map(|b| (b.body, b.end_of_stream)).unwrap_or_default();
        let size = self.body_size + data.len();
        if size > self.limits.max_body_bytes {
            return match self.handoff.ask(self.token, Event::TooLarge { token: self.token, size }).await {
                Some(Reply::Answer { answer, .. }) => Step::End(vec![answer]),
                Some(Reply::Fail { message }) => Step::Status(UNKNOWN, message),
                None => Step::Status(UNKNOWN, "the router is stopping".into()),
            };
        }
        if self.duplex_request && !trailers && !end_of_stream {
            self.chunks.push(data);
            self.body_size = size;
            return Step::Answers(Vec::new());
        }
        let mut chunks = std::mem::take(&mut self.chunks);
        if !trailers {
            chunks.push(data);
        }
        let whole = if chunks.len() == 1 { chunks[0].clone() } else { join(&chunks) };
        let to_body = !self.duplex_request; // the buffered body: Envoy holds the headers until this answer
        match self.decide(Some(whole), to_body).await {
            Step::Answers(mut answers) if self.duplex_request => {
                let last = chunks.len().saturating_sub(1);
                for (i, chunk) in chunks.iter().enumerate() {
                    answers.push(proto::streamed(Answer::RequestBody, chunk, i == last && !trailers));
                }
                if trailers {
                    answers.push(proto::continue_answer(Answer::RequestTrailers));
                }
                Step::Answers(answers)
            }
            step => step,
        }
    }

    async fn decide(&mut self, body: Option<Bytes>, to_body: bool) -> Step {
        let event = Event::Decide {
            token: self.token,
            headers: self.headers.clone(),
            body,
            to_body,
            trusted: self.trusted,
            response_streamed: self.response_streamed,
        };
        match self.handoff.ask(self.token, event).await {
            Some(Reply::Answer { answer, routed: true, stream }) => {
                self.scheduled = Some(stream);
                Step::Answers(vec![answer])
            }
            Some(Reply::Answer { answer, .. }) => Step::End(vec![answer]),
            Some(Reply::Fail { message }) => Step::Status(UNKNOWN, message),
            None => Step::Status(UNKNOWN, "the router is stopping".into()),
        }
    }

    fn response_headers(&mut self, message: HttpHeaders) -> Step {
        let headers = message.headers.map(|map| map.headers).unwrap_or_default();
        self.json_answer = headers
            .iter()
            .any(|h| h.key.eq_ignore_ascii_case("content-type") && h.starts_with(b"application/json"));
        if let Some(stream) = self.scheduled {
            self.sse = stream;
        }
        if message.end_of_stream {
            self.finish();
        }
        Step::Answers(vec![proto::continue_answer(Answer::ResponseHeaders)])
    }

    fn response_body(&mut self, body: HttpBody) -> Step {
        if self.scheduled.is_some() && !self.done {
            if self.sse {
                self.handoff.push(Event::Feed { token: self.token, data: body.body.clone() });
            } else if self.json_body.len() < MAX_METERED_JSON {
                self.json_body.extend_from_slice(&body.body);
            }
            if body.end_of_stream {
                self.finish();
            }
        }
        if self.duplex_response {
            Step::Answers(vec![proto::streamed(Answer::ResponseBody, &body.body, body.end_of_stream)])
        } else {
            Step::Answers(vec![proto::continue_answer(Answer::ResponseBody)])
        }
    }

    fn finish(&mut self) {
        if self.scheduled.is_none() || self.done {
            return;
        }
        self.done = true;
        self.handoff.push(Event::Finish {
            token: self.token,
            sse: self.sse,
            json_answer: self.json_answer,
            json_body: std::mem::take(&mut self.json_body),
        });
    }
}

impl Drop for Exchange {
    /// A stream that ends (or is cut) before its response did releases its request.
    fn drop(&mut self) {
        if self.scheduled.is_some() && !self.done {
            self.handoff.push(Event::Abandon { token: self.token });
        }
    }
}

fn join(chunks: &[Bytes]) -> Bytes {
    let mut whole = BytesMut::with_capacity(chunks.iter().map(Bytes::len).sum());
    for chunk in chunks {
        whole.extend_from_slice(chunk);
    }
    whole.freeze()
}
