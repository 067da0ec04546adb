//! The page benchmark's load generator (`xtask pages-load`, which `end2end/bench/pages.mjs`
//! runs once its sessions are signed in): one thread and one keep-alive HTTP/1.1 connection
//! per session, each loading the pages in turn (or one alone) with its session's cookie until
//! the time is up, and writing every answer to a file for the script to sum up.
//!
//! Why not in the script: on this two-core machine the load generator shares the cores with
//! the server and PostgreSQL, so its own CPU a page is taken from what they can serve. Node's
//! HTTP client spent 0.13–0.21 ms a page on a fast day (a tenth of the machine's CPU a page);
//! blocking sockets and a byte count cost a fraction of that (docs/PERFORMANCE.md).
//!
//! Flags: `--addr HOST:PORT`, `--seconds S`, `--cookies FILE` (a `Cookie` header value a
//! line, one session each), `--only I` (the index of the one page to load, or none), `--out
//! FILE`, then the paths. Each line of the output is `PAGE MS BYTES STATUS` for an answer or
//! `E PAGE MESSAGE` for a request that got none.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::Result;

/// One answer: which page, how long it took, the body's length, the status.
struct Answer {
    page: usize,
    ms: f64,
    bytes: usize,
    status: u16,
}

/// What `pages.mjs` runs as `PAGES_LOADER`: this binary.
pub fn loader() -> Result<std::path::PathBuf> {
    std::env::current_exe().map_err(|e| format!("finding the xtask binary for pages-load: {e}"))
}

pub fn run(args: &[String]) -> Result {
    let mut addr = None;
    let mut seconds = 20.0_f64;
    let mut cookies = None;
    let mut only = None;
    let mut out = None;
    let mut paths = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("pages-load: {a} needs a value"))
        };
        match a.as_str() {
            "--addr" => addr = Some(value()?),
            "--seconds" => {
                let v = value()?;
                seconds = v
                    .parse()
                    .map_err(|_| format!("pages-load: --seconds {v:?} is not a number"))?;
            }
            "--cookies" => cookies = Some(value()?),
            "--only" => {
                let v = value()?;
                only = Some(
                    v.parse::<usize>()
                        .map_err(|_| format!("pages-load: --only {v:?} is not an index"))?,
                );
            }
            "--out" => out = Some(value()?),
            p if p.starts_with('/') => paths.push(p.to_owned()),
            other => return Err(format!("pages-load: unexpected argument {other:?}")),
        }
    }
    let addr = addr.ok_or("pages-load: --addr is required")?;
    let out = out.ok_or("pages-load: --out is required")?;
    let cookies = std::fs::read_to_string(cookies.ok_or("pages-load: --cookies is required")?)
        .map_err(|e| format!("pages-load: reading the cookies: {e}"))?;
    let cookies: Vec<String> = cookies
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    if paths.is_empty() || cookies.is_empty() {
        return Err("pages-load: needs at least one path and one cookie".into());
    }
    if let Some(i) = only
        && i >= paths.len()
    {
        return Err(format!(
            "pages-load: --only {i}: there are {} paths",
            paths.len()
        ));
    }
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    let threads: Vec<_> = cookies
        .into_iter()
        .enumerate()
        .map(|(i, cookie)| {
            let (addr, paths) = (addr.clone(), paths.clone());
            std::thread::spawn(move || session(&addr, &cookie, &paths, only, i, until))
        })
        .collect();
    let mut text = String::new();
    for t in threads {
        let (answers, errors) = t.join().map_err(|_| "pages-load: a session panicked")?;
        for a in answers {
            text.push_str(&format!(
                "{} {:.3} {} {}\n",
                a.page, a.ms, a.bytes, a.status
            ));
        }
        for (page, e) in errors {
            text.push_str(&format!("E {page} {}\n", e.replace('\n', " ")));
        }
    }
    std::fs::write(&out, text).map_err(|e| format!("pages-load: writing {out}: {e}"))
}

