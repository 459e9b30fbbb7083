//! Money as the commands show it. Text writes dollars (`$0.30`, up to six
//! decimals); JSON writes integer micro-dollars in fields whose names end
//! `_micro_usd`, as the journals and the ledger hold them. A cost nobody
//! reported is `unknown` in text and `null` in JSON, never zero: a total
//! with unknown parts says so (`$0.06 + 2 unknown`), and its JSON gives the
//! known part and how many attempts reported nothing beside a `null` total.

use reprise_core::plan::Spend;
use serde_json::{Map, Value, json};

use crate::output::money;

/// `$0.06`, `$0.06 + 2 unknown`, or `unknown` when no part is known.
pub(crate) fn spend_text(spend: Spend) -> String {
    match (spend.known_micro_usd, spend.unknown) {
        (known, 0) => money(known),
        (0, _) => "unknown".to_owned(),
        (known, unknown) => format!("{} + {unknown} unknown", money(known)),
    }
}

/// One figure: `$0.06`, or `unknown`.
pub(crate) fn cost_text(cost_micro_usd: Option<u64>) -> String {
    cost_micro_usd.map_or_else(|| "unknown".to_owned(), money)
}

/// Sets `spent_micro_usd` (the total, `null` when any part is unknown),
/// `spent_known_micro_usd` (what was reported) and `costs_unknown` (how many
/// attempts reported nothing) on `object`.
pub(crate) fn insert_spend(object: &mut Map<String, Value>, spend: Spend) {
    object.insert("spent_micro_usd".into(), json!(spend.total_micro_usd()));
    object.insert("spent_known_micro_usd".into(), json!(spend.known_micro_usd));
    object.insert("costs_unknown".into(), json!(spend.unknown));
}

/// The JSON object of `fields` with the spend fields of `spend` added.
pub(crate) fn with_spend(fields: Value, spend: Spend) -> Value {
    let mut fields = fields;
    if let Some(object) = fields.as_object_mut() {
        insert_spend(object, spend);
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_costs_are_never_shown_as_money() {
        let spend = |known_micro_usd, unknown| Spend {
            known_micro_usd,
            unknown,
        };
        assert_eq!(spend_text(spend(60_000, 0)), "$0.06");
        assert_eq!(spend_text(spend(0, 0)), "$0.00");
        assert_eq!(spend_text(spend(60_000, 2)), "$0.06 + 2 unknown");
        assert_eq!(spend_text(spend(0, 3)), "unknown");
        let fields = with_spend(json!({}), spend(60_000, 2));
        assert_eq!(
            fields,
            json!({"spent_micro_usd": null, "spent_known_micro_usd": 60_000, "costs_unknown": 2})
        );
    }
}
