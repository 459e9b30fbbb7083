//! Budget tests: a table of accepted and refused specs pinned to their value
//! or their error's token and byte, the messages, the state machine on fixed
//! cases, and properties over generated specs and ladders.

use proptest::prelude::*;

use super::*;

/// What a spec in the table parses to.
enum Expect {
    Accepted(u32, &'static [&'static str]),
    Malformed(&'static str, usize),
    Duplicate(&'static str, usize, usize),
}

use Expect::{Accepted, Duplicate, Malformed};

const TABLE: &[(&str, Expect)] = &[
    // Accepted: the canonical forms.
    (
        "3 retries, degrade: coverage>tests>style",
        Accepted(3, &["coverage", "tests", "style"]),
    ),
    ("0 retries", Accepted(0, &[])),
    ("1 retry", Accepted(1, &[])),
    ("0 retries, degrade: coverage", Accepted(0, &["coverage"])),
    // Accepted: other units, no unit, any agreement.
    // Refused: attempts are not retries.
    ("3 attempts", Malformed("attempts", 2)),
    ("1 attempt", Malformed("attempt", 2)),
    ("1 retries", Accepted(1, &[])),
    ("3", Accepted(3, &[])),
    ("3, coverage", Accepted(3, &["coverage"])),
    // Accepted: spacing and case.
    (
        "  3   RETRIES ,  DEGRADE :  coverage  >  tests  ",
        Accepted(3, &["coverage", "tests"]),
    ),
    ("2,\tdegrade:\na", Accepted(2, &["a"])),
    ("3retries,degrade:a>b", Accepted(3, &["a", "b"])),
    ("3 RETRIES; Degrade: a", Accepted(3, &["a"])),
    ("3 AtTeMpTs; Degrade: a", Malformed("AtTeMpTs", 2)),
    ("3;a>b", Accepted(3, &["a", "b"])),
    ("3 retries,coverage", Accepted(3, &["coverage"])),
    // Accepted: counts.
    ("007 retries", Accepted(7, &[])),
    ("4294967295 retries", Accepted(u32::MAX, &[])),
    // Accepted: names.
    (
        "2 retries, degrade: _x>a-b>A9",
        Accepted(2, &["_x", "a-b", "A9"]),
    ),
    ("2 retries, degrade: a>A", Accepted(2, &["a", "A"])),
    ("2 retries, degrade: degrade", Accepted(2, &["degrade"])),
    ("2 retries, degrade-x>y", Accepted(2, &["degrade-x", "y"])),
    ("2 retries, degrade: retries", Accepted(2, &["retries"])),
    // Refused: no count, or a bad one.
    ("", Malformed("", 0)),
    ("   ", Malformed("", 3)),
    ("-1 retries", Malformed("-1", 0)),
    ("+3 retries", Malformed("+3", 0)),
    ("three retries", Malformed("three", 0)),
    ("3.5 retries", Malformed("3.5", 0)),
    ("3x", Malformed("3x", 0)),
    ("4294967296 retries", Malformed("4294967296", 0)),
    (
        "99999999999999999999999999 retries",
        Malformed("99999999999999999999999999", 0),
    ),
    ("retries 3", Malformed("retries", 0)),
    (", degrade: a", Malformed(",", 0)),
    // Refused: a word other than the unit, or a missing separator.
    ("3 times", Malformed("times", 2)),
    ("3 coverage", Malformed("coverage", 2)),
    ("3 degrade: a", Malformed("degrade", 2)),
    ("3 retries degrade: a", Malformed("degrade", 10)),
    ("3 retries retries", Malformed("retries", 10)),
    ("3 retries: a", Malformed(":", 9)),
    // Refused: a separator or `degrade` with nothing, or `degrade` without `:`.
    ("3 retries,", Malformed("", 10)),
    ("3 retries, , a", Malformed(",", 11)),
    ("3 retries, degrade:", Malformed("", 19)),
    ("3 retries, degrade:   ", Malformed("", 22)),
    ("3 retries, degrade", Malformed("degrade", 11)),
    ("3 retries, degrade coverage", Malformed("degrade", 11)),
    ("3 retries, degrade>coverage", Malformed("degrade", 11)),
    ("3 retries, degrade:: a", Malformed(":", 19)),
    // Refused: the `>` chain.
    ("3 retries, degrade: a>>b", Malformed(">", 22)),
    ("3 retries, degrade: a>b>", Malformed("", 24)),
    ("3 retries, degrade: a > ", Malformed("", 24)),
    ("3 retries, degrade: >a", Malformed(">", 20)),
    // Refused: bad names and junk after the list.
    ("3 retries, degrade: 1abc", Malformed("1abc", 20)),
    ("3 retries, degrade: -a", Malformed("-a", 20)),
    ("3 retries, degrade: a b", Malformed("b", 22)),
    ("3 retries, degrade: café", Malformed("café", 20)),
    ("3 retries, degrade: a>é", Malformed("é", 22)),
    ("3 retries, degrade: a>b, c", Malformed(",", 23)),
    ("3 retries, degrade: a>b:c", Malformed(":", 23)),
    ("3 retries, degrade: a;", Malformed(";", 21)),
    // Refused: duplicates, with both positions.
    ("3 retries, degrade: a>b>a", Duplicate("a", 24, 20)),
    ("3 retries, degrade: a > b > a", Duplicate("a", 28, 20)),
    ("3, tests>tests", Duplicate("tests", 9, 3)),
];

#[test]
fn the_table_of_specs_parses_or_is_refused_at_the_right_byte() {
    assert!(TABLE.len() >= 30);
    for (text, expect) in TABLE {
        let got = parse_budget(text);
        match (expect, &got) {
            (Accepted(retries, criteria), Ok(spec)) => {
                assert_eq!(spec.retries, *retries, "{text:?}");
                assert_eq!(spec.criteria, *criteria, "{text:?}");
            }
            (
                Malformed(want_token, want_position),
                Err(BudgetError::Malformed {
                    spec,
                    token,
                    position,
                    ..
                }),
            ) => {
                assert_eq!(spec, text);
                assert_eq!(
                    (token.as_str(), *position),
                    (*want_token, *want_position),
                    "{text:?}"
                );
            }
            (
                Duplicate(want_name, want_position, want_first),
                Err(BudgetError::DuplicateCriterion {
                    name,
                    position,
                    first_position,
                    ..
                }),
            ) => {
                assert_eq!(
                    (name.as_str(), *position, *first_position),
                    (*want_name, *want_position, *want_first),
                    "{text:?}"
                );
            }
            _ => panic!("{text:?} gave {got:?}"),
        }
    }
}

#[test]
fn a_malformed_token_starts_at_its_byte_in_the_spec() {
    for (text, expect) in TABLE {
        if let Malformed(token, position) = expect {
            assert_eq!(
                &text[*position..*position + token.len()],
                *token,
                "{text:?}"
            );
        }
    }
}

#[test]
fn messages_are_one_line_and_name_the_token_and_its_byte() {
    let cases = [
        (
            "3 retries, degrade: a>>b",
            r#"retry budget "3 retries, degrade: a>>b": unexpected ">" at byte 22; criteria are names separated by ">""#,
        ),
        (
            "3 retries, degrade: a>",
            r#"retry budget "3 retries, degrade: a>": unexpected end of spec at byte 22; a criterion name must follow ">" and "degrade:""#,
        ),
        (
            "3 retries, degrade: a>b>a",
            r#"retry budget "3 retries, degrade: a>b>a": criterion "a" at byte 24 is already listed at byte 20; list each criterion once"#,
        ),
        (
            "3 retries degrade: a",
            r#"retry budget "3 retries degrade: a": unexpected "degrade" at byte 10; put "," or ";" between the count and the criteria"#,
        ),
        (
            "-1",
            r#"retry budget "-1": unexpected "-1" at byte 0; the count is a whole number of retries from 0 to 4294967295"#,
        ),
        (
            "",
            r#"retry budget "": unexpected end of spec at byte 0; write a retry count, e.g. "3 retries, degrade: coverage>tests""#,
        ),
        (
            "3\n, degrade: a\tb",
            r#"retry budget "3\n, degrade: a\tb": unexpected "b" at byte 15; after a criterion comes ">" and another criterion, or the end"#,
        ),
    ];
    for (text, want) in cases {
        let message = parse_budget(text).unwrap_err().to_string();
        assert_eq!(message, want);
        assert!(!message.contains('\n'));
    }
    assert_eq!(
        BudgetError::BudgetExhausted.to_string(),
        "retry budget exhausted: every retry it authorised has been used; the task fails"
    );
}

#[test]
fn display_is_canonical() {
    let cases = [
        (
            "3 retries, degrade: coverage>tests>style",
            "3 retries, degrade: coverage>tests>style",
        ),
        ("  1   RETRY ;coverage", "1 retry, degrade: coverage"),
        ("1 retries", "1 retry"),
        ("0", "0 retries"),
        ("3 retry", "3 retries"),
        ("007;a > b", "7 retries, degrade: a>b"),
    ];
    for (text, want) in cases {
        let spec = parse_budget(text).unwrap();
        assert_eq!(spec.to_string(), want);
        assert_eq!(parse_budget(want).unwrap(), spec);
    }
}

#[test]
fn a_spec_travels_through_serde_and_from_str_as_its_canonical_text() {
    let spec: BudgetSpec = "2 RETRIES; coverage".parse().unwrap();
    let json = serde_json::to_string(&spec).unwrap();
    assert_eq!(json, r#""2 retries, degrade: coverage""#);
    assert_eq!(serde_json::from_str::<BudgetSpec>(&json).unwrap(), spec);
    let refused = serde_json::from_str::<BudgetSpec>(r#""2 retries, degrade: a>>b""#);
    assert!(refused.unwrap_err().to_string().contains("at byte 22"));
}

#[test]
fn unknown_criteria_are_named_with_their_byte_in_the_text_as_written() {
    let known = ["tests", "coverage", "tests"];
    let got = parse_budget_against("3 retries ,  degrade:coverage>  lint", &known);
    assert_eq!(
        got,
        Err(BudgetError::UnknownCriterion {
            spec: "3 retries ,  degrade:coverage>  lint".to_owned(),
            name: "lint".to_owned(),
            position: 32,
            known: vec!["coverage".to_owned(), "tests".to_owned()],
        })
    );
    assert_eq!(
        got.unwrap_err().to_string(),
        r#"retry budget "3 retries ,  degrade:coverage>  lint": unknown criterion "lint" at byte 32; the plan's gates declare "coverage", "tests""#
    );
    let spec = parse_budget_against("3, tests>coverage", &known).unwrap();
    assert_eq!(spec.criteria, ["tests", "coverage"]);
    // Names are matched exactly: a gate's criterion is case-sensitive.
    assert!(matches!(
        parse_budget_against("3, Coverage", &known),
        Err(BudgetError::UnknownCriterion { position: 3, .. })
    ));
    // Syntax errors come first, whatever is known.
    assert!(matches!(
        parse_budget_against("3, a>>b", &[]),
        Err(BudgetError::Malformed { position: 5, .. })
    ));
}

#[test]
fn validate_against_counts_bytes_of_the_canonical_form() {
    let spec = parse_budget("3   retries;coverage >lint").unwrap();
    let got = validate_against(&spec, &["coverage"]).unwrap_err();
    assert_eq!(
        got.to_string(),
        r#"retry budget "3 retries, degrade: coverage>lint": unknown criterion "lint" at byte 29; the plan's gates declare "coverage""#
    );
    assert_eq!(validate_against(&spec, &["lint", "coverage"]), Ok(()));
    let message = validate_against(&spec, &[]).unwrap_err().to_string();
    assert!(message.ends_with(
        r#"unknown criterion "coverage" at byte 20; no gate in the plan declares a criterion"#
    ));
    // A spec built by hand is checked for duplicates too.
    let twice = BudgetSpec {
        retries: 1,
        criteria: vec!["a".to_owned(), "a".to_owned()],
    };
    assert!(matches!(
        validate_against(&twice, &["a"]),
        Err(BudgetError::DuplicateCriterion {
            position: 20,
            first_position: 18,
            ..
        })
    ));
    assert_eq!(validate_against(&parse_budget("4").unwrap(), &[]), Ok(()));
}

fn ladders(entries: &[(&str, &[i64])]) -> Vec<(String, Vec<i64>)> {
    entries
        .iter()
        .map(|(name, levels)| ((*name).to_owned(), levels.to_vec()))
        .collect()
}

fn levels_of(decision: &BudgetDecision) -> Vec<(&str, i64)> {
    decision
        .criteria
        .iter()
        .map(|snapshot| (snapshot.name.as_str(), snapshot.level))
        .collect()
}

#[test]
fn two_retries_on_coverage_lower_it_once_then_hold_it() {
    let spec = parse_budget("2 retries, degrade: coverage").unwrap();
    let mut budget = RetryBudget::new(&spec, &ladders(&[("coverage", &[80, 70, 60])])).unwrap();
    // Attempt 1 runs at the first rung.
    assert_eq!(budget.level("coverage"), Some(80));

    let first = budget.consume().unwrap();
    assert!(first.should_retry);
    assert_eq!(first.retry_number, 1);
    assert_eq!(first.degradation_kind, DegradationKind::Lowered);
    assert_eq!(first.degraded_criterion.as_deref(), Some("coverage"));
    assert_eq!(
        first.criteria,
        [CriterionSnapshot {
            name: "coverage".to_owned(),
            level: 70,
            min_level: 60,
            max_level: 80,
        }]
    );
    assert_eq!((first.retries_used, first.retries_left), (1, 1));
    assert_eq!(
        first.reason,
        r#"retry 1 of 2 lowers "coverage" from 80 to 70"#
    );
    assert_eq!(budget.level("coverage"), Some(70));

    // Retry 2 is past the one-criterion policy: the floor it reached is held.
    let second = budget.consume().unwrap();
    assert!(second.should_retry);
    assert_eq!(second.degradation_kind, DegradationKind::PastPolicy);
    assert_eq!(second.degraded_criterion, None);
    assert_eq!(levels_of(&second), [("coverage", 70)]);
    assert_eq!((second.retries_used, second.retries_left), (2, 0));
    assert_eq!(
        second.reason,
        "retry 2 of 2 is past the policy's 1 criteria; levels held"
    );
    assert_eq!(budget.level("coverage"), Some(70));

    let spent = budget.peek();
    assert!(!spent.should_retry);
    assert_eq!(spent.retry_number, 0);
    assert_eq!(spent.degradation_kind, DegradationKind::None);
    assert_eq!(spent.reason, "all 2 retries of the budget are used");
    assert_eq!(budget.consume(), Err(BudgetError::BudgetExhausted));
    assert_eq!(budget.level("coverage"), Some(70));
}

#[test]
fn a_criterion_on_its_last_rung_stays_there_and_the_decision_says_so() {
    let spec = parse_budget("4 retries, degrade: coverage>tests").unwrap();
    let declared = ladders(&[("tests", &[5]), ("coverage", &[80, 70, 60])]);
    let mut budget = RetryBudget::new(&spec, &declared).unwrap();
    let kinds: Vec<_> = (0..4)
        .map(|_| {
            let decision = budget.consume().unwrap();
            (
                decision.degradation_kind,
                decision.degraded_criterion.clone(),
                levels_of(&decision)
                    .into_iter()
                    .map(|(name, level)| (name.to_owned(), level))
                    .collect::<Vec<_>>(),
            )
        })
        .collect();
    let at = |coverage, tests| {
        vec![
            ("coverage".to_owned(), coverage),
            ("tests".to_owned(), tests),
        ]
    };
    assert_eq!(
        kinds,
        [
            (
                DegradationKind::Lowered,
                Some("coverage".to_owned()),
                at(70, 5)
            ),
            (
                DegradationKind::AtFloor,
                Some("tests".to_owned()),
                at(70, 5)
            ),
            (DegradationKind::PastPolicy, None, at(70, 5)),
            (DegradationKind::PastPolicy, None, at(70, 5)),
        ]
    );
}

#[test]
fn zero_retries_never_retry() {
    for text in ["0 retries, degrade: coverage", "0"] {
        let spec = parse_budget(text).unwrap();
        let mut budget = RetryBudget::new(&spec, &ladders(&[("coverage", &[80, 70])])).unwrap();
        let decision = budget.peek();
        assert!(!decision.should_retry);
        assert_eq!((decision.retries_used, decision.retries_left), (0, 0));
        assert_eq!(decision.reason, "the retry budget authorises no retries");
        assert_eq!(budget.consume(), Err(BudgetError::BudgetExhausted));
        assert_eq!(budget.level("coverage"), Some(80));
        assert_eq!(budget.retries_left(), 0);
    }
}

#[test]
fn a_budget_without_criteria_retries_with_every_level_held() {
    let spec = parse_budget("2").unwrap();
    let mut budget = RetryBudget::new(&spec, &ladders(&[("coverage", &[80, 70])])).unwrap();
    let decision = budget.consume().unwrap();
    assert_eq!(decision.degradation_kind, DegradationKind::PastPolicy);
    assert_eq!(
        decision.reason,
        "retry 1 of 2: the budget names no criteria; levels held"
    );
    assert_eq!(budget.level("coverage"), Some(80));
    assert_eq!(budget.level("lint"), None);
}

#[test]
fn criteria_outside_the_policy_are_reported_after_it_and_never_move() {
    let spec = parse_budget("3, style>coverage").unwrap();
    let declared = ladders(&[
        ("coverage", &[80, 70]),
        ("lint", &[3, 2, 1]),
        ("style", &[2, 1]),
        ("coverage", &[80, 70]),
    ]);
    let mut budget = RetryBudget::new(&spec, &declared).unwrap();
    let names: Vec<_> = budget
        .peek()
        .criteria
        .iter()
        .map(|snapshot| snapshot.name.clone())
        .collect();
    assert_eq!(names, ["style", "coverage", "lint"]);
    while budget.consume().is_ok() {}
    assert_eq!(budget.level("style"), Some(1));
    assert_eq!(budget.level("coverage"), Some(70));
    assert_eq!(budget.level("lint"), Some(3));
}

#[test]
fn a_budget_is_refused_when_its_criteria_or_ladders_cannot_be_honoured() {
    let spec = parse_budget("2, coverage>tests").unwrap();
    let unknown = RetryBudget::new(&spec, &ladders(&[("coverage", &[2, 1])])).unwrap_err();
    assert_eq!(
        unknown,
        BudgetError::UnknownCriterion {
            spec: "2 retries, degrade: coverage>tests".to_owned(),
            name: "tests".to_owned(),
            position: 29,
            known: vec!["coverage".to_owned()],
        }
    );
    let cases: [(&[i64], LevelsProblem); 5] = [
        (&[], LevelsProblem::Empty),
        (&[60, 70], LevelsProblem::NotDescending),
        (&[80, 80, 70], LevelsProblem::NotDescending),
        (&[1 << 53, 1], LevelsProblem::BeyondSafeRange),
        (&[i64::MIN], LevelsProblem::BeyondSafeRange),
    ];
    for (levels, problem) in cases {
        let declared = ladders(&[("coverage", levels), ("tests", &[1])]);
        assert_eq!(
            RetryBudget::new(&spec, &declared),
            Err(BudgetError::InvalidLevels {
                name: "coverage".to_owned(),
                levels: levels.to_vec(),
                problem,
            }),
        );
    }
    let conflicting = ladders(&[
        ("tests", &[1]),
        ("coverage", &[80, 70]),
        ("coverage", &[90]),
    ]);
    let error = RetryBudget::new(&spec, &conflicting).unwrap_err();
    assert_eq!(
        error.to_string(),
        r#"criterion "coverage" has levels [90]; another gate declares it with levels [80, 70]; give every gate of a criterion the same levels"#
    );
    let bounds = ladders(&[
        ("coverage", &[(1 << 53) - 1, 1 - (1 << 53)]),
        ("tests", &[1]),
    ]);
    assert!(RetryBudget::new(&spec, &bounds).is_ok());
}

#[test]
fn a_ladder_refuses_to_go_below_its_last_rung() {
    let mut ladder = CriterionLevels::new("coverage", vec![80, 70]).unwrap();
    assert!(!ladder.is_at_floor());
    assert_eq!(ladder.lower(), Ok(70));
    assert!(ladder.is_at_floor());
    assert_eq!(
        ladder.lower(),
        Err(BudgetError::CriterionExhausted {
            name: "coverage".to_owned(),
            level: 70,
        })
    );
    assert_eq!(
        (ladder.level(), ladder.min_level(), ladder.max_level()),
        (70, 70, 80)
    );
    assert_eq!(
        ladder.lower().unwrap_err().to_string(),
        r#"criterion "coverage" is at its lowest level 70 and cannot be lowered"#
    );
}

#[test]
fn a_decision_serialises_to_integers_and_strings_only() {
    let spec = parse_budget("1 retry, degrade: coverage").unwrap();
    let budget = RetryBudget::new(&spec, &ladders(&[("coverage", &[80, 70, 60])])).unwrap();
    let json = serde_json::to_string(&budget.peek()).unwrap();
    assert_eq!(
        json,
        r#"{"should_retry":true,"retry_number":1,"degraded_criterion":"coverage","degradation_kind":"lowered","criteria":[{"name":"coverage","level":70,"min_level":60,"max_level":80}],"retries_used":1,"retries_left":0,"reason":"retry 1 of 1 lowers \"coverage\" from 80 to 70"}"#
    );
    assert!(crate::canonical::to_canonical_vec(&budget.peek()).is_ok());
    let back: BudgetDecision = serde_json::from_str(&json).unwrap();
    assert_eq!(back, budget.peek());
}

#[test]
fn the_environment_variable_is_reprise_s() {
    assert_eq!(ENV_VAR, "REPRISE_RETRY_BUDGET_SPEC");
}

/// A criterion name; some collide with the spec's own words on purpose.
fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        "[A-Za-z_][A-Za-z0-9_-]{0,8}",
        prop::sample::select(vec!["degrade", "Degrade", "retries", "retry", "attempt"])
            .prop_map(str::to_owned),
    ]
}

fn unique_names(max: usize) -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(name(), 0..=max).prop_map(|mut names| {
        let mut seen = std::collections::HashSet::new();
        names.retain(|name| seen.insert(name.clone()));
        names
    })
}

