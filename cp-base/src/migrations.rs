//! Landed migrations whose words (comments only) were corrected after databases applied them.
//!
//! sqlx records each applied migration's SHA-384 and refuses to run when a file no longer
//! matches, so a landed migration is never edited (docs/decisions/2026-12-06-landed-migrations-
//! keep-their-words.md). When only a comment must change, the database's record is moved to
//! the new text here, before sqlx checks, and only where it holds exactly the old text's
//! checksum: a database that applied anything else is still refused.

use sqlx::PgPool;

use crate::MIGRATOR;

/// (version, the SHA-384 of the text databases applied, in hex).
const REWORDED: &[(i64, &str)] = &[(
    // 0043: its header named a working session instead of the issue alone.
    20261204000043,
    "320fdfa8722c08df915dc62f1090c3d60119e5f6aaac37f76b9eec8cffdf6f7aeb9ec625cb000003e99760e55c516d0b",
)];

/// Moves each reworded migration's recorded checksum from its old text's to its current one's.
pub async fn accept_rewordings(pool: &PgPool) -> Result<(), sqlx::Error> {
    let table: Option<String> =
        sqlx::query_scalar("SELECT to_regclass('public._sqlx_migrations')::text")
            .fetch_one(pool)
            .await?;
    if table.is_none() {
        return Ok(());
    }
    for (version, old) in REWORDED {
        let Some(current) = MIGRATOR.iter().find(|m| m.version == *version) else {
            continue;
        };
        let old = hex(old);
        sqlx::query(
            "UPDATE _sqlx_migrations SET checksum = $3 WHERE version = $1 AND checksum = $2",
        )
        .bind(version)
        .bind(&old)
        .bind(current.checksum.as_ref())
        .execute(pool)
        .await?;
    }
    Ok(())
}

/// The checksum databases recorded for `version` before it was reworded, if it was.
pub fn old_checksum(version: i64) -> Option<Vec<u8>> {
    REWORDED
        .iter()
        .find(|(v, _)| *v == version)
        .map(|(_, old)| hex(old))
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .filter_map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The old checksum really is another text's: the current file's differs from it.
    #[test]
    fn each_rewording_names_a_migration_whose_text_changed() {
        for (version, old) in REWORDED {
            let m = MIGRATOR
                .iter()
                .find(|m| m.version == *version)
                .expect("a known migration");
            assert_eq!(hex(old).len(), 48, "a SHA-384");
            assert_ne!(m.checksum.as_ref(), hex(old).as_slice(), "{version}");
        }
    }
}
