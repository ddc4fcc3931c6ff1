//! Jute, ZooKeeper's record serialization: big-endian `int` (i32), `long`
//! (i64), one-byte `boolean`, and `buffer`/`ustring`/`vector` as an i32
//! length (-1 for null) followed by the bytes or items.
//!
//! The reader never trusts a length: every one is checked against what is
//! left in the frame before anything is allocated.

use bytes::{Buf, BufMut, BytesMut};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JuteError {
    #[error("record ends early: {0} needs more bytes than are left")]
    Short(&'static str),
    #[error("negative or oversized length {len} for {what}")]
    BadLength { what: &'static str, len: i32 },
    #[error("{0} is not valid UTF-8")]
    Utf8(&'static str),
}

/// Reads records from one frame.
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf }
    }

    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    pub fn int(&mut self, what: &'static str) -> Result<i32, JuteError> {
        if self.buf.len() < 4 {
            return Err(JuteError::Short(what));
        }
        Ok(self.buf.get_i32())
    }

    pub fn long(&mut self, what: &'static str) -> Result<i64, JuteError> {
        if self.buf.len() < 8 {
            return Err(JuteError::Short(what));
        }
        Ok(self.buf.get_i64())
    }

    pub fn boolean(&mut self, what: &'static str) -> Result<bool, JuteError> {
        if self.buf.is_empty() {
            return Err(JuteError::Short(what));
        }
        Ok(self.buf.get_u8() != 0)
    }

    /// A buffer; null reads as empty.
    pub fn buffer(&mut self, what: &'static str) -> Result<Vec<u8>, JuteError> {
        Ok(self.buffer_or_null(what)?.unwrap_or_default())
    }

    /// A buffer, `None` for null (length -1): znode data, where ZooKeeper
    /// keeps null apart from empty.
    pub fn buffer_or_null(&mut self, what: &'static str) -> Result<Option<Vec<u8>>, JuteError> {
        let len = self.int(what)?;
        if len == -1 {
            return Ok(None);
        }
        if len < 0 || len as usize > self.buf.len() {
            return Err(JuteError::BadLength { what, len });
        }
        let out = self.buf[..len as usize].to_vec();
        self.buf.advance(len as usize);
        Ok(Some(out))
    }

    pub fn string(&mut self, what: &'static str) -> Result<String, JuteError> {
        String::from_utf8(self.buffer(what)?).map_err(|_| JuteError::Utf8(what))
    }

    /// A string, `None` for null (where a request tells "not given" from
    /// empty, as reconfig's `newMembers` does).
    pub fn string_or_null(&mut self, what: &'static str) -> Result<Option<String>, JuteError> {
        self.buffer_or_null(what)?
            .map(|b| String::from_utf8(b).map_err(|_| JuteError::Utf8(what)))
            .transpose()
    }

    /// A vector's length; null reads as 0. Each item takes at least
    /// `item_bytes_min` bytes, which bounds the count by what is left.
    pub fn vec_len(
        &mut self,
        what: &'static str,
        item_bytes_min: usize,
    ) -> Result<usize, JuteError> {
        let len = self.int(what)?;
        if len == -1 {
            return Ok(0);
        }
        if len < 0 || (len as usize).saturating_mul(item_bytes_min) > self.buf.len() {
            return Err(JuteError::BadLength { what, len });
        }
        Ok(len as usize)
    }

    pub fn strings(&mut self, what: &'static str) -> Result<Vec<String>, JuteError> {
        let n = self.vec_len(what, 4)?;
        (0..n).map(|_| self.string(what)).collect()
    }
}

/// Writes records into a frame body.
#[derive(Default)]
pub struct Writer {
    pub buf: BytesMut,
}

impl Writer {
    pub fn int(&mut self, v: i32) -> &mut Self {
        self.buf.put_i32(v);
        self
    }

    pub fn long(&mut self, v: i64) -> &mut Self {
        self.buf.put_i64(v);
        self
    }

    pub fn boolean(&mut self, v: bool) -> &mut Self {
        self.buf.put_u8(u8::from(v));
        self
    }

    pub fn buffer(&mut self, v: &[u8]) -> &mut Self {
        self.buf.put_i32(v.len() as i32);
        self.buf.put_slice(v);
        self
    }

    /// A buffer, or null (length -1) when `null`.
    pub fn buffer_or_null(&mut self, v: &[u8], null: bool) -> &mut Self {
        if null {
            self.buf.put_i32(-1);
            self
        } else {
            self.buffer(v)
        }
    }

    pub fn string(&mut self, v: &str) -> &mut Self {
        self.buffer(v.as_bytes())
    }

    pub fn strings(&mut self, v: &[String]) -> &mut Self {
        self.buf.put_i32(v.len() as i32);
        for s in v {
            self.string(s);
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_bounds() {
        let mut w = Writer::default();
        w.int(-2)
            .long(1 << 40)
            .boolean(true)
            .string("/a")
            .buffer(b"")
            .strings(&["x".into(), "yz".into()]);
        let bytes = w.buf.freeze();
        let mut r = Reader::new(&bytes);
        assert_eq!(r.int("i").unwrap(), -2);
        assert_eq!(r.long("l").unwrap(), 1 << 40);
        assert!(r.boolean("b").unwrap());
        assert_eq!(r.string("s").unwrap(), "/a");
        assert_eq!(r.buffer("d").unwrap(), b"");
        assert_eq!(
            r.strings("v").unwrap(),
            vec!["x".to_string(), "yz".to_string()]
        );
        assert_eq!(r.remaining(), 0);
        assert_eq!(r.int("end"), Err(JuteError::Short("end")));
    }

    #[test]
    fn lies_about_lengths_are_refused_without_allocating() {
        let mut w = Writer::default();
        w.int(i32::MAX);
        let bytes = w.buf.freeze();
        assert!(matches!(
            Reader::new(&bytes).buffer("data"),
            Err(JuteError::BadLength { .. })
        ));
        assert!(matches!(
            Reader::new(&bytes).vec_len("acl", 8),
            Err(JuteError::BadLength { .. })
        ));
        let mut w = Writer::default();
        w.int(-5);
        let bytes = w.buf.freeze();
        assert!(matches!(
            Reader::new(&bytes).string("path"),
            Err(JuteError::BadLength { .. })
        ));
        let mut w = Writer::default();
        w.int(-1);
        let bytes = w.buf.freeze();
        assert_eq!(
            Reader::new(&bytes).buffer("null").unwrap(),
            Vec::<u8>::new()
        );
        assert_eq!(Reader::new(&bytes).buffer_or_null("null").unwrap(), None);
        let mut w = Writer::default();
        w.buffer_or_null(b"", true).buffer_or_null(b"", false);
        let bytes = w.buf.freeze();
        let mut r = Reader::new(&bytes);
        assert_eq!(r.buffer_or_null("null").unwrap(), None);
        assert_eq!(r.buffer_or_null("empty").unwrap(), Some(Vec::new()));
    }
}
