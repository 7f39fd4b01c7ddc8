//! A Prometheus summary, as Go's client keeps one (the `prometheus` crate has none): `_sum`
//! and `_count` over the whole life of the process, and quantiles over a sliding window.
//!
//! The window is `max_age` long, in `age_buckets` steps: every observation goes into each of
//! `age_buckets` streams; every `max_age / age_buckets` the oldest stream is emptied and the
//! next one becomes the one answering, so answers cover between `max_age · (b-1)/b` and
//! `max_age` of the most recent observations. Observations wait in a small buffer (500, as
//! Go's) and are merged into the streams in batches, so `observe` is a lock and a push.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus::core::{Collector, Desc};
use prometheus::proto::{LabelPair, Metric, MetricFamily, MetricType, Quantile};

use super::quantiles::Stream;

/// Go's default objectives for Calico's summaries (`DefObjectives` in libcalico-go's
/// `lib/prometheus`): the median within 5 %, the 90th percentile within 1 %, the 99th within
/// 0.1 % of rank.
pub const CALICO_OBJECTIVES: [(f64, f64); 3] = [(0.5, 0.05), (0.9, 0.01), (0.99, 0.001)];
/// Go's default `MaxAge` for a summary's window.
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(600);
/// Go's default number of steps the window moves in.
pub const DEFAULT_AGE_BUCKETS: u32 = 5;
/// Observations buffered before they are merged into the streams (Go's `DefBufCap`).
const BUFFER: usize = 500;

/// How a summary is described and windowed.
#[derive(Debug, Clone)]
pub struct SummaryOpts {
    /// Family name, exposed as it is (`name{quantile=..}`, `name_sum`, `name_count`).
    pub name: String,
    /// Help text.
    pub help: String,
    /// Labels every sample carries (bounded values only, e.g. `syncer="felix"`).
    pub const_labels: Vec<(String, String)>,
    /// `(quantile, allowed rank error)` pairs; empty: only `_sum` and `_count`.
    pub objectives: Vec<(f64, f64)>,
    /// How far back the quantiles look.
    pub max_age: Duration,
    /// Steps the window moves in (at least 1).
    pub age_buckets: u32,
}

impl SummaryOpts {
    /// A summary with Calico's objectives and Go's default window (10 minutes in 5 steps).
    pub fn new(name: impl Into<String>, help: impl Into<String>) -> Self {
        SummaryOpts {
            name: name.into(),
            help: help.into(),
            const_labels: Vec::new(),
            objectives: CALICO_OBJECTIVES.to_vec(),
            max_age: DEFAULT_MAX_AGE,
            age_buckets: DEFAULT_AGE_BUCKETS,
        }
    }

    /// Adds a constant label.
    pub fn const_label(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.const_labels.push((name.into(), value.into()));
        self
    }

    /// Sets the window.
    pub fn window(mut self, max_age: Duration, age_buckets: u32) -> Self {
        self.max_age = max_age;
        self.age_buckets = age_buckets;
        self
    }
}

/// A summary; clones share it. Register it in a `prometheus::Registry` like any collector.
#[derive(Debug, Clone)]
pub struct Summary {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    desc: Desc,
    labels: Vec<LabelPair>,
    objectives: Vec<(f64, f64)>,
    state: Mutex<Window>,
}

#[derive(Debug)]
struct Window {
    buffer: Vec<f64>,
    streams: Vec<Stream>,
    head: usize,
    head_expires: Instant,
    step: Duration,
    sum: f64,
    count: u64,
}

impl Window {
    /// Empties the streams whose time is up, oldest first.
    fn rotate(&mut self, now: Instant) {
        let n = self.streams.len();
        if n == 0 {
            return;
        }
        let mut turns = 0;
        while now >= self.head_expires {
            if let Some(s) = self.streams.get_mut(self.head) {
                s.reset();
            }
            self.head = (self.head + 1) % n;
            self.head_expires += self.step;
            turns += 1;
            if turns >= n {
                // Idle for a whole window or more: every stream is empty now.
                self.head_expires = now + self.step;
                break;
            }
        }
    }

    /// Merges buffered observations into every stream.
    fn flush(&mut self, now: Instant) {
        self.rotate(now);
        if self.buffer.is_empty() {
            return;
        }
        for s in &mut self.streams {
            s.insert(&mut self.buffer);
        }
        self.buffer.clear();
    }
}

/// A summary's options were not usable.
#[derive(Debug, thiserror::Error)]
pub enum SummaryError {
    /// The name, help or a label is not valid in the exposition format.
    #[error("summary {name}: {source}")]
    Desc {
        /// The summary's name.
        name: String,
        /// Why.
        #[source]
        source: prometheus::Error,
    },
    /// An objective's quantile is not within (0, 1) or its error not within [0, 1).
    #[error(
        "summary {name}: objective ({q}, {e}) is not a quantile in (0, 1) with an error in [0, 1)"
    )]
    Objective {
        /// The summary's name.
        name: String,
        /// The quantile.
        q: f64,
        /// The allowed error.
        e: f64,
    },
}

