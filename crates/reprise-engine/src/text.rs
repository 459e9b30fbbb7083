//! Text helpers shared by the modules that quote what processes printed.

/// `text` cut to at most `max` bytes at a character boundary.
pub(crate) fn clip(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}