/// One session's loop: page after page on one connection (a new one after an error).
fn session(
    addr: &str,
    cookie: &str,
    paths: &[String],
    only: Option<usize>,
    first: usize,
    until: Instant,
) -> (Vec<Answer>, Vec<(usize, String)>) {
    let mut answers = Vec::new();
    let mut errors = Vec::new();
    let mut conn: Option<Conn> = None;
    let mut k = first;
    while Instant::now() < until {
        let page = only.unwrap_or(k % paths.len());
        k += 1;
        let request = format!(
            "GET {} HTTP/1.1\r\nHost: {addr}\r\nCookie: {cookie}\r\nAccept: text/html\r\n\r\n",
            paths[page]
        );
        let start = Instant::now();
        let result = match conn.as_mut() {
            Some(c) => c.get(request.as_bytes()),
            None => Conn::open(addr).and_then(|c| conn.insert(c).get(request.as_bytes())),
        };
        match result {
            Ok((status, bytes, keep)) => {
                answers.push(Answer {
                    page,
                    ms: start.elapsed().as_secs_f64() * 1000.0,
                    bytes,
                    status,
                });
                if !keep {
                    conn = None;
                }
            }
            Err(e) => {
                errors.push((page, e));
                conn = None;
            }
        }
    }
    (answers, errors)
}

/// A keep-alive connection and what has been read from it but not yet used.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl Conn {
    fn open(addr: &str) -> std::result::Result<Conn, String> {
        let stream = TcpStream::connect(addr).map_err(|e| format!("connecting to {addr}: {e}"))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(|e| e.to_string())?;
        Ok(Conn {
            stream,
            buf: vec![0; 256 * 1024],
            start: 0,
            end: 0,
        })
    }

    /// Sends `request` and reads its answer: the status, the body's length (after chunked
    /// decoding) and whether the connection may be used again.
    fn get(&mut self, request: &[u8]) -> std::result::Result<(u16, usize, bool), String> {
        self.stream
            .write_all(request)
            .map_err(|e| format!("sending: {e}"))?;
        let (head_len, status, head) = loop {
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut answer = httparse::Response::new(&mut headers);
            match answer.parse(&self.buf[self.start..self.end]) {
                Ok(httparse::Status::Complete(n)) => break (n, answer.code, Head::of(&answer)?),
                Ok(httparse::Status::Partial) => self.fill()?,
                Err(e) => return Err(format!("the answer's head: {e}")),
            }
        };
        let status = status.ok_or("an answer without a status")?;
        let Head {
            length,
            chunked,
            keep,
        } = head;
        self.start += head_len;
        let bytes = if chunked {
            let mut total = 0;
            loop {
                let size = self.chunk_size()?;
                if size == 0 {
                    // Trailers, then the blank line that ends the message.
                    while !self.line()?.is_empty() {}
                    break total;
                }
                self.skip(size)?;
                if !self.line()?.is_empty() {
                    return Err("a chunk not followed by CRLF".into());
                }
                total += size;
            }
        } else {
            // The portal always says how long its answers are; one that ends only when the
            // connection closes would be counted wrong here, so it is an error, not a guess.
            let n = length.ok_or("an answer with neither a length nor chunks")?;
            self.skip(n)?;
            n
        };
        Ok((status, bytes, keep))
    }

    /// Reads more into the buffer (moving what is unread to its front first).
    fn fill(&mut self) -> std::result::Result<(), String> {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            self.buf.resize(self.buf.len() * 2, 0);
        }
        match self.stream.read(&mut self.buf[self.end..]) {
            Ok(0) => Err("the server closed the connection".into()),
            Ok(n) => {
                self.end += n;
                Ok(())
            }
            Err(e) => Err(format!("reading: {e}")),
        }
    }

    /// The size line that starts a chunk (its extensions ignored).
    fn chunk_size(&mut self) -> std::result::Result<usize, String> {
        loop {
            match httparse::parse_chunk_size(&self.buf[self.start..self.end]) {
                Ok(httparse::Status::Complete((n, size))) => {
                    self.start += n;
                    return usize::try_from(size).map_err(|_| format!("chunk size {size}"));
                }
                Ok(httparse::Status::Partial) => self.fill()?,
                Err(_) => return Err("a malformed chunk size".into()),
            }
        }
    }

    /// The next line, without its CRLF.
    fn line(&mut self) -> std::result::Result<String, String> {
        loop {
            if let Some(i) = find(&self.buf[self.start..self.end], b"\r\n") {
                let line =
                    String::from_utf8_lossy(&self.buf[self.start..self.start + i]).into_owned();
                self.start += i + 2;
                return Ok(line);
            }
            self.fill()?;
        }
    }

    /// Consumes `n` bytes of body, reading as needed.
    fn skip(&mut self, mut n: usize) -> std::result::Result<(), String> {
        loop {
            let have = (self.end - self.start).min(n);
            self.start += have;
            n -= have;
            if n == 0 {
                return Ok(());
            }
            // Nothing unread is left in the buffer: read straight into it from the front.
            self.start = 0;
            self.end = 0;
            self.fill()?;
        }
    }
}

