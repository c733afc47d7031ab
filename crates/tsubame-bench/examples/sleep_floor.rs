//! The floor for benchmarks/io_bound.sh: an HTTP/1.1 server with no Ruby
//! and nothing else in it, on one tokio thread, answering `/sleep` after a
//! timer of SLEEP seconds (default 1) and any other path at once. What a
//! burst costs this server is what the machine, the kernel and the client
//! cost; a Rack server cannot do better, so its distance from this floor
//! is its own overhead.
//!
//! Usage: sleep_floor PORT

use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn main() -> std::io::Result<()> {
    let port: u16 = std::env::args()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| std::io::Error::other("usage: sleep_floor PORT"))?;
    let pause = std::env::var("SLEEP")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .map_or(Duration::from_secs(1), Duration::from_secs_f64);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async move {
        let listener = listen(port)?;
        loop {
            let (stream, _) = listener.accept().await?;
            tokio::spawn(serve(stream, pause));
        }
    })
}

/// Tsubame's default backlog (1024), so both queue a burst the same way.
fn listen(port: u16) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.bind(&std::net::SocketAddr::from(([127, 0, 0, 1], port)).into())?;
    socket.listen(1024)?;
    socket.set_nonblocking(true)?;
    TcpListener::from_std(socket.into())
}

async fn serve(mut stream: TcpStream, pause: Duration) {
    let _ = stream.set_nodelay(true);
    let mut buf = Vec::with_capacity(4096);
    loop {
        let head_end = loop {
            if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            match stream.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        };
        if buf.starts_with(b"GET /sleep ") {
            tokio::time::sleep(pause).await;
        }
        buf.drain(..head_end);
        let reply = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 3\r\n\r\nok\n";
        if stream.write_all(reply).await.is_err() {
            return;
        }
    }
}
