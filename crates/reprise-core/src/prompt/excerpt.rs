//! Bounded excerpts of untrusted text: head and tail kept, the middle cut on
//! UTF-8 boundaries, and the cut announced with its exact size.
//!
//! Both ends matter: a reply states its plan at the top and its conclusion at
//! the bottom, a test run names the failing case at the top and the summary at
//! the bottom. The announcement is paid for inside the bound, so a caller's
//! byte limit is a limit on what it sends, not on what it meant to send.

/// Everything of the announcement but the decimal count.
const ANNOUNCEMENT_FIXED_BYTES: usize = "\n[...  bytes omitted ...]\n".len();

/// `text` cut to at most `max_bytes` bytes: head and tail kept, the middle
/// replaced by `\n[... N bytes omitted ...]\n` where `N` is exactly the number
/// of bytes left out.
///
/// A text within the bound is returned unchanged. The head gets the larger
/// half of what is left after the announcement; both cuts fall on char
/// boundaries, so the result is never longer than `max_bytes` and always valid
/// UTF-8. A bound too small to hold even the announcement (under about 30
/// bytes) yields the head of the text cut to the bound, with no announcement:
/// there is no room to say more.
pub fn excerpt(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_owned();
    }
    // The count's width depends on the cut, and the cut on the count's width:
    // try widths from 1 up and take the first whose count fits in it. The
    // widest possible count (every byte dropped) always fits its own width.
    for digits in 1..=decimal_digits(text.len()) {
        let Some(kept) = max_bytes.checked_sub(ANNOUNCEMENT_FIXED_BYTES + digits) else {
            break;
        };
        let head_end = floor_char_boundary(text, kept.div_ceil(2));
        let tail_start = ceil_char_boundary(text, text.len() - (kept - head_end));
        let omitted = tail_start - head_end;
        if decimal_digits(omitted) <= digits {
            return format!(
                "{}\n[... {omitted} bytes omitted ...]\n{}",
                &text[..head_end],
                &text[tail_start..]
            );
        }
    }
    text[..floor_char_boundary(text, max_bytes)].to_owned()
}

/// `text` with each NUL byte shown as `␀` (U+2400). A prompt is handed to
/// an agent's CLI as a process argument, which cannot hold a NUL: one quoted
/// from a reply or a gate's output would stop the next attempt from starting.
pub(super) fn without_nul(text: &str) -> std::borrow::Cow<'_, str> {
    if text.contains('\0') {
        std::borrow::Cow::Owned(text.replace('\0', "\u{2400}"))
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

fn decimal_digits(mut value: usize) -> usize {
    let mut digits = 1;
    while value >= 10 {
        value /= 10;
        digits += 1;
    }
    digits
}

/// The largest char boundary at or below `index`.
fn floor_char_boundary(text: &str, index: usize) -> usize {
    let mut index = index.min(text.len());
    while !text.is_char_boundary(index) {
        index -= 1;
    }
    index
}

/// The smallest char boundary at or above `index`.
fn ceil_char_boundary(text: &str, index: usize) -> usize {
    let mut index = index.min(text.len());
    while !text.is_char_boundary(index) {
        index += 1;
    }
    index
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Head, announced count and tail of an excerpt that announces a cut.
    fn split(result: &str) -> Option<(&str, usize, &str)> {
        let start = result.find("\n[... ")?;
        let rest = &result[start + "\n[... ".len()..];
        let digits = rest.find(" bytes omitted ...]\n")?;
        let count = rest[..digits].parse().ok()?;
        let tail = &rest[digits + " bytes omitted ...]\n".len()..];
        Some((&result[..start], count, tail))
    }

    /// Checks every promise of `excerpt(text, max_bytes)`.
    fn check(text: &str, max_bytes: usize) -> Result<(), TestCaseError> {
        let result = excerpt(text, max_bytes);
        if text.len() <= max_bytes {
            prop_assert_eq!(&result, text);
            return Ok(());
        }
        prop_assert!(result.len() <= max_bytes, "{} > {max_bytes}", result.len());
        match split(&result) {
            Some((head, omitted, tail)) => {
                prop_assert!(text.starts_with(head));
                prop_assert!(text.ends_with(tail));
                prop_assert_eq!(head.len() + omitted + tail.len(), text.len());
            }
            None => {
                prop_assert!(max_bytes < ANNOUNCEMENT_FIXED_BYTES + decimal_digits(text.len()));
                prop_assert!(text.starts_with(&result));
                prop_assert!(max_bytes - result.len() < 4, "the head was cut short");
            }
        }
        Ok(())
    }

    #[test]
    fn a_text_within_the_bound_is_unchanged() {
        assert_eq!(excerpt("", 0), "");
        assert_eq!(excerpt("héllo", 6), "héllo");
        assert_eq!(excerpt("héllo", 100), "héllo");
    }

    #[test]
    fn a_long_reply_keeps_head_and_tail_and_counts_the_cut() {
        let reply = format!(
            "HEAD: the plan.\n{}\nTAIL: the conclusion.\n",
            "a middle line of a long reply\n".repeat(700)
        );
        let reply = format!("{reply}{}", "x".repeat(24_000 - reply.len()));
        assert_eq!(reply.len(), 24_000);
        let result = excerpt(&reply, 8000);
        assert!(result.len() <= 8000, "{}", result.len());
        assert!(
            result.len() >= 7995,
            "the bound was not used: {}",
            result.len()
        );
        let (head, omitted, tail) = split(&result).expect("an announced cut");
        assert!(head.starts_with("HEAD: the plan.\n"));
        assert!(tail.ends_with("xxxxx"));
        assert_eq!(omitted, 24_000 - head.len() - tail.len());
        assert_eq!(
            result,
            format!(
                "{head}\n[... {omitted} bytes omitted ...]\n{tail}",
                head = &reply[..head.len()],
                tail = &reply[24_000 - tail.len()..],
            )
        );
        check(&reply, 8000).expect("promises");
    }

    #[test]
    fn the_count_width_is_paid_for() {
        // 100 bytes at a bound of 40: a 2-digit count leaves 12 bytes kept,
        // so 88 are dropped and the announcement is exactly 28 bytes.
        let text = "0123456789".repeat(10);
        let result = excerpt(&text, 40);
        assert_eq!(result, "012345\n[... 88 bytes omitted ...]\n456789");
        assert_eq!(result.len(), 40);
    }

    #[test]
    fn tiny_bounds_keep_the_head_cut_to_the_bound() {
        let text = "é".repeat(50);
        assert_eq!(excerpt(&text, 0), "");
        assert_eq!(excerpt(&text, 1), "");
        assert_eq!(excerpt(&text, 5), "éé");
        // The announcement alone fits: nothing is kept around it.
        assert_eq!(excerpt(&text, 29), "\n[... 100 bytes omitted ...]\n");
    }

    #[test]
    fn multi_byte_text_is_valid_at_every_bound() {
        let text = "aé€😀".repeat(30);
        for max_bytes in 0..=text.len() + 1 {
            check(&text, max_bytes).expect("promises");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn every_bound_of_any_mix_of_widths_holds(
            chars in proptest::collection::vec(
                prop_oneof![Just('a'), Just('\n'), Just('ß'), Just('€'), Just('語'), Just('😀'), Just('𝄞')],
                0..120,
            ),
        ) {
            let text: String = chars.into_iter().collect();
            for max_bytes in 0..=text.len() {
                check(&text, max_bytes)?;
            }
        }
    }
}