impl Summary {
    /// A summary as `opts` describes.
    pub fn new(opts: SummaryOpts) -> Result<Self, SummaryError> {
        Self::new_at(opts, Instant::now())
    }

    fn new_at(opts: SummaryOpts, now: Instant) -> Result<Self, SummaryError> {
        let name = opts.name.clone();
        if let Some(&(q, e)) = opts
            .objectives
            .iter()
            .find(|(q, e)| !(*q > 0.0 && *q < 1.0 && (0.0..1.0).contains(e)))
        {
            return Err(SummaryError::Objective { name, q, e });
        }
        let const_labels: HashMap<String, String> = opts.const_labels.iter().cloned().collect();
        let desc = Desc::new(opts.name, opts.help, Vec::new(), const_labels)
            .map_err(|source| SummaryError::Desc { name, source })?;
        let labels = desc.const_label_pairs.clone();
        let mut objectives = opts.objectives;
        objectives.sort_by(|a, b| a.0.total_cmp(&b.0));
        let buckets = opts.age_buckets.max(1);
        let step = opts.max_age / buckets;
        let streams = if objectives.is_empty() {
            Vec::new()
        } else {
            (0..buckets).map(|_| Stream::new(&objectives)).collect()
        };
        Ok(Summary {
            inner: Arc::new(Inner {
                desc,
                labels,
                objectives,
                state: Mutex::new(Window {
                    buffer: Vec::with_capacity(BUFFER),
                    streams,
                    head: 0,
                    head_expires: now + step,
                    step,
                    sum: 0.0,
                    count: 0,
                }),
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Window> {
        // Every critical section leaves the window consistent: a panic elsewhere that poisoned
        // the lock does not make it unusable.
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records one observation.
    pub fn observe(&self, v: f64) {
        self.observe_at(v, Instant::now());
    }

    fn observe_at(&self, v: f64, now: Instant) {
        let mut w = self.lock();
        w.sum += v;
        w.count += 1;
        if self.inner.objectives.is_empty() {
            return;
        }
        w.buffer.push(v);
        if w.buffer.len() >= BUFFER {
            w.flush(now);
        }
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.lock().count
    }

    /// Sum of the observations so far.
    pub fn sum(&self) -> f64 {
        self.lock().sum
    }

    /// The current quantile estimates (NaN for each when the window holds no observation),
    /// in the order of the objectives.
    pub fn quantiles(&self) -> Vec<(f64, f64)> {
        self.quantiles_at(Instant::now())
    }

    fn quantiles_at(&self, now: Instant) -> Vec<(f64, f64)> {
        let mut w = self.lock();
        w.flush(now);
        let head = w.streams.get(w.head);
        self.inner
            .objectives
            .iter()
            .map(|&(q, _)| (q, head.map_or(f64::NAN, |s| s.query(q))))
            .collect()
    }

    fn family_at(&self, now: Instant) -> MetricFamily {
        let quantiles = self.quantiles_at(now);
        let (sum, count) = {
            let w = self.lock();
            (w.sum, w.count)
        };
        let mut s = prometheus::proto::Summary::default();
        s.set_sample_sum(sum);
        s.set_sample_count(count);
        s.set_quantile(
            quantiles
                .into_iter()
                .map(|(q, v)| {
                    let mut x = Quantile::default();
                    x.set_quantile(q);
                    x.set_value(v);
                    x
                })
                .collect(),
        );
        let mut m = Metric::default();
        m.set_label(self.inner.labels.clone());
        m.set_summary(s);
        let mut f = MetricFamily::default();
        f.set_name(self.inner.desc.fq_name.clone());
        f.set_help(self.inner.desc.help.clone());
        f.set_field_type(MetricType::SUMMARY);
        f.set_metric(vec![m]);
        f
    }
}

impl Collector for Summary {
    fn desc(&self) -> Vec<&Desc> {
        vec![&self.inner.desc]
    }

    fn collect(&self) -> Vec<MetricFamily> {
        vec![self.family_at(Instant::now())]
    }
}

#[cfg(test)]
pub(super) mod testing {
    //! Time passed in, for the window's tests.
    use super::*;

    pub(in super::super) fn new_at(opts: SummaryOpts, now: Instant) -> Summary {
        #[allow(clippy::unwrap_used)]
        Summary::new_at(opts, now).unwrap()
    }

    pub(in super::super) fn observe_at(s: &Summary, v: f64, now: Instant) {
        s.observe_at(v, now);
    }

    pub(in super::super) fn quantiles_at(s: &Summary, now: Instant) -> Vec<(f64, f64)> {
        s.quantiles_at(now)
    }
}
