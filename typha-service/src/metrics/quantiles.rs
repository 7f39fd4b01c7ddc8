//! Targeted quantiles over a stream in bounded memory: the algorithm of Cormode, Korn,
//! Muthukrishnan and Srivastava, "Effective Computation of Biased Quantiles over Data Streams"
//! (ICDE 2005), which is also what Go's Prometheus client uses for its summaries.
//!
//! The stream keeps a sorted list of samples, each standing for `g` observations, with `delta`
//! the uncertainty of its rank. For every target `(q, e)` the rank error at `q` stays within
//! `e · n`; between targets, samples are merged so memory stays small (hundreds of samples
//! for millions of observations).

/// One retained value: it stands for `g` observations; its rank is uncertain by `delta`.
#[derive(Debug, Clone, Copy)]
struct Sample {
    value: f64,
    g: f64,
    delta: f64,
}

/// A stream of observations answering the targeted quantiles approximately.
#[derive(Debug, Clone)]
pub(super) struct Stream {
    /// `(quantile, allowed rank error)`, e.g. `(0.99, 0.001)`.
    targets: Vec<(f64, f64)>,
    samples: Vec<Sample>,
    n: f64,
}

impl Stream {
    /// An empty stream for `targets` (quantile, allowed rank error as a fraction of the count).
    pub(super) fn new(targets: &[(f64, f64)]) -> Self {
        Stream {
            targets: targets.to_vec(),
            samples: Vec::new(),
            n: 0.0,
        }
    }

    /// Forgets every observation.
    pub(super) fn reset(&mut self) {
        self.samples.clear();
        self.n = 0.0;
    }

    /// Observations taken in.
    #[cfg(test)]
    pub(super) fn count(&self) -> u64 {
        self.n as u64
    }

    /// Values retained (the memory the stream holds).
    #[cfg(test)]
    pub(super) fn retained(&self) -> usize {
        self.samples.len()
    }

    /// The most rank uncertainty allowed at rank `r` of `n`: the tightest of the targets.
    fn allowed(&self, r: f64, n: f64) -> f64 {
        let mut m = f64::MAX;
        for &(q, e) in &self.targets {
            let f = if r >= q * n {
                2.0 * e * r / q
            } else {
                2.0 * e * (n - r) / (1.0 - q)
            };
            m = m.min(f);
        }
        m
    }

    /// Takes in a batch of observations (sorted here; NaN is ignored).
    pub(super) fn insert(&mut self, batch: &mut [f64]) {
        batch.sort_by(f64::total_cmp);
        let old = std::mem::take(&mut self.samples);
        let mut out = Vec::with_capacity(old.len() + batch.len());
        let mut old = old.into_iter().peekable();
        let mut rank = 0.0;
        for &v in batch.iter().filter(|v| !v.is_nan()) {
            while let Some(s) = old.next_if(|s| s.value <= v) {
                rank += s.g;
                out.push(s);
            }
            // The smallest and the largest value are known exactly; a value in between may be
            // anywhere within what the invariant allows at its rank.
            let delta = if out.is_empty() || old.peek().is_none() {
                0.0
            } else {
                (self.allowed(rank, self.n).floor() - 1.0).max(0.0)
            };
            out.push(Sample {
                value: v,
                g: 1.0,
                delta,
            });
            rank += 1.0;
            self.n += 1.0;
        }
        out.extend(old);
        self.samples = out;
        self.compress();
    }

    /// Merges neighbours while the invariant still holds.
    fn compress(&mut self) {
        let len = self.samples.len();
        if len < 3 {
            return;
        }
        // Rank of the sample before the one being looked at; walking from the top.
        let mut rank = self.n - self.samples.last().map_or(0.0, |s| s.g);
        let mut kept: Vec<Sample> = Vec::with_capacity(len);
        let mut iter = self.samples.iter().rev();
        let Some(&last) = iter.next() else { return };
        kept.push(last);
        for s in iter {
            rank -= s.g;
            let Some(above) = kept.last_mut() else { break };
            // The first sample stays: the minimum is answered exactly.
            if rank > 0.0 && s.g + above.g + above.delta <= self.allowed(rank, self.n) {
                above.g += s.g;
            } else {
                kept.push(*s);
            }
        }
        kept.reverse();
        self.samples = kept;
    }

    /// The value at quantile `q`, or NaN if there has been no observation.
    pub(super) fn query(&self, q: f64) -> f64 {
        let mut iter = self.samples.iter();
        let Some(first) = iter.next() else {
            return f64::NAN;
        };
        let t = (q * self.n).ceil();
        let t = t + (self.allowed(t, self.n) / 2.0).ceil();
        let mut prev = first;
        let mut rank = 0.0;
        for s in iter {
            rank += prev.g;
            if rank + s.g + s.delta > t {
                return prev.value;
            }
            prev = s;
        }
        prev.value
    }
}
