//! A JSON writer that produces the bytes libcalico-go produces.
//!
//! libcalico-go marshals model values with json-iterator in its standard-library-compatible
//! mode: struct fields in declaration order, `omitempty` honoured, map keys sorted, HTML
//! characters escaped. Some leaf types (label maps, ports, protocols, IPs) implement
//! `MarshalJSON` with Go's own `encoding/json` instead, whose string escaping differs in two
//! characters: Go 1.22+ writes backspace and form feed as `\b` and `\f`, json-iterator as
//! `\u0008` and `\u000c`. [`Escape`] names the two, and each caller says which one its Go field
//! goes through. serde_json cannot be used: it escapes neither `<`, `>`, `&` nor U+2028/9.
//!
//! The writer appends to one buffer; [`Obj`] writes one object's fields, each helper named for
//! the Go tag it mirrors (`str` always, `str_ne` for `omitempty`).

use std::collections::BTreeMap;

/// Which Go encoder escapes a string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Escape {
    /// json-iterator (`ConfigCompatibleWithStandardLibrary`): what libcalico-go's `json.Marshal`
    /// uses for everything it walks itself.
    Jsoniter,
    /// Go's `encoding/json` (1.22 and later): used inside `MarshalJSON` methods, such as
    /// `uniquelabels.Map`'s.
    Std,
}

/// A JSON document being written.
#[derive(Debug, Default)]
pub(super) struct Json {
    buf: Vec<u8>,
}

impl Json {
    pub(super) fn new() -> Self {
        Self::default()
    }

    /// The bytes written.
    pub(super) fn into_bytes(self) -> Vec<u8> {
        self.buf
    }

    pub(super) fn null(&mut self) {
        self.buf.extend_from_slice(b"null");
    }

    pub(super) fn bool(&mut self, b: bool) {
        self.buf
            .extend_from_slice(if b { b"true" } else { b"false" });
    }

    pub(super) fn uint(&mut self, n: u64) {
        self.buf.extend_from_slice(n.to_string().as_bytes());
    }

    /// A float64 as json-iterator writes it: shortest digits that round-trip, fixed notation
    /// unless the magnitude is below 1e-6 or at least 1e21, where Go's `%e` form is used
    /// (`1e-07`, `1e+21`: sign and at least two exponent digits). Callers never pass NaN or
    /// infinities (Go refuses to marshal them; our model rejects them).
    pub(super) fn float(&mut self, f: f64) {
        let abs = f.abs();
        if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
            let s = format!("{f:e}");
            let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
            let exp: i32 = exp.parse().unwrap_or(0);
            let sign = if exp < 0 { '-' } else { '+' };
            self.buf.extend_from_slice(
                format!("{mantissa}e{sign}{:02}", exp.unsigned_abs()).as_bytes(),
            );
        } else {
            self.buf.extend_from_slice(format!("{f}").as_bytes());
        }
    }

    /// A string, escaped as `esc` does.
    pub(super) fn string(&mut self, s: &str, esc: Escape) {
        self.buf.push(b'"');
        for c in s.chars() {
            match c {
                '"' => self.buf.extend_from_slice(b"\\\""),
                '\\' => self.buf.extend_from_slice(b"\\\\"),
                '\n' => self.buf.extend_from_slice(b"\\n"),
                '\r' => self.buf.extend_from_slice(b"\\r"),
                '\t' => self.buf.extend_from_slice(b"\\t"),
                '\u{8}' if esc == Escape::Std => self.buf.extend_from_slice(b"\\b"),
                '\u{c}' if esc == Escape::Std => self.buf.extend_from_slice(b"\\f"),
                '\u{2028}' => self.buf.extend_from_slice(b"\\u2028"),
                '\u{2029}' => self.buf.extend_from_slice(b"\\u2029"),
                c if (c as u32) < 0x20 || matches!(c, '<' | '>' | '&') => {
                    let b = c as u32;
                    self.buf.extend_from_slice(format!("\\u{b:04x}").as_bytes());
                }
                c => {
                    let mut tmp = [0u8; 4];
                    self.buf
                        .extend_from_slice(c.encode_utf8(&mut tmp).as_bytes());
                }
            }
        }
        self.buf.push(b'"');
    }

    /// A `map[string]string`: keys sorted (a `BTreeMap` iterates in byte order, as Go sorts).
    pub(super) fn string_map(&mut self, m: &BTreeMap<String, String>, esc: Escape) {
        self.buf.push(b'{');
        for (i, (k, v)) in m.iter().enumerate() {
            if i > 0 {
                self.buf.push(b',');
            }
            self.string(k, esc);
            self.buf.push(b':');
            self.string(v, esc);
        }
        self.buf.push(b'}');
    }

    /// An array of `items`, each written by `f`.
    pub(super) fn array<T>(
        &mut self,
        items: impl IntoIterator<Item = T>,
        mut f: impl FnMut(&mut Json, T),
    ) {
        self.buf.push(b'[');
        for (i, item) in items.into_iter().enumerate() {
            if i > 0 {
                self.buf.push(b',');
            }
            f(self, item);
        }
        self.buf.push(b']');
    }

    /// An array of strings.
    pub(super) fn strings<S: AsRef<str>>(&mut self, items: &[S], esc: Escape) {
        self.array(items, |j, s| j.string(s.as_ref(), esc));
    }

    /// An object whose fields `f` writes.
    pub(super) fn object(&mut self, f: impl FnOnce(&mut Obj<'_>)) {
        self.buf.push(b'{');
        let mut o = Obj {
            json: self,
            fields: 0,
        };
        f(&mut o);
        self.buf.push(b'}');
    }

    /// JSON text written as it is (already in Go's form).
    pub(super) fn raw(&mut self, text: &[u8]) {
        self.buf.extend_from_slice(text);
    }
}

