//! The HTTP side of the server, on hyper: responses as a boxed body, JSON
//! written whole and SSE written as a stream of frames, one per event, which
//! hyper sends chunked on a keep-alive connection as the providers do.

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::Response;
use hyper::body::Frame;
use hyper::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderValue};
use serde_json::Value;

/// Every response body the server sends.
pub(crate) type Body = BoxBody<Bytes, Infallible>;

/// The largest request body accepted, to bound memory.
pub(crate) const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// A complete JSON response (an empty body for a probe).
pub(crate) fn json(status: u16, body: Vec<u8>) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(body)).boxed());
    *response.status_mut() =
        hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// The events of one SSE reply, in order.
#[derive(Debug, Default)]
pub(crate) struct Sse {
    events: Vec<Bytes>,
}

impl Sse {
    /// A named event with a JSON payload (Anthropic, OpenAI).
    pub(crate) fn event(&mut self, event: &str, data: &Value) {
        self.events
            .push(Bytes::from(format!("event: {event}\ndata: {data}\n\n")));
    }

    /// An unnamed event (Gemini's `alt=sse` stream).
    pub(crate) fn data(&mut self, data: &Value) {
        self.events
            .push(Bytes::from(format!("data: {data}\r\n\r\n")));
    }

    /// The stream as a `200 text/event-stream` response, one frame an event.
    pub(crate) fn response(self) -> Response<Body> {
        let frames = self
            .events
            .into_iter()
            .map(|event| Ok::<_, Infallible>(Frame::data(event)));
        let mut response =
            Response::new(StreamBody::new(futures_util::stream::iter(frames)).boxed());
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
        headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        response
    }
}
