//! A one-pass reader of stored lines that checks canonical form as it goes.
//!
//! The verifier must not re-encode rows (that would cost several times the
//! hashing), yet must refuse a line that is not canonical JCS. This scanner
//! does both in one pass: it accepts exactly the JSON that `serde_json` accepts,
//! notes the first departure from canonical form without stopping, and returns
//! the top-level members with their byte spans so the hash can be taken over
//! the stored bytes. It is tested against the slow path (parse, re-encode,
//! compare) in `verify`'s tests.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::ops::Range;

use crate::canonical::MAX_SAFE_INTEGER;

/// Nesting deeper than this is refused, as `serde_json` refuses it.
const MAX_DEPTH: usize = 128;

/// What a top-level value is, as far as the record schemas care.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ValueKind<'a> {
    Str(Cow<'a, str>),
    /// A non-negative integer that fits in `u64`.
    Unsigned(u64),
    /// Any other number: negative, fractional, exponent, or too large.
    OtherNumber,
    Composite,
    Literal,
}

/// One member of the top-level object.
#[derive(Debug, Clone)]
pub(crate) struct Member<'a> {
    pub(crate) key: Cow<'a, str>,
    /// Byte offset of the key's opening quote.
    pub(crate) key_start: usize,
    pub(crate) value: Range<usize>,
    pub(crate) kind: ValueKind<'a>,
}

/// A line that is one whole JSON object, its members collected (tests
/// compare spans and kinds through this; the verifier visits instead).
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct Scanned<'a> {
    pub(crate) members: Vec<Member<'a>>,
    /// True when the line is exactly its canonical (JCS, integer-only) form.
    pub(crate) canonical: bool,
}

/// Reads `line` (without its newline) into its members. `None` means it is
/// not one whole JSON object.
#[cfg(test)]
pub(crate) fn scan_object(line: &[u8]) -> Option<Scanned<'_>> {
    let mut members = Vec::new();
    let canonical = scan_members(line, &mut |member| members.push(member))?;
    Some(Scanned { members, canonical })
}

/// Reads `line` (without its newline) and hands each top-level member to
/// `visit`, in line order, as it is read: nothing is collected, so a row
/// costs no allocation. `None` means the line is not one whole JSON object
/// (which the tolerant reader discards; members visited before the scanner
/// found out are then to be ignored); otherwise whether the line is exactly
/// its canonical (JCS, integer-only) form.
pub(crate) fn scan_members<'a>(line: &'a [u8], visit: &mut impl FnMut(Member<'a>)) -> Option<bool> {
    // JSON text is UTF-8 throughout (outside strings it is ASCII), so the
    // line is checked once here and strings are slices of it.
    let text = std::str::from_utf8(line).ok()?;
    let mut scanner = Scanner {
        bytes: line,
        text,
        pos: 0,
        canonical: true,
    };
    scanner.skip_whitespace();
    if scanner.peek()? != b'{' {
        return None;
    }
    scanner.object(0, visit)?;
    scanner.skip_whitespace();
    if scanner.pos != line.len() {
        return None;
    }
    Some(scanner.canonical)
}

struct Scanner<'a> {
    bytes: &'a [u8],
    /// The same bytes, known to be UTF-8.
    text: &'a str,
    pos: usize,
    canonical: bool,
}

