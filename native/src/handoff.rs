//! The hand-off between the front's threads and the Python event loop, which alone runs the router's code.
//!
//! The front pushes [`Event`]s onto one queue; the first push onto an empty queue writes a byte to a socket
//! pair whose other end the event loop watches, so one wake-up carries every event pushed meanwhile. The loop
//! takes them all at once ([`Handoff::take`]) and answers those that await an answer ([`Handoff::reply`]) by
//! their token; an exchange whose stream is gone by then is told so (`reply` returns false).

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::Mutex;

use bytes::Bytes;
use tokio::sync::oneshot;

/// What the front hands the event loop.
pub enum Event {
    /// Schedule a request: its headers (lower-cased names, in order), its body (None: scheduled on its headers
    /// alone), whether the answer goes to the request body message (else to the request headers'), whether
    /// its caller is trusted for telemetry, and whether its response body comes as it is sent (streamed or full
    /// duplex, not buffered). Awaits a [`Reply`].
    Decide {
        token: u64,
        headers: Vec<(String, String)>,
        body: Option<Bytes>,
        to_body: bool,
        trusted: bool,
        response_streamed: bool,
    },
    /// A request body grew to `size` bytes, over the limit: awaits the refusal.
    TooLarge { token: u64, size: usize },
    /// A chunk of a scheduled streaming response, to meter.
    Feed { token: u64, data: Bytes },
    /// The response ended: `sse` if it was metered as a stream, whether it said it was JSON, the JSON body kept.
    Finish { token: u64, sse: bool, json_answer: bool, json_body: Vec<u8> },
    /// The stream of a scheduled request ended before its response did.
    Abandon { token: u64 },
    /// A caller was refused for not proving it is the gateway.
    Unauthenticated,
    /// A stream was refused: the reason, for the log.
    Refused { reason: String },
    /// The server has stopped: every stream is over.
    Stopped,
}

/// The event loop's answer to a request awaiting one: a serialized `ProcessingResponse`, whether it routes the
/// request (else it is an immediate response, which ends the stream) and whether the request streams its
/// response; or a failure that ends the stream with gRPC `UNKNOWN`.
pub enum Reply {
    Answer { answer: Bytes, routed: bool, stream: bool },
    Fail { message: String },
}

struct Queue {
    events: Vec<Event>,
    signalled: bool,
}

pub struct Handoff {
    queue: Mutex<Queue>,
    pending: Mutex<HashMap<u64, oneshot::Sender<Reply>>>,
    wake: UnixStream,
    woken: UnixStream,
}

impl Handoff {
    pub fn new() -> std::io::Result<Self> {
        let (wake, woken) = UnixStream::pair()?;
        wake.set_nonblocking(true)?;
        woken.set_nonblocking(true)?;
        Ok(Handoff {
            queue: Mutex::new(Queue { events: Vec::new(), signalled: false }),
            pending: Mutex::new(HashMap::new()),
            wake,
            woken,
        })
    }

    /// The descriptor the event loop watches for readability.
    pub fn fileno(&self) -> i32 {
        use std::os::fd::AsRawFd;
        self.woken.as_raw_fd()
    }

    pub fn push(&self, event: Event) {
        let signal = {
            let mut queue = self.queue.lock().unwrap();
            queue.events.push(event);
            !std::mem::replace(&mut queue.signalled, true)
        };
        if signal {
            // a full socket buffer means a wake-up is already waiting to be read
            let _ = (&self.wake).write(&[1]);
        }
    }

    /// Hand `event` to the event loop and wait for its reply; the wait ends with the caller's future.
    pub async fn ask(&self, token: u64, event: Event) -> Option<Reply> {
        let (sender, receiver) = oneshot::channel();
        self.pending.lock().unwrap().insert(token, sender);
        let mut waiting = Waiting { handoff: self, token, receiver: Some(receiver) };
        self.push(event);
        let reply = waiting.receiver.as_mut().unwrap().await.ok();
        waiting.receiver = None;
        reply
    }

    /// Every event pushed since the last call (the wake-up bytes consumed first, so none is lost).
    pub fn take(&self) -> Vec<Event> {
        let mut sink = [0u8; 256];
        loop {
            match (&self.woken).read(&mut sink) {
                Ok(n) if n == sink.len() => continue,
                Ok(_) => break,
                Err(err) if err.kind() == ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        let mut queue = self.queue.lock().unwrap();
        queue.signalled = false;
        std::mem::take(&mut queue.events)
    }

    /// Answer the request of `token`; false when its stream is gone.
    pub fn reply(&self, token: u64, reply: Reply) -> bool {
        match self.pending.lock().unwrap().remove(&token) {
            Some(sender) => sender.send(reply).is_ok(),
            None => false,
        }
    }
}

/// A wait for a reply; dropped before the reply is read (its stream gone), a request the reply had routed is
/// abandoned, so its dispatch is released.
struct Waiting<'a> {
    handoff: &'a Handoff,
    token: u64,
    receiver: Option<oneshot::Receiver<Reply>>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let Some(mut receiver) = self.receiver.take() else { return };
        self.handoff.pending.lock().unwrap().remove(&self.token);
        if let Ok(Reply::Answer { routed: true, .. }) = receiver.try_recv() {
            self.handoff.push(Event::Abandon { token: self.token });
        }
    }
}
