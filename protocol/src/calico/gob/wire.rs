//! gob's primitive encodings: unsigned and signed integers, and a bounds-checked reader over
//! the bytes of one message.
//!
//! A gob *uint* below 128 is one byte; otherwise one byte holding the negated byte count,
//! then the big-endian bytes without leading zeros (128 is `ff 80`). A gob *int* keeps its
//! sign in the low bit (`x << 1`, or `!x << 1 | 1` when negative) and is written as a uint.
//! Floats are the uint of their bits with the bytes reversed.

use super::basics::GobError;

/// Appends `x` as a gob uint.
pub fn put_uint(out: &mut Vec<u8>, x: u64) {
    if x < 128 {
        out.push(x as u8);
        return;
    }
    let bytes = x.to_be_bytes();
    let skip = (x.leading_zeros() / 8) as usize;
    let len = bytes.len() - skip;
    // `len` is 1..=8, so the negation is 0xff..=0xf8.
    out.push((len as u8).wrapping_neg());
    out.extend_from_slice(bytes.get(skip..).unwrap_or_default());
}

/// Appends `i` as a gob int.
pub fn put_int(out: &mut Vec<u8>, i: i64) {
    let x = if i < 0 {
        ((!i as u64) << 1) | 1
    } else {
        (i as u64) << 1
    };
    put_uint(out, x);
}

/// Appends `f` as a gob float: the bits, bytes reversed, as a uint.
pub fn put_float(out: &mut Vec<u8>, f: f64) {
    put_uint(out, f.to_bits().swap_bytes());
}

/// Appends a gob string or `[]byte`: the length, then the bytes.
pub fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_uint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// Reads a gob uint at the start of `buf`: `Ok(None)` when `buf` ends inside it, else the
/// value and how many bytes it took. Like Go, a non-minimal encoding (`ff 05`) is accepted.
///
/// # Errors
///
/// [`GobError::BadUint`] when the length byte announces more than 8 bytes.
pub fn read_uint(buf: &[u8]) -> Result<Option<(u64, usize)>, GobError> {
    let Some(&first) = buf.first() else {
        return Ok(None);
    };
    if first < 0x80 {
        return Ok(Some((u64::from(first), 1)));
    }
    let len = usize::from(first.wrapping_neg());
    if len > 8 {
        return Err(GobError::BadUint(first));
    }
    let Some(bytes) = buf.get(1..1 + len) else {
        return Ok(None);
    };
    let x = bytes.iter().fold(0u64, |x, &b| (x << 8) | u64::from(b));
    Ok(Some((x, 1 + len)))
}

/// Turns a uint from the wire into the int it encodes.
pub fn uint_to_int(x: u64) -> i64 {
    let i = (x >> 1) as i64;
    if x & 1 != 0 { !i } else { i }
}

/// A cursor over one gob message, or over several when a value continues into the next
/// message: `data` is everything buffered, `pos..end` the unread part of the current message.
///
/// A *partial* reader walks a message that is still arriving: `end` is where the message
/// ends, `avail` where its bytes buffered so far end. Counts and the end of structs are
/// judged by `end`, as for a whole message; a read that needs bytes past `avail` fails with
/// [`GobError::Pending`], not as a truncated message.
#[derive(Debug)]
pub(crate) struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
    end: usize,
    avail: usize,
}

impl<'a> Reader<'a> {
    /// A reader over the message body `start..end`, of which `data` may hold only the start
    /// (all of it, for a whole message).
    pub(crate) fn new(data: &'a [u8], start: usize, end: usize) -> Self {
        let avail = end.min(data.len());
        Reader {
            data,
            pos: start.min(avail),
            end: end.max(start),
            avail,
        }
    }

    /// Bytes left in the current message (arrived or not).
    pub(crate) fn left(&self) -> usize {
        self.end - self.pos
    }

    /// Offset where the current message ends (possibly past the buffered bytes).
    pub(crate) fn end(&self) -> usize {
        self.end
    }

    /// The bytes of the current message from `pos` that have arrived, and the error for
    /// running out of them.
    fn arrived(&self, what: &'static str) -> (&'a [u8], GobError) {
        let rest = self.data.get(self.pos..self.avail).unwrap_or_default();
        let short = if self.avail < self.end {
            GobError::Pending
        } else {
            GobError::Truncated(what)
        };
        (rest, short)
    }

    /// Offset of the next unread byte in the whole buffer.
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    /// The whole buffer this reader walks.
    pub(crate) fn data(&self) -> &'a [u8] {
        self.data
    }

    /// Moves to the message body `start..end` of the same buffer, which may still be
    /// arriving.
    pub(crate) fn jump(&mut self, start: usize, end: usize) {
        *self = Reader::new(self.data, start, end);
    }

    pub(crate) fn uint(&mut self, what: &'static str) -> Result<u64, GobError> {
        let (rest, short) = self.arrived(what);
        match read_uint(rest)? {
            Some((x, n)) => {
                self.pos += n;
                Ok(x)
            }
            None => Err(short),
        }
    }

    pub(crate) fn int(&mut self, what: &'static str) -> Result<i64, GobError> {
        self.uint(what).map(uint_to_int)
    }

    /// A length or count, checked against the bytes left in the message (each counted thing
    /// takes at least one byte), so that nothing is allocated for bytes that are not there.
    /// In a partial message the bytes must also have arrived: until they have, the count is
    /// [`GobError::Pending`], so a message announced long but still arriving cannot make its
    /// reader allocate for it.
    pub(crate) fn count(&mut self, what: &'static str) -> Result<usize, GobError> {
        let n = self.message_count(what)?;
        if n > self.avail.saturating_sub(self.pos) {
            return Err(GobError::Pending);
        }
        Ok(n)
    }

    /// A count checked against the bytes left in the message only, whether or not they have
    /// arrived: for a reader that allocates nothing by it (a streamed slice).
    pub(crate) fn message_count(&mut self, what: &'static str) -> Result<usize, GobError> {
        let n = self.uint(what)?;
        let left = self.left();
        if n > left as u64 {
            return Err(GobError::LengthExceedsInput { what, len: n, left });
        }
        Ok(n as usize)
    }

    /// A gob string or `[]byte` body: its length, then that many bytes.
    pub(crate) fn bytes(&mut self, what: &'static str) -> Result<&'a [u8], GobError> {
        let n = self.count(what)?;
        self.take(n, what)
    }

    /// The next `n` bytes of the message.
    pub(crate) fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], GobError> {
        if n > self.left() {
            return Err(GobError::Truncated(what));
        }
        let (rest, short) = self.arrived(what);
        let b = rest.get(..n).ok_or(short)?;
        self.pos += n;
        Ok(b)
    }
}
