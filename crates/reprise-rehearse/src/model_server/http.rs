//! A minimal HTTP/1.1 reader and writer: enough for loopback clients. One
//! request per connection; every response says `Connection: close`.

use std::io::{self, BufRead, Read, Write};

/// The largest request head or body accepted, to bound memory.
const MAX_HEAD_BYTES: usize = 64 * 1024;
const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// One parsed request.
#[derive(Debug)]
pub(crate) struct Request {
    pub(crate) method: String,
    pub(crate) path: String,
    pub(crate) query: Option<String>,
    pub(crate) body: Vec<u8>,
}

fn invalid(message: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message.to_owned())
}

fn read_line(reader: &mut impl BufRead, head_bytes: &mut usize) -> io::Result<String> {
    let mut line = Vec::new();
    let read = reader
        .take((MAX_HEAD_BYTES - *head_bytes) as u64 + 1)
        .read_until(b'\n', &mut line)?;
    *head_bytes += read;
    if *head_bytes > MAX_HEAD_BYTES {
        return Err(invalid("request head too large"));
    }
    if read == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    let line = String::from_utf8(line).map_err(|_| invalid("request head is not utf-8"))?;
    Ok(line.trim_end_matches(['\r', '\n']).to_owned())
}

/// Reads one request; `Ok(None)` when the peer closed before sending one.
pub(crate) fn read_request(reader: &mut impl BufRead) -> io::Result<Option<Request>> {
    let mut head_bytes = 0;
    let request_line = match read_line(reader, &mut head_bytes) {
        Ok(line) => line,
        Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(error) => return Err(error),
    };
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(_version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(invalid("malformed request line"));
    };
    let (path, query) = match target.split_once('?') {
        Some((path, query)) => (path.to_owned(), Some(query.to_owned())),
        None => (target.to_owned(), None),
    };
    let mut content_length = None;
    let mut chunked = false;
    loop {
        let line = read_line(reader, &mut head_bytes)?;
        if line.is_empty() {
            break;
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(invalid("malformed header"));
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            content_length = Some(
                value
                    .parse::<usize>()
                    .map_err(|_| invalid("bad content-length"))?,
            );
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.to_ascii_lowercase().contains("chunked");
        }
    }
    let body = if chunked {
        read_chunked(reader)?
    } else {
        let length = content_length.unwrap_or(0);
        if length > MAX_BODY_BYTES {
            return Err(invalid("request body too large"));
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body)?;
        body
    };
    Ok(Some(Request {
        method: method.to_owned(),
        path,
        query,
        body,
    }))
}

fn read_chunked(reader: &mut impl BufRead) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut head_bytes = 0;
        let size_line = read_line(reader, &mut head_bytes)?;
        let size_text = size_line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16).map_err(|_| invalid("bad chunk size"))?;
        if size == 0 {
            // Trailers, up to the empty line.
            while !read_line(reader, &mut head_bytes)?.is_empty() {}
            return Ok(body);
        }
        if body.len() + size > MAX_BODY_BYTES {
            return Err(invalid("request body too large"));
        }
        let start = body.len();
        body.resize(start + size, 0);
        reader.read_exact(&mut body[start..])?;
        let mut crlf = [0; 2];
        reader.read_exact(&mut crlf)?;
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        529 => "Overloaded",
        _ => "Status",
    }
}

/// Writes a complete JSON response.
pub(crate) fn write_json(writer: &mut impl Write, status: u16, body: &[u8]) -> io::Result<()> {
    write!(
        writer,
        "HTTP/1.1 {status} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        reason(status),
        body.len()
    )?;
    writer.write_all(body)?;
    writer.flush()
}

/// Writes the head of an SSE stream; events follow and the close ends it.
pub(crate) fn write_sse_head(writer: &mut impl Write) -> io::Result<()> {
    writer.write_all(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n",
    )?;
    writer.flush()
}

/// Writes one SSE event with a JSON payload.
pub(crate) fn write_event(
    writer: &mut impl Write,
    event: &str,
    data: &serde_json::Value,
) -> io::Result<()> {
    write!(writer, "event: {event}\ndata: {data}\n\n")?;
    writer.flush()
}
