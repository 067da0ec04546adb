//! Reading the database's refusals: the one way every area turns a violated constraint (or a
//! trigger's sentence) into the domain's error. Invariants live in the schema; this is where
//! their refusals become words.

use crate::error::{Error, Result};

/// The constraint a refusal names (unique, check, exclusion, foreign key; and triggers that
/// raise with one), if it is a refusal at all.
pub fn violated(e: &sqlx::Error) -> Option<&str> {
    e.as_database_error().and_then(|d| d.constraint())
}

/// Maps a refusal by one named constraint to the error a caller should read; every other error
/// passes on unchanged (a database error stays one, so placement still tries the next node).
pub trait OnConstraint<T> {
    fn on_constraint(self, constraint: &str, to: impl FnOnce() -> Error) -> Result<T>;
}

impl<T> OnConstraint<T> for std::result::Result<T, sqlx::Error> {
    fn on_constraint(self, constraint: &str, to: impl FnOnce() -> Error) -> Result<T> {
        self.map_err(|e| {
            if violated(&e) == Some(constraint) {
                to()
            } else {
                e.into()
            }
        })
    }
}

/// A trigger's refusal (raised as `check_violation` with a sentence for people) as a conflict
/// carrying that sentence; anything else passes on.
pub fn trigger_refusal(e: sqlx::Error) -> Error {
    match e {
        sqlx::Error::Database(d) if d.code().as_deref() == Some("23514") => {
            Error::Conflict(d.message().to_string())
        }
        other => other.into(),
    }
}