fn spec() -> impl Strategy<Value = BudgetSpec> {
    (prop_oneof![0..5u32, any::<u32>()], unique_names(6))
        .prop_map(|(retries, criteria)| BudgetSpec { retries, criteria })
}

/// Whitespace that the parser must tolerate: none, spaces, tabs, newlines.
fn blank() -> impl Strategy<Value = String> {
    "[ \t\n]{0,3}"
}

/// A case-scrambled copy of `word`, by a mask.
fn scramble(word: &str, mask: u64) -> String {
    word.chars()
        .enumerate()
        .map(|(index, c)| {
            if mask >> (index % 64) & 1 == 1 {
                c.to_ascii_uppercase()
            } else {
                c
            }
        })
        .collect()
}

/// A spec with its criteria, a rendering of it in any spacing, case, unit,
/// separator and with or without `degrade:`.
fn noisy_rendering() -> impl Strategy<Value = (BudgetSpec, String)> {
    (
        spec(),
        prop::collection::vec(blank(), 8),
        prop::sample::select(vec!["", "retries", "retry"]),
        prop::sample::select(vec![",", ";"]),
        any::<bool>(),
        any::<u64>(),
        0..3usize,
    )
        .prop_map(|(spec, blanks, unit, separator, prefix, mask, zeros)| {
            let mut text = blanks[0].clone();
            text.push_str(&"0".repeat(zeros));
            text.push_str(&spec.retries.to_string());
            if !unit.is_empty() {
                text.push_str(&blanks[1]);
                text.push_str(&scramble(unit, mask));
            }
            if !spec.criteria.is_empty() {
                text.push_str(&blanks[2]);
                text.push_str(separator);
                text.push_str(&blanks[3]);
                // Without the prefix, a first criterion spelled like the
                // keyword would read as the keyword: always prefix it then.
                if prefix || spec.criteria[0].eq_ignore_ascii_case("degrade") {
                    text.push_str(&scramble("degrade", mask.rotate_left(7)));
                    text.push_str(&blanks[4]);
                    text.push(':');
                    text.push_str(&blanks[5]);
                }
                let joiner = format!("{}>{}", blanks[6], blanks[7]);
                text.push_str(&spec.criteria.join(&joiner));
            }
            text.push_str(&blanks[7]);
            (spec, text)
        })
}

