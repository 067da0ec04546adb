//! `sqlx::migrate!` embeds `../migrations` when the crate compiles; without this, a new
//! migration file is not noticed until something else in the crate changes.
fn main() {
    println!("cargo:rerun-if-changed=../migrations");
}
