//! The shared fixtures (`test_db::fixtures`) and databases, under the names these tests use.

pub use test_db::fixtures::*;
pub use test_db::{blank as blank_db, demo as demo_db, migrated as empty_db};