/// Declared criteria with strictly decreasing ladders, a policy over some of
/// them in any order, and a retry count.
fn machine() -> impl Strategy<Value = (BudgetSpec, Vec<(String, Vec<i64>)>)> {
    unique_names(5)
        .prop_flat_map(|names| {
            let count = names.len();
            let ladders = prop::collection::vec(
                prop::collection::btree_set(-1000i64..1000, 1..5)
                    .prop_map(|set| set.into_iter().rev().collect::<Vec<i64>>()),
                count,
            );
            let policy = prop::sample::subsequence(names.clone(), 0..=count).prop_shuffle();
            (Just(names), ladders, policy, 0..12u32)
        })
        .prop_map(|(names, ladders, policy, retries)| {
            let declared = names.into_iter().zip(ladders).collect();
            let spec = BudgetSpec {
                retries,
                criteria: policy,
            };
            (spec, declared)
        })
}

fn ladder_of<'a>(declared: &'a [(String, Vec<i64>)], name: &str) -> &'a [i64] {
    &declared
        .iter()
        .find(|(declared, _)| declared == name)
        .unwrap()
        .1
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn display_parses_back_to_the_same_spec(spec in spec()) {
        let text = spec.to_string();
        prop_assert_eq!(parse_budget(&text), Ok(spec.clone()));
        prop_assert_eq!(validate_against(&spec, &spec.criteria.iter().map(String::as_str).collect::<Vec<_>>()), Ok(()));
    }

    #[test]
    fn any_spacing_case_unit_and_separator_parse_to_the_same_spec(
        (spec, text) in noisy_rendering()
    ) {
        prop_assert_eq!(parse_budget(&text), Ok(spec), "{:?}", text);
    }

    #[test]
    fn the_budget_authorises_exactly_its_count((spec, declared) in machine()) {
        let mut budget = RetryBudget::new(&spec, &declared).unwrap();
        let mut authorised = 0u32;
        while budget.peek().should_retry {
            prop_assert!(budget.consume().is_ok());
            authorised += 1;
            prop_assert!(authorised <= spec.retries);
        }
        prop_assert_eq!(authorised, spec.retries);
        prop_assert_eq!(budget.consume(), Err(BudgetError::BudgetExhausted));
        prop_assert_eq!(budget.peek().degradation_kind, DegradationKind::None);
    }

    #[test]
    fn used_and_left_always_add_up_to_the_count((spec, declared) in machine()) {
        let mut budget = RetryBudget::new(&spec, &declared).unwrap();
        prop_assert_eq!(budget.retries_left(), spec.retries);
        for k in 1..=spec.retries {
            let decision = budget.consume().unwrap();
            prop_assert_eq!(decision.retry_number, k);
            prop_assert_eq!(decision.retries_used, k);
            prop_assert_eq!(decision.retries_used + decision.retries_left, spec.retries);
            prop_assert_eq!(budget.retries_left(), spec.retries - k);
        }
        let spent = budget.peek();
        prop_assert_eq!((spent.retries_used, spent.retries_left), (spec.retries, 0));
    }

    #[test]
    fn criteria_degrade_in_policy_order((spec, declared) in machine()) {
        let mut budget = RetryBudget::new(&spec, &declared).unwrap();
        for k in 1..=spec.retries as usize {
            let decision = budget.consume().unwrap();
            match spec.criteria.get(k - 1) {
                Some(name) => {
                    prop_assert_eq!(decision.degraded_criterion.as_ref(), Some(name));
                    let kind = if ladder_of(&declared, name).len() > 1 {
                        DegradationKind::Lowered
                    } else {
                        DegradationKind::AtFloor
                    };
                    prop_assert_eq!(decision.degradation_kind, kind);
                }
                None => {
                    prop_assert_eq!(decision.degraded_criterion, None);
                    prop_assert_eq!(decision.degradation_kind, DegradationKind::PastPolicy);
                }
            }
        }
    }

    #[test]
    fn levels_never_rise_and_only_the_named_criterion_moves_one_rung(
        (spec, declared) in machine()
    ) {
        let mut budget = RetryBudget::new(&spec, &declared).unwrap();
        // A peek shows the levels after its step; before any retry every
        // criterion stands on its first rung.
        let mut before = budget.peek().criteria;
        for snapshot in &mut before {
            snapshot.level = snapshot.max_level;
            prop_assert_eq!(budget.level(&snapshot.name), Some(snapshot.max_level));
        }
        while let Ok(decision) = budget.consume() {
            prop_assert_eq!(decision.criteria.len(), before.len());
            for (old, new) in before.iter().zip(&decision.criteria) {
                prop_assert_eq!(&old.name, &new.name);
                prop_assert!(new.level <= old.level);
                let ladder = ladder_of(&declared, &new.name);
                prop_assert_eq!((new.max_level, new.min_level), (ladder[0], ladder[ladder.len() - 1]));
                let moved = new.level != old.level;
                let named = decision.degradation_kind == DegradationKind::Lowered
                    && decision.degraded_criterion.as_ref() == Some(&new.name);
                prop_assert_eq!(moved, named);
                if moved {
                    let rung = ladder.iter().position(|&level| level == old.level).unwrap();
                    prop_assert_eq!(new.level, ladder[rung + 1]);
                }
            }
            before = decision.criteria;
        }
    }

    #[test]
    fn peek_is_idempotent_and_is_what_consume_returns((spec, declared) in machine()) {
        let mut budget = RetryBudget::new(&spec, &declared).unwrap();
        loop {
            let peeked = budget.peek();
            prop_assert_eq!(&budget.peek(), &peeked);
            match budget.consume() {
                Ok(consumed) => {
                    prop_assert_eq!(&consumed, &peeked);
                    for snapshot in &consumed.criteria {
                        prop_assert_eq!(budget.level(&snapshot.name), Some(snapshot.level));
                    }
                }
                Err(error) => {
                    prop_assert_eq!(error, BudgetError::BudgetExhausted);
                    prop_assert!(!peeked.should_retry);
                    prop_assert_eq!(budget.peek(), peeked);
                    break;
                }
            }
        }
    }
}
