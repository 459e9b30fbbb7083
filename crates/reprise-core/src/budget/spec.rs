//! The budget spec and its parser: `3 retries, degrade: coverage>tests>style`.
//!
//! Grammar, with whitespace allowed around every token and nowhere required:
//!
//! ```text
//! spec     = count [unit] [separator criteria]
//! count    = digit+                      (0 to 4294967295)
//! unit     = retries | retry              (any case)
//! separator= "," | ";"
//! criteria = ["degrade" ":"] name (">" name)*       ("degrade" in any case)
//! name     = [A-Za-z_][A-Za-z0-9_-]*
//! ```
//!
//! The count is of retries after the first attempt, so the unit is
//! `retries`: `3 attempts` is refused with a hint rather than read as three
//! retries (one more attempt than it says) or guessed as two. A list of
//! criteria needs the separator even when `degrade:` introduces it (`3
//! retries degrade: a` is refused, with a hint), so that an unknown word after
//! the count is always an error and never a criterion. For the same reason a
//! bare `degrade` right after the separator must be followed by `:`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::error::BudgetError;

/// A parsed retry budget: how many retries, and which criteria they lower, in
/// order.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct BudgetSpec {
    /// Retries authorised after the first attempt; 0 means none.
    pub retries: u32,
    /// The criteria to lower, first retry first; no name twice.
    pub criteria: Vec<String>,
}

impl fmt::Display for BudgetSpec {
    /// The canonical form, which parses back to the same value:
    /// `3 retries, degrade: coverage>tests>style`, `1 retry`, `0 retries`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&canonical_prefix(self.retries, !self.criteria.is_empty()))?;
        f.write_str(&self.criteria.join(">"))
    }
}

impl FromStr for BudgetSpec {
    type Err = BudgetError;
    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        parse_budget(spec)
    }
}

impl Serialize for BudgetSpec {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for BudgetSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        parse_budget(&text).map_err(serde::de::Error::custom)
    }
}

/// Parses a retry-budget spec such as `3 retries, degrade: coverage>tests`.
pub fn parse_budget(spec: &str) -> Result<BudgetSpec, BudgetError> {
    parse_located(spec).map(|located| located.spec)
}

/// Parses a spec and checks its criteria against `known`, reporting positions
/// in the text as the user wrote it.
pub fn parse_budget_against(spec: &str, known: &[&str]) -> Result<BudgetSpec, BudgetError> {
    let located = parse_located(spec)?;
    let named = located
        .spec
        .criteria
        .iter()
        .map(String::as_str)
        .zip(located.positions.iter().copied());
    check_criteria(spec, named, known)?;
    Ok(located.spec)
}

/// Checks that every criterion of `spec` is one of `known` (the criteria the
/// plan's gates declare) and that none is listed twice.
///
/// A parsed spec no longer knows its original spacing, so positions in the
/// error count bytes of the canonical form, which the message quotes.
pub fn validate_against(spec: &BudgetSpec, known: &[&str]) -> Result<(), BudgetError> {
    let text = spec.to_string();
    let mut position = canonical_prefix(spec.retries, !spec.criteria.is_empty()).len();
    let named = spec.criteria.iter().map(|name| {
        let at = position;
        position += name.len() + 1;
        (name.as_str(), at)
    });
    check_criteria(&text, named, known)
}

/// `3 retries` or `1 retry`, with `, degrade: ` when criteria follow.
fn canonical_prefix(retries: u32, with_criteria: bool) -> String {
    let unit = if retries == 1 { "retry" } else { "retries" };
    if with_criteria {
        format!("{retries} {unit}, degrade: ")
    } else {
        format!("{retries} {unit}")
    }
}

fn check_criteria<'a>(
    text: &str,
    named: impl Iterator<Item = (&'a str, usize)>,
    known: &[&str],
) -> Result<(), BudgetError> {
    let mut seen: Vec<(&str, usize)> = Vec::new();
    for (name, position) in named {
        if let Some(&(_, first_position)) = seen.iter().find(|(earlier, _)| *earlier == name) {
            return Err(BudgetError::DuplicateCriterion {
                spec: text.to_owned(),
                name: name.to_owned(),
                position,
                first_position,
            });
        }
        if !known.contains(&name) {
            let mut known: Vec<String> = known.iter().map(|&name| name.to_owned()).collect();
            known.sort();
            known.dedup();
            return Err(BudgetError::UnknownCriterion {
                spec: text.to_owned(),
                name: name.to_owned(),
                position,
                known,
            });
        }
        seen.push((name, position));
    }
    Ok(())
}

const UNITS: [&str; 2] = ["retries", "retry"];

const HINT_EMPTY: &str = "write a retry count, e.g. \"3 retries, degrade: coverage>tests\"";
const HINT_COUNT: &str = "the count is a whole number of retries from 0 to 4294967295";
const HINT_UNIT: &str =
    "after the count write \"retries\" (or \"retry\"), then \",\" or \";\" before the criteria";
const HINT_ATTEMPTS: &str = "a retry budget counts retries after the first attempt: write \"retries\" (3 attempts are \"2 retries\")";
const HINT_SEPARATOR: &str = "put \",\" or \";\" between the count and the criteria";
const HINT_LIST: &str = "a separator is followed by criteria, e.g. \"degrade: coverage>tests\"";
const HINT_DEGRADE: &str = "write \"degrade:\" followed by criteria separated by \">\"";
const HINT_NAMES: &str = "criteria are names separated by \">\"";
const HINT_NAME_AFTER: &str = "a criterion name must follow \">\" and \"degrade:\"";
const HINT_NAME: &str = "a criterion name matches [A-Za-z_][A-Za-z0-9_-]*";
const HINT_AFTER_NAME: &str = "after a criterion comes \">\" and another criterion, or the end";