impl<'a> Scanner<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        if self.peek()? == byte {
            self.pos += 1;
            Some(())
        } else {
            None
        }
    }

    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.canonical = false;
            self.pos += 1;
        }
    }

    /// Reads an object at `pos` (on its `{`), handing each member to
    /// `visit` (nested objects pass a visitor that drops them).
    fn object(&mut self, depth: usize, visit: &mut impl FnMut(Member<'a>)) -> Option<()> {
        if depth >= MAX_DEPTH {
            return None;
        }
        self.pos += 1;
        let mut previous: Option<Cow<'a, str>> = None;
        self.skip_whitespace();
        if self.peek()? == b'}' {
            self.pos += 1;
            return Some(());
        }
        loop {
            self.skip_whitespace();
            let key_start = self.pos;
            if self.peek()? != b'"' {
                return None;
            }
            let key = self.string()?;
            if let Some(previous) = &previous
                && utf16_cmp(previous, &key) != Ordering::Less
            {
                self.canonical = false;
            }
            self.skip_whitespace();
            self.expect(b':')?;
            self.skip_whitespace();
            let value_start = self.pos;
            let kind = self.value(depth + 1)?;
            visit(Member {
                key: key.clone(),
                key_start,
                value: value_start..self.pos,
                kind,
            });
            previous = Some(key);
            self.skip_whitespace();
            match self.peek()? {
                b',' => self.pos += 1,
                b'}' => {
                    self.pos += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    fn array(&mut self, depth: usize) -> Option<()> {
        if depth >= MAX_DEPTH {
            return None;
        }
        self.pos += 1;
        self.skip_whitespace();
        if self.peek()? == b']' {
            self.pos += 1;
            return Some(());
        }
        loop {
            self.skip_whitespace();
            self.value(depth + 1)?;
            self.skip_whitespace();
            match self.peek()? {
                b',' => self.pos += 1,
                b']' => {
                    self.pos += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    fn value(&mut self, depth: usize) -> Option<ValueKind<'a>> {
        match self.peek()? {
            b'{' => {
                self.object(depth, &mut |_| {})?;
                Some(ValueKind::Composite)
            }
            b'[' => {
                self.array(depth)?;
                Some(ValueKind::Composite)
            }
            b'"' => Some(ValueKind::Str(self.string()?)),
            b'-' | b'0'..=b'9' => self.number(),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            _ => None,
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<ValueKind<'a>> {
        if self.bytes[self.pos..].starts_with(word) {
            self.pos += word.len();
            Some(ValueKind::Literal)
        } else {
            None
        }
    }

    fn number(&mut self) -> Option<ValueKind<'a>> {
        let negative = self.peek()? == b'-';
        if negative {
            self.pos += 1;
        }
        let digits_start = self.pos;
        match self.peek()? {
            b'0' => {
                self.pos += 1;
                if matches!(self.peek(), Some(b'0'..=b'9')) {
                    return None;
                }
            }
            b'1'..=b'9' => {
                while let Some(b'0'..=b'9') = self.peek() {
                    self.pos += 1;
                }
            }
            _ => return None,
        }
        let digits_end = self.pos;
        let mut integral = true;
        if self.peek() == Some(b'.') {
            integral = false;
            self.pos += 1;
            self.digits()?;
        }
        if let Some(b'e' | b'E') = self.peek() {
            integral = false;
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            self.digits()?;
        }
        if !integral {
            self.canonical = false;
            return Some(ValueKind::OtherNumber);
        }
        let magnitude = parse_digits(&self.bytes[digits_start..digits_end]);
        match magnitude {
            Some(value) if value <= MAX_SAFE_INTEGER && !(negative && value == 0) => {}
            _ => self.canonical = false,
        }
        match (negative, magnitude) {
            (false, Some(value)) => Some(ValueKind::Unsigned(value)),
            _ => Some(ValueKind::OtherNumber),
        }
    }

    fn digits(&mut self) -> Option<()> {
        let start = self.pos;
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
        (self.pos > start).then_some(())
    }

    /// Reads a string at `pos` (on its opening quote) and returns its text.
    /// Inlined into its callers: its result then stays in registers rather
    /// than going through memory, which a row of twenty strings feels.
    #[inline(always)]
    fn string(&mut self) -> Option<Cow<'a, str>> {
        self.pos += 1;
        let start = self.pos;
        // Fast path: no escapes, so the text borrows the stored bytes.
        let rest = &self.bytes[start..];
        let stop = find_special(rest)?;
        if rest[stop] < 0x20 {
            return None;
        }
        // Both ends are next to an ASCII quote or backslash: char boundaries.
        let text = &self.text[start..start + stop];
        self.pos = start + stop;
        if rest[stop] == b'"' {
            self.pos += 1;
            return Some(Cow::Borrowed(text));
        }
        self.escaped_string(text).map(Cow::Owned)
    }

    /// The rest of a string from its first backslash, after `text`.
    #[cold]
    #[inline(never)]
    fn escaped_string(&mut self, text: &str) -> Option<String> {
        let mut text = String::from(text);
        loop {
            let run_start = self.pos;
            while let Some(byte) = self.bytes.get(self.pos) {
                match byte {
                    b'"' | b'\\' => break,
                    0x00..=0x1f => return None,
                    _ => self.pos += 1,
                }
            }
            text.push_str(&self.text[run_start..self.pos]);
            match *self.bytes.get(self.pos)? {
                b'"' => {
                    self.pos += 1;
                    return Some(text);
                }
                _ => {
                    self.pos += 1;
                    self.escape(&mut text)?;
                }
            }
        }
    }

    /// Decodes the escape after a backslash into `text`.
    fn escape(&mut self, text: &mut String) -> Option<()> {
        let code = *self.bytes.get(self.pos)?;
        self.pos += 1;
        let decoded = match code {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => {
                self.canonical = false;
                '/'
            }
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let (unit, lowercase) = self.hex4()?;
                let canonical_escape =
                    lowercase && unit < 0x20 && !matches!(unit, 0x08 | 0x09 | 0x0a | 0x0c | 0x0d);
                if !canonical_escape {
                    self.canonical = false;
                }
                match unit {
                    0xd800..=0xdbff => {
                        if self.bytes.get(self.pos..self.pos + 2)? != b"\\u" {
                            return None;
                        }
                        self.pos += 2;
                        let (low, _) = self.hex4()?;
                        if !(0xdc00..=0xdfff).contains(&low) {
                            return None;
                        }
                        let scalar = 0x10000
                            + ((u32::from(unit) - 0xd800) << 10)
                            + (u32::from(low) - 0xdc00);
                        char::from_u32(scalar)?
                    }
                    0xdc00..=0xdfff => return None,
                    _ => char::from_u32(u32::from(unit))?,
                }
            }
            _ => return None,
        };
        text.push(decoded);
        Some(())
    }

    fn hex4(&mut self) -> Option<(u16, bool)> {
        let digits = self.bytes.get(self.pos..self.pos + 4)?;
        let mut value = 0u16;
        let mut lowercase = true;
        for &digit in digits {
            let nibble = match digit {
                b'0'..=b'9' => digit - b'0',
                b'a'..=b'f' => digit - b'a' + 10,
                b'A'..=b'F' => {
                    lowercase = false;
                    digit - b'A' + 10
                }
                _ => return None,
            };
            value = (value << 4) | u16::from(nibble);
        }
        self.pos += 4;
        Some((value, lowercase))
    }
}

/// Whether two short texts (member names, task ids) are equal, compared
/// in line: a call to `memcmp` costs more than the comparison for texts
/// this short, and the verifier compares several a row.
pub(crate) fn same_text(left: &str, right: &str) -> bool {
    left.len() == right.len()
        && left
            .bytes()
            .zip(right.bytes())
            .fold(true, |all, (left, right)| all & (left == right))
}

/// Every byte of a word set to 0x01, 0x20, 0x22, 0x5c and 0x80.
const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
const SPACES: u64 = u64::from_ne_bytes([0x20; 8]);
const QUOTES: u64 = u64::from_ne_bytes([b'"'; 8]);
const BACKSLASHES: u64 = u64::from_ne_bytes([b'\\'; 8]);
const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);

/// The index of the first byte that ends a string's plain run: a quote, a
/// backslash or a control byte (below 0x20, never allowed in a string).
///
/// Strings are short and many (a journal row holds about twenty), so this
/// reads eight bytes at a time with no call and no setup, where `memchr`'s
/// vector loop pays its setup on every string.
fn find_special(bytes: &[u8]) -> Option<usize> {
    let mut words = bytes.chunks_exact(8);
    let mut offset = 0;
    for word in &mut words {
        let word = u64::from_le_bytes(word.try_into().expect("eight bytes"));
        // `below(x)` marks bytes under the value repeated in `x`; the lowest
        // mark is exact (a borrow only ever marks bytes above a true one),
        // which is all the search needs.
        let below = |limit: u64| word.wrapping_sub(limit) & !word & HIGHS;
        let equal = |pattern: u64| {
            let diff = word ^ pattern;
            diff.wrapping_sub(ONES) & !diff & HIGHS
        };
        let marks = below(SPACES) | equal(QUOTES) | equal(BACKSLASHES);
        if marks != 0 {
            return Some(offset + (marks.trailing_zeros() / 8) as usize);
        }
        offset += 8;
    }
    words
        .remainder()
        .iter()
        .position(|&byte| byte == b'"' || byte == b'\\' || byte < 0x20)
        .map(|at| offset + at)
}

fn parse_digits(digits: &[u8]) -> Option<u64> {
    let mut value: u64 = 0;
    for &digit in digits {
        value = value
            .checked_mul(10)?
            .checked_add(u64::from(digit - b'0'))?;
    }
    Some(value)
}

/// Orders strings as JCS does: by UTF-16 code units.
///
/// UTF-8 bytes order as code points do, and code points order as UTF-16
/// units do except where a character from U+E000 to U+FFFF (lead byte 0xEE
/// or 0xEF) meets one above U+FFFF (0xF0 and up, a surrogate pair in UTF-16).
/// So the bytes decide unless both bytes at the first difference are 0xEE or
/// above.
pub(crate) fn utf16_cmp(left: &str, right: &str) -> Ordering {
    let (left_bytes, right_bytes) = (left.as_bytes(), right.as_bytes());
    match left_bytes
        .iter()
        .zip(right_bytes)
        .position(|(left, right)| left != right)
    {
        Some(at) if left_bytes[at] >= 0xee && right_bytes[at] >= 0xee => {
            left.encode_utf16().cmp(right.encode_utf16())
        }
        Some(at) => left_bytes[at].cmp(&right_bytes[at]),
        None => left_bytes.len().cmp(&right_bytes.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_order_by_utf16_units_whatever_their_bytes() {
        let words = [
            "",
            "a",
            "ab",
            "b",
            "\u{7f}",
            "é",
            "\u{d7ff}",
            "\u{e000}",
            "\u{fffd}",
            "\u{ffff}",
            "\u{10000}",
            "\u{1f600}",
            "\u{10ffff}",
            "a\u{e000}",
            "a\u{1f600}",
            "aé",
        ];
        for left in words {
            for right in words {
                assert_eq!(
                    utf16_cmp(left, right),
                    left.encode_utf16().cmp(right.encode_utf16()),
                    "{left:?} {right:?}"
                );
            }
        }
    }

    /// The word-at-a-time search finds what a byte-by-byte one finds, at
    /// every length and place, for every byte that ends a plain run and
    /// the bytes either side of each limit.
    #[test]
    fn find_special_finds_the_first_quote_backslash_or_control() {
        let naive = |bytes: &[u8]| {
            bytes
                .iter()
                .position(|&byte| byte == b'"' || byte == b'\\' || byte < 0x20)
        };
        let fillers = [
            b'a', 0x20, 0x21, 0x23, 0x5b, 0x5d, 0x7f, 0x80, 0xa2, 0xdc, 0xff,
        ];
        let specials = [b'"', b'\\', 0x00, 0x01, 0x1f, b'\n'];
        for length in 0..40 {
            for filler in fillers {
                let plain = vec![filler; length];
                assert_eq!(find_special(&plain), None, "{length} {filler}");
                for place in 0..length {
                    for special in specials {
                        let mut bytes = plain.clone();
                        bytes[place] = special;
                        assert_eq!(find_special(&bytes), naive(&bytes), "{bytes:?}");
                        if place + 1 < length {
                            bytes[place + 1] = b'"';
                            assert_eq!(find_special(&bytes), naive(&bytes), "{bytes:?}");
                        }
                    }
                }
            }
        }
    }

    fn canonical(line: &str) -> Option<bool> {
        scan_object(line.as_bytes()).map(|scanned| scanned.canonical)
    }

    #[test]
    fn accepts_canonical_objects() {
        for line in [
            r#"{}"#,
            r#"{"a":1,"b":[true,false,null,{"c":"d"}],"c":-5}"#,
            r#"{"s":"\"\\\b\f\n\r\t\u0001\u001f"}"#,
            "{\"\u{1f600}\":1,\"\u{e000}\":2}",
            r#"{"m":-9007199254740991,"n":9007199254740991,"z":0}"#,
        ] {
            assert_eq!(canonical(line), Some(true), "{line}");
        }
    }

    #[test]
    fn notes_departures_from_canonical_form() {
        for line in [
            r#"{ "a":1}"#,
            r#"{"b":1,"a":2}"#,
            r#"{"a":1,"a":2}"#,
            r#"{"a":1.5}"#,
            r#"{"a":1e3}"#,
            r#"{"a":-0}"#,
            r#"{"a":9007199254740992}"#,
            r#"{"a":"\/"}"#,
            r#"{"a":"\u0041"}"#,
            r#"{"a":"\u000A"}"#,
            r#"{"a":"\u001F"}"#,
            r#"{"a":"\ud83d\ude00"}"#,
            "{\"\u{e000}\":1,\"\u{1f600}\":2}",
            "{\"a\":1}\r",
        ] {
            assert_eq!(canonical(line), Some(false), "{line}");
        }
    }

    #[test]
    fn refuses_what_is_not_one_json_object() {
        for line in [
            "",
            "[]",
            "1",
            "{",
            r#"{"a":1"#,
            r#"{"a":01}"#,
            r#"{"a":1.}"#,
            r#"{"a":tru}"#,
            r#"{"a":"\x"}"#,
            r#"{"a":"\ud800"}"#,
            r#"{"a":"\udc00"}"#,
            "{\"a\":\"\u{1}\"}",
            r#"{"a":1} x"#,
            r#"{"a":1,}"#,
            r#"{a:1}"#,
        ] {
            assert_eq!(canonical(line), None, "{line}");
        }
        assert_eq!(scan_object(b"{\"a\":\"\xff\"}").map(|s| s.canonical), None);
        let deep = format!("{{\"a\":{}{}}}", "[".repeat(200), "]".repeat(200));
        assert_eq!(canonical(&deep), None);
    }

    #[test]
    fn reports_member_spans_and_decoded_keys() {
        let line = r#"{"a\u0062":"x\ny","n":7}"#;
        let scanned = scan_object(line.as_bytes()).unwrap();
        assert_eq!(scanned.members[0].key, "ab");
        assert_eq!(
            scanned.members[0].kind,
            ValueKind::Str(Cow::Owned("x\ny".into()))
        );
        assert_eq!(&line[scanned.members[1].value.clone()], "7");
        assert_eq!(scanned.members[1].kind, ValueKind::Unsigned(7));
        assert_eq!(&line[scanned.members[1].key_start..], r#""n":7}"#);
    }
}
