//! The fields of Envoy's ext_proc messages (`envoy.service.ext_proc.v3`) the front reads or writes; any other
//! field of a message is skipped unread. Field numbers are those of `external_processor.proto`.

use bytes::{BufMut, Bytes, BytesMut};
use prost::Message;

#[derive(Clone, PartialEq, Message)]
pub struct ProcessingRequest {
    #[prost(oneof = "Kind", tags = "2, 3, 4, 5, 6, 7")]
    pub kind: Option<Kind>,
    #[prost(message, optional, tag = "11")]
    pub protocol_config: Option<ProtocolConfiguration>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Kind {
    #[prost(message, tag = "2")]
    RequestHeaders(HttpHeaders),
    #[prost(message, tag = "3")]
    ResponseHeaders(HttpHeaders),
    #[prost(message, tag = "4")]
    RequestBody(HttpBody),
    #[prost(message, tag = "5")]
    ResponseBody(HttpBody),
    #[prost(message, tag = "6")]
    RequestTrailers(Empty),
    #[prost(message, tag = "7")]
    ResponseTrailers(Empty),
}

#[derive(Clone, PartialEq, Message)]
pub struct HttpHeaders {
    #[prost(message, optional, tag = "1")]
    pub headers: Option<HeaderMap>,
    #[prost(bool, tag = "3")]
    pub end_of_stream: bool,
}

#[derive(Clone, PartialEq, Message)]
pub struct HeaderMap {
    #[prost(message, repeated, tag = "1")]
    pub headers: Vec<HeaderValue>,
}

#[derive(Clone, PartialEq, Message)]
pub struct HeaderValue {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(string, tag = "2")]
    pub value: String,
    #[prost(bytes = "bytes", tag = "3")]
    pub raw_value: Bytes,
}

impl HeaderValue {
    /// The header's value as the Python servicer reads it: `value`, else `raw_value` decoded.
    pub fn text(&self) -> String {
        if self.value.is_empty() {
            String::from_utf8_lossy(&self.raw_value).into_owned()
        } else {
            self.value.clone()
        }
    }

    /// Whether the value (`value`, else `raw_value`) begins with `prefix`.
    pub fn starts_with(&self, prefix: &[u8]) -> bool {
        if self.value.is_empty() {
            self.raw_value.starts_with(prefix)
        } else {
            self.value.as_bytes().starts_with(prefix)
        }
    }
}

#[derive(Clone, PartialEq, Message)]
pub struct HttpBody {
    #[prost(bytes = "bytes", tag = "1")]
    pub body: Bytes,
    #[prost(bool, tag = "2")]
    pub end_of_stream: bool,
}

/// A message whose fields the front does not read (trailers: only that they came counts).
#[derive(Clone, PartialEq, Message)]
pub struct Empty {}

#[derive(Clone, PartialEq, Message)]
pub struct ProtocolConfiguration {
    #[prost(int32, tag = "1")]
    pub request_body_mode: i32,
    #[prost(int32, tag = "2")]
    pub response_body_mode: i32,
}

/// `ProcessingMode.BodySendMode`.
pub const MODE_NONE: i32 = 0;
pub const MODE_STREAMED: i32 = 1;
pub const MODE_BUFFERED: i32 = 2;
pub const MODE_FULL_DUPLEX: i32 = 4;

pub fn mode_name(mode: i32) -> String {
    match mode {
        0 => "NONE".into(),
        1 => "STREAMED".into(),
        2 => "BUFFERED".into(),
        3 => "BUFFERED_PARTIAL".into(),
        4 => "FULL_DUPLEX_STREAMED".into(),
        5 => "GRPC".into(),
        other => other.to_string(),
    }
}

/// `ProcessingResponse` field numbers of the answer to each kind of message.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Answer {
    RequestHeaders = 1,
    ResponseHeaders = 2,
    RequestBody = 3,
    ResponseBody = 4,
    RequestTrailers = 5,
    ResponseTrailers = 6,
}

/// The answer that changes nothing: an empty `HeadersResponse`, `BodyResponse` or `TrailersResponse`.
pub fn continue_answer(kind: Answer) -> Bytes {
    Bytes::from(vec![(kind as u8) << 3 | 2, 0])
}

/// A body chunk handed back for Envoy to forward (`FULL_DUPLEX_STREAMED`): `BodyResponse { response:
/// CommonResponse { body_mutation: BodyMutation { streamed_response: { body, end_of_stream } } } }`.
pub fn streamed(kind: Answer, body: &[u8], end_of_stream: bool) -> Bytes {
    let streamed = field_len(body.len()) + if end_of_stream { 2 } else { 0 };
    let mutation = field_len(streamed);
    let common = field_len(mutation);
    let body_response = field_len(common);
    let mut out = BytesMut::with_capacity(field_len(body_response));
    put_header(&mut out, kind as u32, body_response);
    put_header(&mut out, 1, common); // BodyResponse.response
    put_header(&mut out, 3, mutation); // CommonResponse.body_mutation
    put_header(&mut out, 3, streamed); // BodyMutation.streamed_response
    put_header(&mut out, 1, body.len()); // StreamedBodyResponse.body
    out.put_slice(body);
    if end_of_stream {
        out.put_slice(&[2 << 3, 1]); // StreamedBodyResponse.end_of_stream
    }
    out.freeze()
}

fn varint_len(mut value: usize) -> usize {
    let mut n = 1;
    while value >= 0x80 {
        value >>= 7;
        n += 1;
    }
    n
}

/// Bytes a length-delimited field of `len` bytes takes, its tag (one byte for fields 1–15) included.
fn field_len(len: usize) -> usize {
    1 + varint_len(len) + len
}

fn put_header(out: &mut BytesMut, field: u32, len: usize) {
    out.put_u8((field << 3 | 2) as u8);
    prost::encoding::encode_varint(len as u64, out);
}