/// A parsed spec with the byte offset of each criterion in the source text.
struct Located {
    spec: BudgetSpec,
    positions: Vec<usize>,
}

fn parse_located(text: &str) -> Result<Located, BudgetError> {
    let mut parser = Parser { text, position: 0 };
    parser.skip_whitespace();
    let retries = parser.count()?;
    parser.skip_whitespace();
    if parser.peek().is_some_and(|c| !is_punctuation(c)) {
        let (word, at) = parser.word();
        if ["attempts", "attempt"]
            .iter()
            .any(|unit| word.eq_ignore_ascii_case(unit))
        {
            return Err(parser.malformed(word, at, HINT_ATTEMPTS));
        }
        if !is_unit(word) {
            return Err(parser.malformed(word, at, HINT_UNIT));
        }
        parser.skip_whitespace();
    }
    let mut located = Located {
        spec: BudgetSpec {
            retries,
            criteria: Vec::new(),
        },
        positions: Vec::new(),
    };
    match parser.peek() {
        None => return Ok(located),
        Some(',' | ';') => parser.position += 1,
        Some(_) => {
            let (token, at) = parser.token();
            return Err(parser.malformed(token, at, HINT_SEPARATOR));
        }
    }
    parser.skip_whitespace();
    if parser.peek().is_none() {
        return Err(parser.malformed("", text.len(), HINT_LIST));
    }
    let (word, at) = parser.token();
    if word.eq_ignore_ascii_case("degrade") {
        parser.position = at + word.len();
        parser.skip_whitespace();
        if parser.peek() != Some(':') {
            return Err(parser.malformed(word, at, HINT_DEGRADE));
        }
        parser.position += 1;
    }
    loop {
        parser.skip_whitespace();
        let (token, at) = parser.token();
        if token.is_empty() {
            return Err(parser.malformed(token, at, HINT_NAME_AFTER));
        }
        if token.starts_with(is_punctuation) {
            return Err(parser.malformed(token, at, HINT_NAMES));
        }
        if !is_criterion_name(token) {
            return Err(parser.malformed(token, at, HINT_NAME));
        }
        if let Some(index) = located.spec.criteria.iter().position(|name| name == token) {
            return Err(BudgetError::DuplicateCriterion {
                spec: text.to_owned(),
                name: token.to_owned(),
                position: at,
                first_position: located.positions[index],
            });
        }
        parser.position = at + token.len();
        located.spec.criteria.push(token.to_owned());
        located.positions.push(at);
        parser.skip_whitespace();
        match parser.peek() {
            None => return Ok(located),
            Some('>') => parser.position += 1,
            Some(_) => {
                let (token, at) = parser.token();
                return Err(parser.malformed(token, at, HINT_AFTER_NAME));
            }
        }
    }
}

/// A cursor over the spec; `position` is always on a char boundary.
struct Parser<'a> {
    text: &'a str,
    position: usize,
}

impl<'a> Parser<'a> {
    fn rest(&self) -> &'a str {
        &self.text[self.position..]
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn skip_whitespace(&mut self) {
        let rest = self.rest();
        self.position += rest.len() - rest.trim_start().len();
    }

    /// The token at the cursor without moving: one punctuation character, a
    /// word running up to whitespace or punctuation, or "" at the end.
    fn token(&self) -> (&'a str, usize) {
        let rest = self.rest();
        let len = match rest.chars().next() {
            None => 0,
            Some(c) if is_punctuation(c) => c.len_utf8(),
            Some(_) => rest.find(is_delimiter).unwrap_or(rest.len()),
        };
        (&rest[..len], self.position)
    }

    /// Takes the word at the cursor (the caller checked it is not punctuation).
    fn word(&mut self) -> (&'a str, usize) {
        let (word, at) = self.token();
        self.position += word.len();
        (word, at)
    }

    /// Takes the count, leaving a unit glued to it (`3retries`) for the caller.
    fn count(&mut self) -> Result<u32, BudgetError> {
        let (token, at) = self.token();
        if token.is_empty() {
            return Err(self.malformed(token, at, HINT_EMPTY));
        }
        let digits = token.bytes().take_while(u8::is_ascii_digit).count();
        let rest = &token[digits..];
        if digits == 0 || !(rest.is_empty() || is_unit(rest)) {
            return Err(self.malformed(token, at, HINT_COUNT));
        }
        let retries = token[..digits]
            .parse()
            .map_err(|_| self.malformed(&token[..digits], at, HINT_COUNT))?;
        self.position += digits;
        Ok(retries)
    }

    fn malformed(&self, token: &str, position: usize, hint: &'static str) -> BudgetError {
        BudgetError::Malformed {
            spec: self.text.to_owned(),
            token: token.to_owned(),
            position,
            hint,
        }
    }
}

fn is_punctuation(c: char) -> bool {
    matches!(c, ',' | ';' | ':' | '>')
}

fn is_delimiter(c: char) -> bool {
    c.is_whitespace() || is_punctuation(c)
}

fn is_unit(word: &str) -> bool {
    UNITS.iter().any(|unit| word.eq_ignore_ascii_case(unit))
}

/// `[A-Za-z_][A-Za-z0-9_-]*`, the pattern a gate's `criterion:` follows.
fn is_criterion_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
}
