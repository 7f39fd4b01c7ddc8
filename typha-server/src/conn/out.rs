//! Writing to a client: frames queue up and leave in bounded writes, each under the write
//! timeout. Also the two frames every connection writes at any point of its life, in its
//! protocol's [`Dialect`]: pings, and the end (ours: a Goodbye; Calico's: just closed).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::time::{Instant, timeout_at};
use typha_protocol::calico::messages::{GoTime, Message as CalicoMessage, Ping as CalicoPing};
use typha_protocol::message::{Goodbye, GoodbyeReason, Message, Ping};

use super::{ConnError, Ctx};
use crate::cache::calico::Carriage;
use crate::calico::libcalico::SyncerType;
use crate::fanout::encode;

/// Frames waiting to be written, and the writing.
pub(super) struct Out<W> {
    w: W,
    pending: Vec<Bytes>,
    /// Bytes queued and not yet written.
    pub(super) pending_len: usize,
    /// The write timeout and the most bytes per write are the settings'.
    ctx: Arc<Ctx>,
    /// Total time spent in [`Out::flush`]: while we write, we neither read pongs nor send pings.
    pub(super) writing: Duration,
    /// Bytes ever queued (what a phase of the connection cost: the difference).
    pub(super) queued: u64,
    /// The syncer type the connection's metrics count under (felix for ours; a Calico
    /// client's from its hello).
    pub(super) syncer: SyncerType,
    /// How pings and the end are written.
    pub(super) dialect: Dialect,
}

/// The protocol a connection speaks, as far as [`Out`] writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dialect {
    /// Ours: pings timestamped from the server's start; a Goodbye at the end.
    Ours,
    /// Calico's, in this carriage: pings with the wall-clock time; no goodbye.
    Calico(Carriage),
}

impl<W: AsyncWrite + Unpin> Out<W> {
    /// Queues writes to `w` for a connection of `ctx`.
    pub(super) fn new(w: W, ctx: Arc<Ctx>) -> Self {
        Out {
            w,
            pending: Vec::new(),
            pending_len: 0,
            ctx,
            writing: Duration::ZERO,
            queued: 0,
            syncer: SyncerType::Felix,
            dialect: Dialect::Ours,
        }
    }

    /// Queues a ping; returns its token, which the client's pong echoes ([`Session::pong`]).
    ///
    /// [`Session::pong`]: super::session::Session::pong
    pub(super) fn ping(&mut self, now: Instant) -> Result<u64, ConnError> {
        match self.dialect {
            Dialect::Ours => {
                let micros = now.saturating_duration_since(self.ctx.started).as_micros();
                let ts = u64::try_from(micros).unwrap_or(u64::MAX);
                self.queue(encode(
                    &Message::Ping(Ping {
                        timestamp_micros: ts,
                    }),
                    false,
                ))?;
                Ok(ts)
            }
            Dialect::Calico(carriage) => {
                let ts = GoTime::from_system_time(SystemTime::now());
                let ping = CalicoMessage::Ping(CalicoPing { timestamp: ts });
                self.queue(carriage.encode(&ping)?)?;
                Ok(calico_token(ts))
            }
        }
    }