/// The fields of one object, in the order they are written.
#[derive(Debug)]
pub(super) struct Obj<'a> {
    json: &'a mut Json,
    fields: usize,
}

impl Obj<'_> {
    /// Starts a field and returns the writer for its value. Field names are Go tags: plain
    /// ASCII, written as they are.
    pub(super) fn field(&mut self, name: &str) -> &mut Json {
        if self.fields > 0 {
            self.json.buf.push(b',');
        }
        self.fields += 1;
        self.json.buf.push(b'"');
        self.json.buf.extend_from_slice(name.as_bytes());
        self.json.buf.extend_from_slice(b"\":");
        self.json
    }

    /// Starts a field whose name is data (a map key), escaped as json-iterator escapes it.
    pub(super) fn field_escaped(&mut self, name: &str) -> &mut Json {
        if self.fields > 0 {
            self.json.buf.push(b',');
        }
        self.fields += 1;
        self.json.string(name, Escape::Jsoniter);
        self.json.buf.push(b':');
        self.json
    }

    /// A string field without `omitempty`.
    pub(super) fn str(&mut self, name: &str, v: &str) {
        self.field(name).string(v, Escape::Jsoniter);
    }

    /// A string field with `omitempty`.
    pub(super) fn str_ne(&mut self, name: &str, v: &str) {
        if !v.is_empty() {
            self.str(name, v);
        }
    }

    /// A bool field without `omitempty`.
    pub(super) fn bool(&mut self, name: &str, v: bool) {
        self.field(name).bool(v);
    }

    /// A bool field with `omitempty`.
    pub(super) fn bool_ne(&mut self, name: &str, v: bool) {
        if v {
            self.bool(name, v);
        }
    }

    /// A `[]string` field with `omitempty`.
    pub(super) fn strings_ne<S: AsRef<str>>(&mut self, name: &str, v: &[S]) {
        if !v.is_empty() {
            self.field(name).strings(v, Escape::Jsoniter);
        }
    }

    /// A `[]string` field without `omitempty`: an empty list is Go's nil slice, `null`.
    pub(super) fn strings_or_null<S: AsRef<str>>(&mut self, name: &str, v: &[S]) {
        if v.is_empty() {
            self.field(name).null();
        } else {
            self.field(name).strings(v, Escape::Jsoniter);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(text: &str, esc: Escape) -> String {
        let mut j = Json::new();
        j.string(text, esc);
        String::from_utf8(j.into_bytes()).unwrap()
    }

    fn f(x: f64) -> String {
        let mut j = Json::new();
        j.float(x);
        String::from_utf8(j.into_bytes()).unwrap()
    }

    #[test]
    fn strings_are_escaped_as_go_does() {
        assert_eq!(
            s("a<b>&\"\\", Escape::Jsoniter),
            r#""a\u003cb\u003e\u0026\"\\""#
        );
        assert_eq!(
            s("\n\r\t\u{1}\u{1f}", Escape::Jsoniter),
            r#""\n\r\t\u0001\u001f""#
        );
        assert_eq!(s("\u{8}\u{c}", Escape::Jsoniter), r#""\u0008\u000c""#);
        assert_eq!(s("\u{8}\u{c}", Escape::Std), r#""\b\f""#);
        assert_eq!(
            s("x\u{2028}y\u{2029}é", Escape::Jsoniter),
            "\"x\\u2028y\\u2029é\""
        );
        assert_eq!(s("\u{7f}", Escape::Jsoniter), "\"\u{7f}\"");
    }

    #[test]
    fn floats_are_formatted_as_go_does() {
        assert_eq!(f(1000.0), "1000");
        assert_eq!(f(100.5), "100.5");
        assert_eq!(f(0.1), "0.1");
        assert_eq!(f(-3.0), "-3");
        assert_eq!(f(0.0), "0");
        assert_eq!(f(1e20), "100000000000000000000");
        assert_eq!(f(1e21), "1e+21");
        assert_eq!(f(1.5e-7), "1.5e-07");
        assert_eq!(f(1.2345e100), "1.2345e+100");
        assert_eq!(f(0.000001), "0.000001");
    }

    #[test]
    fn objects_and_maps() {
        let mut j = Json::new();
        let m: BTreeMap<String, String> = [
            ("b".to_owned(), "2".to_owned()),
            ("a".to_owned(), "1".to_owned()),
        ]
        .into();
        j.object(|o| {
            o.str("x", "");
            o.str_ne("y", "");
            o.bool_ne("z", false);
            o.field("m").string_map(&m, Escape::Std);
            o.strings_or_null("n", &[] as &[String]);
            o.strings_ne("p", &["q"]);
        });
        assert_eq!(
            String::from_utf8(j.into_bytes()).unwrap(),
            r#"{"x":"","m":{"a":"1","b":"2"},"n":null,"p":["q"]}"#
        );
    }
}