/// What an answer's head says about reading its body and the connection.
struct Head {
    length: Option<usize>,
    chunked: bool,
    keep: bool,
}

impl Head {
    fn of(answer: &httparse::Response) -> std::result::Result<Head, String> {
        // HTTP/1.1 keeps the connection unless told otherwise; 1.0 closes it unless told.
        let mut head = Head {
            length: None,
            chunked: false,
            keep: answer.version != Some(0),
        };
        for h in answer.headers.iter() {
            let value = std::str::from_utf8(h.value).unwrap_or_default().trim();
            if h.name.eq_ignore_ascii_case("content-length") {
                head.length = Some(
                    value
                        .parse::<usize>()
                        .map_err(|_| format!("content-length {value:?}"))?,
                );
            } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                head.chunked = value.eq_ignore_ascii_case("chunked");
            } else if h.name.eq_ignore_ascii_case("connection") {
                head.keep = value.eq_ignore_ascii_case("keep-alive");
            }
        }
        Ok(head)
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A server that answers each request it reads with the next of `answers`, verbatim.
    fn scripted(answers: Vec<&'static [u8]>) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 4096];
            for a in answers {
                let mut got = Vec::new();
                while find(&got, b"\r\n\r\n").is_none() {
                    let n = s.read(&mut buf).unwrap();
                    got.extend_from_slice(&buf[..n]);
                }
                // In pieces, so that the reader has to ask again mid-head and mid-chunk.
                for piece in a.chunks(7) {
                    s.write_all(piece).unwrap();
                    s.flush().unwrap();
                }
            }
        });
        addr
    }

    #[test]
    fn reads_sized_chunked_and_closing_answers_on_one_connection() {
        let addr = scripted(vec![
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
            b"HTTP/1.1 404 Not Found\r\ntransfer-encoding: chunked\r\n\r\n3;x=1\r\nabc\r\na\r\n0123456789\r\n0\r\nX-Trailer: 1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
        ]);
        let mut c = Conn::open(&addr).unwrap();
        let req = b"GET / HTTP/1.1\r\n\r\n";
        assert_eq!(c.get(req).unwrap(), (200, 5, true));
        assert_eq!(c.get(req).unwrap(), (404, 13, true));
        assert_eq!(c.get(req).unwrap(), (200, 2, false));
    }

    #[test]
    fn an_answer_without_a_length_or_a_bad_chunk_is_an_error() {
        let addr = scripted(vec![b"HTTP/1.1 200 OK\r\n\r\nuntil close"]);
        let mut c = Conn::open(&addr).unwrap();
        let e = c.get(b"GET / HTTP/1.1\r\n\r\n").unwrap_err();
        assert!(e.contains("neither a length nor chunks"), "{e}");

        let addr = scripted(vec![
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        ]);
        let mut c = Conn::open(&addr).unwrap();
        let e = c.get(b"GET / HTTP/1.1\r\n\r\n").unwrap_err();
        assert!(e.contains("chunk size"), "{e}");
    }

    #[test]
    fn http_1_0_closes_unless_it_says_keep_alive() {
        let addr = scripted(vec![
            b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\na",
            b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nb",
        ]);
        let mut c = Conn::open(&addr).unwrap();
        assert_eq!(c.get(b"GET / HTTP/1.0\r\n\r\n").unwrap(), (200, 1, true));
        assert_eq!(c.get(b"GET / HTTP/1.0\r\n\r\n").unwrap(), (200, 1, false));
    }
}
