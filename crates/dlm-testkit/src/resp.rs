//! A minimal RESP2 client over plain TCP or TLS: just enough to drive the
//! throwaway servers without depending on the client library under test.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::{IpAddr, ServerName};

/// One RESP2 reply, read in full (nested arrays included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    Status(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Reply>>),
}

impl Reply {
    /// The reply as [`crate::RedisServer::command`] has always shown it: the
    /// first RESP line (`+OK`, `-ERR ..`, `:1`, `*3`), except that a bulk
    /// string is given as its contents (`""` for nil).
    pub(crate) fn into_line(self) -> String {
        match self {
            Reply::Status(s) => format!("+{s}"),
            Reply::Error(e) => format!("-{e}"),
            Reply::Int(i) => format!(":{i}"),
            Reply::Bulk(None) => String::new(),
            Reply::Bulk(Some(b)) => String::from_utf8_lossy(&b).into_owned(),
            Reply::Array(None) => "*-1".into(),
            Reply::Array(Some(items)) => format!("*{}", items.len()),
        }
    }

    /// A status or bulk string as text.
    pub(crate) fn text(&self) -> Option<String> {
        match self {
            Reply::Status(s) => Some(s.clone()),
            Reply::Bulk(Some(b)) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        }
    }

    /// An integer, or a string holding one (Sentinel sends ports as strings).
    pub(crate) fn int(&self) -> Option<i64> {
        match self {
            Reply::Int(i) => Some(*i),
            other => other.text()?.trim().parse().ok(),
        }
    }

    /// The elements of a non-nil array.
    pub(crate) fn items(&self) -> Option<&[Reply]> {
        match self {
            Reply::Array(Some(items)) => Some(items),
            _ => None,
        }
    }

    /// The value after `key` in a flat `[key, value, key, value, ..]` array.
    pub(crate) fn field(&self, key: &str) -> Option<String> {
        self.items()?
            .chunks(2)
            .find(|kv| kv[0].text().as_deref() == Some(key))
            .and_then(|kv| kv.get(1)?.text())
    }
}

trait Stream: Read + Write + Send {}
impl<T: Read + Write + Send> Stream for T {}

/// One connection to `127.0.0.1:port`, plain or TLS.
pub(crate) struct Conn {
    reader: BufReader<Box<dyn Stream>>,
}

impl Conn {
    /// Connect, and over TLS complete the handshake, with `timeout` on every read and write.
    pub(crate) fn connect(
        port: u16,
        tls: Option<&Arc<rustls::ClientConfig>>,
        timeout: Duration,
    ) -> io::Result<Conn> {
        let tcp = TcpStream::connect(("127.0.0.1", port))?;
        tcp.set_read_timeout(Some(timeout))?;
        tcp.set_write_timeout(Some(timeout))?;
        tcp.set_nodelay(true)?;
        let stream: Box<dyn Stream> = match tls {
            None => Box::new(tcp),
            Some(config) => {
                let name = ServerName::IpAddress(IpAddr::from(std::net::Ipv4Addr::LOCALHOST));
                let conn = rustls::ClientConnection::new(Arc::clone(config), name)
                    .map_err(io::Error::other)?;
                let mut stream = rustls::StreamOwned::new(conn, tcp);
                // Finish the handshake now, so a refused certificate shows up here.
                while stream.conn.is_handshaking() {
                    stream.conn.complete_io(&mut stream.sock)?;
                }
                Box::new(stream)
            }
        };
        Ok(Conn {
            reader: BufReader::new(stream),
        })
    }

    /// Send one command and read its whole reply.
    pub(crate) fn call(&mut self, args: &[&str]) -> io::Result<Reply> {
        let stream = self.reader.get_mut();
        write_command(stream, args)?;
        stream.flush()?;
        read_reply(&mut self.reader)
    }
}

/// Write `args` as a RESP array of bulk strings.
pub(crate) fn write_command(stream: &mut impl Write, args: &[&str]) -> io::Result<()> {
    let mut buf = format!("*{}\r\n", args.len());
    for a in args {
        buf.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    stream.write_all(buf.as_bytes())
}

fn read_reply(reader: &mut impl BufRead) -> io::Result<Reply> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed by the server",
        ));
    }
    let line = line.trim_end_matches(['\r', '\n']);
    let (kind, rest) = line.split_at(line.chars().next().map_or(0, char::len_utf8));
    let number = || -> io::Result<i64> {
        rest.trim()
            .parse()
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, format!("bad reply {line:?}")))
    };
    Ok(match kind {
        "+" => Reply::Status(rest.to_string()),
        "-" => Reply::Error(rest.to_string()),
        ":" => Reply::Int(number()?),
        "$" => match usize::try_from(number()?) {
            Err(_) => Reply::Bulk(None),
            Ok(len) => {
                let mut body = vec![0u8; len + 2];
                reader.read_exact(&mut body)?;
                body.truncate(len);
                Reply::Bulk(Some(body))
            }
        },
        "*" => match usize::try_from(number()?) {
            Err(_) => Reply::Array(None),
            Ok(len) => Reply::Array(Some(
                (0..len)
                    .map(|_| read_reply(reader))
                    .collect::<io::Result<_>>()?,
            )),
        },
        _ => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("bad reply {line:?}"),
            ));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> io::Result<Reply> {
        read_reply(&mut BufReader::new(bytes))
    }

    #[test]
    fn parses_nested_replies() -> io::Result<()> {
        let reply = parse(b"*3\r\n:1\r\n$3\r\nfoo\r\n*2\r\n+OK\r\n$-1\r\n")?;
        let items = reply.items().unwrap_or_default();
        assert_eq!(items.len(), 3);
        assert_eq!(items[0].int(), Some(1));
        assert_eq!(items[1].text().as_deref(), Some("foo"));
        assert_eq!(
            items[2],
            Reply::Array(Some(vec![Reply::Status("OK".into()), Reply::Bulk(None)]))
        );
        assert_eq!(reply.into_line(), "*3");
        assert_eq!(parse(b"-ERR no\r\n")?.into_line(), "-ERR no");
        assert_eq!(parse(b"$-1\r\n")?.into_line(), "");
        assert_eq!(parse(b"$4\r\na\r\nb\r\n")?.into_line(), "a\r\nb");
        Ok(())
    }

    #[test]
    fn finds_fields_in_flat_arrays() -> io::Result<()> {
        let reply = parse(b"*4\r\n$4\r\nname\r\n$2\r\nm1\r\n$5\r\nflags\r\n$6\r\nmaster\r\n")?;
        assert_eq!(reply.field("flags").as_deref(), Some("master"));
        assert_eq!(reply.field("port"), None);
        Ok(())
    }
}