    /// Ends the connection for `reason`: ours says so in a Goodbye (suggesting `redirect`, or
    /// the usual servers, when the reason calls for them) in place of anything still queued;
    /// Calico's protocol has no goodbye, and its connection is just closed. Boxed: a
    /// connection ends once, and the state of a task awaiting this, kept for the connection's
    /// life, keeps room for a pointer only.
    pub(super) fn end<'a>(
        &'a mut self,
        reason: GoodbyeReason,
        message: &'a str,
        redirect: Option<Vec<String>>,
    ) -> Pin<Box<impl Future<Output = ()> + 'a>> {
        Box::pin(async move {
            match self.dialect {
                Dialect::Ours => self.say_goodbye(reason, message, redirect).await,
                Dialect::Calico(_) => self.close().await,
            }
        })
    }

    /// The stream written to (to read from it too, between writes).
    pub(super) fn io(&mut self) -> &mut W {
        &mut self.w
    }

    /// Queues a frame; an empty one (it could not be encoded) ends the connection.
    pub(super) fn queue(&mut self, b: Bytes) -> Result<(), ConnError> {
        if b.is_empty() {
            return Err(ConnError::Unencodable);
        }
        self.pending_len += b.len();
        self.queued += b.len() as u64;
        self.pending.push(b);
        Ok(())
    }

    /// Writes what is queued: a lone frame as it is, several coalesced into writes of at most
    /// `max_write` bytes (the copy is cheap next to a syscall per frame).
    pub(super) async fn flush(&mut self) -> Result<(), ConnError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let start = Instant::now();
        let frames = std::mem::take(&mut self.pending);
        let total = std::mem::take(&mut self.pending_len);
        let max_write = self.ctx.cfg.max_write;
        let w = &mut self.w;
        let write = async {
            if let [one] = frames.as_slice() {
                w.write_all(one).await?;
            } else {
                let mut buf = Vec::with_capacity(total.min(max_write));
                for f in &frames {
                    if !buf.is_empty() && buf.len() + f.len() > max_write {
                        w.write_all(&buf).await?;
                        buf.clear();
                    }
                    if f.len() >= max_write {
                        w.write_all(f).await?;
                    } else {
                        buf.extend_from_slice(f);
                    }
                }
                if !buf.is_empty() {
                    w.write_all(&buf).await?;
                }
            }
            w.flush().await
        };
        // Most writes complete at once (the socket has room): only a write that has to wait
        // arms the timeout, so the common case registers no timer.
        tokio::pin!(write);
        let at_once = std::future::poll_fn(|cx| {
            Poll::Ready(match write.as_mut().poll(cx) {
                Poll::Ready(r) => Some(r),
                Poll::Pending => None,
            })
        })
        .await;
        // The timer boxed: only a write that waits has one, so the stream loop's state, kept
        // for the connection's life, keeps no room for it.
        let written = match at_once {
            Some(r) => Ok(r),
            None => Box::pin(timeout_at(start + self.ctx.cfg.write_timeout, write)).await,
        };
        let took = start.elapsed();
        self.writing += took;
        match written {
            Ok(r) => r?,
            Err(_) => return Err(ConnError::WriteTimeout(self.ctx.cfg.write_timeout)),
        }
        let m = &self.ctx.cache.metrics;
        m.bytes_sent.inc_by(total as u64);
        m.client_write_latency_secs
            .of(self.syncer)
            .observe(took.as_secs_f64());
        Ok(())
    }

    /// Closes the write side, dropping anything still queued (Calico's protocol has no
    /// goodbye).
    pub(super) async fn close(&mut self) {
        self.pending.clear();
        self.pending_len = 0;
        let _ = tokio::time::timeout(Duration::from_secs(1), self.w.shutdown()).await;
    }

    /// [`Out::end`] with no servers suggested but the usual.
    pub(super) async fn goodbye(&mut self, reason: GoodbyeReason, message: &str) {
        self.end(reason, message, None).await;
    }

    async fn say_goodbye(
        &mut self,
        reason: GoodbyeReason,
        message: &str,
        redirect: Option<Vec<String>>,
    ) {
        let redirect = match reason {
            GoodbyeReason::Shutdown
            | GoodbyeReason::TooManyConnections
            | GoodbyeReason::Rebalance => redirect.unwrap_or_else(|| self.ctx.suggest()),
            _ => Vec::new(),
        };
        let g = Message::Goodbye(Goodbye {
            reason,
            message: message.into(),
            redirect,
        });
        self.pending.clear();
        self.pending_len = 0;
        if self.queue(encode(&g, false)).is_ok() {
            let _ = self.flush().await;
        }
        let _ = tokio::time::timeout(Duration::from_secs(1), self.w.shutdown()).await;
    }
}

/// A Calico ping's token: its timestamp, as the pong echoes it.
pub(super) fn calico_token(t: GoTime) -> u64 {
    (t.seconds as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(t.nanos as u64)
}

/// ±10 % jitter, as Typha does, so pings from thousands of connections do not line up.
pub(super) fn jitter(d: Duration) -> Duration {
    let f = 0.9 + rand::random::<f64>() * 0.2;
    d.mul_f64(f)
}

/// Runs `f` when dropped.
pub(super) fn scopeguard<F: FnOnce()>(f: F) -> impl Drop {
    struct G<F: FnOnce()>(Option<F>);
    impl<F: FnOnce()> Drop for G<F> {
        fn drop(&mut self) {
            if let Some(f) = self.0.take() {
                f();
            }
        }
    }
    G(Some(f))
}
